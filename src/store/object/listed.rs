//! What recursive listings of a bucket showed, kept for the metadata TTL: every key under a
//! directory with its size and version, and the bytes of the node documents among them.
//!
//! A walk of a hierarchy asks for each directory's names, whether each child holds a node
//! document, and each document: one request each on object storage, made one after another
//! as the kernel asks. One listing of the whole prefix (a few requests of 1 000 keys each)
//! answers the first two for every directory beneath, and the documents it shows are then
//! fetched at once, many in flight. A listing that shows more keys than its budget (a large
//! array's chunks) stops there and answers for the keys it reached: S3, GCS and Azure list
//! keys in byte order, so it knows every key up to the last it saw.
//!
//! What is known is what the store held when it was listed: writes through the mount update it,
//! and another writer's changes show once the metadata TTL has passed, as with parsed metadata.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::UpdateVersion;

use crate::error::lock;
use crate::store::Entry;
use crate::store::ReadConsolidated;

/// The keys one listing request shows (S3's, GCS's and Azure's most).
pub const PAGE: usize = 1_000;

/// Keys a listing of a directory shows before it stops: five requests' worth.
pub const LISTING_BUDGET: usize = 5 * PAGE;

/// Listings kept at once (each of at most `LISTING_BUDGET` keys).
const RANGES_KEPT: usize = 16;

/// The bytes of documents kept in all, and of one: a larger document is read when it is asked
/// for, every time.
const KEPT_BYTES: u64 = 32 << 20;
pub const DOCUMENT_KEPT_MAX: u64 = 1 << 20;

/// One key as listed.
#[derive(Clone, Debug)]
pub struct Listed {
    pub size: u64,
    pub version: UpdateVersion,
    /// The value, for a node document fetched after the listing; or what stands for it, for one
    /// the consolidated metadata listed with it vouched for (`consolidated`).
    pub bytes: Option<Bytes>,
    /// Whether `bytes` are a consolidated entry, not the stored value (parsed, never served).
    pub consolidated: bool,
}

/// The bytes of a document kept.
fn len(listed: Option<&Listed>) -> u64 {
    listed.and_then(|l| l.bytes.as_ref()).map_or(0, |b| b.len() as u64)
}

/// The keys of one listing.
struct ListedRange {
    /// The directory listed, as a key prefix (`""` or `"a/b/"`).
    prefix: String,
    /// The last key listed, when the listing stopped before the end of the prefix.
    upto: Option<String>,
    at: Instant,
    keys: BTreeMap<String, Listed>,
    /// The bytes of the documents among `keys`.
    bytes: u64,
}

impl ListedRange {
    fn holds(&self, key: &str) -> bool {
        key.starts_with(&self.prefix) && self.upto.as_deref().is_none_or(|u| key <= u)
    }

    /// `key` holds `now` (`None`: nothing), its bytes counted.
    fn set(&mut self, key: &str, now: Option<Listed>) {
        self.bytes = self.bytes - len(self.keys.get(key)) + len(now.as_ref());
        match now {
            Some(listed) => self.keys.insert(key.to_string(), listed),
            None => self.keys.remove(key),
        };
    }

    /// Whether every key under `dir` (a key prefix) was listed: the listing reached past them.
    fn holds_dir(&self, dir: &str) -> bool {
        dir.starts_with(&self.prefix) && self.upto.as_deref().is_none_or(|u| u > dir && !u.starts_with(dir))
    }
}

/// Changes remembered for the listings under way (`Kept::recent`).
const CHANGES_KEPT: usize = 1_024;

/// The listings kept, and the changes made while listings were under way.
#[derive(Default)]
struct Kept {
    ranges: Vec<ListedRange>,
    /// Changes counted so far: a listing notes the count as it starts (`ListedKeys::started`).
    changes: u64,
    /// The last changes (count, key, what it holds: no bytes), laid over a listing that
    /// started before them as it is kept. A listing is a view of the bucket before it ends: a
    /// chunk the mount stored meanwhile, which the listing did not show, would otherwise be
    /// missing from it (and from a removal of its array that lists what to delete).
    recent: VecDeque<(u64, String, Option<Listed>)>,
    /// The count at the last `clear` (which counts as a change): a listing started before it is
    /// not kept.
    cleared: u64,
}

