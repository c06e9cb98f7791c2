//! The daemon: checks before forking, fork with a readiness pipe, logging, the signal wait,
//! systemd notification, the flush on the way out (bounded in time), and `zarrfs unmount`
//! (finding and stopping the daemon that serves a mount point). It builds the core and hands it
//! to `crate::fuse::Session`; it knows nothing of fuser or of how requests are served.

use std::ffi::CString;
use std::io::{Read, Write};
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::fs::{Config, ZarrFs};
use crate::fuse::{Session, SessionOptions};
use crate::progress::{Progress, human_bytes};
use crate::store::{Location, REMOTE_WORKERS, RemoteOptions, Store};

/// Everything a mount needs, after flags and `-o` options are merged (`crate::cli`).
#[derive(Debug, Default)]
pub struct MountPlan {
    pub store: Location,
    /// How to reach an object store (unused for a local directory).
    pub remote: RemoteOptions,
    /// How long a node's metadata is trusted before it is read again (`None`: the default).
    pub metadata_ttl: Option<Duration>,
    pub mountpoint: PathBuf,
    pub foreground: bool,
    pub log_file: Option<PathBuf>,
    /// Where the Prometheus endpoint listens (`crate::metrics::serve`), if anywhere.
    pub metrics_addr: Option<String>,
    /// 0 info, 1 debug, 2 trace.
    pub verbose: u8,
    pub read_only: bool,
    pub allow_other: bool,
    pub allow_root: bool,
    pub auto_unmount: bool,
    /// Mount over a directory that holds files (they are hidden while mounted).
    pub nonempty: bool,
    pub cache_size: Option<u64>,
    pub dirty_limit: Option<u64>,
    pub threads: Option<NonZeroUsize>,
    pub adopt_offset: bool,
    /// The store's only writer: opens keep what was read (`Config::exclusive`).
    pub exclusive: bool,
    pub spool_dir: Option<PathBuf>,
    pub flush_timeout: Duration,
    pub max_chunk_size: Option<u64>,
    /// The header views shown (`None`: the default, all).
    pub views: Option<crate::headers::Views>,
}

/// Check what can be checked before forking, so that errors reach the caller's terminal.
/// An object store is checked by the daemon before it reports that the mount is live (`open_store`):
/// its client starts threads, which must not exist when the daemon forks.
fn preflight(plan: &MountPlan) -> Result<(), String> {
    if let Location::Local(path) = &plan.store {
        crate::store::check_dir("store", path)?;
    }
    if !plan.store.is_remote() {
        check_is_store(&plan.store, plan.store.open(&plan.remote)?.as_ref())?;
    }
    crate::store::check_dir("mount point", &plan.mountpoint)?;
    if let Some(store) = plan.store.local_path() {
        refuse_within("mount point", &plan.mountpoint, ("the store", &store), true)?;
    }
    if let Some(spool) = &plan.spool_dir {
        // Spooled bytes would be written through the mount they are spooled for.
        refuse_within("spool directory", spool, ("the mount point", &plan.mountpoint), false)?;
    }
    if is_mount_point(&plan.mountpoint) {
        return Err(format!("mount point {} is busy: something is mounted there", plan.mountpoint.display()));
    }
    if !plan.nonempty && std::fs::read_dir(&plan.mountpoint).is_ok_and(|mut d| d.next().is_some()) {
        return Err(format!(
            "mount point {} is not empty: its files would be hidden while mounted (-o nonempty mounts over them)",
            plan.mountpoint.display()
        ));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("no FUSE device (/dev/fuse): load the fuse module or run where FUSE is available".into());
    }
    Ok(())
}

/// Why a read-write mount of a local store could not store anything: the user may not write
/// its directory (or its file system is read-only). Said at mount time, rather than as a
/// failure at the first close.
fn unwritable(plan: &MountPlan) -> Option<String> {
    let Location::Local(path) = &plan.store else { return None };
    if plan.read_only {
        return None;
    }
    rustix::fs::access(path, rustix::fs::Access::WRITE_OK)
        .err()
        .map(|e| format!("{} is not writable by this user ({})", path.display(), std::io::Error::from(e)))
}

/// Refuse `path` (`what`) inside `outer` (or at it, unless `at_ok`). A mount point inside its
/// store would show the mount within itself, and every walk through it would ask the daemon
/// for its own directory until all its threads wait on each other. Compared as canonical
/// paths, so no link hides it.
fn refuse_within(what: &str, path: &Path, (name, outer): (&str, &Path), at_ok: bool) -> Result<(), String> {
    let (Some(inner), Ok(canonical)) = (canonical_so_far(path), outer.canonicalize()) else { return Ok(()) };
    if inner.starts_with(&canonical) && !(at_ok && inner == canonical) {
        return Err(format!("{what} {} is inside {name} {}: choose one outside it", path.display(), outer.display()));
    }
    Ok(())
}

/// `path` made canonical as far as it exists, the rest (not made yet) joined on.
fn canonical_so_far(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    let mut rest = Vec::new();
    let mut at = absolute.as_path();
    loop {
        if let Ok(canonical) = at.canonicalize() {
            return Some(rest.iter().rev().fold(canonical, |p, name| p.join(name)));
        }
        rest.push(at.file_name()?);
        at = at.parent()?;
    }
}

