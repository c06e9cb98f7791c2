//! The command line: `mount` (daemonizing, with readiness), `unmount`, `info`; the libfuse
//! `-o a,b,c` option form; signals; logging.

use std::ffi::{CString, OsString};
use std::io::{Read, Write};
use std::num::NonZeroUsize;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::fs::{Config, ZarrFs};
use crate::fuse::FuseAdapter;
use crate::store::{LocalStore, Store};

#[derive(Parser, Debug)]
#[command(name = "zarrfs", version, about = "Mount a Zarr store as a directory tree in which every array is one flat raw file")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Mount STORE on MOUNTPOINT; returns once the mount is live (the daemon keeps running).
    Mount(MountArgs),
    /// Unmount a zarrfs mount point; the daemon then exits.
    Unmount { mountpoint: PathBuf },
    /// Switch an array to the offset chunk key encoding with zero offsets (metadata only).
    Adopt { store: PathBuf, array: String },
    /// Prepend FILE (raw, C order, little-endian; whole chunks along the axis) to an array.
    Prepend {
        store: PathBuf,
        array: String,
        file: PathBuf,
        /// The axis to grow at its front.
        #[arg(long, default_value_t = 0)]
        axis: usize,
    },
    /// Print the hierarchy: arrays, shapes, data types, grids, chunk keys, codecs, problems.
    Info {
        store: PathBuf,
        /// A node inside the store (default: the root).
        path: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args, Debug)]
struct MountArgs {
    store: PathBuf,
    mountpoint: PathBuf,
    /// Stay in the foreground.
    #[arg(short, long)]
    foreground: bool,
    /// Refuse every write (EROFS).
    #[arg(long)]
    read_only: bool,
    /// Switch default-encoded arrays to the offset chunk key encoding when prepend is opened.
    #[arg(long)]
    adopt_offset: bool,
    /// Where bytes written to prepend are staged (default: the system temp dir).
    #[arg(long)]
    spool_dir: Option<PathBuf>,
    /// Decoded-chunk cache size, e.g. 512M or 2G.
    #[arg(long, value_parser = parse_size)]
    cache_size: Option<u64>,
    /// Seconds the shutdown may spend storing changes before it gives up.
    #[arg(long, default_value_t = 30)]
    flush_timeout: u64,
    /// Do not have fusermount3 unmount a daemon that dies (auto_unmount is on when it exists).
    #[arg(long)]
    no_auto_unmount: bool,
    /// Changed chunks held in memory before they are written back, e.g. 256M.
    #[arg(long, value_parser = parse_size)]
    dirty_limit: Option<u64>,
    /// FUSE request threads (1 to 1024).
    #[arg(long, value_parser = parse_threads)]
    threads: Option<NonZeroUsize>,
    /// The most bytes one decoded chunk (or shard) may take, e.g. 2G: arrays whose chunks are
    /// larger show an `error` file instead.
    #[arg(long, value_parser = parse_size)]
    max_chunk_size: Option<u64>,
    /// Log to this file (a background daemon otherwise logs to syslog, `-f` to stderr).
    #[arg(long)]
    log_file: Option<PathBuf>,
    /// Mount options, comma-separated: ro, allow_other, auto_unmount, cache_size=2G, threads=16, …
    #[arg(short = 'o', action = clap::ArgAction::Append)]
    options: Vec<String>,
    /// More log output (-v debug, -vv trace).
    #[arg(short, action = clap::ArgAction::Count)]
    verbose: u8,
}

/// Everything a mount needs, after flags and `-o` options are merged.
#[derive(Debug, Default)]
struct MountPlan {
    read_only: bool,
    allow_other: bool,
    allow_root: bool,
    auto_unmount: bool,
    cache_size: Option<u64>,
    dirty_limit: Option<u64>,
    threads: Option<NonZeroUsize>,
    adopt_offset: bool,
    spool_dir: Option<PathBuf>,
    flush_timeout: Duration,
    max_chunk_size: Option<u64>,
}

/// fusermount3 on PATH (needed for auto_unmount).
fn fusermount3() -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join("fusermount3")).find(|p| p.is_file())
}

