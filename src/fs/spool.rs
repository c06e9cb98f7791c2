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
