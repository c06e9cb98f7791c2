//! Zip archives as stores: what `zarrfs pack` writes (.zip, deflated .zip, RFC-9 .ozx) mounts
//! read-only and shows the same tree, byte for byte, as the store it was packed from;
//! zarr-python's ZipStore (a rewritten chunk left twice) reads right; an archive in a bucket is
//! read by ranges; URL pipelines name a directory inside an archive, and a broken one says where.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Mount, bin, fixtures};

/// Every file under `root` with its bytes, the control directory left out.
fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let e = e.expect("entry");
            let path = e.path();
            let rel = path.strip_prefix(root).expect("beneath").to_string_lossy().into_owned();
            if rel == ".zarrfs" {
                continue;
            }
            if e.file_type().expect("type").is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(root, &path, out);
            } else {
                out.insert(rel, std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn pack(store: &Path, out: &Path, extra: &[&str]) {
    let run = Command::new(bin()).arg("pack").arg(store).arg(out).args(extra).output().expect("zarrfs pack");
    assert!(run.status.success(), "pack {}: {}", store.display(), String::from_utf8_lossy(&run.stderr));
}

fn assert_same_tree(archive: &Mount, directory: &Mount, what: &str) {
    let (got, want) = (tree(&archive.path("")), tree(&directory.path("")));
    assert!(want.len() > 20, "{what}: a tree worth comparing ({} files)", want.len());
    let names = |t: &BTreeMap<String, Vec<u8>>| t.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&got), names(&want), "{what}: the same names");
    for (name, bytes) in &want {
        assert!(got[name] == *bytes, "{what}: {name} differs ({} bytes against {})", got[name].len(), bytes.len());
    }
}

#[test]
fn a_packed_archive_mounts_read_only_with_the_same_tree_and_bytes_as_its_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases: [(&str, &str, &[&str]); 4] = [
        ("v3.zarr", "v3.zip", &[]),
        ("v3.zarr", "v3-deflated.zip", &["--deflate"]),
        ("v2.zarr", "v2.zip", &[]),
        ("ome/v05.zarr", "v05.ozx", &[]),
    ];
    // Against a bucket, one kind is enough: the others differ only in what the local run proves.
    let kinds = if common::backend::local_only("deflate, v2 and .ozx archives read as .zip does") { 1 } else { cases.len() };
    for (store, name, extra) in cases.into_iter().take(kinds) {
        let (store, archive) = (fixtures().join(store), dir.path().join(name));
        pack(&store, &archive, extra);
        let directory = Mount::new(&store, &["--read-only"]);
        let zipped = Mount::new(&archive, &[]);
        assert_same_tree(&zipped, &directory, name);
        // Read-only whatever the options say.
        let data = tree(&zipped.path("")).into_keys().find(|k| k.ends_with("/data")).expect("an array");
        let err = std::fs::OpenOptions::new().write(true).open(zipped.path(&data)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{name}: {data}");
        let err = std::fs::create_dir(zipped.path("new")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{name}");
    }
    // A directory inside the archive, by a URL pipeline: the tree of that group alone.
    let archive = dir.path().join("v3.zip");
    let inner = PathBuf::from(format!("{}|zip:codecs", archive.display()));
    let zipped = Mount::new(&inner, &[]);
    let directory = Mount::new(&fixtures().join("v3.zarr/codecs"), &["--read-only"]);
    assert_same_tree(&zipped, &directory, "v3.zip|zip:codecs");
}

#[test]
fn zarr_pythons_zip_store_reads_right_and_its_rewritten_chunk_is_the_last_entry() {
    let archive = fixtures().join("zip/zarr-python.zip");
    let m = Mount::new(&archive, &[]);
    for name in ["plain", "sharded"] {
        let want = std::fs::read(fixtures().join(format!("zip/expected/{name}.bin"))).expect("expected bytes");
        assert_eq!(std::fs::read(m.path(&format!("{name}/data"))).expect("data"), want, "{name}");
    }
    // The rewrite: the first chunk holds 1000s, not the first write's values.
    let plain = std::fs::read(m.path("plain/data")).expect("data");
    assert_eq!(i16::from_le_bytes([plain[0], plain[1]]), 1000);
    let attributes = std::fs::read_to_string(m.path("zarr.json")).expect("root document");
    assert!(attributes.contains("zarr-python ZipStore"), "{attributes}");
}

#[test]
fn an_archive_in_a_bucket_is_read_by_ranges_never_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 64 chunks of 256 KiB, stored: reading a few bytes of one must not fetch the rest.
    let store = dir.path().join("banded.zarr");
    std::fs::create_dir(&store).expect("store");
    common::banded_array(&store, 64 * 256, 1024, 256);
    let archive = dir.path().join("banded.zip");
    pack(&store, &archive, &[]);
    let len = std::fs::metadata(&archive).expect("archive").len();
    let m = Mount::new(&archive, &[]);
    let f = std::fs::File::open(m.path("data")).expect("data");
    let mut some = [0u8; 16];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut some, 40 * 256 * 1024 + 5).expect("read");
    assert_eq!(some, [40u8; 16], "the bytes of chunk 40");
    let stats: serde_json::Value = serde_json::from_slice(&std::fs::read(m.path(".zarrfs/stats")).expect("stats")).expect("json");
    match stats["store_requests"]["bytes_fetched"].as_u64() {
        Some(fetched) => {
            assert!(fetched < len / 8, "{fetched} bytes fetched of a {len}-byte archive to open it and read one chunk");
            eprintln!("{fetched} of {len} bytes fetched");
        }
        // A local archive makes no requests: there is nothing to count.
        None => assert!(!common::backend::is_s3(), "a bucket's requests are counted: {stats}"),
    }
}

#[test]
fn a_broken_source_is_refused_saying_where_it_broke() {
    let mountpoint = tempfile::tempdir().expect("tempdir");
    let archive = fixtures().join("zip/zarr-python.zip");
    let cases = [
        (format!("{}|zap:", archive.display()), "unknown adapter `zap:`"),
        (format!("{}|zip:|zip:", archive.display()), "an archive inside an archive"),
        (format!("{}|icechunk:@branch.main", archive.display()), "not an Icechunk repository"),
        (format!("{}|zip:nothing-here", archive.display()), "is not a Zarr store"),
    ];
    for (source, why) in cases {
        let run = Command::new(bin()).args(["mount", "-f", &source]).arg(mountpoint.path()).output().expect("zarrfs mount");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success() && stderr.contains(why), "{source}: {stderr}");
        if why.contains('`') {
            assert!(stderr.contains('^'), "a caret under the break: {stderr}");
        }
    }
    // Not an archive at all, by its name.
    let fake = mountpoint.path().join("fake.zip");
    std::fs::write(&fake, b"not a zip").expect("write");
    let target = tempfile::tempdir().expect("tempdir");
    let run = Command::new(bin()).args(["mount", "-f"]).arg(&fake).arg(target.path()).output().expect("zarrfs mount");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success() && stderr.contains("not a zip archive"), "{stderr}");
}
