//! Walks answered from the root's consolidated metadata alone, as zarr-python answers them
//! when it opens a consolidated hierarchy: a plain HTTP store, which cannot list, and a
//! read-only bucket mounted with `--trust-consolidated`. Which nodes exist, what each group's
//! directory holds and each node's documents are what the root's consolidated metadata says;
//! nothing is listed and no node document is fetched. The root's document is read again once
//! the metadata TTL has passed, so a new consolidation shows within it. A node another writer
//! added, changed or removed without consolidating shows as the consolidation has it until
//! then (docs/object-storage.md).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{GUARDED, ObjectStore, guarded};
use crate::Result;
use crate::error::lock;
use crate::limits::MAX_DOCUMENT_BYTES;
use crate::store::{ConsolidatedDocuments, Entry, Head, ReadConsolidated, Store, Value, Version};

/// The root's consolidated metadata as last read, and when.
pub(super) struct Trust {
    ttl: Duration,
    kept: Mutex<Option<(Instant, Option<Arc<Trusted>>)>>,
}

impl Trust {
    pub(super) fn new(ttl: Duration) -> Trust {
        Trust { ttl, kept: Mutex::default() }
    }
}

/// What the root's consolidated metadata says the store holds.
pub(super) struct Trusted {
    /// Every node document by key: the root's own as stored, the others their entries.
    documents: BTreeMap<String, Value>,
    /// Every node's path, and whether it is an array (whose directory holds chunks, listed
    /// from the store when asked).
    nodes: BTreeMap<String, bool>,
}

/// The version of a document answered by its entry: of its bytes, so that a new consolidation
/// with the same entry leaves the node as it was (its chunks cached).
fn entry_version(bytes: &[u8]) -> Version {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    bytes.hash(&mut h);
    Version([h.finish(), bytes.len() as u64, 0, 0, 1])
}

/// Whether a node may have this path: no empty, `.` or `..` part.
fn is_node_path(path: &str) -> bool {
    !path.is_empty() && path.split('/').all(|p| !p.is_empty() && p != "." && p != "..")
}

impl Trusted {
    /// The root documents read (`stored`, absent ones included) and the entries of the one
    /// that consolidates.
    fn of(stored: Vec<(&str, Option<Value>)>, entries: ConsolidatedDocuments) -> Trusted {
        let mut documents = BTreeMap::new();
        let mut nodes = BTreeMap::new();
        for (key, bytes) in entries {
            let (node, name) = key.rsplit_once('/').unwrap_or(("", &key));
            // A root entry stands only for v2 attributes or group; the root's own documents
            // are the stored ones.
            if !guarded(&key) || (node.is_empty() && stored.iter().any(|(n, _)| *n == name)) || !(node.is_empty() || is_node_path(node)) {
                tracing::warn!(entry = %crate::error::printable(&key), "consolidated metadata names a document no node can have: passed over");
                continue;
            }
            let array = match name {
                ".zarray" => true,
                "zarr.json" => serde_json::from_slice::<serde_json::Value>(&bytes)
                    .is_ok_and(|d| d.get("node_type").and_then(|t| t.as_str()) == Some("array")),
                _ => false,
            };
            if !node.is_empty() {
                *nodes.entry(node.to_string()).or_insert(false) |= array;
            }
            let version = entry_version(&bytes);
            documents.insert(key, Value { bytes, version });
        }
        for (name, value) in stored {
            if let Some(value) = value {
                documents.insert(name.to_string(), value);
            }
        }
        Trusted { documents, nodes }
    }

    /// The document `key` (a guarded name) as trusted: `None` when the consolidation has none.
    pub(super) fn document(&self, key: &str) -> Option<Value> {
        self.documents.get(key).map(|v| Value { bytes: v.bytes.clone(), version: v.version })
    }

    pub(super) fn head(&self, key: &str) -> Option<Head> {
        self.documents.get(key).map(|v| Head { len: v.bytes.len() as u64, version: v.version })
    }