fn check_is_store(location: &Location, store: &dyn Store) -> Result<(), String> {
    match crate::zarr::node::is_node(store, "") {
        Ok(true) => Ok(()),
        Ok(false) => Err(not_a_store(location)),
        Err(e) => Err(format!("{location}: {e}")),
    }
}

fn not_a_store(location: &Location) -> String {
    format!("{location} is not a Zarr store: no zarr.json, .zgroup or .zarray at its root")
}

/// `zarrfs mount`: returns once the mount is live, in the background unless `foreground`.
pub fn run(mut plan: MountPlan) -> ExitCode {
    if let Err(e) = preflight(&plan) {
        eprintln!("zarrfs: {e}");
        return ExitCode::FAILURE;
    }
    if let Some(why) = unwritable(&plan) {
        eprintln!("zarrfs: {why}: mounted read-only");
        plan.read_only = true;
    }
    // In the background: fork now, before any thread exists; the parent waits for the child's
    // word that the mount is live.
    let ready_pipe = if plan.foreground {
        None
    } else {
        match daemonize() {
            Ok(pipe) => Some(pipe),
            Err(e) => {
                eprintln!("zarrfs: cannot start the daemon: {e}");
                return ExitCode::FAILURE;
            }
        }
    };
    let background = ready_pipe.is_some();
    // The first report goes to the waiting parent and closes the pipe, which releases it;
    // whether it reached the parent is returned.
    let ready_pipe = std::cell::Cell::new(ready_pipe);
    let report = |msg: &str| match ready_pipe.take() {
        Some(fd) => std::fs::File::from(fd).write_all(msg.as_bytes()).is_ok(),
        None => false,
    };
    // A background daemon logs to syslog; where none listens, to a file of the user's, named to
    // them at mount time: errors must be somewhere someone can read them.
    let mut note = String::new();
    if background && plan.log_file.is_none() && !crate::logging::syslog_listens() {
        match default_log_file(&plan.mountpoint) {
            Ok(path) => {
                // Said when the file is new: later mounts there log to the same file, which
                // `zarrfs status` names.
                if !path.exists() {
                    note = format!("no syslog listens here: the daemon logs to {} (--log-file names another)", path.display());
                }
                plan.log_file = Some(path);
            }
            Err(e) => note = format!("no syslog listens here and no log file could be made ({e}): give one with --log-file"),
        }
    }
    let target = match (&plan.log_file, background) {
        (Some(f), _) => crate::logging::LogTarget::File(f),
        (None, true) => crate::logging::LogTarget::Syslog,
        (None, false) => crate::logging::LogTarget::Stderr,
    };
    if let Err(e) = crate::logging::init(plan.verbose, target) {
        if !report(&e) {
            eprintln!("zarrfs: {e}");
        }
        return ExitCode::FAILURE;
    }
    let ready = if note.is_empty() { "ok".to_string() } else { format!("ok\n{note}") };
    match run_mount(&plan, |m| report(if m == "ok" { &ready } else { m }), background) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Said once where it is read: by the waiting parent, else in the log (and a log
            // file keeps it too).
            if !report(&e) || plan.log_file.is_some() {
                tracing::error!("{e}");
            }
            ExitCode::FAILURE
        }
    }
}

/// The log file of a background daemon where no syslog listens: `$XDG_STATE_HOME/zarrfs/`,
/// else `~/.local/state/zarrfs/`, or for root `/var/log/zarrfs/` (whatever `HOME` says: sudo,
/// su and mount(8) each leave another), named after the mount point.
fn default_log_file(mountpoint: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::DirBuilderExt;
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let home = || std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| Path::new(&h).join(".local/state/zarrfs"));
    let dir = std::env::var_os("XDG_STATE_HOME")
        .filter(|d| !d.is_empty())
        .map(|d| PathBuf::from(d).join("zarrfs"))
        .or_else(|| if root { Some(PathBuf::from("/var/log/zarrfs")) } else { home() })
        .ok_or("neither XDG_STATE_HOME nor HOME is set")?;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let absolute = std::path::absolute(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let name: String = absolute.to_string_lossy().trim_matches('/').chars().map(|c| if c == '/' { '-' } else { c }).collect();
    Ok(dir.join(format!("{}.log", if name.is_empty() { "root" } else { &name })))
}

