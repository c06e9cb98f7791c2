//! A lock held in a store that has no locks of its own (object storage, memory): a lease, a
//! small value beside the key it locks, created only where none is (a conditional create) and
//! removed by its holder. A holder that is gone does not hold it for ever: one on this host
//! whose process died is seen at once; any other once its lease ran out.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::{Expect, Held, Store, Version};
use crate::{Error, Result};

/// How long a lease holds without its holder: longer than any flush that changes a shape.
const LEASE: Duration = Duration::from_secs(600);

/// Who holds a lease: host, boot, PID namespace and process, so that a holder on this machine
/// (and in this PID namespace) can be seen to be gone.
fn this_process() -> String {
    let read = |path: &str| std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default();
    let namespace = std::fs::read_link("/proc/self/ns/pid").map(|p| p.display().to_string()).unwrap_or_default();
    format!("{} {} {} {}", read("/proc/sys/kernel/hostname"), read("/proc/sys/kernel/random/boot_id"), namespace, std::process::id())
}

fn now() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// What a lease says: its holder and until when (seconds since the epoch).
struct Claim {
    holder: String,
    until: u64,
}

impl Claim {
    fn parse(bytes: &[u8]) -> Option<Claim> {
        let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        Some(Claim { holder: v.get("holder")?.as_str()?.to_string(), until: v.get("until")?.as_u64()? })
    }

    /// Whether its holder is gone: its lease ran out, or it is a process of this machine (and
    /// PID namespace) that no longer runs.
    fn is_gone(&self, me: &str) -> bool {
        // Ran out, or claims longer than any holder takes (a clock a minute off allowed): a
        // lease written to hold for ever is no holder's.
        if self.until < now() || self.until > now() + LEASE.as_secs() + 60 {
            return true;
        }
        let (theirs, mine) = (self.holder.rsplit_once(' '), me.rsplit_once(' '));
        match (theirs, mine) {
            (Some((machine, pid)), Some((my_machine, _))) if machine == my_machine => match pid.parse::<i32>() {
                Ok(pid) if pid > 0 => {
                    // SAFETY: signal 0 sends nothing; it asks whether the process exists.
                    let asked = unsafe { libc::kill(pid, 0) };
                    asked != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
                }
                _ => true,
            },
            _ => false,
        }
    }
}

/// Take the lease of `key` (`super::lock_name`), waiting at most `wait` for another holder.
pub(super) fn take(store: Arc<dyn Store>, key: &str, wait: Duration) -> Result<Held> {
    let name = super::lock_name(key);
    let me = this_process();
    let deadline = Instant::now() + wait;
    let mut pause = Duration::from_millis(5);
    // A create first: the lease is most often free, and then that is the one request.
    let mut expect = Some(Expect::Absent);
    let mut at_once = 0;
    loop {
        let claim = serde_json::json!({"holder": me, "until": now() + LEASE.as_secs()}).to_string();
        if let Some(expect) = expect {
            match store.set_if(&name, claim.as_bytes(), expect) {
                Ok(version) => return Ok(Held::new(Lease { store, name, version })),
                Err(Error::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        // Held: by a holder that is still there, or taken over.
        let seen = store.get_value(&name, 4096)?;
        let holder = match &seen {
            None => {
                expect = Some(Expect::Absent);
                None
            }
            Some(seen) => match Claim::parse(&seen.bytes) {
                Some(c) if !c.is_gone(&me) => {
                    expect = None;
                    Some(c)
                }
                gone => {
                    tracing::warn!(key = %name, holder = gone.map(|c| c.holder).unwrap_or_default(), "taking over the lock of a holder that is gone");
                    expect = Some(Expect::At(seen.version));
                    None
                }
            },
        };
        // Free or taken over: tried again at once (a few times running; then as a wait).
        if expect.is_some() && at_once < 8 {
            at_once += 1;
            continue;
        }
        at_once = 0;
        if Instant::now() >= deadline {
            let who = holder.map_or_else(
                || "another mount".to_string(),
                |c| format!("{} (for {} s more at most)", c.holder, c.until.saturating_sub(now())),
            );
            return Err(Error::Busy(format!("{key}: {who} holds its lock {name}; try again when it is done")));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

struct Lease {
    store: Arc<dyn Store>,
    name: String,
    version: Version,
}

impl Drop for Lease {
    /// Removed while it is still this holder's (where the store cannot delete conditionally,
    /// asked just before: only a holder that took it over after the lease ran out could be
    /// there instead).
    fn drop(&mut self) {
        let result = if self.store.deletes_conditionally() {
            self.store.delete_if(&self.name, Expect::At(self.version))
        } else {
            match self.store.head_current(&self.name) {
                Ok(Some(h)) if h.version == self.version => self.store.delete(&self.name),
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            }
        };
        if let Err(e) = result {
            tracing::warn!(key = %self.name, "the lock was not removed (others wait for it to run out): {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_held_once_and_taken_over_from_a_holder_that_is_gone() {
        let store: Arc<dyn Store> = Arc::new(super::super::MemoryStore::new());
        let held = take(store.clone(), "a/zarr.json", Duration::ZERO).unwrap();
        assert!(matches!(take(store.clone(), "a/zarr.json", Duration::from_millis(50)), Err(Error::Busy(_))));
        drop(held);
        assert!(store.get("a/.zarr.json.zarrfs-lock.tmp", 4096).unwrap().is_none(), "released");
        // A holder on this machine whose process is gone, and one whose lease ran out.
        let me = this_process();
        let (machine, _) = me.rsplit_once(' ').unwrap();
        for claim in [
            serde_json::json!({"holder": format!("{machine} {}", i32::MAX), "until": now() + 600}),
            serde_json::json!({"holder": "elsewhere 1", "until": now() - 1}),
            serde_json::json!({"holder": "elsewhere 1", "until": u64::MAX}),
            serde_json::json!({"not": "a lease"}),
        ] {
            store.set("a/.zarr.json.zarrfs-lock.tmp", claim.to_string().as_bytes()).unwrap();
            drop(take(store.clone(), "a/zarr.json", Duration::ZERO).unwrap());
        }
        // A live holder elsewhere is waited for, then named.
        let live = serde_json::json!({"holder": "elsewhere 1", "until": now() + 600});
        store.set("a/.zarr.json.zarrfs-lock.tmp", live.to_string().as_bytes()).unwrap();
        match take(store.clone(), "a/zarr.json", Duration::from_millis(20)) {
            Err(Error::Busy(why)) => assert!(why.contains("elsewhere 1"), "{why}"),
            other => panic!("{:?}", other.map(|_| ())),
        }
    }
}
