//! The core without FUSE: what reads and writes of `data` ask of the store, and of the kernel's
//! page cache.

mod common;

use std::sync::{Arc, Mutex};

use zarrfs::fs::{Config, ZarrFs};
use zarrfs::store::{ByteRange, Entry, Expect, Head, Held, LocalStore, Store, Value, Version};

/// Records every access to a chunk key (metadata documents are not counted).
struct CountingStore {
    inner: LocalStore,
    log: Mutex<Vec<String>>,
    /// Whole reads of metadata documents.
    documents: std::sync::atomic::AtomicUsize,
    /// HEADs, of any key.
    heads: std::sync::atomic::AtomicUsize,
    /// Values set, by key.
    sets: Mutex<std::collections::BTreeMap<String, usize>>,
    /// A key whose next read or write says it began, then waits until it is let go (`hold`).
    held: Mutex<Option<Hold>>,
    /// A key whose next store fails (`fail_next_set`), as a full disk or a refused PUT would.
    failing: Mutex<Option<String>>,
    /// The keys made durable (`sync`).
    synced: Mutex<std::collections::BTreeSet<String>>,
}

struct Hold {
    op: &'static str,
    key: String,
    entered: std::sync::mpsc::Sender<()>,
    go: std::sync::mpsc::Receiver<()>,
}

