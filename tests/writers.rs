//! Several daemons on one store, each its own mount (as on separate hosts): writers on shared
//! edge chunks, appends and prepends from two mounts at once, and a reader mount. Every byte a
//! writer was told was stored (`fsync`/`close` returned 0) must be in the final store, read
//! through a fresh mount; every loser must have been told. Runs on the local directory, and on
//! a bucket under `scripts/with-store` (S3, Azurite). Each test prints the bytes lost (0).

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Mount;
use serde_json::json;

/// The store kind the tests run on: `local`, or the bucket's scheme (`s3`, `az`, `gs`).
fn backend() -> String {
    match std::env::var("ZARRFS_TEST_BUCKET_URL") {
        Ok(url) if common::backend::is_s3() => url.split("://").next().unwrap_or("bucket").to_string(),
        _ => "local".into(),
    }
}

fn store_with(name: &str, doc: serde_json::Value) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.zarr");
    std::fs::create_dir_all(store.join(name)).unwrap();
    std::fs::write(store.join("zarr.json"), br#"{"zarr_format":3,"node_type":"group"}"#).unwrap();
    std::fs::write(store.join(name).join("zarr.json"), serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    (dir, store)
}

fn zstd() -> serde_json::Value {
    json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1, "checksum": false}}])
}

/// Bytes of `got` that differ from `want`, counting a length difference too.
fn lost(got: &[u8], want: &[u8]) -> usize {
    got.iter().zip(want).filter(|(a, b)| a != b).count() + got.len().abs_diff(want.len())
}

/// What a fresh mount of `store` reads of `path`.
fn stored(store: &Path, path: &str) -> Vec<u8> {
    let m = Mount::new(store, &[]);
    std::fs::read(m.path(path)).unwrap()
}

/// Retry `f` until it succeeds (another mount won: it reads the new state and tries again),
/// for at most 60 s; the errors met are counted.
fn until_stored(what: &str, mut f: impl FnMut() -> std::io::Result<()>) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut told = 0;
    loop {
        match f() {
            Ok(()) => return told,
            Err(e) => {
                assert!(matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EIO)), "{what}: {e}");
                eprintln!("{what}: told {e}");
                told += 1;
                assert!(Instant::now() < deadline, "{what}: still refused after 60 s ({told} tries): {e}");
                std::thread::sleep(Duration::from_millis(20 + (told as u64 % 7) * 15));
            }
        }
    }
}

