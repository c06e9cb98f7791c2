//! Consolidated metadata kept current: when a node's document changes, or a node appears or
//! goes, every group above it that consolidates its hierarchy (v3 `consolidated_metadata` in
//! `zarr.json`, v2 `.zmetadata`) gets the same change, so readers that prefer consolidated
//! metadata see what the store holds.
//!
//! A change begins with its consolidated metadata (`Update::begin`: the new documents read
//! from the store and written), and can be put back (`Update::undo`) when the change of the
//! nodes themselves fails after it: a change happens with its consolidated metadata or not at
//! all. The `Update` holds every other change of consolidated metadata off until it is dropped,
//! after the nodes' own documents are written: a check of the consolidation (`repair`, at mount)
//! or another node's change in between would read the old node or the old consolidation and
//! write it back over the new. Where even putting back fails (a full disk), the documents are
//! remembered as stale and rebuilt from the nodes at the next change, as they are checked when a
//! local store is mounted (`repair`).

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};

use serde_json::{Value, json};

use super::metadata::{self, Document, ZarrFormat};
use super::node::{display_path, is_hidden, is_node};
use crate::limits::MAX_DOCUMENT_BYTES;
use crate::store::{self, Expect, Store};
use crate::{Error, Result};

/// What happened to a node.
#[derive(Clone, Copy)]
pub enum Change<'a> {
    /// Its document `name` (`zarr.json`, `.zarray`, `.zgroup`, `.zattrs`) now holds this.
    Set(&'a str, &'a Document),
    /// Its document `name` is gone (v2: a group's `.zgroup` when it became an array).
    Unset(&'a str),
    /// The node and everything beneath it are gone.
    Remove,
}

/// One consolidating document rewritten: its bytes before and after.
struct Rewrite {
    key: String,
    old: Vec<u8>,
    new: Vec<u8>,
}

/// The rewrites of consolidated metadata that a change of nodes made: while it lives, no other
/// change of consolidated metadata runs.
pub struct Update {
    rewrites: Vec<Rewrite>,
    _one: MutexGuard<'static, ()>,
}

/// Each update reads, changes and writes whole documents, and goes with the nodes' own: two at
/// once would lose one.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Consolidating documents that could be neither updated nor put back: rebuilt from the nodes
/// at the next chance.
static STALE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// The consolidating document of the group at `group` in `format`.
fn document_key(group: &str, format: ZarrFormat) -> String {
    store::join(group, if format == ZarrFormat::V3 { "zarr.json" } else { ".zmetadata" })
}

/// The entries of a consolidating document, if it consolidates.
fn entries_of(doc: &mut Value, format: ZarrFormat) -> Option<&mut serde_json::Map<String, Value>> {
    let entries = match format {
        ZarrFormat::V3 => doc.get_mut("consolidated_metadata").and_then(|c| c.get_mut("metadata")),
        ZarrFormat::V2 => doc.get_mut("metadata"),
    };
    entries.and_then(Value::as_object_mut)
}

/// The node documents the directory document `name` (`zarr.json`, `.zmetadata`) consolidates,
/// if it consolidates any: each by its key below the directory (`a/b/zarr.json`, `a/b/.zarray`),
/// rendered as its entry holds it. Whether each still is what the store holds, the caller
/// knows (a listing's times). This is what storage is given to answer walks with
/// (`store::ReadConsolidated`): it reads keys and bytes, not Zarr documents.
pub fn documents_of(name: &str, bytes: &[u8]) -> Option<store::ConsolidatedDocuments> {
    let format = match name {
        "zarr.json" => ZarrFormat::V3,
        ".zmetadata" => ZarrFormat::V2,
        _ => return None,
    };
    let doc: Value = serde_json::from_slice(bytes).ok()?;
    let entries = match format {
        ZarrFormat::V3 => doc.get("consolidated_metadata")?.get("metadata")?,
        ZarrFormat::V2 => doc.get("metadata")?,
    };
    let documents = entries.as_object()?.iter().filter(|(_, entry)| entry.is_object()).filter_map(|(rel, entry)| {
        let key = match format {
            ZarrFormat::V3 => store::join(rel, "zarr.json"),
            ZarrFormat::V2 => rel.clone(),
        };
        Some((key, serde_json::to_vec(entry).ok()?))
    });
    Some(documents.collect())
}