/// Fork. The parent waits for the child to report (empty = mounted, text = the error) and
/// exits with the status, never returning; the child gets the write end of the pipe.
fn daemonize() -> std::io::Result<OwnedFd> {
    let mut fds = [0i32; 2];
    // SAFETY: plain syscalls on fds we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the fds were just created and are ours.
    let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: no other thread exists yet in this process.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()),
        0 => {
            drop(read_end);
            // SAFETY: detach from the caller's session and terminal.
            unsafe { libc::setsid() };
            Ok(write_end)
        }
        _ => {
            drop(write_end);
            let mut msg = String::new();
            let mut f = std::fs::File::from(read_end);
            let got = f.read_to_string(&mut msg);
            match (got, msg.as_str()) {
                (Ok(_), "ok") => std::process::exit(0),
                // Mounted, with something to tell.
                (Ok(_), m) if m.starts_with("ok\n") => {
                    eprintln!("zarrfs: {}", &m[3..]);
                    std::process::exit(0)
                }
                (Ok(_), "") => {
                    eprintln!("zarrfs: the daemon exited before the mount was live");
                    std::process::exit(1)
                }
                (Ok(_), m) => {
                    eprintln!("zarrfs: {m}");
                    std::process::exit(1)
                }
                (Err(e), _) => {
                    eprintln!("zarrfs: lost the daemon: {e}");
                    std::process::exit(1)
                }
            }
        }
    }
}

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

fn run_mount(plan: &MountPlan, report: impl Fn(&str) -> bool, background: bool) -> Result<(), String> {
    // Block the shutdown signals before any thread starts: every thread inherits the mask and
    // a thread of their own takes them, with sigwait.
    let signals = signal_set();
    // SAFETY: setting this thread's mask.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut()) };
    let signalled = wait_for_signals(signals)?;

    // The store root is held open from here on: a store moved or replaced while mounted is
    // never written at its old path.
    let metadata_ttl = plan.metadata_ttl.unwrap_or(Config::default().metadata_ttl);
    let remote = crate::store::RemoteOptions { metadata_ttl, ..plan.remote.clone() };
    // Before the store opens: an archive's directory is read (and bounded) as it opens.
    if let Some(n) = plan.max_chunk_size {
        crate::limits::set_max_chunk_bytes(n);
    }
    let store = plan.store.open(&remote)?;
    if !plan.read_only {
        store.claim(crate::store::Claim::Serving).map_err(|e| e.to_string())?;
    }
    // An Icechunk repository's snapshots show in `.zarrfs/snapshots`, each opened when entered.
    let open_snapshot = plan.store.at_snapshot("").map(|_| {
        let location = plan.store.clone();
        Box::new(move |id: &str| location.at_snapshot(id).ok_or_else(|| "no history".to_string())?.open(&remote)) as crate::fs::OpenSnapshot
    });
    let mut config = Config {
        snapshots: open_snapshot.is_some(),
        read_only: plan.read_only,
        shared: plan.allow_other,
        source: plan.store.to_string(),
        log: plan.log_file.as_ref().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone())),
        ..Config::default()
    };
    if plan.store.is_remote() {
        // Requests wait on the network: keep many in flight, and read further ahead.
        config.workers = std::num::NonZeroUsize::new(REMOTE_WORKERS).unwrap_or(config.workers);
        config.read_ahead = config.read_ahead.max(64 << 20);
    }
    config.metadata_ttl = metadata_ttl;
    if let Some(n) = plan.cache_size {
        config.cache_size = n as usize;
    }
    if let Some(n) = plan.dirty_limit {
        config.dirty_limit = n as usize;
    }
    config.adopt_offset = plan.adopt_offset;
    config.exclusive = plan.exclusive;
    if let Some(dir) = &plan.spool_dir {
        crate::fs::prepare_spool_dir(dir).map_err(|e| e.to_string())?;
        config.spool_dir = Some(dir.clone());
    }
    if let Some(views) = &plan.views {
        config.views = views.clone();
    }
    let fs = Arc::new(ZarrFs::new(store.clone(), config));
    // Whether the store can be used at all (an object store lists its prefix) is asked while the
    // root's metadata, which the first lookups need, is read: one round trip for both. A failure
    // is said once, as the mount's error, so the root is read without logging it too.
    let (reached, root) = std::thread::scope(|s| {
        let reach = s.spawn(|| store.reach());
        let root = tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || fs.load_root());
        (reach.join(), root)
    });
    reached.unwrap_or_else(|_| Err("checking the store failed".into())).map_err(|why| format!("{}: {why}", plan.store))?;
    match root {
        Ok(()) => {}
        Err(crate::Error::NotFound) => return Err(not_a_store(&plan.store)),
        Err(e) => return Err(format!("{}: {e}", plan.store)),
    }

    // Bound before the mount, so that an address in use fails it with nothing mounted.
    if let Some(addr) = &plan.metrics_addr {
        let mounted = fs.clone();
        let endpoint = crate::metrics::serve(addr, Arc::new(move || mounted.metrics()))?;
        tracing::info!("metrics at http://{}/metrics", endpoint.addr);
    }

    let options = SessionOptions {
        fs_name: plan.store.absolute().to_string(),
        read_only: plan.read_only,
        allow_other: plan.allow_other,
        allow_root: plan.allow_root,
        threads: plan.threads,
    };
    let session = Session::mount(Arc::new(crate::fs::Mounted::new(fs.clone(), open_snapshot)), &plan.mountpoint, &options)?;
    // Dropped on the way out, once the daemon has unmounted itself.
    let _unmount_when_gone = plan.mountpoint.canonicalize().ok().filter(|_| plan.auto_unmount).and_then(|m| UnmountWhenGone::start(&m));
    tracing::info!(store = %plan.store, mountpoint = %plan.mountpoint.display(), "mounted");
    // Consolidated metadata a change could not keep current (a full disk) is rebuilt from the
    // nodes, out of the way of the first requests. Local stores only: on object storage the walk
    // would take a request per node at every mount.
    if !plan.read_only && !plan.store.is_remote() {
        let store = store.clone();
        let _ = std::thread::Builder::new().name("zarrfs-repair".into()).spawn(move || {
            if let Err(e) = crate::zarr::consolidated::repair(store.as_ref(), "") {
                tracing::warn!("consolidated metadata could not be checked: {e}");
            }
        });
    }
    report("ok");
    // Under systemd (Type=notify): ready now that the mount answers.
    let notify = std::env::var_os("NOTIFY_SOCKET").is_some();
    if notify {
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    }
    if background {
        detach_stdio(plan.log_file.as_deref());
    }

    // `zarrfs unmount` asks here, and hears what the last flush stored.
    let control = crate::control::listen().inspect_err(|e| tracing::warn!("{e}: zarrfs unmount will signal instead")).ok();
    let stop_requests = control.as_ref().map(|c| &c.requests);
    let never = crossbeam_channel::never();
    // Wait for a signal, a stop request or the session to end (an external umount).
    let mut asked = None;
    crossbeam_channel::select! {
        recv(session.ended()) -> _ => {
            tracing::info!(mountpoint = %plan.mountpoint.display(), "unmounted from outside");
            let flushed = flush_within(&fs, plan.flush_timeout, |_| {});
            fs.remove_spool();
            return flushed;
        }
        recv(signalled) -> sig => tracing::info!(signal = sig.unwrap_or(0), "shutting down"),
        recv(stop_requests.unwrap_or(&never)) -> request => {
            tracing::info!("shutting down: asked by zarrfs unmount");
            asked = request.ok();
        }
    }
    // Stop taking changes, store what was acknowledged, then unmount.
    fs.stop_changes();
    if notify {
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    }
    let flushed = flush_within(&fs, plan.flush_timeout, |left| {
        if let Some(asked) = asked.as_mut() {
            asked.progress(left);
        }
    });
    match unmount(&plan.mountpoint) {
        // Nothing is left to serve: changes were stopped and stored before, and no file is open
        // (else the unmount fails). What may still run is the kernel's read-ahead, which nobody
        // waits for: on object storage it can queue behind 64 MiB of the daemon's own.
        Ok(()) => {}
        Err(e) => {
            tracing::warn!("unmount failed ({e}); detaching the mount lazily");
            lazy_unmount(&plan.mountpoint);
        }
    }
    tracing::info!(mountpoint = %plan.mountpoint.display(), "unmounted");
    fs.remove_spool();
    if let Some(asked) = asked {
        asked.finish(&flushed);
    }
    flushed
}