/// Options mount(8) and mount.fuse3 pass that mean nothing to us.
fn is_generic_option(o: &str) -> bool {
    matches!(
        o,
        "dev"
            | "suid"
            | "nodev"
            | "nosuid"
            | "exec"
            | "noexec"
            | "auto"
            | "noauto"
            | "user"
            | "nouser"
            | "users"
            | "nofail"
            | "_netdev"
            | "atime"
            | "noatime"
            | "relatime"
            | "async"
            | "defaults"
    ) || o.starts_with("x-")
}

fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t.strip_suffix("iB").or_else(|| t.strip_suffix('B')).unwrap_or(t);
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("size {s:?}: unknown unit {c:?} (use K, M, G or T)")),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| format!("size {s:?} is not a number with an optional K/M/G/T unit"))?;
    if n.is_nan() || n < 0.0 {
        return Err(format!("size {s:?} must not be negative"));
    }
    let bytes = n * mult as f64;
    // Past 2^63 a size means nothing on any machine (and would saturate silently).
    if bytes >= (1u64 << 63) as f64 {
        return Err(format!("size {s:?} is too large"));
    }
    Ok(bytes as u64)
}

/// More threads than this would only fail to start (the kernel serves a few dozen at most).
const MAX_THREADS: usize = 1024;

fn parse_threads(s: &str) -> Result<NonZeroUsize, String> {
    match s.parse::<NonZeroUsize>() {
        Ok(n) if n.get() <= MAX_THREADS => Ok(n),
        _ => Err(format!("threads {s:?}: expected a whole number from 1 to {MAX_THREADS}")),
    }
}

impl MountPlan {
    fn from_args(args: &MountArgs) -> Result<MountPlan, String> {
        let mut plan = MountPlan {
            read_only: args.read_only,
            cache_size: args.cache_size,
            dirty_limit: args.dirty_limit,
            threads: args.threads,
            adopt_offset: args.adopt_offset,
            spool_dir: args.spool_dir.clone(),
            flush_timeout: Duration::from_secs(args.flush_timeout),
            max_chunk_size: args.max_chunk_size,
            auto_unmount: !args.no_auto_unmount && fusermount3().is_some(),
            ..Default::default()
        };
        for list in &args.options {
            for o in split_options(list) {
                let (key, value) = match o.split_once('=') {
                    Some((k, v)) => (k, Some(v)),
                    None => (o.as_str(), None),
                };
                match (key, value) {
                    // As in libfuse, the last of ro and rw wins.
                    ("ro", None) => plan.read_only = true,
                    ("rw", None) => plan.read_only = false,
                    ("allow_other", None) => plan.allow_other = true,
                    ("allow_root", None) => plan.allow_root = true,
                    ("auto_unmount", None) => plan.auto_unmount = true,
                    ("noauto_unmount", None) => plan.auto_unmount = false,
                    ("flush_timeout", Some(v)) => {
                        plan.flush_timeout =
                            Duration::from_secs(v.parse().map_err(|_| format!("option flush_timeout={v}: expected seconds"))?)
                    }
                    // Always on (see run_mount).
                    ("default_permissions", None) => {}
                    ("cache_size", Some(v)) => plan.cache_size = Some(parse_size(v)?),
                    ("dirty_limit", Some(v)) => plan.dirty_limit = Some(parse_size(v)?),
                    ("adopt_offset", None) => plan.adopt_offset = true,
                    ("spool_dir", Some(v)) => plan.spool_dir = Some(PathBuf::from(v)),
                    ("threads", Some(v)) => plan.threads = Some(parse_threads(v)?),
                    ("max_chunk_size", Some(v)) => plan.max_chunk_size = Some(parse_size(v)?),
                    (k, None) if is_generic_option(k) => {}
                    (k, _) if k.starts_with("x-") => {}
                    _ => return Err(format!("unknown mount option {o:?}")),
                }
            }
        }
        if plan.allow_other && plan.allow_root {
            return Err("allow_other and allow_root cannot be combined".into());
        }
        Ok(plan)
    }
}

/// Split a `-o` list on commas, honouring `\,` escapes.
fn split_options(list: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = list.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(n), Some(s)) = (chars.next(), out.last_mut()) {
                    s.push(n);
                }
            }
            ',' => out.push(String::new()),
            c => {
                if let Some(s) = out.last_mut() {
                    s.push(c);
                }
            }
        }
    }
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

