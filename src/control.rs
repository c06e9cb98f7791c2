//! The daemon's control socket: `zarrfs unmount` asks a daemon to stop through it and hears,
//! while the last flush runs, how much is left to store, and at the end what could not be
//! stored. A Unix socket named by the daemon's pid in a directory only the daemon's user may
//! write (`control_dir`), so no other user can put a name there first; the daemon answers its
//! own user and root only, and the client checks that the daemon it asked is the one that
//! answers.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

/// The directory of `uid`'s control sockets: its runtime directory's `zarrfs` (as systemd
/// makes `/run/user/UID`, 0700), `/run/zarrfs` for root, else `/tmp/zarrfs-UID` (as tmux and
/// ssh-agent keep theirs). Whoever finds it must find it `uid`'s own, a directory no one else
/// may write or read; one that is not names its owner: another user put it there.
fn control_dir(uid: u32) -> Result<PathBuf, String> {
    let runtime = PathBuf::from(format!("/run/user/{uid}"));
    let base = match std::fs::symlink_metadata(&runtime) {
        Ok(m) if m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0 => runtime.join("zarrfs"),
        _ if uid == 0 => PathBuf::from("/run/zarrfs"),
        _ => PathBuf::from(format!("/tmp/zarrfs-{uid}")),
    };
    private_dir(&base, uid)?;
    Ok(base)
}

/// `dir` as `uid`'s private directory: made 0700 when absent (by its user), then checked.
fn private_dir(dir: &std::path::Path, uid: u32) -> Result<(), String> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == uid {
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("control directory {}: {e}", dir.display())),
        }
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("control directory {}: {e}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        let what = if meta.file_type().is_symlink() {
            "a link"
        } else if meta.is_dir() {
            "a directory"
        } else {
            "a file"
        };
        return Err(format!(
            "control directory {} is {what} of uid {} with mode {:o}, not uid {uid}'s private one (another user made it: remove it)",
            dir.display(),
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// The socket of daemon `pid`, run by `uid`.
fn address(uid: u32, pid: u32) -> Result<PathBuf, String> {
    Ok(control_dir(uid)?.join(format!("{pid}.sock")))
}

/// The pid and uid of the process at the other end of `stream`.
fn peer(stream: &UnixStream) -> std::io::Result<(i32, u32)> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    let r = unsafe { libc::getsockopt(stream.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&raw mut cred).cast(), &mut len) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((cred.pid, cred.uid))
}

/// A request to stop, and the connection its answers go to.
pub struct StopRequest {
    stream: UnixStream,
}

impl StopRequest {
    fn send(&mut self, message: &Value) {
        // The asker may have gone (^C): the daemon stops all the same.
        let _ = writeln!(self.stream, "{message}");
    }

    /// `bytes` of changes are still to be stored.
    pub fn progress(&mut self, bytes: u64) {
        self.send(&json!({"progress": {"dirty_bytes": bytes}}));
    }

    /// The stop is done: everything stored (`Ok`), or why not.
    pub fn finish(mut self, outcome: &Result<(), String>) {
        let done = match outcome {
            Ok(()) => json!({"done": {"ok": true}}),
            Err(why) => json!({"done": {"ok": false, "error": why}}),
        };
        self.send(&done);
    }
}

/// This daemon's control socket, removed when it goes.
pub struct Listening {
    path: PathBuf,
    pub requests: crossbeam_channel::Receiver<StopRequest>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Listen for stop requests on this daemon's socket; they arrive on the channel returned.
pub fn listen() -> Result<Listening, String> {
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let path = address(me, std::process::id())?;
    // A socket left by a daemon of the same pid before (a reboot's pid reuse) is ours to replace.
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(|e| format!("cannot open the control socket {}: {e}", path.display()))?;
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::Builder::new()
        .name("zarrfs-control".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                if !matches!(peer(&stream), Ok((_, uid)) if uid == me || uid == 0) {
                    continue;
                }
                // A request is one short line: nobody can hold the daemon up by sending none.
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut line = String::new();
                let Ok(reader) = stream.try_clone() else { continue };
                if BufReader::new(reader).take(4096).read_line(&mut line).is_err() {
                    continue;
                }
                let asked: Value = serde_json::from_str(&line).unwrap_or_default();
                if asked["stop"] == json!(true) && tx.send(StopRequest { stream }).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| format!("cannot start the control thread: {e}"))?;
    Ok(Listening { path, requests: rx })
}

/// What a stop asked through the socket came to.
pub enum Stopped {
    /// Everything was stored.
    Stored,
    /// Some changes could not be: why.
    Failed(String),
    /// The daemon could not be asked (it has no control socket, or one that cannot be
    /// trusted: why, if there is more to say than that it has none).
    NotAsked(Option<String>),
}

/// Ask daemon `pid` to stop; `progress` hears how many bytes are still to be stored while its
/// last flush runs. An error when the daemon was asked and went without saying what it stored.
pub fn stop(pid: u32, mut progress: impl FnMut(u64)) -> Result<Stopped, String> {
    let Ok(proc) = std::fs::metadata(format!("/proc/{pid}")) else { return Ok(Stopped::NotAsked(None)) };
    let path = match address(proc.uid(), pid) {
        Ok(path) => path,
        Err(e) => return Ok(Stopped::NotAsked(Some(e))),
    };
    let Ok(stream) = UnixStream::connect(path) else { return Ok(Stopped::NotAsked(None)) };
    // Only the daemon itself is believed.
    if !matches!(peer(&stream), Ok((p, _)) if p as u32 == pid) {
        return Ok(Stopped::NotAsked(Some(format!("the control socket of pid {pid} is not the daemon's"))));
    }
    if let Err(e) = (&stream).write_all(format!("{}\n", json!({"stop": true})).as_bytes()) {
        return Ok(Stopped::NotAsked(Some(format!("cannot ask the daemon to stop: {e}"))));
    }
    for line in BufReader::new(&stream).lines() {
        let Ok(line) = line else { break };
        let said: Value = serde_json::from_str(&line).unwrap_or_default();
        if let Some(bytes) = said["progress"]["dirty_bytes"].as_u64() {
            progress(bytes);
        } else if said["done"]["ok"] == json!(true) {
            return Ok(Stopped::Stored);
        } else if let Some(why) = said["done"]["error"].as_str() {
            return Ok(Stopped::Failed(why.to_string()));
        }
    }
    Err("the daemon exited without saying whether its changes were stored (its log says)".into())
}