/// What the listings of the last metadata TTL showed.
pub struct ListedKeys {
    ttl: Duration,
    kept: Mutex<Kept>,
    /// The consolidated metadata listed directories held (their key prefixes), newest last: a
    /// listing of a directory below one takes what it vouches for too.
    consolidations: Mutex<Vec<(String, Instant, Arc<Consolidation>)>>,
    /// The directories (key prefixes) listed in the background now.
    listing: Mutex<Vec<String>>,
}

/// Consolidated metadata kept at once: parsed, each takes a few times its document's size.
const CONSOLIDATIONS_KEPT: usize = 2;

/// A listed directory's consolidated metadata, and when it was stored (milliseconds since the
/// epoch, by the store's clock): a node document below it that the listing shows as stored
/// earlier is what its entry says, and is not fetched. One stored at the same time or later (a
/// writer that did not consolidate) is fetched. Both times are the store's, so no two clocks
/// are compared; a GET's time has whole seconds, so a document of the same second is fetched.
pub struct Consolidation {
    documents: crate::store::ConsolidatedDocuments,
    stored: i64,
}

impl Consolidation {
    /// The directory document `name` holding `bytes`, stored at `stored`, read by `read`: a
    /// consolidation if it consolidates.
    pub fn of(read: ReadConsolidated, name: &str, bytes: &[u8], stored: i64) -> Option<Consolidation> {
        read(name, bytes).map(|documents| Consolidation { documents, stored })
    }

    /// What stands for the document `key` below the directory `prefix`, stored at `modified`:
    /// its entry rendered, if the consolidation is newer and has one. Not the directory's own.
    pub fn vouches(&self, prefix: &str, key: &str, modified: i64) -> Option<Bytes> {
        let rel = key.strip_prefix(prefix).filter(|rel| rel.contains('/') && modified < self.stored)?;
        self.documents.get(rel).map(|document| Bytes::from(document.clone()))
    }
}

/// Whether two versions of a value are the same: servers differ in quoting an ETag in a listing
/// and in a GET's header (rclone's).
fn same_version(a: &UpdateVersion, b: &UpdateVersion) -> bool {
    let tag = |v: &UpdateVersion| v.e_tag.as_deref().map(|e| e.trim_matches('"')).map(str::to_string);
    a.e_tag.is_some() && tag(a) == tag(b) && a.version == b.version
}

/// The key prefix of the directory `dir` (`""` for the root).
pub fn dir_prefix(dir: &str) -> String {
    if dir.is_empty() { String::new() } else { format!("{dir}/") }
}

impl ListedKeys {
    /// Listings kept for `ttl` (none with a zero TTL).
    pub fn new(ttl: Duration) -> ListedKeys {
        ListedKeys { ttl, kept: Mutex::default(), consolidations: Mutex::default(), listing: Mutex::default() }
    }

    pub fn enabled(&self) -> bool {
        !self.ttl.is_zero()
    }

