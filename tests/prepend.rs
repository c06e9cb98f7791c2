//! Prepending through `prepend` and offline: new rows in front, no existing chunk touched.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Mount, bin, snapshot};
use serde_json::json;

/// A store with one array per case, all `int16` with rows of 3 elements, chunks of 2 rows.
fn store_with(arrays: &[(&str, serde_json::Value)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.zarr");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join("zarr.json"), br#"{"zarr_format":3,"node_type":"group"}"#).unwrap();
    for (name, doc) in arrays {
        std::fs::create_dir_all(store.join(name)).unwrap();
        let file = if doc["zarr_format"] == 2 { ".zarray" } else { "zarr.json" };
        std::fs::write(store.join(name).join(file), serde_json::to_vec_pretty(doc).unwrap()).unwrap();
    }
    (dir, store)
}

fn doc(shape0: u64, encoding: serde_json::Value, codecs: serde_json::Value, chunk_rows: u64) -> serde_json::Value {
    json!({"zarr_format": 3, "node_type": "array", "shape": [shape0, 3], "data_type": "int16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk_rows, 3]}},
        "chunk_key_encoding": encoding, "fill_value": -1, "codecs": codecs, "attributes": {"keep": "me"}})
}

fn zstd() -> serde_json::Value {
    json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1, "checksum": false}}])
}

fn rows(start: i16, n: usize) -> Vec<u8> {
    (0..n as i32 * 3).map(|i| (start as i32 + i) as i16).flat_map(i16::to_le_bytes).collect()
}

/// Write `bytes` to `path` and close it: the close's error is the commit's.
fn write_and_close(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    common::write_and_close(path, OpenOptions::new().write(true), bytes)
}

fn offset_encoding(offset: i64, separator: &str) -> serde_json::Value {
    json!({"name": "offset", "configuration": {"offset": [offset, 0], "separator": separator}})
}

#[test]
fn prepends_add_chunks_in_front_and_touch_no_existing_chunk() {
    let sharded = json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 3],
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]);
    let cases = [
        ("plain", doc(0, offset_encoding(0, "/"), zstd(), 2), 2usize),
        ("sharded", doc(0, offset_encoding(0, "/"), sharded, 4), 4),
        ("dotted", doc(0, offset_encoding(0, "."), zstd(), 2), 2),
        ("already_offset", doc(0, offset_encoding(-7, "/"), zstd(), 2), 2),
    ];
    let (_dir, store) = store_with(&cases.iter().map(|(n, d, _)| (*n, d.clone())).collect::<Vec<_>>());
    let m = Mount::new(&store, &[]);
    for (name, _, chunk_rows) in &cases {
        let data = m.path(name).join("data");
        // Existing rows, written through data (5 rows: the last chunk is cut by the end).
        let old = rows(0, 5);
        write_and_close(&data, &old).unwrap();
        let before = snapshot(&store.join(name));
        // Two chunk rows in front.
        let new = rows(100, 2 * chunk_rows);
        write_and_close(&m.path(name).join("prepend"), &new).unwrap_or_else(|e| panic!("{name}: {e}\n{}", m.log_text()));
        let mut want = new.clone();
        want.extend(&old);
        assert_eq!(std::fs::read(&data).unwrap(), want, "{name}");
        let after = snapshot(&store.join(name));
        for (path, (bytes, mtime)) in &before {
            if path.ends_with("zarr.json") {
                continue;
            }
            assert_eq!(after.get(path), Some(&(bytes.clone(), *mtime)), "{name}: {path} untouched");
        }
        let added: Vec<&String> = after.keys().filter(|k| !before.contains_key(*k)).collect();
        let base = if *name == "already_offset" { -7 } else { 0 };
        let sep = if *name == "dotted" { '.' } else { '/' };
        let mut expected: Vec<String> =
            [base - 2, base - 1].iter().map(|g| store.join(name).join(format!("c{sep}{g}{sep}0")).display().to_string()).collect();
        expected.sort();
        assert_eq!(added, expected.iter().collect::<Vec<_>>(), "{name}: exactly the new keys");
        let shown: serde_json::Value = serde_json::from_slice(&std::fs::read(m.path(name).join("zarr.json")).unwrap()).unwrap();
        assert_eq!(shown["shape"], json!([5 + 2 * chunk_rows, 3]), "{name}");
        assert_eq!(shown["chunk_key_encoding"]["configuration"]["offset"], json!([base - 2, 0]), "{name}");
        assert_eq!(shown["attributes"], json!({"keep": "me"}));
        // Appending at the end keeps working: new chunks follow the offset.
        let mut f = OpenOptions::new().append(true).open(&data).unwrap();
        f.write_all(&rows(500, 1)).unwrap();
        drop(f);
        want.extend(rows(500, 1));
        assert_eq!(std::fs::read(&data).unwrap(), want, "{name} after an append");
    }
    drop(m);
    let m = Mount::new(&store, &[]);
    for (name, _, chunk_rows) in &cases {
        let mut want = rows(100, 2 * chunk_rows);
        want.extend(rows(0, 5));
        want.extend(rows(500, 1));
        assert_eq!(std::fs::read(m.path(name).join("data")).unwrap(), want, "{name} after remount");
    }
}

