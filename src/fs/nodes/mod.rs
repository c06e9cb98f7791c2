//! The tree the mount shows: what each directory of the store is (a group, an array, or a
//! node that cannot be served, and why), found lazily on lookup and readdir and kept, checked
//! again after the metadata TTL, moved and forgotten as the tree changes; what others may do with
//! it (its grant). It knows nothing of handles or of how `data` reads. The names each directory
//! shows are `entries`; the views made from its nodes, `views`; what is changed by hand in its
//! files before the store holds it, `edits`.

mod edits;
mod entries;
mod views;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::context::Context;
use super::grant::Grant;
use super::open::OpenArray;
use super::scratch::ScratchFiles;
use super::tree;
use super::view::DataFile;
use crate::error::lock;
use crate::headers::GroupView;
use crate::store::{self, Version};
use crate::zarr::array::Array;
use crate::zarr::metadata::{Attributes, NodeMetadata, ZarrFormat};
use crate::zarr::node::{NODE_DOCUMENTS, display_path, read_node};
use crate::zarr::ome::Image;
use crate::{Error, Result};

pub use edits::DocumentEdit;
pub use entries::{DirEntry, FileKind};
use views::{MadeGeoreference, MadeGroupFile};

/// What a directory is.
#[derive(Clone)]
pub enum DirState {
    Group(GroupInfo),
    Array(DataFile),
    /// A node that cannot be served, and why.
    Broken(Arc<str>),
}

/// What a group's attributes say that the mount shows: the OME-NGFF image it is, if any.
#[derive(Clone, Default)]
pub struct GroupInfo {
    pub image: Option<Arc<std::result::Result<Image, String>>>,
}

impl GroupInfo {
    fn new(attributes: &serde_json::Value) -> GroupInfo {
        GroupInfo { image: crate::zarr::ome::find(attributes).map(Arc::new) }
    }

    /// Whether the group may have `view`, as its attributes say (its arrays decide).
    fn may_show(&self, view: GroupView) -> bool {
        match view {
            GroupView::OmeTiff => self.image.is_some(),
            GroupView::NetCdf => true,
        }
    }
}

/// A directory as last read, and when: its node document's version and the time it was
/// checked against the store; what others may do with it.
struct Known {
    state: DirState,
    version: Option<VersionDigest>,
    checked: Checked,
    grant: Grant,
}

/// A node document's version as a directory's state keeps it, in 8 bytes instead of 40: a walk
/// keeps one for every directory, and it is only compared (two versions share a digest once in
/// 2^64; the other writer's change is then taken in at its next change).
#[derive(Clone, Copy, PartialEq, Eq)]
struct VersionDigest(std::num::NonZeroU64);

impl VersionDigest {
    fn of(version: Version) -> VersionDigest {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        version.0.hash(&mut hasher);
        VersionDigest(std::num::NonZeroU64::new(hasher.finish()).unwrap_or(std::num::NonZeroU64::MIN))
    }
}

/// When a directory was last checked: nanoseconds since the first check (an `Instant` in half
/// its room: a walk keeps one for every directory).
#[derive(Clone, Copy)]
struct Checked(u64);

static FIRST_CHECK: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

impl Checked {
    fn now() -> Checked {
        Checked(FIRST_CHECK.get_or_init(Instant::now).elapsed().as_nanos() as u64)
    }

    fn elapsed(self) -> std::time::Duration {
        std::time::Duration::from_nanos(Checked::now().0.saturating_sub(self.0))
    }
}