/// `zarrfs SOURCE MOUNTPOINT -o …` (as mount.fuse3 and a `mount.zarrfs` link run it) means
/// `zarrfs mount SOURCE MOUNTPOINT -o …`.
fn normalize_args(mut args: Vec<OsString>) -> Vec<OsString> {
    let first = args.get(1).and_then(|a| a.to_str()).unwrap_or("");
    let is_command =
        ["mount", "unmount", "info", "adopt", "prepend", "help"].contains(&first) || first.starts_with('-') || first.is_empty();
    if !is_command {
        args.insert(1, OsString::from("mount"));
    }
    args
}

/// As `mount.zarrfs` (a link mount(8) runs for `-t zarrfs`): `SOURCE DIR [-sfnv] [-N NS]
/// [-o OPTS] [-t TYPE]` becomes `zarrfs mount SOURCE DIR -o OPTS`. `None`: a fake mount (-f).
fn helper_args(args: Vec<OsString>) -> Option<Vec<OsString>> {
    let mut out: Vec<OsString> = vec!["zarrfs".into(), "mount".into()];
    let mut rest = args.into_iter().skip(1);
    while let Some(a) = rest.next() {
        match a.to_str() {
            Some("-o") => {
                out.push("-o".into());
                out.extend(rest.next());
            }
            Some("-N" | "-t") => {
                rest.next();
            }
            Some(flags) if flags.starts_with('-') && flags.len() > 1 && flags[1..].chars().all(|c| "sfnvwr".contains(c)) => {
                if flags.contains('f') {
                    return None;
                }
                if flags.contains('r') {
                    out.push("-o".into());
                    out.push("ro".into());
                }
            }
            _ => out.push(a),
        }
    }
    Some(out)
}

pub fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    let program = args.first().map(Path::new).and_then(Path::file_name).and_then(|n| n.to_str()).unwrap_or("").to_string();
    if program == "mount.zarrfs" {
        match helper_args(args) {
            Some(a) => args = a,
            None => return ExitCode::SUCCESS,
        }
    }
    let cli = match Cli::try_parse_from(normalize_args(args)) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    match cli.command {
        Command::Mount(args) => mount(args),
        Command::Unmount { mountpoint } => match stop_daemon(&mountpoint) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("zarrfs: cannot unmount {}: {e}", mountpoint.display());
                ExitCode::FAILURE
            }
        },
        Command::Adopt { store, array } => offline(&store, &array, |a| {
            let adopted = a.adopted_offset()?;
            adopted.store_metadata()?;
            println!("{}: chunk key encoding {}", array, adopted.meta.key_encoding.describe());
            Ok(())
        }),
        Command::Prepend { store, array, file, axis } => offline(&store, &array, |a| {
            let f = std::fs::File::open(&file)?;
            let len = f.metadata()?.len();
            let read_at = &mut |offset, buf: &mut [u8]| std::os::unix::fs::FileExt::read_exact_at(&f, buf, offset);
            let started = std::time::Instant::now();
            match a.prepend(axis, len, read_at)? {
                Some(next) => {
                    let chunks = started.elapsed();
                    next.store_metadata()?;
                    let metadata = started.elapsed() - chunks;
                    println!("{}: shape {:?}, chunk key encoding {}", array, next.meta.shape, next.meta.key_encoding.describe());
                    eprintln!("new chunks stored in {:.6} s; metadata written in {:.6} s", chunks.as_secs_f64(), metadata.as_secs_f64());
                }
                None => println!("{array}: nothing to prepend"),
            }
            Ok(())
        }),
        Command::Info { store, path, json } => {
            let store = match LocalStore::open(&store) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("zarrfs: store {}: {e}", store.display());
                    return ExitCode::FAILURE;
                }
            };
            let path = path.unwrap_or_default().trim_matches('/').to_string();
            match crate::info::collect(&store, &path) {
                Ok(nodes) if json => {
                    println!("{}", serde_json::to_string_pretty(&nodes).unwrap_or_default());
                    ExitCode::SUCCESS
                }
                Ok(nodes) => {
                    print!("{}", crate::info::render(&nodes));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("zarrfs: {}: {e}", store.root().display());
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Run an offline change on one array of a store.
fn offline(store: &Path, array: &str, change: impl FnOnce(&crate::zarr::array::Array) -> crate::Result<()>) -> ExitCode {
    let path = array.trim_matches('/');
    let result = LocalStore::open(store).and_then(|s| crate::zarr::array::Array::open(Arc::new(s), path)).and_then(|a| change(&a));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zarrfs: {}/{path}: {e}", store.display());
            ExitCode::FAILURE
        }
    }
}

