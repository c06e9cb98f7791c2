//! Where a store is, as the command line names it: a local directory, an object store URL, a
//! zip archive in either, an Icechunk repository at a branch, tag or snapshot, or a pipeline of
//! these (`SOURCE|zip:PATH|zarr3:NODE`); and the store each opens.
//!
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

use std::path::{Path, PathBuf};

use super::{RemoteLocation, join};

/// The document a parquet reference set's directory is read by.
pub const PARQUET_SET: &str = ".zmetadata";

/// Where a store is: a local directory, an object store, a zip archive in either, or an
/// Icechunk repository in either.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    Local(PathBuf),
    Remote(RemoteLocation),
    /// The archive `archive` (a key of the store at `container`), read-only; `root` is the
    /// path inside it that is mounted (`""`: all of it).
    Zip {
        container: Box<Location>,
        archive: String,
        root: String,
    },
    /// The Icechunk repository at `repo` (a local directory or an S3 prefix), at `reference`;
    /// `root` is the node inside it that is mounted (`""`: all of it).
    Icechunk {
        repo: Box<Location>,
        reference: Reference,
        root: String,
    },
    /// A kerchunk reference set (the JSON value `file` of the store at `container`, a local
    /// directory or an object store), read-only, mounted whole.
    References {
        container: Box<Location>,
        file: String,
    },
}

/// The scheme of `text` when it reads as a URL (`scheme:/...`, the scheme a letter then
/// letters, digits, `+`, `-` or `.`), lower-cased, and what follows the colon.
fn url_scheme(text: &str) -> Option<(String, &str)> {
    let (scheme, rest) = text.split_once(':')?;
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        && rest.starts_with('/');
    valid.then(|| (scheme.to_ascii_lowercase(), rest))
}

/// `path` is a directory, or the message says what it is instead.
pub fn check_dir(what: &str, path: &Path) -> std::result::Result<(), String> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!("{what} {} is not a directory", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!("{what} {} does not exist", path.display())),
        Err(e) => Err(format!("{what} {}: {e}", path.display())),
    }
}

impl Location {
    /// `s3://`, `s3a://`, `gs://`, `az://`, `http://` and `https://` name object stores; a name
    /// ending in `.zip` or `.ozx` (a local file, or an object) is a zip archive; anything else is
    /// a path. A URL pipeline (`SOURCE|zip:PATH`, `SOURCE|zarr3:PATH`) says the same explicitly;
    /// an existing local path is never read as one.
    pub fn parse(s: &std::ffi::OsStr) -> std::result::Result<Location, String> {
        let Some(text) = s.to_str() else { return Ok(Location::Local(PathBuf::from(s))) };
        if text.contains('|') && !Path::new(s).exists() {
            return parse_pipeline(text);
        }
        if let Some(repo) = text.strip_prefix("icechunk:").filter(|_| !Path::new(s).exists()) {
            return parse_pipeline(&format!("{repo}|icechunk:"));
        }
        if let Some(set) = text.strip_prefix("reference:").filter(|_| !Path::new(s).exists()) {
            return Location::references(set.strip_prefix("file://").unwrap_or(set));
        }
        let base = Location::base(text)?;
        if (names_json_set(text) && Path::new(text).is_file()) || base.is_parquet_set() {
            return Location::references(text);
        }
        if base.is_icechunk_repo() {
            return base.into_icechunk(Reference::Branch("main".into()));
        }
        Ok(if base.names_archive() { base.into_zip("")? } else { base })
    }

    /// The reference set in the file or object `path`: a JSON file, or a parquet set's directory
    /// (whose `.zmetadata` is read).
    fn references(path: &str) -> std::result::Result<Location, String> {
        if let Some(remote) = RemoteLocation::parse(path) {
            let remote = remote?;
            if !names_json_set(path) {
                return Ok(Location::References { container: Box::new(Location::Remote(remote)), file: PARQUET_SET.into() });
            }
            let (container, file) = remote.split_last().ok_or_else(|| format!("reference:{path}: names no file"))?;
            return Ok(Location::References { container: Box::new(Location::Remote(container)), file });
        }
        // The real file: its directory is where relative targets are.
        let set = Path::new(path).canonicalize().map_err(|e| format!("reference set {path}: {e}"))?;
        if set.is_dir() {
            return Ok(Location::References { container: Box::new(Location::Local(set)), file: PARQUET_SET.into() });
        }
        match (set.parent(), set.file_name().and_then(|n| n.to_str())) {
            (Some(dir), Some(name)) => {
                Ok(Location::References { container: Box::new(Location::Local(dir.to_path_buf())), file: name.to_string() })
            }
            _ => Err(format!("reference set {path}: not a file")),
        }
    }

