//! Several mounts writing one store, through the core (no FUSE), in orders chosen to hit each
//! race: a chunk another mount stored between this mount's read of it and its store, two
//! growths of one array from the same shape, and a prepend behind another. Every byte a writer
//! was told was stored must be in the store; every loser must be told. The same runs on an
//! in-memory store and on a local directory (its per-key locks).

use std::sync::Arc;

use zarrfs::fs::{Config, ZarrFs};
use zarrfs::store::{ByteRange, Entry, Expect, Head, Held, LocalStore, MemoryStore, Store, Value, Version};

/// uint8, 64 elements in chunks of 16, zstd: four chunks, each shared by two writers' spans.
const DOC: &str = r#"{"zarr_format": 3, "node_type": "array", "shape": [64], "data_type": "uint8",
  "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [16]}},
  "chunk_key_encoding": {"name": "offset", "configuration": {"offset": [0]}}, "fill_value": 0,
  "codecs": [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 1, "checksum": false}}]}"#;

struct Writer {
    fs: ZarrFs,
    ino: u64,
    fh: u64,
}

impl Writer {
    fn open(store: &Arc<dyn Store>) -> Writer {
        let config = Config { metadata_ttl: std::time::Duration::ZERO, ..Config::default() };
        let fs = ZarrFs::new(store.clone(), config);
        let dir = fs.lookup(1, "a").expect("array").ino;
        let ino = fs.lookup(dir, "data").expect("data").ino;
        let fh = fs.open(ino, true, false, 0).expect("open");
        Writer { fs, ino, fh }
    }

    fn write(&self, offset: u64, bytes: &[u8]) {
        self.fs.write(self.ino, self.fh, offset, bytes, false).expect("write");
    }

    fn close(self) -> zarrfs::Result<()> {
        let flushed = self.fs.flush(self.fh, 0);
        self.fs.release(self.fh);
        flushed
    }
}

/// What a fresh mount reads of the whole array.
fn stored(store: &Arc<dyn Store>) -> Vec<u8> {
    let w = Writer::open(store);
    let size = w.fs.getattr(w.ino).unwrap().size;
    w.fs.read(w.ino, w.fh, 0, size as u32).unwrap()
}