/// Check what can be checked before forking, so that errors reach the caller's terminal.
fn preflight(args: &MountArgs) -> Result<(), String> {
    if !args.store.is_dir() {
        return Err(format!("store {} is not a directory", args.store.display()));
    }
    let store = LocalStore::open(&args.store).map_err(|e| format!("store {}: {e}", args.store.display()))?;
    let has_node =
        ["zarr.json", ".zgroup", ".zarray"].iter().any(|k| matches!(store.get(k, crate::zarr::limits::MAX_DOCUMENT_BYTES), Ok(Some(_))));
    if !has_node {
        return Err(format!("{} is not a Zarr store: no zarr.json, .zgroup or .zarray at its root", args.store.display()));
    }
    if !args.mountpoint.is_dir() {
        return Err(format!("mount point {} is not a directory", args.mountpoint.display()));
    }
    if is_mount_point(&args.mountpoint) {
        return Err(format!("mount point {} is busy: something is mounted there", args.mountpoint.display()));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("no FUSE device (/dev/fuse): load the fuse module or run where FUSE is available".into());
    }
    Ok(())
}

fn mount(args: MountArgs) -> ExitCode {
    let plan = match MountPlan::from_args(&args).and_then(|p| preflight(&args).map(|_| p)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("zarrfs: {e}");
            return ExitCode::from(2);
        }
    };
    // In the background: fork now, before any thread exists; the parent waits for the child's
    // word that the mount is live.
    let ready_pipe = if args.foreground {
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
    // The first report goes to the waiting parent and closes the pipe, which releases it.
    let ready_pipe = std::cell::Cell::new(ready_pipe);
    let report = |msg: &str| match ready_pipe.take() {
        Some(fd) => {
            let _ = std::fs::File::from(fd).write_all(msg.as_bytes());
        }
        None if !msg.is_empty() && msg != "ok" => eprintln!("zarrfs: {msg}"),
        None => {}
    };
    let target = match (&args.log_file, background) {
        (Some(f), _) => crate::logging::LogTarget::File(f),
        (None, true) => crate::logging::LogTarget::Syslog,
        (None, false) => crate::logging::LogTarget::Stderr,
    };
    if let Err(e) = crate::logging::init(args.verbose, target) {
        report(&e);
        return ExitCode::FAILURE;
    }
    match run_mount(&args, &plan, report, background) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            report(&e);
            ExitCode::FAILURE
        }
    }
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

