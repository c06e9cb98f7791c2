//! Everything about the fuser session: mount options, the session's threads, the kernel
//! cache invalidation thread, and the end of the session. It knows nothing of requests (the
//! adapter's job) or of forking and signals (the daemon's).

use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::Arc;

use fuser::{INodeNo, Notifier};

use super::adapter::FuseAdapter;
use crate::fs::{KernelCache, Mounted};

/// How the session is mounted.
#[derive(Debug, Default)]
pub struct SessionOptions {
    /// Shown as the mount's source (the store's path).
    pub fs_name: String,
    pub read_only: bool,
    pub allow_other: bool,
    pub allow_root: bool,
    /// FUSE request threads (8 when not given).
    pub threads: Option<NonZeroUsize>,
}

impl SessionOptions {
    /// Who may use the mount: other users only when the options say so, never as a side effect
    /// of how a dead daemon's mount is cleaned up (the daemon's own helper does that, whoever may
    /// use the mount).
    fn acl(&self) -> fuser::SessionACL {
        match (self.allow_other, self.allow_root) {
            (true, _) => fuser::SessionACL::All,
            (false, true) => fuser::SessionACL::RootAndOwner,
            (false, false) => fuser::SessionACL::Owner,
        }
    }
}

/// A live mount, served by fuser's threads.
pub struct Session {
    /// Disconnects when the session has ended (the file system was unmounted) and its threads
    /// are done.
    ended: crossbeam_channel::Receiver<()>,
}

impl Session {
    /// Mount `fs` on `mountpoint` and start serving it.
    pub fn mount(fs: Arc<Mounted>, mountpoint: &Path, options: &SessionOptions) -> Result<Session, String> {
        let mut config = fuser::Config::default();
        let mut mount_options = vec![
            fuser::MountOption::FSName(options.fs_name.clone()),
            fuser::MountOption::Subtype("zarrfs".into()),
            fuser::MountOption::NoAtime,
            fuser::MountOption::NoDev,
            fuser::MountOption::NoSuid,
        ];
        if options.read_only {
            mount_options.push(fuser::MountOption::RO);
        }
        // The kernel checks every access against the owner and modes shown (the daemon's user;
        // with allow_other, no more for others than the store itself grants them).
        mount_options.push(fuser::MountOption::DefaultPermissions);
        config.acl = options.acl();
        config.mount_options = mount_options.clone();
        config.n_threads = Some(options.threads.map_or(8, NonZeroUsize::get));
        // SAFETY: geteuid cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        // As root /dev/fuse is opened directly, so cloned fds work.
        config.clone_fd = root;
        let adapter = FuseAdapter::new(fs.clone());
        let failed = |e: std::io::Error| format!("cannot mount {} on {}: {e}", options.fs_name, mountpoint.display());
        let session = match root || super::fusermount::dev_fuse_opens() {
            // Mounted here rather than by fuser, whose own mount names the type `fuse` (not
            // `fuse.zarrfs`, as fusermount3 does and `findmnt -t fuse.zarrfs` asks for).
            true if root => {
                let fd = super::fusermount::mount_directly(mountpoint, &mount_options, options.allow_other || options.allow_root)?;
                let acl = config.acl;
                fuser::Session::from_fd(adapter, fd, acl, config).map_err(failed)?
            }
            true => fuser::Session::new(adapter, mountpoint, &config).map_err(failed)?,
            // A user who may not open /dev/fuse mounts through the setuid fusermount3, which hands
            // back the descriptor (as libfuse falls back to it).
            false => {
                let fd = super::fusermount::mount(mountpoint, &mount_options, options.allow_other || options.allow_root)?;
                let acl = config.acl;
                fuser::Session::from_fd(adapter, fd, acl, config).map_err(failed)?
            }
        };
        fs.main().set_kernel_cache(Box::new(Invalidator::new(session.notifier())));
        let background = session.spawn().map_err(|e| format!("cannot start the FUSE session: {e}"))?;
        // Whoever waits for the end is woken by it, rather than polling for it.
        let (tell, ended) = crossbeam_channel::bounded::<()>(0);
        std::thread::Builder::new()
            .name("zarrfs-session".into())
            .spawn(move || {
                let _ = background.join();
                drop(tell);
            })
            .map_err(|e| format!("cannot start the FUSE session: {e}"))?;
        raise_read_ahead(mountpoint);
        Ok(Session { ended })
    }

