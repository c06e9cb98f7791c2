//! Writes through real mounts: the reference model, appends and truncates as shell tools do
//! them, mmap, fill-only chunks, metadata rewrites, concurrency and crashes.

mod common;

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};

use common::model::{Model, Op, fixtures as model_fixtures, ops, payload};
use common::{Mount, copy_store, fixtures};
use proptest::prelude::*;

fn sh(cmd: &str) -> std::process::Output {
    Command::new("sh").arg("-c").arg(cmd).output().expect("sh")
}

fn i16s(v: &[i16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn model_store(f: &common::model::Fixture) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.zarr");
    std::fs::create_dir_all(store.join(f.name)).unwrap();
    std::fs::write(store.join("zarr.json"), br#"{"zarr_format":3,"node_type":"group"}"#).unwrap();
    std::fs::write(store.join(f.name).join(f.doc_name), &f.doc).unwrap();
    (dir, store)
}

fn run_model(which: usize, ops: &[Op], small_dirty_limit: bool) -> Result<(), TestCaseError> {
    let f = &model_fixtures()[which];
    let (_dir, store) = model_store(f);
    // A tiny dirty limit makes writes store chunks in the background and at the limit.
    let m = Mount::new(&store, if small_dirty_limit { &["--dirty-limit", "1K"] } else { &[] });
    let path = m.path(f.name).join("data");
    let mut file = OpenOptions::new().read(true).write(true).open(&path).unwrap();
    let mut model = Model { bytes: Vec::new(), row: f.row, fill: f.fill.clone() };
    model.truncate(file.metadata().unwrap().len() / f.row);
    for op in ops {
        match *op {
            Op::Write { offset, len, seed } => {
                let (offset, len) = f.align(offset, len);
                let data = payload(f, offset, len, seed);
                file.write_all_at(&data, offset).unwrap();
                model.write(offset, &data);
            }
            Op::Truncate { rows } => {
                file.set_len(rows * f.row).unwrap();
                model.truncate(rows);
            }
            Op::Read { offset, len } => {
                let mut buf = vec![0u8; len];
                let n = file.read_at(&mut buf, offset).unwrap();
                prop_assert_eq!(&buf[..n], model.read(offset, len), "read({}, {})", offset, len);
            }
            Op::Fsync => file.sync_all().unwrap(),
            Op::Prepend { chunks, seed } => {
                let Some(rows) = f.prepend_rows else { continue };
                let data = payload(f, 0, (chunks * rows * f.row) as usize, seed);
                common::write_and_close(&m.path(f.name).join("prepend"), OpenOptions::new().write(true), &data).unwrap();
                model.prepend(&data);
            }
            Op::Reopen => {
                drop(file);
                file = OpenOptions::new().read(true).write(true).open(&path).unwrap();
            }
        }
        prop_assert_eq!(std::fs::metadata(&path).unwrap().len(), model.bytes.len() as u64, "size after {:?}", op);
        let all = std::fs::read(&path).unwrap();
        let diff = all.iter().zip(&model.bytes).position(|(a, b)| a != b);
        prop_assert!(
            all == model.bytes,
            "{}: contents differ after {:?} at {:?}: {:?} vs {:?}",
            f.name,
            op,
            diff,
            diff.map(|d| &all[d..(d + 8).min(all.len())]),
            diff.map(|d| &model.bytes[d..(d + 8).min(all.len())])
        );
    }
    drop(file);
    drop(m);
    // What reached the store reads back through a new mount.
    let m = Mount::new(&store, &[]);
    prop_assert!(std::fs::read(m.path(f.name).join("data")).unwrap() == model.bytes, "{}: after remount", f.name);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn mount_matches_the_model(which in 0usize..5, ops in ops(700), small_dirty_limit in any::<bool>()) {
        run_model(which, &ops, small_dirty_limit)?;
    }
}

#[test]
fn appends_truncates_and_rewrites_as_shell_tools_do_them() {
    let (_dir, store) = copy_store(&fixtures().join("v3.zarr"));
    let m = Mount::new(&store, &[]);
    // d1: uint8 (17,), chunks (5,), fill 9.
    let d1 = m.path("shapes/d1/data");
    let mut model = std::fs::read(&d1).unwrap();
    assert!(sh(&format!("printf 'abc' >> {}", d1.display())).status.success());
    model.extend(b"abc");
    let out = sh(&format!("printf 'xy' | dd of={} oflag=append conv=notrunc status=none", d1.display()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    model.extend(b"xy");
    assert_eq!(std::fs::read(&d1).unwrap(), model);
    // Down, then up again: the cut-off part reads as fill, never as the old values.
    std::fs::OpenOptions::new().write(true).open(&d1).unwrap().set_len(6).unwrap();
    std::fs::OpenOptions::new().write(true).open(&d1).unwrap().set_len(12).unwrap();
    model.truncate(6);
    model.resize(12, 9);
    assert_eq!(std::fs::read(&d1).unwrap(), model);
    // dd conv=notrunc in place.
    let out = sh(&format!("printf 'Q' | dd of={} bs=1 seek=4 conv=notrunc status=none", d1.display()));
    assert!(out.status.success());
    model[4] = b'Q';
    // A rewrite with O_TRUNC.
    let d3 = m.path("keys/dot/data"); // int64 (5, 4): rows of 32 bytes
    let rows: Vec<u8> = (0..64u8).collect();
    std::fs::write(&d3, &rows).unwrap();
    assert_eq!(std::fs::read(&d3).unwrap(), rows);
    // Sizes that are not whole rows, and 0-d arrays, are refused.
    let f = OpenOptions::new().write(true).open(&d3).unwrap();
    assert_eq!(f.set_len(33).unwrap_err().raw_os_error(), Some(libc::EINVAL));
    let scalar = OpenOptions::new().write(true).open(m.path("shapes/d0/data")).unwrap();
    assert_eq!(scalar.set_len(16).unwrap_err().raw_os_error(), Some(libc::EINVAL));
    assert_eq!(scalar.write_at(&[1; 8], 8).unwrap_err().raw_os_error(), Some(libc::EINVAL));
    scalar.write_at(&2.5f64.to_le_bytes(), 0).unwrap();
    drop((f, scalar));
    // A write that ends inside a row extends the file to the row's end.
    let d5 = m.path("shapes/d5/data"); // int16 (3,2,4,3,5): rows of 240 bytes
    let f = OpenOptions::new().write(true).open(&d5).unwrap();
    f.write_at(&[7, 7], 3 * 240 + 10).unwrap();
    assert_eq!(std::fs::metadata(&d5).unwrap().len(), 4 * 240);
    drop(f);
    // Appended blocks that end inside rows: dd's 512-byte blocks over rows of 336 bytes. Each
    // block goes where the last ended, not after the row the last left padded with fill.
    let grown = m.path("shapes/d3/data"); // float64 (5,6,7): rows of 336 bytes
    let mut grown_model = std::fs::read(&grown).unwrap();
    let blocks: Vec<u8> = (0..2 * 336).map(|i| (i % 251) as u8).collect();
    let source = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(source.path(), &blocks).unwrap();
    let out = sh(&format!("dd if={} of={} oflag=append conv=notrunc status=none", source.path().display(), grown.display()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    grown_model.extend(&blocks);
    assert_eq!(std::fs::read(&grown).unwrap(), grown_model);
    drop(m);
    let m = Mount::new(&store, &[]);
    assert_eq!(std::fs::read(m.path("shapes/d1/data")).unwrap(), model);
    assert_eq!(std::fs::read(m.path("keys/dot/data")).unwrap(), rows);
    assert_eq!(std::fs::read(m.path("shapes/d0/data")).unwrap(), 2.5f64.to_le_bytes());
    assert_eq!(std::fs::read(m.path("shapes/d3/data")).unwrap(), grown_model);
    let d5 = std::fs::read(m.path("shapes/d5/data")).unwrap();
    assert_eq!(&d5[3 * 240..3 * 240 + 14], &i16s(&[-2, -2, -2, -2, -2, 0x0707, -2]));
}

#[test]
fn mmap_writes_reach_the_store() {
    let (_dir, store) = copy_store(&fixtures().join("v3.zarr"));
    let m = Mount::new(&store, &[]);
    let path = m.path("sharded/end/data"); // float32 (10, 9), shards (4, 6), inner (2, 3)
    let mut model = std::fs::read(&path).unwrap();
    {
        let f = OpenOptions::new().read(true).write(true).open(&path).unwrap();
        // SAFETY: nothing else changes the file while it is mapped.
        let mut map = unsafe { memmap2::MmapMut::map_mut(&f) }.unwrap();
        for (i, b) in map.iter_mut().enumerate().step_by(7) {
            *b = (i % 251) as u8;
            model[i] = (i % 251) as u8;
        }
        map.flush().unwrap();
    }
    assert_eq!(std::fs::read(&path).unwrap(), model);
    drop(m);
    let m = Mount::new(&store, &[]);
    assert_eq!(std::fs::read(m.path("sharded/end/data")).unwrap(), model);
}

#[test]
fn a_chunk_written_full_of_fill_is_deleted() {
    let (_dir, store) = copy_store(&fixtures().join("v3.zarr"));
    let m = Mount::new(&store, &[]);
    // shapes/d1: uint8 (17,), chunks (5,), fill 9; chunk c/0 holds bytes 0..5.
    assert!(store.join("shapes/d1/c/0").exists());
    let f = OpenOptions::new().write(true).open(m.path("shapes/d1/data")).unwrap();
    f.write_at(&[9; 5], 0).unwrap();
    drop(f);
    common::backend::pull(&store);
    assert!(!store.join("shapes/d1/c/0").exists(), "the all-fill chunk's key is gone after close");
    // Fill into part of a stored chunk keeps its other values; fill past the end grows the array
    // and stores no chunk wholly past the old end.
    let before = std::fs::read(m.path("shapes/d1/data")).unwrap();
    let f = OpenOptions::new().write(true).open(m.path("shapes/d1/data")).unwrap();
    f.write_at(&[9; 2], 11).unwrap();
    f.write_at(&[9; 13], 17).unwrap();
    drop(f);
    common::backend::pull(&store);
    let mut expected = before.clone();
    expected[11..13].fill(9);
    expected.resize(30, 9);
    // Read through a fresh mount: this one's kernel pages hold what was written whatever it stored.
    let fresh = Mount::new(&store, &[]);
    assert_eq!(std::fs::read(fresh.path("shapes/d1/data")).unwrap(), expected);
    drop(fresh);
    assert!(before[10..15].iter().any(|&b| b != 9) && store.join("shapes/d1/c/2").exists(), "chunk 2 keeps its values");
    assert!(!store.join("shapes/d1/c/4").exists() && !store.join("shapes/d1/c/5").exists(), "fill past the end stores nothing");
    // Sharded: a shard whose inner chunks all become fill is deleted; the index lists only
    // non-fill inner chunks.
    let f = OpenOptions::new().write(true).open(m.path("sharded/end/data")).unwrap();
    let fill: Vec<u8> = (0..4 * 9).flat_map(|_| (-1f32).to_le_bytes()).collect();
    f.write_at(&fill, 0).unwrap(); // rows 0..4: shard row 0, both shards
    drop(f);
    common::backend::pull(&store);
    assert!(!store.join("sharded/end/c/0/0").exists() && !store.join("sharded/end/c/0/1").exists());
    let no_temp = common::snapshot(&store).into_keys().filter(|p| p.contains(".zarrfs-")).collect::<Vec<_>>();
    assert!(no_temp.is_empty(), "temporary files left: {no_temp:?}");
}

#[test]
fn metadata_rewrites_change_only_the_shape_and_update_consolidated_metadata() {
    let (_dir, store) = copy_store(&fixtures().join("v3.zarr"));
    let doc_path = store.join("shapes/d1/zarr.json");
    let before: serde_json::Value = serde_json::from_slice(&std::fs::read(&doc_path).unwrap()).unwrap();
    // Consolidated metadata in the parent group, as zarr.consolidate_metadata writes it.
    let group_path = store.join("shapes/zarr.json");
    let mut group: serde_json::Value = serde_json::from_slice(&std::fs::read(&group_path).unwrap()).unwrap();
    group["consolidated_metadata"] = serde_json::json!({"kind": "inline", "must_understand": false, "metadata": {"d1": before.clone()}});
    std::fs::write(&group_path, serde_json::to_vec_pretty(&group).unwrap()).unwrap();
    let m = Mount::new(&store, &[]);
    std::fs::OpenOptions::new().append(true).open(m.path("shapes/d1/data")).unwrap().write_all(&[1, 2, 3]).unwrap();
    // The array's own document, as shown in the mount, says so at once.
    let shown: serde_json::Value = serde_json::from_slice(&std::fs::read(m.path("shapes/d1/zarr.json")).unwrap()).unwrap();
    assert_eq!(shown["shape"], serde_json::json!([20]));
    drop(m);
    let text = std::fs::read_to_string(&doc_path).unwrap();
    let after: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut expected = before.clone();
    expected["shape"] = serde_json::json!([20]);
    assert_eq!(after, expected);
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&after), keys(&before), "field order is kept");
    assert!(text.starts_with("{\n  \"shape\": [\n    20\n  ],"), "indented like zarr-python: {text}");
    let group: serde_json::Value = serde_json::from_slice(&std::fs::read(&group_path).unwrap()).unwrap();
    assert_eq!(group["consolidated_metadata"]["metadata"]["d1"]["shape"], serde_json::json!([20]));
}

#[test]
fn concurrent_writers_lose_no_update() {
    let (_dir, store) = copy_store(&fixtures().join("v3.zarr"));
    let m = Mount::new(&store, &[]);
    // codecs/zstd_checksum: int32 (9, 6, 4), chunks (4, 3, 4): 864 bytes.
    let path = m.path("codecs/zstd_checksum/data");
    let threads = 4;
    std::thread::scope(|s| {
        for t in 0..threads {
            let path = path.clone();
            s.spawn(move || {
                let f = OpenOptions::new().write(true).open(&path).unwrap();
                // Disjoint: element i belongs to thread i % threads; every chunk is shared.
                for i in (t..216).step_by(threads) {
                    f.write_at(&(1000 + i as i32).to_le_bytes(), i as u64 * 4).unwrap();
                }
            });
        }
    });
    let want: Vec<u8> = (0..216i32).flat_map(|i| (1000 + i).to_le_bytes()).collect();
    assert_eq!(std::fs::read(&path).unwrap(), want);
    // Overlapping: each thread writes the whole array with its own value, many times.
    std::thread::scope(|s| {
        for t in 0..threads {
            let path = path.clone();
            s.spawn(move || {
                let f = OpenOptions::new().write(true).open(&path).unwrap();
                let block: Vec<u8> = (0..216).flat_map(|_| (t as i32).to_le_bytes()).collect();
                for _ in 0..25 {
                    f.write_at(&block, 0).unwrap();
                }
            });
        }
    });
    let got = std::fs::read(&path).unwrap();
    let first = &got[..4];
    assert!(got.chunks(4).all(|e| e == first), "one writer's value throughout, as in some serial order");
    drop(m);
    let m = Mount::new(&store, &[]);
    assert_eq!(std::fs::read(m.path("codecs/zstd_checksum/data")).unwrap(), got);
}

/// A 1-D uint8 array that starts empty, for the crash tests.
fn empty_stream_store() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.zarr");
    std::fs::create_dir_all(store.join("log")).unwrap();
    std::fs::write(store.join("zarr.json"), br#"{"zarr_format":3,"node_type":"group"}"#).unwrap();
    std::fs::write(
        store.join("log/zarr.json"),
        br#"{"zarr_format":3,"node_type":"array","shape":[0],"data_type":"uint8","chunk_grid":{"name":"regular","configuration":{"chunk_shape":[3000]}},"chunk_key_encoding":{"name":"default"},"fill_value":0,"codecs":[{"name":"bytes"},{"name":"zstd","configuration":{"level":1,"checksum":true}}]}"#,
    )
    .unwrap();
    (dir, store)
}

const BLOCK: usize = 4096;

/// The byte every element of block `i` holds: a letter.
fn block_byte(i: usize) -> u8 {
    b'A' + (i % 26) as u8
}

/// A shell loop writing block i (every byte `block_byte(i)`) with `dd conv=fsync`, printing i
/// once dd (and so its fsync) returned.
fn start_writer(data: &Path) -> std::process::Child {
    let script = format!(
        "i=0; set -- A B C D E F G H I J K L M N O P Q R S T U V W X Y Z; while :; do eval c=\\${{$((i % 26 + 1))}}; head -c {BLOCK} /dev/zero | tr '\\000' $c | dd of={} bs={BLOCK} seek=$i conv=notrunc,fsync status=none || exit 1; echo $i; i=$((i+1)); done",
        data.display()
    );
    Command::new("setsid").arg("sh").arg("-c").arg(script).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("writer")
}

/// Read the writer's progress until `n` blocks are durable; returns the last one reported.
fn wait_blocks(out: &mut impl BufRead, n: usize) -> usize {
    let mut last = 0;
    let mut line = String::new();
    while last + 1 < n {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Ok(i) = line.trim().parse() {
            last = i;
        }
    }
    last
}

fn check_stream(store: &Path, durable: usize) {
    let m = Mount::new(store, &[]);
    let data = std::fs::read(m.path("log/data")).unwrap_or_else(|e| panic!("every chunk decodes: {e}\n{}", m.log_text()));
    assert!(data.len() >= (durable + 1) * BLOCK, "{} bytes, {} blocks were fsynced", data.len(), durable + 1);
    for i in 0..=durable {
        let v = block_byte(i);
        assert!(data[i * BLOCK..(i + 1) * BLOCK].iter().all(|&b| b == v), "block {i}");
    }
}

fn kill_group(child: &mut std::process::Child) {
    // SAFETY: signalling the process group our own child leads (setsid).
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let _ = child.wait();
}

/// A mount of a fresh stream store with the block writer running and its progress readable.
struct Stream {
    _dir: tempfile::TempDir,
    store: std::path::PathBuf,
    mount: Mount,
    writer: std::process::Child,
    progress: BufReader<std::process::ChildStdout>,
}

fn start_stream() -> Stream {
    let (_dir, store) = empty_stream_store();
    let mount = Mount::new(&store, &[]);
    let mut writer = start_writer(&mount.path("log/data"));
    let progress = BufReader::new(writer.stdout.take().expect("stdout"));
    Stream { _dir, store, mount, writer, progress }
}

#[test]
fn a_writer_killed_mid_stream_loses_nothing_it_fsynced() {
    let mut s = start_stream();
    let durable = wait_blocks(&mut s.progress, 12);
    kill_group(&mut s.writer);
    assert!(s.mount.stop().is_some_and(|st| st.success()));
    check_stream(&s.store, durable);
}

#[test]
fn a_daemon_killed_mid_stream_leaves_every_chunk_whole() {
    let mut s = start_stream();
    let durable = wait_blocks(&mut s.progress, 10);
    s.mount.kill();
    // The writer may have seen one more fsync return before the daemon died: read to the end.
    let durable = durable.max(wait_blocks(&mut s.progress, usize::MAX));
    kill_group(&mut s.writer);
    check_stream(&s.store, durable);
}

#[test]
fn another_writers_metadata_change_is_seen_after_the_metadata_ttl() {
    let (_dir, store) = copy_store(&fixtures().join("v3.zarr"));
    let m = Mount::new(&store, &["-o", "metadata_ttl=1"]);
    // shapes/d1: uint8 (17,), chunks (5,), fill 9.
    let data = m.path("shapes/d1/data");
    let before = std::fs::read(&data).unwrap();
    assert_eq!(before.len(), 17);
    // Another writer grows the array behind the mount's back.
    let doc_path = store.join("shapes/d1/zarr.json");
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&doc_path).unwrap()).unwrap();
    doc["shape"] = serde_json::json!([20]);
    std::fs::write(&doc_path, serde_json::to_vec(&doc).unwrap()).unwrap();
    common::backend::push(&store);
    // Past the metadata TTL (and the kernel's attribute TTL), the new shape is served.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::metadata(&data).unwrap().len() != 20 {
        assert!(std::time::Instant::now() < deadline, "the new shape was not seen within 10 s");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let mut want = before;
    want.extend([9u8; 3]);
    assert_eq!(std::fs::read(&data).unwrap(), want);
    // A write now goes over the new metadata, which the mount may store (it is the version read).
    let f = OpenOptions::new().write(true).open(&data).unwrap();
    f.write_at(&[1, 2], 18).unwrap();
    f.sync_all().unwrap();
    drop(f);
    want[18..20].copy_from_slice(&[1, 2]);
    assert_eq!(std::fs::read(&data).unwrap(), want);
}

#[test]
fn a_flush_over_another_writers_metadata_change_fails_and_keeps_it() {
    let (_dir, store) = copy_store(&fixtures().join("v3.zarr"));
    let m = Mount::new(&store, &[]);
    let data = m.path("shapes/d1/data");
    let f = OpenOptions::new().write(true).open(&data).unwrap();
    f.set_len(25).unwrap(); // a new shape, stored at the next flush
    f.write_all_at(&[42; 25], 0).unwrap(); // and chunks
    let chunks_before = common::snapshot(&store.join("shapes/d1/c"));
    // Another writer changes the attributes meanwhile.
    let doc_path = store.join("shapes/d1/zarr.json");
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&doc_path).unwrap()).unwrap();
    doc["attributes"]["writer"] = serde_json::json!("another");
    std::fs::write(&doc_path, serde_json::to_vec(&doc).unwrap()).unwrap();
    common::backend::push(&store);
    // Another writer won: EBUSY, and this mount's changes of the array are dropped.
    assert_eq!(f.sync_all().unwrap_err().raw_os_error(), Some(libc::EBUSY));
    drop(f);
    drop(m);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&doc_path).unwrap()).unwrap();
    assert_eq!(doc["attributes"]["writer"], "another", "the other writer's change stays");
    assert_eq!(doc["shape"], serde_json::json!([17]));
    assert!(common::snapshot(&store.join("shapes/d1/c")) == chunks_before, "chunks were stored into the other writer's array");
}

