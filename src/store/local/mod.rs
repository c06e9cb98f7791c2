//! A store in a local directory: keys are relative paths.
//!
//! The store root is opened once and held for the store's lifetime; every path is resolved
//! beneath that descriptor (`openat2` with `RESOLVE_BENEATH`), so a link that leads out of the
//! store is refused rather than followed (and so is a mount point inside it), and a store that is moved keeps being served where it
//! now is while one that is deleted fails its writes instead of being created again at the old
//! path. Objects are opened without blocking (a FIFO cannot hang a request) and must be regular
//! files no larger than the caller's bound.

mod claim;
mod key_lock;
mod tree;

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::{ByteRange, Claim, Entry, Expect, Head, Permissions, Space, Store, Usage, Value, Version, resolve_range};
use crate::{Error, Result};
use key_lock::{HeldKey, KEY_LOCK_WAIT, KeyLock};
use tree::{count_within, remove_empty_within, remove_tree};

pub struct LocalStore {
    root: PathBuf,
    dir: OwnedFd,
    temp_counter: AtomicU64,
}

/// Why a path that crosses out of the store's file system is refused. Links and mount points
/// are not crossed: a mount inside the store may be this mount itself (or one reaching it),
/// and serving it would recurse through the daemon until every request thread waits on itself.
const LEADS_OUT: &str = "a link or a mount point that leads out of the store (not followed)";

/// `key` as a path beneath the root (`.` for the root itself). A key no file can be named (one
/// with a NUL byte, as a hostile document may name) is refused as such, not failed as a
/// system error that would fail whatever walked past it.
fn beneath(key: &str) -> Result<&str> {
    if key.contains('\0') {
        return Err(Error::refused(key, "a name with a NUL byte, which no file can have"));
    }
    Ok(if key.is_empty() { "." } else { key })
}

fn io(e: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.raw_os_error())
}

fn is_absent(e: Errno) -> bool {
    e == Errno::NOENT || e == Errno::NOTDIR
}