/// The shutdown signals (blocked in every thread), as they arrive: a thread waits for them.
fn wait_for_signals(signals: libc::sigset_t) -> Result<crossbeam_channel::Receiver<i32>, String> {
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::Builder::new()
        .name("zarrfs-signals".into())
        .spawn(move || {
            loop {
                let mut sig = 0;
                // SAFETY: waits on the blocked set, writing only `sig`.
                if unsafe { libc::sigwait(&signals, &mut sig) } == 0 && tx.send(sig).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    Ok(rx)
}

/// Flush everything, giving up after `timeout` (the daemon must stop in bounded time);
/// `progress` hears the bytes still to be stored every second meanwhile.
fn flush_within(fs: &Arc<ZarrFs>, timeout: Duration, mut progress: impl FnMut(u64)) -> Result<(), String> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let fs2 = fs.clone();
    std::thread::spawn(move || {
        let _ = tx.send(fs2.flush_all());
    });
    // The plan bounds the timeout to a day; the clamp keeps any other caller from overflowing.
    let deadline = std::time::Instant::now() + timeout.min(Duration::from_secs(7 * 24 * 3600));
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left.min(Duration::from_secs(1))) {
            Ok(report) if report.is_ok() => return Ok(()),
            Ok(report) => return Err(report.to_string()),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) if !left.is_zero() => progress(fs.dirty_bytes()),
            Err(_) => {
                let what = match fs.dirty_bytes() {
                    // What is left is a document, a rename or the final sync: say so rather than
                    // count 0 bytes as lost.
                    0 => "the last of them (array documents or the final sync) may not be stored".to_string(),
                    n => format!("{n} bytes of them are not stored"),
                };
                return Err(format!("storing the changes took longer than {}s (--flush-timeout); {what}", timeout.as_secs()));
            }
        }
    }
}

/// A background daemon must not hold the caller's terminal or pipes open.
/// Whatever still writes to stderr (a panic's message) goes to the log file, if there is one.
fn detach_stdio(log_file: Option<&Path>) {
    let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") else {
        return;
    };
    let log = log_file.and_then(|p| crate::logging::open_log_file(p).ok());
    use std::os::fd::AsRawFd;
    // SAFETY: dup2 onto the standard descriptors.
    unsafe {
        libc::dup2(null.as_raw_fd(), 0);
        libc::dup2(null.as_raw_fd(), 1);
        libc::dup2(log.as_ref().map_or(null.as_raw_fd(), |f| f.as_raw_fd()), 2);
    }
}

