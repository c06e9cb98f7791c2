//! The decoded-chunk cache: an LRU bounded in bytes, with in-flight deduplication (two readers
//! of one missing chunk decode it once). Who decodes is the caller's business (`crate::pool`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use lru::LruCache;

use crate::Result;
use crate::error::lock;
use crate::store::Version;
use crate::zarr::codec::ShardIndex;

/// What the cache holds for a key.
#[derive(Debug)]
pub enum Cached {
    /// The key is absent from the store: the chunk reads as fill.
    Missing,
    /// A decoded chunk, C order, little-endian, with the version of the stored value it was
    /// decoded from when that is a whole value (not an inner chunk of a shard).
    Chunk { decoded: Vec<u8>, version: Option<Version> },
    /// A decoded shard index, with the version of the shard it was read from: inner chunks are
    /// read at its offsets only from that version.
    Index { index: ShardIndex, version: Version },
    /// The rendered text of a band of a variable-length array.
    Text(Vec<u8>),
}

impl Cached {
    pub fn chunk(v: Option<Vec<u8>>) -> Cached {
        v.map_or(Cached::Missing, |decoded| Cached::Chunk { decoded, version: None })
    }

    pub fn index(v: Option<(ShardIndex, Version)>) -> Cached {
        v.map_or(Cached::Missing, |(index, version)| Cached::Index { index, version })
    }

    /// Bytes charged against the capacity: the value's, and the entry's own (its key, list node,
    /// map slot and `Arc`; a million missing chunks held took 146 MiB, about 150 bytes each).
    fn cost(&self) -> usize {
        160 + match self {
            Cached::Missing => 0,
            Cached::Chunk { decoded, .. } => decoded.len(),
            Cached::Index { index, .. } => index.byte_len(),
            Cached::Text(t) => t.len(),
        }
    }
}

/// What a cache entry holds for its coordinates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// A read unit: a chunk, or an inner chunk of a shard.
    Unit,
    /// A shard's index.
    ShardIndex,
    /// The text of a band of chunks (variable-length arrays), by axis-0 chunk index.
    Text,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// The open array's id (unique per mount).
    pub array: u64,
    pub kind: KeyKind,
    pub coords: Box<[u64]>,
}

#[derive(Default, Debug)]
pub struct CacheStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub decoded_bytes: AtomicU64,
    pub errors: AtomicU64,
    /// Entries dropped to make room.
    pub evictions: AtomicU64,
}

/// A load in progress that others wait for. `None` after completion means it failed: the
/// waiter then loads for itself, so that it gets the error with its full cause.
#[derive(Default)]
struct Pending {
    done: Mutex<Option<Option<Arc<Cached>>>>,
    cv: Condvar,
}

struct State {
    lru: LruCache<CacheKey, Arc<Cached>>,
    bytes: usize,
    /// Loads under way. A load whose key is stored or forgotten meanwhile is taken out: what it
    /// read may be older than that, so it goes to the readers already waiting for it, but it is
    /// not kept, and readers that come after the change load anew rather than wait for it.
    inflight: HashMap<CacheKey, Arc<Pending>>,
    /// Keys released after a sequential reader read them whole (the most recent ones): a
    /// read-ahead queued before the reader got there need not decode them again.
    released: LruCache<CacheKey, ()>,
    /// Counts `insert`s and `remove`s: news learned elsewhere (a listing) is kept only if none
    /// came in between.
    changes: u64,
}

impl State {
    /// `key` was stored or forgotten: a load of it under way read what was there before.
    fn changed(&mut self, key: &CacheKey) {
        self.changes += 1;
        self.inflight.remove(key);
    }
}

/// How many released keys are remembered.
const RELEASED_KEYS: std::num::NonZeroUsize = std::num::NonZeroUsize::new(4096).unwrap();

pub struct ChunkCache {
    state: Mutex<State>,
    capacity: usize,
    pub stats: CacheStats,
}

