//! A mount as seen from outside its daemon: `zarrfs unmount` (asking the daemon to stop through
//! its control socket, and hearing what its last flush stored), `zarrfs status` of one mount or
//! of all, and the processes that keep a mount busy.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::mountinfo::*;
use crate::progress::{Progress, human_bytes};

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
pub(super) const CONTROL_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// A file of the mount's `.zarrfs` directory, read through the mount on a thread of its own: a
/// daemon that is stopped (SIGSTOP) or stuck would hold the read, and the command, for ever.
/// A thread left waiting goes with the process.
pub(super) fn read_control_file(mountpoint: &Path, name: &str) -> Result<Vec<u8>, String> {
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
pub(super) fn users_of(mountpoint: &Path, daemon: i32) -> Vec<String> {
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
pub(super) fn wait_for_exit(pid: i32, limit: Duration) -> bool {
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
pub(super) fn serves(pid: i32, mountpoint: &Path) -> bool {
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
pub(super) fn unmount(mountpoint: &Path) -> Result<(), String> {
    unmount_with(mountpoint, false)
}

/// Detach the mount even while files on it are open.
pub(super) fn lazy_unmount(mountpoint: &Path) {
    if let Err(e) = unmount_with(mountpoint, true) {
        tracing::warn!(mountpoint = %mountpoint.display(), "cannot detach the mount: {e}");
    }
}

/// umount2 as root; a user goes through the setuid `fusermount3 -u` (`-z`: lazily).
pub(super) fn unmount_with(mountpoint: &Path, lazy: bool) -> Result<(), String> {
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