    /// Whether this is a local directory that holds a kerchunk parquet reference set: its
    /// `.zmetadata` says `record_size`, and no Zarr document stands beside it.
    fn is_parquet_set(&self) -> bool {
        let Location::Local(dir) = self else { return false };
        if !dir.join(PARQUET_SET).is_file() || [".zgroup", ".zarray", "zarr.json"].iter().any(|d| dir.join(d).exists()) {
            return false;
        }
        let Ok(file) = std::fs::File::open(dir.join(PARQUET_SET)) else { return false };
        let doc: Option<serde_json::Value> = serde_json::from_reader(std::io::Read::take(std::io::BufReader::new(file), 64 << 20)).ok();
        doc.is_some_and(|d| d.get("record_size").is_some())
    }

    /// Whether this is a local directory that holds an Icechunk repository (its `repo` file
    /// and `snapshots` directory) rather than a Zarr store.
    fn is_icechunk_repo(&self) -> bool {
        matches!(self, Location::Local(dir) if dir.join("repo").is_file() && dir.join("snapshots").is_dir() && !dir.join("zarr.json").exists())
    }

    /// The Icechunk repository this location holds, at `reference`.
    pub(super) fn into_icechunk(self, reference: Reference) -> std::result::Result<Location, String> {
        match self {
            Location::Local(_) | Location::Remote(RemoteLocation::S3 { .. }) => {
                Ok(Location::Icechunk { repo: Box::new(self), reference, root: String::new() })
            }
            other => Err(format!("{other}: an Icechunk repository is read from a local directory or from S3")),
        }
    }

    /// The same Icechunk repository (and node in it) at the snapshot `id`; `None` for a store
    /// with no history.
    pub fn at_snapshot(&self, id: &str) -> Option<Location> {
        match self {
            Location::Icechunk { repo, root, .. } => {
                Some(Location::Icechunk { repo: repo.clone(), reference: Reference::Snapshot(id.to_string()), root: root.clone() })
            }
            _ => None,
        }
    }

    /// The store a pipeline's first part (or a whole source) names.
    pub(super) fn base(text: &str) -> std::result::Result<Location, String> {
        match RemoteLocation::parse(text) {
            Some(remote) => remote.map(Location::Remote),
            None if !Path::new(text).exists()
                && let Some((scheme, rest)) = url_scheme(text) =>
            {
                let known = ["s3", "s3a", "gs", "az", "http", "https"];
                Err(match rest.strip_prefix('/').filter(|r| !r.starts_with('/')) {
                    Some(path) if known.contains(&scheme.as_str()) => {
                        format!("{text}: a URL needs two slashes after its scheme: {scheme}://{path}")
                    }
                    _ => format!(
                        "{text}: unknown URL scheme {scheme}: (zarrfs reads s3://, s3a://, gs://, az://, http:// and https://, zip and icechunk pipelines, and local paths)"
                    ),
                })
            }
            None => Ok(Location::Local(PathBuf::from(text))),
        }
    }

    /// Whether this is a file or an object whose name says it is a zip archive.
    fn names_archive(&self) -> bool {
        let name = self.to_string().to_ascii_lowercase();
        let suffix = name.ends_with(".zip") || name.ends_with(".ozx");
        match self {
            Location::Local(path) => suffix && path.is_file(),
            Location::Remote(_) => suffix,
            Location::Zip { .. } | Location::Icechunk { .. } | Location::References { .. } => false,
        }
    }

