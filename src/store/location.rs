//! Where a store is, as the command line names it: a local directory, an object store URL, a
//! zip archive in either, an Icechunk repository at a branch, tag or snapshot, or a pipeline of
//! these (`SOURCE|zip:PATH|zarr3:NODE`); and the store each opens.

use std::path::{Path, PathBuf};
use std::sync::Arc;

#[cfg(feature = "icechunk")]
use super::IcechunkStore;
#[cfg(feature = "object-store")]
use super::ObjectStore;
use super::{LocalStore, Reference, RemoteLocation, RemoteOptions, Store, ZipStore, join, pipeline};

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
            return pipeline::parse(text);
        }
        if let Some(repo) = text.strip_prefix("icechunk:").filter(|_| !Path::new(s).exists()) {
            return pipeline::parse(&format!("{repo}|icechunk:"));
        }
        let base = Location::base(text)?;
        if base.is_icechunk_repo() {
            return base.into_icechunk(Reference::Branch("main".into()));
        }
        Ok(if base.names_archive() { base.into_zip("")? } else { base })
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
            Location::Zip { .. } | Location::Icechunk { .. } => false,
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
        }
    }

    /// Open the store. Nothing is asked of an object store yet: its first request (the root's
    /// metadata, or `Store::reach`) tells whether it can be used.
    pub fn open(&self, options: &RemoteOptions) -> std::result::Result<Arc<dyn Store>, String> {
        match self {
            Location::Local(path) => {
                check_dir("store", path)?;
                Ok(Arc::new(LocalStore::open(path).map_err(|e| format!("store {}: {e}", path.display()))?))
            }
            Location::Zip { container, archive, root } => {
                let container = container.open(options)?;
                let zip = ZipStore::open(container, archive, root).map_err(|e| format!("{self}: {e}"))?;
                Ok(Arc::new(zip))
            }
            #[cfg(feature = "icechunk")]
            Location::Icechunk { repo, reference, root } => {
                Ok(Arc::new(IcechunkStore::open(repo, reference, root, options).map_err(|e| format!("{self}: {e}"))?))
            }
            #[cfg(not(feature = "icechunk"))]
            Location::Icechunk { .. } => Err(format!("{self}: this build has no Icechunk support (cargo feature icechunk)")),
            #[cfg(feature = "object-store")]
            // What `open` refuses says so itself, naming the store.
            Location::Remote(remote) => Ok(Arc::new(ObjectStore::open(remote, options).map_err(|e| match e {
                crate::Error::Invalid(why) => why,
                e => e.to_string(),
            })?)),
            #[cfg(not(feature = "object-store"))]
            Location::Remote(remote) => {
                let _ = options;
                Err(format!("{remote}: this build has no object-store support (cargo feature object-store)"))
            }
        }
    }

    pub fn is_remote(&self) -> bool {
        match self {
            Location::Local(_) => false,
            Location::Remote(_) => true,
            Location::Zip { container, .. } => container.is_remote(),
            Location::Icechunk { repo, .. } => repo.is_remote(),
        }
    }

    /// The local directory or archive file the store lives in, if it is on this machine.
    pub fn local_path(&self) -> Option<PathBuf> {
        match self {
            Location::Local(path) => Some(path.clone()),
            Location::Remote(_) => None,
            Location::Zip { container, archive, .. } => Some(container.local_path()?.join(archive)),
            Location::Icechunk { repo, .. } => repo.local_path(),
        }
    }

    /// Object stores over plain HTTP, archives, and Icechunk tags and snapshots cannot be
    /// written.
    pub fn read_only(&self) -> bool {
        match self {
            Location::Local(_) => false,
            Location::Remote(r) => r.read_only(),
            Location::Zip { .. } => true,
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
        }
    }
}