impl LocalStore {
    /// Open the store at `root` (a directory); it is served from this descriptor from now on.
    pub fn open(root: impl Into<PathBuf>) -> Result<LocalStore> {
        let root = root.into();
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dir = rustix::fs::open(&root, flags, Mode::empty()).map_err(|e| Error::Io(io(e)))?;
        Ok(LocalStore { root, dir, temp_counter: AtomicU64::new(0) })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The group and other bits of the root that the directories above it let through: a
    /// class that cannot search one of them cannot reach the store at all (a store in a 0700
    /// home). A directory's group bits count for the root's group only (`gid`), as the mount
    /// shows that group; one that cannot be read lets no one through.
    fn reach_above(&self, gid: u32) -> u32 {
        use std::os::unix::fs::MetadataExt;
        let Ok(root) = self.root.canonicalize() else { return 0o7700 };
        let (mut group, mut other) = (true, true);
        for dir in root.ancestors().skip(1) {
            let Ok(meta) = std::fs::metadata(dir) else { return 0o7700 };
            let mode = meta.mode();
            other &= mode & 0o001 != 0;
            group &= if meta.gid() == gid { mode & 0o010 != 0 } else { mode & 0o001 != 0 };
        }
        0o7700 | if group { 0o070 } else { 0 } | if other { 0o007 } else { 0 }
    }

    /// Open `path` (relative to the root, `""` for the root) beneath the root. A path that
    /// leaves the store, through `..` or a link, is refused with a reason.
    fn resolve(&self, key: &str, flags: OFlags) -> Result<std::result::Result<OwnedFd, Errno>> {
        let path = beneath(key)?;
        let how = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_XDEV;
        // openat2 refuses O_PATH with any flag but O_DIRECTORY and O_CLOEXEC.
        let flags = if flags.contains(OFlags::PATH) { flags } else { flags | OFlags::NOCTTY };
        // EAGAIN: a rename raced with the resolution of `..`; the kernel asks for a retry.
        let mut tries = 0;
        loop {
            match rustix::fs::openat2(&self.dir, path, flags | OFlags::CLOEXEC, Mode::empty(), how) {
                Err(Errno::AGAIN) if tries < 8 => tries += 1,
                Err(Errno::XDEV) => return Err(Error::refused(key, LEADS_OUT)),
                Err(Errno::LOOP) => return Err(Error::refused(key, "too many levels of links")),
                other => return Ok(other),
            }
        }
    }

    /// A regular file to read, or `None` when absent (a directory is no value either).
    fn open_object(&self, key: &str) -> Result<Option<(std::fs::File, Head)>> {
        // Non-blocking, so that opening a FIFO returns at once (it is refused below).
        let fd = match self.resolve(key, OFlags::RDONLY | OFlags::NONBLOCK)? {
            Ok(fd) => fd,
            Err(e) if is_absent(e) || e == Errno::ISDIR => return Ok(None),
            Err(Errno::NXIO) => return Err(Error::refused(key, "not a regular file (a socket or device)")),
            Err(e) => return Err(Error::Io(io(e))),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| Error::Io(io(e)))?;
        Ok(is_value(key, &stat)?.then(|| (std::fs::File::from(fd), head_of(&stat))))
    }

    /// The directory at `dir` (relative), created with its parents beneath the root when absent.
    fn make_dir(&self, dir: &str) -> Result<OwnedFd> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY;
        if let Ok(fd) = self.resolve(dir, flags)? {
            return Ok(fd);
        }
        let mut fd = self.resolve("", flags)?.map_err(|e| Error::Io(io(e)))?;
        for part in dir.split('/').filter(|p| !p.is_empty()) {
            match rustix::fs::mkdirat(&fd, part, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(Error::Io(io(e))),
            }
            let how = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_XDEV;
            fd = rustix::fs::openat2(&fd, part, flags | OFlags::CLOEXEC, Mode::empty(), how).map_err(|e| match e {
                Errno::XDEV => Error::refused(dir, LEADS_OUT),
                Errno::LOOP => Error::refused(dir, "a link where a directory of the store was expected"),
                Errno::NOTDIR => Error::refused(dir, "a file stands where a directory of the store was expected"),
                e => Error::Io(io(e)),
            })?;
        }
        Ok(fd)
    }

    /// Write `value` into a fresh temporary file beside `name` in `dir`, then rename it over
    /// `name`: readers never see a torn value. `O_EXCL` never opens a file planted under the
    /// temporary name, nor follows a link there.
    fn replace_value(&self, dir: &OwnedFd, name: &str, key: &str, value: &[u8]) -> Result<Version> {
        let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        let tmp = format!(".{name}.zarrfs-{}-{n}.tmp", std::process::id());
        debug_assert!(super::is_temporary(&tmp));
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(dir, tmp.as_str(), flags, Mode::from_raw_mode(0o666)).map_err(|e| Error::Io(io(e)))?;
        let mut file = std::fs::File::from(fd);
        // The version is taken before the rename, which keeps the inode, size and mtime.
        let written = file
            .write_all(value)
            .map_err(Error::Io)
            .and_then(|_| keep_mode(dir, name, &file))
            .inspect(|_| stamp(&file))
            .and_then(|_| rustix::fs::fstat(&file).map_err(|e| Error::Io(io(e))));
        start_write_back(&file);
        let renamed = written.and_then(|stat| {
            rustix::fs::renameat(dir, tmp.as_str(), dir, name).map_err(|e| match e {
                // Something else stands at the key: a broken store, not the writer's doing.
                Errno::ISDIR | Errno::NOTEMPTY | Errno::EXIST | Errno::NOTDIR => {
                    Error::refused(key, "a directory stands where the value goes")
                }
                e => Error::Io(io(e)),
            })?;
            Ok(head_of(&stat).version)
        });
        if renamed.is_err() {
            let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
        }
        renamed
    }
}

