//! The lock of one key between writers — threads, processes and mounts on other hosts over NFS:
//! a lock file beside the key, locked with an open file description lock. It is only a lock:
//! the new value is written into a fresh file of its own (`LocalStore::replace_value`), so a
//! lock file someone else made or opened never holds a value.

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
/// and NFS takes it to the server, so that mounts on other hosts contend too). The holder
/// removes it when done: a waiter that then takes the lock finds the name no longer its file
/// and starts again.
pub(super) struct KeyLock {
    pub(super) dir: OwnedFd,
    fd: OwnedFd,
    name: String,
}

impl KeyLock {
    pub(super) fn take(dir: &OwnedFd, name: &str, key: &str, wait: std::time::Duration) -> Result<KeyLock> {
        let lock_name = format!(".{name}.zarrfs-lock.tmp");
        debug_assert!(crate::store::is_temporary(&lock_name));
        let deadline = std::time::Instant::now() + wait;
        let mut pause = std::time::Duration::from_micros(100);
        let dir = dir.try_clone()?;
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        let mut owner = me;
        let mut first = true;
        loop {
            // Every path back here tried once: a wait of zero still tries the lock.
            if !std::mem::take(&mut first) && std::time::Instant::now() >= deadline {
                let whose = if owner == me { String::new() } else { format!(", a file of uid {owner}'s,") };
                return Err(Error::Busy(format!(
                    "{key}: another writer has held its lock ({lock_name}{whose}) for {} s",
                    wait.as_secs_f32()
                )));
            }
            let fd = match open_lock(&dir, &lock_name) {
                Ok(fd) => fd,
                // A link, a socket or device, a directory: planted.
                Err(Errno::LOOP | Errno::NXIO | Errno::ISDIR) => {
                    replace(&dir, &lock_name, key)?;
                    continue;
                }
                // Another user's, which this one may not lock. It may be the lock of another
                // user's mount, so it is not taken from them: refused, naming its owner.
                Err(Errno::ACCESS | Errno::PERM) => {
                    let owner = rustix::fs::statat(&dir, lock_name.as_str(), AtFlags::SYMLINK_NOFOLLOW).map_or(u32::MAX, |s| s.st_uid);
                    return Err(Error::Busy(format!(
                        "{key}: its lock file {lock_name} is uid {owner}'s, and this user may not lock it: the store's writers need a umask that lets each other write (002)"
                    )));
                }
                Err(e) => return Err(Error::Io(io(e))),
            };
            let stat = rustix::fs::fstat(&fd).map_err(|e| Error::Io(io(e)))?;
            // Removed by its holder since it was opened: the name is another writer's lock file
            // now (perhaps locked), never to be taken back as a planted one.
            if stat.st_nlink == 0 {
                continue;
            }
            // Not a file a writer made (those are regular, with one name): a FIFO, a hard link
            // to some other file. Never locked nor kept; its name is taken back.
            if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile || stat.st_nlink != 1 {
                replace(&dir, &lock_name, key)?;
                continue;
            }
            owner = stat.st_uid;
            if try_lock(&fd)? {
                match rustix::fs::statat(&dir, lock_name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(now) if now.st_ino == stat.st_ino && now.st_dev == stat.st_dev => {
                        return Ok(KeyLock { dir, fd, name: lock_name });
                    }
                    // Removed (or replaced) by the holder before: another file now.
                    _ => continue,
                }
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(20));
        }
    }

    /// Give the lock up without storing its file: the file is removed (a waiter then makes a
    /// new one), and the lock goes with the descriptor.
    pub(super) fn abandon(self) {
        // Only while the name is still this lock's file (nobody else removes a locked one).
        let mine = rustix::fs::fstat(&self.fd).ok();
        match rustix::fs::statat(&self.dir, self.name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(now) if mine.is_some_and(|m| m.st_ino == now.st_ino && m.st_dev == now.st_dev) => {
                let _ = rustix::fs::unlinkat(&self.dir, self.name.as_str(), AtFlags::empty());
            }
            _ => {}
        }
    }
}

/// Open the lock file `name` in `dir`, or make it, in one call: never through a link
/// (`O_NOFOLLOW` with `O_CREAT` fails on one, dangling or not), never blocking on a FIFO. What
/// is opened is checked after (a regular file with one name), so a planted one is never used.
fn open_lock(dir: &OwnedFd, name: &str) -> std::result::Result<OwnedFd, Errno> {
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(0o666))
}

/// Take the name `name` back from what stands there and is no writer's lock file (a link, a
/// FIFO, a hard link): removed, so that a lock file of this
/// mount's own is made in its place. A directory there is refused.
fn replace(dir: &OwnedFd, name: &str, key: &str) -> Result<()> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => {
            tracing::warn!(key, "{name} was no lock file of a writer's (a link, a FIFO or another name of a file): replaced");
            Ok(())
        }
        Err(Errno::ISDIR) => Err(Error::refused(key, "a directory stands where its lock file goes")),
        Err(e) => Err(Error::refused(key, format!("its lock file is not one a writer made, and cannot be replaced ({e})"))),
    }
}

/// A key's lock held until dropped (`Store::hold_lock`); the kernel holds it while the
/// process lives.
pub(super) struct HeldKey(pub(super) Option<KeyLock>);

impl crate::store::HeldLock for HeldKey {}

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
