//! The hierarchy edited through real mounts with ordinary tools: `mkdir`, `cp` and `cat >` of
//! metadata documents, `sed -i`, `vim -es`, Python's truncate-and-write, `rm -r`, `rmdir`, `mv`.
//! Every result is checked in the store itself (and read back through a fresh mount); refused
//! edits leave the store byte-identical. Against a bucket (scripts/with-store s3), `mv` of a node is
//! refused with EXDEV by the daemon and carried out by `mv` as a copy through the mount.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{Mount, backend};
use serde_json::{Value, json};

/// A v3 array document: `rows` × 3 int16 in chunks of 2 × 3, fill 7.
fn array_doc(rows: u64, attributes: Value) -> Value {
    json!({"zarr_format": 3, "node_type": "array", "shape": [rows, 3], "data_type": "int16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 7, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}],
        "attributes": attributes})
}

/// A store with a root group that consolidates its hierarchy (as `zarr.consolidate_metadata`
/// leaves it), holding the array `a` (4 rows).
fn store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s.zarr");
    std::fs::create_dir_all(root.join("a")).unwrap();
    let a = array_doc(4, json!({"units": "m"}));
    std::fs::write(root.join("a/zarr.json"), serde_json::to_vec_pretty(&a).unwrap()).unwrap();
    let group = json!({"zarr_format": 3, "node_type": "group", "attributes": {},
        "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": {"a": a}}});
    std::fs::write(root.join("zarr.json"), serde_json::to_vec_pretty(&group).unwrap()).unwrap();
    (dir, root)
}

fn sh(script: &str) -> Output {
    Command::new("sh").args(["-c", script]).output().unwrap()
}

fn ok(out: Output, what: &str) {
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// The keys of the root's consolidated metadata.
fn consolidated(root: &Path) -> Vec<String> {
    let doc = read_json(&root.join("zarr.json"));
    let mut keys: Vec<String> = doc["consolidated_metadata"]["metadata"].as_object().unwrap().keys().cloned().collect();
    keys.sort();
    keys
}

/// Every file under `dir`, relative.
fn files(dir: &Path) -> Vec<String> {
    backend::pull(dir);
    if !dir.exists() {
        return Vec::new();
    }
    let mut out: Vec<String> =
        common::snapshot(dir).into_keys().map(|k| k.strip_prefix(&format!("{}/", dir.display())).unwrap_or(&k).to_string()).collect();
    out.sort();
    out
}

fn int16s(bytes: &[u8]) -> Vec<i16> {
    bytes.chunks_exact(2).map(|c| i16::from_le_bytes([c[0], c[1]])).collect()
}

#[test]
fn mkdir_makes_groups_and_a_copied_document_makes_an_array_that_dd_fills() {
    let (dir, root) = store();
    let doc = dir.path().join("new.json");
    std::fs::write(&doc, serde_json::to_vec_pretty(&array_doc(4, json!({"made": "by cp"}))).unwrap()).unwrap();
    let mut m = Mount::new(&root, &[]);
    ok(sh(&format!("mkdir -p {}", m.path("g/h/i").display())), "mkdir -p");
    assert_eq!(std::fs::create_dir(m.path("g")).unwrap_err().raw_os_error(), Some(libc::EEXIST));
    // Arrays hold no nodes; names the format reserves are refused.
    assert_eq!(std::fs::create_dir(m.path("a/x")).unwrap_err().raw_os_error(), Some(libc::EPERM));
    assert_eq!(std::fs::create_dir(m.path("__x")).unwrap_err().raw_os_error(), Some(libc::EINVAL));
    ok(sh(&format!("mkdir {0} && cp {1} {0}/zarr.json", m.path("g/b").display(), doc.display())), "mkdir + cp");
    let data = m.path("g/b/data");
    assert_eq!(int16s(&std::fs::read(&data).unwrap()), vec![7; 12], "a new array is all fill");
    let rows: Vec<u8> = (0..12i16).flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.path().join("rows.raw"), &rows).unwrap();
    ok(sh(&format!("dd if={} of={} conv=notrunc status=none", dir.path().join("rows.raw").display(), data.display())), "dd");
    // A group with a node in it does not become an array; its `error` says why until a
    // document is stored there.
    let refused = sh(&format!("cp {} {}", doc.display(), m.path("g/zarr.json").display()));
    assert!(!refused.status.success());
    assert!(std::fs::read_to_string(m.path("g/error")).unwrap().contains("holds the node"));
    let group = br#"{"zarr_format": 3, "node_type": "group", "attributes": {"fixed": true}}"#;
    common::write_and_close(&m.path("g/zarr.json"), std::fs::OpenOptions::new().write(true).truncate(true), group).unwrap();
    assert!(!m.path("g/error").exists());
    m.stop();
    assert_eq!(read_json(&root.join("g/zarr.json"))["attributes"], json!({"fixed": true}));
    assert_eq!(read_json(&root.join("g/h/i/zarr.json")), json!({"zarr_format": 3, "node_type": "group", "attributes": {}}));
    assert_eq!(read_json(&root.join("g/b/zarr.json"))["attributes"], json!({"made": "by cp"}));
    assert_eq!(files(&root.join("g/b")), ["c/0/0", "c/1/0", "zarr.json"]);
    assert_eq!(consolidated(&root), ["a", "g", "g/b", "g/h", "g/h/i"]);
    let m = Mount::new(&root, &["--read-only"]);
    assert_eq!(std::fs::read(m.path("g/b/data")).unwrap(), rows);
    assert_eq!(std::fs::create_dir(m.path("x")).unwrap_err().raw_os_error(), Some(libc::EROFS));
}

