//! Scratch files: what programs create beside a node's documents — an editor's temporary file
//! (`sed -i`'s `sedXXXXXX`, vim's `4913` and swap files), a backup (`zarr.json~`). They live in
//! memory only and are never stored as keys: a store holds nodes, and a temporary name in an
//! array's directory would read as a chunk key. Renaming one over a metadata document stores it
//! as that document.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::lock;
use crate::limits::MAX_DOCUMENT_BYTES;
use crate::{Error, Result};

/// All files held in memory together hold at most this many bytes.
const MAX_TOTAL_BYTES: u64 = 4 * MAX_DOCUMENT_BYTES;

/// The bytes held in memory by the mount's in-memory files — scratch files and documents being
/// rewritten — whatever name they have or had (unlinked but still open, renamed away): each
/// counts while it lives.
#[derive(Default)]
pub struct Held(AtomicU64);

impl Held {
    /// Let a file of `now` bytes grow to `new`: EFBIG past a document's bound, ENOSPC past all
    /// files' together.
    fn reserve(&self, now: usize, new: u64) -> Result<()> {
        if new > MAX_DOCUMENT_BYTES {
            return Err(too_large());
        }
        let grows = new.saturating_sub(now as u64);
        let taken = self.0.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
            let after = held.checked_add(grows)?;
            (after <= MAX_TOTAL_BYTES).then_some(after)
        });
        taken.map(drop).map_err(|_| Error::Io(std::io::Error::from_raw_os_error(libc::ENOSPC)))
    }

    fn release(&self, n: usize) {
        let _ = self.0.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| Some(held.saturating_sub(n as u64)));
    }

    /// Write `data` at `offset` of an in-memory file's `bytes`, within the bounds.
    pub fn write_at(&self, bytes: &mut Vec<u8>, offset: u64, data: &[u8]) -> Result<()> {
        let end = offset.checked_add(data.len() as u64).ok_or_else(too_large)?;
        self.reserve(bytes.len(), end)?;
        let before = bytes.len();
        if end > before as u64 {
            bytes.resize(end as usize, 0);
        }
        bytes[offset as usize..end as usize].copy_from_slice(data);
        Ok(())
    }

    /// Set the length of an in-memory file's `bytes` (zeros past the old end), within the bounds.
    pub fn resize(&self, bytes: &mut Vec<u8>, size: u64) -> Result<()> {
        self.reserve(bytes.len(), size)?;
        self.release(bytes.len().saturating_sub(size as usize));
        bytes.resize(size as usize, 0);
        Ok(())
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The bytes of a file held in memory, counted in the mount's `Held` while they live.
pub struct HeldBytes {
    bytes: Vec<u8>,
    held: Arc<Held>,
}

impl HeldBytes {
    /// `bytes`, counted in `held` (ENOSPC or EFBIG when they do not fit).
    pub fn new(bytes: Vec<u8>, held: &Arc<Held>) -> Result<HeldBytes> {
        held.reserve(0, bytes.len() as u64)?;
        Ok(HeldBytes { bytes, held: held.clone() })
    }

    pub fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.held.write_at(&mut self.bytes, offset, data)
    }

    pub fn resize(&mut self, size: u64) -> Result<()> {
        self.held.resize(&mut self.bytes, size)
    }
}

impl std::ops::Deref for HeldBytes {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.bytes
    }
}

impl Drop for HeldBytes {
    fn drop(&mut self) {
        self.held.release(self.bytes.len());
    }
}

pub struct ScratchFile {
    pub bytes: Mutex<HeldBytes>,
    /// The permission bits asked for (chmod is kept: `sed -i` and editors set them).
    pub mode: AtomicU32,
}

impl ScratchFile {
    pub fn len(&self) -> u64 {
        lock(&self.bytes).len() as u64
    }

    pub fn perm(&self) -> u16 {
        (self.mode.load(Ordering::Relaxed) & 0o7777) as u16
    }
}

/// The scratch files, by store key (`dir/name`), and what all in-memory files hold.
#[derive(Default)]
pub struct ScratchFiles {
    files: Mutex<HashMap<String, Arc<ScratchFile>>>,
    pub held: Arc<Held>,
}