fn stores() -> Vec<(&'static str, Arc<dyn Store>, Option<tempfile::TempDir>)> {
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn Store> = Arc::new(LocalStore::open(dir.path()).unwrap());
    let mut out = vec![("memory", memory, None), ("local", local, Some(dir))];
    for (_, store, _) in &mut out {
        store.set("zarr.json", br#"{"zarr_format":3,"node_type":"group"}"#).unwrap();
        store.set("a/zarr.json", DOC.as_bytes()).unwrap();
    }
    out
}

#[test]
fn a_chunk_another_mount_stored_since_it_was_read_is_merged_not_overwritten() {
    for (name, store, _dir) in stores() {
        // Four writers, each with an 8-byte span; two spans to a chunk. Each reads its chunks
        // (a partial write), then the others store theirs before it does.
        let writers: Vec<Writer> = (0..4).map(|_| Writer::open(&store)).collect();
        let mut want = vec![0u8; 64];
        for round in 1..=3u8 {
            for (w, writer) in writers.iter().enumerate() {
                let span: Vec<u8> = (0..8).map(|i| round * 16 + w as u8 * 4 + i % 4).collect();
                for k in 0..2u64 {
                    let at = (w as u64) * 8 + k * 32;
                    writer.write(at, &span);
                    want[at as usize..at as usize + 8].copy_from_slice(&span);
                }
            }
            for writer in &writers {
                writer.fs.fsync(writer.fh).unwrap_or_else(|e| panic!("{name}: fsync of a merged chunk: {e}"));
            }
            assert_eq!(stored(&store), want, "{name}: round {round}: every writer's bytes");
        }
        for w in writers {
            w.close().unwrap();
        }
        // The lock files are gone with their writes.
        if let Some(dir) = &_dir {
            let left: Vec<_> =
                walk(dir.path()).into_iter().filter(|p| p.rsplit('/').next().is_some_and(|name| name.contains("zarrfs-"))).collect();
            assert!(left.is_empty(), "{name}: {left:?}");
        }
    }
}

#[test]
fn a_chunk_made_fill_by_one_mount_and_written_by_another_keeps_the_others_bytes() {
    for (name, store, _dir) in stores() {
        let (a, b) = (Writer::open(&store), Writer::open(&store));
        a.write(0, &[7; 16]);
        a.fs.fsync(a.fh).unwrap();
        // B reads the chunk and zeroes half of it; A writes the other half meanwhile.
        b.write(0, &[0; 8]);
        a.write(8, &[9; 8]);
        a.fs.fsync(a.fh).unwrap();
        b.fs.fsync(b.fh).unwrap();
        let got = stored(&store);
        assert_eq!(&got[..16], &[[0u8; 8], [9u8; 8]].concat()[..], "{name}");
        // Then B zeroes the rest: the chunk becomes fill after A's write was merged in.
        b.write(8, &[0; 8]);
        b.fs.fsync(b.fh).unwrap();
        assert_eq!(&stored(&store)[..16], &[0u8; 16], "{name}");
        a.close().unwrap();
        b.close().unwrap();
    }
}

#[test]
fn of_two_mounts_growing_one_array_the_loser_is_told_and_stores_nothing() {
    for (name, store, _dir) in stores() {
        let (a, b) = (Writer::open(&store), Writer::open(&store));
        // Both append past the end (64) from the same shape; the new chunk is the same key.
        a.write(64, &[1; 20]);
        b.write(64, &[2; 12]);
        a.fs.fsync(a.fh).unwrap_or_else(|e| panic!("{name}: the first growth: {e}"));
        let lost = b.fs.fsync(b.fh);
        assert!(lost.is_err(), "{name}: the second growth from the same shape must fail");
        let mut want = vec![0u8; 64];
        want.extend([1; 20]);
        assert_eq!(stored(&store), want, "{name}: the winner's rows, whole");
        drop(b.close());
        // A writer that reads the shape again grows it after the winner's rows.
        let c = Writer::open(&store);
        c.write(84, &[3; 4]);
        c.close().unwrap();
        want.extend([3; 4]);
        assert_eq!(stored(&store), want, "{name}: rows appended in turn");
        a.close().unwrap();
    }
}

/// What runs before a store of a key, given the key and the store's condition (`None`: none).
type BeforeStore = Box<dyn Fn(&str, Option<&Expect>) + Send + Sync>;

/// A store that calls `before` with each key it is about to store, then stores it.
struct Hooked {
    inner: Arc<dyn Store>,
    before: BeforeStore,
}

impl Store for Hooked {
    fn get_value(&self, key: &str, max: u64) -> zarrfs::Result<Option<Value>> {
        self.inner.get_value(key, max)
    }
    fn head(&self, key: &str) -> zarrfs::Result<Option<Head>> {
        self.inner.head(key)
    }
    fn get_range_versioned(&self, key: &str, range: ByteRange) -> zarrfs::Result<Option<(Vec<u8>, Version)>> {
        self.inner.get_range_versioned(key, range)
    }
    fn set(&self, key: &str, value: &[u8]) -> zarrfs::Result<Version> {
        (self.before)(key, None);
        self.inner.set(key, value)
    }
    fn delete(&self, key: &str) -> zarrfs::Result<()> {
        self.inner.delete(key)
    }
    fn set_if(&self, key: &str, value: &[u8], expect: Expect) -> zarrfs::Result<Version> {
        (self.before)(key, Some(&expect));
        self.inner.set_if(key, value, expect)
    }
    fn delete_if(&self, key: &str, expect: Expect) -> zarrfs::Result<()> {
        self.inner.delete_if(key, expect)
    }
    fn hold_lock(self: Arc<Self>, key: &str, wait: std::time::Duration) -> zarrfs::Result<Held> {
        self.inner.clone().hold_lock(key, wait)
    }
    fn list_dir(&self, prefix: &str) -> zarrfs::Result<Vec<Entry>> {
        self.inner.list_dir(prefix)
    }
    fn sync(&self, keys: &[String]) -> zarrfs::Result<()> {
        self.inner.sync(keys)
    }
}

#[test]
fn a_growth_behind_another_that_is_storing_waits_and_then_stores_nothing() {
    for (name, inner, _dir) in stores() {
        let (came, arrived) = std::sync::mpsc::channel();
        let (release, go) = std::sync::mpsc::channel();
        // The first store of the metadata is held until told to go on, having said it came.
        let gate = std::sync::Mutex::new(Some((came, go)));
        let before = move |key: &str, _: Option<&Expect>| {
            let held = if key == "a/zarr.json" { gate.lock().unwrap().take() } else { None };
            if let Some((came, go)) = held {
                let _ = came.send(());
                let _ = go.recv();
            }
        };
        let store: Arc<dyn Store> = Arc::new(Hooked { inner, before: Box::new(before) });
        let (a, b) = (Writer::open(&store), Writer::open(&store));
        a.write(64, &[1; 20]);
        b.write(64, &[2; 12]);
        // A has stored its chunks and waits to store the new shape; B stores meanwhile.
        let a = std::thread::spawn(move || {
            let r = a.fs.fsync(a.fh);
            (a, r)
        });
        arrived.recv().unwrap();
        let b = std::thread::spawn(move || {
            let r = b.fs.fsync(b.fh);
            (b, r)
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
        release.send(()).unwrap();
        let (a, won) = a.join().unwrap();
        let (b, lost) = b.join().unwrap();
        won.unwrap_or_else(|e| panic!("{name}: the first growth: {e}"));
        assert!(lost.is_err(), "{name}: the growth behind it must fail");
        let mut want = vec![0u8; 64];
        want.extend([1; 20]);
        assert_eq!(stored(&store), want, "{name}: the winner's rows, whole");
        a.close().unwrap();
        drop(b.close());
    }
}

#[test]
fn every_writer_of_a_mount_that_lost_the_race_is_told_once_and_a_retry_succeeds() {
    for (name, store, _dir) in stores() {
        let (a, b) = (Writer::open(&store), Writer::open(&store));
        // A second writer of B's mount, with changes of its own in the same array.
        let other = b.fs.open(b.ino, true, false, 0).unwrap();
        a.write(64, &[1; 16]);
        b.write(64, &[2; 16]);
        b.fs.write(b.ino, other, 0, &[9; 4], false).unwrap();
        a.fs.fsync(a.fh).unwrap();
        assert!(matches!(b.fs.fsync(b.fh), Err(zarrfs::Error::Conflict { .. })), "{name}: the loser is told");
        // The other writer's changes went with the race: its close says so, once.
        assert!(matches!(b.fs.flush(other, 0), Err(zarrfs::Error::Conflict { .. })), "{name}: every writer is told");
        b.fs.flush(other, 0).unwrap_or_else(|e| panic!("{name}: told twice: {e}"));
        b.fs.release(other);
        // B serves the array as stored, and a retry from the new size lands after A's rows.
        assert_eq!(b.fs.getattr(b.ino).unwrap().size, 80, "{name}: the winner's size");
        b.write(80, &[2; 16]);
        b.fs.fsync(b.fh).unwrap_or_else(|e| panic!("{name}: the retry: {e}"));
        let mut want = vec![0u8; 64];
        want.extend([1; 16]);
        want.extend([2; 16]);
        assert_eq!(stored(&store), want, "{name}");
        a.close().unwrap();
        b.close().unwrap();
    }
}

/// The files beneath `dir`, relative.
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p.display().to_string());
        }
    }
    out
}

