//! An array being served: its current metadata (which may be ahead of the store until the next
//! flush) and the chunks written but not yet stored.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::Result;
use crate::cache::{CacheKey, KeyKind};
use crate::error::lock;
use crate::zarr::array::Array;

use super::merge::Base;

/// A chunk changed in memory, with what it was made from (`Base`: how it is stored without
/// undoing another writer's change).
pub(crate) enum ChunkEdit {
    /// The whole decoded chunk (outer chunk for sharded arrays), C order.
    Dirty(Vec<u8>, Base),
    /// The chunk is to be deleted (it lies outside after a shrink, or only fill was written to
    /// it); it reads as fill.
    Deleted(Base),
    /// Being stored in the background; reads still come from here until it is.
    Storing(Arc<Vec<u8>>, Base),
}

impl ChunkEdit {
    /// What the entry counts against the dirty limit (`dirty_cost`). A chunk being stored is
    /// counted by its background store until that ends.
    pub fn cost(&self) -> usize {
        match self {
            ChunkEdit::Dirty(c, _) => dirty_cost(c),
            ChunkEdit::Deleted(_) => dirty_cost(&[]),
            ChunkEdit::Storing(..) => 0,
        }
    }
}

/// What a changed chunk counts against the dirty limit: its bytes, the mask of the elements
/// written into it (at most a bit a byte: `merge::ElementMask`), and the entry that holds it,
/// which is most of it for tiny chunks (a limit in chunk bytes alone would let a write of a
/// few MiB in two-byte chunks hold gigabytes).
pub(crate) fn dirty_cost(chunk: &[u8]) -> usize {
    chunk.len() + chunk.len() / 8 + 256
}

/// Bytes of changed chunks held in memory by the whole mount, which the dirty limit bounds. It
/// moves only with an array's own count, through `Edits::charge`: the two never drift apart.
#[derive(Debug, Default)]
pub struct DirtyBudget {
    held: AtomicI64,
}

impl DirtyBudget {
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed).max(0) as u64
    }
}

pub(crate) struct Edits {
    pub chunks: HashMap<Vec<u64>, ChunkEdit>,
    /// Bytes of `chunks` (`dirty_cost`), also counted in `budget`.
    dirty_bytes: usize,
    budget: Arc<DirtyBudget>,
    pub metadata_dirty: bool,
    /// Keys written or deleted since the last fsync.
    pub unsynced: BTreeSet<String>,
    /// Chunks a background store is under way for (one at a time per chunk, so that stores of
    /// one chunk land in order).
    pub storing: HashSet<Vec<u64>>,
    /// Bytes of the chunks of `storing` (chunks to delete count nothing).
    pub storing_bytes: usize,
    /// What the writes since each changed chunk was last stored did to it: a chunk is stored
    /// early (in the background) once it is whole or no longer being written.
    pub touched: HashMap<Vec<u64>, Touch>,
    /// Writes so far, numbering them for `Touch::write`.
    pub writes: u64,
}

/// The writes to one changed chunk since it was last stored.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Touch {
    /// The number of the latest write that touched it.
    pub write: u64,
    /// Elements those writes covered (overlaps count again), against the chunk's elements
    /// inside the array.
    pub written: u64,
    pub elements: u64,
}

/// Writes after which a chunk no longer written is taken as done with: the kernel keeps up to
/// 64 write requests in flight (`max_background`), and writes back an mmap's pages in no
/// particular order, so a chunk the latest write missed may still be half written.
pub(crate) const WRITES_IN_FLIGHT: u64 = 64;

impl Touch {
    /// Whether the chunk is worth storing before a flush, `writes` writes so far: wholly
    /// written since it was last stored, or not written for `WRITES_IN_FLIGHT` writes (and
    /// then likely done with: a random writer's).
    pub fn settled(touch: Option<&Touch>, writes: u64) -> bool {
        touch.is_none_or(|t| t.written >= t.elements || writes - t.write >= WRITES_IN_FLIGHT)
    }
}

impl Edits {
    fn new(budget: Arc<DirtyBudget>) -> Edits {
        Edits {
            chunks: HashMap::new(),
            dirty_bytes: 0,
            budget,
            metadata_dirty: false,
            unsynced: BTreeSet::new(),
            storing: HashSet::new(),
            storing_bytes: 0,
            touched: HashMap::new(),
            writes: 0,
        }
    }