#[test]
fn refusals_change_nothing() {
    let v2 = json!({"zarr_format": 2, "shape": [4, 3], "chunks": [2, 3], "dtype": "<i2", "fill_value": 0, "order": "C",
        "filters": null, "compressor": null});
    let (_dir, store) = store_with(&[
        ("offset", doc(4, offset_encoding(0, "/"), zstd(), 2)),
        ("default", doc(4, json!({"name": "default"}), zstd(), 2)),
        ("v2_keys", doc(4, json!({"name": "v2"}), zstd(), 2)),
        ("v2_array", v2),
    ]);
    let before = snapshot(&store);
    {
        let m = Mount::new(&store, &[]);
        // Not a whole number of chunk rows: EINVAL at close, nothing stored.
        let err = write_and_close(&m.path("offset/prepend"), &rows(0, 3)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
        // An empty write commits nothing.
        write_and_close(&m.path("offset/prepend"), &[]).unwrap();
        for name in ["default", "v2_keys", "v2_array"] {
            let err = OpenOptions::new().write(true).open(m.path(name).join("prepend")).unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EOPNOTSUPP), "{name}");
        }
        assert_eq!(std::fs::metadata(m.path("offset/data")).unwrap().len(), 24);
    }
    {
        let m = Mount::new(&store, &["--read-only"]);
        let err = OpenOptions::new().write(true).open(m.path("offset/prepend")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    }
    assert_eq!(snapshot(&store), before, "the store is unchanged");
}

#[test]
fn adopt_offset_switches_default_arrays_by_metadata_only() {
    let (_dir, store) = store_with(&[("a", doc(0, json!({"name": "default", "configuration": {"separator": "."}}), zstd(), 2))]);
    let m = Mount::new(&store, &["-o", "adopt_offset"]);
    write_and_close(&m.path("a/data"), &rows(0, 4)).unwrap();
    let keys_before: Vec<String> = snapshot(&store.join("a")).into_keys().collect();
    write_and_close(&m.path("a/prepend"), &rows(50, 2)).unwrap();
    let mut want = rows(50, 2);
    want.extend(rows(0, 4));
    assert_eq!(std::fs::read(m.path("a/data")).unwrap(), want);
    common::backend::pull(&store);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(store.join("a/zarr.json")).unwrap()).unwrap();
    assert_eq!(doc["chunk_key_encoding"], json!({"name": "offset", "configuration": {"offset": [-1, 0], "separator": "."}}));
    let keys_after: Vec<String> = snapshot(&store.join("a")).into_keys().collect();
    assert!(keys_before.iter().all(|k| keys_after.contains(k)), "the same keys stay");
}