impl CountingStore {
    fn over(root: &std::path::Path) -> Arc<CountingStore> {
        Arc::new(CountingStore {
            inner: LocalStore::open(root).unwrap(),
            log: Mutex::new(Vec::new()),
            documents: Default::default(),
            heads: Default::default(),
            sets: Default::default(),
            held: Default::default(),
            failing: Default::default(),
            synced: Default::default(),
        })
    }
    fn fail_next_set(&self, key: &str) {
        *self.failing.lock().unwrap() = Some(key.into());
    }
    /// Hold the next `op` ("get" or "set") of `key` until the returned sender is used; the
    /// receiver hears when it began (a slow read of a chunk, a slow store of metadata).
    fn hold(&self, op: &'static str, key: &str) -> (std::sync::mpsc::Receiver<()>, std::sync::mpsc::Sender<()>) {
        let (entered, began) = std::sync::mpsc::channel();
        let (go, go_rx) = std::sync::mpsc::channel();
        *self.held.lock().unwrap() = Some(Hold { op, key: key.into(), entered, go: go_rx });
        (began, go)
    }
    fn wait_if_held(&self, op: &str, key: &str) {
        let hold = {
            let mut held = self.held.lock().unwrap();
            if held.as_ref().is_some_and(|h| h.op == op && h.key == key) { held.take() } else { None }
        };
        if let Some(h) = hold {
            let _ = h.entered.send(());
            let _ = h.go.recv();
        }
    }
    fn note(&self, what: String, key: &str) {
        if !key.ends_with("zarr.json") && !key.contains("/.z") && !key.starts_with(".z") {
            self.log.lock().unwrap().push(what);
        }
    }
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

impl Store for CountingStore {
    fn get_value(&self, key: &str, max: u64) -> zarrfs::Result<Option<Value>> {
        self.wait_if_held("get", key);
        self.note(format!("get {key}"), key);
        if key.ends_with("zarr.json") {
            self.documents.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.inner.get_value(key, max)
    }
    fn head(&self, key: &str) -> zarrfs::Result<Option<Head>> {
        self.heads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.head(key)
    }
    fn get_range_versioned(&self, key: &str, range: ByteRange) -> zarrfs::Result<Option<(Vec<u8>, Version)>> {
        // Zero-length probes are existence checks of metadata documents.
        if range != (ByteRange::Range { start: 0, len: 0 }) {
            self.note(format!("range {key} {range:?}"), key);
        }
        self.inner.get_range_versioned(key, range)
    }
    fn set(&self, key: &str, value: &[u8]) -> zarrfs::Result<Version> {
        self.wait_if_held("set", key);
        if self.failing.lock().unwrap().take_if(|k| k == key).is_some() {
            return Err(zarrfs::Error::Io(std::io::Error::from_raw_os_error(libc::ENOSPC)));
        }
        *self.sets.lock().unwrap().entry(key.to_string()).or_default() += 1;
        self.inner.set(key, value)
    }
    fn set_if(&self, key: &str, value: &[u8], expect: Expect) -> zarrfs::Result<Version> {
        self.wait_if_held("set", key);
        if self.failing.lock().unwrap().take_if(|k| k == key).is_some() {
            return Err(zarrfs::Error::Io(std::io::Error::from_raw_os_error(libc::ENOSPC)));
        }
        *self.sets.lock().unwrap().entry(key.to_string()).or_default() += 1;
        self.inner.set_if(key, value, expect)
    }
    fn delete(&self, key: &str) -> zarrfs::Result<()> {
        self.inner.delete(key)
    }
    fn delete_if(&self, key: &str, expect: Expect) -> zarrfs::Result<()> {
        self.inner.delete_if(key, expect)
    }
    fn hold_lock(self: Arc<Self>, key: &str, wait: std::time::Duration) -> zarrfs::Result<Held> {
        Arc::new(LocalStore::open(self.inner.root())?).hold_lock(key, wait)
    }
    fn list_dir(&self, prefix: &str) -> zarrfs::Result<Vec<Entry>> {
        self.inner.list_dir(prefix)
    }
    fn list_names_upto(&self, prefix: &str, max: usize) -> zarrfs::Result<Option<Vec<String>>> {
        let names = self.inner.list_names_upto(prefix, max)?;
        self.note(format!("list {prefix} upto {max}: {}", names.as_ref().map_or("more".to_string(), |n| n.len().to_string())), prefix);
        Ok(names)
    }
    fn sync(&self, keys: &[String]) -> zarrfs::Result<()> {
        self.synced.lock().unwrap().extend(keys.iter().cloned());
        self.inner.sync(keys)
    }
    // Counted as object storage's requests are: shards are read as a remote mount reads them.
    fn requests_are_round_trips(&self) -> bool {
        true
    }
}

fn open_data(fs: &ZarrFs, path: &str) -> (u64, u64) {
    let mut ino = 1;
    for part in path.split('/') {
        ino = fs.lookup(ino, part).unwrap_or_else(|e| panic!("{path}: {e}")).ino;
    }
    let ino = fs.lookup(ino, "data").expect("data").ino;
    (ino, fs.open(ino, false, false, 0).expect("open"))
}

fn setup() -> (Arc<CountingStore>, ZarrFs) {
    let store = CountingStore::over(&common::fixtures().join("v3.zarr"));
    let fs = ZarrFs::new(store.clone(), Config::default());
    (store, fs)
}

#[test]
fn one_element_of_a_shard_reads_its_index_and_one_inner_chunk() {
    let (store, fs) = setup();
    let (ino, fh) = open_data(&fs, "sharded/end");
    let expected = common::expected().into_iter().find(|e| e.store == "v3.zarr" && e.path == "sharded/end").unwrap().bytes;
    // float32 (10, 9), shards (4, 6), inner chunks (2, 3): element (2, 4) is inner chunk (1, 1) of shard (0, 0).
    let at = |row: u64, col: u64| (row * 9 + col) * 4;
    assert_eq!(fs.read(ino, fh, at(2, 4), 4).unwrap(), &expected[at(2, 4) as usize..at(2, 4) as usize + 4]);
    let log = store.take();
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(log[0].starts_with("range sharded/end/c/0/0 Suffix(68)"), "{log:?}");
    assert!(log[1].starts_with("range sharded/end/c/0/0 Range"), "{log:?}");
    // The same inner chunk again: nothing is read.
    assert_eq!(fs.read(ino, fh, at(3, 5), 4).unwrap(), &expected[at(3, 5) as usize..at(3, 5) as usize + 4]);
    assert_eq!(store.take(), Vec::<String>::new());
    // Another inner chunk of the same shard: its bytes only, the index is cached.
    fs.read(ino, fh, at(3, 0), 4).unwrap();
    let log = store.take();
    assert_eq!(log.len(), 1, "{log:?}");
    assert!(log[0].starts_with("range sharded/end/c/0/0 Range"), "{log:?}");
    // An absent shard: one index probe, then fill.
    assert_eq!(fs.read(ino, fh, at(5, 0), 4).unwrap(), (-1f32).to_le_bytes());
    assert_eq!(store.take().len(), 1);
}

#[test]
fn inner_chunks_read_together_take_one_request_per_shard_or_per_run() {
    let (store, fs) = setup();
    let (ino, fh) = open_data(&fs, "sharded/end");
    let expected = common::expected().into_iter().find(|e| e.store == "v3.zarr" && e.path == "sharded/end").unwrap().bytes;
    // float32 (10, 9), shards (4, 6), inner chunks (2, 3). Rows 0..4 are all of shard (0, 0) and
    // the half of shard (0, 1) the array holds: each is read whole, its index with it.
    let row = 9 * 4u32;
    assert_eq!(fs.read(ino, fh, 0, 4 * row).unwrap(), &expected[..4 * row as usize]);
    assert_eq!(store.take(), vec!["get sharded/end/c/0/0".to_string(), "get sharded/end/c/0/1".to_string()]);
    // Nothing of those shards is read again, index or inner chunk.
    assert_eq!(fs.read(ino, fh, row.into(), 2 * row).unwrap(), &expected[row as usize..3 * row as usize]);
    assert_eq!(store.take(), Vec::<String>::new());

    // A fresh mount: one inner chunk first (its index and its bytes), then rows 2 and 3 up to
    // column 6: the two inner chunks of rows 2..4 in shard (0, 0), 33 bytes apart in it (one
    // range for both), and one of shard (0, 1) (its index, then its bytes).
    let (store, fs) = setup();
    let (ino, fh) = open_data(&fs, "sharded/end");
    let at = |row: u64, col: u64| (row * 9 + col) * 4;
    fs.read(ino, fh, at(0, 3), 4).unwrap();
    let log = store.take();
    assert_eq!(log.len(), 2, "{log:?}");
    let (from, to) = (at(2, 0), at(3, 6));
    assert_eq!(fs.read(ino, fh, from, (to - from) as u32).unwrap(), &expected[from as usize..to as usize]);
    let log = store.take();
    assert_eq!(log.len(), 3, "{log:?}");
    assert!(log[0].starts_with("range sharded/end/c/0/0 Range"), "{log:?}");
    assert!(log[1].starts_with("range sharded/end/c/0/1 Suffix"), "{log:?}");
}

#[test]
fn a_read_decodes_only_the_chunks_it_touches() {
    let (store, fs) = setup();
    let (ino, fh) = open_data(&fs, "shapes/d3");
    // float64 (5, 6, 7) in chunks (2, 4, 3): bytes of element (0, 0, 0..3) lie in chunk (0, 0, 0) alone.
    fs.read(ino, fh, 0, 24).unwrap();
    assert_eq!(store.take(), vec!["get shapes/d3/c/0/0/0".to_string()]);
    fs.read(ino, fh, 8, 8).unwrap();
    assert!(store.take().is_empty(), "cached chunk is not read again");
    assert_eq!(fs.cache().stats.misses.load(std::sync::atomic::Ordering::Relaxed), 1);
}

/// A store of one uint8 (rows, 2) array in chunks of one row, with `stored` rows written as
/// `[row % 256, 1]`.
fn tiny_chunks(rows: u64, stored: &[u64], separator: &str, config: Config) -> (tempfile::TempDir, Arc<CountingStore>, ZarrFs) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tiny");
    std::fs::create_dir_all(&root).unwrap();
    let meta = serde_json::json!({"zarr_format": 3, "node_type": "array", "shape": [rows, 2], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, 2]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": separator}},
        "fill_value": 7, "codecs": [{"name": "bytes"}]});
    std::fs::write(root.join("zarr.json"), meta.to_string()).unwrap();
    std::fs::write(dir.path().join("zarr.json"), r#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    let inner = LocalStore::open(dir.path()).unwrap();
    for &r in stored {
        inner.set(&format!("tiny/c{separator}{r}{separator}0"), &[(r % 256) as u8, 1]).unwrap();
    }
    let store = CountingStore::over(dir.path());
    let fs = ZarrFs::new(store.clone(), config);
    (dir, store, fs)
}

fn expected_rows(first: u64, rows: u64, stored: &[u64]) -> Vec<u8> {
    (first..first + rows).flat_map(|r| if stored.contains(&r) { [(r % 256) as u8, 1] } else { [7, 7] }).collect()
}

#[test]
fn chunks_of_an_array_that_held_none_written_in_part_are_created_without_a_read() {
    // uint8 (40, 2) in chunks of one row, fill 7, none stored: element (r, 0) of each row
    // written (r + 100).
    let (dir, store, fs) = tiny_chunks(40, &[], "/", Config::default());
    let ino = open_data(&fs, "tiny").0;
    let fh = fs.open(ino, true, false, 0).unwrap();
    let write_first = |rows: std::ops::Range<u64>| {
        for r in rows {
            fs.write(ino, fh, 2 * r, &[r as u8 + 100], false).unwrap();
        }
        fs.flush(fh, 0).unwrap();
    };
    write_first(0..20);
    // One listing of the array's directory (its document alone), then a conditional create per
    // chunk: no chunk is read back.
    let log = store.take();
    assert_eq!(log, vec!["list tiny upto 8: 1".to_string()], "{log:?}");
    assert_eq!(store.sets.lock().unwrap().keys().filter(|k| k.starts_with("tiny/c/")).count(), 20);
    // Another writer stores row 30 after the listing: the create of row 30 is refused, the
    // stored chunk read, and this mount's element merged into it.
    LocalStore::open(dir.path()).unwrap().set("tiny/c/30/0", &[90, 91]).unwrap();
    write_first(20..40);
    let log = store.take();
    assert_eq!(log, vec!["get tiny/c/30/0".to_string()], "{log:?}");
    let want: Vec<u8> = (0..40u8).flat_map(|r| [r + 100, if r == 30 { 91 } else { 7 }]).collect();
    assert_eq!(fs.read(ino, fh, 0, 80).unwrap(), want);
    // An array that holds chunks reads each chunk it changes in part, as before; once a read
    // found a chunk, without the listing.
    let (_dir, store, fs) = tiny_chunks(40, &[3], "/", Config::default());
    let ino = open_data(&fs, "tiny").0;
    let fh = fs.open(ino, true, false, 0).unwrap();
    fs.write(ino, fh, 2 * 5, &[1], false).unwrap();
    fs.flush(fh, 0).unwrap();
    assert_eq!(store.take(), vec!["list tiny upto 8: 2".to_string(), "get tiny/c/5/0".to_string()]);
    let (_dir, store, fs) = tiny_chunks(40, &[3], "/", Config::default());
    let ino = open_data(&fs, "tiny").0;
    let fh = fs.open(ino, true, false, 0).unwrap();
    fs.read(ino, fh, 2 * 3, 2).unwrap();
    fs.write(ino, fh, 2 * 5, &[1], false).unwrap();
    fs.flush(fh, 0).unwrap();
    assert_eq!(store.take(), vec!["get tiny/c/3/0".to_string(), "get tiny/c/5/0".to_string()]);
}

#[test]
fn a_read_across_many_absent_chunks_lists_their_directory_instead_of_probing_each() {
    for separator in ["/", "."] {
        let stored = [5, 3000];
        let (_dir, store, fs) = tiny_chunks(4096, &stored, separator, Config::default());
        let (ino, fh) = open_data(&fs, "tiny");
        assert_eq!(fs.read(ino, fh, 0, 8192).unwrap(), expected_rows(0, 4096, &stored));
        let listed = if separator == "/" { "list tiny/c upto 4096: 2" } else { "list tiny upto 4096: 3" };
        let gets = |rows: &[u64]| rows.iter().map(|r| format!("get tiny/c{separator}{r}{separator}0")).collect::<Vec<_>>();
        // The listing first; the stored units then load many at once, in any order.
        let log = store.take();
        assert_eq!((log[0].as_str(), sorted(log[1..].to_vec())), (listed, sorted(gets(&stored))));
        // A few units are probed each (a listing would cost more than it saves), and those found
        // absent are held as missing where asking again is a round trip: read again, they are
        // not asked for. (The ones the listing found absent were not held: tiny entries by the
        // million would outweigh a listing again.)
        assert_eq!(fs.read(ino, fh, 2 * 3001, 8).unwrap(), expected_rows(3001, 4, &stored));
        assert_eq!(sorted(store.take()), gets(&[3001, 3002, 3003, 3004]));
        assert_eq!(fs.read(ino, fh, 2 * 3001, 8).unwrap(), expected_rows(3001, 4, &stored));
        assert_eq!(store.take(), Vec::<String>::new());
    }
}

fn sorted(mut log: Vec<String>) -> Vec<String> {
    log.sort();
    log
}

#[test]
fn a_directory_with_more_names_than_the_read_touches_is_not_listed_whole() {
    let stored: Vec<u64> = (0..200).step_by(2).collect();
    let (_dir, store, fs) = tiny_chunks(1000, &stored, "/", Config::default());
    let (ino, fh) = open_data(&fs, "tiny");
    // 40 units against a directory of 100 names: the listing stops at 40 and every unit is probed.
    assert_eq!(fs.read(ino, fh, 0, 80).unwrap(), expected_rows(0, 40, &stored));
    let log = store.take();
    assert_eq!(log[0], "list tiny/c upto 40: more");
    assert_eq!(sorted(log[1..].to_vec()), sorted((0..40).map(|r| format!("get tiny/c/{r}/0")).collect()));
    // Stored units are now cached, and the absent ones probed held as missing (asking again is
    // a round trip): nothing is asked for.
    assert_eq!(fs.read(ino, fh, 0, 80).unwrap(), expected_rows(0, 40, &stored));
    assert_eq!(store.take(), Vec::<String>::new());
}

#[test]
fn an_absent_chunk_worth_a_worker_is_asked_for_once_however_many_reads_touch_it() {
    // uint8 (128, 65536) in chunks of (64, 1024), 64 KiB each: a row of 64 KiB crosses 64 chunks,
    // and every chunk is touched by 64 reads of a row. Only chunk (0, 5) is stored.
    let dir = tempfile::tempdir().unwrap();
    let meta = serde_json::json!({"zarr_format": 3, "node_type": "array", "shape": [128, 65536], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [64, 1024]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 7, "codecs": [{"name": "bytes"}]});
    std::fs::write(dir.path().join("zarr.json"), meta.to_string()).unwrap();
    std::fs::create_dir_all(dir.path().join("c/0")).unwrap();
    std::fs::write(dir.path().join("c/0/5"), vec![9u8; 64 << 10]).unwrap();
    let store = CountingStore::over(dir.path());
    let fs = ZarrFs::new(store.clone(), Config { read_ahead: 0, ..Config::default() });
    let ino = fs.lookup(1, "data").unwrap().ino;
    let fh = fs.open(ino, false, false, 0).unwrap();
    let row = |r: u64| {
        let got = fs.read(ino, fh, r << 16, 64 << 10).unwrap();
        assert!(got.iter().enumerate().all(|(i, &b)| b == if r < 64 && (5 << 10..6 << 10).contains(&i) { 9 } else { 7 }), "row {r}");
    };
    // The first row lists the chunks' directory (64 units), then reads the one stored.
    row(0);
    assert_eq!(store.take(), ["list c/0 upto 64: 1", "get c/0/5"]);
    for r in 1..64 {
        row(r);
    }
    assert_eq!(store.take(), Vec::<String>::new(), "the absent chunks were held as missing");
    // Fewer than a listing is worth: each absent chunk is probed once, then held.
    for r in 64..128 {
        for part in 0..4u64 {
            fs.read(ino, fh, (r << 16) + part * (16 << 10), 16 << 10).unwrap();
        }
    }
    // (The workers load all but the first unit of a read: in any order.)
    let mut log = store.take();
    log.sort();
    let mut want: Vec<String> = (0..64).map(|c| format!("get c/1/{c}")).collect();
    want.sort();
    assert_eq!(log, want);
}

#[test]
fn tiny_chunks_count_their_entries_against_the_dirty_limit() {
    // 32 KiB in two-byte chunks is 16 384 changed chunks, which hold far more than 32 KiB.
    let (dir, _store, fs) = tiny_chunks(1 << 14, &[], "/", Config { dirty_limit: 1 << 20, ..Config::default() });
    let (ino, _) = open_data(&fs, "tiny");
    let fh = fs.open(ino, true, false, 0).unwrap();
    fs.write(ino, fh, 0, &vec![1u8; 32 << 10], false).unwrap();
    // The limit made the write store them before any flush or close.
    let stored = std::fs::read_dir(dir.path().join("tiny/c")).map_or(0, |d| d.count());
    assert_eq!(stored, 1 << 14);
    assert_eq!(std::fs::read(dir.path().join("tiny/c/16383/0")).unwrap(), [1, 1]);
}

#[test]
fn after_a_prepend_the_next_open_of_data_drops_the_kernels_pages() {
    let (_dir, _store, fs) = tiny_chunks(8, &[0], "/", Config { adopt_offset: true, ..Config::default() });
    let (data, _) = open_data(&fs, "tiny");
    assert!(fs.keep_cache(data), "nothing changed yet");
    let array = fs.lookup(1, "tiny").unwrap().ino;
    let prepend = fs.lookup(array, "prepend").unwrap().ino;
    let fh = fs.open(prepend, true, false, 0).unwrap();
    fs.write(prepend, fh, 0, &[9, 9], false).unwrap();
    fs.release(fh);
    // Every page moved: the first open after the prepend must not keep them; later ones may.
    assert!(!fs.keep_cache(data));
    assert!(fs.keep_cache(data));
    let fh = fs.open(data, false, false, 0).unwrap();
    assert_eq!(fs.read(data, fh, 0, 4).unwrap(), [9, 9, 0, 1]);
}

#[test]
fn a_metadata_document_is_read_once_per_open_not_once_per_read() {
    let (store, fs) = setup();
    let ino = fs.lookup(1, "zarr.json").expect("zarr.json").ino;
    let fh = fs.open(ino, false, false, 0).expect("open");
    let before = store.documents.load(std::sync::atomic::Ordering::Relaxed);
    let first = fs.read(ino, fh, 0, 4096).expect("read");
    assert!(!first.is_empty());
    for page in 1..32u64 {
        assert!(fs.read(ino, fh, page * 4096, 4096).expect("read").is_empty());
    }
    assert_eq!(store.documents.load(std::sync::atomic::Ordering::Relaxed), before, "reads of an open document go to the store");
    // Its size is known without reading it.
    assert_eq!(fs.getattr(ino).expect("stat").size, first.len() as u64);
    assert_eq!(store.documents.load(std::sync::atomic::Ordering::Relaxed), before, "a stat of a document read it");
}

#[test]
fn a_chunk_the_mount_stored_is_not_read_back_for_the_next_partial_write() {
    let (_dir, store, fs) = tiny_chunks(4, &[1], "/", Config::default());
    let (ino, _) = open_data(&fs, "tiny");
    let fh = fs.open(ino, true, false, 0).unwrap();
    // A partial write of a stored chunk reads it once (after one listing: the array holds
    // chunks); after it is stored, its cached copy is still the stored version (one head, no
    // get) for the next partial write.
    fs.write(ino, fh, 2, &[5], false).unwrap();
    fs.flush(fh, 0).unwrap();
    assert_eq!(store.take(), vec!["list tiny upto 8: 2".to_string(), "get tiny/c/1/0".to_string()]);
    fs.write(ino, fh, 3, &[6], false).unwrap();
    fs.flush(fh, 0).unwrap();
    assert_eq!(store.take(), Vec::<String>::new());
    assert_eq!(fs.read(ino, fh, 0, 8).unwrap(), [7, 7, 5, 6, 7, 7, 7, 7]);
}

#[test]
fn a_sequential_scan_releases_what_it_read_and_decodes_each_chunk_once() {
    // uint8 (4096, 4096) in chunks of (64, 4096): 64 chunks of 256 KiB, 16 MiB in all, each
    // chunk's bytes its row-band number.
    let dir = tempfile::tempdir().unwrap();
    common::banded_array(dir.path(), 4096, 4096, 64);
    let store = LocalStore::open(dir.path()).unwrap();
    let config = Config { read_ahead: 1 << 20, ..Config::default() };
    let fs = ZarrFs::new(Arc::new(store), config);
    let ino = fs.lookup(1, "data").unwrap().ino;
    let fh = fs.open(ino, false, false, 0).unwrap();
    let step = 128 << 10;
    let mut peak = 0;
    for offset in (0..16u64 << 20).step_by(step) {
        let got = fs.read(ino, fh, offset, step as u32).unwrap();
        assert!(got.iter().all(|&b| u64::from(b) == offset / (64 * 4096)), "bytes at {offset}");
        peak = peak.max(fs.cache().bytes());
    }
    let stats = &fs.cache().stats;
    let decoded = stats.decoded_bytes.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(decoded, 16 << 20, "every chunk decoded once: none released before the reader was done with it");
    // Held: what is behind the reader within the slack of out-of-order requests (8 MiB), the
    // read-ahead window and a chunk or two; not the 16 MiB read.
    assert!(peak <= (10 << 20) + (512 << 10), "the cache held {peak} bytes");
    // A scattered read of a released chunk decodes it again.
    fs.read(ino, fh, 0, 4096).unwrap();
    assert_eq!(stats.decoded_bytes.load(std::sync::atomic::Ordering::Relaxed), decoded + (256 << 10));
}

#[test]
fn opening_an_array_reads_each_node_document_on_its_path_once_and_asks_for_nothing_else() {
    // Root group, group `shapes`, array `shapes/d3`: one GET of each `zarr.json` (its version
    // comes with it), no HEADs; on object storage every request is a round trip.
    let (store, fs) = setup();
    let (ino, fh) = open_data(&fs, "shapes/d3");
    assert_eq!(store.documents.load(std::sync::atomic::Ordering::Relaxed), 3);
    assert_eq!(store.heads.load(std::sync::atomic::Ordering::Relaxed), 0);
    fs.read(ino, fh, 0, 8).unwrap();
    assert_eq!(store.documents.load(std::sync::atomic::Ordering::Relaxed), 3, "a read does not read the metadata again");
}

#[test]
fn chunks_written_in_parts_out_of_order_are_each_stored_once() {
    // uint8 (64, 4096) in chunks of (8, 4096): 8 chunks of 32 KiB, each written a row at a time,
    // the rows of two neighbouring chunks interleaved and one of them backwards, as the kernel
    // writes back an mmap's pages. The small dirty limit starts background stores early: only
    // chunks wholly written may go, so none is encoded and stored twice.
    let dir = tempfile::tempdir().unwrap();
    common::banded_array(dir.path(), 64, 4096, 8);
    let store = CountingStore::over(dir.path());
    let fs = ZarrFs::new(store.clone(), Config { dirty_limit: 1 << 20, ..Config::default() });
    let ino = fs.lookup(1, "data").unwrap().ino;
    let fh = fs.open(ino, true, false, 0).unwrap();
    let row_bytes = |r: u64| vec![(r + 100) as u8; 4096];
    for pair in 0..4u64 {
        let (first, second) = (pair * 16, pair * 16 + 8);
        for i in 0..8 {
            for r in [first + i, second + 7 - i] {
                fs.write(ino, fh, r * 4096, &row_bytes(r), false).unwrap();
            }
        }
    }
    fs.flush(fh, 0).unwrap();
    let sets = store.sets.lock().unwrap().clone();
    let chunks: Vec<_> = sets.iter().filter(|(k, _)| k.starts_with("c/")).collect();
    assert_eq!(chunks.len(), 8, "{sets:?}");
    assert!(chunks.iter().all(|&(_, &n)| n == 1), "a chunk was stored more than once: {sets:?}");
    let all = fs.read(ino, fh, 0, 64 * 4096).unwrap();
    assert!(all.chunks(4096).enumerate().all(|(r, row)| row == row_bytes(r as u64)));
}

#[test]
fn fill_written_where_there_is_only_fill_loads_and_stores_nothing() {
    // uint8 (64, 4096) in chunks of (8, 4096), fill 0; chunk b holds b. Chunk 2 is not stored.
    let dir = tempfile::tempdir().unwrap();
    common::banded_array(dir.path(), 64, 4096, 8);
    std::fs::remove_file(dir.path().join("c/2/0")).unwrap(); // rows 16..24 read as fill
    let store = CountingStore::over(dir.path());
    let fs = ZarrFs::new(store.clone(), Config::default());
    let ino = fs.lookup(1, "data").unwrap().ino;
    let fh = fs.open(ino, true, false, 0).unwrap();
    let row = 4096u64;
    let zeros = |rows: u64| vec![0u8; (rows * row) as usize];
    fs.write(ino, fh, 16 * row, &zeros(4), false).unwrap(); // half of chunk 2, not stored
    fs.write(ino, fh, 24 * row, &zeros(4), false).unwrap(); // half of chunk 3
    fs.write(ino, fh, 32 * row, &zeros(8), false).unwrap(); // all of chunk 4
    fs.write(ino, fh, 64 * row, &zeros(8), false).unwrap(); // past the end: the array grows
    fs.write(ino, fh, 17 * row + 5, &[9], false).unwrap(); // a value where fill was written
    fs.flush(fh, 0).unwrap();
    let log = store.take();
    assert!(!log.iter().any(|l| l.contains("c/2/") || l.contains("c/4/") || l.contains("c/8/")), "loaded: {log:?}");
    let sets = store.sets.lock().unwrap().clone();
    let chunks: Vec<_> = sets.iter().filter(|(k, _)| k.starts_with("c/")).map(|(k, n)| (k.as_str(), *n)).collect();
    assert_eq!(chunks, [("c/2/0", 1), ("c/3/0", 1)], "{sets:?}");
    assert!(!dir.path().join("c/4/0").exists(), "a chunk written all fill is deleted");
    let all = fs.read(ino, fh, 0, 72 * row as u32).unwrap();
    for (r, bytes) in all.chunks(row as usize).enumerate() {
        let r = r as u64;
        let expected = match r {
            17 => bytes.iter().enumerate().all(|(i, &b)| b == if i == 5 { 9 } else { 0 }),
            16..28 | 32..40 | 64.. => bytes.iter().all(|&b| b == 0),
            _ => bytes.iter().all(|&b| b as u64 == r / 8),
        };
        assert!(expected, "row {r}");
    }
}

#[test]
fn a_writer_that_outruns_the_background_stores_is_held_until_they_catch_up() {
    // uint8 (64, 4096) in chunks of (8, 4096), 32 KiB each; one worker, and a dirty limit of
    // 256 KiB: the background stores under way may hold 32 KiB (an eighth) or two chunks (two
    // per worker). The store of chunk 0 is slow; the writer goes on to chunks 1 and 2, whose
    // stores put three chunks under way: that write is held until the slow store is done,
    // rather than running on until the dirty limit.
    let dir = tempfile::tempdir().unwrap();
    common::banded_array(dir.path(), 64, 4096, 8);
    let store = CountingStore::over(dir.path());
    let (entered, go) = store.hold("set", "c/0/0");
    let config = Config { dirty_limit: 256 << 10, workers: std::num::NonZeroUsize::MIN, ..Config::default() };
    let fs = Arc::new(ZarrFs::new(store, config));
    let ino = fs.lookup(1, "data").unwrap().ino;
    let fh = fs.open(ino, true, false, 0).unwrap();
    fs.write(ino, fh, 0, &[1; 8 * 4096], false).unwrap();
    entered.recv_timeout(std::time::Duration::from_secs(10)).expect("chunk 0 was not stored in the background");
    fs.write(ino, fh, 8 * 4096, &[2; 8 * 4096], false).unwrap();
    let (done_tx, done) = std::sync::mpsc::channel();
    let writer = {
        let fs = fs.clone();
        std::thread::spawn(move || done_tx.send(fs.write(ino, fh, 16 * 4096, &[3; 8 * 4096], false)))
    };
    let early = done.recv_timeout(std::time::Duration::from_millis(500));
    go.send(()).unwrap();
    assert!(early.is_err(), "the write returned ({early:?}) while the stores under way held three chunks, past both bounds");
    done.recv_timeout(std::time::Duration::from_secs(10)).expect("the write stayed held after the store").unwrap();
    writer.join().unwrap().unwrap();
    let expected: Vec<u8> = [1u8, 2, 3].iter().flat_map(|&b| [b; 8 * 4096]).collect();
    assert_eq!(fs.read(ino, fh, 0, 24 * 4096).unwrap(), expected);
    fs.release(fh);
    for (b, v) in [(0, 1u8), (1, 2), (2, 3)] {
        assert_eq!(std::fs::read(dir.path().join(format!("c/{b}/0"))).unwrap(), vec![v; 8 * 4096]);
    }
}

#[test]
fn a_read_after_a_chunk_was_stored_sees_it_while_an_older_read_of_it_still_loads() {
    // uint8 (64, 4096) in chunks of (8, 4096), 32 KiB each; chunk 0 holds 0s. The kernel reads
    // one page of it (its read-ahead) and is slow; meanwhile the chunk is written whole and, the
    // small dirty limit starting background stores, stored; then another page of it is read.
    let dir = tempfile::tempdir().unwrap();
    common::banded_array(dir.path(), 64, 4096, 8);
    let store = CountingStore::over(dir.path());
    let (entered, go) = store.hold("get", "c/0/0");
    let fs = Arc::new(ZarrFs::new(store, Config { dirty_limit: 64 << 10, ..Config::default() }));
    let ino = fs.lookup(1, "data").unwrap().ino;
    let fh = fs.open(ino, true, false, 0).unwrap();
    let slow = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.read(ino, fh, 0, 4096))
    };
    entered.recv().unwrap();
    let changes = fs.cache().changes();
    fs.write(ino, fh, 0, &[9; 8 * 4096], false).unwrap();
    // The background store forgets the cached chunk and the change held in memory at once.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while fs.cache().changes() == changes {
        assert!(std::time::Instant::now() < deadline, "the chunk was not stored in the background");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let (got_tx, got) = std::sync::mpsc::channel();
    let later = {
        let fs = fs.clone();
        std::thread::spawn(move || got_tx.send(fs.read(ino, fh, 4096, 4096)))
    };
    let seen = got.recv_timeout(std::time::Duration::from_secs(10));
    go.send(()).unwrap();
    let seen = seen.expect("the later read waited for the slow read that began before the write");
    assert_eq!(seen.unwrap(), vec![9; 4096], "the later read got the chunk as it was before the write");
    assert_eq!(slow.join().unwrap().unwrap().len(), 4096);
    later.join().unwrap().unwrap();
    assert_eq!(fs.read(ino, fh, 0, 8 * 4096).unwrap(), vec![9; 8 * 4096]);
}