/// Whether `path` is itself mounted on (per /proc/self/mountinfo).
fn is_mount_point(path: &Path) -> bool {
    mount_type(path).is_some()
}

/// The file system type of the mount at `path` (`fuse.zarrfs` for ours), when `path` is
/// itself mounted on.
fn mount_type(path: &Path) -> Option<String> {
    mount_entry(path).map(|m| m.fstype)
}

/// The mount on `path`, found by its canonical path, or its parent's where the mount point
/// itself cannot be resolved (a dead mount, another user's).
fn mount_entry(path: &Path) -> Option<MountEntry> {
    let canonical = path.canonicalize().ok().or_else(|| Some(path.parent()?.canonicalize().ok()?.join(path.file_name()?)))?;
    mount_at(&canonical)
}

/// What /proc/self/mountinfo says of a mount.
struct MountEntry {
    /// `major:minor`: a FUSE mount's is its connection's own.
    dev: String,
    fstype: String,
    /// The user who mounted it, as a FUSE mount's `user_id=` says.
    owner: Option<u32>,
}

/// The name of user `uid`, as the password database has it.
fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: getpwuid_r writes into `pwd` and `buf`, both ours and sized as given; the name
    // it points to lies in `buf`, read before `buf` goes.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        if libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut found) != 0 || found.is_null() {
            return None;
        }
        Some(std::ffi::CStr::from_ptr(pwd.pw_name).to_string_lossy().into_owned())
    }
}

/// The mount on `path` (canonical: a dead mount point cannot be resolved any more), the last
/// one there being the one seen, when `path` is mounted on.
fn mount_at(path: &Path) -> Option<MountEntry> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines()
        .filter_map(|line| {
            // "id parent major:minor root mount-point options ... - type source options"
            let mut fields = line.split(' ');
            let dev = fields.nth(2)?;
            (unescape_octal(fields.nth(1)?) == path.as_os_str().as_bytes()).then_some(())?;
            let mut tail = line.split(" - ").nth(1)?.split(' ');
            let fstype = tail.next()?;
            let owner = tail.nth(1).and_then(|options| options.split(',').find_map(|o| o.strip_prefix("user_id=")?.parse().ok()));
            Some(MountEntry { dev: dev.to_string(), fstype: fstype.to_string(), owner })
        })
        .next_back()
}

/// A mountinfo path: the kernel writes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let code = bytes
            .get(i + 1..i + 4)
            .filter(|_| bytes[i] == b'\\')
            .and_then(|d| d.iter().try_fold(0u32, |n, &c| (b'0'..=b'7').contains(&c).then(|| n * 8 + u32::from(c - b'0'))));
        match code.and_then(|c| u8::try_from(c).ok()) {
            Some(b) => {
                out.push(b);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}

/// A killed daemon must not leave a dead mount behind (`auto_unmount`). fusermount3's own
/// auto_unmount is not used: it needs allow_other or allow_root (other users would see the mount
/// only to have it cleaned up), and it can look too early — a dying daemon closes its socket
/// before its FUSE descriptors, and a fusermount3 that looks in between (3.14 does, about one
/// kill in 30 on a busy machine) finds the mount answering ECONNABORTED, not ENOTCONN, and leaves
/// it mounted. So a child of the daemon (`zarrfs unmount-when-gone`) waits until the daemon has
/// wholly exited, its connection with it, and then detaches what is still mounted from this
/// session.
struct UnmountWhenGone(std::process::Child);

impl UnmountWhenGone {
    fn start(mountpoint: &Path) -> Option<UnmountWhenGone> {
        let started = (|| {
            let dev = mount_at(mountpoint).ok_or("the mount is not in /proc/self/mountinfo")?.dev;
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            std::process::Command::new(exe)
                .arg("unmount-when-gone")
                .arg(std::process::id().to_string())
                .arg(dev)
                .arg(mountpoint)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                // Out of the terminal's process group: a Ctrl-C stops the daemon, which unmounts.
                .process_group(0)
                .spawn()
                .map_err(|e| e.to_string())
        })();
        started.map(UnmountWhenGone).map_err(|e| tracing::warn!("a killed daemon may leave its mount behind: {e}")).ok()
    }
}

impl Drop for UnmountWhenGone {
    /// The daemon unmounts on its own way out: the helper is not needed any more.
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `zarrfs unmount-when-gone`: wait until process `pid` (the parent) has exited, then detach
/// the mount on `mountpoint` if it is still the dead one from device `dev`.
pub fn unmount_when_gone(pid: i32, dev: &str, mountpoint: &Path) -> ExitCode {
    // An orphan's parent has exited already (threads and all); waking once an hour costs nothing.
    // SAFETY: getppid cannot fail.
    while unsafe { libc::getppid() } == pid && !wait_for_exit(pid, Duration::from_secs(3600)) {}
    if mount_at(mountpoint).is_some_and(|m| m.dev == dev) && is_dead(mountpoint) {
        lazy_unmount(mountpoint);
    }
    ExitCode::SUCCESS
}

/// Whether the FUSE mount on `mountpoint` has lost its daemon. Device numbers are reused, so a
/// later mount may carry this one's: it answers. statfs always asks the daemon (a stat may be
/// answered from the kernel's cache, an open need not ask at all).
fn is_dead(mountpoint: &Path) -> bool {
    let Ok(c) = CString::new(mountpoint.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: a valid C string and a statfs buffer of the right type.
    let failed = unsafe {
        let mut buf: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut buf) != 0
    };
    failed && matches!(std::io::Error::last_os_error().raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED))
}

/// Why `zarrfs unmount` did not (wholly) succeed.
#[derive(Debug)]
pub enum Refusal {
    /// The mount is in use; nothing was done.
    Busy(String),
    /// It failed: nothing to unmount, or changes that could not be stored (the mount is gone).
    Failed(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Busy(why) | Refusal::Failed(why) => f.write_str(why),
        }
    }
}