    /// The archive this location names, as a store rooted at `root` inside it.
    pub(super) fn into_zip(self, root: &str) -> std::result::Result<Location, String> {
        let root = root.trim_matches('/').to_string();
        let (container, archive) = match self {
            Location::Local(path) => {
                // The real file (a link to an archive is the archive): its directory holds it.
                let path = path.canonicalize().map_err(|e| format!("archive {}: {e}", path.display()))?;
                let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
                    return Err(format!("archive {}: not a file", path.display()));
                };
                (Location::Local(dir.to_path_buf()), name.to_string())
            }
            Location::Remote(remote) => {
                let (container, archive) = remote.split_last().ok_or_else(|| format!("{remote}: names no archive"))?;
                (Location::Remote(container), archive)
            }
            Location::Zip { .. } => return Err(format!("{self}: an archive inside an archive is not read")),
            Location::Icechunk { .. } => return Err(format!("{self}: an archive is not read from an Icechunk repository")),
            Location::References { .. } => return Err(format!("{self}: a reference set is not an archive")),
        };
        Ok(Location::Zip { container: Box::new(container), archive, root })
    }

    /// The store at `path` inside this one.
    pub(super) fn beneath(self, path: &str) -> Location {
        let path = path.trim_matches('/');
        if path.is_empty() {
            return self;
        }
        match self {
            Location::Local(dir) => Location::Local(dir.join(path)),
            Location::Remote(remote) => Location::Remote(remote.beneath(path)),
            Location::Zip { container, archive, root } => Location::Zip { container, archive, root: join(&root, path) },
            Location::Icechunk { repo, reference, root } => Location::Icechunk { repo, reference, root: join(&root, path) },
            // Pipelines do not make reference sets: one is mounted whole.
            whole @ Location::References { .. } => whole,
        }
    }

    pub fn is_remote(&self) -> bool {
        match self {
            Location::Local(_) => false,
            Location::Remote(_) => true,
            Location::Zip { container, .. } => container.is_remote(),
            Location::Icechunk { repo, .. } => repo.is_remote(),
            Location::References { container, .. } => container.is_remote(),
        }
    }

    /// The local directory or archive file the store lives in, if it is on this machine.
    pub fn local_path(&self) -> Option<PathBuf> {
        match self {
            Location::Local(path) => Some(path.clone()),
            Location::Remote(_) => None,
            Location::Zip { container, archive, .. } => Some(container.local_path()?.join(archive)),
            Location::Icechunk { repo, .. } => repo.local_path(),
            Location::References { container, file } if file == PARQUET_SET => container.local_path(),
            Location::References { container, file } => Some(container.local_path()?.join(file)),
        }
    }

    /// Object stores over plain HTTP, archives, and Icechunk tags and snapshots cannot be
    /// written.
    pub fn read_only(&self) -> bool {
        match self {
            Location::Local(_) => false,
            Location::Remote(r) => r.read_only(),
            Location::Zip { .. } | Location::References { .. } => true,
            Location::Icechunk { reference, .. } => reference.read_only(),
        }
    }
}

impl Default for Location {
    fn default() -> Self {
        Location::Local(PathBuf::new())
    }
}