mod interleavings {
    //! The many-writer protocol as a model: random interleavings of three editors and an
    //! appender on one store, through the core. Each editor owns every third 3-byte block of
    //! the array's first rows (so blocks straddle int32 elements and chunks are shared), writes
    //! runs of its own blocks and fsyncs at random; the appender grows the array by rows and
    //! fsyncs. Every byte an editor was told was stored must be in the end state, every
    //! appended row once, and no editor is ever told anything: only shape changes race.
    use super::*;
    use proptest::prelude::*;

    /// int32 rows of 3 (12 bytes), chunks of 2 × 3: 4 rows to start.
    const ROWS_DOC: &str = r#"{"zarr_format": 3, "node_type": "array", "shape": [4, 3], "data_type": "int32",
      "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
      "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
      "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1, "checksum": false}}]}"#;
    const ROW: u64 = 12;
    const EDITED: u64 = 4 * ROW;
    const EDITORS: usize = 3;

    #[derive(Clone, Debug)]
    enum Step {
        /// Editor `who` writes its blocks among the first `blocks` from `first`, with `value`.
        Edit {
            who: usize,
            first: u64,
            blocks: u64,
            value: u8,
        },
        Fsync {
            who: usize,
        },
        /// The appender adds `rows` rows of `value`, then fsyncs (retried until stored).
        Append {
            rows: u64,
            value: u8,
        },
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        let step = prop_oneof![
            4 => (0..EDITORS, 0..EDITED / 3, 1..6u64, 1..=255u8).prop_map(|(who, first, blocks, value)| Step::Edit { who, first, blocks, value }),
            2 => (0..EDITORS).prop_map(|who| Step::Fsync { who }),
            1 => (1..4u64, 1..=255u8).prop_map(|(rows, value)| Step::Append { rows, value }),
        ];
        proptest::collection::vec(step, 1..40)
    }

