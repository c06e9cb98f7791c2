//! Reads through real mounts of the fixture stores, compared with what zarr-python reads.

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::{Lcg, Mount, dd, expected, fixtures};

fn mount_store(store: &str) -> Mount {
    Mount::new(&fixtures().join(store), &[])
}

fn healthy(store: &str) -> Vec<common::Expected> {
    expected().into_iter().filter(|e| e.store == store && e.bad_ranges.is_empty()).collect()
}

fn check_store_with_std_fs(store: &str) {
    let m = mount_store(store);
    let arrays = healthy(store);
    assert!(!arrays.is_empty());
    for e in &arrays {
        let data = m.path(&e.path).join("data");
        let len = std::fs::metadata(&data).unwrap_or_else(|err| panic!("{store}/{}: {err}", e.path)).len();
        assert_eq!(len as usize, e.bytes.len(), "{store}/{} size", e.path);
        let got = std::fs::read(&data).unwrap_or_else(|err| panic!("{store}/{}: {err}\n{}", e.path, m.log_text()));
        assert!(got == e.bytes, "{store}/{}: bytes differ from zarr-python's", e.path);
    }
}

#[test]
fn zarr_python_v3_arrays_read_back() {
    check_store_with_std_fs("v3.zarr");
}

#[test]
fn zarr_python_v2_arrays_read_back() {
    check_store_with_std_fs("v2.zarr");
}

#[test]
fn variable_length_arrays_read_back_as_text() {
    check_store_with_std_fs("vlen.zarr");
    check_store_with_std_fs("zarrs-vlen");
}

#[test]
fn rectilinear_arrays_read_back() {
    check_store_with_std_fs("rectilinear.zarr");
}

#[test]
fn tensorstore_arrays_read_back() {
    check_store_with_std_fs("tensorstore_v3.zarr");
    check_store_with_std_fs("tensorstore_v2.zarr");
}

#[test]
fn every_numcodecs_codec_zarr_python_writes_reads_back() {
    for store in ["codecs.zarr", "codecs_v2.zarr", "codecs_lossy.zarr", "codecs_lossy_v2.zarr"] {
        check_store_with_std_fs(store);
    }
}

#[test]
fn lossy_codecs_are_read_only_and_checksums_catch_damage() {
    let (_dir, store) = common::copy_store(&fixtures().join("codecs.zarr"));
    // One bit flipped in the data of a chunk behind each checksum codec.
    for (array, at_start) in [("crc32", true), ("adler32", true), ("crc32c", false), ("jenkins_lookup3", false), ("fletcher32", false)] {
        let chunk = store.join(array).join("c/0/0");
        let mut bytes = std::fs::read(&chunk).unwrap();
        let i = if at_start { 4 } else { 0 };
        bytes[i] ^= 1;
        std::fs::write(&chunk, bytes).unwrap();
    }
    let m = Mount::new(&store, &[]);
    for array in ["crc32", "adler32", "crc32c", "jenkins_lookup3", "fletcher32"] {
        let err = std::fs::read(m.path(&format!("{array}/data"))).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO), "{array}: {err}");
    }
    assert!(m.log_text().contains("mismatch"), "{}", m.log_text());
    drop(m);

    let lossy = Mount::new(&fixtures().join("codecs_lossy.zarr"), &[]);
    for array in ["fixedscaleoffset", "quantize", "bitround", "astype_narrowing", "delta_float", "cast_value", "cast_value_wrap"] {
        let err = std::fs::OpenOptions::new().write(true).open(lossy.path(&format!("{array}/data"))).unwrap_err();
        assert!(matches!(err.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)), "{array}: {err}");
    }
}