/// `zarrfs unmount`: ask the daemon serving `mountpoint` to stop (it stores every change, then
/// unmounts), wait for it to exit, and say what it could not store. A mount in use is refused,
/// naming who uses it, unless `lazy` (the mount is then detached under them). Only zarrfs
/// mounts are touched: anything else at that path (another file system, a directory holding a
/// `.zarrfs/stats` of its own) is refused.
pub fn stop(mountpoint: &Path, lazy: bool) -> Result<(), Refusal> {
    use Refusal::Failed;
    // Mounted as root without fusermount3 the type is plain `fuse`; through it, `fuse.zarrfs`.
    let MountEntry { fstype, owner, .. } = mount_entry(mountpoint).ok_or_else(|| Failed("nothing is mounted there".into()))?;
    if fstype != "fuse" && fstype != "fuse.zarrfs" {
        return Err(Failed(format!("it is a {fstype} mount, not a zarrfs one")));
    }
    // SAFETY: getuid cannot fail.
    let me = unsafe { libc::getuid() };
    if let Some(uid) = owner.filter(|&uid| uid != me && me != 0) {
        let who = user_name(uid).map_or_else(|| format!("uid {uid}"), |name| format!("{name} (uid {uid})"));
        return Err(Failed(format!("it is {who}'s mount: only they or root can unmount it")));
    }
    let stats = match read_control_file(mountpoint, crate::fs::STATS) {
        Ok(stats) => Some(stats),
        Err(e) if e.contains("does not answer") => return Err(Failed(e)),
        Err(_) => None,
    };
    let pid = stats.and_then(|s| serde_json::from_slice::<serde_json::Value>(&s).ok()).and_then(|v| v["pid"].as_i64());
    let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()).filter(|&p| p > 0 && serves(p, mountpoint)) else {
        return match fstype.as_str() {
            "fuse.zarrfs" => unmount(mountpoint).map_err(Failed),
            _ => Err(Failed("it is a FUSE mount no zarrfs daemon serves".into())),
        };
    };
    if !lazy {
        let users = users_of(mountpoint, pid);
        if !users.is_empty() {
            return Err(Refusal::Busy(format!("it is busy: {}; close them, or unmount with --lazy", users.join(", "))));
        }
    }
    let progress = Progress::new("storing the changes");
    let said = crate::control::stop(pid as u32, |left| progress.left(left));
    progress.done();
    let outcome = match said {
        Ok(crate::control::Stopped::Stored) => Ok(()),
        Ok(crate::control::Stopped::Failed(why)) => Err(why),
        Err(e) => Err(e),
        // Signalled, the daemon stops all the same, but its word on what it stored reaches only
        // its log.
        Ok(crate::control::Stopped::NotAsked(why)) => {
            if let Some(why) = why {
                eprintln!("zarrfs: {why}; signalling the daemon instead");
            }
            // SAFETY: a signal to the daemon that reported this pid.
            if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
                return unmount(mountpoint).map_err(Failed);
            }
            Ok(())
        }
    };
    if !wait_for_exit(pid, Duration::from_secs(120)) {
        return Err(Failed(format!("the daemon (pid {pid}) did not stop within 120 s")));
    }
    if is_mount_point(mountpoint) {
        unmount(mountpoint).map_err(Failed)?;
    }
    outcome.map_err(Failed)
}

/// How long `status` and `unmount` wait for a daemon to answer a read of its control files.
const CONTROL_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// A file of the mount's `.zarrfs` directory, read through the mount on a thread of its own: a
/// daemon that is stopped (SIGSTOP) or stuck would hold the read, and the command, for ever.
/// A thread left waiting goes with the process.
fn read_control_file(mountpoint: &Path, name: &str) -> Result<Vec<u8>, String> {
    let path = mountpoint.join(crate::fs::CONTROL_DIR).join(name);
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::Builder::new()
        .name("zarrfs-control-read".into())
        .spawn(move || {
            let _ = tx.send(std::fs::read(&path));
        })
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    match rx.recv_timeout(CONTROL_READ_TIMEOUT) {
        Ok(read) => read.map_err(|e| e.to_string()),
        Err(_) => Err(format!(
            "the daemon does not answer within {} s (stopped, or stuck): `umount -l` (or `fusermount3 -uz`) detaches the mount",
            CONTROL_READ_TIMEOUT.as_secs()
        )),
    }
}