/// Give a value just written an mtime of its own, to the nanosecond: the file system stamps it
/// with a clock that ticks every few milliseconds, and it may reuse the inode number of the
/// value the last write replaced, so that two writes of one size in one tick would have one
/// version, and a conditional write over the first would be taken over the second. Where the
/// file system refuses it, the value keeps the mtime it has.
fn stamp(file: &std::fs::File) {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    // Later than any this process gave (the lock orders writers of one key across processes).
    let ns = now.max(LAST.fetch_max(now, Ordering::Relaxed) + 1);
    LAST.fetch_max(ns, Ordering::Relaxed);
    let at = rustix::fs::Timespec { tv_sec: (ns / 1_000_000_000) as _, tv_nsec: (ns % 1_000_000_000) as _ };
    let times = rustix::fs::Timestamps { last_access: at, last_modification: at };
    let _ = rustix::fs::futimens(file, &times);
}

/// Have the kernel start writing a value just written to the disk, without waiting for it. The
/// chunks and array metadata the mount writes are fsynced later (by an fsync, or at the unmount
/// at the latest), which then finds little left to write rather than waiting for all of it at
/// once, while the cores are idle; a write of many chunks ending in an fsync spent a fifth of its
/// time so. Advisory: a file system that cannot do it (tmpfs) just says so, and nothing changes.
fn start_write_back(file: &std::fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: a descriptor `file` owns, open for the call; the call reads no memory of ours.
    unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
}

/// Whether what `key` names is a value: a regular file; a directory is none; anything else is
/// refused.
fn is_value(key: &str, stat: &rustix::fs::Stat) -> Result<bool> {
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Ok(true),
        FileType::Directory => Ok(false),
        other => Err(Error::refused(key, format!("not a regular file ({other:?})"))),
    }
}

/// A file's length and version: which file (a replacement by rename is another inode), its
/// size and its mtime (a rewrite in place).
// The stat fields' integer types differ between targets.
#[allow(clippy::unnecessary_cast)]
fn head_of(stat: &rustix::fs::Stat) -> Head {
    let len = stat.st_size as u64;
    let version = [stat.st_dev, stat.st_ino, len, stat.st_mtime as u64, stat.st_mtime_nsec as u64];
    Head { len, version: Version(version) }
}