impl ChunkCache {
    pub fn new(capacity: usize) -> ChunkCache {
        ChunkCache {
            state: Mutex::new(State {
                lru: LruCache::unbounded(),
                bytes: 0,
                inflight: HashMap::new(),
                released: LruCache::new(RELEASED_KEYS),
                changes: 0,
            }),
            capacity,
            stats: CacheStats::default(),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether `key` is cached or being loaded (for read-ahead, which skips such keys).
    pub fn is_present_or_loading(&self, key: &CacheKey) -> bool {
        let s = lock(&self.state);
        s.lru.contains(key) || s.inflight.contains_key(key)
    }

    /// Whether a sequential reader is done with `key` (`release`) and nobody loaded it since.
    pub fn was_released(&self, key: &CacheKey) -> bool {
        lock(&self.state).released.contains(key)
    }

    /// Drop `keys`, which a sequential reader has read whole: the kernel holds their pages now.
    pub fn release(&self, keys: &[CacheKey]) {
        if keys.is_empty() {
            return;
        }
        let mut s = lock(&self.state);
        for key in keys {
            if let Some(old) = s.lru.pop(key) {
                s.bytes -= old.cost();
                s.released.put(key.clone(), ());
            }
        }
    }

    /// The cached value of `key`, if any (not counted as a hit or miss).
    pub fn peek(&self, key: &CacheKey) -> Option<Arc<Cached>> {
        lock(&self.state).lru.peek(key).cloned()
    }

    /// Put a value in (after a write-back, so the next read needs no decode).
    pub fn insert(&self, key: CacheKey, value: Cached) {
        let mut s = lock(&self.state);
        s.changed(&key);
        let value = Arc::new(value);
        s.released.pop(&key);
        s.bytes += value.cost();
        if let Some(old) = s.lru.put(key, value) {
            s.bytes -= old.cost();
        }
        self.evict(&mut s);
    }

    /// Forget a key (its stored value changed).
    pub fn remove(&self, key: &CacheKey) {
        let mut s = lock(&self.state);
        s.changed(key);
        if let Some(old) = s.lru.pop(key) {
            s.bytes -= old.cost();
        }
    }

    /// Drop every entry of the array with cache id `array` (it is laid out anew, or no longer
    /// served): they would only take room until the LRU reached them.
    pub fn retire(&self, array: u64) {
        let mut s = lock(&self.state);
        let keys: Vec<CacheKey> = s.lru.iter().filter(|(k, _)| k.array == array).map(|(k, _)| k.clone()).collect();
        for key in keys {
            s.changed(&key);
            if let Some(old) = s.lru.pop(&key) {
                s.bytes -= old.cost();
            }
        }
    }

    /// A mark to pass to `insert_missing`.
    pub fn changes(&self) -> u64 {
        lock(&self.state).changes
    }

    /// Hold `keys` as missing (a listing found them absent), those neither cached nor being
    /// loaded, unless the cache was changed since `since` (`changes`): a chunk stored after the
    /// listing must not be taken for absent.
    pub fn insert_missing(&self, keys: impl IntoIterator<Item = CacheKey>, since: u64) {
        let mut s = lock(&self.state);
        if s.changes != since {
            return;
        }
        let missing = Arc::new(Cached::Missing);
        for key in keys {
            if !s.lru.contains(&key) && !s.inflight.contains_key(&key) {
                s.bytes += missing.cost();
                s.lru.put(key, missing.clone());
            }
        }
        self.evict(&mut s);
    }

    fn evict(&self, s: &mut State) {
        while s.bytes > self.capacity && s.lru.len() > 1 {
            match s.lru.pop_lru() {
                Some((_, old)) => {
                    s.bytes -= old.cost();
                    self.stats.evictions.fetch_add(1, Ordering::Relaxed);
                }
                None => break,
            }
        }
    }

    /// Bytes currently held.
    pub fn bytes(&self) -> usize {
        lock(&self.state).bytes
    }

    /// The cached value of `key`, or the result of `load`, which runs at most once at a time
    /// per key. Errors are not cached.
    pub fn get_or_load(&self, key: &CacheKey, load: impl FnOnce() -> Result<Cached>) -> Result<Arc<Cached>> {
        self.get_or_load_holding(key, true, load)
    }

    /// `get_or_load`, holding a `Missing` result only if `hold_missing`: an entry costs more
    /// memory than a tiny chunk is worth, and a million of them found by one read would hold
    /// far more than the data they stand for.
    pub fn get_or_load_holding(&self, key: &CacheKey, hold_missing: bool, load: impl FnOnce() -> Result<Cached>) -> Result<Arc<Cached>> {
        let claim = {
            let mut s = lock(&self.state);
            if let Some(v) = s.lru.get(key) {
                self.stats.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(v.clone());
            }
            if let Some(p) = s.inflight.get(key).cloned() {
                drop(s);
                return self.wait_for(&p, load);
            }
            self.claim_locked(&mut s, key.clone())
        };
        // A loader that panics must still release the readers waiting for it.
        claim.finish(crate::error::catch("chunk load", load), hold_missing)
    }

    /// Take on the loads of those of `keys` neither cached nor being loaded: readers of them
    /// wait for the claims, which one request may then serve together (the inner chunks of a
    /// shard).
    pub fn claim_absent(&self, keys: impl IntoIterator<Item = CacheKey>) -> Vec<Claim<'_>> {
        let mut s = lock(&self.state);
        keys.into_iter()
            .filter(|key| !s.lru.contains(key) && !s.inflight.contains_key(key))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|key| self.claim_locked(&mut s, key))
            .collect()
    }