/// The kerchunk sets of tests/fixtures/kerchunk (JSON, and a parquet set), each mounted (by its
/// name, or from the bucket; and as `reference:` with absolute targets), read as netCDF4 reads
/// the files they describe.
#[test]
fn kerchunk_reference_sets_read_as_netcdf4_reads_their_files() {
    let dir = fixtures().join("kerchunk");
    let all: Vec<common::Expected> = expected().into_iter().filter(|e| e.store == "kerchunk").collect();
    for set in ["day0.json", "day1.json", "classic.json", "series.json", "series.parq"] {
        let arrays: Vec<&common::Expected> = all.iter().filter(|e| e.path.starts_with(&format!("{set}/"))).collect();
        assert!(!arrays.is_empty(), "{set}");
        // By name (a local .json file or parquet directory is a set); on a bucket, the set and
        // its targets mirrored there, as `reference:s3://…`.
        let m = match common::backend::is_s3() {
            false => Mount::new(&dir.join(set), &[]),
            true => Mount::new(Path::new(&format!("reference:{}/{set}", common::backend::mount_source(&dir).to_string_lossy())), &[]),
        };
        for e in &arrays {
            let var = &e.path[set.len() + 1..];
            let got = std::fs::read(m.path(&format!("{var}/data"))).unwrap_or_else(|err| panic!("{set} {var}: {err}\n{}", m.log_text()));
            assert!(got == e.bytes, "{set} {var}: bytes differ from netCDF4's");
        }
        let err = std::fs::OpenOptions::new().write(true).open(m.path(&format!("{}/data", &arrays[0].path[set.len() + 1..]))).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{set}");
    }
    // The same set with absolute targets elsewhere: refused until --targets allows them.
    let copy = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(dir.join("day0.json"))
        .unwrap()
        .replace("\"day0.nc\"", &format!("\"file://{}\"", dir.join("day0.nc").display()));
    std::fs::write(copy.path().join("abs.json"), text).unwrap();
    let source = format!("reference:{}", copy.path().join("abs.json").display());
    let air = all.iter().find(|e| e.path == "day0.json/air").unwrap();
    let m = Mount::new(Path::new(&source), &[]);
    let err = std::fs::read(m.path("air/data")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{err}");
    assert!(m.log_text().contains("outside the allowed prefixes"), "{}", m.log_text());
    drop(m);
    let m = Mount::new(Path::new(&source), &["--targets", dir.to_str().unwrap()]);
    assert!(std::fs::read(m.path("air/data")).unwrap() == air.bytes);
    drop(m);
    // Compressed as fsspec writes `abs.json.zst` (scripts/check-climate.py mounts gzip, bzip2
    // and xz sets fsspec wrote, by their names). Cut short: refused, naming its compressor.
    let json = std::fs::read(copy.path().join("abs.json")).unwrap();
    let zst = copy.path().join("abs.json.zst");
    std::fs::write(&zst, zstd::encode_all(&json[..], 3).unwrap()).unwrap();
    let m = Mount::new(Path::new(&format!("reference:{}", zst.display())), &["--targets", dir.to_str().unwrap()]);
    assert!(std::fs::read(m.path("air/data")).unwrap() == air.bytes, "{}", m.log_text());
    drop(m);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &json).unwrap();
    let gz = gz.finish().unwrap();
    std::fs::write(copy.path().join("cut.json.gz"), &gz[..gz.len() - 8]).unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(common::bin()).arg("mount").arg(copy.path().join("cut.json.gz")).arg(mnt.path()).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("compressed with gzip"), "{out:?}");
    // `gen` entries: 2 × 3 chunks of 4 int16, the chunk (i, j) at byte 8 (3i + j) + 16 of a
    // file whose first 16 bytes are a header.
    let body: Vec<u8> = (0..48u8).collect();
    std::fs::write(copy.path().join("grid.bin"), [&[0xffu8; 16][..], &body].concat()).unwrap();
    let set = r#"{"version": 1, "templates": {"f": "grid.bin"}, "refs": {
        ".zgroup": "{\"zarr_format\": 2}",
        "g/.zarray": "{\"shape\": [2, 12], \"chunks\": [1, 4], \"dtype\": \"<i2\", \"compressor\": null, \"filters\": null, \"fill_value\": 0, \"order\": \"C\", \"zarr_format\": 2}"},
        "gen": [{"key": "g/{{i}}.{{j}}", "url": "{{f}}", "offset": "{{ 16 + 8 * (3 * i + j) }}", "length": "8",
                 "dimensions": {"i": {"stop": 2}, "j": [0, 1, 2]}}]}"#;
    std::fs::write(copy.path().join("gen.json"), set).unwrap();
    let m = Mount::new(Path::new(&format!("reference:{}", copy.path().join("gen.json").display())), &[]);
    assert!(std::fs::read(m.path("g/data")).unwrap() == body, "{}", m.log_text());
}