    /// The names in the directory `dir`: the nodes below it and its documents; `None` where the
    /// consolidation does not say (an array's directory, which holds chunks, or one it does not
    /// reach).
    pub(super) fn dir(&self, dir: &str) -> Option<Vec<Entry>> {
        let lead = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        if self.nodes.get(dir) == Some(&true) {
            return None;
        }
        let mut names: BTreeMap<&str, bool> = BTreeMap::new();
        for path in self.nodes.range(lead.clone()..).map(|(p, _)| p).take_while(|p| p.starts_with(&lead)) {
            let rest = &path[lead.len()..];
            names.insert(rest.split('/').next().unwrap_or(rest), true);
        }
        if !dir.is_empty() && names.is_empty() && !self.nodes.contains_key(dir) {
            return None;
        }
        for key in self.documents.range(lead.clone()..).map(|(k, _)| k).take_while(|k| k.starts_with(&lead)) {
            if let Some(name) = key.get(lead.len()..).filter(|name| !name.contains('/')) {
                names.entry(name).or_insert(false);
            }
        }
        Some(names.into_iter().map(|(name, is_dir)| Entry { name: name.to_string(), is_dir }).collect())
    }
}

impl ObjectStore {
    /// The root's consolidated metadata as trusted (read again once the metadata TTL has
    /// passed); `None` where walks are not answered from it, or the root consolidates nothing.
    pub(super) fn trusted(&self) -> Result<Option<Arc<Trusted>>> {
        let (Some(trust), Some(read)) = (&self.trust, self.consolidated) else { return Ok(None) };
        let mut kept = lock(&trust.kept);
        if let Some((at, trusted)) = kept.as_ref()
            && at.elapsed() < trust.ttl
        {
            return Ok(trusted.clone());
        }
        let before = kept.take();
        let trusted = match self.read_trusted(read) {
            Ok(trusted) => {
                if before.is_none() && trusted.is_none() && matches!(self.listing, super::Listing::Bucket) {
                    tracing::warn!("--trust-consolidated: the root holds no consolidated metadata, so walks list the store");
                }
                trusted.map(Arc::new)
            }
            // A root that cannot be read again: what was read before stands until the TTL has
            // passed once more, so a walk neither fails nor waits on the store at each step.
            Err(e) => match before {
                Some((_, before)) => {
                    tracing::warn!("the root's consolidated metadata could not be read again (what was read before stands): {e}");
                    before
                }
                None => return Err(e),
            },
        };
        *kept = Some((Instant::now(), trusted.clone()));
        Ok(trusted)
    }

    /// The root's documents, read until one consolidates: `zarr.json`, then `.zmetadata`.
    fn read_trusted(&self, read: ReadConsolidated) -> Result<Option<Trusted>> {
        let mut stored = Vec::new();
        for name in ["zarr.json", ".zmetadata"] {
            let value = self.get_fresh(name, MAX_DOCUMENT_BYTES)?;
            let entries = value.as_ref().and_then(|v| read(name, &v.bytes));
            stored.push((name, value));
            if let Some(entries) = entries {
                return Ok(Some(Trusted::of(stored, entries)));
            }
        }
        Ok(None)
    }

