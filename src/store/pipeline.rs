//! URL pipelines as mount sources (the successor of ZEP 8): a store, then `|`-separated
//! adapters that each say how to read what the part before holds, such as
//! `https://host/plate.ozx|zip:` or `s3://bucket/a.zip|zip:images/0|zarr3:`.
//!
//! - `zip:[PATH]`: the part before is a zip archive; `PATH` is the directory inside it mounted.
//! - `zarr2:[PATH]`, `zarr3:[PATH]`: the part before is a Zarr store (of that format: the mount
//!   reads either, by the metadata it finds); `PATH` is the node inside it mounted. Last only.
//! - `icechunk:[@REF]`: the part before is an Icechunk repository (a local directory or S3);
//!   `@branch.NAME` (the default: `@branch.main`), `@tag.NAME` or `@SNAPSHOT_ID` says which
//!   version is mounted. A `zarr3:PATH` after it mounts a node inside.

use super::Location;

/// Which version of a repository is mounted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reference {
    /// The tip of a branch: read-write.
    Branch(String),
    /// A tag: read-only.
    Tag(String),
    /// A snapshot by its ID: read-only.
    Snapshot(String),
}

impl Reference {
    /// `branch.NAME`, `tag.NAME` or a snapshot ID (the pipeline's `@REF` without the `@`).
    pub fn parse(text: &str) -> std::result::Result<Reference, String> {
        if let Some(name) = text.strip_prefix("branch.").filter(|n| !n.is_empty()) {
            Ok(Reference::Branch(name.to_string()))
        } else if let Some(name) = text.strip_prefix("tag.").filter(|n| !n.is_empty()) {
            Ok(Reference::Tag(name.to_string()))
        } else if !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric()) {
            Ok(Reference::Snapshot(text.to_string()))
        } else {
            Err("a reference is @branch.NAME, @tag.NAME or @SNAPSHOT_ID".into())
        }
    }

    pub fn read_only(&self) -> bool {
        !matches!(self, Reference::Branch(_))
    }
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reference::Branch(b) => write!(f, "@branch.{b}"),
            Reference::Tag(t) => write!(f, "@tag.{t}"),
            Reference::Snapshot(s) => write!(f, "@{s}"),
        }
    }
}

/// Why `source` cannot be read as a pipeline, with a caret under where it broke.
fn broken(source: &str, at: usize, why: impl std::fmt::Display) -> String {
    let column = source[..at.min(source.len())].chars().count();
    format!("source {source}: {why}\n  {source}\n  {}^", " ".repeat(column))
}