#[test]
fn an_array_whose_filters_would_not_keep_what_is_written_is_read_only_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.zarr");
    std::fs::create_dir_all(store.join("narrow")).unwrap();
    std::fs::write(store.join(".zgroup"), r#"{"zarr_format": 2}"#).unwrap();
    // int32 values stored as int16 differences: 70000 - 0 does not fit.
    std::fs::write(
        store.join("narrow/.zarray"),
        r#"{"zarr_format": 2, "shape": [4], "chunks": [4], "dtype": "<i4", "fill_value": 0, "order": "C",
            "filters": [{"id": "delta", "dtype": "<i4", "astype": "<i2"}], "compressor": null}"#,
    )
    .unwrap();
    let m = Mount::new(&store, &[]);
    let data = m.path("narrow/data");
    assert_eq!(std::fs::read(&data).unwrap(), [0u8; 16], "it reads");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&data).unwrap().permissions().mode() & 0o777, 0o444);
    let err = OpenOptions::new().write(true).open(&data).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM));
    let err = std::fs::OpenOptions::new().write(true).open(m.path("narrow/data.npy")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM));
    assert!(!sh(&format!("truncate -s 32 {}", data.display())).status.success());
    let why = std::fs::read_to_string(m.path("narrow/error")).unwrap();
    assert!(why.contains("narrower"), "{why}");
    drop(m);
    let info = Command::new(common::bin()).args(["info", "--json"]).arg(&store).output().unwrap();
    assert!(String::from_utf8_lossy(&info.stdout).contains("narrower"));
}