    /// Ready (disconnected) once the session has ended: the file system was unmounted.
    pub fn ended(&self) -> &crossbeam_channel::Receiver<()> {
        &self.ended
    }
}

/// The kernel's read-ahead for the mount, in KiB: as large as one FUSE request may be (256
/// pages), so that a sequential reader's pages come in 1 MiB requests instead of 128 KiB ones
/// (cold `dd bs=1M` of a zstd array: about a fifth faster on this 2-core machine).
const READ_AHEAD_KB: u64 = 1024;

/// Raise the read-ahead of the mount's backing device (the kernel offers 128 KiB and a daemon
/// can only lower it through FUSE_INIT; gcsfuse raises it the same way). Needs root; otherwise
/// the kernel's default stays.
fn raise_read_ahead(mountpoint: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(mountpoint) else { return };
    let dev = meta.dev();
    let path = format!("/sys/class/bdi/{}:{}/read_ahead_kb", libc::major(dev), libc::minor(dev));
    let current = std::fs::read_to_string(&path).ok().and_then(|s| s.trim().parse::<u64>().ok());
    if current.is_some_and(|kb| kb < READ_AHEAD_KB)
        && let Err(e) = std::fs::write(&path, READ_AHEAD_KB.to_string())
    {
        tracing::debug!("cannot raise the kernel read-ahead ({path}): {e}");
    }
}

/// Tells the kernel to drop what it cached of a file the daemon changed itself. Attributes at
/// once (an attribute-only invalidation touches no page, so it is safe inside a request handler,
/// and the new size is seen as soon as the change returns); pages on a thread of its own, never
/// from a request handler, whose pages the kernel may hold locked while it waits for the reply
/// (a deadlock). The next open drops them anyway (`ZarrFs::keep_cache`): the thread is for handles already open.
/// Names go on that thread too: dropping one takes its directory's lock, which a request in
/// that directory may hold while it waits for the daemon.
struct Invalidator {
    notifier: Notifier,
    tx: crossbeam_channel::Sender<Stale>,
}

/// What the invalidation thread drops.
enum Stale {
    Pages(u64),
    Name(u64, std::ffi::OsString),
}

impl Invalidator {
    fn new(notifier: Notifier) -> Invalidator {
        let (tx, rx) = crossbeam_channel::unbounded::<Stale>();
        let pages = notifier.clone();
        let spawned = std::thread::Builder::new().name("zarrfs-invalidate".into()).spawn(move || {
            let notifier = pages;
            while let Ok(stale) = rx.recv() {
                let done = match &stale {
                    Stale::Pages(ino) => notifier.inval_inode(INodeNo(*ino), 0, 0),
                    Stale::Name(dir, name) => notifier.inval_entry(INodeNo(*dir), name),
                };
                match done {
                    // ENOENT: the kernel held nothing of it.
                    Err(e) if e.raw_os_error() != Some(libc::ENOENT) => tracing::debug!("kernel cache invalidation failed: {e}"),
                    _ => {}
                }
            }
        });
        if let Err(e) = spawned {
            tracing::error!("cannot start the invalidation thread: {e}");
        }
        Invalidator { notifier, tx }
    }
}

impl KernelCache for Invalidator {
    fn invalidate(&self, ino: u64) {
        if let Err(e) = self.notifier.inval_inode(INodeNo(ino), -1, 0) {
            tracing::debug!(ino, "kernel attribute invalidation failed: {e}");
        }
        let _ = self.tx.send(Stale::Pages(ino));
    }

    fn invalidate_name(&self, dir: u64, name: &str) {
        let _ = self.tx.send(Stale::Name(dir, name.into()));
    }
}