/// The store a pipeline names.
pub fn parse(source: &str) -> Result<Location, String> {
    let mut parts = source.split('|');
    let first = parts.next().unwrap_or("");
    if first.is_empty() {
        return Err(broken(source, 0, "a pipeline starts with the store it reads (a path or a URL)"));
    }
    let mut location = Location::base(first.strip_prefix("file://").unwrap_or(first)).map_err(|e| broken(source, 0, e))?;
    // Where the part being read starts, for the caret.
    let mut at = first.len() + 1;
    let mut zarr_seen = false;
    for part in parts {
        let Some((adapter, path)) = part.split_once(':') else {
            return Err(broken(source, at, format!("`{part}` is no adapter: an adapter is NAME:[PATH] (zip:, zarr2:, zarr3:, icechunk:)")));
        };
        if zarr_seen {
            return Err(broken(source, at, format!("`{adapter}:` after zarr2:/zarr3:, which ends a pipeline")));
        }
        if path.split('/').any(|p| p == "..") {
            return Err(broken(source, at + adapter.len() + 1, "a path with `..` in it"));
        }
        location = match adapter {
            "zip" => match location {
                Location::Zip { .. } => return Err(broken(source, at, "an archive inside an archive is not read")),
                other => other.into_zip(path).map_err(|e| broken(source, at, e))?,
            },
            "zarr2" | "zarr3" => {
                zarr_seen = true;
                location.beneath(path)
            }
            "icechunk" => {
                let reference = match path.strip_prefix('@') {
                    Some(r) => Reference::parse(r).map_err(|e| broken(source, at + 9, e))?,
                    None if path.is_empty() => Reference::Branch("main".into()),
                    None => return Err(broken(source, at + 9, "a reference starts with @ (@branch.main)")),
                };
                location.into_icechunk(reference).map_err(|e| broken(source, at, e))?
            }
            other => {
                return Err(broken(source, at, format!("unknown adapter `{other}:` (known: zip:, zarr2:, zarr3:, icechunk:)")));
            }
        };
        at += part.len() + 1;
    }
    Ok(location)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse() {
        assert_eq!(Reference::parse("branch.main"), Ok(Reference::Branch("main".into())));
        assert_eq!(Reference::parse("tag.v1.0"), Ok(Reference::Tag("v1.0".into())));
        assert_eq!(Reference::parse("R67A35M91PE2DEW4QAF0"), Ok(Reference::Snapshot("R67A35M91PE2DEW4QAF0".into())));
        assert!(Reference::parse("main").is_ok(), "a bare name is a snapshot ID, checked when the repository is opened");
        assert!(Reference::parse("branch.").is_err());
        assert!(Reference::parse("").is_err());
    }

    use crate::store::RemoteLocation;

    fn remote(s: &str) -> Location {
        Location::Remote(RemoteLocation::parse(s).unwrap().unwrap())
    }

    #[test]
    fn pipelines_name_archives_and_paths_inside_them() {
        let zip = |container: &str, archive: &str, root: &str| Location::Zip {
            container: Box::new(remote(container)),
            archive: archive.into(),
            root: root.into(),
        };
        assert_eq!(parse("https://h/d/plate.ozx|zip:"), Ok(zip("https://h/d", "plate.ozx", "")));
        assert_eq!(parse("s3://bkt/a.zip|zip:images/0/|zarr3:"), Ok(zip("s3://bkt", "a.zip", "images/0")));
        assert_eq!(parse("s3://bkt/a.zip|zip:images|zarr2:0"), Ok(zip("s3://bkt", "a.zip", "images/0")));
        assert_eq!(parse("gs://bkt/store.zarr|zarr3:group/a"), Ok(remote("gs://bkt/store.zarr/group/a")));
        assert_eq!(parse("/data/s.zarr|zarr2:"), Ok(Location::Local("/data/s.zarr".into())));
        assert_eq!(zip("s3://bkt", "a.zip", "images/0").to_string(), "s3://bkt/a.zip|zip:images/0");
    }

    #[test]
    fn a_broken_pipeline_says_where_it_broke() {
        let err = parse("s3://bkt/a.zip|zap:").unwrap_err();
        assert_eq!(
            err,
            "source s3://bkt/a.zip|zap:: unknown adapter `zap:` (known: zip:, zarr2:, zarr3:, icechunk:)\n  s3://bkt/a.zip|zap:\n                 ^"
        );
        let err = parse("s3://bkt/a.zip|zip:|zarr3:|zip:").unwrap_err();
        assert!(err.starts_with("source s3://bkt/a.zip|zip:|zarr3:|zip:: `zip:` after zarr2:/zarr3:"), "{err}");
        assert!(err.ends_with(&format!("\n  {}^", " ".repeat(27))), "{err}");
        assert!(parse("s3://bkt/a.zip|zip:|zip:").unwrap_err().contains("an archive inside an archive"));
        assert!(parse("s3://bkt/a.zip|zip:../x").unwrap_err().contains("`..`"));
        assert!(parse("|zip:").unwrap_err().contains("starts with the store"));
        assert!(parse("s3://bkt/a|nothing").unwrap_err().contains("`nothing` is no adapter"));
        assert!(parse("s3://x/a|zip:").unwrap_err().contains("3 to 63 characters"));
        let repo =
            |reference: Reference, root: &str| Location::Icechunk { repo: Box::new(remote("s3://bkt/repo")), reference, root: root.into() };
        assert_eq!(parse("s3://bkt/repo|icechunk:"), Ok(repo(Reference::Branch("main".into()), "")));
        assert_eq!(parse("s3://bkt/repo|icechunk:@tag.v1|zarr3:g/a"), Ok(repo(Reference::Tag("v1".into()), "g/a")));
        assert_eq!(parse("s3://bkt/repo|icechunk:@tag.v1|zarr3:g/a").unwrap().to_string(), "s3://bkt/repo|icechunk:@tag.v1|zarr3:g/a");
        assert!(parse("https://h/repo|icechunk:").unwrap_err().contains("from a local directory or from S3"));
        assert!(parse("s3://bkt/repo|icechunk:@branch.").unwrap_err().contains("@branch.NAME"));
        assert!(parse("s3://bkt/repo|icechunk:|zip:").unwrap_err().contains("not read from an Icechunk repository"));
        assert!(parse("s3://bkt/repo|icechunk:main").unwrap_err().contains("starts with @"));
    }
}