/// The directories seen so far, by store path; the files unlinked from them; the scratch
/// files made in them; the documents being rewritten.
#[derive(Default)]
pub struct Nodes {
    dirs: Mutex<HashMap<Box<str>, Known>>,
    /// A node's own files (`data`, its documents, its views) unlinked, by directory: `rm -r`
    /// unlinks them before it removes the directory. They are hidden, and the store is changed
    /// only when the directory itself is removed (`rmdir`), so that a lone `rm` loses nothing.
    detached: Mutex<HashMap<String, HashSet<String>>>,
    pub scratch: ScratchFiles,
    /// Documents open for rewriting, by key: their size as the writer sees it.
    edits: Mutex<HashMap<String, Arc<Mutex<DocumentEdit>>>>,
    /// Why the last document written into a directory was refused, shown as its `error` until
    /// a document there is stored (or `error` is removed).
    refusals: Mutex<HashMap<String, Arc<str>>>,
    /// The layout (`layout_of`) each process last read in an array's document, by (pid, key):
    /// what a rewrite of the document by that process changes is told from it (`layout_edit`).
    reads: Mutex<Option<lru::LruCache<(u32, String), serde_json::Value>>>,
    /// Group views made, by group and view, with when they were made.
    group_files: Mutex<Option<lru::LruCache<(String, GroupView), MadeGroupFile>>>,
    /// Arrays' georeferences, by path.
    georeferences: Mutex<Option<lru::LruCache<String, MadeGeoreference>>>,
    /// Nodes being loaded, by path: a second asker waits for the first.
    loading: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// The store's history (`.zarrfs/snapshots`), newest first, and when it was read.
    history: Mutex<Option<(Instant, Arc<[String]>)>>,
    /// Attribute text loads took in since the arrays' attributes were last counted.
    attributes_taken: std::sync::atomic::AtomicU64,
}

/// The attribute text an array holds.
fn attribute_bytes(file: &DataFile) -> u64 {
    file.array.array().meta.document.attributes().map_or(0, Attributes::text_len)
}

/// The version of the node document at `path` (the first of `NODE_DOCUMENTS` there).
fn node_version(cx: &Context, path: &str) -> Result<Option<Version>> {
    for name in NODE_DOCUMENTS {
        match cx.store.head(&store::join(path, name)) {
            Ok(Some(head)) => return Ok(Some(head.version)),
            Ok(None) => {}
            // A document refused (a link out of the store, a FIFO): the node's `error` says
            // why once it is parsed; there is no version to watch.
            Err(Error::Io(e)) => return Err(Error::Io(e)),
            Err(_) => return Ok(None),
        }
    }
    Ok(None)
}

impl Nodes {
    /// What the directory at `path` is. Parsed once and kept: the first to parse it wins, so an
    /// array is served by one `OpenArray` however many lookups race for it. After the metadata
    /// TTL the node document's version is checked, and a change another writer made is taken in
    /// (an array with changes of its own not yet stored keeps what it has).
    pub fn dir_state(&self, cx: &Context, path: &str) -> Result<DirState> {
        let known = lock(&self.dirs).get(path).map(|k| (k.state.clone(), k.version, k.checked));
        match known {
            Some((state, _, checked)) if checked.elapsed() < cx.config.metadata_ttl => Ok(state),
            Some((state, version, _)) => self.recheck(cx, path, state, version),
            None => {
                // One load per node at a time: the kernel asks for a new directory from several
                // threads at once, and each would read (and hold, while parsing) its document.
                let gate = lock(&self.loading).entry(path.to_string()).or_default().clone();
                let _loading = lock(&gate);
                if let Some(known) = lock(&self.dirs).get(path) {
                    return Ok(known.state.clone());
                }
                let loaded = Self::load(cx, path)
                    .and_then(|(state, version)| Ok((state, version, Grant::of(cx.store.as_ref(), cx.config.shared, path)?)));
                crate::zarr::node::release_parsed_memory();
                lock(&self.loading).remove(path);
                let (state, version, grant) = loaded?;
                let mut dirs = lock(&self.dirs);
                let known = dirs.entry(path.into()).or_insert(Known {
                    state,
                    version: version.map(VersionDigest::of),
                    checked: Checked::now(),
                    grant,
                });
                if let DirState::Array(file) = &known.state
                    && cx.config.shared
                {
                    file.array.admit(known.grant);
                }
                let state = known.state.clone();
                drop(dirs);
                if let DirState::Array(file) = &state {
                    self.bound_attributes(cx.config.cache_size as u64 / 4, attribute_bytes(file));
                }
                Ok(state)
            }
        }
    }

