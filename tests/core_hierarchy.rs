//! Reference-model test of hierarchy edits through the core (no FUSE): random `mkdir`s, arrays
//! made by writing a document into a group, writes to `data`, removals as `rm -r` makes them
//! (unlink every file, then rmdir, depth first), renames and remounts, on an in-memory store,
//! against a model of the tree. After every step the tree the core shows, every array's bytes,
//! the store's keys and the root's consolidated metadata must agree with the model.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use zarrfs::fs::{Config, FileKind, ZarrFs};
use zarrfs::store::{MemoryStore, Store};

#[derive(Clone, Debug, PartialEq)]
enum Node {
    Group,
    /// An int16 array of 3 rows of 2, fill 7: its bytes.
    Array(Vec<u8>),
}

#[derive(Clone, Debug)]
enum Op {
    Mkdir(usize, usize),
    MakeArray(usize),
    Write(usize, u8),
    Remove(usize),
    Rename(usize, usize, usize),
    Remount,
}

const NAMES: [&str; 3] = ["a", "b", "c"];

/// Every path the ops may name: depth 1 and 2 (index 0 is the root).
fn paths() -> Vec<String> {
    let mut out = vec![String::new()];
    for a in NAMES {
        out.push(a.to_string());
        for b in NAMES {
            out.push(format!("{a}/{b}"));
        }
    }
    out
}

fn op() -> impl Strategy<Value = Op> {
    let n = paths().len();
    prop_oneof![
        4 => (0..NAMES.len()).prop_map(|c| Op::Mkdir(0, c)),
        4 => (0..n, 0..NAMES.len()).prop_map(|(p, c)| Op::Mkdir(p, c)),
        3 => (1..n).prop_map(Op::MakeArray),
        3 => (1..n, any::<u8>()).prop_map(|(p, v)| Op::Write(p, v)),
        1 => (1..n).prop_map(Op::Remove),
        2 => (1..n, 0..n, 0..NAMES.len()).prop_map(|(p, d, c)| Op::Rename(p, d, c)),
        1 => Just(Op::Remount),
    ]
}

