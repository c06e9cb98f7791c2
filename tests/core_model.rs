//! Reference-model test through the core (no FUSE): random writes, truncates, reads, fsyncs and
//! reopens on arrays of several codecs in an in-memory store, against a `Vec<u8>` model.

mod common;

use std::sync::Arc;

use common::model::{Fixture, Model, Op, fixtures, ops, payload};
use proptest::prelude::*;
use zarrfs::fs::{Config, ZarrFs};
use zarrfs::store::{MemoryStore, Store};

struct Core {
    fs: ZarrFs,
    ino: u64,
    fh: u64,
}

fn open(store: &Arc<MemoryStore>, f: &Fixture, dirty_limit: usize) -> Core {
    let fs = ZarrFs::new(store.clone(), Config { cache_size: 1 << 16, dirty_limit, ..Config::default() });
    let dir = fs.lookup(1, f.name).expect("array");
    let ino = fs.lookup(dir.ino, "data").expect("data").ino;
    let fh = fs.open(ino, true, false, 0).expect("open");
    Core { fs, ino, fh }
}

fn run(f: &Fixture, ops: &[Op], dirty_limit: usize) -> Result<(), TestCaseError> {
    let store = Arc::new(MemoryStore::new());
    store.set(&format!("{}/{}", f.name, f.doc_name), f.doc.as_bytes()).unwrap();
    store.set("zarr.json", br#"{"zarr_format":3,"node_type":"group"}"#).unwrap();
    let mut core = open(&store, f, dirty_limit);
    let size = core.fs.getattr(core.ino).unwrap().size;
    let mut model = Model { bytes: Vec::new(), row: f.row, fill: f.fill.clone() };
    model.truncate(size / f.row);
    for op in ops {
        match *op {
            Op::Write { offset, len, seed } => {
                let (offset, len) = f.align(offset, len);
                let data = payload(f, offset, len, seed);
                core.fs.write(core.ino, core.fh, offset, &data, false).unwrap();
                model.write(offset, &data);
            }
            Op::Truncate { rows } => {
                core.fs.truncate(core.ino, rows * f.row, Some(core.fh)).unwrap();
                model.truncate(rows);
            }
            Op::Read { offset, len } => {
                let got = core.fs.read(core.ino, core.fh, offset, len as u32).unwrap();
                let want = model.read(offset, len);
                // Past the end, the core answers with fill up to the end of the page (see
                // `pad_last_page`); the kernel shows none of it.
                prop_assert!(got.len() >= want.len() && got.len() <= len);
                prop_assert_eq!(&got[..want.len()], want, "{} read({}, {})", f.name, offset, len);
            }
            Op::Fsync => core.fs.fsync(core.fh).unwrap(),
            Op::Prepend { chunks, seed } => {
                let Some(rows) = f.prepend_rows else { continue };
                let data = payload(f, 0, (chunks * rows * f.row) as usize, seed);
                let dir = core.fs.lookup(1, f.name).unwrap().ino;
                let prepend = core.fs.lookup(dir, "prepend").unwrap().ino;
                let fh = core.fs.open(prepend, true, true, 0).unwrap();
                core.fs.write(prepend, fh, 0, &data, false).unwrap();
                core.fs.flush(fh, 0).unwrap();
                core.fs.release(fh);
                model.prepend(&data);
            }
            Op::Reopen => {
                core.fs.flush(core.fh, 0).unwrap();
                core.fs.release(core.fh);
                core = open(&store, f, dirty_limit);
            }
        }
        let attr = core.fs.getattr(core.ino).unwrap();
        prop_assert_eq!(attr.size, model.bytes.len() as u64, "{} size after {:?}", f.name, op);
        let all = core.fs.read(core.ino, core.fh, 0, model.bytes.len() as u32).unwrap();
        prop_assert!(all == model.bytes, "{}: contents differ after {:?}", f.name, op);
    }
    // After a last flush, a fresh reader of the store sees the same.
    core.fs.flush(core.fh, 0).unwrap();
    let fresh = open(&store, f, dirty_limit);
    let all = fresh.fs.read(fresh.ino, fresh.fh, 0, model.bytes.len() as u32).unwrap();
    prop_assert!(all == model.bytes, "{}: the store differs from the model", f.name);
    // No chunk equal to fill is stored, and nothing but chunks and the document.
    for key in store.keys() {
        prop_assert!(key == "zarr.json" || key.starts_with(&format!("{}/", f.name)), "stray key {}", key);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn core_matches_the_model(which in 0usize..5, ops in ops(700), small_dirty_limit in any::<bool>()) {
        // A tiny dirty limit makes writes store chunks in the background and at the limit.
        let fs = fixtures();
        run(&fs[which], &ops, if small_dirty_limit { 1024 } else { 256 << 20 })?;
    }
}
