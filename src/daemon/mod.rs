//! The daemon: fork with a readiness pipe, logging, the signal wait, systemd notification, and
//! the flush on the way out (bounded in time). It builds the core and hands it to
//! `crate::fuse::Session`; it knows nothing of fuser or of how requests are served. The checks
//! made before forking are `preflight`; what the mount table says, `mountinfo`; the helper that
//! detaches a killed daemon's mount, `auto_unmount`; `zarrfs unmount` and `status`, `manage`.

mod auto_unmount;
mod manage;
mod mountinfo;
mod preflight;

use std::io::{Read, Write};
use std::num::NonZeroUsize;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::fs::{Config, ZarrFs};
use crate::fuse::{Session, SessionOptions};
use crate::store::{Location, REMOTE_WORKERS, RemoteOptions};

use auto_unmount::UnmountWhenGone;
pub use auto_unmount::unmount_when_gone;
pub use manage::{Refusal, list_mounts, status, stop};
use manage::{lazy_unmount, unmount};
use preflight::{not_a_store, preflight, unwritable};

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
    /// Write through lossy codecs (`Config::lossy_writes`).
    pub lossy_writes: bool,
    pub spool_dir: Option<PathBuf>,
    pub flush_timeout: Duration,
    pub max_chunk_size: Option<u64>,
    /// The header views shown (`None`: the default, all).
    pub views: Option<crate::headers::Views>,
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
    let whole_values_budget = Some(plan.cache_size.unwrap_or(Config::default().cache_size as u64));
    let remote = crate::store::RemoteOptions { metadata_ttl, whole_values_budget, ..plan.remote.clone() };
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
    config.lossy_writes = plan.lossy_writes;
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
    let spawned = std::thread::Builder::new().name("zarrfs-flush".into()).spawn(move || {
        let _ = tx.send(fs2.flush_all());
    });
    if let Err(e) = spawned {
        // No thread to be had (memory or a limit ran out): what was acknowledged is stored all
        // the same, here, with no bound on the time it takes.
        tracing::warn!("cannot start a thread to store the changes ({e}): storing them on this one, with no time bound");
        let report = fs.flush_all();
        return if report.is_ok() { Ok(()) } else { Err(report.to_string()) };
    }
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
