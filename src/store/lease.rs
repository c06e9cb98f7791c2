//! A lock held in a store that has no locks of its own (object storage, memory): a lease, a
//! small value beside the key it locks, created only where none is (a conditional create),
//! renewed by its holder while held (each renewal a conditional write, so it gets a new
//! version) and removed by its holder. No clock is trusted but one's own: a lease is taken
//! over once its version has stood unchanged for a whole term, as the taker's monotonic clock
//! measures it, or at once where its holder is a process of this machine that is gone. A
//! holder that could not renew for half a term counts itself as having lost it, before
//! anyone could take it over.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{Expect, Held, HeldLock, Store, Version};
use crate::error::lock;
use crate::{Error, Result};

/// How long a lease's version must stand unchanged before it is taken over: its holder renews
/// it every `term / 6`, and counts it lost after `term / 2` without a renewal.
const TERM: Duration = Duration::from_secs(30);

/// Who holds a lease: host, boot, PID namespace and process, so that a holder on this machine
/// (and in this PID namespace) can be seen to be gone.
fn this_process() -> String {
    let read = |path: &str| std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default();
    let namespace = std::fs::read_link("/proc/self/ns/pid").map(|p| p.display().to_string()).unwrap_or_default();
    format!("{} {} {} {}", read("/proc/sys/kernel/hostname"), read("/proc/sys/kernel/random/boot_id"), namespace, std::process::id())
}

/// What a lease says: its holder, and how many times it was renewed (what makes each renewal
/// a new value). No time: a holder's clock is not the taker's.
fn claim(holder: &str, renewal: u64) -> String {
    serde_json::json!({"holder": holder, "renewal": renewal}).to_string()
}

/// The holder a lease names, where it names one.
fn holder_of(bytes: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    Some(v.get("holder")?.as_str()?.to_string())
}