fn run_mount(args: &MountArgs, plan: &MountPlan, report: impl Fn(&str), background: bool) -> Result<(), String> {
    // Block the shutdown signals before any thread starts: every thread inherits the mask and
    // the main thread alone takes them, with sigtimedwait.
    let signals = signal_set();
    // SAFETY: setting this thread's mask.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut()) };

    // The store root is held open from here on: a store moved or replaced while mounted is
    // never written at its old path.
    let store: Arc<dyn Store> = Arc::new(LocalStore::open(&args.store).map_err(|e| format!("store {}: {e}", args.store.display()))?);
    let mut config = Config { read_only: plan.read_only, ..Config::default() };
    if let Some(n) = plan.cache_size {
        config.cache_size = n as usize;
    }
    if let Some(n) = plan.dirty_limit {
        config.dirty_limit = n as usize;
    }
    config.adopt_offset = plan.adopt_offset;
    if let Some(dir) = &plan.spool_dir {
        config.spool_dir = dir.clone();
    }
    crate::fs::prepare_spool_dir(&config.spool_dir).map_err(|e| e.to_string())?;
    if let Some(n) = plan.max_chunk_size {
        crate::zarr::limits::set_max_chunk_bytes(n);
    }
    let fs = Arc::new(ZarrFs::new(store, config));

    let mut fuse_config = fuser::Config::default();
    let mut options = vec![
        fuser::MountOption::FSName(args.store.display().to_string()),
        fuser::MountOption::Subtype("zarrfs".into()),
        fuser::MountOption::NoAtime,
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
    ];
    if plan.read_only {
        options.push(fuser::MountOption::RO);
    }
    // The kernel checks every access against the owner and mode shown (the daemon's user, 0644
    // for data, 0200 for prepend): with allow_other, other users may do exactly what those allow.
    options.push(fuser::MountOption::DefaultPermissions);
    if plan.auto_unmount {
        options.push(fuser::MountOption::AutoUnmount);
    }
    fuse_config.acl = if plan.allow_other || (plan.auto_unmount && !plan.allow_root) {
        fuser::SessionACL::All
    } else if plan.allow_root {
        fuser::SessionACL::RootAndOwner
    } else {
        fuser::SessionACL::Owner
    };
    fuse_config.mount_options = options;
    fuse_config.n_threads = Some(plan.threads.map_or(8, NonZeroUsize::get));
    // SAFETY: geteuid cannot fail. As root /dev/fuse is opened directly, so cloned fds work.
    fuse_config.clone_fd = unsafe { libc::geteuid() } == 0;

    let session = fuser::Session::new(FuseAdapter::new(fs.clone()), &args.mountpoint, &fuse_config)
        .map_err(|e| format!("cannot mount {} on {}: {e}", args.store.display(), args.mountpoint.display()))?;
    fs.set_kernel_cache(Box::new(crate::fuse::Invalidator::new(session.notifier())));
    let bg = session.spawn().map_err(|e| format!("cannot start the FUSE session: {e}"))?;
    tracing::info!(store = %args.store.display(), mountpoint = %args.mountpoint.display(), "mounted");
    report("ok");
    // Under systemd (Type=notify): ready now that the mount answers.
    let notify = std::env::var_os("NOTIFY_SOCKET").is_some();
    if notify {
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    }
    if background {
        detach_stdio(args.log_file.is_some());
    }

    // Wait for a signal, or for the session to end (an external umount).
    let timeout = libc::timespec { tv_sec: 0, tv_nsec: 200_000_000 };
    loop {
        if bg.guard.is_finished() {
            let _ = bg.join();
            tracing::info!(mountpoint = %args.mountpoint.display(), "unmounted from outside");
            return flush_within(&fs, plan.flush_timeout);
        }
        // SAFETY: waits on the blocked set; no memory is shared.
        let sig = unsafe { libc::sigtimedwait(&signals, std::ptr::null_mut(), &timeout) };
        if sig > 0 {
            tracing::info!(signal = sig, "shutting down");
            break;
        }
    }
    // Stop taking changes, store what was acknowledged, then unmount.
    fs.stop_changes();
    if notify {
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    }
    let flushed = flush_within(&fs, plan.flush_timeout);
    match unmount(&args.mountpoint) {
        Ok(()) => {
            // The kernel ends the session; wait for it (briefly: a stuck request must not keep us).
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while !bg.guard.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Err(e) => {
            tracing::warn!("unmount failed ({e}); detaching the mount lazily");
            lazy_unmount(&args.mountpoint);
        }
    }
    tracing::info!(mountpoint = %args.mountpoint.display(), "unmounted");
    flushed
}

/// Flush everything, giving up after `timeout` (the daemon must stop in bounded time).
fn flush_within(fs: &Arc<ZarrFs>, timeout: Duration) -> Result<(), String> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let fs2 = fs.clone();
    std::thread::spawn(move || {
        let _ = tx.send(fs2.flush_all());
    });
    match rx.recv_timeout(timeout) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("some changes could not be stored: {e}")),
        Err(_) => Err(format!("flushing took longer than {}s; unstored changes are lost", timeout.as_secs())),
    }
}

/// A background daemon must not hold the caller's terminal or pipes open.
fn detach_stdio(keep_stderr: bool) {
    let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") else {
        return;
    };
    use std::os::fd::AsRawFd;
    // SAFETY: dup2 onto the standard descriptors.
    unsafe {
        libc::dup2(null.as_raw_fd(), 0);
        libc::dup2(null.as_raw_fd(), 1);
        if !keep_stderr {
            libc::dup2(null.as_raw_fd(), 2);
        }
    }
}

/// Whether `path` is itself mounted on (per /proc/self/mountinfo).
fn is_mount_point(path: &Path) -> bool {
    mount_type(path).is_some()
}