/// An Icechunk repository (a copy of the fixture Python icechunk wrote) whose branch `main`
/// holds the array `name` of `doc` besides, made through a mount; its mount source.
fn icechunk_with(name: &str, doc: serde_json::Value) -> (tempfile::TempDir, PathBuf) {
    let (dir, repo) = common::copy_store(&common::fixtures().join("icechunk/repo"));
    let source = PathBuf::from(format!("{}|icechunk:", repo.display()));
    let mut m = Mount::new(&source, &[]);
    std::fs::create_dir(m.path(name)).unwrap();
    std::fs::write(m.path(&format!("{name}/zarr.json")), serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    assert!(m.stop().is_some_and(|s| s.success()), "{}", m.log_text());
    (dir, source)
}

/// Icechunk tests run on the local backend only: the repository is a local directory (on S3,
/// scripts/check-icechunk.py runs them).
fn icechunk_here() -> bool {
    !common::backend::local_only("the Icechunk repository is a local directory")
}

fn edge_chunks_doc() -> serde_json::Value {
    // 4400 bytes in chunks of 100: writers' 1024-byte spans 1024 bytes apart share their edge
    // chunks with their neighbours', which each read, change and store; 1100 bytes apart they
    // share none.
    json!({"zarr_format": 3, "node_type": "array", "shape": [4400], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [100]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": zstd()})
}

/// 4 mounts of `store`, 20 rounds each of a 1024-byte span at `span(writer)`, each fsynced and
/// never refused: what is stored at the end is every writer's last round.
fn many_writers(store: &Path, what: &str, span: impl Fn(usize) -> u64 + Sync) {
    let (writers, rounds) = (4usize, 20u8);
    let mounts: Vec<Mount> = (0..writers).map(|_| Mount::new(store, &["-o", "metadata_ttl=1"])).collect();
    let refused: Vec<String> = std::thread::scope(|s| {
        let writers: Vec<_> = (mounts.iter().enumerate())
            .map(|(w, m)| {
                let (data, at) = (m.path("a/data"), span(w));
                s.spawn(move || -> Result<(), String> {
                    let f = OpenOptions::new().write(true).open(&data).unwrap();
                    for round in 1..=rounds {
                        let bytes: Vec<u8> = (0..1024).map(|i| (w as u8 * 64) ^ round ^ (i as u8 % 251)).collect();
                        f.write_all_at(&bytes, at).unwrap();
                        f.sync_all().map_err(|e| format!("writer {w}, round {round}: fsync: {e}"))?;
                    }
                    Ok(())
                })
            })
            .collect();
        writers.into_iter().filter_map(|t| t.join().unwrap().err()).collect()
    });
    let logs: Vec<String> = mounts.iter().map(Mount::log_text).collect();
    // Never refused: a conflict on a shared chunk is merged, never handed to the writer.
    assert!(refused.is_empty(), "{what}: {refused:?}; the mounts' logs: {logs:#?}");
    // Nor logged as a warning: a merge is routine (docs/troubleshooting.md).
    let warned: Vec<&str> = logs.iter().flat_map(|l| l.lines()).filter(|l| l.contains(" WARN ")).collect();
    assert!(warned.is_empty(), "{what}: merged conflicts logged as warnings: {warned:#?}");
    drop(mounts);
    let got = stored(store, "a/data");
    let mut want = got.clone();
    for w in 0..writers {
        let at = span(w) as usize;
        for i in 0..1024 {
            want[at + i] = (w as u8 * 64) ^ rounds ^ (i as u8 % 251);
        }
    }
    let n = lost(&got, &want);
    println!("many writers ({}), {what}: {n} bytes lost", backend());
    assert_eq!(n, 0, "acknowledged bytes lost: {logs:?}");
}

#[test]
fn writers_on_shared_edge_chunks_lose_no_acknowledged_byte() {
    let (_dir, store) = store_with("a", edge_chunks_doc());
    many_writers(&store, "shared edge chunks", |w| w as u64 * 1024);
}

#[test]
fn icechunk_writers_on_one_branch_lose_nothing_on_shared_or_disjoint_chunks() {
    if !icechunk_here() {
        return;
    }
    let (_dir, source) = icechunk_with("a", edge_chunks_doc());
    many_writers(&source, "Icechunk, shared edge chunks", |w| w as u64 * 1024);
    // Spans in chunks of their own: nothing shared.
    let (_dir, source) = icechunk_with("a", edge_chunks_doc());
    many_writers(&source, "Icechunk, disjoint chunks", |w| w as u64 * 1100);
}

/// Two mounts of `store` (metadata TTL 0) doing `each` operations apiece at once, `op(mount,
/// tag)` with a tag of its own for each (1 + writer × 16 + i), every one retried until stored;
/// how many times a loser was told.
fn two_mounts_at_once(store: &Path, each: u8, op: impl Fn(&Mount, u8) -> std::io::Result<()> + Sync) -> usize {
    let mounts: Vec<Mount> = (0..2).map(|_| Mount::new(store, &["-o", "metadata_ttl=0"])).collect();
    std::thread::scope(|s| {
        let op = &op;
        let handles: Vec<_> = (0..2u8)
            .zip(&mounts)
            .map(|(w, m)| {
                s.spawn(move || (0..each).map(|i| until_stored(&format!("writer {w}, op {i}"), || op(m, 1 + w * 16 + i))).sum::<usize>())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    })
}

/// `got` as blocks of `size` bytes each filled with one tag: every tag of `two_mounts_at_once`
/// once, whole, in some order, and nothing else; the bytes lost printed.
fn check_blocks(got: &[u8], size: usize, each: u8, what: &str, told: usize) {
    let mut blocks: Vec<u8> = got.chunks(size).map(|b| if b.len() == size && b.iter().all(|&x| x == b[0]) { b[0] } else { 0 }).collect();
    blocks.sort();
    let want: Vec<u8> = (0..2u8).flat_map(|w| (0..each).map(move |i| 1 + w * 16 + i)).collect();
    let n = if blocks == want { 0 } else { lost(&blocks, &want) * size };
    println!("many writers ({}), two mounts {what}: {n} bytes lost, losers told {told} times", backend());
    assert_eq!(blocks, want, "each acknowledged block once, whole ({} bytes stored)", got.len());
}

fn rows_doc() -> serde_json::Value {
    // Rows of 16 bytes, chunks of 4 rows: appends of 3 rows end inside chunks.
    json!({"zarr_format": 3, "node_type": "array", "shape": [0, 16], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 16]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": zstd()})
}

/// Two mounts appending 6 blocks of 3 rows each at once: every block once, whole.
fn two_appenders(store: &Path, what: &str) {
    let told = two_mounts_at_once(store, 6, |m, tag| {
        let mut f = OpenOptions::new().append(true).open(m.path("a/data"))?;
        f.write_all(&[tag; 48])?;
        f.sync_all()
    });
    check_blocks(&stored(store, "a/data"), 48, 6, what, told);
}

#[test]
fn appends_from_two_mounts_keep_every_acknowledged_row() {
    let (_dir, store) = store_with("a", rows_doc());
    two_appenders(&store, "appending");
}

#[test]
fn appends_from_two_icechunk_branch_mounts_keep_every_acknowledged_row() {
    if !icechunk_here() {
        return;
    }
    let (_dir, source) = icechunk_with("a", rows_doc());
    two_appenders(&source, "appending on an Icechunk branch");
}

#[test]
fn prepends_from_two_mounts_keep_every_acknowledged_row() {
    // int16 rows of 3, chunks of 2 rows: a prepend of 2 rows is one new chunk key.
    let doc = json!({"zarr_format": 3, "node_type": "array", "shape": [2, 3], "data_type": "int16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
        "chunk_key_encoding": {"name": "offset", "configuration": {"offset": [0, 0]}}, "fill_value": -1, "codecs": zstd()});
    let (_dir, store) = store_with("a", doc);
    {
        let m = Mount::new(&store, &[]);
        common::write_and_close(&m.path("a/data"), OpenOptions::new().write(true), &[7u8; 12]).unwrap();
    }
    let told =
        two_mounts_at_once(&store, 5, |m, tag| common::write_and_close(&m.path("a/prepend"), OpenOptions::new().write(true), &[tag; 12]));
    let got = stored(&store, "a/data");
    assert_eq!(&got[got.len().saturating_sub(12)..], &[7u8; 12], "the rows that were there stay last");
    check_blocks(&got[..got.len() - 12], 12, 5, "prepending", told);
}

#[test]
fn a_reader_mount_sees_what_writers_stored_at_its_next_open() {
    let doc = json!({"zarr_format": 3, "node_type": "array", "shape": [4096], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1024]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": zstd()});
    let (_dir, store) = store_with("a", doc);
    let writer = Mount::new(&store, &[]);
    let reader = Mount::new(&store, &["-o", "metadata_ttl=1"]);
    common::write_and_close(&writer.path("a/data"), OpenOptions::new().write(true), &[1u8; 4096]).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    // The reader reads it all: its pages and chunks are cached.
    let kept = OpenOptions::new().read(true).open(reader.path("a/data")).unwrap();
    assert_eq!(std::fs::read(reader.path("a/data")).unwrap(), vec![1u8; 4096]);
    let new: Vec<u8> = (0..4096).map(|i| (i % 253) as u8).collect();
    let f = OpenOptions::new().write(true).open(writer.path("a/data")).unwrap();
    f.write_all_at(&new, 0).unwrap();
    f.sync_all().unwrap();
    // After the TTL, the next open reads what was stored.
    std::thread::sleep(Duration::from_millis(1100));
    let got = std::fs::read(reader.path("a/data")).unwrap();
    let n = lost(&got, &new);
    println!("many writers ({}), a reader's next open: {n} stale bytes", backend());
    assert_eq!(n, 0, "stale bytes after another mount's fsync and the TTL");
    drop(kept);
    // An exclusive mount keeps what it read however long ago, as it is told to: it is the
    // store's only writer.
    let exclusive = Mount::new(&store, &["-o", "metadata_ttl=1", "--exclusive"]);
    assert_eq!(std::fs::read(exclusive.path("a/data")).unwrap(), new);
    f.write_all_at(&[3u8; 4096], 0).unwrap();
    f.sync_all().unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(std::fs::read(exclusive.path("a/data")).unwrap(), new, "--exclusive keeps what it read");
    assert_eq!(std::fs::read(reader.path("a/data")).unwrap(), vec![3u8; 4096], "a shared mount does not");
}

fn six_rows_doc() -> serde_json::Value {
    // Rows of 16 bytes, chunks of 4 rows; 6 rows to start: the second chunk is cut by the end.
    json!({"zarr_format": 3, "node_type": "array", "shape": [6, 16], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 16]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": zstd()})
}

#[test]
fn a_mount_that_edits_in_place_beside_an_appender_keeps_every_edit_untold() {
    let (_dir, store) = store_with("a", six_rows_doc());
    editor_beside_appender(&store, "an editor beside an appender");
}

#[test]
fn an_icechunk_mount_that_edits_in_place_beside_an_appender_keeps_every_edit_untold() {
    if !icechunk_here() {
        return;
    }
    let (_dir, source) = icechunk_with("a", six_rows_doc());
    editor_beside_appender(&source, "an editor beside an appender on an Icechunk branch");
}

/// One mount appends 3 rows at a time while another edits rows 1, 4 and 5 in place, in turn
/// and at once: every edit and every row kept, the editor never told.
fn editor_beside_appender(store: &Path, what: &str) {
    // The editor does not look at the metadata again for a minute: it meets each growth at
    // its fsync, as an editor with the default TTL does.
    let editor = Mount::new(store, &["-o", "metadata_ttl=60"]);
    let appender = Mount::new(store, &["-o", "metadata_ttl=0"]);
    let edit = OpenOptions::new().write(true).open(editor.path("a/data")).unwrap();
    let (rounds, mut told) = (6u8, 0usize);
    let append = |tag: u8| -> std::io::Result<()> {
        let mut f = OpenOptions::new().append(true).open(appender.path("a/data"))?;
        f.write_all(&[tag; 48])?;
        f.sync_all()
    };
    // In turn: each append lands first, then an edit of row 1 and of rows 4..6 (at first all
    // of the cut chunk inside the old shape, which the append then reaches into).
    for round in 1..=rounds {
        append(100 + round).unwrap();
        edit.write_all_at(&[round; 16], 16).unwrap();
        edit.write_all_at(&[round; 32], 64).unwrap();
        if let Err(e) = edit.sync_all() {
            told += 1;
            eprintln!("round {round}: the editor was told {e}");
        }
    }
    // At once: appends and edits race.
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 1..=rounds {
                until_stored("appender", || append(200 + i));
            }
        });
        for round in 1..=rounds {
            edit.write_all_at(&[50 + round; 16], 16).unwrap();
            edit.write_all_at(&[50 + round; 32], 64).unwrap();
            if let Err(e) = edit.sync_all() {
                told += 1;
                eprintln!("racing, round {round}: the editor was told {e}");
            }
        }
    });
    drop(edit);
    drop((editor, appender));
    let got = stored(store, "a/data");
    let last = 50 + rounds;
    let mut want = vec![0u8; 96];
    want[16..32].fill(last);
    want[64..96].fill(last);
    for tag in (1..=rounds).map(|r| 100 + r).chain((1..=rounds).map(|r| 200 + r)) {
        want.extend_from_slice(&[tag; 48]);
    }
    let n = lost(&got, &want);
    println!("many writers ({}), {what}: {n} bytes lost, the editor told {told} times", backend());
    assert_eq!(n, 0, "acknowledged bytes lost");
    assert_eq!(told, 0, "an editor that changes no shape was told another mount grew the array");
}

#[test]
fn bytes_of_one_element_written_by_two_mounts_are_both_kept() {
    // int64 elements: one mount writes bytes 0..3 of every element, the other bytes 3..8, in
    // rounds, each fsynced; both read each chunk before the other stores it.
    let doc = json!({"zarr_format": 3, "node_type": "array", "shape": [48], "data_type": "int64",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [16]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": zstd()});
    let (_dir, store) = store_with("a", doc);
    let mounts: Vec<Mount> = (0..2).map(|_| Mount::new(&store, &["-o", "metadata_ttl=0"])).collect();
    let rounds = 8u8;
    let parts = [(0usize, 3usize), (3, 8)];
    let told: usize = std::thread::scope(|s| {
        let handles: Vec<_> = mounts
            .iter()
            .zip(parts)
            .enumerate()
            .map(|(w, (m, (from, to)))| {
                s.spawn(move || {
                    let f = OpenOptions::new().write(true).open(m.path("a/data")).unwrap();
                    let mut told = 0;
                    for round in 1..=rounds {
                        let value = w as u8 * 100 + round;
                        told += until_stored(&format!("mount {w}, round {round}"), || {
                            for e in 0..48u64 {
                                f.write_all_at(&vec![value; to - from], e * 8 + from as u64)?;
                            }
                            f.sync_all()
                        });
                    }
                    told
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    drop(mounts);
    let want: Vec<u8> = (0..48).flat_map(|_| [[rounds; 3].as_slice(), [100 + rounds; 5].as_slice()].concat()).collect();
    let n = lost(&stored(&store, "a/data"), &want);
    println!("many writers ({}), two mounts writing parts of one element: {n} bytes lost, losers told {told} times", backend());
    assert_eq!(n, 0, "acknowledged bytes lost");
}

/// libfaketime (Debian's `faketime`), which `scripts/test` installs: a daemon run with it
/// sees a clock that is off. Absent only outside the test script (then said, and skipped).
fn faketime() -> Option<PathBuf> {
    let lib = PathBuf::from("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1");
    if lib.exists() {
        return Some(lib);
    }
    assert!(std::env::var_os("CI").is_none(), "libfaketime is missing: scripts/test installs it");
    eprintln!("libfaketime is missing (apt-get install faketime): skipped");
    None
}

#[test]
fn appends_from_mounts_whose_clocks_disagree_keep_every_acknowledged_row() {
    // One mount's clock runs 15 minutes fast, the other's 15 minutes slow: no lease may be
    // judged by either clock.
    let Some(lib) = faketime() else { return };
    let doc = json!({"zarr_format": 3, "node_type": "array", "shape": [0, 16], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 16]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": zstd()});
    let (_dir, store) = store_with("a", doc);
    let skews = ["+15m", "-15m"];
    let mounts: Vec<Mount> = skews
        .iter()
        .map(|skew| {
            let env = [("LD_PRELOAD", lib.as_path()), ("FAKETIME", Path::new(skew)), ("FAKETIME_DONT_FAKE_MONOTONIC", Path::new("1"))];
            Mount::with_env(&store, &["-o", "metadata_ttl=0"], &env)
        })
        .collect();
    let each = 6u8;
    let told: usize = std::thread::scope(|s| {
        let handles: Vec<_> = mounts
            .iter()
            .enumerate()
            .map(|(w, m)| {
                s.spawn(move || {
                    (0..each)
                        .map(|i| {
                            let tag = 1 + w as u8 * 16 + i;
                            until_stored(&format!("mount {w}, append {i}"), || {
                                let mut f = OpenOptions::new().append(true).open(m.path("a/data"))?;
                                f.write_all(&[tag; 48])?;
                                f.sync_all()
                            })
                        })
                        .sum::<usize>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let logs: Vec<String> = mounts.iter().map(Mount::log_text).collect();
    drop(mounts);
    assert!(!logs.iter().any(|l| l.contains("taking over the lock")), "a live holder's lock was taken over: {logs:?}");
    check_blocks(&stored(&store, "a/data"), 48, each, "appending with clocks 30 minutes apart", told);
}