/// Whether `holder` is a process of this machine (and PID namespace) that no longer runs.
fn is_gone_here(holder: &str, me: &str) -> bool {
    match (holder.rsplit_once(' '), me.rsplit_once(' ')) {
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

/// Each lease's version as this process first saw it, and when (by its monotonic clock): a
/// version unchanged for a term is a holder's that no longer renews. Kept across waits, so
/// that a wait that gave up counts on in the next; one entry a lease waited for.
static SEEN: Mutex<Option<HashMap<String, (Version, Instant)>>> = Mutex::new(None);

/// How long this process has seen `version` of the lease `name` unchanged.
fn unchanged_for(name: &str, version: Version) -> Duration {
    let mut seen = lock(&SEEN);
    let seen = seen.get_or_insert_with(HashMap::new);
    let first = seen.entry(name.to_string()).or_insert((version, Instant::now()));
    if first.0 != version {
        *first = (version, Instant::now());
    }
    first.1.elapsed()
}

fn forget_seen(name: &str) {
    if let Some(seen) = lock(&SEEN).as_mut() {
        seen.remove(name);
    }
}

/// Take the lease of `key` (`super::lock_name`), waiting at most `wait` for another holder.
pub(super) fn take(store: Arc<dyn Store>, key: &str, wait: Duration) -> Result<Held> {
    take_for(store, key, wait, TERM)
}

fn take_for(store: Arc<dyn Store>, key: &str, wait: Duration, term: Duration) -> Result<Held> {
    let name = super::lock_name(key);
    let me = this_process();
    let deadline = Instant::now() + wait;
    let mut pause = Duration::from_millis(5);
    // A create first: the lease is most often free, and then that is the one request.
    let mut expect = Some(Expect::Absent);
    let mut at_once = 0;
    loop {
        if let Some(expect) = expect {
            match store.set_if(&name, claim(&me, 0).as_bytes(), expect) {
                Ok(version) => {
                    forget_seen(&name);
                    return Ok(Held::new(Lease::hold(store, name, me, version, term)));
                }
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
            Some(seen) => {
                let holder = holder_of(&seen.bytes);
                let gone = match &holder {
                    None => Some("no lease (unreadable)"),
                    Some(h) if is_gone_here(h, &me) => Some("its process on this machine is gone"),
                    Some(_) if unchanged_for(&name, seen.version) >= term => Some("not renewed for a whole term"),
                    Some(_) => None,
                };
                match gone {
                    Some(why) => {
                        tracing::warn!(key = %name, holder = holder.as_deref().unwrap_or_default(), "taking over the lock of a holder that is gone ({why})");
                        expect = Some(Expect::At(seen.version));
                        None
                    }
                    None => {
                        expect = None;
                        holder
                    }
                }
            }
        };
        // Free or taken over: tried again at once (a few times running; then as a wait).
        if expect.is_some() && at_once < 8 {
            at_once += 1;
            continue;
        }
        at_once = 0;
        if Instant::now() >= deadline {
            let who = holder.unwrap_or_else(|| "another mount".to_string());
            return Err(Error::Busy(format!(
                "{key}: {who} holds its lock {name} (renewing it); try again when it is done, or once it is no longer renewed ({} s)",
                term.as_secs()
            )));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

/// A lease held: renewed by a thread of its own until dropped, then removed.
struct Lease {
    state: Arc<LeaseState>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

struct LeaseState {
    store: Arc<dyn Store>,
    name: String,
    holder: String,
    term: Duration,
    held: Mutex<Holding>,
    stop: Condvar,
}

struct Holding {
    /// The lease's version as last stored; `None` once another holder took it over.
    version: Option<Version>,
    renewals: u64,
    /// When it was last stored (this holder's monotonic clock).
    renewed: Instant,
    stopping: bool,
}

impl Lease {
    fn hold(store: Arc<dyn Store>, name: String, holder: String, version: Version, term: Duration) -> Lease {
        let state = Arc::new(LeaseState {
            store,
            name,
            holder,
            term,
            held: Mutex::new(Holding { version: Some(version), renewals: 0, renewed: Instant::now(), stopping: false }),
            stop: Condvar::new(),
        });
        let renewing = state.clone();
        let renewer = std::thread::Builder::new()
            .name("zarrfs-lease".into())
            .spawn(move || renewing.renew_until_stopped())
            .inspect_err(|e| tracing::warn!(key = %state.name, "no thread to renew the lock: it is confirmed before use only ({e})"))
            .ok();
        Lease { state, renewer }
    }
}

impl LeaseState {
    fn renew_until_stopped(&self) {
        let mut held = lock(&self.held);
        loop {
            held = self.stop.wait_timeout(held, self.term / 6).unwrap_or_else(|p| p.into_inner()).0;
            if held.stopping || held.version.is_none() {
                return;
            }
            drop(held);
            if let Err(e) = self.renew() {
                tracing::warn!(key = %self.name, "the lock was not renewed: {e}");
            }
            held = lock(&self.held);
        }
    }

    /// Store the lease again over the version last stored: still this holder's, for another
    /// term. Fails with `Error::Busy` once it is not.
    fn renew(&self) -> Result<()> {
        let (version, renewal) = {
            let mut held = lock(&self.held);
            let Some(version) = held.version else { return Err(self.lost()) };
            // Not renewed for half a term: a taker may count it unrenewed soon; no longer held.
            if held.renewed.elapsed() >= self.term / 2 {
                held.version = None;
                return Err(self.lost());
            }
            held.renewals += 1;
            (version, held.renewals)
        };
        let started = Instant::now();
        let stored = self.store.set_if(&self.name, claim(&self.holder, renewal).as_bytes(), Expect::At(version));
        let mut held = lock(&self.held);
        match stored {
            Ok(version) => {
                held.version = Some(version);
                // Counted from when the request was sent: a taker may have seen the old
                // version from then on.
                held.renewed = started;
                Ok(())
            }
            Err(Error::Conflict { .. }) => {
                held.version = None;
                Err(self.lost())
            }
            Err(e) => Err(e),
        }
    }

    fn lost(&self) -> Error {
        Error::Busy(format!("{}: this mount's lock was taken over by another (it could not be renewed in time)", self.name))
    }
}

impl HeldLock for Lease {
    /// Renewed now: held for half a term more at least, or lost.
    fn confirm(&self) -> Result<()> {
        self.state.renew()
    }
}

impl Drop for Lease {
    /// The renewals stop; the lease is removed while it is still this holder's (where the
    /// store cannot delete conditionally, asked just before: only a holder that took it over
    /// could be there instead).
    fn drop(&mut self) {
        lock(&self.state.held).stopping = true;
        self.state.stop.notify_all();
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.join();
        }
        let Some(version) = lock(&self.state.held).version else { return };
        let store = &self.state.store;
        let result = if store.deletes_conditionally() {
            store.delete_if(&self.state.name, Expect::At(version))
        } else {
            match store.head_current(&self.state.name) {
                Ok(Some(h)) if h.version == version => store.delete(&self.state.name),
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            }
        };
        if let Err(e) = result {
            tracing::warn!(key = %self.state.name, "the lock was not removed (others take it over once it stands unrenewed for {} s): {e}", self.state.term.as_secs());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: &str = "a/.zarr.json.zarrfs-lock.tmp";

    #[test]
    fn a_lease_is_held_once_and_taken_over_from_a_holder_that_is_gone() {
        let store: Arc<dyn Store> = Arc::new(super::super::MemoryStore::new());
        let held = take(store.clone(), "a/zarr.json", Duration::ZERO).unwrap();
        assert!(matches!(take(store.clone(), "a/zarr.json", Duration::from_millis(50)), Err(Error::Busy(_))));
        drop(held);
        assert!(store.get(LOCK, 4096).unwrap().is_none(), "released");
        // A holder on this machine whose process is gone, and what is no lease: at once.
        let me = this_process();
        let (machine, _) = me.rsplit_once(' ').unwrap();
        for lease in [serde_json::json!({"holder": format!("{machine} {}", i32::MAX)}), serde_json::json!({"not": "a lease"})] {
            store.set(LOCK, lease.to_string().as_bytes()).unwrap();
            drop(take(store.clone(), "a/zarr.json", Duration::ZERO).unwrap());
        }
        // A holder elsewhere that no longer renews: taken over once a term has passed with no
        // new version, whatever time the lease claims to hold until.
        let stale = serde_json::json!({"holder": "elsewhere 1", "until": u64::MAX});
        store.set(LOCK, stale.to_string().as_bytes()).unwrap();
        let term = Duration::from_millis(300);
        match take_for(store.clone(), "a/zarr.json", Duration::from_millis(20), term) {
            Err(Error::Busy(why)) => assert!(why.contains("elsewhere 1"), "{why}"),
            other => panic!("{:?}", other.map(|_| ())),
        }
        let started = Instant::now();
        drop(take_for(store.clone(), "a/zarr.json", Duration::from_secs(5), term).unwrap());
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn a_holder_that_renews_is_never_taken_over_and_one_that_was_knows_it() {
        let store: Arc<dyn Store> = Arc::new(super::super::MemoryStore::new());
        let term = Duration::from_millis(600);
        // A holder whose clock is anything: it renews, so a taker waiting three terms waits.
        let held = take_for(store.clone(), "a/zarr.json", Duration::ZERO, term).unwrap();
        let before = store.get_value(LOCK, 4096).unwrap().unwrap().version;
        assert!(matches!(take_for(store.clone(), "a/zarr.json", term * 3, term), Err(Error::Busy(_))));
        assert_ne!(store.get_value(LOCK, 4096).unwrap().unwrap().version, before, "not renewed");
        held.confirm().unwrap();
        // Taken from it (as by a taker after a partition): its next confirm says so.
        store.set(LOCK, claim("elsewhere 2", 0).as_bytes()).unwrap();
        assert!(matches!(held.confirm(), Err(Error::Busy(_))));
        drop(held);
        assert_eq!(
            holder_of(&store.get(LOCK, 4096).unwrap().unwrap()).as_deref(),
            Some("elsewhere 2"),
            "the new holder's lease was removed"
        );
    }
}