/// Give a value about to be renamed over `name` in `dir` the mode (and, for a daemon run as
/// root, the owner) of the value it replaces: a rewrite must not widen who may read it, nor
/// hand a user's file to root. A new value takes the umask's mode.
fn keep_mode(dir: &OwnedFd, name: &str, file: &std::fs::File) -> Result<()> {
    let old = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(old) if FileType::from_raw_mode(old.st_mode) == FileType::RegularFile => old,
        _ => return Ok(()),
    };
    rustix::fs::fchmod(file, Mode::from_raw_mode(old.st_mode & 0o777)).map_err(|e| Error::Io(io(e)))?;
    // SAFETY: geteuid cannot fail; fchown on a descriptor we own.
    if unsafe { libc::geteuid() } == 0 && unsafe { libc::fchown(std::os::fd::AsRawFd::as_raw_fd(file), old.st_uid, old.st_gid) } != 0 {
        return Err(Error::Io(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// `key` split into its directory (relative to the root) and its name.
fn split(key: &str) -> (&str, &str) {
    key.rsplit_once('/').unwrap_or(("", key))
}

impl Store for LocalStore {
    fn get_value(&self, key: &str, max: u64) -> Result<Option<Value>> {
        let Some((file, head)) = self.open_object(key)? else { return Ok(None) };
        let len = head.len;
        if len > max {
            return Err(Error::refused(key, format!("{len} bytes, more than the {max} it can hold (not read)")));
        }
        let mut out = Vec::new();
        out.try_reserve_exact(len as usize).map_err(|_| crate::limits::out_of_memory())?;
        // The file may grow while it is read: never past the bound.
        file.take(max.saturating_add(1)).read_to_end(&mut out)?;
        if out.len() as u64 > max {
            return Err(Error::refused(key, format!("grew past the {max} bytes it can hold while it was read")));
        }
        Ok(Some(Value { bytes: out, version: head.version }))
    }

    fn head(&self, key: &str) -> Result<Option<Head>> {
        // Found, not opened (O_PATH): a listing asks this of every child's document.
        let fd = match self.resolve(key, OFlags::PATH)? {
            Ok(fd) => fd,
            Err(e) if is_absent(e) => return Ok(None),
            Err(e) => return Err(Error::Io(io(e))),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| Error::Io(io(e)))?;
        Ok(is_value(key, &stat)?.then(|| head_of(&stat)))
    }

    fn get_range_versioned(&self, key: &str, range: ByteRange) -> Result<Option<(Vec<u8>, Version)>> {
        let Some((file, head)) = self.open_object(key)? else { return Ok(None) };
        let (start, end) = resolve_range(key, range, head.len)?;
        let mut buf = crate::limits::zeroed((end - start) as usize)?;
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut buf, start)?;
        // Rewritten in place while it was read (replacing writes rename a new file, which the
        // open descriptor does not see): the bytes may be of neither version.
        let after = rustix::fs::fstat(&file).map_err(|e| Error::Io(io(e)))?;
        if head_of(&after).version != head.version {
            return Err(Error::Stale(format!("{key} changed while it was read")));
        }
        Ok(Some((buf, head.version)))
    }

    fn set(&self, key: &str, value: &[u8]) -> Result<Version> {
        let (dir_key, name) = split(key);
        match self.replace_value(&self.make_dir(dir_key)?, name, key, value) {
            // The directory was empty and removed meanwhile (`remove_empty_dirs`): made again.
            Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => self.replace_value(&self.make_dir(dir_key)?, name, key, value),
            other => other,
        }
    }

    fn set_if(&self, key: &str, value: &[u8], expect: Expect) -> Result<Version> {
        let (dir_key, name) = split(key);
        let dir = self.make_dir(dir_key)?;
        let held = match KeyLock::take(&dir, name, key, KEY_LOCK_WAIT) {
            // The directory was empty and removed meanwhile (`remove_empty_dirs`): made again.
            Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                KeyLock::take(&self.make_dir(dir_key)?, name, key, KEY_LOCK_WAIT)?
            }
            other => other?,
        };
        // The lock file is only a lock: the value goes into a fresh file of this mount's own,
        // so that nobody who could open the lock file (another user's, a planted one) reads or
        // rewrites the value through it.
        let result = match expect.holds(self.head(key)?.map(|h| h.version)) {
            true => self.replace_value(&held.dir, name, key, value),
            false => Err(Error::conflict(key, "changed by another writer since this mount read it")),
        };
        held.abandon();
        result
    }

    fn delete_if(&self, key: &str, expect: Expect) -> Result<()> {
        let (dir_key, name) = split(key);
        let dir = match self.resolve(dir_key, OFlags::RDONLY | OFlags::DIRECTORY)? {
            Ok(fd) => fd,
            Err(e) if is_absent(e) => {
                return match expect {
                    Expect::Any | Expect::Absent => Ok(()),
                    Expect::At(_) => Err(Error::conflict(key, "removed by another writer since this mount read it")),
                };
            }
            Err(e) => return Err(Error::Io(io(e))),
        };
        // Nothing there: nothing to lock (a truncate's chunks, zeros written over absent ones).
        if matches!(rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW), Err(e) if is_absent(e)) {
            return match expect {
                Expect::At(_) => Err(Error::conflict(key, "removed by another writer since this mount read it")),
                _ => Ok(()),
            };
        }
        let held = KeyLock::take(&dir, name, key, KEY_LOCK_WAIT)?;
        let now = self.head(key)?.map(|h| h.version);
        let result = if !expect.holds(now) {
            Err(Error::conflict(key, "changed by another writer since this mount read it"))
        } else if now.is_some() {
            match rustix::fs::unlinkat(&held.dir, name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => Ok(()),
                Err(e) => Err(Error::Io(io(e))),
            }
        } else {
            Ok(())
        };
        held.abandon();
        result
    }

    fn delete(&self, key: &str) -> Result<()> {
        let (dir, name) = split(key);
        let dir = match self.resolve(dir, OFlags::PATH | OFlags::DIRECTORY)? {
            Ok(fd) => fd,
            Err(e) if is_absent(e) => return Ok(()),
            Err(e) => return Err(Error::Io(io(e))),
        };
        match rustix::fs::unlinkat(&dir, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(Error::Io(io(e))),
        }
    }

    /// An open file description lock on the lock file, held: released by the kernel when the
    /// holder dies, whatever killed it.
    fn hold_lock(self: std::sync::Arc<Self>, key: &str, wait: std::time::Duration) -> Result<super::Held> {
        let (dir, name) = split(key);
        let dir = self.make_dir(dir)?;
        Ok(super::Held::new(HeldKey(Some(KeyLock::take(&dir, name, key, wait)?))))
    }

    fn sync(&self, keys: &[String]) -> Result<()> {
        let mut dirs = std::collections::BTreeSet::new();
        for key in keys {
            if let Some((file, _)) = self.open_object(key)? {
                file.sync_all()?;
            }
            dirs.insert(split(key).0);
        }
        for dir in dirs {
            match self.resolve(dir, OFlags::RDONLY | OFlags::DIRECTORY)? {
                Ok(fd) => rustix::fs::fsync(&fd).map_err(|e| Error::Io(io(e)))?,
                Err(e) if is_absent(e) => {}
                Err(e) => return Err(Error::Io(io(e))),
            }
        }
        Ok(())
    }

    fn dir_link(&self, key: &str) -> Result<Option<String>> {
        let (parent, name) = split(key);
        if name.is_empty() {
            return Ok(None);
        }
        let Some(parent) = self.open_beneath(parent)? else { return Ok(None) };
        match rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink => {}
            _ => return Ok(None),
        }
        Ok(Some(match self.resolve(key, OFlags::PATH | OFlags::DIRECTORY) {
            Err(Error::Refused { .. }) => "a link that leads out of the store (not followed)".into(),
            _ => "a link to another directory of the store (not followed: links can make a tree without end)".into(),
        }))
    }

    fn permissions(&self, key: &str) -> Result<Option<Permissions>> {
        // The name itself, not what a link at it leads to (`link` says it is one).
        match self.resolve(key, OFlags::PATH | OFlags::NOFOLLOW)? {
            Ok(fd) => {
                let stat = rustix::fs::fstat(&fd).map_err(|e| Error::Io(io(e)))?;
                let link = FileType::from_raw_mode(stat.st_mode) == FileType::Symlink;
                let mut mode = stat.st_mode & 0o7777;
                if key.is_empty() {
                    mode &= self.reach_above(stat.st_gid);
                }
                Ok(Some(Permissions { mode, gid: stat.st_gid, link }))
            }
            Err(e) if is_absent(e) => Ok(None),
            Err(e) => Err(Error::Io(io(e))),
        }
    }

    fn remove_empty_dirs(&self, prefix: &str) -> Result<()> {
        let (parent, name) = split(prefix);
        if name.is_empty() {
            return Ok(());
        }
        let Some(parent) = self.open_beneath(parent)? else { return Ok(()) };
        remove_empty_within(&parent, std::ffi::OsStr::new(name), 0)
    }

    fn delete_prefix(&self, prefix: &str) -> Result<u64> {
        let (parent, name) = split(prefix);
        if name.is_empty() {
            return Err(Error::Invalid("the store root is not removed".into()));
        }
        let Some(parent) = self.open_beneath(parent)? else { return Ok(0) };
        remove_tree(&parent, std::ffi::OsStr::new(name))
    }

    fn rename_prefix(&self, from: &str, to: &str) -> Result<()> {
        let ((from_dir, from_name), (to_dir, to_name)) = (split(from), split(to));
        let source = self.open_beneath(from_dir)?.ok_or(Error::NotFound)?;
        let target = self.open_beneath(to_dir)?.ok_or(Error::NotFound)?;
        rustix::fs::renameat_with(&source, from_name, &target, to_name, rustix::fs::RenameFlags::NOREPLACE).map_err(|e| match e {
            Errno::EXIST | Errno::NOTEMPTY => Error::Exists,
            e => Error::Io(io(e)),
        })
    }

    fn list_names_upto(&self, prefix: &str, max: usize) -> Result<Option<Vec<String>>> {
        let Some(dir) = self.open_dir(prefix)? else { return Ok(Some(Vec::new())) };
        let mut names = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| Error::Io(io(e)))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if names.len() == max {
                return Ok(None);
            }
            names.push(String::from_utf8_lossy(name).into_owned());
        }
        Ok(Some(names))
    }

    fn move_value(&self, from: &str, to: &str) -> Result<()> {
        let ((from_dir, from_name), (to_dir, to_name)) = (split(from), split(to));
        let source = self.open_beneath(from_dir)?.ok_or(Error::NotFound)?;
        let target = self.make_dir(to_dir)?;
        rustix::fs::renameat(&source, from_name, &target, to_name).map_err(|e| match e {
            Errno::NOENT => Error::NotFound,
            Errno::ISDIR | Errno::NOTEMPTY | Errno::EXIST | Errno::NOTDIR => Error::refused(to, "a directory stands where the value goes"),
            e => Error::Io(io(e)),
        })
    }

    fn usage(&self, prefix: &str, most: u64) -> Result<Option<Usage>> {
        let mut usage = Usage { complete: true, ..Usage::default() };
        match self.resolve(prefix, OFlags::RDONLY | OFlags::DIRECTORY)? {
            Ok(dir) => count_within(&dir, &mut usage, most, 0)?,
            Err(e) if is_absent(e) => {}
            Err(e) => return Err(Error::Io(io(e))),
        }
        Ok(Some(usage))
    }

    fn space(&self) -> Option<Space> {
        let s = rustix::fs::fstatvfs(&self.dir).ok()?;
        Some(Space {
            block_size: u32::try_from(s.f_frsize).unwrap_or(4096),
            blocks: s.f_blocks,
            free: s.f_bfree,
            available: s.f_bavail,
            files: s.f_files,
            free_files: s.f_ffree,
        })
    }

    fn claim(&self, claim: Claim) -> Result<()> {
        claim::take(&self.dir, &self.root, claim)
    }

    fn unnamed(&self, prefix: &str) -> Result<Vec<String>> {
        let Some(dir) = self.open_dir(prefix)? else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| Error::Io(io(e)))?;
            if entry.file_name().to_str().is_err() {
                out.push(super::join(prefix, &entry.file_name().to_bytes().escape_ascii().to_string()));
            }
        }
        Ok(out)
    }

    fn list_dir(&self, prefix: &str) -> Result<Vec<Entry>> {
        let Some(dir) = self.open_dir(prefix)? else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| Error::Io(io(e)))?;
            let Ok(name) = entry.file_name().to_str() else { continue };
            if name == "." || name == ".." {
                continue;
            }
            let is_dir = match entry.file_type() {
                FileType::Directory => true,
                // A link (or a file system without types): a directory when it resolves to
                // one inside the store; one that leads out counts as a directory too, so that
                // its node is shown with an `error` saying why it is not served.
                FileType::Symlink | FileType::Unknown => match self.resolve(&super::join(prefix, name), OFlags::PATH | OFlags::DIRECTORY) {
                    Ok(r) => r.is_ok(),
                    Err(_) => true,
                },
                _ => false,
            };
            out.push(Entry { name: name.to_string(), is_dir });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

