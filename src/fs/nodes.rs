//! The tree the mount shows: what each directory of the store is (a group, an array, or a
//! node that cannot be served, and why), found lazily on lookup and readdir and kept; the files
//! each directory holds; the metadata documents as shown. It knows nothing of handles or of how
//! `data` reads.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::context::{CONTROL_DIR, Context, DATA, ERROR, ERRORS, PREPEND, SNAPSHOTS, STATS};
use super::grant::Grant;
use super::open::OpenArray;
use super::scratch::ScratchFiles;
use super::tree::{self, Node, NodeKind};
use super::view::DataFile;
use super::view::group::GroupFile;
use crate::error::lock;
use crate::headers::{GroupView, HeaderFormat, Layout};
use crate::limits::MAX_DOCUMENT_BYTES;
use crate::store::{self, ByteRange, Version};
use crate::zarr::array::Array;
use crate::zarr::axes::Axes;
use crate::zarr::geo::Georeference;
use crate::zarr::metadata::{Attributes, NodeMetadata, ZarrFormat, render_like};
use crate::zarr::node::{METADATA_DOCUMENTS, NODE_DOCUMENTS, display_path, is_hidden, is_node, read_node};
use crate::zarr::ome::Image;
use crate::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Directory,
    RegularFile,
}

#[derive(Clone, Debug)]
pub struct DirEntry {
    pub ino: u64,
    pub kind: FileKind,
    pub name: String,
}

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

/// A metadata document being rewritten through a handle: what it will hold at close (held in
/// memory, counted with the scratch files).
pub struct DocumentEdit {
    pub bytes: super::scratch::HeldBytes,
    /// Written to (or truncated) since opened or last stored.
    pub dirty: bool,
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

/// A group view (or why there is none), and when it was made.
/// A group view made (or why there is none), when, and at which count of layout changes.
type MadeGroupFile = (std::result::Result<Arc<GroupFile>, String>, Instant, u64);

/// An array's georeference, the arrays (and their metadata) it was made from, and when.
#[derive(Clone)]
struct MadeGeoreference {
    geo: Option<Arc<Georeference>>,
    from: Vec<(DataFile, Arc<crate::zarr::array::Array>)>,
    at: Instant,
}

/// The arrays of a group, as `zarr::geo` asks for them: through the mount's nodes and cache;
/// each array used is noted, so that a change of its metadata makes the georeference again.
struct NodeSiblings<'a> {
    nodes: &'a Nodes,
    cx: &'a Context,
    parent: String,
    used: Vec<(DataFile, Arc<crate::zarr::array::Array>)>,
}

impl NodeSiblings<'_> {
    fn file(&mut self, name: &str) -> Option<DataFile> {
        let file = match self.nodes.dir_state(self.cx, &store::join(&self.parent, name)) {
            Ok(DirState::Array(file)) => file,
            _ => return None,
        };
        if !self.used.iter().any(|(f, _)| Arc::ptr_eq(&f.array, &file.array)) {
            self.used.push((file.clone(), file.array.array()));
        }
        Some(file)
    }
}

impl crate::zarr::geo::Siblings for NodeSiblings<'_> {
    fn meta(&mut self, name: &str) -> Option<(Vec<u64>, serde_json::Value)> {
        let file = self.file(name)?;
        let array = file.array.array();
        let attributes = self.nodes.attributes_of(self.cx, &store::join(&self.parent, name), &array).ok()?;
        Some((array.meta.shape.clone(), attributes))
    }

    fn values(&mut self, name: &str) -> Option<Vec<f64>> {
        let file = self.file(name)?;
        let array = file.array.array();
        let (len, mut bytes) = (array.meta.byte_len(), Vec::new());
        while (bytes.len() as u64) < len {
            let want = (len - bytes.len() as u64).min(1 << 20) as u32;
            let chunk = file.view.read(self.cx, &file.array, None, bytes.len() as u64, want).ok()?;
            if chunk.is_empty() {
                break;
            }
            bytes.extend(chunk);
        }
        bytes.truncate(len as usize);
        crate::zarr::geo::values_of(&bytes, &array.meta.dtype)
    }
}

/// A group of more children than this shows no `dataset.nc` (it would read every one's metadata
/// to list the group).
const MOST_DATASET_CHILDREN: usize = 1000;

/// How many group views are kept made.
const GROUP_FILES_KEPT: std::num::NonZeroUsize = std::num::NonZeroUsize::new(1024).unwrap();