#[test]
fn a_v2_hierarchy_gets_v2_groups_and_arrays() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s.zarr");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join(".zgroup"), r#"{"zarr_format": 2}"#).unwrap();
    std::fs::write(root.join(".zmetadata"), r#"{"zarr_consolidated_format": 1, "metadata": {".zgroup": {"zarr_format": 2}}}"#).unwrap();
    let mut m = Mount::new(&root, &[]);
    std::fs::create_dir_all(m.path("g/a")).unwrap();
    let zarray = json!({"zarr_format": 2, "shape": [5], "chunks": [2], "dtype": "<u2", "fill_value": 3, "order": "C",
        "compressor": null, "filters": null});
    common::write_and_close(
        &m.path("g/a/.zarray"),
        std::fs::OpenOptions::new().write(true).create_new(true),
        zarray.to_string().as_bytes(),
    )
    .unwrap();
    common::write_and_close(&m.path("g/a/.zattrs"), std::fs::OpenOptions::new().write(true).create_new(true), br#"{"k": 1}"#).unwrap();
    // Consolidated metadata is the mount's to keep.
    let err = std::fs::OpenOptions::new().write(true).open(m.path(".zmetadata")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM));
    assert_eq!(std::fs::read(m.path("g/a/data")).unwrap(), [3, 0, 3, 0, 3, 0, 3, 0, 3, 0]);
    // A v3 document has no place in a v2 node.
    let v3 = serde_json::to_vec(&array_doc(2, json!({}))).unwrap();
    std::fs::create_dir(m.path("g/c")).unwrap();
    let err = common::write_and_close(&m.path("g/c/zarr.json"), std::fs::OpenOptions::new().write(true).create_new(true), &v3).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    m.stop();
    assert_eq!(read_json(&root.join("g/.zgroup")), json!({"zarr_format": 2}));
    assert!(!root.join("g/a/.zgroup").exists(), "the group document gives way to the array's");
    assert!(!root.join("g/c/zarr.json").exists());
    let meta = read_json(&root.join(".zmetadata"))["metadata"].clone();
    let mut keys: Vec<&String> = meta.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, [".zgroup", "g/.zgroup", "g/a/.zarray", "g/a/.zattrs", "g/c/.zgroup"]);
    assert_eq!(meta["g/a/.zattrs"], json!({"k": 1}));
}