    /// Keep the attribute text the known arrays hold under `budget` (a quarter of the chunk
    /// cache's): past it, forget the arrays checked longest ago that no file holds and no change
    /// waits for; they are read again when next asked for. Counted only once loads took in a
    /// quarter of the budget since the last count, so a walk pays for it now and then.
    fn bound_attributes(&self, budget: u64, taken: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        if taken == 0 || self.attributes_taken.fetch_add(taken, Relaxed) + taken < budget / 4 {
            return;
        }
        self.attributes_taken.store(0, Relaxed);
        let mut dirs = lock(&self.dirs);
        let mut held: Vec<(u64, u64, Box<str>)> = dirs
            .iter()
            .filter_map(|(path, k)| match &k.state {
                DirState::Array(file) => Some((k.checked.0, attribute_bytes(file), path.clone())),
                _ => None,
            })
            .filter(|&(_, bytes, _)| bytes > 0)
            .collect();
        let mut total: u64 = held.iter().map(|h| h.1).sum();
        if total <= budget {
            return;
        }
        held.sort_unstable_by_key(|h| h.0);
        let mut forgotten = 0;
        for (_, bytes, path) in held {
            if total <= budget {
                break;
            }
            let unused = match dirs.get(&path).map(|k| &k.state) {
                Some(DirState::Array(file)) => Arc::strong_count(&file.array) == 1 && !file.array.is_dirty(),
                _ => false,
            };
            if unused {
                dirs.remove(&path);
                total -= bytes;
                forgotten += 1;
            }
        }
        drop(dirs);
        if forgotten > 0 {
            tracing::debug!(forgotten, held = total, budget, "arrays' attributes past their budget forgotten");
            crate::heap::give_back();
        }
    }

    /// The attribute text the known arrays hold (`.zarrfs/stats`).
    pub fn attribute_bytes(&self) -> u64 {
        lock(&self.dirs)
            .values()
            .filter_map(|k| match &k.state {
                DirState::Array(file) => Some(attribute_bytes(file)),
                _ => None,
            })
            .sum()
    }

    /// What others may do with the node at `path` and its files.
    pub fn grant(&self, cx: &Context, path: &str) -> Result<Grant> {
        if !cx.config.shared {
            return Ok(Grant::OPEN);
        }
        self.dir_state(cx, path)?;
        Ok(lock(&self.dirs).get(path).map_or(Grant { dir: 0, file: 0 }, |k| k.grant))
    }

    /// Parse the node at `path`; with the version of the document parsed (none for a node that
    /// cannot be served).
    fn load(cx: &Context, path: &str) -> Result<(DirState, Option<Version>)> {
        // A directory without a node document is none, link or not: asked first, as it is what
        // most asks for a name that is no node (a view's coordinate arrays, a mistyped path) find.
        let read = read_node(cx.store.as_ref(), path);
        if !matches!(read, Ok(None))
            && let Some(why) = cx.store.dir_link(path)?
        {
            tracing::warn!(node = %display_path(path), "cannot serve node: {why}");
            return Ok((DirState::Broken(Arc::from(format!("{why}\n"))), None));
        }
        Ok(match read {
            Ok(Some((NodeMetadata::Group(attributes), version))) => {
                (DirState::Group(GroupInfo::new(&attributes.to_value())), Some(version))
            }
            Ok(Some((NodeMetadata::Array(meta), version))) => {
                let array = Array::new(cx.store.clone(), path, *meta);
                array.set_stored_version(Some(version));
                (
                    DirState::Array(DataFile::new(OpenArray::new(
                        cx.next_id(),
                        array,
                        cx.budget.clone(),
                        cx.cache.clone(),
                        cx.config.lossy_writes,
                    ))),
                    Some(version),
                )
            }
            Ok(None) => return Err(Error::NotFound),
            Err(Error::Io(e)) => return Err(Error::Io(e)),
            Err(e) => {
                tracing::warn!(node = %display_path(path), "cannot serve node: {e}");
                (DirState::Broken(Arc::from(format!("{e}\n"))), None)
            }
        })
    }