/// uint8 (64, 4096) in chunks of (8, 4096), metadata TTL zero, grown twice by a row written
/// past its end, the first growth flushed; the second flush runs on a thread, its store of
/// `held` (the new chunk or the metadata) held back, as over a slow network, until `go`.
struct HeldFlush {
    dir: tempfile::TempDir,
    fs: Arc<ZarrFs>,
    ino: u64,
    fh: u64,
    go: std::sync::mpsc::Sender<()>,
    flush: std::thread::JoinHandle<zarrfs::Result<()>>,
}

fn second_growth_with_a_held_flush(held: &str) -> HeldFlush {
    let dir = tempfile::tempdir().unwrap();
    common::banded_array(dir.path(), 64, 4096, 8);
    let store = CountingStore::over(dir.path());
    let fs = Arc::new(ZarrFs::new(store.clone(), Config { metadata_ttl: std::time::Duration::ZERO, ..Config::default() }));
    let ino = fs.lookup(1, "data").unwrap().ino;
    let fh = fs.open(ino, true, false, 0).unwrap();
    fs.write(ino, fh, 64 * 4096, &[1; 4096], false).unwrap();
    fs.flush(fh, 0).unwrap();
    fs.write(ino, fh, 65 * 4096, &[2; 4096], false).unwrap();
    let (entered, go) = store.hold("set", held);
    let flush = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.flush(fh, 0))
    };
    entered.recv_timeout(std::time::Duration::from_secs(10)).unwrap_or_else(|_| panic!("the flush did not store {held}"));
    HeldFlush { dir, fs, ino, fh, go, flush }
}