/// How many of a listing's children one thread checks at least: fewer are not worth a thread.
const CHECKS_PER_THREAD: usize = 512;

/// How many (process, document) reads are remembered.
const READS_REMEMBERED: std::num::NonZeroUsize = std::num::NonZeroUsize::new(4096).unwrap();

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
                (DirState::Array(DataFile::new(OpenArray::new(cx.next_id(), array, cx.budget.clone(), cx.cache.clone()))), Some(version))
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

    /// What is known of the axes of the array at `path`: where it is a level of the image its
    /// parent group is, the image's axes with that level's steps; else its own axis names.
    pub fn axes(&self, cx: &Context, path: &str, file: &DataFile) -> Result<Axes> {
        let array = file.array.array();
        let ndim = array.meta.shape.len();
        if let Some((parent, name)) = path.rsplit_once('/').or(if path.is_empty() { None } else { Some(("", path)) })
            && let DirState::Group(info) = self.dir_state(cx, parent)?
            && let Some(Ok(image)) = info.image.as_deref()
            && let Some(level) = image.level_of(name)
            && image.axes.len() == ndim
        {
            return Ok(image.level_axes(level));
        }
        Ok(Axes::named(array.meta.dimension_names.as_deref(), ndim))
    }

    /// The own bytes of the array at `path`'s `format` view, when the mount shows that view
    /// and the format can express the array; else why not.
    pub fn view_layout(
        &self,
        cx: &Context,
        path: &str,
        file: &DataFile,
        format: HeaderFormat,
    ) -> Result<std::result::Result<Layout, String>> {
        if !cx.config.views.arrays.contains(&format) {
            return Ok(Err(format!("{} views are off (--views)", format.option_name())));
        }
        let geo = match format {
            HeaderFormat::Tiff | HeaderFormat::Envi | HeaderFormat::Vrt => self.georeference(cx, path, file),
            _ => None,
        };
        Ok(file.layout(format, &self.axes(cx, path, file)?, geo.as_deref()))
    }

    /// Where the raster of the array at `path` lies, when its metadata says (`zarr::geo`).
    /// Made once and kept while the arrays it was made from are unchanged (and for the
    /// metadata TTL, for their attributes). Coordinates that cannot be read leave it unknown.
    pub fn georeference(&self, cx: &Context, path: &str, file: &DataFile) -> Option<Arc<Georeference>> {
        if let Some(made) = lock(&self.georeferences).as_mut().and_then(|c| c.get(path).cloned())
            && made.at.elapsed() < cx.config.metadata_ttl
            && made.from.iter().all(|(f, a)| Arc::ptr_eq(&f.array.array(), a))
        {
            return made.geo;
        }
        let at = Instant::now();
        let array = file.array.array();
        let names = array.meta.dimension_names.clone().unwrap_or_default();
        let attributes = self.attributes_of(cx, path, &array).unwrap_or_default();
        let fill = (array.meta.format == ZarrFormat::V2).then(|| array.meta.document.get("fill_value")).flatten();
        let parent = path.rsplit_once('/').map_or("", |(p, _)| p).to_string();
        let mut siblings = NodeSiblings { nodes: self, cx, parent, used: vec![(file.clone(), array.clone())] };
        let geo = if path.is_empty() {
            None
        } else {
            let nodata = crate::zarr::geo::nodata(&attributes, fill);
            crate::zarr::geo::georeference(&names, &array.meta.shape, &attributes, nodata, &mut siblings).map(Arc::new)
        };
        let made = MadeGeoreference { geo: geo.clone(), from: siblings.used, at };
        lock(&self.georeferences).get_or_insert_with(|| lru::LruCache::new(GROUP_FILES_KEPT)).put(path.to_string(), made);
        geo
    }

    /// An array's attributes as the views read them: in its document (v3), or its `.zattrs` (v2).
    fn attributes_of(&self, cx: &Context, path: &str, array: &crate::zarr::array::Array) -> Result<serde_json::Value> {
        match array.meta.format {
            ZarrFormat::V3 => Ok(array.meta.document.attributes().map(Attributes::for_views).unwrap_or_default()),
            ZarrFormat::V2 => Ok(crate::zarr::node::v2_attributes(cx.store.as_ref(), path)?.for_views()),
        }
    }

    /// The image the group at `path` is, as its attributes say (`None`: it is none).
    pub fn image_of(&self, cx: &Context, path: &str) -> Result<Option<Arc<std::result::Result<Image, String>>>> {
        Ok(match self.dir_state(cx, path)? {
            DirState::Group(info) => info.image,
            _ => None,
        })
    }

    /// The `view` file of the group at `path` as its arrays are now, or why there is none. Made
    /// once and kept while its arrays' metadata is what it was made from (and for the metadata
    /// TTL, for what the group's attributes say).
    pub fn group_file(&self, cx: &Context, path: &str, view: GroupView) -> Result<std::result::Result<Arc<GroupFile>, String>> {
        self.group_file_listed(cx, path, view, None)
    }

    /// `group_file`, with the group's listing when the caller holds it (not listed again).
    fn group_file_listed(
        &self,
        cx: &Context,
        path: &str,
        view: GroupView,
        listing: Option<&[store::Entry]>,
    ) -> Result<std::result::Result<Arc<GroupFile>, String>> {
        if !cx.config.views.groups.contains(&view) {
            return Ok(Err(format!("{} views are off (--views)", view.option_name())));
        }
        let key = (path.to_string(), view);
        // Why there is none is kept too: asking again re-reads the group's attributes.
        // Why there is none holds only while no array took a new layout (a growth may end a clash).
        if let Some((made, at, layouts)) = lock(&self.group_files).as_mut().and_then(|c| c.get(&key).cloned())
            && at.elapsed() < cx.config.metadata_ttl
            && made.as_ref().map_or(layouts == super::open::layout_changes(), |f| f.is_current())
        {
            return Ok(made);
        }
        let (at, layouts) = (Instant::now(), super::open::layout_changes());
        let made = match view {
            GroupView::OmeTiff => self.build_image(cx, path)?,
            GroupView::NetCdf => self.build_dataset(cx, path, listing)?,
        }
        .map(Arc::new);
        crate::zarr::node::release_parsed_memory();
        lock(&self.group_files).get_or_insert_with(|| lru::LruCache::new(GROUP_FILES_KEPT)).put(key, (made.clone(), at, layouts));
        Ok(made)
    }

    fn build_image(&self, cx: &Context, path: &str) -> Result<std::result::Result<GroupFile, String>> {
        let image = match self.image_of(cx, path)?.as_deref() {
            Some(Ok(image)) => image.clone(),
            Some(Err(why)) => return Ok(Err(why.clone())),
            None => return Ok(Err("its attributes hold no OME-NGFF multiscales".into())),
        };
        let name = image.name.clone().unwrap_or_else(|| path.rsplit('/').next().unwrap_or("").to_string());
        super::view::image::build(&name, &image, |level| self.data_file(cx, &store::join(path, level)))
    }

    /// The `dataset.nc` of the group at `path`: its child arrays, its attributes as global ones.
    fn build_dataset(&self, cx: &Context, path: &str, listing: Option<&[store::Entry]>) -> Result<std::result::Result<GroupFile, String>> {
        let store = cx.store.as_ref();
        let listed;
        let listing = match listing {
            Some(listing) => listing,
            None => {
                listed = store.list_dir(path)?;
                &listed
            }
        };
        let children: Vec<&str> = listing.iter().filter(|e| e.is_dir && !is_hidden(&e.name)).map(|e| e.name.as_str()).collect();
        if children.len() > MOST_DATASET_CHILDREN {
            return Ok(Err(format!("more than {MOST_DATASET_CHILDREN} children: a netCDF view of it is not made")));
        }
        let mut members = Vec::new();
        for name in children {
            let child = store::join(path, name);
            let file = match self.dir_state(cx, &child) {
                Ok(DirState::Array(file)) => file,
                Err(Error::Io(e)) => return Err(Error::Io(e)),
                _ => continue,
            };
            let attributes = self.attributes_of(cx, &child, &file.array.array())?;
            members.push(super::view::dataset::Member { name: name.to_string(), file, attributes });
        }
        // The group's own attributes (its global ones) are read only for a group of arrays.
        if members.is_empty() {
            return Ok(Err(crate::headers::netcdf::NO_DATASET.into()));
        }
        let attributes = match crate::zarr::node::read_node(store, path)? {
            Some((NodeMetadata::Group(attributes), _)) => attributes.for_views(),
            _ => return Ok(Err("not a group".into())),
        };
        Ok(super::view::dataset::build(cx, &attributes, members))
    }

    /// Drop the group files made for `path` and beneath (it changed, moved or went).
    fn drop_group_files(&self, path: &str) {
        let lead = format!("{path}/");
        if let Some(cache) = lock(&self.group_files).as_mut() {
            let stale: Vec<(String, GroupView)> =
                cache.iter().map(|(k, _)| k.clone()).filter(|(p, _)| p == path || p.starts_with(&lead) || path.is_empty()).collect();
            for k in stale {
                cache.pop(&k);
            }
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

    fn dir_node(cx: &Context, ino: u64) -> Result<Arc<Node>> {
        let node = cx.tree.get(ino).ok_or(Error::NotFound)?;
        if !matches!(node.kind, NodeKind::Dir | NodeKind::ControlDir | NodeKind::SnapshotsDir) {
            return Err(Error::NotADirectory);
        }
        Ok(node)
    }

    /// The inode of `name` in the directory `parent`.
    pub fn lookup(&self, cx: &Context, parent: u64, name: &str) -> Result<u64> {
        let dir = Self::dir_node(cx, parent)?;
        match (dir.kind, name) {
            (NodeKind::ControlDir, STATS) => return Ok(cx.tree.child(parent, name, NodeKind::StatsFile, String::new())),
            (NodeKind::ControlDir, ERRORS) => return Ok(cx.tree.child(parent, name, NodeKind::ErrorsFile, String::new())),
            (NodeKind::ControlDir, SNAPSHOTS) if cx.config.snapshots => {
                return Ok(cx.tree.child(parent, name, NodeKind::SnapshotsDir, String::new()));
            }
            (NodeKind::ControlDir, _) => return Err(Error::NotFound),
            (NodeKind::SnapshotsDir, id) if self.history(cx)?.iter().any(|s| s.as_str() == id) => {
                return Ok(cx.tree.child(parent, name, NodeKind::SnapshotDir, id.to_string()));
            }
            (NodeKind::SnapshotsDir, _) => return Err(Error::NotFound),
            (_, CONTROL_DIR) if parent == tree::ROOT && cx.config.control_dir => {
                return Ok(cx.tree.child(parent, name, NodeKind::ControlDir, String::new()));
            }
            _ => {}
        }
        let key = store::join(&dir.path, name);
        if self.is_detached(&dir.path, name) {
            return Err(Error::NotFound);
        }
        if self.scratch.get(&key).is_some() {
            return Ok(cx.tree.child(parent, name, NodeKind::Scratch, key));
        }
        let state = self.dir_state(cx, &dir.path)?;
        // An array's documents are numbered before its other files: tools that copy a directory
        // in inode order (`mv` between file systems, `cp -r`) then copy the document, which is
        // what makes a new directory an array, before `data`.
        if let DirState::Array(file) = &state
            && !METADATA_DOCUMENTS.contains(&name)
        {
            let array = file.array.array();
            let v2_attributes = (array.meta.format == ZarrFormat::V2).then_some(".zattrs");
            for doc in std::iter::once(array.meta.document_name()).chain(v2_attributes) {
                cx.tree.child(parent, doc, NodeKind::MetaFile, store::join(&dir.path, doc));
            }
        }
        let view = match (&state, HeaderFormat::by_file_name(name)) {
            (DirState::Array(file), Some(f)) if self.view_layout(cx, &dir.path, file, f)?.is_ok() => Some(f),
            _ => None,
        };
        let group_view = match (&state, GroupView::by_file_name(name)) {
            (DirState::Group(info), Some(v)) if info.may_show(v) && self.group_file(cx, &dir.path, v)?.is_ok() => Some(v),
            _ => None,
        };
        let kind = match (name, &state, view) {
            (DATA, DirState::Array(_), _) => NodeKind::Data,
            (PREPEND, DirState::Array(_), _) => NodeKind::Prepend,
            (ERROR, DirState::Broken(_), _) => NodeKind::ErrorFile,
            (ERROR, DirState::Array(file), _) if file.check_writable().is_err() => NodeKind::ErrorFile,
            (ERROR, _, _) if lock(&self.refusals).contains_key(&dir.path) => NodeKind::ErrorFile,
            (_, _, Some(format)) => NodeKind::View(format),
            (_, _, _) if let Some(v) = group_view => NodeKind::GroupView(v),
            (n, _, _) if METADATA_DOCUMENTS.contains(&n) => {
                if !self.is_edited(&key) && cx.store.get_range(&key, ByteRange::Range { start: 0, len: 0 })?.is_none() {
                    return Err(Error::NotFound);
                }
                NodeKind::MetaFile
            }
            // The child's metadata is read (and kept) now: it is what is asked for next.
            (n, DirState::Group(_), _) if !is_hidden(n) => {
                self.dir_state(cx, &key)?;
                NodeKind::Dir
            }
            _ => return Err(Error::NotFound),
        };
        let path = match kind {
            NodeKind::Dir | NodeKind::MetaFile => key,
            _ => dir.path.clone(),
        };
        Ok(cx.tree.child(parent, name, kind, path))
    }

    /// The entries of a directory (without `.` and `..`).
    pub fn readdir(&self, cx: &Context, ino: u64) -> Result<Vec<DirEntry>> {
        let dir = Self::dir_node(cx, ino)?;
        if dir.kind == NodeKind::ControlDir {
            let entry = |name: &str, kind, file_kind| DirEntry {
                ino: cx.tree.child(ino, name, kind, String::new()),
                kind: file_kind,
                name: name.into(),
            };
            let mut out =
                vec![entry(STATS, NodeKind::StatsFile, FileKind::RegularFile), entry(ERRORS, NodeKind::ErrorsFile, FileKind::RegularFile)];
            if cx.config.snapshots {
                out.push(entry(SNAPSHOTS, NodeKind::SnapshotsDir, FileKind::Directory));
            }
            return Ok(out);
        }
        if dir.kind == NodeKind::SnapshotsDir {
            let entry = |id: &String| DirEntry {
                ino: cx.tree.child(ino, id, NodeKind::SnapshotDir, id.clone()),
                kind: FileKind::Directory,
                name: id.clone(),
            };
            return Ok(self.history(cx)?.iter().map(entry).collect());
        }
        let state = self.dir_state(cx, &dir.path)?;
        let mut out = Vec::new();
        if ino == tree::ROOT && cx.config.control_dir {
            let control = cx.tree.child(ino, CONTROL_DIR, NodeKind::ControlDir, String::new());
            out.push(DirEntry { ino: control, kind: FileKind::Directory, name: CONTROL_DIR.into() });
        }
        let detached = lock(&self.detached).get(&dir.path).cloned().unwrap_or_default();
        let mut push = |name: &str, kind: NodeKind, path: String| {
            if detached.contains(name) {
                return;
            }
            let file_kind = if kind == NodeKind::Dir { FileKind::Directory } else { FileKind::RegularFile };
            out.push(DirEntry { ino: cx.tree.child(ino, name, kind, path), kind: file_kind, name: name.to_string() });
        };
        // An array's directory may hold every chunk key (v2): its documents are asked for one
        // by one instead of listing it.
        let listing = match state {
            DirState::Group(_) | DirState::Broken(_) => cx.store.list_dir(&dir.path)?,
            DirState::Array(_) => Vec::new(),
        };
        for name in METADATA_DOCUMENTS {
            let key = store::join(&dir.path, name);
            let present = self.is_edited(&key)
                || match state {
                    DirState::Array(_) => cx.store.head(&key)?.is_some(),
                    _ => listing.iter().any(|e| !e.is_dir && e.name == name),
                };
            if present {
                push(name, NodeKind::MetaFile, key);
            }
        }
        match &state {
            DirState::Array(file) => {
                if file.check_writable().is_err() {
                    push(ERROR, NodeKind::ErrorFile, dir.path.clone());
                }
                push(DATA, NodeKind::Data, dir.path.clone());
                push(PREPEND, NodeKind::Prepend, dir.path.clone());
                for format in HeaderFormat::ALL {
                    if self.view_layout(cx, &dir.path, file, format)?.is_ok() {
                        push(format.file_name(), NodeKind::View(format), dir.path.clone());
                    }
                }
            }
            DirState::Broken(_) => push(ERROR, NodeKind::ErrorFile, dir.path.clone()),
            DirState::Group(info) => {
                for view in GroupView::ALL {
                    if info.may_show(view) && self.group_file_listed(cx, &dir.path, view, Some(&listing))?.is_ok() {
                        push(view.file_name(), NodeKind::GroupView(view), dir.path.clone());
                    }
                }
                for name in self.nodes_among(cx, &dir.path, &listing)? {
                    push(name, NodeKind::Dir, store::join(&dir.path, name));
                }
            }
        }
        let lossy = matches!(&state, DirState::Array(f) if f.check_writable().is_err());
        if !matches!(state, DirState::Broken(_)) && !lossy && lock(&self.refusals).contains_key(&dir.path) {
            push(ERROR, NodeKind::ErrorFile, dir.path.clone());
        }
        for name in self.scratch.names_in(&dir.path) {
            let key = store::join(&dir.path, &name);
            push(&name, NodeKind::Scratch, key);
        }
        Ok(out)
    }

    /// The names of the listed children of the group at `dir` that are nodes, in listing order.
    /// A child known (checked within the metadata TTL) is one; the others' documents are looked
    /// for, a huge group's on every core: it is what its listing waits for.
    fn nodes_among<'a>(&self, cx: &Context, dir: &str, listing: &'a [store::Entry]) -> Result<Vec<&'a str>> {
        let children: Vec<&str> = listing.iter().filter(|e| e.is_dir && !is_hidden(&e.name)).map(|e| e.name.as_str()).collect();
        let mut nodes: Vec<bool> = {
            let dirs = lock(&self.dirs);
            let fresh =
                |name: &str| dirs.get(store::join(dir, name).as_str()).is_some_and(|k| k.checked.elapsed() < cx.config.metadata_ttl);
            children.iter().map(|name| fresh(name)).collect()
        };
        let unknown: Vec<usize> = (0..children.len()).filter(|&i| !nodes[i]).collect();
        let store = cx.store.as_ref();
        let check = |at: &[usize]| -> Result<Vec<bool>> { at.iter().map(|&i| is_node(store, &store::join(dir, children[i]))).collect() };
        let threads = cx.config.workers.get().min(unknown.len() / CHECKS_PER_THREAD).max(1);
        let part = unknown.len().div_ceil(threads).max(1);
        let answers = std::thread::scope(|s| {
            let mut parts = unknown.chunks(part);
            let first = parts.next().unwrap_or_default();
            // Each further part on a thread of its own; one that cannot be had (no threads
            // left) is checked here.
            let spawned: Vec<_> = parts.map(|at| (at, std::thread::Builder::new().spawn_scoped(s, move || check(at)))).collect();
            let mut answers = vec![check(first)];
            for (at, thread) in spawned {
                answers.push(match thread {
                    Ok(thread) => thread.join().unwrap_or_else(|_| Err(Error::Internal("a node check panicked".into()))),
                    Err(_) => check(at),
                });
            }
            answers.into_iter().collect::<Result<Vec<_>>>()
        })?;
        for (i, yes) in unknown.into_iter().zip(answers.into_iter().flatten()) {
            nodes[i] = yes;
        }
        Ok(children.into_iter().zip(nodes).filter_map(|(name, yes)| yes.then_some(name)).collect())
    }

    /// The IDs of the snapshots in the store's history, newest first (read again after the
    /// metadata TTL, so that the mount's own commits show).
    fn history(&self, cx: &Context) -> Result<Arc<[String]>> {
        if let Some((read, ids)) = lock(&self.history).as_ref()
            && read.elapsed() < cx.config.metadata_ttl
        {
            return Ok(ids.clone());
        }
        let ids: Arc<[String]> = cx.store.history()?.unwrap_or_default().into_iter().map(|s| s.id).collect();
        *lock(&self.history) = Some((Instant::now(), ids.clone()));
        Ok(ids)
    }

    /// Why the node at `path` cannot be served.
    pub fn error_text(&self, cx: &Context, path: &str) -> Result<Arc<str>> {
        match self.dir_state(cx, path)? {
            DirState::Broken(msg) => Ok(msg),
            DirState::Array(file) if let Err(e) = file.check_writable() => Ok(Arc::from(format!("{e}\n"))),
            _ => lock(&self.refusals).get(path).cloned().ok_or(Error::NotFound),
        }
    }

    /// Note why a document written into `dir` was refused (`None`: one was stored there).
    /// Returns whether a reason was shown before.
    pub fn set_refusal(&self, dir: &str, why: Option<&str>) -> bool {
        let mut refusals = lock(&self.refusals);
        match why {
            Some(why) => refusals.insert(dir.to_string(), Arc::from(format!("{why}\n"))).is_some(),
            None => refusals.remove(dir).is_some(),
        }
    }

    /// A metadata document: as stored, or — for an array's own document while its shape
    /// changed in memory — as it will be stored at the next flush.
    pub fn document(&self, cx: &Context, key: &str) -> Result<Vec<u8>> {
        let stored = cx.store.get(key, MAX_DOCUMENT_BYTES)?.ok_or(Error::NotFound)?;
        Ok(match self.pending_document(key) {
            Some(array) => render_like(Some(&stored), &array.meta.document),
            None => stored,
        })
    }

    /// The length of `document`: a stored document's is known without reading it; one being
    /// rewritten has the length its writer gave it.
    pub fn document_len(&self, cx: &Context, key: &str) -> Result<u64> {
        if let Some(edit) = lock(&self.edits).get(key) {
            return Ok(lock(edit).bytes.len() as u64);
        }
        match self.pending_document(key) {
            Some(_) => Ok(self.document(cx, key)?.len() as u64),
            None => Ok(cx.store.head(key)?.ok_or(Error::NotFound)?.len),
        }
    }

    /// The array whose changed metadata `key` will hold at the next flush, if it is one.
    fn pending_document(&self, key: &str) -> Option<Arc<Array>> {
        let (dir, name) = key.rsplit_once('/').unwrap_or(("", key));
        match lock(&self.dirs).get(dir).map(|k| k.state.clone()) {
            Some(DirState::Array(file)) if file.array.metadata_dirty() => {
                Some(file.array.array()).filter(|array| array.meta.document_name() == name)
            }
            _ => None,
        }
    }

    /// Process `pid` read `bytes` as the document `key`: of an array's, remember the layout.
    pub fn note_read(&self, pid: u32, key: &str, bytes: &[u8]) {
        let (dir, name) = key.rsplit_once('/').unwrap_or(("", key));
        if !crate::zarr::metadata::DOCUMENT_NAMES.contains(&name)
            || !matches!(lock(&self.dirs).get(dir).map(|k| &k.state), Some(DirState::Array(_)))
        {
            return;
        }
        if let Ok(doc) = crate::zarr::metadata::Document::parse(bytes, name) {
            let layout = super::open::layout_of(&doc);
            lock(&self.reads).get_or_insert_with(|| lru::LruCache::new(READS_REMEMBERED)).put((pid, key.to_string()), layout);
        }
    }

    /// The layout process `pid` last read in the document `key`, if it read one.
    pub fn read_by(&self, pid: u32, key: &str) -> Option<serde_json::Value> {
        lock(&self.reads).as_mut()?.get(&(pid, key.to_string())).cloned()
    }

    fn is_edited(&self, key: &str) -> bool {
        lock(&self.edits).contains_key(key)
    }

    /// Start rewriting the document `key` from `bytes`; the buffer is the handle's.
    pub fn begin_edit(&self, key: &str, bytes: Vec<u8>, dirty: bool) -> Result<Arc<Mutex<DocumentEdit>>> {
        let edit = Arc::new(Mutex::new(DocumentEdit { bytes: super::scratch::HeldBytes::new(bytes, &self.scratch.held)?, dirty }));
        lock(&self.edits).insert(key.to_string(), edit.clone());
        Ok(edit)
    }

    /// The rewrite through `edit` is over (stored or not).
    pub fn end_edit(&self, key: &str, edit: &Arc<Mutex<DocumentEdit>>) {
        let mut edits = lock(&self.edits);
        if edits.get(key).is_some_and(|e| Arc::ptr_eq(e, edit)) {
            edits.remove(key);
        }
    }

    pub fn is_detached(&self, dir: &str, name: &str) -> bool {
        lock(&self.detached).get(dir).is_some_and(|names| names.contains(name))
    }

    /// Hide the node's own file `name` in `dir` (unlinked on the way to removing `dir`).
    pub fn detach(&self, dir: &str, name: &str) {
        lock(&self.detached).entry(dir.to_string()).or_default().insert(name.to_string());
    }

    /// Show `name` in `dir` again (made again after it was unlinked). Returns whether it was hidden.
    pub fn attach(&self, dir: &str, name: &str) -> bool {
        let mut detached = lock(&self.detached);
        let Some(names) = detached.get_mut(dir) else { return false };
        let was = names.remove(name);
        if names.is_empty() {
            detached.remove(dir);
        }
        was
    }

    /// Show every file of the directory `dir` again (a removal of it failed).
    pub fn attach_all(&self, dir: &str) {
        lock(&self.detached).remove(dir);
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