    /// Check a directory whose TTL ran out against the store.
    fn recheck(&self, cx: &Context, path: &str, state: DirState, version: Option<VersionDigest>) -> Result<DirState> {
        let now = node_version(cx, path)?;
        let (state, version) = match &state {
            _ if now.map(VersionDigest::of) == version => (state, now),
            DirState::Array(file) => {
                // Writes wait while the array takes the new metadata; one with changes of its
                // own keeps serving them, unread (its flush will meet the other writer's change).
                let _writer = file.array.writer();
                if file.array.is_dirty() {
                    return self.checked(path, state.clone(), version);
                }
                let current = file.array.array();
                match read_node(cx.store.as_ref(), path) {
                    Ok(Some((NodeMetadata::Array(meta), read))) if meta.document == current.meta.document => {
                        current.set_stored_version(Some(read));
                        (state.clone(), Some(read))
                    }
                    Ok(Some((NodeMetadata::Array(meta), read))) => {
                        tracing::info!(node = %display_path(path), "metadata changed in the store; serving the new version");
                        let array = Array::new(cx.store.clone(), path, *meta);
                        array.set_stored_version(Some(read));
                        // A new cache id: chunks cached under the old metadata are not served.
                        file.array.replace(Arc::new(array), cx.next_id());
                        *lock(&file.array.text) = None;
                        cx.invalidate_data(&file.array);
                        (state.clone(), Some(read))
                    }
                    _ => self.load_or_forget(cx, path)?,
                }
            }
            _ => self.load_or_forget(cx, path)?,
        };
        self.checked(path, state, version.map(VersionDigest::of))
    }

    /// Note that the directory at `path` was checked now and is `state` at `version`.
    fn checked(&self, path: &str, state: DirState, version: Option<VersionDigest>) -> Result<DirState> {
        if let Some(known) = lock(&self.dirs).get_mut(path) {
            known.state = state.clone();
            known.version = version;
            known.checked = Checked::now();
        }
        Ok(state)
    }

    /// The node at `path` parsed again; one that is gone is forgotten.
    fn load_or_forget(&self, cx: &Context, path: &str) -> Result<(DirState, Option<Version>)> {
        Self::load(cx, path).inspect_err(|e| {
            if matches!(e, Error::NotFound) {
                lock(&self.dirs).remove(path);
            }
        })
    }

    /// A document of the node at `path` holding its attributes was stored through the mount:
    /// what the mount shows from them is made again (a group's image, a v2 array's axis names,
    /// in `.zattrs`), and the kernel's pages of the views made from them are dropped.
    pub fn attributes_changed(&self, cx: &Context, path: &str) -> Result<()> {
        match self.dir_state(cx, path)? {
            DirState::Group(_) => {
                let (state, version) = Self::load(cx, path)?;
                self.checked(path, state, version.map(VersionDigest::of))?;
            }
            DirState::Array(file) => {
                let _writer = file.array.writer();
                let array = file.array.array();
                if array.meta.format == ZarrFormat::V2 {
                    let attributes = crate::zarr::node::v2_attributes(cx.store.as_ref(), path)?;
                    let names = crate::zarr::node::v2_dimension_names(&attributes, array.meta.shape.len());
                    if names != array.meta.dimension_names {
                        file.array.replace(Arc::new(array.with_dimension_names(names)?), file.array.cache_id());
                    }
                }
            }
            DirState::Broken(_) => {}
        }
        self.drop_group_files(path);
        cx.invalidate_group_views(path);
        cx.invalidate_group_view_names(path);
        for array in self.arrays_beneath(path) {
            cx.invalidate_data(&array);
        }
        Ok(())
    }

    /// The `data` file of the array at `path`.
    pub fn data_file(&self, cx: &Context, path: &str) -> Result<DataFile> {
        match self.dir_state(cx, path)? {
            DirState::Array(file) => Ok(file),
            _ => Err(Error::NotFound),
        }
    }