/// The rewrites `changes` of nodes (each `(path, format, change)`) need in every group above
/// them that consolidates its hierarchy (v2: and in a node's own `.zmetadata`, which lists its
/// own documents). Nothing is written.
fn prepare(store: &dyn Store, changes: &[(&str, ZarrFormat, Change<'_>)]) -> Result<Vec<Rewrite>> {
    let mut docs: Vec<(String, Vec<u8>, Value, ZarrFormat, bool)> = Vec::new();
    for (path, format, change) in changes {
        let parts: Vec<&str> = if path.is_empty() { Vec::new() } else { path.split('/').collect() };
        let own = match format {
            ZarrFormat::V2 => parts.len(),
            ZarrFormat::V3 => parts.len().saturating_sub(1),
        };
        for depth in (0..=own).rev() {
            let (group, rel) = (parts[..depth].join("/"), parts[depth..].join("/"));
            if *format == ZarrFormat::V3 && rel.is_empty() {
                continue;
            }
            let key = document_key(&group, *format);
            if !docs.iter().any(|d| d.0 == key) {
                let Some(bytes) = store.get(&key, MAX_DOCUMENT_BYTES)? else { continue };
                let Ok(doc) = metadata::parse_json(&bytes, &key) else { continue };
                docs.push((key.clone(), bytes, doc, *format, false));
            }
            let Some(d) = docs.iter_mut().find(|d| d.0 == key) else { continue };
            if let Some(entries) = entries_of(&mut d.2, *format) {
                d.4 |= apply(entries, *format, &rel, change);
            }
        }
    }
    Ok(docs
        .into_iter()
        .filter(|d| d.4)
        .map(|(key, old, doc, _, _)| Rewrite { new: metadata::render_like(Some(&old), &doc), key, old })
        .collect())
}

impl Update {
    /// Write what `changes` of nodes need in the consolidated metadata above them, once any
    /// stale consolidation is rebuilt. If a write fails, those before it are put back, and the
    /// error is returned: the store is as it was. Write the nodes' own documents before the
    /// `Update` is dropped.
    pub fn begin(store: &dyn Store, changes: &[(&str, ZarrFormat, Change<'_>)]) -> Result<Update> {
        let one = crate::error::lock(&ONE_AT_A_TIME);
        repair_stale(store);
        let rewrites = prepare(store, changes)?;
        for (i, r) in rewrites.iter().enumerate() {
            if let Err(e) = store.set(&r.key, &r.new) {
                put_back(store, &rewrites[..i]);
                return Err(e);
            }
        }
        Ok(Update { rewrites, _one: one })
    }

    /// The consolidating documents written.
    pub fn keys(&self) -> impl Iterator<Item = String> + '_ {
        self.rewrites.iter().map(|r| r.key.clone())
    }

    /// Put back what `begin` wrote: the change of the nodes it went with failed.
    pub fn undo(&self, store: &dyn Store) {
        put_back(store, &self.rewrites);
    }
}

/// Write the old bytes of `rewrites` back; those that cannot be are stale until repaired.
fn put_back(store: &dyn Store, rewrites: &[Rewrite]) {
    for r in rewrites {
        if let Err(e) = store.set(&r.key, &r.old) {
            tracing::error!(document = %display_path(&r.key), "consolidated metadata is stale until it is repaired: {e}");
            crate::error::lock(&STALE).insert(r.key.clone());
        }
    }
}

/// Apply `change` of the node `rel` (relative to the consolidating group) to its entries.
/// Returns whether anything changed.
fn apply(entries: &mut serde_json::Map<String, Value>, format: ZarrFormat, rel: &str, change: &Change<'_>) -> bool {
    let entry = |name: &str| match format {
        ZarrFormat::V3 => rel.to_string(),
        ZarrFormat::V2 => store::join(rel, name),
    };
    match change {
        Change::Set(name, doc) => {
            let key = entry(name);
            let doc = entry_of(name, doc.to_value());
            let changed = entries.get(&key) != Some(&doc);
            entries.insert(key, doc);
            changed
        }
        Change::Unset(name) => entries.remove(&entry(name)).is_some(),
        Change::Remove => {
            let lead = format!("{rel}/");
            let before = entries.len();
            entries.retain(|k, _| k != rel && !k.starts_with(&lead));
            before != entries.len()
        }
    }
}

/// A node's document `name` as its consolidated entry: a group's carries its own (empty)
/// consolidated metadata, as zarr-python writes it, so that the entry reads back as a fresh
/// consolidation would.
fn entry_of(name: &str, mut doc: Value) -> Value {
    let is_group = name == ".zgroup" || doc.get("node_type").and_then(Value::as_str) == Some("group");
    if name == "zarr.json"
        && is_group
        && let Some(obj) = doc.as_object_mut()
    {
        obj.entry("consolidated_metadata").or_insert_with(|| json!({"kind": "inline", "must_understand": false, "metadata": {}}));
    }
    doc
}

/// Whether a consolidated entry stands for `doc`: every field of the document, as it is (a
/// writer may add fields at their defaults, or a group's own consolidation).
fn stands_for(entry: &Value, name: &str, doc: &Value) -> bool {
    let (Some(entry), Some(doc)) = (entry.as_object(), entry_of(name, doc.clone()).as_object().cloned()) else { return entry == doc };
    let is_default = |v: &Value| v.is_null() || v.as_array().is_some_and(Vec::is_empty) || v.as_object().is_some_and(|o| o.is_empty());
    doc.iter().all(|(k, v)| k == "consolidated_metadata" || entry.get(k) == Some(v))
        && entry.iter().all(|(k, v)| doc.contains_key(k) || k == "consolidated_metadata" || is_default(v))
}

/// The most nodes a walk of a subtree visits, and how deep: a store may be hostile (a link back
/// to an ancestor would make the walk endless).
pub const MAX_WALKED_NODES: usize = 100_000;
const MAX_WALKED_DEPTH: usize = 64;

/// Every document of the nodes at and beneath `path` (arrays are not looked into: their
/// directories hold chunks), as (node, document name, document); refused past `most_bytes` of
/// documents in all, so that what a walk holds is bounded as each document is.
pub fn subtree_documents(store: &dyn Store, path: &str, most_bytes: u64) -> Result<Vec<(String, &'static str, Document)>> {
    let mut out = Vec::new();
    let mut pending = vec![path.to_string()];
    let (mut seen, mut held) = (0, 0u64);
    while let Some(node) = pending.pop() {
        seen += 1;
        if seen > MAX_WALKED_NODES || node[path.len()..].matches('/').count() > MAX_WALKED_DEPTH {
            return Err(Error::Invalid(format!(
                "{} holds more than {MAX_WALKED_NODES} nodes or nests deeper than {MAX_WALKED_DEPTH}",
                display_path(path)
            )));
        }
        let mut is_group = false;
        for name in ["zarr.json", ".zarray", ".zgroup", ".zattrs"] {
            let Some(bytes) = store.get(&store::join(&node, name), MAX_DOCUMENT_BYTES)? else { continue };
            held += bytes.len() as u64;
            if held > most_bytes {
                return Err(Error::Invalid(format!("the documents beneath {} take more than {most_bytes} bytes", display_path(path))));
            }
            let Ok(doc) = Document::parse(&bytes, name) else { continue };
            is_group |= name == ".zgroup" || doc.get("node_type").and_then(Value::as_str) == Some("group");
            out.push((node.clone(), name, doc));
        }
        if is_group {
            for entry in store.list_dir(&node)?.into_iter().filter(|e| e.is_dir && !is_hidden(&e.name)) {
                let child = store::join(&node, &entry.name);
                if is_node(store, &child)? {
                    pending.push(child);
                }
            }
        }
    }
    Ok(out)
}

/// The most bytes of node documents a repair reads: a consolidation larger than that is left
/// as it is (and said so), so that the repair a mount starts with costs a bounded amount of
/// memory whatever the store holds.
const MOST_REPAIRED_BYTES: u64 = 16 << 20;

/// Make the consolidated metadata of the group at `group` (if it consolidates) stand for the
/// nodes beneath it: entries of nodes that are gone are removed, missing or differing ones set
/// from the nodes' documents. Returns whether it was stale (and was rewritten).
pub fn repair(store: &dyn Store, group: &str) -> Result<bool> {
    let _one = crate::error::lock(&ONE_AT_A_TIME);
    repair_held(store, group)
}

/// `repair`, with every other change of consolidated metadata held off by the caller.
fn repair_held(store: &dyn Store, group: &str) -> Result<bool> {
    let format = if store.head(&document_key(group, ZarrFormat::V2))?.is_some() { ZarrFormat::V2 } else { ZarrFormat::V3 };
    let key = document_key(group, format);
    let Some(read) = store.get_value(&key, MAX_DOCUMENT_BYTES)? else { return Ok(false) };
    let bytes = read.bytes;
    let Ok(mut doc) = metadata::parse_json(&bytes, &key) else { return Ok(false) };
    let Some(entries) = entries_of(&mut doc, format) else { return Ok(false) };
    let lead = if group.is_empty() { String::new() } else { format!("{group}/") };
    let mut wanted = serde_json::Map::new();
    // The nodes' documents all go into one document, and are held parsed meanwhile (ten
    // times their text, for long lists): past `MOST_REPAIRED_BYTES` it is not rebuilt.
    let documents = match subtree_documents(store, group, MOST_REPAIRED_BYTES) {
        Err(Error::Invalid(why)) => {
            tracing::warn!(document = %display_path(&key), "consolidated metadata not rebuilt: {why}, more than a repair reads");
            return Ok(false);
        }
        other => other?,
    };
    for (node, name, node_doc) in documents {
        let rel = node.strip_prefix(&lead).unwrap_or(if node == group { "" } else { &node });
        let entry = match format {
            ZarrFormat::V3 if node == group => continue,
            ZarrFormat::V3 => rel.to_string(),
            ZarrFormat::V2 => store::join(rel, name),
        };
        wanted.insert(entry, node_doc.to_value());
    }
    let doc_name = |entry: &str| match format {
        ZarrFormat::V3 => "zarr.json".to_string(),
        ZarrFormat::V2 => entry.rsplit('/').next().unwrap_or(entry).to_string(),
    };
    let mut stale = false;
    let gone: Vec<String> = entries.keys().filter(|k| !wanted.contains_key(*k)).cloned().collect();
    for k in gone {
        entries.remove(&k);
        stale = true;
    }
    for (k, node_doc) in wanted {
        let name = doc_name(&k);
        if !entries.get(&k).is_some_and(|e| stands_for(e, &name, &node_doc)) {
            entries.insert(k, entry_of(&name, node_doc));
            stale = true;
        }
    }
    if stale {
        let rendered = metadata::render_like(Some(&bytes), &doc);
        if rendered.len() as u64 > MAX_DOCUMENT_BYTES {
            tracing::warn!(document = %display_path(&key), "consolidated metadata not rebuilt: it would take {} bytes, more than a document may hold", rendered.len());
            return Ok(false);
        }
        // Over the version read: an update made meanwhile (another mount, another tool) is
        // theirs, not undone by this rebuild.
        match store.set_if(&key, &rendered, Expect::At(read.version)) {
            Err(Error::Conflict { .. }) => {
                tracing::info!(document = %display_path(&key), "consolidated metadata changed while it was checked: left as its writer made it");
                return Ok(false);
            }
            other => other?,
        };
        tracing::warn!(document = %display_path(&key), "consolidated metadata was stale: rebuilt from the nodes");
    }
    crate::error::lock(&STALE).remove(&key);
    Ok(stale)
}

/// Repair the consolidating documents that could not be put back (`STALE`); the caller holds
/// every other change off.
fn repair_stale(store: &dyn Store) {
    let keys: Vec<String> = crate::error::lock(&STALE).iter().cloned().collect();
    for key in keys {
        let group = key.rsplit_once('/').map_or("", |(g, _)| g);
        if let Err(e) = repair_held(store, group) {
            tracing::warn!(document = %display_path(&key), "consolidated metadata is still stale: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(v: &Value) -> Document {
        Document::from_value(v.clone()).unwrap()
    }
    use crate::store::MemoryStore;

    /// Apply `change` of the node at `path` to the consolidated metadata above it. Returns the
    /// keys written.
    fn update(store: &dyn Store, path: &str, format: ZarrFormat, change: &Change<'_>) -> Result<Vec<String>> {
        Ok(Update::begin(store, &[(path, format, *change)])?.keys().collect())
    }

    fn root_v3(store: &MemoryStore, entries: Value) {
        let doc = json!({"zarr_format": 3, "node_type": "group", "attributes": {},
            "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": entries}});
        store.set("zarr.json", &serde_json::to_vec(&doc).unwrap()).unwrap();
    }

    fn entries(store: &MemoryStore, key: &str, field: &str) -> Value {
        let doc: Value = serde_json::from_slice(&store.get(key, 1 << 20).unwrap().unwrap()).unwrap();
        match field {
            "" => doc["metadata"].clone(),
            f => doc[f]["metadata"].clone(),
        }
    }

    #[test]
    fn v3_entries_are_set_added_and_removed_with_their_subtree() {
        let store = MemoryStore::new();
        let array = json!({"node_type": "array", "shape": [1]});
        root_v3(&store, json!({"g": {"node_type": "group"}, "g/a": array, "gx": {"node_type": "group"}}));
        let grown = json!({"node_type": "array", "shape": [2]});
        assert_eq!(update(&store, "g/a", ZarrFormat::V3, &Change::Set("zarr.json", &document(&grown))).unwrap(), ["zarr.json"]);
        assert_eq!(entries(&store, "zarr.json", "consolidated_metadata")["g/a"], grown);
        let group = json!({"zarr_format": 3, "node_type": "group", "attributes": {}});
        update(&store, "g/h", ZarrFormat::V3, &Change::Set("zarr.json", &document(&group))).unwrap();
        let added = &entries(&store, "zarr.json", "consolidated_metadata")["g/h"];
        assert_eq!(added["consolidated_metadata"]["metadata"], json!({}), "{added}");
        update(&store, "g", ZarrFormat::V3, &Change::Remove).unwrap();
        let left: Vec<String> = entries(&store, "zarr.json", "consolidated_metadata").as_object().unwrap().keys().cloned().collect();
        assert_eq!(left, ["gx"]);
        // Nothing to change: nothing written.
        assert!(update(&store, "g", ZarrFormat::V3, &Change::Remove).unwrap().is_empty());
    }

    #[test]
    fn v2_entries_name_their_documents_and_the_root_lists_its_own() {
        let store = MemoryStore::new();
        let doc = json!({"zarr_consolidated_format": 1, "metadata": {".zgroup": {"zarr_format": 2}, "a/.zarray": {"shape": [1]}, "a/.zattrs": {}}});
        store.set(".zmetadata", &serde_json::to_vec(&doc).unwrap()).unwrap();
        update(&store, "", ZarrFormat::V2, &Change::Set(".zattrs", &document(&json!({"k": 1})))).unwrap();
        update(&store, "a", ZarrFormat::V2, &Change::Set(".zattrs", &document(&json!({"u": 2})))).unwrap();
        let e = entries(&store, ".zmetadata", "");
        assert_eq!((e[".zattrs"].clone(), e["a/.zattrs"].clone()), (json!({"k": 1}), json!({"u": 2})));
        update(&store, "a", ZarrFormat::V2, &Change::Remove).unwrap();
        let left: Vec<String> = entries(&store, ".zmetadata", "").as_object().unwrap().keys().cloned().collect();
        assert_eq!(left, [".zgroup", ".zattrs"]);
    }

    #[test]
    fn a_check_of_the_consolidation_waits_for_the_nodes_own_documents() {
        // The check at mount ran between a grown array's consolidated entry and its own
        // document, read the old document and wrote the old shape back over the new.
        let store = std::sync::Arc::new(MemoryStore::new());
        let old = json!({"zarr_format": 3, "node_type": "array", "shape": [4]});
        let grown = json!({"zarr_format": 3, "node_type": "array", "shape": [6]});
        store.set("a/zarr.json", &serde_json::to_vec(&old).unwrap()).unwrap();
        root_v3(&store, json!({"a": old}));
        let update = Update::begin(store.as_ref(), &[("a", ZarrFormat::V3, Change::Set("zarr.json", &document(&grown)))]).unwrap();
        let check = {
            let store = store.clone();
            std::thread::spawn(move || repair(store.as_ref(), "").unwrap())
        };
        // Time for the check to run now, were it not held off.
        std::thread::sleep(std::time::Duration::from_millis(200));
        store.set("a/zarr.json", &serde_json::to_vec(&grown).unwrap()).unwrap();
        drop(update);
        assert!(!check.join().unwrap(), "the check found the consolidation current");
        assert_eq!(entries(&store, "zarr.json", "consolidated_metadata")["a"]["shape"], json!([6]));
    }

    #[test]
    fn an_update_is_put_back_and_a_stale_consolidation_is_rebuilt() {
        let store = MemoryStore::new();
        let group = json!({"zarr_format": 3, "node_type": "group", "attributes": {}});
        let array = json!({"zarr_format": 3, "node_type": "array", "shape": [1]});
        store.set("a/zarr.json", &serde_json::to_vec(&array).unwrap()).unwrap();
        root_v3(&store, json!({"a": array.clone()}));
        let before = store.get("zarr.json", 1 << 20).unwrap();
        let update = Update::begin(
            &store,
            &[("g", ZarrFormat::V3, Change::Set("zarr.json", &document(&group))), ("a", ZarrFormat::V3, Change::Remove)],
        )
        .unwrap();
        assert_eq!(entries(&store, "zarr.json", "consolidated_metadata").as_object().unwrap().keys().collect::<Vec<_>>(), ["g"]);
        update.undo(&store);
        drop(update);
        assert_eq!(store.get("zarr.json", 1 << 20).unwrap(), before);
        // Stale: a node it does not list, one it lists that is gone, one that differs.
        store.set("b/zarr.json", &serde_json::to_vec(&array).unwrap()).unwrap();
        root_v3(&store, json!({"a": {"zarr_format": 3, "node_type": "array", "shape": [9]}, "gone": group.clone()}));
        assert!(repair(&store, "").unwrap());
        let e = entries(&store, "zarr.json", "consolidated_metadata");
        assert_eq!((e["a"]["shape"].clone(), e["b"]["shape"].clone(), e.get("gone")), (json!([1]), json!([1]), None));
        assert!(!repair(&store, "").unwrap(), "a current consolidation is left alone");
    }
}