impl HeldFlush {
    /// Let the flush go on; it must succeed and store the new shape.
    fn finish(self) -> (tempfile::TempDir, Arc<ZarrFs>, u64, u64) {
        self.go.send(()).unwrap();
        self.flush.join().unwrap().unwrap();
        let stored: serde_json::Value = serde_json::from_slice(&std::fs::read(self.dir.path().join("zarr.json")).unwrap()).unwrap();
        assert_eq!(stored["shape"], serde_json::json!([66, 4096]));
        (self.dir, self.fs, self.ino, self.fh)
    }
}

#[test]
fn a_metadata_recheck_during_a_flush_keeps_the_size_being_stored() {
    // While the second flush stores its chunk (the metadata goes last), a lookup checks the
    // store, which holds the document of the first flush: that is the mount's own change on
    // its way, not another writer's.
    let held = second_growth_with_a_held_flush("c/8/0");
    let during = held.fs.lookup(1, "data").map(|a| a.size);
    let (_dir, fs, ino, fh) = held.finish();
    assert_eq!(during.unwrap(), 66 * 4096, "the size went back to the stored one while the new one was being stored");
    assert_eq!(fs.lookup(1, "data").unwrap().size, 66 * 4096);
    assert_eq!(fs.read(ino, fh, 65 * 4096, 4096).unwrap(), vec![2; 4096]);
}