    fn run(store: &Arc<dyn Store>, steps: &[Step]) -> Result<(), TestCaseError> {
        store.set("a/zarr.json", ROWS_DOC.as_bytes()).unwrap();
        let editors: Vec<Writer> = (0..EDITORS).map(|_| Writer::open(store)).collect();
        let appender = Writer::open(store);
        // Per editor: what it was told is stored, and what it wrote since.
        let mut acked = vec![0u8; EDITED as usize];
        let mut pending: Vec<Vec<(usize, u8)>> = vec![Vec::new(); EDITORS];
        let mut appended: Vec<u8> = Vec::new();
        for step in steps {
            match *step {
                Step::Edit { who, first, blocks, value } => {
                    for b in (first..(first + blocks).min(EDITED / 3)).filter(|b| *b as usize % EDITORS == who) {
                        editors[who].write(b * 3, &[value; 3]);
                        pending[who].extend((b * 3..b * 3 + 3).map(|p| (p as usize, value)));
                    }
                }
                Step::Fsync { who } => {
                    let told = editors[who].fs.fsync(editors[who].fh);
                    prop_assert!(told.is_ok(), "editor {who} was told {:?}", told.err());
                    for (p, v) in pending[who].drain(..) {
                        acked[p] = v;
                    }
                }
                Step::Append { rows, value } => {
                    let mut tries = 0;
                    loop {
                        let size = appender.fs.getattr(appender.ino).unwrap().size;
                        appender.write(size, &vec![value; (rows * ROW) as usize]);
                        match appender.fs.fsync(appender.fh) {
                            Ok(()) => break,
                            Err(e) => {
                                tries += 1;
                                prop_assert!(tries < 5, "the appender was refused {tries} times: {e}");
                            }
                        }
                    }
                    appended.extend(std::iter::repeat_n(value, (rows * ROW) as usize));
                }
            }
        }
        for (who, editor) in editors.into_iter().enumerate() {
            let closed = editor.close();
            prop_assert!(closed.is_ok(), "editor {who}'s close was told {:?}", closed.err());
            for (p, v) in pending[who].drain(..) {
                acked[p] = v;
            }
        }
        drop(appender);
        let got = stored(store);
        let mut want = acked;
        want.extend(appended);
        prop_assert_eq!(got, want);
        Ok(())
    }

    proptest! {
        // Each case runs on both stores, the local one fsyncing to disk: 24 cases take some 40 s.
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        #[test]
        fn editors_beside_an_appender_keep_every_acknowledged_byte(steps in steps()) {
            for (name, store, _dir) in stores() {
                run(&store, &steps).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
            }
        }
    }
}

#[test]
fn a_merge_outrun_by_another_writer_many_times_in_a_row_still_lands() {
    for (name, inner, _dir) in stores() {
        // The rival's first store makes the chunk hold bytes 16..24 of its own.
        let rival = Writer::open(&inner);
        rival.write(16, &[7; 8]);
        rival.fs.fsync(rival.fh).unwrap();
        // Before each of this mount's conditional stores of the chunk, 20 times, the rival
        // writes one byte of its own in it and fsyncs (through the store beneath).
        let times = 20;
        let rival = std::sync::Mutex::new((rival, 0u64));
        let before = move |key: &str, expect: Option<&Expect>| {
            if key == "a/c/1" && expect.is_some_and(|e| !matches!(e, Expect::Any)) {
                let mut rival = rival.lock().unwrap();
                let (writer, stored) = &mut *rival;
                if *stored < times {
                    *stored += 1;
                    writer.write(16 + *stored % 8, &[*stored as u8]);
                    writer.fs.fsync(writer.fh).expect("the rival's store");
                }
            }
        };
        let store: Arc<dyn Store> = Arc::new(Hooked { inner: inner.clone(), before: Box::new(before) });
        let w = Writer::open(&store);
        // A partial write of the rival's chunk: stored over the version read, refused 20 times.
        w.write(28, &[5; 4]);
        w.fs.fsync(w.fh).unwrap_or_else(|e| panic!("{name}: a merge outrun 20 times: {e}"));
        let mut want = vec![0u8; 64];
        want[16..24].fill(7);
        for stored in 1..=times {
            want[16 + (stored % 8) as usize] = stored as u8;
        }
        want[28..32].fill(5);
        assert_eq!(stored(&inner), want, "{name}: the rival's bytes and this mount's");
        w.close().unwrap();
    }
}
