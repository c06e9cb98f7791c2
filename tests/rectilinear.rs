//! Rectilinear grids through a mount: a trillion one-row chunks held as one run, and the limits
//! of growth on sharded rectilinear grids.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;

use common::{Mount, copy_store, fixtures};
use serde_json::json;

const N: u64 = 1 << 40;

#[test]
fn a_trillion_chunks_mount_read_write_grow_and_prepend_at_the_cost_of_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("t.zarr");
    std::fs::create_dir_all(store.join("a")).unwrap();
    std::fs::write(store.join("zarr.json"), br#"{"zarr_format":3,"node_type":"group"}"#).unwrap();
    let doc = json!({"zarr_format": 3, "node_type": "array", "shape": [N, 2], "data_type": "uint8",
        "chunk_grid": {"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": [[[1, N]], 2]}},
        "chunk_key_encoding": {"name": "offset", "configuration": {"offset": [0, 0], "separator": "/"}},
        "fill_value": 7, "codecs": [{"name": "bytes"}]});
    std::fs::write(store.join("a/zarr.json"), serde_json::to_vec(&doc).unwrap()).unwrap();
    // A handful of stored chunks (one row each, uncompressed).
    for (row, bytes) in [(0u64, [1u8, 2]), (12345, [3, 4]), (N / 2, [5, 6])] {
        std::fs::create_dir_all(store.join(format!("a/c/{row}"))).unwrap();
        std::fs::write(store.join(format!("a/c/{row}/0")), bytes).unwrap();
    }
    let m = Mount::new(&store, &[]);
    let names: Vec<String> = std::fs::read_dir(m.path("a")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(names.contains(&"data".to_string()), "{names:?}");
    let data = m.path("a/data");
    assert_eq!(std::fs::metadata(&data).unwrap().len(), 2 * N);
    let f = OpenOptions::new().read(true).write(true).open(&data).unwrap();
    let read_row = |row: u64| {
        let mut b = [0u8; 2];
        f.read_exact_at(&mut b, row * 2).unwrap();
        b
    };
    assert_eq!(read_row(0), [1, 2]);
    assert_eq!(read_row(12345), [3, 4]);
    assert_eq!(read_row(N / 2), [5, 6]);
    assert_eq!(read_row(N - 1), [7, 7]);
    assert_eq!(read_row(99), [7, 7]);
    // A write near the end creates exactly one chunk key.
    let before = std::fs::read_dir(store.join("a/c")).unwrap().count();
    f.write_all_at(&[8, 9], (N - 2) * 2).unwrap();
    f.sync_all().unwrap();
    common::backend::pull(&store);
    assert_eq!(std::fs::read_dir(store.join("a/c")).unwrap().count(), before + 1);
    assert_eq!(std::fs::read(store.join(format!("a/c/{}/0", N - 2))).unwrap(), [8, 9]);
    // A write past the end grows it by one edge, merged into the run.
    f.write_all_at(&[10, 11], N * 2).unwrap();
    drop(f);
    assert_eq!(std::fs::metadata(&data).unwrap().len(), 2 * (N + 1));
    common::backend::pull(&store);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(store.join("a/zarr.json")).unwrap()).unwrap();
    assert_eq!(doc["chunk_grid"]["configuration"]["chunk_shapes"], json!([[[1, N + 1]], 2]));
    // A prepend of any number of rows is one new edge in front.
    let mut p = OpenOptions::new().write(true).open(m.path("a/prepend")).unwrap();
    p.write_all(&[20, 21, 22, 23, 24, 25]).unwrap();
    drop(p);
    common::backend::pull(&store);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(store.join("a/zarr.json")).unwrap()).unwrap();
    assert_eq!(doc["chunk_grid"]["configuration"]["chunk_shapes"], json!([[3, [1, N + 1]], 2]));
    assert_eq!(doc["chunk_key_encoding"]["configuration"]["offset"], json!([-1, 0]));
    assert_eq!(doc["shape"], json!([N + 4, 2]));
    let f = std::fs::File::open(&data).unwrap();
    let mut head = [0u8; 8];
    f.read_exact_at(&mut head, 0).unwrap();
    assert_eq!(head, [20, 21, 22, 23, 24, 25, 1, 2]);
    let mut tail = [0u8; 2];
    f.read_exact_at(&mut tail, (N + 3) * 2).unwrap();
    assert_eq!(tail, [10, 11]);
    // A sequential read of a million one-row chunks (all absent but four): done in batches of
    // bounded memory.
    let out =
        std::process::Command::new("dd").arg(format!("if={}", data.display())).args(["bs=1M", "count=2", "status=none"]).output().unwrap();
    let mut expected = vec![7u8; 2 << 20];
    expected[..8].copy_from_slice(&[20, 21, 22, 23, 24, 25, 1, 2]);
    expected[12348 * 2..12349 * 2].copy_from_slice(&[3, 4]);
    assert!(out.stdout == expected, "dd read {} bytes, not the expected 2 MiB", out.stdout.len());
    let rss = m.rss();
    assert!(rss < 64 << 20, "the daemon holds {} MiB", rss >> 20);
}

#[test]
fn sharded_rectilinear_grids_grow_by_whole_inner_chunks_only() {
    let (_dir, store) = copy_store(&fixtures().join("rectilinear.zarr"));
    let m = Mount::new(&store, &[]);
    // (12, 8) uint16, shard edges [4, 8] x [8], inner chunks (2, 4): rows of 16 bytes.
    let data = m.path("sharded/data");
    let f = OpenOptions::new().write(true).open(&data).unwrap();
    assert_eq!(f.set_len(13 * 16).unwrap_err().raw_os_error(), Some(libc::EINVAL));
    f.set_len(14 * 16).unwrap();
    drop(f);
    common::backend::pull(&store);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(store.join("sharded/zarr.json")).unwrap()).unwrap();
    assert_eq!(doc["chunk_grid"]["configuration"]["chunk_shapes"], json!([[4, 8, 2], [8]]));
}

#[test]
fn changed_one_row_chunks_count_their_entries_against_the_dirty_limit() {
    if common::backend::local_only("16 384 one-row chunk objects, counted while the mount is live") {
        return;
    }
    // 32 KiB written in two-byte chunks is 16 384 changed chunks: far more held than 32 KiB.
    let rows = 1u64 << 14;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("t.zarr");
    let doc = json!({"zarr_format": 3, "node_type": "array", "shape": [rows, 2], "data_type": "uint8",
        "chunk_grid": {"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": [[[1, rows]], 2]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}]});
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join("zarr.json"), serde_json::to_vec(&doc).unwrap()).unwrap();
    let m = Mount::new(&store, &["--dirty-limit", "1M"]);
    let f = OpenOptions::new().write(true).open(m.path("data")).unwrap();
    f.write_all_at(&vec![1u8; 2 * rows as usize], 0).unwrap();
    // Still open, never fsynced: the limit alone made the daemon store them.
    let stored = std::fs::read_dir(store.join("c")).map_or(0, |d| d.count());
    assert!(stored >= rows as usize / 2, "{stored} of {rows} chunks stored before close");
    drop(f);
    assert_eq!(std::fs::read_dir(store.join("c")).unwrap().count(), rows as usize);
}