#[test]
fn a_lookup_does_not_wait_for_a_flush_storing_the_metadata() {
    // While the second flush stores the metadata (with retries, it may take a while), a lookup
    // finds the store's document changed (the first flush's) and answers at once, with the size
    // being stored.
    let held = second_growth_with_a_held_flush("zarr.json");
    let (size_tx, size) = std::sync::mpsc::channel();
    let lookup = {
        let fs = held.fs.clone();
        std::thread::spawn(move || size_tx.send(fs.lookup(1, "data").map(|a| a.size)))
    };
    let during = size.recv_timeout(std::time::Duration::from_secs(5));
    held.finish();
    lookup.join().unwrap().ok();
    assert_eq!(during.expect("the lookup waited for the metadata store").unwrap(), 66 * 4096);
}

/// A mount of a copy of the vlen fixture over a counting store, and the inode of
/// `strings_1d/data` (eleven strings in chunks of four). The directory lives as long as `_dir`.
fn strings_1d() -> (tempfile::TempDir, std::path::PathBuf, Arc<CountingStore>, ZarrFs, u64) {
    let (dir, root) = common::copy_store(&common::fixtures().join("vlen.zarr"));
    let store = CountingStore::over(&root);
    let fs = ZarrFs::new(store.clone(), Config::default());
    let array = fs.lookup(1, "strings_1d").unwrap().ino;
    let data = fs.lookup(array, "data").unwrap().ino;
    (dir, root, store, fs, data)
}