    fn claim_locked(&self, s: &mut State, key: CacheKey) -> Claim<'_> {
        let pending = Arc::new(Pending::default());
        s.inflight.insert(key.clone(), pending.clone());
        self.stats.misses.fetch_add(1, Ordering::Relaxed);
        Claim { cache: self, key, pending, finished: false }
    }

    /// The result of the load `p` under way; if it fails, `load`'s own.
    fn wait_for(&self, p: &Pending, load: impl FnOnce() -> Result<Cached>) -> Result<Arc<Cached>> {
        let mut done = lock(&p.done);
        while done.is_none() {
            done = p.cv.wait(done).unwrap_or_else(|e| e.into_inner());
        }
        if let Some(Some(v)) = done.as_ref() {
            self.stats.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(v.clone());
        }
        drop(done);
        load().map(Arc::new)
    }
}

/// A load of one key taken on (`claim_absent`): readers of the key wait for its `finish`. One
/// dropped unfinished (an error elsewhere, a panic) lets them load the key themselves.
pub struct Claim<'a> {
    cache: &'a ChunkCache,
    key: CacheKey,
    pending: Arc<Pending>,
    finished: bool,
}

impl Claim<'_> {
    pub fn key(&self) -> &CacheKey {
        &self.key
    }

    /// The load's result, to its waiters and (unless the key changed meanwhile) into the cache;
    /// a `Missing` result is held only if `hold_missing`. Errors are not cached.
    pub fn finish(mut self, result: Result<Cached>, hold_missing: bool) -> Result<Arc<Cached>> {
        self.finished = true;
        let result = result.map(Arc::new);
        let cache = self.cache;
        {
            let mut s = lock(&cache.state);
            let current = s.inflight.get(&self.key).is_some_and(|p| Arc::ptr_eq(p, &self.pending));
            if current {
                s.inflight.remove(&self.key);
            }
            if let Ok(v) = &result {
                if let Cached::Chunk { decoded: c, .. } = v.as_ref() {
                    cache.stats.decoded_bytes.fetch_add(c.len() as u64, Ordering::Relaxed);
                }
                // A missing chunk is held too (when the caller says it is worth its entry):
                // finding it again is a request to the store, on object storage a round trip.
                s.released.pop(&self.key);
                if current && (hold_missing || !matches!(v.as_ref(), Cached::Missing)) {
                    s.bytes += v.cost();
                    if let Some(old) = s.lru.put(self.key.clone(), v.clone()) {
                        s.bytes -= old.cost();
                    }
                    cache.evict(&mut s);
                }
            } else {
                cache.stats.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.pending.complete(result.as_ref().ok().cloned());
        result
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.finished {
            let mut s = lock(&self.cache.state);
            if s.inflight.get(&self.key).is_some_and(|p| Arc::ptr_eq(p, &self.pending)) {
                s.inflight.remove(&self.key);
            }
            drop(s);
            self.pending.complete(None);
        }
    }
}

impl Pending {
    fn complete(&self, value: Option<Arc<Cached>>) {
        *lock(&self.done) = Some(value);
        self.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn key(i: u64) -> CacheKey {
        CacheKey { array: 1, kind: KeyKind::Unit, coords: vec![i].into() }
    }

    #[test]
    fn evicts_by_bytes_and_loads_once() {
        let cache = ChunkCache::new(1000);
        for i in 0..10 {
            cache.get_or_load(&key(i), || Ok(Cached::chunk(Some(vec![0; 300])))).unwrap();
        }
        assert!(cache.bytes() <= 1000);
        let loads = AtomicUsize::new(0);
        cache
            .get_or_load(&key(9), || {
                loads.fetch_add(1, Ordering::SeqCst);
                Ok(Cached::Missing)
            })
            .unwrap();
        assert_eq!(loads.load(Ordering::SeqCst), 0, "recent entry is cached");
        cache
            .get_or_load(&key(0), || {
                loads.fetch_add(1, Ordering::SeqCst);
                Ok(Cached::Missing)
            })
            .unwrap();
        assert_eq!(loads.load(Ordering::SeqCst), 1, "old entry was evicted");
    }

    #[test]
    fn concurrent_readers_of_one_key_decode_once() {
        let cache = Arc::new(ChunkCache::new(1 << 20));
        let loads = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (cache, loads) = (cache.clone(), loads.clone());
                std::thread::spawn(move || {
                    cache
                        .get_or_load(&key(7), || {
                            loads.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(50));
                            Ok(Cached::chunk(Some(vec![1; 10])))
                        })
                        .unwrap()
                })
            })
            .collect();
        for t in threads {
            assert!(matches!(t.join().unwrap().as_ref(), Cached::Chunk { decoded: v, .. } if v == &vec![1; 10]));
        }
        assert_eq!(loads.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_retired_array_leaves_nothing_cached() {
        let cache = ChunkCache::new(1 << 20);
        let other = CacheKey { array: 2, kind: KeyKind::Unit, coords: vec![0].into() };
        cache.insert(key(1), Cached::chunk(Some(vec![1; 100])));
        cache.insert(other.clone(), Cached::chunk(Some(vec![2; 100])));
        cache.retire(1);
        assert!(cache.peek(&key(1)).is_none() && cache.peek(&other).is_some());
        assert_eq!(cache.bytes(), 260);
    }

    #[test]
    fn errors_are_not_cached() {
        let cache = ChunkCache::new(1 << 20);
        assert!(cache.get_or_load(&key(1), || Err(crate::Error::corrupt("k", "bad"))).is_err());
        assert!(cache.get_or_load(&key(1), || Ok(Cached::Missing)).is_ok());
        assert_eq!(cache.stats.errors.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_panicking_loader_fails_its_readers_and_releases_the_waiters() {
        let cache = Arc::new(ChunkCache::new(1000));
        let started = Arc::new(std::sync::Barrier::new(2));
        let (c, b) = (cache.clone(), started.clone());
        let loader = std::thread::spawn(move || {
            c.get_or_load(&key(1), || {
                b.wait();
                std::thread::sleep(std::time::Duration::from_millis(50));
                panic!("a bug in a decoder")
            })
            .is_err()
        });
        started.wait();
        // This reader waits for the loader in flight; it must not wait forever.
        let (tx, rx) = crossbeam_channel::bounded(1);
        let c = cache.clone();
        std::thread::spawn(move || {
            let _ = tx.send(c.get_or_load(&key(1), || Ok(Cached::Missing)).is_ok());
        });
        assert!(loader.join().unwrap(), "the panic became an error");
        assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(10)), Ok(true), "the waiter was released");
        assert!(cache.get_or_load(&key(1), || Ok(Cached::Missing)).is_ok());
    }

    /// Counts the loads `get_or_load` runs for `k`.
    fn loads_of(cache: &ChunkCache, k: u64) -> usize {
        let loads = AtomicUsize::new(0);
        cache
            .get_or_load(&key(k), || {
                loads.fetch_add(1, Ordering::SeqCst);
                Ok(Cached::Missing)
            })
            .unwrap();
        loads.load(Ordering::SeqCst)
    }

    #[test]
    fn a_missing_chunk_is_found_once_unless_not_worth_holding() {
        let cache = ChunkCache::new(1 << 20);
        assert_eq!(loads_of(&cache, 1), 1);
        assert_eq!(loads_of(&cache, 1), 0, "an object store would be asked again for every read");
        for _ in 0..2 {
            assert!(cache.get_or_load_holding(&key(2), false, || Ok(Cached::Missing)).is_ok());
        }
        assert_eq!(loads_of(&cache, 2), 1);
    }

    #[test]
    fn a_load_overtaken_by_a_store_or_a_removal_is_not_kept() {
        let cache = ChunkCache::new(1 << 20);
        // The loader read the old value; the new one was stored (and cached) meanwhile.
        let got = cache
            .get_or_load(&key(1), || {
                cache.insert(key(1), Cached::chunk(Some(vec![2; 4])));
                Ok(Cached::Missing)
            })
            .unwrap();
        assert!(matches!(got.as_ref(), Cached::Missing), "the reader that started first gets what it read");
        assert!(matches!(cache.peek(&key(1)).as_deref(), Some(Cached::Chunk { decoded, .. }) if decoded == &vec![2; 4]));
        // The chunk was deleted while the loader read it.
        cache
            .get_or_load(&key(2), || {
                cache.remove(&key(2));
                Ok(Cached::chunk(Some(vec![1; 4])))
            })
            .unwrap();
        assert!(cache.peek(&key(2)).is_none());
        assert_eq!(loads_of(&cache, 2), 1);
    }

    /// A read that begins after a chunk was stored must see it, even while a load of the
    /// old chunk that began before is still under way (a reader of the chunk's other pages).
    #[test]
    fn a_read_after_a_store_does_not_join_a_load_that_began_before_it() {
        let cache = Arc::new(ChunkCache::new(1 << 20));
        let (started_tx, started) = std::sync::mpsc::channel();
        let (finish, finish_rx) = std::sync::mpsc::channel::<()>();
        let old_load = {
            let cache = cache.clone();
            std::thread::spawn(move || {
                cache.get_or_load(&key(1), || {
                    started_tx.send(()).unwrap();
                    finish_rx.recv().unwrap();
                    Ok(Cached::chunk(Some(vec![1; 4])))
                })
            })
        };
        started.recv().unwrap();
        // The chunk is stored anew: its cached copy is forgotten.
        cache.remove(&key(1));
        let (got_tx, got) = std::sync::mpsc::channel();
        let later = {
            let cache = cache.clone();
            std::thread::spawn(move || got_tx.send(cache.get_or_load(&key(1), || Ok(Cached::chunk(Some(vec![2; 4]))))))
        };
        let seen = got.recv_timeout(std::time::Duration::from_secs(10));
        finish.send(()).unwrap();
        let seen = seen.expect("the later read waited for the load that began before the store");
        assert!(matches!(seen.unwrap().as_ref(), Cached::Chunk { decoded, .. } if decoded == &vec![2; 4]));
        let first = old_load.join().unwrap().unwrap();
        assert!(matches!(first.as_ref(), Cached::Chunk { decoded, .. } if decoded == &vec![1; 4]), "the first reader gets what it read");
        later.join().unwrap().unwrap();
        assert!(
            matches!(cache.peek(&key(1)).as_deref(), Some(Cached::Chunk { decoded, .. }) if decoded == &vec![2; 4]),
            "the older load, ending last, is not kept over the newer"
        );
    }

    #[test]
    fn keys_a_listing_found_absent_are_kept_unless_the_cache_changed_since() {
        let cache = ChunkCache::new(1 << 20);
        cache.insert(key(1), Cached::chunk(Some(vec![1; 4])));
        let since = cache.changes();
        cache.insert_missing([key(1), key(2)], since);
        assert!(matches!(cache.peek(&key(1)).as_deref(), Some(Cached::Chunk { .. })), "what is cached stays");
        assert_eq!(loads_of(&cache, 2), 0);
        // A chunk stored (or deleted) after the listing began: the listing may be older.
        let since = cache.changes();
        cache.remove(&key(9));
        cache.insert_missing([key(3)], since);
        assert_eq!(loads_of(&cache, 3), 1);
    }
}