/// tifffile's fsspec references to TIFF files (tests/fixtures/tiff-refs), each with the
/// imagecodecs codecs of its strips or tiles (LZW, PackBits, zstd, deflate; the horizontal and
/// floating point predictors), read as tifffile reads the files.
#[test]
fn tiff_reference_sets_read_as_tifffile_reads_their_files() {
    let dir = fixtures().join("tiff-refs");
    let sets: Vec<common::Expected> = expected().into_iter().filter(|e| e.store == "tiff-refs").collect();
    assert_eq!(sets.len(), 6);
    for e in &sets {
        // On a bucket, the set and its TIFF files mirrored there.
        let m = match common::backend::is_s3() {
            false => Mount::new(&dir.join(&e.path), &[]),
            true => Mount::new(Path::new(&format!("reference:{}/{}", common::backend::mount_source(&dir).to_string_lossy(), e.path)), &[]),
        };
        let got = std::fs::read(m.path("data")).unwrap_or_else(|err| panic!("{}: {err}\n{}", e.path, m.log_text()));
        assert!(got == e.bytes, "{}: bytes differ from tifffile's", e.path);
    }
}

#[test]
fn dd_with_any_block_size_reads_the_same_bytes() {
    for store in ["v3.zarr", "v2.zarr", "tensorstore_v3.zarr", "rectilinear.zarr", "vlen.zarr", "zarrs-vlen"] {
        let m = mount_store(store);
        for e in healthy(store) {
            let data = m.path(&e.path).join("data");
            for bs in ["1", "7", "4k", "1M"] {
                let got = dd(&data, bs).unwrap_or_else(|err| panic!("dd bs={bs} {store}/{}: {err}", e.path));
                assert!(got == e.bytes, "dd bs={bs} {store}/{} differs", e.path);
            }
        }
    }
}

#[test]
fn random_preads_match() {
    let mut rng = Lcg(7);
    for store in ["v3.zarr", "v2.zarr", "rectilinear.zarr", "vlen.zarr"] {
        let m = mount_store(store);
        for e in healthy(store) {
            let f = std::fs::File::open(m.path(&e.path).join("data")).expect("open data");
            let n = e.bytes.len() as u64;
            for _ in 0..40 {
                let off = rng.below(n + 8);
                let len = rng.below(n / 2 + 16) as usize;
                let mut buf = vec![0xAAu8; len];
                let got = f.read_at(&mut buf, off).expect("pread");
                let want = &e.bytes[(off.min(n) as usize)..((off as usize + len).min(n as usize)).max(off.min(n) as usize)];
                assert_eq!(&buf[..got], want, "{store}/{} pread({off}, {len})", e.path);
            }
        }
    }
}

#[test]
fn mmap_reads_match() {
    let m = mount_store("v3.zarr");
    for e in healthy("v3.zarr").into_iter().filter(|e| !e.bytes.is_empty()) {
        let f = std::fs::File::open(m.path(&e.path).join("data")).expect("open data");
        // SAFETY: the file is not changed while mapped.
        let map = unsafe { memmap2::Mmap::map(&f) }.expect("mmap");
        assert!(map[..] == e.bytes[..], "mmap of {} differs", e.path);
    }
}

fn walk(root: &Path, rel: &str, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(root.join(rel)).expect("readdir") {
        let entry = entry.expect("entry");
        let name = entry.file_name().into_string().expect("utf-8 name");
        let child = if rel.is_empty() { name } else { format!("{rel}/{name}") };
        if entry.file_type().expect("type").is_dir() {
            out.insert(format!("{child}/"));
            walk(root, &child, out);
        } else {
            out.insert(child);
        }
    }
}

#[test]
fn tree_is_exactly_the_contract() {
    let m = mount_store("v3.zarr");
    let mut seen = BTreeSet::new();
    walk(&m.mountpoint, "", &mut seen);
    // Arrays: a directory with zarr.json, data, prepend and the header views the array's type
    // and shape allow; every ancestor a group with zarr.json.
    let mut want = BTreeSet::from([
        ".zarrfs/".to_string(),
        ".zarrfs/stats".into(),
        ".zarrfs/errors".into(),
        "zarr.json".into(),
        "g1/".into(),
        "g1/zarr.json".into(),
        "g1/empty_group/".into(),
        "g1/empty_group/zarr.json".into(),
    ]);
    for e in expected().into_iter().filter(|e| e.store == "v3.zarr") {
        for f in ["zarr.json", "data", "prepend"].into_iter().chain(e.views()) {
            want.insert(format!("{}/{f}", e.path));
        }
        let mut prefix = String::new();
        for part in e.path.split('/') {
            prefix = if prefix.is_empty() { part.to_string() } else { format!("{prefix}/{part}") };
            want.insert(format!("{prefix}/"));
            if prefix != e.path {
                want.insert(format!("{prefix}/zarr.json"));
            }
        }
    }
    assert_eq!(seen, want);
    let meta = std::fs::metadata(m.path("shapes/d1/prepend")).expect("prepend");
    assert_eq!((meta.len(), std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777), (0, 0o200));
    assert_eq!(
        std::fs::read(m.path("shapes/d1/zarr.json")).unwrap(),
        std::fs::read(fixtures().join("v3.zarr/shapes/d1/zarr.json")).unwrap()
    );
    assert!(std::fs::metadata(m.path("notes.txt")).is_err());
    assert!(std::fs::metadata(m.path("shapes/d1/c")).is_err());
}