#[test]
fn a_text_rewrite_whose_metadata_store_fails_is_served_and_its_metadata_stored_at_the_next_flush() {
    // Eleven strings in chunks of four, rewritten as fourteen lines: three new chunks' worth of
    // keys (c/0..c/3), then the metadata, whose store fails once (a full disk).
    let (_dir, root, store, fs, data) = strings_1d();
    let fh = fs.open(data, true, true, 0).unwrap();
    let text: String = (0..14).map(|i| format!("line {i}\n")).collect();
    fs.write(data, fh, 0, text.as_bytes(), false).unwrap();
    store.fail_next_set("strings_1d/zarr.json");
    assert!(fs.flush(fh, 0).is_err(), "the metadata store failed, and close must say so");
    let shape = || {
        serde_json::from_slice::<serde_json::Value>(&std::fs::read(root.join("strings_1d/zarr.json")).unwrap()).unwrap()["shape"].clone()
    };
    assert_eq!(shape(), serde_json::json!([11]));
    // The chunks are stored: the mount serves them, with the new length.
    assert_eq!(fs.read(data, fh, 0, 4096).unwrap(), text.as_bytes());
    // The metadata is still to be stored: the next flush stores it; fsync makes all durable.
    fs.flush(fh, 0).unwrap();
    assert_eq!(shape(), serde_json::json!([14]));
    fs.fsync(fh).unwrap();
    let synced = store.synced.lock().unwrap().clone();
    for key in ["strings_1d/c/0", "strings_1d/c/3", "strings_1d/zarr.json"] {
        assert!(synced.contains(key), "{key} was not made durable: {synced:?}");
    }
    fs.release(fh);
}

