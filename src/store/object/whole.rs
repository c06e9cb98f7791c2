//! Values read whole from a server that ignores Range requests (`python -m http.server`): kept,
//! most recently used last, within a byte budget (the mount's cache size), so that ranges of
//! several values asked in turn (the inner chunks of four shards) fetch each value once, not
//! once per range. A value being fetched is waited for, not fetched twice.

use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex};

use crate::Result;
use crate::error::lock;
use crate::store::Version;

pub(super) struct WholeValues {
    state: Mutex<Kept>,
    fetched: Condvar,
    budget: u64,
}

struct Kept {
    values: lru::LruCache<String, (Version, Arc<[u8]>)>,
    bytes: u64,
    fetching: HashSet<String>,
}

impl WholeValues {
    pub(super) fn new(budget: u64) -> WholeValues {
        let kept = Kept { values: lru::LruCache::unbounded(), bytes: 0, fetching: HashSet::new() };
        WholeValues { state: Mutex::new(kept), fetched: Condvar::new(), budget }
    }

    /// The value of `key` at `version`: kept, or fetched by `fetch` (once, however many ask at
    /// once) and kept while the budget allows.
    pub(super) fn get(
        &self,
        key: &str,
        version: Version,
        fetch: impl FnOnce() -> Result<Option<(Version, Arc<[u8]>)>>,
    ) -> Result<Option<(Version, Arc<[u8]>)>> {
        let mut kept = lock(&self.state);
        loop {
            if let Some((v, bytes)) = kept.values.get(key)
                && *v == version
            {
                return Ok(Some((*v, bytes.clone())));
            }
            if !kept.fetching.contains(key) {
                break;
            }
            kept = self.fetched.wait(kept).unwrap_or_else(|p| p.into_inner());
        }
        kept.fetching.insert(key.to_string());
        drop(kept);
        let got = fetch();
        let mut kept = lock(&self.state);
        kept.fetching.remove(key);
        if let Ok(Some((version, bytes))) = &got {
            if let Some((_, old)) = kept.values.pop(key) {
                kept.bytes -= old.len() as u64;
            }
            let len = bytes.len() as u64;
            while kept.bytes + len > self.budget
                && let Some((_, (_, old))) = kept.values.pop_lru()
            {
                kept.bytes -= old.len() as u64;
            }
            if len <= self.budget {
                kept.values.put(key.to_string(), (*version, bytes.clone()));
                kept.bytes += len;
            }
        }
        drop(kept);
        self.fetched.notify_all();
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_fetched_once_each_within_the_budget() {
        let whole = WholeValues::new(10);
        let v = Version([1, 0, 0, 0, 0]);
        let fetches = std::sync::atomic::AtomicU64::new(0);
        let fetch = |n: usize| {
            fetches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(Some((v, Arc::from(vec![7u8; n]))))
        };
        // Two values of 4 bytes asked in turn: each fetched once.
        for _ in 0..3 {
            for key in ["a", "b"] {
                assert_eq!(whole.get(key, v, || fetch(4)).unwrap().unwrap().1.len(), 4);
            }
        }
        assert_eq!(fetches.load(std::sync::atomic::Ordering::Relaxed), 2);
        // A third one past the budget lets the least recently used go.
        whole.get("c", v, || fetch(4)).unwrap();
        whole.get("b", v, || fetch(4)).unwrap();
        assert_eq!(fetches.load(std::sync::atomic::Ordering::Relaxed), 3, "b was kept");
        whole.get("a", v, || fetch(4)).unwrap();
        assert_eq!(fetches.load(std::sync::atomic::Ordering::Relaxed), 4, "a was let go");
        // Another version is fetched again; one larger than the budget is not kept.
        whole.get("a", Version([2, 0, 0, 0, 0]), || fetch(4)).unwrap();
        whole.get("big", v, || fetch(11)).unwrap();
        whole.get("big", v, || fetch(11)).unwrap();
        assert_eq!(fetches.load(std::sync::atomic::Ordering::Relaxed), 7);
    }
}
