//! The claim of a whole store: a `flock` on its root directory, shared by every read-write
//! mount, exclusive for an offline command that moves every key (`zarrfs normalize`). Anyone who
//! can open the directory can lock it too, so a lock that keeps a claim out is honoured only
//! when a zarrfs process holds it; any other holder (another user's `flock`) is named and
//! passed by.

use std::os::fd::OwnedFd;

use rustix::fs::FlockOperation;
use rustix::io::Errno;

use super::io;
use crate::store::Claim;
use crate::{Error, Result};

/// A process holding a lock on the store root.
struct Holder {
    pid: u32,
    uid: Option<u32>,
    command: String,
}

impl Holder {
    fn is_zarrfs(&self) -> bool {
        self.command == "zarrfs" || self.command == "mount.zarrfs"
    }

    fn describe(&self) -> String {
        let user = self.uid.map_or_else(|| "an unknown user".to_string(), |uid| format!("uid {uid}"));
        format!("{} (pid {}, {user})", crate::error::printable(&self.command), self.pid)
    }
}

/// Take `claim` of the store whose root is `dir` (at `root`, for messages).
pub(super) fn take(dir: &OwnedFd, root: &std::path::Path, claim: Claim) -> Result<()> {
    let (how, what) = match claim {
        Claim::Serving => {
            (FlockOperation::NonBlockingLockShared, "an offline command (zarrfs normalize) is moving its keys: mount it once that is done")
        }
        Claim::Rewriting => (
            FlockOperation::NonBlockingLockExclusive,
            "a read-write zarrfs mount serves it: unmount it first (or mount it read-only), as this moves every chunk",
        ),
    };
    match rustix::fs::flock(dir, how) {
        Ok(()) => Ok(()),
        Err(Errno::WOULDBLOCK) => {
            let holders = holders_of(dir);
            if let Some(z) = holders.iter().find(|h| h.is_zarrfs()) {
                return Err(Error::Busy(format!("{}: {what} ({} holds it)", root.display(), z.describe())));
            }
            // Known to be no zarrfs process's: not waited for.
            if !holders.is_empty() {
                let named: Vec<String> = holders.iter().map(Holder::describe).collect();
                tracing::warn!(
                    "{}: a lock on the store root is held by {}, which is no zarrfs command: not waited for",
                    root.display(),
                    named.join(", ")
                );
                return Ok(());
            }
            Err(Error::Busy(format!("{}: {what} (its holder is not known here: another host, or another PID namespace)", root.display())))
        }
        // A file system without such locks: nothing can be claimed there.
        Err(Errno::NOLCK | Errno::NOTSUP | Errno::INVAL) => Ok(()),
        Err(e) => Err(Error::Io(io(e))),
    }
}

/// The processes that hold `flock` locks on `dir`, from `/proc/locks`; a holder that cannot be
/// read (gone, or in another PID namespace: pid 0 or -1) is left out.
fn holders_of(dir: &OwnedFd) -> Vec<Holder> {
    let Ok(stat) = rustix::fs::fstat(dir) else { return Vec::new() };
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else { return Vec::new() };
    let (major, minor) = (rustix::fs::major(stat.st_dev), rustix::fs::minor(stat.st_dev));
    let at = format!("{major:02x}:{minor:02x}:{}", stat.st_ino);
    locks
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // "1: FLOCK  ADVISORY  WRITE 1234 08:01:131090 0 EOF"; waiters are marked "->".
            let fields = if fields.get(1) == Some(&"->") { return None } else { fields };
            (fields.get(1) == Some(&"FLOCK") && fields.get(5) == Some(&at.as_str())).then(|| fields.get(4)?.parse::<u32>().ok()).flatten()
        })
        .filter(|&pid| pid > 0 && pid != std::process::id())
        .filter_map(|pid| {
            let command = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim_end().to_string();
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|u| u.split_whitespace().next()?.parse().ok());
            Some(Holder { pid, uid, command })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_programs_lock_on_the_root_is_named_and_passed_by() {
        let dir = tempfile::tempdir().unwrap();
        let open =
            || rustix::fs::open(dir.path(), rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY, rustix::fs::Mode::empty()).unwrap();
        // flock(1) holds an exclusive lock: a process that is no zarrfs command.
        struct Killed(std::process::Child);
        impl Drop for Killed {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let flock = Killed(
            std::process::Command::new("flock").arg("-x").arg(dir.path()).args(["sleep", "30"]).spawn().expect("flock (util-linux)"),
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while holders_of(&open()).is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let holders = holders_of(&open());
        let named: Vec<String> = holders.iter().map(Holder::describe).collect();
        assert!(holders.iter().any(|h| h.command == "sleep" || h.command == "flock"), "{named:?}");
        let taken = take(&open(), dir.path(), Claim::Serving);
        drop(flock);
        taken.unwrap();
    }
}