/// `zarrfs status`: what the daemon serving `mountpoint` holds and has failed to store, and its
/// recent warnings and errors. Exit status 1 when changes it failed to store are still held.
pub fn status(mountpoint: &Path) -> Result<bool, String> {
    match mount_type(mountpoint).as_deref() {
        Some("fuse" | "fuse.zarrfs") => {}
        Some(other) => return Err(format!("it is a {other} mount, not a zarrfs one")),
        None => return Err("nothing is mounted there".into()),
    }
    let stats: serde_json::Value = read_control_file(mountpoint, crate::fs::STATS)
        .map_err(|e| format!("cannot read its stats: {e}"))
        .and_then(|s| serde_json::from_slice(&s).map_err(|e| format!("its stats are not JSON: {e}")))?;
    let errors = read_control_file(mountpoint, crate::fs::ERRORS).map(|e| String::from_utf8_lossy(&e).into_owned()).unwrap_or_default();
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    // What the daemon says carries names from the store: escaped for the terminal.
    let shown = |v: &serde_json::Value| crate::error::printable(v.as_str().unwrap_or("?")).into_owned();
    println!(
        "{}: store {} (zarrfs {}, pid {})",
        mountpoint.display(),
        shown(&stats["store"]),
        stats["version"].as_str().unwrap_or("?"),
        n(&stats["pid"])
    );
    println!("  changes held, not yet stored: {}", human_bytes(n(&stats["dirty_bytes"])));
    let mut at_risk = false;
    for a in stats["arrays_changed"].as_array().into_iter().flatten() {
        let (held, failed) = (n(&a["dirty_bytes"]), n(&a["failed_stores"]));
        at_risk |= held > 0 && failed > 0;
        println!("    {}: {} held, {failed} failed store(s)", shown(&a["array"]), human_bytes(held));
    }
    println!("  failed stores: {}", n(&stats["failed_stores"]));
    if let Some(log) = stats["log"].as_str() {
        println!("  log: {log}");
    }
    let lines: Vec<&str> = errors.lines().collect();
    match lines.len() {
        0 => println!("  no warnings or errors"),
        k => {
            println!("  recent warnings and errors ({k}, newest last):");
            for line in &lines[k.saturating_sub(20)..] {
                println!("    {}", crate::error::printable(line));
            }
        }
    }
    Ok(!at_risk)
}

/// This user's zarrfs mounts (`zarrfs status` without a mount point, `zarrfs list`): a line
/// each with the mount point, the store and the changes its daemon holds. `false` when one holds
/// changes that failed to store.
pub fn list_mounts() -> Result<bool, String> {
    use std::os::unix::ffi::OsStrExt;
    let info = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    // SAFETY: getuid cannot fail.
    let owner = format!("user_id={}", unsafe { libc::getuid() });
    let mut all_stored = true;
    let mut found = 0;
    for line in info.lines() {
        // "id parent major:minor root mount-point options ... - type source super-options"
        let Some((head, tail)) = line.split_once(" - ") else { continue };
        let mut tail = tail.split(' ');
        let (Some("fuse.zarrfs"), Some(source), Some(options)) = (tail.next(), tail.next(), tail.next()) else { continue };
        let Some(point) = head.split(' ').nth(4) else { continue };
        if !options.split(',').any(|o| o == owner) {
            continue;
        }
        let point = PathBuf::from(std::ffi::OsStr::from_bytes(&unescape_octal(point)));
        let source = String::from_utf8_lossy(&unescape_octal(source)).into_owned();
        let stats = read_control_file(&point, crate::fs::STATS).ok().and_then(|s| serde_json::from_slice::<serde_json::Value>(&s).ok());
        let held = match &stats {
            Some(s) => {
                let failed = s["failed_stores"].as_u64().unwrap_or(0);
                all_stored &= failed == 0;
                let failed = if failed > 0 { format!(", {failed} failed store(s)") } else { String::new() };
                format!("{} held{failed}", human_bytes(s["dirty_bytes"].as_u64().unwrap_or(0)))
            }
            None => "its daemon does not answer".into(),
        };
        println!("{}  {}  {held}", crate::error::printable(&point.display().to_string()), crate::error::printable(&source));
        found += 1;
    }
    if found == 0 {
        println!("no zarrfs mounts of yours");
    }
    Ok(all_stored)
}