fn too_large() -> Error {
    Error::Io(std::io::Error::from_raw_os_error(libc::EFBIG))
}

impl ScratchFiles {
    pub fn get(&self, key: &str) -> Option<Arc<ScratchFile>> {
        lock(&self.files).get(key).cloned()
    }

    /// A new scratch file at `key` holding `bytes` (replacing one there).
    pub fn insert(&self, key: &str, bytes: Vec<u8>, mode: u32) -> Result<Arc<ScratchFile>> {
        let file = Arc::new(ScratchFile { bytes: Mutex::new(HeldBytes::new(bytes, &self.held)?), mode: AtomicU32::new(mode & 0o7777) });
        lock(&self.files).insert(key.to_string(), file.clone());
        Ok(file)
    }

    pub fn remove(&self, key: &str) -> Option<Arc<ScratchFile>> {
        lock(&self.files).remove(key)
    }

    /// Move the scratch file at `from` to `to` (replacing one there).
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        let mut files = lock(&self.files);
        let file = files.remove(from).ok_or(Error::NotFound)?;
        files.insert(to.to_string(), file);
        Ok(())
    }

    /// The names of the scratch files in the directory `dir`.
    pub fn names_in(&self, dir: &str) -> Vec<String> {
        let files = lock(&self.files);
        let mut names: Vec<String> = files.keys().filter_map(|k| name_in(k, dir)).map(str::to_string).collect();
        names.sort();
        names
    }

    /// Forget every scratch file at or beneath `dir` (its node was removed).
    pub fn remove_beneath(&self, dir: &str) {
        let lead = format!("{dir}/");
        lock(&self.files).retain(|k, _| !k.starts_with(&lead));
    }

    /// Write `data` at `offset` of `file`, within the bounds of one file and of all together.
    pub fn write(&self, file: &ScratchFile, offset: u64, data: &[u8]) -> Result<()> {
        lock(&file.bytes).write_at(offset, data)
    }

    pub fn truncate(&self, file: &ScratchFile, size: u64) -> Result<()> {
        lock(&file.bytes).resize(size)
    }
}

/// The name of `key` when it is directly in `dir`.
fn name_in<'a>(key: &'a str, dir: &str) -> Option<&'a str> {
    let (d, name) = key.rsplit_once('/').unwrap_or(("", key));
    (d == dir).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_files_stay_within_their_bounds() {
        let files = ScratchFiles::default();
        let a = files.insert("g/a.tmp", Vec::new(), 0o600).unwrap();
        files.write(&a, 3, b"xy").unwrap();
        assert_eq!(**lock(&a.bytes), b"\0\0\0xy");
        let efbig = |e: Error| e.errno() == libc::EFBIG;
        assert!(files.write(&a, MAX_DOCUMENT_BYTES, b"z").is_err_and(efbig));
        assert!(files.truncate(&a, MAX_DOCUMENT_BYTES + 1).is_err_and(efbig));
        assert!(files.write(&a, u64::MAX, b"z").is_err_and(efbig));
        // All together: at most MAX_TOTAL_BYTES.
        let big: Vec<Arc<ScratchFile>> = (0..4).map(|i| files.insert(&format!("g/{i}"), Vec::new(), 0o600).unwrap()).collect();
        for f in &big {
            files.truncate(f, MAX_DOCUMENT_BYTES - 8).unwrap();
        }
        assert!(files.truncate(&a, 64).is_err_and(|e| e.errno() == libc::ENOSPC));
        assert_eq!(files.names_in("g"), ["0", "1", "2", "3", "a.tmp"]);
        // A file removed but still held (open) still counts; dropped, it counts no more.
        let held = files.remove("g/0").unwrap();
        drop(big);
        assert!(files.truncate(&a, 64).is_err_and(|e| e.errno() == libc::ENOSPC));
        drop(held);
        files.truncate(&a, 64).unwrap();
        files.remove_beneath("g");
        assert!(files.names_in("g").is_empty());
    }
}
