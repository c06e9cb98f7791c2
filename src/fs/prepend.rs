//! `prepend`: bytes written to it are staged in a spool file and committed on close as one
//! prepend along axis 0 — new chunks first, the metadata last — so that no existing chunk is
//! read, rewritten or moved (design.md §3).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::display_path;
use super::open::OpenArray;
use super::writeback;
use crate::cache::{ChunkCache, WorkerPool};
use crate::zarr::key::ChunkKeyEncoding;
use crate::zarr::metadata::ZarrFormat;
use crate::{Error, Result};

/// The staged bytes of one open `prepend`.
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

    /// The staged bytes from the start.
    pub fn reader(&self) -> SpoolReader<'_> {
        SpoolReader { spool: self, at: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start over (after a commit, or a failed one: what was staged is gone either way).
    fn clear(&mut self) -> Result<()> {
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

/// Whether `prepend` can be opened for writing on this array, switching a `default`-encoded
/// array to `offset` first when `adopt` says so (a metadata-only change).
pub fn check_or_adopt(open: &Arc<OpenArray>, adopt: bool) -> Result<()> {
    let array = open.array();
    match (&array.meta.key_encoding, array.meta.format) {
        (ChunkKeyEncoding::Offset { .. }, _) => Ok(()),
        (ChunkKeyEncoding::Default { .. }, ZarrFormat::V3) if adopt => {
            let _writer = open.writer();
            let _exclusive = open.exclusive();
            let adopted = open.array().adopted_offset()?;
            adopted.store_metadata()?;
            tracing::info!(array = %display_path(&adopted.path), "switched to the offset chunk key encoding");
            open.replace(Arc::new(adopted), open.cache_id());
            Ok(())
        }
        (ChunkKeyEncoding::Default { .. }, ZarrFormat::V3) => Err(Error::Unsupported(format!(
            "{} uses the default chunk key encoding: mount with --adopt-offset (or run `zarrfs adopt`) to prepend",
            display_path(&array.path)
        ))),
        _ => Err(Error::Unsupported(format!("{}: v2 chunk keys cannot be offset without renaming every chunk", display_path(&array.path)))),
    }
}

/// Commit the spool as one prepend along axis 0. The array's pending writes are stored first.
/// On any error the array is as it was; the spool is emptied either way.
pub fn commit(open: &Arc<OpenArray>, spool: &mut Spool, cache: &ChunkCache, pool: &WorkerPool, new_cache_id: u64) -> Result<isize> {
    if spool.is_empty() {
        return Ok(0);
    }
    let _writer = open.writer();
    let _exclusive = open.exclusive();
    let (added, flushed) = writeback::flush_locked(open, cache, pool);
    flushed?;
    let array = open.array();
    let len = spool.len();
    let file = &spool.file;
    let result = array.prepend(0, len, &mut |offset, buf| file.read_exact_at(buf, offset)).and_then(|next| match next {
        Some(next) => {
            next.store_metadata()?;
            tracing::info!(array = %display_path(&next.path), bytes = len, shape = ?next.meta.shape, "prepended");
            open.replace(Arc::new(next), new_cache_id);
            Ok(())
        }
        None => Ok(()),
    });
    spool.clear()?;
    result.map(|_| added)
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