/// The processes (other than the daemon `daemon` and its children) that hold a file, a working
/// directory or a mapping beneath `mountpoint`, as "pid (name) what": what umount(8) would call
/// busy. Only the processes this user may look at are seen.
fn users_of(mountpoint: &Path, daemon: i32) -> Vec<String> {
    let Ok(mount) = mountpoint.canonicalize() else { return Vec::new() };
    let beneath = |p: &Path| p.starts_with(&mount);
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return out };
    for pid in procs.flatten().filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()) {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let parent = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok());
        if pid == me || pid == daemon || parent == Some(daemon) {
            continue;
        }
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_string();
        let mut uses = Vec::new();
        for (link, what) in [("cwd", "its working directory"), ("root", "its root")] {
            if std::fs::read_link(format!("/proc/{pid}/{link}")).is_ok_and(|p| beneath(&p)) {
                uses.push(what.to_string());
            }
        }
        for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten() {
            if let Ok(p) = std::fs::read_link(fd.path())
                && beneath(&p)
            {
                uses.push(format!("{} open", p.display()));
            }
        }
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        for path in maps.lines().filter_map(|l| l.split_whitespace().nth(5)).map(Path::new).filter(|p| beneath(p)) {
            let mapped = format!("{} mapped", path.display());
            if !uses.contains(&mapped) {
                uses.push(mapped);
            }
        }
        if !uses.is_empty() {
            out.push(format!("{pid} ({name}) has {}", uses.join(" and ")));
        }
    }
    out
}

/// Wait until process `pid` has exited (a zombie nobody reaps yet counts), at most `limit`:
/// woken by the exit itself through a pidfd, else (no pidfd, or its poll fails) by looking every
/// 20 ms.
fn wait_for_exit(pid: i32, limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if let Ok(fd) = i32::try_from(fd)
        && fd >= 0
    {
        // SAFETY: a descriptor just opened, owned here alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let mut poll = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut poll, 1, i32::try_from(left.as_millis()).unwrap_or(i32::MAX)) };
            if n > 0 {
                return true;
            }
            if n == 0 {
                return false;
            }
            // Interrupted: poll again. Any other failure (ENOMEM): look in /proc below instead,
            // so that a caller waiting in a loop never spins.
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
    }
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
    };
    while alive() {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Whether process `pid` is a zarrfs daemon serving `mountpoint` (its command line names it): a
/// stats file anyone could plant never gets another process signalled.
fn serves(pid: i32, mountpoint: &Path) -> bool {
    let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else { return false };
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let Ok(want) = mountpoint.canonicalize() else { return false };
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default();
    comm.contains("zarrfs")
        && cmdline.split(|&b| b == 0).any(|arg| {
            let arg = Path::new(std::ffi::OsStr::from_bytes(arg));
            cwd.join(arg).canonicalize().is_ok_and(|p| p == want)
        })
}

/// Unmount: the daemon sees the session end and exits.
fn unmount(mountpoint: &Path) -> Result<(), String> {
    unmount_with(mountpoint, false)
}

/// Detach the mount even while files on it are open.
fn lazy_unmount(mountpoint: &Path) {
    if let Err(e) = unmount_with(mountpoint, true) {
        tracing::warn!(mountpoint = %mountpoint.display(), "cannot detach the mount: {e}");
    }
}

/// umount2 as root; a user goes through the setuid `fusermount3 -u` (`-z`: lazily).
fn unmount_with(mountpoint: &Path, lazy: bool) -> Result<(), String> {
    let c = CString::new(mountpoint.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), if lazy { libc::MNT_DETACH } else { 0 }) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EPERM) {
        let mut fusermount = std::process::Command::new("fusermount3");
        fusermount.arg("-u").args(lazy.then_some("-z")).arg(mountpoint);
        let status = fusermount.status().map_err(|e| format!("fusermount3: {e}"))?;
        return if status.success() { Ok(()) } else { Err(format!("fusermount3 -u failed ({status})")) };
    }
    Err(err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(unescape_octal(r"/tmp/a\040b\011c\012d\134e"), b"/tmp/a b\tc\nd\\e");
        // Not an escape: kept as it is.
        assert_eq!(unescape_octal(r"/x\09\1"), br"/x\09\1");
        assert_eq!(unescape_octal(r"\777"), br"\777");
    }

    #[test]
    fn a_mount_point_with_a_space_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let spaced = dir.path().join("a b");
        std::fs::create_dir(&spaced).unwrap();
        let spaced = spaced.canonicalize().unwrap();
        assert!(mount_at(&spaced).is_none());
        // SAFETY: geteuid cannot fail. Only root may mount a tmpfs.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let c = CString::new(spaced.as_os_str().as_bytes()).unwrap();
        // SAFETY: valid C strings; unmounted below before anything may fail.
        let mounted = unsafe { libc::mount(c"zarrfs-test".as_ptr(), c.as_ptr(), c"tmpfs".as_ptr(), 0, std::ptr::null()) } == 0;
        let why = std::io::Error::last_os_error();
        let found = mount_at(&spaced).map(|m| (m.fstype, m.dev));
        // SAFETY: a valid C string.
        unsafe { libc::umount2(c.as_ptr(), 0) };
        assert!(mounted, "{why}");
        let (fstype, dev) = found.expect("the mount on \"a b\"");
        assert_eq!(fstype, "tmpfs");
        assert!(dev.contains(':'), "{dev}");
    }
}