#[test]
fn a_text_append_whose_chunk_store_fails_leaves_the_old_length() {
    // Eleven strings in chunks of four; six lines appended rewrite the chunk the old end cuts
    // through (c/2) and add c/3 and c/4. The store of c/3 fails (a full disk): the append fails
    // as a whole, and the array keeps its eleven strings, now and after later flushes.
    let (_dir, root, store, fs, data) = strings_1d();
    let fh = fs.open(data, true, false, 0).unwrap();
    let before = fs.read(data, fh, 0, 1 << 16).unwrap();
    let added: String = (0..6).map(|i| format!("new {i}\n")).collect();
    fs.write(data, fh, before.len() as u64, added.as_bytes(), true).unwrap();
    store.fail_next_set("strings_1d/c/3");
    assert!(fs.flush(fh, 0).is_err(), "a chunk store failed, and close must say so");
    let shape = || {
        serde_json::from_slice::<serde_json::Value>(&std::fs::read(root.join("strings_1d/zarr.json")).unwrap()).unwrap()["shape"].clone()
    };
    assert_eq!(fs.read(data, fh, 0, 1 << 16).unwrap(), before, "a failed append shows through");
    fs.flush(fh, 0).unwrap();
    fs.release(fh);
    assert_eq!(shape(), serde_json::json!([11]), "a later flush stored the length of the failed append");
    let fh = fs.open(data, true, false, 0).unwrap();
    assert_eq!(fs.read(data, fh, 0, 1 << 16).unwrap(), before);
    // Appended again, with the disk no longer full, the lines land whole.
    fs.write(data, fh, before.len() as u64, added.as_bytes(), true).unwrap();
    fs.release(fh);
    assert_eq!(shape(), serde_json::json!([17]));
    let (data, fh) = open_data(&fs, "strings_1d");
    assert_eq!(fs.read(data, fh, 0, 1 << 16).unwrap(), [before.as_slice(), added.as_bytes()].concat());
}