    pub fn is_clean(&self) -> bool {
        self.chunks.is_empty() && !self.metadata_dirty
    }

    pub fn dirty_bytes(&self) -> usize {
        self.dirty_bytes
    }

    /// Make `edit` the change of the chunk at `coords`, counting the difference.
    pub fn set(&mut self, coords: Vec<u64>, edit: ChunkEdit) {
        let added = edit.cost() as isize;
        let old = self.chunks.insert(coords, edit);
        self.charge(added - old.map_or(0, |o| o.cost() as isize));
    }

    /// The base of the change of the chunk at `coords` that is not a store under way.
    pub fn base_mut(&mut self, coords: &[u64]) -> Option<&mut Base> {
        match self.chunks.get_mut(coords)? {
            ChunkEdit::Dirty(_, base) | ChunkEdit::Deleted(base) => Some(base),
            ChunkEdit::Storing(..) => None,
        }
    }

    /// Forget the change of the chunk at `coords` (it was stored), counting it no more.
    pub fn forget(&mut self, coords: &[u64]) {
        if let Some(old) = self.chunks.remove(coords) {
            self.charge(-(old.cost() as isize));
        }
    }

    /// Count `delta` more (or fewer) changed bytes, here and in the mount's budget.
    pub fn charge(&mut self, delta: isize) {
        let before = self.dirty_bytes;
        self.dirty_bytes = before.saturating_add_signed(delta);
        let moved = self.dirty_bytes as i64 - before as i64;
        self.budget.held.fetch_add(moved, Ordering::Relaxed);
    }
}

/// The layout of a variable-length array's text: the cumulative end offset of each band's, and
/// which bands could not be rendered (a damaged chunk): those stand as one empty line per
/// element, so that the size and the line count are known, and reads of them fail.
pub(crate) struct TextIndex {
    pub ends: Vec<u64>,
    pub damaged: Vec<bool>,
}

impl TextIndex {
    pub fn len(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }
}

pub struct OpenArray {
    /// Unique per mount and per grid layout, for cache keys (a prepend shifts every grid index).
    cache_id: AtomicU64,
    /// Where its decoded chunks are cached: those under an id it no longer uses are dropped.
    cache: Arc<crate::cache::ChunkCache>,
    /// Stores of its chunks or metadata that failed since its changes were last all stored.
    pub failed_stores: AtomicU64,
    /// Bytes written through its file since its changes were last all stored: what a failure
    /// at the unmount names as not stored.
    pub written_unstored: AtomicU64,
    /// Removed from the store (`rm -r`) while files of it were still open: they read ESTALE.
    removed: std::sync::atomic::AtomicBool,
    /// When background stores last checked that no other writer changed the metadata.
    metadata_checked: Mutex<Option<std::time::Instant>>,
    /// Changes dropped after a lost race (`drop_lost`): how many times, and the last reason.
    lost: Mutex<(u64, String)>,
    /// When an open last took what other mounts stored (`due_for_refresh`).
    refreshed: Mutex<std::time::Instant>,
    current: RwLock<Arc<Array>>,
    pub(crate) edits: Mutex<Edits>,
    /// Signalled when a background store finishes.
    pub(crate) stored: Condvar,
    /// Variable-length arrays: where each band's text ends, once known.
    pub(crate) text: Mutex<Option<Arc<TextIndex>>>,
    /// A flush holds it exclusively; reads and writes share it. So a flush never runs while a
    /// read loads stale store data into the cache, or while a write merges into a chunk.
    store_lock: RwLock<()>,
    /// Writes and size changes of this array run one at a time, so that overlapping writes
    /// end as some serial order would leave them, chunk by chunk alike.
    write_lock: Mutex<()>,
    /// What a shared mount lets others read of its files (`Grant::file`): each value read
    /// must let them in too (`Grant::check_value`). 0 on a mount of the owner's alone.
    admitted: std::sync::atomic::AtomicU16,
    /// The layouts (`layout_of`) the array has had while served, oldest first (a few): a
    /// metadata document written with one of them but the current one is likely a stale copy.
    layouts: Mutex<Vec<serde_json::Value>>,
    /// Layouts taken since it opened, and how many of them the kernel was told of.
    layout_changes: AtomicU64,
    layout_changes_shown: AtomicU64,
    /// The mount writes through lossy codecs, each value written as the codecs round it
    /// (`--lossy-writes`).
    lossy_writes: bool,
}