    /// The arrays opened so far.
    pub fn open_arrays(&self) -> Vec<Arc<OpenArray>> {
        lock(&self.dirs)
            .values()
            .filter_map(|d| match &d.state {
                DirState::Array(file) => Some(file.array.clone()),
                _ => None,
            })
            .collect()
    }

    /// The node at `old` moved to `new`: arrays open beneath it are served at their new
    /// paths (their open files follow them), by the same `OpenArray`s.
    pub fn moved(&self, old: &str, new: &str) {
        let lead = format!("{old}/");
        let mut dirs = lock(&self.dirs);
        let moving: Vec<Box<str>> = dirs.keys().filter(|p| &***p == old || p.starts_with(&lead)).cloned().collect();
        for from in moving {
            let Some(mut known) = dirs.remove(&from) else { continue };
            let to = format!("{new}{}", &from[old.len()..]);
            if let DirState::Array(file) = &known.state {
                match file.array.array().moved_to(&to) {
                    Ok(moved) => file.array.replace(Arc::new(moved), file.array.cache_id()),
                    Err(_) => continue,
                }
            }
            known.checked = Checked::now();
            dirs.insert(to.into(), known);
        }
        drop(dirs);
        lock(&self.detached).retain(|p, _| p != old && !p.starts_with(&lead));
        lock(&self.refusals).retain(|p, _| p != old && !p.starts_with(&lead));
        self.scratch.remove_beneath(old);
        self.drop_group_files(old);
        self.drop_group_files(new);
    }

    /// Forget what is known of the directory at `path` and beneath it: it was removed, moved,
    /// or became another kind of node, and is read again from the store when next asked for.
    pub fn forget(&self, path: &str) {
        let lead = format!("{path}/");
        let beneath = |p: &str| p == path || p.starts_with(&lead);
        lock(&self.dirs).retain(|p, _| !beneath(p));
        lock(&self.detached).retain(|p, _| !beneath(p));
        lock(&self.refusals).retain(|p, _| !beneath(p));
        self.scratch.remove_beneath(path);
        // The group it is in lists other arrays now.
        self.drop_group_files(path.rsplit_once('/').map_or("", |(parent, _)| parent));
    }

    /// The directory at `path` left the inode table: forget it, unless it is an array with
    /// changes not yet stored or files `held` open (its `OpenArray` must stay the one served).
    pub fn release_dir(&self, path: &str, held: impl Fn(&Arc<OpenArray>) -> bool) {
        let mut dirs = lock(&self.dirs);
        let keep = match dirs.get(path).map(|k| &k.state) {
            Some(DirState::Array(file)) => file.array.is_dirty() || held(&file.array),
            _ => false,
        };
        if !keep {
            dirs.remove(path);
            tree::shrink_if_sparse(&mut dirs);
        }
    }

    /// The arrays opened at or beneath `path`.
    pub fn arrays_beneath(&self, path: &str) -> Vec<Arc<OpenArray>> {
        let lead = format!("{path}/");
        lock(&self.dirs)
            .iter()
            .filter(|(p, _)| &***p == path || p.starts_with(&lead))
            .filter_map(|(_, d)| match &d.state {
                DirState::Array(file) => Some(file.array.clone()),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A walk keeps a directory's state for every directory it met: what one costs is held to
    /// what the memory goal allows (docs/performance.md, "Walks").
    #[test]
    fn a_directorys_state_fits_in_a_cache_line() {
        assert!(std::mem::size_of::<Known>() <= 64, "Known is {} bytes", std::mem::size_of::<Known>());
    }

    #[test]
    fn a_version_digest_tells_versions_apart() {
        let version = |mtime| VersionDigest::of(Version([1, 2, 3, mtime, 0]));
        assert!(version(10) == version(10));
        assert!(version(10) != version(11));
        assert!(VersionDigest::of(Version([1, 2, 3, 10, 0])) != VersionDigest::of(Version([1, 2, 4, 10, 0])));
    }
}