#[test]
fn fsync_after_a_prepend_makes_its_chunks_and_metadata_durable() {
    let (_dir, store, fs) = tiny_chunks(8, &[0], "/", Config { adopt_offset: true, ..Config::default() });
    let array = fs.lookup(1, "tiny").unwrap().ino;
    let prepend = fs.lookup(array, "prepend").unwrap().ino;
    let fh = fs.open(prepend, true, false, 0).unwrap();
    fs.write(prepend, fh, 0, &[9, 9, 8, 8], false).unwrap();
    fs.release(fh);
    let (data, fh) = open_data(&fs, "tiny");
    assert_eq!(fs.read(data, fh, 0, 6).unwrap(), [9, 9, 8, 8, 0, 1]);
    fs.fsync(fh).unwrap();
    let synced = store.synced.lock().unwrap().clone();
    for key in ["tiny/c/-1/0", "tiny/c/-2/0", "tiny/zarr.json"] {
        assert!(synced.contains(key), "{key} was not made durable: {synced:?}");
    }
}

#[test]
fn status_counts_the_failed_stores_a_retry_has_not_yet_stored() {
    let (_dir, store, fs) = tiny_chunks(4, &[1], "/", Config::default());
    let (ino, _) = open_data(&fs, "tiny");
    let fh = fs.open(ino, true, false, 0).unwrap();
    let failed = || {
        let control = fs.lookup(1, ".zarrfs").unwrap().ino;
        let stats = fs.lookup(control, "stats").unwrap().ino;
        let sh = fs.open(stats, false, false, 0).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&fs.read(stats, sh, 0, 1 << 20).unwrap()).unwrap();
        fs.release(sh);
        doc["failed_stores"].as_u64().unwrap()
    };
    fs.write(ino, fh, 2, &[5, 6], false).unwrap();
    store.fail_next_set("tiny/c/1/0");
    assert!(fs.flush(fh, 0).is_err(), "the store failed, and close must say so");
    assert_eq!(failed(), 1, "a failure whose changes wait for a retry");
    // What the unmount's report names: the bytes written and not stored (not the memory held).
    store.fail_next_set("tiny/c/1/0");
    let report = fs.flush_all();
    assert_eq!(report.unstored.iter().map(|u| (u.array.as_str(), u.bytes)).collect::<Vec<_>>(), [("/tiny", 2)], "{report}");
    assert!(report.to_string().contains("2 bytes written, not stored"), "{report}");
    fs.flush(fh, 0).unwrap();
    assert_eq!(failed(), 0, "the retry stored them: nothing has failed any more");
    assert_eq!(fs.read(ino, fh, 0, 8).unwrap(), [7, 7, 5, 6, 7, 7, 7, 7]);
    fs.release(fh);
}