#[test]
fn open_readers_new_readers_and_mmaps_see_the_new_layout() {
    let (_dir, store) = store_with(&[("a", doc(0, offset_encoding(0, "/"), zstd(), 2))]);
    let m = Mount::new(&store, &[]);
    let data = m.path("a/data");
    write_and_close(&data, &rows(0, 2)).unwrap();
    let reader = std::fs::File::open(&data).unwrap();
    let mut buf = vec![0u8; 12];
    reader.read_exact_at(&mut buf, 0).unwrap(); // pages now cached
    assert_eq!(buf, rows(0, 2));
    write_and_close(&m.path("a/prepend"), &rows(40, 2)).unwrap();
    let mut want = rows(40, 2);
    want.extend(rows(0, 2));
    // The kernel is told off the request path: give it a moment, then every view agrees.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let mut buf = vec![0u8; 24];
        let n = reader.read_at(&mut buf, 0).unwrap();
        if buf[..n] == want[..] || std::time::Instant::now() > deadline {
            assert_eq!(&buf[..n], &want[..], "an open reader");
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(std::fs::read(&data).unwrap(), want, "a new reader");
    let f = std::fs::File::open(&data).unwrap();
    // SAFETY: the file is not changed while mapped.
    let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
    assert_eq!(&map[..], &want[..], "a fresh mmap");
}

#[test]
fn offline_adopt_and_prepend_along_any_axis() {
    let (_dir, store) = store_with(&[("a", doc(0, json!({"name": "default"}), zstd(), 2))]);
    {
        let m = Mount::new(&store, &[]);
        write_and_close(&m.path("a/data"), &rows(0, 4)).unwrap();
    }
    let run = |args: &[&str]| {
        let out = Command::new(bin()).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let s = store.display().to_string();
    let file = store.parent().unwrap().join("cols.raw");
    // Along axis 1: a region of shape (4, 3) — one chunk column.
    std::fs::write(&file, rows(200, 4)).unwrap();
    let out = Command::new(bin()).args(["prepend", &s, "a", file.to_str().unwrap(), "--axis", "1"]).output().unwrap();
    assert!(!out.status.success(), "default encoding refused");
    run(&["adopt", &s, "a"]);
    run(&["prepend", &s, "a", file.to_str().unwrap(), "--axis", "1"]);
    std::fs::write(&file, (0..2 * 6).flat_map(|i: i16| (900 + i).to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    run(&["prepend", &s, "a", file.to_str().unwrap()]);
    let m = Mount::new(&store, &[]);
    let got = std::fs::read(m.path("a/data")).unwrap();
    let el = |r: usize, c: usize| i16::from_le_bytes([got[(r * 6 + c) * 2], got[(r * 6 + c) * 2 + 1]]);
    assert_eq!(std::fs::metadata(m.path("a/data")).unwrap().len(), 6 * 6 * 2);
    assert_eq!((el(0, 0), el(1, 5)), (900, 911), "the rows prepended last come first");
    assert_eq!((el(2, 0), el(2, 2), el(2, 3), el(2, 5)), (200, 202, 0, 2), "then the columns in front of the old ones");
    assert_eq!((el(5, 0), el(5, 5)), (209, 11));
    drop(m);
    // The way back: the same array under the default encoding, every chunk renamed, nothing
    // left of the staging.
    let before = got.clone();
    let out = Command::new(bin()).args(["normalize", &s, "a"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("chunk key encoding default; 6 chunk(s) renamed"));
    // An offline change of the directory: against a bucket, the bucket must have it too (else
    // the snapshot below mirrors the old keys back).
    common::backend::push(&store);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(store.join("a/zarr.json")).unwrap()).unwrap();
    assert_eq!(doc["chunk_key_encoding"]["name"], "default");
    assert_eq!(doc["attributes"]["keep"], "me");
    let lead = format!("{}/", store.join("a").display());
    let keys: Vec<String> = snapshot(&store.join("a")).into_keys().map(|k| k.replace(&lead, "")).collect();
    assert!(keys.iter().all(|k| !k.contains('-') && !k.contains(".zarrfs-normalize")), "{keys:?}");
    let m = Mount::new(&store, &[]);
    assert_eq!(std::fs::read(m.path("a/data")).unwrap(), before, "the same bytes after normalize");
    drop(m);
    let out = Command::new(bin()).args(["normalize", &s, "a"]).output().unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("nothing to do"));
}

#[test]
fn a_daemon_killed_during_a_large_prepend_leaves_old_or_new() {
    if common::backend::local_only("20 000 chunk PUTs, mirrored back six times") {
        return;
    }
    // int16, rows of 3, chunks of 2 rows: 20 000 chunk rows in front, one chunk file each.
    let big: Vec<u8> = rows(0, 40_000).iter().map(|b| b ^ 0x5a).collect();
    let mut full = big.clone();
    full.extend(rows(0, 4));
    let setup = || {
        let (dir, store) = store_with(&[("a", doc(0, offset_encoding(0, "/"), zstd(), 2))]);
        let m = Mount::new(&store, &[]);
        write_and_close(&m.path("a/data"), &rows(0, 4)).unwrap();
        (dir, store, m)
    };
    // How long a whole prepend takes here, to kill the daemon at points inside it.
    let (_d, _s, m) = setup();
    let t = std::time::Instant::now();
    write_and_close(&m.path("a/prepend"), &big).unwrap();
    let whole = t.elapsed();
    drop(m);
    let mut outcomes = Vec::new();
    for tenth in [1u32, 3, 5, 7, 9] {
        let (_dir, store, mut m) = setup();
        let prepend = m.path("a/prepend");
        let big2 = big.clone();
        let writer = std::thread::spawn(move || write_and_close(&prepend, &big2));
        std::thread::sleep(whole * tenth / 10);
        m.kill();
        let _ = writer.join();
        let m = Mount::new(&store, &[]);
        let got = std::fs::read(m.path("a/data")).unwrap_or_else(|e| panic!("{tenth}/10: {e}"));
        assert!(got == rows(0, 4) || got == full, "{tenth}/10: neither before nor after ({} bytes)", got.len());
        outcomes.push(if got == full { "after" } else { "before" });
        // Chunks a killed prepend left outside the grid are overwritten by the next one.
        if got != full {
            write_and_close(&m.path("a/prepend"), &rows(7, 2)).unwrap();
            let mut want = rows(7, 2);
            want.extend(rows(0, 4));
            assert_eq!(std::fs::read(m.path("a/data")).unwrap(), want, "{tenth}/10: a later prepend");
        }
    }
    eprintln!("a prepend takes {whole:?} here; killed at 1,3,5,7,9 tenths: {outcomes:?}");
}

#[test]
fn a_prepend_to_rows_wider_than_memory_holds_a_few_chunks_and_the_daemon_lives() {
    if common::backend::local_only("stages and reads 64 GiB (sparse) of rows") {
        return;
    }
    // Rows of 2^36 bytes in chunks of 2^20: one new row is a band of 65 536 chunks, 64 GiB.
    let wide = json!({"zarr_format": 3, "node_type": "array", "shape": [4, 1u64 << 36], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, 1 << 20]}},
        "chunk_key_encoding": {"name": "offset", "configuration": {"offset": [0, 0]}}, "fill_value": 0,
        "codecs": [{"name": "bytes"}]});
    let (_dir, store) = store_with(&[("wide", wide), ("other", doc(2, offset_encoding(0, "/"), zstd(), 2))]);
    let m = Mount::new(&store, &[]);
    // Another array's write, acknowledged, with its file still open across the prepend.
    let other = OpenOptions::new().write(true).open(m.path("other/data")).unwrap();
    other.write_all_at(&rows(40, 2), 0).unwrap();
    let prepend = OpenOptions::new().write(true).open(m.path("wide/prepend")).unwrap();
    prepend.write_all_at(&[1], (1 << 36) - 1).unwrap();
    use std::os::fd::IntoRawFd;
    // SAFETY: we own the descriptor.
    let closed = unsafe { libc::close(prepend.into_raw_fd()) };
    assert_eq!(closed, 0, "the prepend's close: {} {}", std::io::Error::last_os_error(), m.log_text());
    assert!(Path::new(&format!("/proc/{}", m.pid())).exists(), "the daemon died: {}", m.log_text());
    assert!(m.peak_rss() < 1 << 30, "a prepend of 64 GiB rows held {} MiB", m.peak_rss() >> 20);
    let wide = std::fs::File::open(m.path("wide/data")).unwrap();
    assert_eq!(wide.metadata().unwrap().len(), 5 << 36);
    let mut last = [9u8; 2];
    wide.read_exact_at(&mut last, (1 << 36) - 1).unwrap();
    assert_eq!(last, [1, 0], "the new row's last byte, then the old first row");
    drop(other);
    drop(m);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(store.join("wide/zarr.json")).unwrap()).unwrap();
    assert_eq!(doc["chunk_key_encoding"]["configuration"]["offset"], json!([-1, 0]));
    // Only the chunk holding the one byte that is not fill was stored.
    assert!(store.join("wide/c/-1/65535").exists() && !store.join("wide/c/-1/0").exists());
    let m = Mount::new(&store, &[]);
    assert_eq!(std::fs::read(m.path("other/data")).unwrap(), rows(40, 2), "the other array's write was stored");
}