#[test]
fn editors_change_attributes_and_shape_and_every_other_change_is_refused() {
    let (_dir, root) = store();
    let mut m = Mount::new(&root, &[]);
    let doc = m.path("a/zarr.json");
    let d = doc.display();
    std::fs::write(m.path("a/data"), (0..12i16).flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    // sed -i: a temporary file in the same directory, renamed over the document.
    ok(sh(&format!("sed -i 's/\"units\": \"m\"/\"units\": \"km\"/' {d}")), "sed -i");
    assert_eq!(read_json(&doc)["attributes"], json!({"units": "km"}));
    // vim: a backup by rename (or copy), the document written anew.
    ok(sh(&format!("vim -es -u NONE -c '%s/\"km\"/\"mm\"/' -c 'wq' {d} </dev/null")), "vim -es");
    assert_eq!(read_json(&doc)["attributes"], json!({"units": "mm"}));
    // A truncate and a write, as editors that save in place do; a new shape[0] resizes.
    let mut edited = read_json(&doc);
    edited["shape"] = json!([6, 3]);
    edited["attributes"]["note"] = json!("grown");
    std::fs::write(&doc, serde_json::to_vec_pretty(&edited).unwrap()).unwrap();
    assert_eq!(std::fs::metadata(m.path("a/data")).unwrap().len(), 36);
    assert_eq!(int16s(&std::fs::read(m.path("a/data")).unwrap())[10..], [10, 11, 7, 7, 7, 7, 7, 7]);
    // No scratch file was left, none was stored.
    let names: Vec<String> = std::fs::read_dir(m.path("a")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(names.iter().all(|n| ["zarr.json", "data", "prepend"].contains(&n.as_str()) || n.starts_with("data.")), "{names:?}");
    let before = common::snapshot(&root);
    // Changes that need every chunk rewritten, and documents that do not parse: EINVAL at close.
    let mut bad = read_json(&doc);
    bad["data_type"] = json!("int32");
    for (what, bytes) in [
        ("dtype", serde_json::to_vec(&bad).unwrap()),
        ("not JSON", b"{\"zarr_format\": 3,".to_vec()),
        (
            "shape of another axis",
            serde_json::to_vec(&{
                let mut d = read_json(&doc);
                d["shape"] = json!([6, 4]);
                d
            })
            .unwrap(),
        ),
        ("a group", br#"{"zarr_format": 3, "node_type": "group"}"#.to_vec()),
    ] {
        let err = common::write_and_close(&doc, std::fs::OpenOptions::new().write(true).truncate(true), &bytes).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{what}");
    }
    let out = sh(&format!("sed -i 's/int16/float32/' {d}"));
    assert!(!out.status.success(), "a dtype change through sed -i");
    assert!(m.log_text().contains("data_type"), "the log says what changed: {}", m.log_text());
    assert_eq!(read_json(&doc)["data_type"], "int16");
    // The array's `error` file says why too, until it is removed or a document is stored.
    let why = std::fs::read_to_string(m.path("a/error")).unwrap();
    assert!(why.contains("data_type") && why.contains("/a/zarr.json"), "{why}");
    std::fs::remove_file(m.path("a/error")).unwrap();
    assert!(!m.path("a/error").exists());
    m.stop();
    assert_eq!(common::snapshot(&root), before, "refused edits store nothing");
    let stored = read_json(&root.join("a/zarr.json"));
    assert_eq!((stored["shape"].clone(), stored["attributes"].clone()), (json!([6, 3]), json!({"units": "mm", "note": "grown"})));
    assert_eq!(read_json(&root.join("zarr.json"))["consolidated_metadata"]["metadata"]["a"], stored);
}

#[test]
fn rm_r_removes_nodes_and_nothing_else_changes_the_store() {
    let (_dir, root) = store();
    let mut m = Mount::new(&root, &[]);
    std::fs::write(m.path("a/data"), vec![1u8; 24]).unwrap();
    ok(sh(&format!("mkdir -p {0}/g/h && cp {0}/a/zarr.json /dev/null", m.mountpoint.display())), "mkdir");
    m.stop();
    let before = common::snapshot(&root);
    let mut m = Mount::new(&root, &[]);
    // A lone rm of an array's file hides it until remount; rmdir of a node still holding
    // files is refused.
    ok(sh(&format!("rm {}", m.path("a/data").display())), "rm data");
    assert!(!m.path("a/data").exists() && m.path("a/zarr.json").exists());
    assert_eq!(std::fs::remove_dir(m.path("a")).unwrap_err().raw_os_error(), Some(libc::ENOTEMPTY));
    assert_eq!(std::fs::remove_dir(m.path("g")).unwrap_err().raw_os_error(), Some(libc::ENOTEMPTY));
    // A scratch file makes a group hold something.
    std::fs::write(m.path("g/h/notes"), b"x").unwrap();
    assert_eq!(std::fs::remove_dir(m.path("g/h")).unwrap_err().raw_os_error(), Some(libc::ENOTEMPTY));
    std::fs::remove_file(m.path("g/h/notes")).unwrap();
    m.stop();
    assert_eq!(common::snapshot(&root), before, "rm and a refused rmdir store nothing");
    // A group with nothing but its document in it is empty: mkdir and rmdir undo each other.
    let mut m = Mount::new(&root, &[]);
    std::fs::remove_dir(m.path("g/h")).unwrap();
    assert!(!m.path("g/h").exists());
    m.stop();
    assert!(!root.join("g/h/zarr.json").exists());
    assert_eq!(consolidated(&root), ["a", "g"]);
    let mut m = Mount::new(&root, &[]);
    assert!(m.path("a/data").exists());
    // `prepend` reads as empty (a copy of the directory copies nothing from it).
    assert!(std::fs::read(m.path("a/prepend")).unwrap().is_empty());
    // An array open for writing is not removed under its writer; a reader does not keep it:
    // its next read says the file is stale, rather than showing fill.
    let writer = std::fs::OpenOptions::new().write(true).open(m.path("a/data")).unwrap();
    for e in std::fs::read_dir(m.path("a")).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    assert_eq!(std::fs::remove_dir(m.path("a")).unwrap_err().raw_os_error(), Some(libc::EBUSY));
    assert!(m.path("a/data").exists(), "a refused removal shows the node's files again");
    drop(writer);
    let reader = std::fs::File::open(m.path("a/data")).unwrap();
    ok(sh(&format!("rm -r {} {}", m.path("a").display(), m.path("g").display())), "rm -r");
    let stale = std::os::unix::fs::FileExt::read_at(&reader, &mut [0u8; 4], 0).unwrap_err();
    assert_eq!(stale.raw_os_error(), Some(libc::ESTALE));
    drop(reader);
    assert!(!m.path("a").exists() && !m.path("g").exists());
    m.stop();
    assert_eq!(files(&root), ["zarr.json"]);
    assert!(consolidated(&root).is_empty());
}

#[test]
fn mv_moves_nodes_and_scratch_files_stay_in_memory() {
    let (dir, root) = store();
    let mut m = Mount::new(&root, &[]);
    let values: Vec<u8> = (0..12i16).flat_map(|v| (v * 3).to_le_bytes()).collect();
    std::fs::write(m.path("a/data"), &values).unwrap();
    std::fs::create_dir(m.path("g")).unwrap();
    // A scratch file: readable, writable, renamable, never stored.
    std::fs::write(m.path("g/notes.txt"), b"scratch").unwrap();
    std::fs::rename(m.path("g/notes.txt"), m.path("g/notes2.txt")).unwrap();
    assert_eq!(std::fs::read(m.path("g/notes2.txt")).unwrap(), b"scratch");
    // A node moves (a rename on a local store; on a bucket `mv` copies through the mount).
    let out = sh(&format!("mv {} {}", m.path("a").display(), m.path("g/b").display()));
    assert!(out.status.success(), "mv: {}", String::from_utf8_lossy(&out.stderr));
    assert!(!m.path("a").exists());
    assert_eq!(std::fs::read(m.path("g/b/data")).unwrap(), values);
    assert_eq!(read_json(&m.path("g/b/zarr.json"))["attributes"], json!({"units": "m"}));
    if !backend::is_s3() {
        assert_eq!(std::fs::rename(m.path("g"), m.path("g/b/x")).unwrap_err().raw_os_error(), Some(libc::EINVAL));
    }
    // cp -r cannot copy an array (its mkdir makes a group whose document exists, and an
    // array's own files cannot be made in a group): it fails and leaves an empty group.
    let out = sh(&format!("cp -r {} {}", m.path("g/b").display(), m.path("copy").display()));
    assert!(!out.status.success());
    let left: Vec<String> = std::fs::read_dir(m.path("copy")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(left, ["zarr.json"], "no scratch file passes for the array's data");
    std::fs::remove_dir(m.path("copy")).unwrap();
    m.stop();
    assert!(!root.join("a").exists() || files(&root.join("a")).is_empty());
    assert!(!files(&root).iter().any(|f| f.contains("notes")), "scratch files are not stored");
    assert_eq!(consolidated(&root), ["g", "g/b"]);
    let m = Mount::new(&root, &["--read-only"]);
    assert_eq!(std::fs::read(m.path("g/b/data")).unwrap(), values);
    assert!(!m.path("g/notes2.txt").exists());
    drop(dir);
}

#[test]
fn a_killed_daemon_leaves_the_old_or_the_new_node_and_leftovers_never_resurface() {
    if backend::local_only("thousands of chunk objects") {
        return;
    }
    let (_dir, root) = store();
    let mut doc = array_doc(4000, json!({"units": "m"}));
    doc["chunk_grid"]["configuration"]["chunk_shape"] = json!([1, 3]);
    std::fs::write(root.join("a/zarr.json"), serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    for row in 0..4000 {
        std::fs::create_dir_all(root.join(format!("a/c/{row}"))).unwrap();
        // One row of [1, 2, 3] through bytes + zstd (level 1).
        let raw: Vec<u8> = [1i16, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(root.join(format!("a/c/{row}/0")), zstd::encode_all(&raw[..], 1).unwrap()).unwrap();
    }
    let mut m = Mount::new(&root, &[]);
    // Attribute edits in a loop, and an rm -r, killed part way.
    let doc_path = m.path("a/zarr.json");
    let editor = std::thread::spawn(move || {
        for i in 0..200 {
            let Ok(bytes) = std::fs::read(&doc_path) else { return };
            let Ok(mut d) = serde_json::from_slice::<Value>(&bytes) else { return };
            d["attributes"]["i"] = json!(i);
            if std::fs::write(&doc_path, serde_json::to_vec(&d).unwrap()).is_err() {
                return;
            }
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    let rm = Command::new("rm").arg("-r").arg(m.path("a")).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(150));
    m.kill();
    let _ = editor.join();
    drop(rm);
    // The document is whole (old or new), and it goes last: either the node is still there
    // (with every chunk, or those the removal had not reached) and `rm -r` finishes the job, or
    // it is gone with every chunk. Nothing is ever left where the mount cannot reach it.
    let left = files(&root.join("a"));
    if root.join("a/zarr.json").exists() {
        eprintln!("killed before the removal finished: {} keys left", left.len());
        let d = read_json(&root.join("a/zarr.json"));
        assert_eq!(d["shape"], json!([4000, 3]));
        let m = Mount::new(&root, &[]);
        ok(sh(&format!("rm -r {}", m.path("a").display())), "rm -r again");
    } else {
        eprintln!("killed after the removal");
    }
    assert!(files(&root.join("a")).is_empty(), "a removed array left {:?}", &files(&root.join("a"))[..]);
    let m = Mount::new(&root, &[]);
    assert!(!m.path("a").exists());
    assert!(consolidated(&root).is_empty(), "{:?}", consolidated(&root));
    // A new array made there starts all fill.
    std::fs::create_dir(m.path("a")).unwrap();
    std::fs::write(m.path("a/zarr.json"), serde_json::to_vec(&doc).unwrap()).unwrap();
    let data = std::fs::read(m.path("a/data")).unwrap();
    assert!(int16s(&data).iter().all(|&v| v == 7), "chunks of the removed array resurfaced");
}

/// Append `rows` rows (of 3 int16) to `data` as another program would, and fsync them.
fn append_rows(data: &Path, rows: usize, value: i16) {
    let bytes: Vec<u8> = std::iter::repeat_n(value, rows * 3).flat_map(i16::to_le_bytes).collect();
    let mut child = Command::new("dd")
        .arg(format!("of={}", data.display()))
        .args(["oflag=append", "conv=notrunc,fsync", "status=none"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), &bytes).unwrap();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_document_saved_from_a_stale_read_never_undoes_rows_another_writer_stored() {
    let (_dir, root) = store();
    std::fs::create_dir_all(root.join("v2")).unwrap();
    std::fs::write(root.join(".zgroup"), r#"{"zarr_format": 2}"#).unwrap();
    let v2 = json!({"zarr_format": 2, "shape": [2, 3], "chunks": [2, 3], "dtype": "<i2", "fill_value": 7, "order": "C",
        "filters": null, "compressor": null});
    std::fs::write(root.join("v2/.zarray"), serde_json::to_vec_pretty(&v2).unwrap()).unwrap();
    let m = Mount::new(&root, &[]);
    for (array, doc_name) in [("a", "zarr.json"), ("v2", ".zarray")] {
        let (doc, data) = (m.path(&format!("{array}/{doc_name}")), m.path(&format!("{array}/data")));
        let rows = |m: &Path| std::fs::metadata(m).unwrap().len() / 6;
        let before = rows(&data);
        // Load (this process reads the document), edit, save, while another program appends.
        let read = String::from_utf8(std::fs::read(&doc).unwrap()).unwrap();
        append_rows(&data, 3, 11);
        let mut edited: Value = serde_json::from_str(&read).unwrap();
        if doc_name == "zarr.json" {
            edited["attributes"]["edited"] = json!(1);
        }
        let edited = serde_json::to_vec_pretty(&edited).unwrap();
        std::fs::write(&doc, &edited).unwrap_or_else(|e| panic!("{array}: the load-edit-save: {e}"));
        assert_eq!(rows(&data), before + 3, "{array}: a save of the document read before the append undid it");
        assert!(int16s(&std::fs::read(&data).unwrap()).ends_with(&[11; 9]), "{array}: the appended rows");
        // `sed -i` reads and renames in one process too.
        append_rows(&data, 2, 12);
        ok(sh(&format!("sed -i 's/\"fill_value\": 7/\"fill_value\": 7 /' {}", doc.display())), "sed -i");
        assert_eq!(rows(&data), before + 5, "{array}: sed -i undid an append");
        // A copy saved by a process that did not read it, of a shape the array had before: refused.
        let stale = dirname(&doc).join("stale.json");
        std::fs::write(&stale, &read).unwrap();
        let out = sh(&format!("cp {} {}", stale.display(), doc.display()));
        assert!(!out.status.success(), "{array}: a stale copy was taken");
        assert!(String::from_utf8_lossy(&out.stderr).contains("busy"), "{array}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(rows(&data), before + 5);
        assert!(std::fs::read_to_string(m.path(&format!("{array}/error"))).unwrap().contains("stale copy"));
        let _ = std::fs::remove_file(m.path(&format!("{array}/error")));
        // A shrink its writer asked for, from what it read, is a shrink.
        let now: Value = serde_json::from_slice(&std::fs::read(&doc).unwrap()).unwrap();
        let mut shrunk = now.clone();
        shrunk["shape"][0] = json!(before + 1);
        std::fs::write(&doc, serde_json::to_vec_pretty(&shrunk).unwrap()).unwrap();
        assert_eq!(rows(&data), before + 1, "{array}: a shrink from the document its writer read");
    }
    drop(m);
    let doc = read_json(&root.join("a/zarr.json"));
    assert_eq!((doc["shape"].clone(), doc["attributes"]["edited"].clone()), (json!([5, 3]), json!(1)));
}

fn dirname(p: &Path) -> PathBuf {
    p.parent().unwrap().parent().unwrap().to_path_buf()
}

#[test]
fn rm_r_deletes_an_arrays_chunks_and_documents_and_nothing_the_mount_never_showed() {
    let (_dir, root) = store();
    // In the array's directory: a nested node, a README and a stray directory, none shown.
    std::fs::create_dir_all(root.join("a/nested")).unwrap();
    std::fs::write(root.join("a/nested/zarr.json"), r#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    std::fs::write(root.join("a/README"), "notes").unwrap();
    std::fs::create_dir_all(root.join("a/other")).unwrap();
    std::fs::write(root.join("a/other/x"), "x").unwrap();
    let m = Mount::new(&root, &[]);
    std::fs::write(m.path("a/data"), vec![1u8; 24]).unwrap();
    ok(sh(&format!("rm -r {}", m.path("a").display())), "rm -r");
    assert!(!m.path("a").exists());
    drop(m);
    assert_eq!(files(&root.join("a")), ["README", "nested/zarr.json", "other/x"], "only the array's own keys go");
    assert!(consolidated(&root).is_empty());
}

#[test]
fn a_new_node_clears_what_an_interrupted_removal_left_and_never_hides_it() {
    let (_dir, root) = store();
    // What a removal killed long ago left: chunks, a temporary name, an empty chunk directory.
    for leftover in ["x/c/0/0", "x/c/1/0", "x/.zarr.json.zarrfs-1-2.tmp", "y/0.0"] {
        std::fs::create_dir_all(root.join(leftover).parent().unwrap()).unwrap();
        std::fs::write(root.join(leftover), "old").unwrap();
    }
    std::fs::create_dir_all(root.join("x/c/2")).unwrap();
    std::fs::write(root.join("y/README"), "kept").unwrap();
    let m = Mount::new(&root, &[]);
    std::fs::create_dir(m.path("x")).unwrap();
    std::fs::create_dir(m.path("y")).unwrap();
    // A group made there removes them; an array made there starts all fill.
    std::fs::write(m.path("x/zarr.json"), serde_json::to_vec(&array_doc(4, json!({}))).unwrap()).unwrap();
    assert!(int16s(&std::fs::read(m.path("x/data")).unwrap()).iter().all(|&v| v == 7));
    drop(m);
    assert_eq!(files(&root.join("x")), ["zarr.json"]);
    assert_eq!(files(&root.join("y")), ["README", "zarr.json"], "what is not a leftover chunk stays");
    assert_eq!(consolidated(&root), ["a", "x", "y"]);
}

#[test]
fn a_node_moves_under_its_readers_and_they_read_on() {
    if backend::is_s3() {
        eprintln!("an object store moves nodes by copying them through the mount: nothing is open across it");
        return;
    }
    let (_dir, root) = store();
    let m = Mount::new(&root, &[]);
    std::fs::write(m.path("a/data"), (0..12i16).flat_map(i16::to_le_bytes).collect::<Vec<u8>>()).unwrap();
    let reader = std::fs::File::open(m.path("a/data")).unwrap();
    ok(sh(&format!("mv {} {}", m.path("a").display(), m.path("b").display())), "mv with a reader");
    let mut buf = [0u8; 24];
    std::os::unix::fs::FileExt::read_exact_at(&reader, &mut buf, 0).unwrap();
    assert_eq!(int16s(&buf), (0..12).collect::<Vec<i16>>(), "the reader reads the moved array");
    assert_eq!(std::fs::read(m.path("b/data")).unwrap(), buf);
    // A writer holds it where it is.
    let writer = std::fs::OpenOptions::new().write(true).open(m.path("b/data")).unwrap();
    assert!(!sh(&format!("mv {} {}", m.path("b").display(), m.path("c").display())).status.success());
    drop(writer);
}