/// Handles, open arrays and grid layouts (cache ids) are numbered from one sequence of the
/// process's: a write-back that takes another mount's growth (`writeback`) needs a cache id too.
static IDS: AtomicU64 = AtomicU64::new(1);

pub(crate) fn new_id() -> u64 {
    IDS.fetch_add(1, Ordering::Relaxed)
}

/// How many earlier layouts an array remembers.
const LAYOUTS_REMEMBERED: usize = 64;

/// Layouts any array took in this process: why a group has no view holds while it is unchanged.
static LAYOUT_CHANGES: AtomicU64 = AtomicU64::new(0);

pub fn layout_changes() -> u64 {
    LAYOUT_CHANGES.load(Ordering::Relaxed)
}

/// The fields of an array document that its data's growth, shrinking and prepends change (the
/// shape, rectilinear edges, the chunk key offset), as one value.
pub fn layout_of(document: &crate::zarr::metadata::Document) -> serde_json::Value {
    serde_json::json!([document.get("shape"), document.get("chunk_grid"), document.get("chunk_key_encoding")])
}

impl OpenArray {
    pub fn new(id: u64, array: Array, budget: Arc<DirtyBudget>, cache: Arc<crate::cache::ChunkCache>, lossy_writes: bool) -> OpenArray {
        OpenArray {
            lossy_writes,
            cache,
            failed_stores: AtomicU64::new(0),
            written_unstored: AtomicU64::new(0),
            removed: Default::default(),
            metadata_checked: Mutex::new(None),
            refreshed: Mutex::new(std::time::Instant::now()),
            lost: Mutex::default(),
            layouts: Mutex::new(vec![layout_of(&array.meta.document)]),
            layout_changes: AtomicU64::new(0),
            layout_changes_shown: AtomicU64::new(0),
            cache_id: AtomicU64::new(id),
            current: RwLock::new(Arc::new(array)),
            edits: Mutex::new(Edits::new(budget)),
            stored: Condvar::new(),
            text: Mutex::new(None),
            store_lock: RwLock::new(()),
            write_lock: Mutex::new(()),
            admitted: Default::default(),
        }
    }

    /// Why the array cannot be written, if it cannot: its codecs would not give back what is
    /// written, and the mount does not write rounded values, or cannot round a write as its
    /// chunk would be (`CodecChain::stored_values`). Nor where the codecs would change the
    /// fill value: a chunk written would show, where it was not written, a fill that unwritten
    /// chunks do not (zarr-python leaves unwritten inner chunks of a shard unrounded, too).
    pub fn write_refusal(&self) -> Option<String> {
        let array = self.array();
        let meta = &array.meta;
        let why = meta.codecs.lossy()?;
        if !self.lossy_writes {
            return Some(format!("{why} (mount with -o lossy_writes to write values as the codecs round them)"));
        }
        match meta.codecs.stored_values(meta.fill.to_vec(), &meta.dtype) {
            Err(e) => Some(format!("{why}, and it cannot be written rounded: {e}")),
            Ok(fill) if fill != meta.fill[..] => {
                let bytes: String = fill.iter().map(|b| format!("{b:02x}")).collect();
                Some(format!("{why}, and they would change its fill value (to the little-endian bytes {bytes})"))
            }
            Ok(_) => None,
        }
    }

    /// Whether writes are rounded as the codecs store them (`CodecChain::stored_values`).
    pub fn rounds_writes(&self) -> bool {
        self.lossy_writes && self.array().meta.codecs.lossy().is_some()
    }

    /// Let others read its files as `grant` says (a shared mount).
    pub fn admit(&self, grant: super::grant::Grant) {
        self.admitted.store(grant.file, Ordering::Relaxed);
    }

    /// Whether the value at `key` of this array lets in everyone its files admit (a value that
    /// does not is read by no one through a shared mount: its bytes would reach the kernel's
    /// cache, where every reader of the file finds them).
    pub fn check_value(&self, a: &Array, key: &str) -> Result<()> {
        match self.admitted.load(Ordering::Relaxed) {
            0 => Ok(()),
            file => super::grant::Grant { dir: 0, file }.check_value(a.store.as_ref(), &a.path, key),
        }
    }