    /// The node documents in the directory `prefix`, each asked for (a store that cannot list
    /// and whose consolidated metadata does not say).
    pub(super) fn documents_asked(&self, prefix: &str) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        for name in GUARDED {
            if self.head_current(&crate::store::join(prefix, name))?.is_some() {
                out.push(Entry { name: name.to_string(), is_dir: false });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(bytes: &[u8]) -> Option<Value> {
        Some(Value { bytes: bytes.to_vec(), version: Version([7, bytes.len() as u64, 0, 0, 0]) })
    }

    fn names(entries: Option<Vec<Entry>>) -> Option<Vec<(String, bool)>> {
        entries.map(|v| v.into_iter().map(|e| (e.name, e.is_dir)).collect())
    }

    #[test]
    fn a_v3_consolidation_answers_for_every_group_directory_and_node_document() {
        let root = br#"{"zarr_format":3,"node_type":"group","consolidated_metadata":{"kind":"inline","must_understand":false,
            "metadata":{"a":{"node_type":"group"},"a/b":{"node_type":"array","shape":[2]},"a/c/d":{"node_type":"group"},
            "":{"node_type":"group"},"x/../y":{"node_type":"group"},"/z":{"node_type":"group"}}}}"#;
        let entries = crate::zarr::consolidated::documents_of("zarr.json", root).unwrap();
        let t = Trusted::of(vec![("zarr.json", stored(root))], entries);
        assert_eq!(names(t.dir("")), Some(vec![("a".into(), true), ("zarr.json".into(), false)]));
        // `a/c` is no node but holds one: listed as a directory.
        assert_eq!(names(t.dir("a")), Some(vec![("b".into(), true), ("c".into(), true), ("zarr.json".into(), false)]));
        assert_eq!(names(t.dir("a/c")), Some(vec![("d".into(), true)]));
        assert_eq!(names(t.dir("a/c/d")), Some(vec![("zarr.json".into(), false)]));
        assert_eq!(names(t.dir("a/b")), None, "an array's directory holds chunks: listed from the store");
        assert_eq!(names(t.dir("q")), None, "a directory the consolidation does not reach");
        // The root's own document is the stored one; the others their entries.
        assert_eq!(t.document("zarr.json").map(|v| v.version), stored(root).map(|v| v.version));
        let b = t.document("a/b/zarr.json").unwrap();
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&b.bytes).unwrap()["shape"], serde_json::json!([2]));
        assert_eq!(t.head("a/b/zarr.json").map(|h| (h.len, h.version)), Some((b.bytes.len() as u64, b.version)));
        assert!(t.document("a/b/.zarray").is_none() && t.document("q/zarr.json").is_none() && t.head("a/.zattrs").is_none());
        // Names no node can have are passed over, and none replaces the root's document.
        assert!(t.document("x/../y/zarr.json").is_none() && t.document("/z/zarr.json").is_none());
        assert_eq!(t.document("zarr.json").unwrap().bytes, root.to_vec());
        // An entry's version follows its bytes alone.
        let again = Trusted::of(vec![("zarr.json", stored(b"{}"))], crate::zarr::consolidated::documents_of("zarr.json", root).unwrap());
        assert_eq!(again.document("a/b/zarr.json").unwrap().version, b.version);
    }

    #[test]
    fn a_v2_consolidation_answers_for_the_root_documents_it_holds() {
        let zmetadata = br#"{"zarr_consolidated_format":1,"metadata":{".zgroup":{"zarr_format":2},".zattrs":{"k":1},
            "g/.zgroup":{"zarr_format":2},"g/a/.zarray":{"shape":[3]},"g/a/.zattrs":{"_ARRAY_DIMENSIONS":["x"]},"g/a/c.txt":{}}}"#;
        let entries = crate::zarr::consolidated::documents_of(".zmetadata", zmetadata).unwrap();
        let t = Trusted::of(vec![("zarr.json", None), (".zmetadata", stored(zmetadata))], entries);
        assert_eq!(
            names(t.dir("")),
            Some(vec![(".zattrs".into(), false), (".zgroup".into(), false), (".zmetadata".into(), false), ("g".into(), true)])
        );
        assert_eq!(names(t.dir("g")), Some(vec![(".zgroup".into(), false), ("a".into(), true)]));
        assert_eq!(names(t.dir("g/a")), None);
        assert!(t.document("zarr.json").is_none());
        assert_eq!(t.document(".zattrs").unwrap().bytes, br#"{"k":1}"#.to_vec());
        assert!(t.head("g/a/.zarray").is_some() && t.head("g/a/.zattrs").is_some() && t.head("g/.zattrs").is_none());
        assert!(t.document("g/a/c.txt").is_none(), "no node document");
    }
}