fn array_doc() -> Value {
    json!({"zarr_format": 3, "node_type": "array", "shape": [3, 2], "data_type": "int16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 7, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}], "attributes": {}})
}

fn fill() -> Vec<u8> {
    [7u8, 0].repeat(6)
}

fn mount(store: &Arc<MemoryStore>) -> ZarrFs {
    ZarrFs::new(store.clone(), Config { cache_size: 1 << 16, metadata_ttl: std::time::Duration::from_secs(3600), ..Config::default() })
}

fn ino(fs: &ZarrFs, path: &str) -> Option<u64> {
    let mut ino = 1;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        ino = fs.lookup(ino, part).ok()?.ino;
    }
    Some(ino)
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() { name.to_string() } else { format!("{dir}/{name}") }
}

fn beneath(path: &str, dir: &str) -> bool {
    path == dir || path.starts_with(&format!("{dir}/"))
}

/// `rm -r`: unlink every file, remove subdirectories, then the directory.
fn remove_tree(fs: &ZarrFs, parent: u64, name: &str) -> zarrfs::Result<()> {
    let dir = fs.lookup(parent, name)?.ino;
    for e in fs.readdir(dir, 0)?.iter() {
        match e.kind {
            FileKind::Directory => remove_tree(fs, dir, e.name)?,
            FileKind::RegularFile => fs.unlink(dir, e.name)?,
        }
    }
    fs.rmdir(parent, name)
}

fn apply(fs: &ZarrFs, model: &mut BTreeMap<String, Node>, op: &Op) {
    let all = paths();
    let is_group = |m: &BTreeMap<String, Node>, p: &str| p.is_empty() || m.get(p) == Some(&Node::Group);
    match *op {
        Op::Mkdir(p, c) => {
            let path = join(&all[p], NAMES[c]);
            let done = ino(fs, &all[p]).map(|dir| fs.mkdir(dir, NAMES[c]));
            let expect = is_group(model, &all[p]) && !model.contains_key(&path);
            if expect {
                assert!(matches!(done, Some(Ok(_))), "mkdir {path}: {done:?}");
                model.insert(path, Node::Group);
            } else {
                assert!(!matches!(done, Some(Ok(_))), "mkdir {path} should fail");
            }
        }
        Op::MakeArray(p) => {
            let path = &all[p];
            let empty_group = model.get(path) == Some(&Node::Group) && !model.keys().any(|k| k != path && beneath(k, path));
            let Some(dir) = ino(fs, path) else { return assert!(!model.contains_key(path)) };
            let Ok(doc) = fs.lookup(dir, "zarr.json") else { return };
            let fh = fs.open(doc.ino, true, true, 0).unwrap();
            fs.write(doc.ino, fh, 0, &serde_json::to_vec(&array_doc()).unwrap(), false).unwrap();
            let stored = fs.flush(fh, 0);
            fs.release(fh);
            match model.get(path) {
                _ if empty_group => {
                    stored.unwrap();
                    model.insert(path.clone(), Node::Array(fill()));
                }
                // Rewriting an array's document with the same document changes nothing.
                Some(Node::Array(_)) => stored.unwrap(),
                _ => assert_eq!(stored.map_err(|e| e.errno()), Err(libc::EINVAL), "{path} holds nodes"),
            }
        }
        Op::Write(p, v) => {
            let Some(Node::Array(bytes)) = model.get_mut(&all[p]) else { return };
            let data = fs.lookup(ino(fs, &all[p]).unwrap(), "data").unwrap().ino;
            let fh = fs.open(data, true, false, 0).unwrap();
            fs.write(data, fh, 2, &[v, v, v], false).unwrap();
            fs.flush(fh, 0).unwrap();
            fs.release(fh);
            bytes[2..5].copy_from_slice(&[v, v, v]);
        }
        Op::Remove(p) => {
            let (dir, name) = split(&all[p]);
            let Some(parent) = ino(fs, dir) else { return };
            let done = remove_tree(fs, parent, name);
            if model.contains_key(&all[p]) {
                done.unwrap();
                model.retain(|k, _| !beneath(k, &all[p]));
            } else {
                assert!(done.is_err());
            }
        }
        Op::Rename(p, d, c) => {
            let (from, to) = (&all[p], join(&all[d], NAMES[c]));
            let (from_dir, from_name) = split(from);
            let (Some(a), Some(b)) = (ino(fs, from_dir), ino(fs, &all[d])) else { return };
            let done = fs.rename((a, from_name), (b, NAMES[c]), false, 0);
            let expect = model.contains_key(from) && is_group(model, &all[d]) && !model.contains_key(&to) && !beneath(&to, from);
            if !model.contains_key(from) || from == &to {
                return;
            }
            if expect {
                done.unwrap_or_else(|e| panic!("mv {from} {to}: {e}"));
                let moved: Vec<(String, Node)> =
                    model.iter().filter(|(k, _)| beneath(k, from)).map(|(k, v)| (k.clone(), v.clone())).collect();
                model.retain(|k, _| !beneath(k, from));
                for (k, v) in moved {
                    model.insert(format!("{to}{}", &k[from.len()..]), v);
                }
            } else if !beneath(&to, from) && (!is_group(model, &all[d]) || model.contains_key(&to)) {
                assert!(done.is_err(), "mv {from} {to} should fail");
            }
        }
        Op::Remount => {}
    }
}

fn check(fs: &ZarrFs, store: &MemoryStore, model: &BTreeMap<String, Node>) -> Result<(), TestCaseError> {
    // The tree the core shows.
    let mut shown = BTreeMap::new();
    let mut pending = vec![(1u64, String::new())];
    while let Some((dir, path)) = pending.pop() {
        for e in fs.readdir(dir, 0).unwrap().iter() {
            let child = join(&path, e.name);
            if e.kind != FileKind::Directory || e.name == ".zarrfs" {
                continue;
            }
            let names: Vec<String> = fs.readdir(e.ino, 0).unwrap().iter().map(|e| e.name.to_string()).collect();
            if names.iter().any(|n| n == "data") {
                let data = fs.lookup(e.ino, "data").unwrap().ino;
                let fh = fs.open(data, false, false, 0).unwrap();
                shown.insert(child.clone(), Node::Array(fs.read(data, fh, 0, 12).unwrap()));
                fs.release(fh);
            } else {
                shown.insert(child.clone(), Node::Group);
                pending.push((e.ino, child));
            }
        }
    }
    prop_assert_eq!(&shown, model);
    // Every key belongs to a node; the root's consolidated metadata lists exactly the nodes.
    for key in store.keys() {
        let (dir, _) = split(&key);
        prop_assert!(dir.is_empty() || model.keys().any(|n| beneath(dir, n)), "stray key {}", key);
    }
    let root: Value = serde_json::from_slice(&store.get("zarr.json", 1 << 20).unwrap().unwrap()).unwrap();
    let listed: Vec<&String> = root["consolidated_metadata"]["metadata"].as_object().unwrap().keys().collect();
    let mut listed: Vec<String> = listed.into_iter().cloned().collect();
    listed.sort();
    prop_assert_eq!(listed, model.keys().cloned().collect::<Vec<_>>());
    for (path, node) in model {
        let entry = &root["consolidated_metadata"]["metadata"][path.as_str()];
        prop_assert_eq!(&entry["node_type"], &json!(if *node == Node::Group { "group" } else { "array" }), "{}", path);
    }
    Ok(())
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let store = Arc::new(MemoryStore::new());
    let root = json!({"zarr_format": 3, "node_type": "group", "attributes": {},
        "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": {}}});
    store.set("zarr.json", &serde_json::to_vec(&root).unwrap()).unwrap();
    let mut fs = mount(&store);
    let mut model = BTreeMap::new();
    for op in ops {
        if let Op::Remount = op {
            assert!(fs.flush_all().is_ok());
            fs = mount(&store);
        }
        apply(&fs, &mut model, op);
        check(&fs, &store, &model)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn hierarchy_edits_agree_with_a_model(ops in proptest::collection::vec(op(), 1..40)) {
        run(&ops)?;
    }
}

/// A group of thousands of children is listed with its children's documents looked for on
/// several threads, and those the mount already knows not looked for again: what it shows is
/// still its nodes, in the store's order, and nothing else (not a directory without a node
/// document, not a hidden name).
#[test]
fn a_huge_groups_listing_shows_exactly_its_nodes_in_order() {
    let store = Arc::new(MemoryStore::new());
    store.set("zarr.json", br#"{"zarr_format": 3, "node_type": "group"}"#).unwrap();
    let mut nodes = Vec::new();
    for i in 0..3000 {
        let name = format!("c{i:05}");
        match i % 4 {
            0 => store.set(&format!("{name}/zarr.json"), br#"{"zarr_format": 3, "node_type": "group"}"#).unwrap(),
            1 => store.set(&format!("{name}/.zgroup"), br#"{"zarr_format": 2}"#).unwrap(),
            2 => store.set(&format!("{name}/stray"), b"not a node").unwrap(),
            _ => store.set(&format!("__{name}/zarr.json"), br#"{"zarr_format": 3, "node_type": "group"}"#).unwrap(),
        };
        if i % 4 < 2 {
            nodes.push(name);
        }
    }
    let fs = ZarrFs::new(
        store.clone(),
        Config {
            metadata_ttl: std::time::Duration::from_secs(3600),
            workers: std::num::NonZeroUsize::new(4).unwrap(),
            ..Config::default()
        },
    );
    // Some children are known before the listing (looked up), some are not.
    for name in nodes.iter().step_by(7) {
        fs.lookup(1, name).unwrap();
    }
    let listed: Vec<String> = fs
        .readdir(1, 0)
        .unwrap()
        .iter()
        .filter(|e| e.kind == FileKind::Directory && e.name != ".zarrfs")
        .map(|e| e.name.to_string())
        .collect();
    assert_eq!(listed.len(), nodes.len());
    assert!(listed == nodes, "the listing is not the group's nodes in order");
}