    /// The array as it is now.
    pub fn array(&self) -> Arc<Array> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn cache_id(&self) -> u64 {
        self.cache_id.load(Ordering::Relaxed)
    }

    /// The cache key of a read unit (a chunk, or an inner chunk of a shard), or of a shard's
    /// index, of this array as it is laid out now.
    pub(crate) fn unit_key(&self, coords: &[u64], is_index: bool) -> CacheKey {
        let kind = if is_index { KeyKind::ShardIndex } else { KeyKind::Unit };
        CacheKey { array: self.cache_id(), kind, coords: coords.into() }
    }

    /// Serve `array` from now on (its metadata is stored); grid indices may have moved, so
    /// cached chunks are left behind under the old cache id.
    pub(crate) fn replace(&self, array: Arc<Array>, cache_id: u64) {
        self.note_layout(&array.meta.document);
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = array;
        let old = self.cache_id.swap(cache_id, Ordering::Relaxed);
        if old != cache_id {
            // Chunks cached under the old layout are never asked for again.
            self.cache.retire(old);
        }
    }

    fn note_layout(&self, document: &crate::zarr::metadata::Document) {
        let layout = layout_of(document);
        let mut layouts = lock(&self.layouts);
        if layouts.last() == Some(&layout) {
            return;
        }
        self.layout_changes.fetch_add(1, Ordering::Relaxed);
        LAYOUT_CHANGES.fetch_add(1, Ordering::Relaxed);
        layouts.retain(|l| *l != layout);
        layouts.push(layout);
        if layouts.len() > LAYOUTS_REMEMBERED {
            layouts.remove(0);
        }
    }

    /// Whether the layout changed since the last call: the views of the array's group may have
    /// appeared or gone.
    pub(crate) fn take_layout_change(&self) -> bool {
        let now = self.layout_changes.load(Ordering::Relaxed);
        self.layout_changes_shown.swap(now, Ordering::Relaxed) != now
    }

    /// Whether the array had `layout` before (not counting the one it has now).
    pub(crate) fn had_layout(&self, layout: &serde_json::Value) -> bool {
        lock(&self.layouts).iter().rev().skip(1).any(|l| l == layout)
    }

    /// The array with another shape, not yet served.
    pub(crate) fn reshaped(&self, shape: &[u64]) -> Result<Arc<Array>> {
        // A shape the metadata cannot take (say, a new shard edge inner chunks do not divide)
        // is a bad size, not a broken store.
        Ok(Arc::new(self.array().with_shape(shape).map_err(|e| match e {
            crate::Error::Metadata(m) => crate::Error::Invalid(format!("shape {shape:?}: {m}")),
            other => other,
        })?))
    }

    /// Serve `next` (a `reshaped` array) from now on; the metadata is stored at the next flush.
    pub(crate) fn set_reshaped(&self, edits: &mut Edits, next: Arc<Array>) {
        self.note_layout(&next.meta.document);
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = next;
        edits.metadata_dirty = true;
    }

    /// Give the array a new shape in memory; the metadata is stored at the next flush.
    pub(crate) fn set_shape(&self, edits: &mut Edits, shape: &[u64]) -> Result<Arc<Array>> {
        let next = self.reshaped(shape)?;
        self.set_reshaped(edits, next.clone());
        Ok(next)
    }