/// The file system type of the mount at `path` (`fuse.zarrfs` for ours), when `path` is
/// itself mounted on (per /proc/self/mountinfo; the last mount there is the one seen).
fn mount_type(path: &Path) -> Option<String> {
    let want = path.canonicalize().ok()?.to_string_lossy().into_owned();
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines()
        .filter(|l| l.split(' ').nth(4) == Some(want.as_str()))
        .filter_map(|l| l.split(" - ").nth(1)?.split(' ').next().map(str::to_string))
        .next_back()
}

fn lazy_unmount(mountpoint: &Path) {
    if let Ok(c) = CString::new(mountpoint.as_os_str().as_encoded_bytes()) {
        // SAFETY: a valid C string.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// `zarrfs unmount`: ask the daemon serving `mountpoint` to stop (it stores every change, then
/// unmounts) and wait for it to exit. Only zarrfs mounts are touched: anything else at that
/// path (another file system, a directory holding a `.zarrfs/stats` of its own) is refused.
fn stop_daemon(mountpoint: &Path) -> Result<(), String> {
    // Mounted as root without fusermount3 the type is plain `fuse`; through it, `fuse.zarrfs`.
    let fstype = mount_type(mountpoint).ok_or("nothing is mounted there")?;
    if fstype != "fuse" && fstype != "fuse.zarrfs" {
        return Err(format!("it is a {fstype} mount, not a zarrfs one"));
    }
    let stats = std::fs::read(mountpoint.join(crate::fs::CONTROL_DIR).join(crate::fs::STATS)).ok();
    let pid = stats.and_then(|s| serde_json::from_slice::<serde_json::Value>(&s).ok()).and_then(|v| v["pid"].as_i64());
    let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()).filter(|&p| p > 0 && serves(p, mountpoint)) else {
        return match fstype.as_str() {
            "fuse.zarrfs" => unmount(mountpoint),
            _ => Err("it is a FUSE mount no zarrfs daemon serves".into()),
        };
    };
    // SAFETY: a signal to the daemon that reported this pid.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        return unmount(mountpoint);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    // Gone, or a zombie nobody reaps yet.
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
    };
    while alive() {
        if std::time::Instant::now() > deadline {
            return Err(format!("the daemon (pid {pid}) did not stop within 120 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if is_mount_point(mountpoint) { unmount(mountpoint) } else { Ok(()) }
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
    let c = CString::new(mountpoint.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EPERM) {
        let status =
            std::process::Command::new("fusermount3").arg("-u").arg(mountpoint).status().map_err(|e| format!("fusermount3: {e}"))?;
        return if status.success() { Ok(()) } else { Err(format!("fusermount3 -u failed ({status})")) };
    }
    Err(err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(opts: &[&str]) -> MountArgs {
        let mut v: Vec<OsString> = ["zarrfs", "mount", "s", "m"].iter().map(OsString::from).collect();
        v.extend(opts.iter().map(OsString::from));
        match Cli::try_parse_from(v).unwrap().command {
            Command::Mount(a) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn options() {
        let p =
            MountPlan::from_args(&args(&["-o", "ro,allow_other,cache_size=2G", "-o", "nodev,nosuid,x-systemd.automount,_netdev"])).unwrap();
        assert!(p.read_only && p.allow_other);
        assert_eq!(p.cache_size, Some(2 << 30));
        assert!(MountPlan::from_args(&args(&["-o", "bogus"])).unwrap_err().contains("bogus"));
        assert!(MountPlan::from_args(&args(&["-o", "cache_size=lots"])).is_err());
        assert_eq!(split_options(r"a,b\,c,,d"), vec!["a", "b,c", "d"]);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        let fstab = normalize_args(["zarrfs", "/data/x.zarr", "/mnt/x", "-o", "ro"].iter().map(OsString::from).collect());
        assert_eq!(fstab[1], "mount");
        let helper = helper_args(
            ["mount.zarrfs", "/d/x.zarr", "/mnt/x", "-n", "-o", "ro,nofail", "-t", "zarrfs"].iter().map(OsString::from).collect(),
        );
        assert_eq!(helper.unwrap(), ["zarrfs", "mount", "/d/x.zarr", "/mnt/x", "-o", "ro,nofail"].map(OsString::from));
        assert!(helper_args(["mount.zarrfs", "a", "b", "-fv"].iter().map(OsString::from).collect()).is_none());
    }
}
