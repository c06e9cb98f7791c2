//! Consolidated metadata kept current: when a node's document changes, or a node appears or
//! goes, every group above it that consolidates its hierarchy (v3 `consolidated_metadata` in
//! `zarr.json`, v2 `.zmetadata`) gets the same change, so readers that prefer consolidated
//! metadata see what the store holds.

use std::sync::Mutex;

use serde_json::{Value, json};

use super::limits::MAX_DOCUMENT_BYTES;
use super::metadata::{self, ZarrFormat};
use crate::Result;
use crate::store::{self, Store};

/// What happened to a node.
pub enum Change<'a> {
    /// Its document `name` (`zarr.json`, `.zarray`, `.zgroup`, `.zattrs`) now holds this.
    Set(&'a str, &'a Value),
    /// Its document `name` is gone (v2: a group's `.zgroup` when it became an array).
    Unset(&'a str),
    /// The node and everything beneath it are gone.
    Remove,
}

/// Apply `change` of the node at `path` (of `format`) to the consolidated metadata of every
/// group above it that has some (v2: and of the node itself, whose `.zmetadata` lists its own
/// documents). Returns the keys written.
pub fn update(store: &dyn Store, path: &str, format: ZarrFormat, change: &Change<'_>) -> Result<Vec<String>> {
    // Each update reads, changes and writes whole documents: two at once would lose one.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one = crate::error::lock(&ONE_AT_A_TIME);
    let mut written = Vec::new();
    let parts: Vec<&str> = if path.is_empty() { Vec::new() } else { path.split('/').collect() };
    let own = match format {
        ZarrFormat::V2 => parts.len(),
        ZarrFormat::V3 => parts.len().saturating_sub(1),
    };
    for depth in (0..=own).rev() {
        let (group, rel) = (parts[..depth].join("/"), parts[depth..].join("/"));
        if format == ZarrFormat::V3 && rel.is_empty() {
            continue;
        }
        let key = store::join(&group, if format == ZarrFormat::V3 { "zarr.json" } else { ".zmetadata" });
        let Some(bytes) = store.get(&key, MAX_DOCUMENT_BYTES)? else { continue };
        let Ok(mut doc) = metadata::parse_json(&bytes, &key) else { continue };
        let entries = match format {
            ZarrFormat::V3 => doc.get_mut("consolidated_metadata").and_then(|c| c.get_mut("metadata")),
            ZarrFormat::V2 => doc.get_mut("metadata"),
        };
        let Some(entries) = entries.and_then(Value::as_object_mut) else { continue };
        if apply(entries, format, &rel, change) {
            store.set(&key, &metadata::render_like(Some(&bytes), &doc))?;
            written.push(key);
        }
    }
    Ok(written)
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
            let mut doc = (*doc).clone();
            // A group's entry carries its own (empty) consolidated metadata, as zarr-python
            // writes it, so that the entry reads back as a fresh consolidation would.
            let is_group = *name == ".zgroup" || doc.get("node_type").and_then(Value::as_str) == Some("group");
            if is_group && let Some(obj) = doc.as_object_mut() {
                obj.entry("consolidated_metadata").or_insert_with(|| json!({"kind": "inline", "must_understand": false, "metadata": {}}));
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

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
        assert_eq!(update(&store, "g/a", ZarrFormat::V3, &Change::Set("zarr.json", &grown)).unwrap(), ["zarr.json"]);
        assert_eq!(entries(&store, "zarr.json", "consolidated_metadata")["g/a"], grown);
        let group = json!({"zarr_format": 3, "node_type": "group", "attributes": {}});
        update(&store, "g/h", ZarrFormat::V3, &Change::Set("zarr.json", &group)).unwrap();
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
        update(&store, "", ZarrFormat::V2, &Change::Set(".zattrs", &json!({"k": 1}))).unwrap();
        update(&store, "a", ZarrFormat::V2, &Change::Set(".zattrs", &json!({"u": 2}))).unwrap();
        let e = entries(&store, ".zmetadata", "");
        assert_eq!((e[".zattrs"].clone(), e["a/.zattrs"].clone()), (json!({"k": 1}), json!({"u": 2})));
        update(&store, "a", ZarrFormat::V2, &Change::Remove).unwrap();
        let left: Vec<String> = entries(&store, ".zmetadata", "").as_object().unwrap().keys().cloned().collect();
        assert_eq!(left, [".zgroup", ".zattrs"]);
    }
}