impl LocalStore {
    /// The directory at `dir` beneath the root, with no link on the way; `None` when absent.
    fn open_beneath(&self, dir: &str) -> Result<Option<OwnedFd>> {
        let path = beneath(dir)?;
        let how = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_XDEV;
        match rustix::fs::openat2(&self.dir, path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty(), how) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) if is_absent(e) => Ok(None),
            Err(Errno::XDEV) => Err(Error::refused(dir, LEADS_OUT)),
            Err(Errno::LOOP) => Err(Error::refused(dir, "a link where a directory of the store was expected")),
            Err(e) => Err(Error::Io(io(e))),
        }
    }

    fn open_dir(&self, prefix: &str) -> Result<Option<Dir>> {
        match self.resolve(prefix, OFlags::RDONLY | OFlags::DIRECTORY)? {
            Ok(fd) => Ok(Some(Dir::new(fd).map_err(|e| Error::Io(io(e)))?)),
            Err(e) if is_absent(e) => Ok(None),
            Err(e) => Err(Error::Io(io(e))),
        }
    }
}

impl std::fmt::Debug for LocalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalStore").field("root", &self.root).field("dir", &self.dir.as_fd()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, LocalStore) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("s")).unwrap();
        let store = LocalStore::open(dir.path().join("s")).unwrap();
        (dir, store)
    }

    #[test]
    fn links_out_of_the_store_are_refused() {
        let (dir, store) = store();
        let outside = dir.path().join("secret");
        std::fs::write(&outside, b"secret").unwrap();
        std::fs::create_dir(dir.path().join("outdir")).unwrap();
        let s = dir.path().join("s");
        std::os::unix::fs::symlink(&outside, s.join("abs")).unwrap();
        std::os::unix::fs::symlink("../secret", s.join("rel")).unwrap();
        std::os::unix::fs::symlink("../outdir", s.join("d")).unwrap();
        std::fs::write(s.join("inside"), b"ok").unwrap();
        std::os::unix::fs::symlink("inside", s.join("alias")).unwrap();
        for key in ["abs", "rel", "../secret", "d/x"] {
            assert!(matches!(store.get(key, 100), Err(Error::Refused { .. })), "{key}");
        }
        assert!(matches!(store.get_range("rel", ByteRange::Suffix(1)), Err(Error::Refused { .. })));
        // Writing through a directory link that leaves the store is refused, nothing lands there.
        assert!(store.set("d/x", b"no").is_err());
        assert!(!dir.path().join("outdir/x").exists());
        assert_eq!(store.get("alias", 100).unwrap().unwrap(), b"ok");
        // Links out count as directories (their nodes show why they are refused); `alias` is a file.
        let listed: Vec<_> = store.list_dir("").unwrap().into_iter().filter(|e| e.is_dir).map(|e| e.name).collect();
        assert_eq!(listed, ["abs", "d", "rel"]);
    }

    #[test]
    fn fifos_devices_and_oversized_objects_are_not_read() {
        let (dir, store) = store();
        let s = dir.path().join("s");
        let fifo = std::ffi::CString::new(s.join("fifo").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        assert!(matches!(store.get("fifo", 100), Err(Error::Refused { .. })));
        assert!(matches!(store.get_range("fifo", ByteRange::Range { start: 0, len: 0 }), Err(Error::Refused { .. })));
        let big = std::fs::File::create(s.join("big")).unwrap();
        big.set_len(16 << 30).unwrap();
        let err = store.get("big", 1 << 20).unwrap_err();
        assert!(err.to_string().contains("17179869184 bytes"), "{err}");
        assert_eq!(store.get("missing", 1).unwrap(), None);
        store.set("a/b/c", b"xyz").unwrap();
        assert_eq!(store.get("a/b/c", 3).unwrap().unwrap(), b"xyz");
        assert!(store.get("a/b/c", 2).is_err());
    }

    #[test]
    fn a_lock_file_is_only_ever_a_lock_whatever_stands_at_its_name() {
        use std::os::unix::fs::FileExt;
        let (dir, store) = store();
        let s = dir.path().join("s");
        let mut version = store.set("a/c/0", b"old").unwrap();
        let lock = s.join("a/c/.0.zarrfs-lock.tmp");
        // Planted and kept open by its planter, who would read the value or rewrite it later.
        std::fs::write(&lock, b"AAAA").unwrap();
        let planted = std::fs::OpenOptions::new().read(true).write(true).open(&lock).unwrap();
        version = store.set_if("a/c/0", b"private", Expect::At(version)).unwrap();
        let mut seen = [0u8; 16];
        let n = planted.read_at(&mut seen, 0).unwrap();
        assert_eq!(&seen[..n], b"AAAA", "the value went into the planted file");
        planted.write_all_at(b"BBBBBBB", 0).unwrap();
        assert_eq!(store.get("a/c/0", 100).unwrap().unwrap(), b"private");
        // A hard link to another file, a link, a FIFO: replaced, never written through.
        let outside = dir.path().join("outside");
        std::fs::write(&outside, b"secret").unwrap();
        std::fs::hard_link(&outside, &lock).unwrap();
        version = store.set_if("a/c/0", b"second", Expect::At(version)).unwrap();
        std::os::unix::fs::symlink(&outside, &lock).unwrap();
        version = store.set_if("a/c/0", b"third", Expect::At(version)).unwrap();
        let fifo = std::ffi::CString::new(lock.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o666) }, 0);
        store.set_if("a/c/0", b"fourth", Expect::At(version)).unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"secret");
        assert_eq!(store.get("a/c/0", 100).unwrap().unwrap(), b"fourth");
        assert!(std::fs::symlink_metadata(&lock).is_err(), "a lock file left behind");
        // A directory there cannot be taken back: refused, saying so.
        std::fs::create_dir(&lock).unwrap();
        let err = store.set_if("a/c/0", b"fifth", Expect::Any).unwrap_err();
        assert!(err.to_string().contains("directory stands where its lock file goes"), "{err}");
        assert_eq!(store.get("a/c/0", 100).unwrap().unwrap(), b"fourth");
    }

    #[test]
    fn conditional_increments_under_contention_are_all_kept() {
        // Eight writers, each with a store of its own, incrementing one counter: a lock file
        // removed by its holder while a waiter opens it must not be taken for a planted one
        // (removing the next holder's lock and letting two writers in at once).
        let (dir, store) = store();
        store.set("k/c/0", b"0").unwrap();
        std::thread::scope(|scope| {
            for _ in 0..8 {
                let s = LocalStore::open(dir.path().join("s")).unwrap();
                scope.spawn(move || {
                    for _ in 0..100 {
                        loop {
                            let v = s.get_value("k/c/0", 64).unwrap().unwrap();
                            let n: u64 = std::str::from_utf8(&v.bytes).unwrap().parse().unwrap();
                            match s.set_if("k/c/0", (n + 1).to_string().as_bytes(), Expect::At(v.version)) {
                                Ok(_) => break,
                                Err(Error::Conflict { .. }) => continue,
                                Err(e) => panic!("{e}"),
                            }
                        }
                    }
                });
            }
        });
        assert_eq!(store.get("k/c/0", 64).unwrap().unwrap(), b"800");
    }

    #[test]
    fn a_moved_store_is_served_where_it_is_and_a_deleted_one_is_not_recreated() {
        let (dir, store) = store();
        store.set("a/k", b"1").unwrap();
        std::fs::rename(dir.path().join("s"), dir.path().join("moved")).unwrap();
        store.set("a/k2", b"2").unwrap();
        assert!(dir.path().join("moved/a/k2").exists());
        assert!(!dir.path().join("s").exists());
        std::fs::remove_dir_all(dir.path().join("moved")).unwrap();
        assert!(store.set("b/k", b"3").is_err());
        assert!(!dir.path().join("s").exists() && !dir.path().join("moved").exists());
    }
}