    fn fresh(&self) -> std::sync::MutexGuard<'_, Kept> {
        let mut kept = lock(&self.kept);
        kept.ranges.retain(|r| r.at.elapsed() < self.ttl);
        kept
    }

    /// Where the changes stand as a listing starts: given back to `insert`.
    pub fn started(&self) -> u64 {
        lock(&self.kept).changes
    }

    /// How many more bytes of documents may be kept.
    pub fn room(&self) -> u64 {
        KEPT_BYTES.saturating_sub(self.fresh().ranges.iter().map(|r| r.bytes).sum())
    }

    /// What the listings know of `key`: `Some(None)` if it was not there.
    pub fn get(&self, key: &str) -> Option<Option<Listed>> {
        let kept = self.fresh();
        let range = kept.ranges.iter().rev().find(|r| r.holds(key))?;
        Some(range.keys.get(key).cloned())
    }

    /// The names in the directory `dir`, if a listing showed every key under it.
    pub fn dir(&self, dir: &str) -> Option<Vec<Entry>> {
        let prefix = dir_prefix(dir);
        let kept = self.fresh();
        let range = kept.ranges.iter().rev().find(|r| r.holds_dir(&prefix))?;
        let mut names = BTreeMap::new();
        for key in range.keys.range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded)).map(|(k, _)| k) {
            let Some(rest) = key.strip_prefix(&prefix) else { break };
            let (name, is_dir) = rest.split_once('/').map_or((rest, false), |(name, _)| (name, true));
            *names.entry(name.to_string()).or_insert(false) |= is_dir;
        }
        Some(names.into_iter().map(|(name, is_dir)| Entry { name, is_dir }).collect())
    }

    /// Keep a listing of `prefix` started at `started`: `keys` in byte order, `complete` when it
    /// reached the end. The changes made since it started are laid over it; one started before
    /// a `clear`, or before more changes than are remembered, is kept as tried (`insert_failed`).
    pub fn insert(&self, prefix: String, mut keys: BTreeMap<String, Listed>, complete: bool, started: u64) {
        let upto = if complete { None } else { keys.keys().next_back().cloned() };
        let mut kept = self.fresh();
        let forgotten = kept.recent.front().is_some_and(|(n, _, _)| *n > started + 1);
        if kept.cleared > started || forgotten {
            drop(kept);
            return self.insert_failed(prefix);
        }
        // Documents an overlapping listing fetched, unchanged since, are not fetched again (and
        // stored bytes are kept over a consolidated entry).
        for (key, listed) in keys.iter_mut() {
            let before = kept.ranges.iter().rev().filter(|r| r.holds(key)).find_map(|r| r.keys.get(key));
            if let Some(Listed { bytes: Some(value), version, consolidated, .. }) = before
                && same_version(version, &listed.version)
                && (listed.bytes.is_none() || (listed.consolidated && !consolidated))
            {
                listed.bytes = Some(value.clone());
                listed.consolidated = *consolidated;
            }
        }
        let bytes = keys.values().filter_map(|l| l.bytes.as_ref()).map(|b| b.len() as u64).sum();
        // An older listing the new one covers goes.
        let mut range = ListedRange { prefix, upto, at: Instant::now(), keys, bytes };
        for (_, key, now) in kept.recent.iter().filter(|(n, _, _)| *n > started) {
            if range.holds(key) {
                range.set(key, now.clone());
            }
        }
        kept.ranges.retain(|r| !(r.prefix.starts_with(&range.prefix) && range.upto.is_none()));
        if kept.ranges.len() >= RANGES_KEPT {
            kept.ranges.remove(0);
        }
        // Listings run side by side, each within the room there was when it started: what
        // does not fit beside the others now is dropped (read again when asked for).
        let mut room = KEPT_BYTES.saturating_sub(kept.ranges.iter().map(|r| r.bytes).sum());
        for listed in range.keys.values_mut() {
            let n = len(Some(listed));
            if n > room {
                listed.bytes = None;
                range.bytes -= n;
            } else {
                room -= n;
            }
        }
        kept.ranges.push(range);
    }

    /// Whether `prefix` was listed (or its listing tried) within the TTL.
    pub fn tried(&self, prefix: &str) -> bool {
        self.fresh().ranges.iter().any(|r| r.prefix == prefix)
    }

    /// A listing of `prefix` that could not be kept (it failed, or showed keys that cannot be
    /// answered for): it is not tried again within the TTL, and answers for no key.
    pub fn insert_failed(&self, prefix: String) {
        let mut kept = self.fresh();
        if kept.ranges.len() >= RANGES_KEPT {
            kept.ranges.remove(0);
        }
        kept.ranges.push(ListedRange { prefix, upto: Some(String::new()), at: Instant::now(), keys: BTreeMap::new(), bytes: 0 });
    }

    /// Whether a fresh listing holds the document `key` fetched, at `version`.
    pub fn has_document(&self, key: &str, version: &UpdateVersion) -> bool {
        self.fresh()
            .ranges
            .iter()
            .filter(|r| r.holds(key))
            .filter_map(|r| r.keys.get(key))
            .any(|l| l.bytes.is_some() && same_version(&l.version, version))
    }

    /// `key` now holds this (`None`: nothing), in every listing that holds it and in those
    /// under way: what the mount wrote or deleted, or a document as fetched.
    pub fn changed(&self, key: &str, now: Option<Listed>) {
        let mut kept = self.fresh();
        kept.changes += 1;
        let n = kept.changes;
        if kept.recent.len() >= CHANGES_KEPT {
            kept.recent.pop_front();
        }
        let bare = now.as_ref().map(|l| Listed { bytes: None, consolidated: false, ..l.clone() });
        kept.recent.push_back((n, key.to_string(), bare));
        let mut room = KEPT_BYTES.saturating_sub(kept.ranges.iter().map(|r| r.bytes).sum());
        for range in kept.ranges.iter_mut().filter(|r| r.holds(key)) {
            room += len(range.keys.get(key));
            let mut listed = now.clone();
            if let Some(l) = listed.as_mut()
                && (len(Some(l)) > DOCUMENT_KEPT_MAX || len(Some(l)) > room)
            {
                l.bytes = None;
            }
            room -= len(listed.as_ref());
            range.set(key, listed);
        }
    }

    /// Keep the consolidated metadata of the directory `prefix`, for the TTL.
    pub fn keep_consolidation(&self, prefix: String, consolidation: Arc<Consolidation>) {
        let mut kept = lock(&self.consolidations);
        kept.retain(|(p, at, _)| *p != prefix && at.elapsed() < self.ttl);
        if kept.len() >= CONSOLIDATIONS_KEPT {
            kept.remove(0);
        }
        kept.push((prefix, Instant::now(), consolidation));
    }

    /// The consolidated metadata kept of the directory `prefix` or one above it, with that
    /// directory's prefix: the nearest.
    pub fn consolidation_above(&self, prefix: &str) -> Option<(String, Arc<Consolidation>)> {
        let kept = lock(&self.consolidations);
        kept.iter()
            .filter(|(p, at, _)| prefix.starts_with(p.as_str()) && at.elapsed() < self.ttl)
            .max_by_key(|(p, _, _)| p.len())
            .map(|(p, _, c)| (p.clone(), c.clone()))
    }

    /// Note that `prefix` is being listed in the background, unless it or a directory above it
    /// already is (whose listing will answer for it): whether it was noted. Until
    /// `listed_in_background`, the directory counts as tried, and answers for no key.
    pub fn start_background_listing(&self, prefix: &str) -> bool {
        let mut listing = lock(&self.listing);
        if listing.iter().any(|p| prefix.starts_with(p.as_str())) {
            return false;
        }
        listing.push(prefix.to_string());
        drop(listing);
        self.insert_failed(prefix.to_string());
        true
    }

    /// The background listing of `prefix` ended (kept, or failed).
    pub fn listed_in_background(&self, prefix: &str) {
        lock(&self.listing).retain(|p| p != prefix);
    }

    /// Forget everything (a change of many keys at once), and the listings under way.
    pub fn clear(&self) {
        let mut kept = lock(&self.kept);
        kept.ranges.clear();
        kept.recent.clear();
        kept.changes += 1;
        kept.cleared = kept.changes;
        lock(&self.consolidations).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consolidated_metadata_vouches_only_for_older_documents_below_it() {
        let v3 = br#"{"zarr_format":3,"node_type":"group","consolidated_metadata":{"kind":"inline","must_understand":false,
            "metadata":{"a":{"node_type":"group"},"a/b":{"node_type":"array","shape":[2]}}}}"#;
        let c = Consolidation::of(crate::zarr::consolidated::documents_of, "zarr.json", v3, 10_000).unwrap();
        let entry = |key: &str, at: i64| c.vouches("p/", key, at).map(|b| serde_json::from_slice::<serde_json::Value>(&b).unwrap());
        assert_eq!(entry("p/a/b/zarr.json", 9_000).unwrap()["shape"], serde_json::json!([2]));
        assert_eq!(entry("p/a/zarr.json", 9_999).unwrap()["node_type"], "group");
        // Stored with it or since (a writer that did not consolidate): fetched.
        assert_eq!(entry("p/a/b/zarr.json", 10_000), None);
        assert_eq!(entry("p/a/b/zarr.json", 11_000), None);
        // Not in it, not a v3 document, the directory's own, or outside it.
        assert_eq!(entry("p/a/c/zarr.json", 1), None);
        assert_eq!(entry("p/a/b/.zattrs", 1), None);
        assert_eq!(entry("p/zarr.json", 1), None);
        assert_eq!(entry("q/a/b/zarr.json", 1), None);
        let v2 = br#"{"zarr_consolidated_format":1,"metadata":{"a/.zgroup":{"zarr_format":2},"a/b/.zattrs":{"k":1},"a/b/.zarray":7}}"#;
        let c = Consolidation::of(crate::zarr::consolidated::documents_of, ".zmetadata", v2, 10_000).unwrap();
        assert_eq!(c.vouches("", "a/b/.zattrs", 0).as_deref(), Some(&br#"{"k":1}"#[..]));
        assert_eq!(c.vouches("", "a/.zgroup", 0).as_deref(), Some(&br#"{"zarr_format":2}"#[..]));
        // An entry that is no document.
        assert_eq!(c.vouches("", "a/b/.zarray", 0), None);
        // A document that does not consolidate vouches for nothing.
        assert!(
            Consolidation::of(crate::zarr::consolidated::documents_of, "zarr.json", br#"{"zarr_format":3,"node_type":"group"}"#, 1)
                .is_none()
        );
        assert!(Consolidation::of(crate::zarr::consolidated::documents_of, ".zmetadata", b"not json", 1).is_none());
    }

    fn listed(size: u64) -> Listed {
        Listed { size, version: UpdateVersion { e_tag: Some(format!("e{size}")), version: None }, bytes: None, consolidated: false }
    }

    fn keys(names: &[&str]) -> BTreeMap<String, Listed> {
        names.iter().map(|k| (k.to_string(), listed(1))).collect()
    }

    #[test]
    fn a_complete_listing_answers_for_every_key_and_directory_beneath() {
        let known = ListedKeys::new(Duration::from_secs(60));
        known.insert("p/".into(), keys(&["p/a/zarr.json", "p/a/c/0", "p/b.json", "p/zarr.json"]), true, known.started());
        assert!(matches!(known.get("p/a/zarr.json"), Some(Some(_))));
        assert!(matches!(known.get("p/a/.zarray"), Some(None)), "a key the listing did not show is absent");
        assert!(known.get("q/zarr.json").is_none(), "outside the listing: unknown");
        let names = |d| known.dir(d).map(|v| v.into_iter().map(|e| (e.name, e.is_dir)).collect::<Vec<_>>());
        assert_eq!(names("p"), Some(vec![("a".into(), true), ("b.json".into(), false), ("zarr.json".into(), false)]));
        assert_eq!(names("p/a"), Some(vec![("c".into(), true), ("zarr.json".into(), false)]));
        assert_eq!(names("p/x"), Some(vec![]), "a directory with no key is empty");
        assert_eq!(names(""), None, "the root was not listed");
    }

    #[test]
    fn a_listing_that_stopped_answers_only_up_to_its_last_key() {
        let known = ListedKeys::new(Duration::from_secs(60));
        // Stopped inside `b`'s chunks.
        known.insert(String::new(), keys(&["a/zarr.json", "b/c/0", "b/c/1"]), false, known.started());
        assert!(matches!(known.get("a/.zattrs"), Some(None)));
        assert!(known.get("b/zarr.json").is_none(), "past the last key: unknown");
        assert!(known.dir("a").is_some());
        assert!(known.dir("b").is_none() && known.dir("").is_none(), "a directory the listing stopped in is not known");
        // A write through the mount is known where the listing reached; a delete too.
        known.changed("a/.zattrs", Some(listed(7)));
        assert_eq!(known.get("a/.zattrs").and_then(|l| l).map(|l| l.size), Some(7));
        known.changed("a/zarr.json", None);
        assert!(matches!(known.get("a/zarr.json"), Some(None)));
        known.clear();
        assert!(known.get("a/.zattrs").is_none());
    }

    #[test]
    fn the_documents_kept_are_bounded() {
        let known = ListedKeys::new(Duration::from_secs(60));
        let names: Vec<String> = (0..40).map(|i| format!("n{i:02}/zarr.json")).collect();
        known.insert(String::new(), names.iter().map(|k| (k.clone(), listed(1 << 20))).collect(), true, known.started());
        for name in &names {
            known.changed(name, Some(Listed { bytes: Some(Bytes::from(vec![0u8; 1 << 20])), ..listed(1 << 20) }));
        }
        let kept = names.iter().filter(|n| known.get(n).and_then(|l| l).is_some_and(|l| l.bytes.is_some())).count();
        assert_eq!(kept, 32, "32 MiB of documents are kept, the rest only listed");
        assert_eq!(known.room(), 0);
        known.changed("n00/zarr.json", None);
        assert_eq!(known.room(), 1 << 20, "a document gone frees its room");
        let big = Listed { bytes: Some(Bytes::from(vec![0u8; (1 << 20) + 1])), ..listed(1) };
        known.changed("n00/zarr.json", Some(big));
        assert!(known.get("n00/zarr.json").and_then(|l| l).is_some_and(|l| l.bytes.is_none()), "a large document is not kept");
    }

    #[test]
    fn listings_that_ran_side_by_side_keep_only_what_fits_beside_each_other() {
        let known = ListedKeys::new(Duration::from_secs(60));
        let doc = || Listed { bytes: Some(Bytes::from(vec![0u8; 1 << 20])), ..listed(1 << 20) };
        // Both started with all the room, each fetched 20 MiB of documents.
        let (a, b) = (known.started(), known.started());
        known.insert("a/".into(), (0..20).map(|i| (format!("a/n{i:02}/zarr.json"), doc())).collect(), true, a);
        known.insert("b/".into(), (0..20).map(|i| (format!("b/n{i:02}/zarr.json"), doc())).collect(), true, b);
        assert_eq!(known.room(), 0);
        let kept = (0..20).filter(|i| known.get(&format!("b/n{i:02}/zarr.json")).and_then(|l| l).is_some_and(|l| l.bytes.is_some()));
        assert_eq!(kept.count(), 12, "the second keeps what fits beside the first");
        assert!(known.get("b/n19/zarr.json").and_then(|l| l).is_some_and(|l| l.size == 1 << 20), "the rest stays listed");
    }

    #[test]
    fn an_overlapping_listing_keeps_stored_bytes_over_a_consolidated_entry() {
        let known = ListedKeys::new(Duration::from_secs(60));
        let stored = Listed { bytes: Some(Bytes::from_static(b"stored")), ..listed(6) };
        let entry = Listed { bytes: Some(Bytes::from_static(b"entry")), consolidated: true, ..listed(6) };
        known.insert("a/".into(), [("a/b/zarr.json".to_string(), stored.clone())].into(), true, known.started());
        known.insert(String::new(), [("a/b/zarr.json".to_string(), entry.clone())].into(), true, known.started());
        let got = known.get("a/b/zarr.json").and_then(|l| l).unwrap();
        assert_eq!((got.bytes.as_deref(), got.consolidated), (Some(&b"stored"[..]), false));
        // The other way round: an entry is kept where nothing was fetched, and gives way to
        // bytes fetched since.
        let known = ListedKeys::new(Duration::from_secs(60));
        known.insert(String::new(), [("a/b/zarr.json".to_string(), entry)].into(), true, known.started());
        assert!(known.get("a/b/zarr.json").and_then(|l| l).unwrap().consolidated);
        known.changed("a/b/zarr.json", Some(stored));
        assert!(!known.get("a/b/zarr.json").and_then(|l| l).unwrap().consolidated);
    }

    #[test]
    fn the_nearest_consolidation_above_a_directory_answers_for_it_within_the_ttl() {
        let known = ListedKeys::new(Duration::from_millis(100));
        let c = |stored| {
            Arc::new(Consolidation::of(crate::zarr::consolidated::documents_of, ".zmetadata", br#"{"metadata":{}}"#, stored).unwrap())
        };
        known.keep_consolidation(String::new(), c(1));
        known.keep_consolidation("a/".into(), c(2));
        assert_eq!(known.consolidation_above("a/b/").map(|(p, c)| (p, c.stored)), Some(("a/".into(), 2)));
        assert_eq!(known.consolidation_above("b/").map(|(p, c)| (p, c.stored)), Some((String::new(), 1)));
        known.keep_consolidation("c/".into(), c(3));
        assert!(known.consolidation_above("b/").is_none(), "two are kept: the oldest went");
        std::thread::sleep(Duration::from_millis(120));
        assert!(known.consolidation_above("c/d/").is_none(), "gone after the TTL");
    }

    #[test]
    fn a_background_listing_answers_for_the_directories_beneath_it() {
        let known = ListedKeys::new(Duration::from_secs(60));
        assert!(known.start_background_listing("a/"));
        assert!(known.tried("a/") && known.get("a/b/zarr.json").is_none(), "tried, and answering for no key until kept");
        assert!(!known.start_background_listing("a/"), "listed already");
        assert!(!known.start_background_listing("a/b/"), "a directory beneath one being listed");
        assert!(known.start_background_listing("b/"));
        known.insert("a/".into(), keys(&["a/b/zarr.json"]), true, known.started());
        known.listed_in_background("a/");
        assert!(matches!(known.get("a/b/zarr.json"), Some(Some(_))) && known.start_background_listing("a/b/"));
    }

    #[test]
    fn changes_made_while_a_listing_ran_are_laid_over_it() {
        let known = ListedKeys::new(Duration::from_secs(60));
        let started = known.started();
        // The listing showed `a/c/0`, which the mount deleted meanwhile, and not `a/c/1`, which
        // it stored (a write-back beside a lookup's listing).
        known.changed("a/c/1", Some(listed(5)));
        known.changed("a/c/0", None);
        known.changed("b/c/0", Some(listed(6)));
        known.insert("a/".into(), keys(&["a/c/0", "a/zarr.json"]), true, started);
        assert_eq!(known.get("a/c/1").and_then(|l| l).map(|l| l.size), Some(5));
        assert!(matches!(known.get("a/c/0"), Some(None)));
        assert!(known.get("b/c/0").is_none(), "outside the listing: unknown still");
        let names = known.dir("a/c").unwrap().into_iter().map(|e| e.name).collect::<Vec<_>>();
        assert_eq!(names, ["1"]);
        // One started before a removal of many keys answers for none.
        let started = known.started();
        known.clear();
        known.insert("a/".into(), keys(&["a/c/0"]), true, started);
        assert!(known.get("a/c/0").is_none() && known.tried("a/"), "not kept, and not tried again within the TTL");
        // Nor one started before more changes than are remembered.
        let started = known.started();
        for i in 0..=CHANGES_KEPT {
            known.changed(&format!("x/c/{i}"), Some(listed(1)));
        }
        known.insert("x/".into(), keys(&["x/zarr.json"]), true, started);
        assert!(known.get("x/zarr.json").is_none());
        let started = known.started();
        known.insert("x/".into(), keys(&["x/zarr.json"]), true, started);
        assert!(matches!(known.get("x/zarr.json"), Some(Some(_))));
    }

    #[test]
    fn listings_are_forgotten_after_the_ttl() {
        let known = ListedKeys::new(Duration::from_millis(50));
        known.insert(String::new(), keys(&["zarr.json"]), true, known.started());
        assert!(known.get("zarr.json").is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert!(known.get("zarr.json").is_none() && known.dir("").is_none());
        assert!(!ListedKeys::new(Duration::ZERO).enabled());
    }
}