    pub(crate) fn shared(&self) -> RwLockReadGuard<'_, ()> {
        self.store_lock.read().unwrap_or_else(|p| p.into_inner())
    }

    /// For background work that must not wait behind a flush.
    pub(crate) fn try_shared(&self) -> Option<RwLockReadGuard<'_, ()>> {
        self.store_lock.try_read().ok()
    }

    pub(crate) fn writer(&self) -> MutexGuard<'_, ()> {
        lock(&self.write_lock)
    }

    pub(crate) fn exclusive(&self) -> RwLockWriteGuard<'_, ()> {
        self.store_lock.write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_dirty(&self) -> bool {
        !lock(&self.edits).is_clean()
    }

    /// Wait until no background store is under way (with the edits locked).
    pub(crate) fn wait_stored<'a>(&self, mut edits: MutexGuard<'a, Edits>) -> MutexGuard<'a, Edits> {
        while !edits.storing.is_empty() {
            edits = self.stored.wait(edits).unwrap_or_else(|p| p.into_inner());
        }
        edits
    }

    /// Hold a writer while the background stores under way hold more than `most_bytes` bytes
    /// and more than `least_chunks` chunks, until they hold half of either: a writer that
    /// outruns the encoding keeps a bounded queue ahead of the workers rather than one up to the
    /// dirty limit, and the buffers stored come back (`spare`) for the chunks it starts next,
    /// warm, instead of fresh pages faulted in. `least_chunks` keeps the workers fed whatever
    /// the chunks' size: a writer of huge chunks is not held until each is stored.
    pub(crate) fn wait_backlog(&self, most_bytes: usize, least_chunks: usize) {
        let over = |e: &Edits, bytes: usize, chunks: usize| e.storing_bytes > bytes && e.storing.len() > chunks;
        let mut edits = lock(&self.edits);
        if !over(&edits, most_bytes, least_chunks) {
            return;
        }
        while over(&edits, most_bytes / 2, least_chunks / 2) {
            edits = self.stored.wait(edits).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Drop every change not yet stored, once background stores under way are done (the array
    /// is being removed: nothing of it may land after its keys are deleted).
    pub(crate) fn discard(&self) {
        let _exclusive = self.exclusive();
        self.discard_locked();
    }

    /// `discard`, with the array's store lock already held exclusively.
    fn discard_locked(&self) {
        let mut edits = self.wait_stored(lock(&self.edits));
        edits.chunks.clear();
        edits.touched.clear();
        edits.metadata_dirty = false;
        let held = edits.dirty_bytes() as isize;
        edits.charge(-held);
    }

    /// Another mount changed the array's metadata first (a lost race): the changes not yet
    /// stored cannot be, and are dropped, so that a retry starts from what is stored; every
    /// writer open now is told `why` at its next close or fsync (`lost_since`). With the
    /// store lock held exclusively.
    pub(crate) fn drop_lost(&self, why: &crate::Error) {
        self.discard_locked();
        let mut lost = lock(&self.lost);
        lost.0 += 1;
        lost.1 = why.to_string();
    }

    /// How many times changes were dropped (`drop_lost`): what a writer's handle notes when
    /// it opens.
    pub(crate) fn lost_count(&self) -> u64 {
        lock(&self.lost).0
    }

    /// The error of changes dropped since the handle noted `seen` (then noting them).
    pub(crate) fn lost_since(&self, seen: &AtomicU64) -> crate::Result<()> {
        let lost = lock(&self.lost);
        if seen.swap(lost.0, Ordering::Relaxed) == lost.0 {
            return Ok(());
        }
        Err(crate::Error::conflict(
            crate::zarr::node::display_path(&self.array().path),
            format!("changes written through this file were not stored: {}", lost.1),
        ))
    }

    pub fn metadata_dirty(&self) -> bool {
        lock(&self.edits).metadata_dirty
    }

    /// Whether a second has passed since background stores last checked the metadata (and note
    /// that they check now).
    pub(crate) fn due_for_metadata_check(&self) -> bool {
        let mut last = lock(&self.metadata_checked);
        let due = last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(1));
        if due {
            *last = Some(std::time::Instant::now());
        }
        due
    }

    /// Whether `ttl` has passed since an open last took what other mounts stored (and note that
    /// this one does): then its decoded chunks are read again (`ZarrFs::open`).
    pub(crate) fn due_for_refresh(&self, ttl: std::time::Duration) -> bool {
        let mut last = lock(&self.refreshed);
        let due = last.elapsed() >= ttl;
        if due {
            *last = std::time::Instant::now();
        }
        due
    }

    /// The array was removed from the store: what is still open of it reads nothing more.
    pub(crate) fn mark_removed(&self) {
        self.removed.store(true, Ordering::Relaxed);
    }

    /// ESTALE once the array was removed.
    pub(crate) fn check_present(&self) -> Result<()> {
        match self.removed.load(Ordering::Relaxed) {
            true => Err(crate::Error::Stale(format!("{} was removed", crate::zarr::node::display_path(&self.array().path)))),
            false => Ok(()),
        }
    }
}

impl Drop for OpenArray {
    /// An array no longer served leaves nothing in the cache.
    fn drop(&mut self) {
        self.cache.retire(self.cache_id());
    }
}
