//! Spool files: bytes written through a handle (to `prepend`, or a text rewrite) staged in an
//! unnamed file until close, and the directory they live in.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::{Error, Result};

/// The staged bytes of one open file.
pub struct Spool {
    file: File,
    len: u64,
}

impl Spool {
    /// An unnamed file in `dir` (`prepare_spool_dir`), readable by no one else, that leaves
    /// nothing behind.
    pub fn create(dir: &Path) -> Result<Spool> {
        Ok(Spool { file: tempfile::tempfile_in(dir)?, len: 0 })
    }

    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.file.write_all_at(data, offset)?;
        self.len = self.len.max(offset + data.len() as u64);
        Ok(())
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// The staged bytes, for readers on other threads (the file's offset is never used).
    pub fn source(&self) -> Result<std::sync::Arc<std::fs::File>> {
        Ok(std::sync::Arc::new(self.file.try_clone()?))
    }

    /// The staged bytes from the start.
    pub fn reader(&self) -> SpoolReader<'_> {
        SpoolReader { spool: self, at: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start over (after a commit, or a failed one: what was staged is gone either way).
    pub fn clear(&mut self) -> Result<()> {
        self.file.set_len(0)?;
        self.len = 0;
        Ok(())
    }
}

/// Reads a spool from the start (positioned reads: the file's own offset is left alone).
pub struct SpoolReader<'a> {
    spool: &'a Spool,
    at: u64,
}

impl std::io::Read for SpoolReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.spool.len.saturating_sub(self.at);
        let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.spool.file.read_at(&mut buf[..n], self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// Where spool files are made: the directory given (`--spool-dir`, checked at mount), else a
/// private one made at the first need (a prepend, a text rewrite: a read-only mount never makes
/// one) and removed with the daemon — a fresh `mkdtemp` directory, which no one else can enter
/// or have made beforehand, in `$XDG_RUNTIME_DIR` (the user's own), else the system's temporary
/// directory.
pub struct SpoolDir {
    given: Option<std::path::PathBuf>,
    made: std::sync::Mutex<Option<tempfile::TempDir>>,
}

impl SpoolDir {
    pub fn new(given: Option<std::path::PathBuf>) -> SpoolDir {
        SpoolDir { given, made: std::sync::Mutex::new(None) }
    }

    /// A new spool file.
    pub fn create(&self) -> Result<Spool> {
        if let Some(dir) = &self.given {
            return Spool::create(dir);
        }
        let mut made = crate::error::lock(&self.made);
        if made.is_none() {
            *made = Some(make_private_dir()?);
        }
        Spool::create(made.as_ref().map_or(Path::new("."), |d| d.path()))
    }

    /// Remove the directory made, as the daemon stops (whoever still holds the file system):
    /// the spool files in it have no names, so it is empty.
    pub fn remove(&self) {
        if let Some(dir) = crate::error::lock(&self.made).take()
            && let Err(e) = dir.close()
        {
            tracing::warn!("the spool directory could not be removed: {e}");
        }
    }
}

fn make_private_dir() -> Result<tempfile::TempDir> {
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()).map(std::path::PathBuf::from);
    let mut tried = Vec::new();
    for base in runtime.into_iter().chain([std::env::temp_dir()]) {
        use std::os::unix::fs::PermissionsExt;
        let private = std::fs::Permissions::from_mode(0o700);
        match tempfile::Builder::new().prefix("zarrfs-spool-").permissions(private).tempdir_in(&base) {
            Ok(dir) => return Ok(dir),
            Err(e) => tried.push(format!("{}: {e}", base.display())),
        }
    }
    let why = format!("no directory to stage written bytes in ({}): give one with --spool-dir", tried.join("; "));
    tracing::error!("{why}");
    Err(Error::Io(std::io::Error::other(why)))
}

/// Make `dir` ready for spool files, at mount time: created (mode 0700) when absent — its
/// parent must exist, nothing else is created — and refused when another user could write into
/// it (a directory someone else owns, or writable by others and not sticky).
pub fn prepare_spool_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let bad = |why: String| Error::Invalid(format!("spool directory {}: {why}", dir.display()));
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(bad(e.to_string())),
        _ => {}
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| bad(e.to_string()))?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let others_write = meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0;
    if !meta.is_dir() || (meta.uid() != me && meta.uid() != 0) || others_write {
        return Err(bad(format!("must be a directory of user {me} (or root) that others cannot write into")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn spool_directories_others_can_write_into_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mine = dir.path().join("spool");
        prepare_spool_dir(&mine).unwrap();
        assert_eq!(std::fs::metadata(&mine).unwrap().permissions().mode() & 0o777, 0o700);
        Spool::create(&mine).unwrap().write(0, b"staged").unwrap();
        assert_eq!(std::fs::read_dir(&mine).unwrap().count(), 0, "spool files have no name");
        std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(prepare_spool_dir(&mine).unwrap_err().to_string().contains("others cannot write into"));
        // Sticky and world-writable, like /tmp, is fine.
        std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o1777)).unwrap();
        prepare_spool_dir(&mine).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&mine, &link).unwrap();
        assert!(prepare_spool_dir(&link).is_err(), "a link is not a spool directory");
        assert!(prepare_spool_dir(&dir.path().join("missing/spool")).is_err());
        assert!(!dir.path().join("missing").exists());
    }
}