impl Location {
    /// The same location with its local paths absolute (what `findmnt` shows as the source).
    pub fn absolute(&self) -> Location {
        match self {
            Location::Local(p) => Location::Local(std::path::absolute(p).unwrap_or_else(|_| p.clone())),
            Location::Remote(r) => Location::Remote(r.clone()),
            Location::Zip { container, archive, root } => {
                Location::Zip { container: Box::new(container.absolute()), archive: archive.clone(), root: root.clone() }
            }
            Location::Icechunk { repo, reference, root } => {
                Location::Icechunk { repo: Box::new(repo.absolute()), reference: reference.clone(), root: root.clone() }
            }
            Location::References { container, file } => {
                Location::References { container: Box::new(container.absolute()), file: file.clone() }
            }
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Local(p) => write!(f, "{}", p.display()),
            Location::Remote(r) => write!(f, "{r}"),
            Location::Zip { container, archive, root } => {
                match container.as_ref() {
                    Location::Local(dir) => write!(f, "{}", dir.join(archive).display())?,
                    other => write!(f, "{other}/{archive}")?,
                }
                if root.is_empty() { Ok(()) } else { write!(f, "|zip:{root}") }
            }
            Location::Icechunk { repo, reference, root } => {
                write!(f, "{repo}|icechunk:{reference}")?;
                if root.is_empty() { Ok(()) } else { write!(f, "|zarr3:{root}") }
            }
            Location::References { container, file } if file == PARQUET_SET => write!(f, "reference:{container}"),
            Location::References { container, file } => match container.as_ref() {
                Location::Local(dir) => write!(f, "reference:{}", dir.join(file).display()),
                other => write!(f, "reference:{other}/{file}"),
            },
        }
    }
}

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
pub fn parse_pipeline(source: &str) -> Result<Location, String> {
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

/// Whether a file's name says it holds a JSON reference set, compressed or not (fsspec names
/// a compressed set by its compressor's suffix).
fn names_json_set(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [".json", ".json.gz", ".json.zst", ".json.bz2", ".json.xz"].iter().any(|suffix| name.ends_with(suffix))
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
        assert_eq!(parse_pipeline("https://h/d/plate.ozx|zip:"), Ok(zip("https://h/d", "plate.ozx", "")));
        assert_eq!(parse_pipeline("s3://bkt/a.zip|zip:images/0/|zarr3:"), Ok(zip("s3://bkt", "a.zip", "images/0")));
        assert_eq!(parse_pipeline("s3://bkt/a.zip|zip:images|zarr2:0"), Ok(zip("s3://bkt", "a.zip", "images/0")));
        assert_eq!(parse_pipeline("gs://bkt/store.zarr|zarr3:group/a"), Ok(remote("gs://bkt/store.zarr/group/a")));
        assert_eq!(parse_pipeline("/data/s.zarr|zarr2:"), Ok(Location::Local("/data/s.zarr".into())));
        assert_eq!(zip("s3://bkt", "a.zip", "images/0").to_string(), "s3://bkt/a.zip|zip:images/0");
    }

    #[test]
    fn a_broken_pipeline_says_where_it_broke() {
        let err = parse_pipeline("s3://bkt/a.zip|zap:").unwrap_err();
        assert_eq!(
            err,
            "source s3://bkt/a.zip|zap:: unknown adapter `zap:` (known: zip:, zarr2:, zarr3:, icechunk:)\n  s3://bkt/a.zip|zap:\n                 ^"
        );
        let err = parse_pipeline("s3://bkt/a.zip|zip:|zarr3:|zip:").unwrap_err();
        assert!(err.starts_with("source s3://bkt/a.zip|zip:|zarr3:|zip:: `zip:` after zarr2:/zarr3:"), "{err}");
        assert!(err.ends_with(&format!("\n  {}^", " ".repeat(27))), "{err}");
        assert!(parse_pipeline("s3://bkt/a.zip|zip:|zip:").unwrap_err().contains("an archive inside an archive"));
        assert!(parse_pipeline("s3://bkt/a.zip|zip:../x").unwrap_err().contains("`..`"));
        assert!(parse_pipeline("|zip:").unwrap_err().contains("starts with the store"));
        assert!(parse_pipeline("s3://bkt/a|nothing").unwrap_err().contains("`nothing` is no adapter"));
        assert!(parse_pipeline("s3://x/a|zip:").unwrap_err().contains("3 to 63 characters"));
        let repo =
            |reference: Reference, root: &str| Location::Icechunk { repo: Box::new(remote("s3://bkt/repo")), reference, root: root.into() };
        assert_eq!(parse_pipeline("s3://bkt/repo|icechunk:"), Ok(repo(Reference::Branch("main".into()), "")));
        assert_eq!(parse_pipeline("s3://bkt/repo|icechunk:@tag.v1|zarr3:g/a"), Ok(repo(Reference::Tag("v1".into()), "g/a")));
        assert_eq!(
            parse_pipeline("s3://bkt/repo|icechunk:@tag.v1|zarr3:g/a").unwrap().to_string(),
            "s3://bkt/repo|icechunk:@tag.v1|zarr3:g/a"
        );
        assert!(parse_pipeline("https://h/repo|icechunk:").unwrap_err().contains("from a local directory or from S3"));
        assert!(parse_pipeline("s3://bkt/repo|icechunk:@branch.").unwrap_err().contains("@branch.NAME"));
        assert!(parse_pipeline("s3://bkt/repo|icechunk:|zip:").unwrap_err().contains("not read from an Icechunk repository"));
        assert!(parse_pipeline("s3://bkt/repo|icechunk:main").unwrap_err().contains("starts with @"));
    }
}