#[test]
fn v2_tree_shows_its_documents() {
    let m = mount_store("v2.zarr");
    let mut seen = BTreeSet::new();
    walk(&m.mountpoint, "sub", &mut seen);
    let want: BTreeSet<String> = [
        "sub/.zattrs",
        "sub/.zgroup",
        "sub/nan_fill/",
        "sub/nan_fill/.zarray",
        "sub/nan_fill/.zattrs",
        "sub/nan_fill/data",
        "sub/nan_fill/data.hdr",
        "sub/nan_fill/data.mhd",
        "sub/nan_fill/data.raw.nhdr",
        "sub/nan_fill/data.nii",
        "sub/nan_fill/data.npy",
        "sub/nan_fill/prepend",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(seen, want);
}

#[test]
fn damaged_store_fails_only_where_it_must() {
    let m = mount_store("damaged.zarr");
    for e in expected().into_iter().filter(|e| e.store == "damaged.zarr") {
        let f = std::fs::File::open(m.path(&e.path).join("data")).expect("open data");
        // The kernel reads whole pages: a read fails when its page holds damage.
        const PAGE: usize = 4096;
        for off in (0..e.bytes.len()).step_by(512) {
            let mut buf = vec![0u8; 8];
            let page = off / PAGE * PAGE..(off / PAGE + 1) * PAGE;
            let bad = e.bad_ranges.iter().any(|&(s, end)| s < page.end && end > page.start);
            match f.read_at(&mut buf, off as u64) {
                Ok(n) if !bad => {
                    assert_eq!(&buf[..n], &e.bytes[off..off + n], "{} at {off}", e.path)
                }
                Err(err) if bad => {
                    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{} at {off}", e.path)
                }
                other => panic!("{} at {off}: bad={bad} got {other:?}", e.path),
            }
        }
    }
    // A whole read across damage fails; the log names the array, the key and the cause.
    assert_eq!(std::fs::read(m.path("corrupt/data")).unwrap_err().raw_os_error(), Some(libc::EIO));
    let log = m.log_text();
    assert!(log.contains("/corrupt") && log.contains("corrupt/c/1") && log.contains("zstd"), "log: {log}");
    // Nodes that cannot be served show their metadata and an error file, and no data.
    for (node, reason) in [
        ("bad_json", "not valid JSON"),
        ("unknown_codec", "lzma42"),
        ("must_understand", "fancy_extension"),
        ("unsupported_dtype", "struct"),
    ] {
        let msg = std::fs::read_to_string(m.path(node).join("error")).unwrap_or_else(|e| panic!("{node}/error: {e}"));
        assert!(msg.contains(reason), "{node}: {msg}");
        assert!(m.path(node).join("zarr.json").exists());
        assert!(!m.path(node).join("data").exists());
    }
    // The rest of the mount works.
    assert_eq!(std::fs::read(m.path("good/data")).unwrap(), [1i32, 2, 3, 4].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
}

#[test]
fn sigterm_unmounts_cleanly() {
    let mut m = mount_store("v3.zarr");
    assert!(std::fs::read(m.path("shapes/d1/data")).is_ok());
    let status = m.stop().expect("daemon exits on SIGTERM");
    assert!(status.success(), "exit status {status}");
    assert!(!common::is_mounted(&m.mountpoint));
}

#[test]
fn read_only_mounts_refuse_writes() {
    let m = Mount::new(&fixtures().join("v3.zarr"), &["--read-only"]);
    let err = std::fs::OpenOptions::new().write(true).open(m.path("shapes/d1/data")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    let meta = std::fs::metadata(m.path("shapes/d1/data")).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o444);
}

#[test]
fn a_dd_scan_decodes_each_chunk_once_and_leaves_the_cache_to_the_kernel() {
    // uint8 (4096, 8192) in chunks of (64, 8192): 64 chunks of 512 KiB, 32 MiB, each chunk's
    // bytes its row-band number.
    let dir = tempfile::tempdir().unwrap();
    common::banded_array(dir.path(), 4096, 8192, 64);
    let m = Mount::new(dir.path(), &[]);
    let got = dd(&m.path("data"), "1M").unwrap();
    assert_eq!(got.len(), 32 << 20);
    for (band, rows) in got.chunks(64 * 8192).enumerate() {
        assert!(rows.iter().all(|&b| usize::from(b) == band), "band {band}");
    }
    let stats: serde_json::Value = serde_json::from_slice(&std::fs::read(m.path(".zarrfs/stats")).unwrap()).unwrap();
    let cache = &stats["cache"];
    assert_eq!(cache["decoded_bytes"].as_u64(), Some(32 << 20), "every chunk decoded once: {cache}");
    // What is left is within the slack behind the last request (8 MiB) and a chunk: the rest
    // was released once read (the 1 GiB cache would otherwise hold all 32 MiB).
    assert!(cache["bytes"].as_u64().unwrap() <= (9 << 20) + (512 << 10), "{cache}");
}

#[test]
fn a_shard_another_program_rewrites_reads_as_the_old_or_the_new_never_a_mix() {
    // One shard of 8 x 4096 uint8 in inner chunks of 2 x 512 (zstd): values that compress to
    // inner chunks of other sizes, so that the rewritten shard's offsets are all different.
    let doc = serde_json::json!({"zarr_format": 3, "node_type": "array", "shape": [8, 4096], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 4096]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 512],
            "codecs": [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 1}}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]});
    let make = |values: &[u8]| {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("s.zarr");
        std::fs::create_dir_all(store.join("a")).unwrap();
        std::fs::write(store.join("zarr.json"), r#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
        std::fs::write(store.join("a/zarr.json"), doc.to_string()).unwrap();
        let m = Mount::new(&store, &[]);
        std::fs::write(m.path("a/data"), values).unwrap();
        drop(m);
        (dir, store)
    };
    let old: Vec<u8> = (0..8 * 4096).map(|i| (i / 1024) as u8 + 1).collect();
    let new: Vec<u8> = (0..8 * 4096u32).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8 | 1).collect();
    let (_d1, store) = make(&old);
    let (_d2, rewritten) = make(&new);
    let m = Mount::new(&store, &[]);
    // Reads past the kernel's page cache, so that each asks the daemon.
    let direct = || {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(m.path("a/data")).unwrap()
    };
    let data = direct();
    // Part of the shard is read (its index and one inner chunk cached), then another program
    // replaces the shard; the metadata stays as it was.
    let mut part = [0u8; 8];
    std::os::unix::fs::FileExt::read_exact_at(&data, &mut part, 0).unwrap();
    assert_eq!(part, old[..8]);
    std::fs::copy(rewritten.join("a/c/0/0"), store.join("a/c/0/0.new")).unwrap();
    std::fs::rename(store.join("a/c/0/0.new"), store.join("a/c/0/0")).unwrap();
    common::backend::push(&store);
    // All old or all new, never new bytes at old offsets; what was not cached before is new.
    for file in [data, direct()] {
        let mut all = vec![0u8; 8 * 4096];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut all, 0).unwrap_or_else(|e| panic!("{e}: {}", m.log_text()));
        assert!(all == new, "not the new write of the shard: {}", if all == old { "the old one" } else { "a mix of both" });
    }
}

