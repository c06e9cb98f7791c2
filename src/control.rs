//! The daemon's control socket: `zarrfs unmount` asks a daemon to stop through it and hears,
//! while the last flush runs, how much is left to store, and at the end what could not be
//! stored. An abstract Unix socket named by the daemon's pid; the daemon answers its own user
//! and root only, and the client checks that the daemon it asked is the one that answers.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::Duration;

use serde_json::{Value, json};

fn address(pid: u32) -> std::io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(format!("zarrfs/{pid}/control"))
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

/// Listen for stop requests on this daemon's socket; they arrive on the channel returned.
pub fn listen() -> Result<crossbeam_channel::Receiver<StopRequest>, String> {
    let listener = UnixListener::bind_addr(&address(std::process::id()).map_err(|e| e.to_string())?)
        .map_err(|e| format!("cannot open the control socket: {e}"))?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
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
    Ok(rx)
}

/// What a stop asked through the socket came to.
pub enum Stopped {
    /// Everything was stored.
    Stored,
    /// Some changes could not be: why.
    Failed(String),
}

/// Ask daemon `pid` to stop; `progress` hears how many bytes are still to be stored while its
/// last flush runs. `None` when the daemon has no control socket (an older one).
pub fn stop(pid: u32, mut progress: impl FnMut(u64)) -> Option<Result<Stopped, String>> {
    let stream = UnixStream::connect_addr(&address(pid).ok()?).ok()?;
    // Anyone may bind a name: only the daemon itself is believed.
    if !matches!(peer(&stream), Ok((p, _)) if p as u32 == pid) {
        return Some(Err(format!("the control socket of pid {pid} is not the daemon's")));
    }
    let sent = (&stream).write_all(format!("{}\n", json!({"stop": true})).as_bytes());
    if let Err(e) = sent {
        return Some(Err(format!("cannot ask the daemon to stop: {e}")));
    }
    for line in BufReader::new(&stream).lines() {
        let Ok(line) = line else { break };
        let said: Value = serde_json::from_str(&line).unwrap_or_default();
        if let Some(bytes) = said["progress"]["dirty_bytes"].as_u64() {
            progress(bytes);
        } else if said["done"]["ok"] == json!(true) {
            return Some(Ok(Stopped::Stored));
        } else if let Some(why) = said["done"]["error"].as_str() {
            return Some(Ok(Stopped::Failed(why.to_string())));
        }
    }
    Some(Err("the daemon exited without saying whether its changes were stored (its log says)".into()))
}