#[test]
fn bytes_are_staged_in_a_private_directory_made_at_the_first_need() {
    let (_dir, store) = store_with(&[("a", doc(2, offset_encoding(0, "/"), zstd(), 2))]);
    // No temporary directory this user may write into, and no runtime directory: the mount comes
    // up all the same, and a prepend says what to do.
    let m = Mount::with_env(&store, &[], &[("TMPDIR", Path::new("/proc/self")), ("XDG_RUNTIME_DIR", Path::new(""))]);
    let err = std::fs::OpenOptions::new().write(true).open(m.path("a/prepend"));
    assert!(err.is_err(), "a prepend with nowhere to stage its bytes");
    assert!(m.log_text().contains("--spool-dir"), "{}", m.log_text());
    drop(m);
    // The user's runtime directory: a private directory there, gone with the daemon.
    let runtime = tempfile::tempdir().unwrap();
    let m = Mount::with_env(&store, &[], &[("XDG_RUNTIME_DIR", runtime.path())]);
    assert_eq!(std::fs::read_dir(runtime.path()).unwrap().count(), 0, "nothing is made before it is needed");
    let prepend = OpenOptions::new().write(true).open(m.path("a/prepend")).unwrap();
    let made: Vec<_> = std::fs::read_dir(runtime.path()).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(made.len(), 1);
    assert!(made[0].file_name().unwrap().to_string_lossy().starts_with("zarrfs-spool-"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&made[0]).unwrap().permissions().mode() & 0o777, 0o700);
    prepend.write_all_at(&rows(100, 2), 0).unwrap();
    drop(prepend);
    assert_eq!(std::fs::metadata(m.path("a/data")).unwrap().len(), 4 * 6);
    drop(m);
    assert_eq!(std::fs::read_dir(runtime.path()).unwrap().count(), 0, "the spool directory went with the daemon");
}
