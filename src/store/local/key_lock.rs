//! The lock of one key between writers — threads, processes and mounts on other hosts over NFS:
//! a lock file beside the key, locked with an open file description lock, which becomes the new
//! value when it is renamed over the key.

use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::io;
use crate::{Error, Result};

/// How long a conditional write waits for another writer's lock of the same key before it
/// fails with EBUSY: a lock is held only to compare a version, write a value and rename it.
pub(super) const KEY_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The lock of one key, held: its lock file `.NAME.zarrfs-lock.tmp` beside it, open and locked
/// with an open file description lock (threads of one process contend for it as processes do,
/// and NFS takes it to the server, so that mounts on other hosts contend too). The lock file is
/// also the new value, renamed over the key (tensorstore's file store does the same): a waiter
/// that then takes the lock finds the name no longer its file and starts again.
pub(super) struct KeyLock {
    pub(super) dir: OwnedFd,
    pub(super) fd: OwnedFd,
    pub(super) name: String,
}

impl KeyLock {
    pub(super) fn take(dir: &OwnedFd, name: &str, key: &str, wait: std::time::Duration) -> Result<KeyLock> {
        let lock_name = format!(".{name}.zarrfs-lock.tmp");
        debug_assert!(crate::store::is_temporary(&lock_name));
        let deadline = std::time::Instant::now() + wait;
        let mut pause = std::time::Duration::from_micros(100);
        let dir = dir.try_clone()?;
        loop {
            // Never through a link planted under the lock's name.
            let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
            let fd = rustix::fs::openat(&dir, lock_name.as_str(), flags, Mode::from_raw_mode(0o666)).map_err(|e| match e {
                Errno::LOOP => Error::refused(key, "a link stands where its lock file goes"),
                e => Error::Io(io(e)),
            })?;
            let stat = rustix::fs::fstat(&fd).map_err(|e| Error::Io(io(e)))?;
            if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
                return Err(Error::refused(key, "its lock file is not a regular file"));
            }
            if try_lock(&fd)? {
                match rustix::fs::statat(&dir, lock_name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(now) if now.st_ino == stat.st_ino && now.st_dev == stat.st_dev => {
                        return Ok(KeyLock { dir, fd, name: lock_name });
                    }
                    // Renamed over its key (or removed) by the holder before: another file now.
                    _ => continue,
                }
            }
            if std::time::Instant::now() >= deadline {
                return Err(Error::Busy(format!("{key}: another writer has held its lock ({lock_name}) for {} s", wait.as_secs_f32())));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(20));
        }
    }

    /// Give the lock up without storing its file: the file is removed (a waiter then makes a
    /// new one), and the lock goes with the descriptor.
    pub(super) fn abandon(self) {
        let _ = rustix::fs::unlinkat(&self.dir, self.name.as_str(), AtFlags::empty());
    }
}

/// A key's lock held until dropped (`Store::hold_lock`).
pub(super) struct HeldKey(pub(super) Option<KeyLock>);

impl Drop for HeldKey {
    fn drop(&mut self) {
        if let Some(lock) = self.0.take() {
            lock.abandon();
        }
    }
}

/// Lock `fd` exclusively without waiting; `false` when another holds it. A file system without
/// such locks (some FUSE ones) is taken as locked, with a warning once: the version check still
/// stands, as one step no longer.
pub(super) fn try_lock(fd: &OwnedFd) -> Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain C struct, all zeros a valid value.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as _;
    lock.l_whence = libc::SEEK_SET as _;
    // SAFETY: a descriptor `fd` owns, and a struct that lives through the call.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &lock) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => Ok(false),
        Some(libc::ENOLCK | libc::EINVAL | libc::EOPNOTSUPP) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!("the store's file system has no file locks: writes of one chunk by two mounts are checked, not locked ({e})")
            });
            Ok(true)
        }
        _ => Err(Error::Io(e)),
    }
}