#[test]
fn a_walk_asks_once_per_directory_and_sees_another_writers_groups_after_the_metadata_ttl() {
    let (_dir, store) = common::copy_store(&fixtures().join("ome/v04.zarr"));
    // A TTL longer than any walk here takes, however loaded the machine.
    let m = Mount::new(&store, &["--read-only", "--metadata-ttl", "60"]);
    let count = |m: &Mount, what: &str| {
        let stats: serde_json::Value = serde_json::from_slice(&std::fs::read(m.path(".zarrfs/stats")).unwrap()).unwrap();
        stats["requests"][what].as_u64().unwrap()
    };
    let before = count(&m, "lookup");
    let mut seen = BTreeSet::new();
    walk(&m.mountpoint, "", &mut seen);
    let dirs = seen.iter().filter(|p| p.ends_with('/')).count() as u64;
    // The listings answered the lookups of their entries (readdirplus), and a directory cost
    // two requests (its listing and the empty one that ends it; no open, no release).
    assert!(count(&m, "lookup") - before < dirs / 4, "{} lookups for {dirs} directories", count(&m, "lookup") - before);
    let listings = |m: &Mount| count(m, "readdir") + count(m, "readdirplus");
    assert!(listings(&m) <= 2 * dirs + 2, "{} listing requests for {dirs} directories", listings(&m));
    // Walked again within the TTL: the kernel's copies answer it all.
    let (requests, mut again) = (listings(&m), BTreeSet::new());
    walk(&m.mountpoint, "", &mut again);
    assert_eq!(again, seen);
    assert_eq!(listings(&m), requests, "a second walk asked for listings again");
    // A document's name stands for the TTL, though its size is asked for each time.
    let document = m.path(seen.iter().find(|p| p.ends_with(".zattrs") || p.ends_with("zarr.json")).unwrap());
    std::fs::metadata(&document).unwrap();
    let lookups = count(&m, "lookup");
    std::fs::metadata(&document).unwrap();
    std::fs::metadata(&document).unwrap();
    // (Reading the stats looks up `stats` once.)
    assert!(count(&m, "lookup") - lookups <= 1, "{} lookups for two stats of one document", count(&m, "lookup") - lookups);
    drop(m);
    // A group another writer makes in the store: listed once the metadata TTL has passed.
    let m = Mount::new(&store, &["--read-only", "--metadata-ttl", "1"]);
    let names =
        |m: &Mount| std::fs::read_dir(&m.mountpoint).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect::<Vec<_>>();
    assert!(!names(&m).contains(&"late".to_string()));
    let mtime = || std::fs::metadata(&m.mountpoint).unwrap().modified().unwrap();
    let unchanged = mtime();
    std::fs::create_dir(store.join("late")).unwrap();
    std::fs::write(store.join("late/.zgroup"), r#"{"zarr_format": 2}"#).unwrap();
    common::backend::push(&store);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(names(&m).contains(&"late".to_string()), "{:?}", names(&m));
    assert!(mtime() > unchanged, "the mtime of a directory listed again moves");
}

/// A read-only mount keeps a document's attributes for the metadata TTL, as every other
/// attribute (a second `ls -lR` asks for nothing), yet a document never reads cut short at a
/// size the kernel holds: another writer's longer document reads whole, by `read` and by `mmap`
/// (at once on a disk; on object storage what a listing fetched serves the TTL out whole), and
/// its new size shows after the TTL.
#[test]
fn a_read_only_mounts_documents_read_whole_whatever_size_the_kernel_holds() {
    if common::backend::no_document_rewrites() {
        return;
    }
    let (_dir, store) = common::copy_store(&fixtures().join("v3.zarr"));
    let m = Mount::new(&store, &["--read-only", "-o", "metadata_ttl=2"]);
    let doc = m.path("shapes/d1/zarr.json");
    let before = std::fs::read(&doc).unwrap();
    assert_eq!(std::fs::metadata(&doc).unwrap().len(), before.len() as u64);
    let mut grown: serde_json::Value = serde_json::from_slice(&before).unwrap();
    grown["attributes"]["note"] = serde_json::json!("x".repeat(300));
    let grown = serde_json::to_vec_pretty(&grown).unwrap();
    std::fs::write(store.join("shapes/d1/zarr.json"), &grown).unwrap();
    common::backend::push(&store);
    let read = std::fs::read(&doc).unwrap();
    assert!(read == grown || (common::backend::is_s3() && read == before), "a document reads whole ({} bytes)", read.len());
    let f = std::fs::File::open(&doc).unwrap();
    // SAFETY: the mapping is read while the file stays open, and the mount is read-only.
    let mapped = unsafe { memmap2::Mmap::map(&f) }.unwrap();
    let whole = |d: &[u8]| mapped.len() <= d.len() && mapped[..] == d[..mapped.len()];
    assert!(whole(&grown) || (common::backend::is_s3() && whole(&before)), "a mapping reads the document as it is");
    drop(mapped);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::metadata(&doc).unwrap().len() != grown.len() as u64 || std::fs::read(&doc).unwrap() != grown {
        assert!(std::time::Instant::now() < deadline, "the new document was not seen within 10 s");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