/// `-o lossy_writes`: a value written into an array whose codecs round it (bitround keeping 8
/// bits, a narrowing astype, quantize, fixedscaleoffset, cast_value) shows at once as the store
/// will give it back — through `pwrite`, a part of an element, and a shared mapping — and a later mount
/// reads the same; a float delta, which rounds each value by those before it, stays read-only.
#[test]
fn lossy_writes_show_at_once_what_the_store_gives_back() {
    let (_dir, store) = copy_store(&fixtures().join("codecs_lossy.zarr"));
    let arrays = ["bitround", "astype_narrowing", "quantize", "fixedscaleoffset", "cast_value"];
    let f64s = |b: &[u8]| b.chunks(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect::<Vec<f64>>();
    let mut shown = Vec::new();
    {
        let m = Mount::new(&store, &["-o", "lossy_writes"]);
        for array in arrays {
            let data = m.path(&format!("{array}/data"));
            let f = OpenOptions::new().read(true).write(true).open(&data).unwrap_or_else(|e| panic!("{array}: {e}\n{}", m.log_text()));
            let written: Vec<f64> = (0..20).map(|i| 1.0 / 3.0 + f64::from(i) * 7.123_456_789).collect();
            let bytes: Vec<u8> = written.iter().flat_map(|v| v.to_le_bytes()).collect();
            f.write_all_at(&bytes, 8 * 10).unwrap();
            // The low bytes of one element's mantissa: the element rounds whole.
            f.write_all_at(&[0x55, 0x55, 0x55], 8 * 40 + 1).unwrap();
            let mut got = vec![0u8; bytes.len()];
            f.read_exact_at(&mut got, 8 * 10).unwrap();
            let got = f64s(&got);
            assert!(got != written, "{array}: the values read back rounded");
            assert!(got.iter().zip(&written).all(|(g, w)| (g - w).abs() <= 0.5 + w.abs() / 100.0), "{array}: {got:?}");
            // A page written through a mapping reads back rounded too.
            let mut map = unsafe { memmap2::MmapMut::map_mut(&f) }.unwrap();
            map[8 * 50..8 * 51].copy_from_slice(&(2.0f64 / 3.0).to_le_bytes());
            map.flush().unwrap();
            drop(map);
            let mut one = [0u8; 8];
            f.read_exact_at(&mut one, 8 * 50).unwrap();
            assert_ne!(f64::from_le_bytes(one), 2.0 / 3.0, "{array}: a mapped write reads back rounded");
            shown.push(std::fs::read(&data).unwrap());
        }
        let err = OpenOptions::new().write(true).open(m.path("delta_float/data")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPERM));
        let why = std::fs::read_to_string(m.path("delta_float/error")).unwrap();
        assert!(why.contains("each element alone"), "{why}");
    }
    // Stored, as shown.
    let m = Mount::new(&store, &[]);
    for (array, shown) in arrays.iter().zip(shown) {
        assert!(std::fs::read(m.path(&format!("{array}/data"))).unwrap() == shown, "{array}: stored as shown");
    }
    let err = OpenOptions::new().write(true).open(m.path("bitround/data")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM), "read-only without the option");
    assert!(std::fs::read_to_string(m.path("bitround/error")).unwrap().contains("lossy_writes"));
}
