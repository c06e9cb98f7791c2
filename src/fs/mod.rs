//! The filesystem core: what the mount shows and how its files read. It knows nothing of FUSE;
//! `crate::fuse` translates kernel requests into these calls.

mod open;
mod prepend;
mod raw;
mod spool;
pub mod stats;
mod text;
pub mod tree;
mod writeback;

pub use open::{DirtyBudget, OpenArray};
pub use spool::prepare_spool_dir;

use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::cache::{ChunkCache, WorkerPool};
use crate::error::lock;
use crate::store::{self, Store};
use crate::zarr::array::Array;
use crate::zarr::metadata::NodeMetadata;
use crate::zarr::node::{METADATA_DOCUMENTS, display_path, is_hidden, is_node, read_node};
use crate::{Error, Result};
use tree::{NodeKind, Tree};

pub const DATA: &str = "data";
pub const PREPEND: &str = "prepend";
pub const ERROR: &str = "error";
pub const CONTROL_DIR: &str = ".zarrfs";
pub const STATS: &str = "stats";

#[derive(Clone, Debug)]
pub struct Config {
    /// Bytes of decoded chunks kept.
    pub cache_size: usize,
    pub read_only: bool,
    /// Decode threads.
    pub workers: NonZeroUsize,
    /// Bytes decoded ahead of a sequential reader.
    pub read_ahead: u64,
    /// Bytes of changed chunks held before the array written to is flushed.
    pub dirty_limit: usize,
    /// Switch `default`-encoded arrays to `offset` when `prepend` is opened for writing.
    pub adopt_offset: bool,
    /// Where bytes written to `prepend` are staged.
    pub spool_dir: std::path::PathBuf,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cache_size: 1 << 30,
            read_only: false,
            workers: std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN),
            read_ahead: 16 << 20,
            dirty_limit: 256 << 20,
            adopt_offset: false,
            // SAFETY: geteuid cannot fail. One per user: a directory another user made is refused.
            spool_dir: std::env::temp_dir().join(format!("zarrfs-spool-{}", unsafe { libc::geteuid() })),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Directory,
    RegularFile,
}

/// Attributes of a node, for stat.
#[derive(Clone, Copy, Debug)]
pub struct Attr {
    pub ino: u64,
    pub kind: FileKind,
    pub size: u64,
    pub perm: u16,
    pub mtime: SystemTime,
    /// Changes behind the kernel's back (metadata documents): not to be cached.
    pub volatile: bool,
}

/// What the core asks of the kernel's caches when it changes a file itself (a prepend): the
/// FUSE layer implements it.
pub trait KernelCache: Send + Sync {
    /// Drop the cached attributes of `ino` before returning, and its cached pages soon.
    fn invalidate(&self, ino: u64);
}

#[derive(Clone, Debug)]
pub struct DirEntry {
    pub ino: u64,
    pub kind: FileKind,
    pub name: String,
}

/// What a directory is.
#[derive(Clone)]
enum DirState {
    Group,
    Array(Arc<OpenArray>),
    /// A node that cannot be served, and why.
    Broken(Arc<str>),
}

/// Per open file: its array (for `data`), and how far reads and read-ahead have gone, to spot
/// sequential readers.
#[derive(Default)]
struct Handle {
    array: Option<Arc<OpenArray>>,
    /// `prepend` opened for writing: the staged bytes, and who opened it.
    spool: Option<Mutex<spool::Spool>>,
    opener: u32,
    /// Opened for writing: only such a handle's close stores (and reports) the array's changes.
    writable: bool,
    /// A document as it was when opened (metadata, stats): a reader sees one version of it, and
    /// a large one is not read again for every page the kernel asks for.
    snapshot: Option<Arc<[u8]>>,
    /// Text written to a variable-length array's `data`.
    text: Mutex<Option<text::TextEdit>>,
    /// The furthest end of a read.
    furthest: AtomicU64,
    /// Where read-ahead has been started up to.
    ahead: AtomicU64,
    /// Bytes read in a row near the furthest point.
    streak: AtomicU64,
}

/// An array holding this many changed bytes starts storing the chunks its writers moved on
/// from (`writeback::store_in_background`).
const BACKGROUND_START: usize = 8 << 20;

/// Read-ahead starts once a reader has read this much sequentially: scattered small reads
/// decode only what they touch.
const MIN_STREAK: u64 = 1 << 20;

/// The kernel splits a sequential read into requests that several threads serve out of order:
/// a read this close to the furthest one so far still counts as sequential.
const SEQUENTIAL_SLACK: u64 = 8 << 20;

pub struct ZarrFs {
    store: Arc<dyn Store>,
    config: Config,
    tree: Tree,
    dirs: Mutex<HashMap<String, DirState>>,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    next_id: AtomicU64,
    cache: Arc<ChunkCache>,
    pool: WorkerPool,
    mount_time: SystemTime,
    /// Bytes of changed chunks held, all arrays together.
    budget: Arc<DirtyBudget>,
    kernel: std::sync::OnceLock<Box<dyn KernelCache>>,
    /// Files the core changed under the kernel's page cache: their next open drops the cached
    /// pages at once (the queued invalidation may come after that open's first read).
    stale: Mutex<HashSet<u64>>,
    stats: stats::Stats,
    /// Cleared when the daemon stops. Every change holds it shared while it runs, so that
    /// `stop_changes` returns only once none is under way: everything acknowledged is then in
    /// memory for the last flush, and every later change is refused.
    accepting: std::sync::RwLock<bool>,
}

impl ZarrFs {
    pub fn new(store: Arc<dyn Store>, config: Config) -> ZarrFs {
        ZarrFs {
            store,
            cache: Arc::new(ChunkCache::new(config.cache_size)),
            pool: WorkerPool::new(config.workers),
            config,
            tree: Tree::new(),
            dirs: Mutex::new(HashMap::new()),
            handles: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            mount_time: SystemTime::now(),
            budget: Arc::new(DirtyBudget::default()),
            kernel: std::sync::OnceLock::new(),
            stale: Mutex::new(HashSet::new()),
            stats: stats::Stats::default(),
            accepting: std::sync::RwLock::new(true),
        }
    }

    pub fn stats(&self) -> &stats::Stats {
        &self.stats
    }

    /// Refuse changes from now on, once those under way are done (the daemon is stopping).
    pub fn stop_changes(&self) {
        *self.accepting.write().unwrap_or_else(|p| p.into_inner()) = false;
    }

    /// Permission to change something, held for the length of the change.
    fn change(&self) -> Result<std::sync::RwLockReadGuard<'_, bool>> {
        let accepting = self.accepting.read().unwrap_or_else(|p| p.into_inner());
        if self.config.read_only || !*accepting { Err(Error::ReadOnly) } else { Ok(accepting) }
    }

    /// The error for a change the mount cannot make (a node created, removed or renamed; a
    /// mode, owner or time set): EROFS on a read-only mount, EPERM otherwise.
    pub fn refuse_change(&self, why: &str) -> Error {
        if self.config.read_only { Error::ReadOnly } else { Error::NotPermitted(why.into()) }
    }

    /// `.zarrfs/stats`.
    fn stats_json(&self) -> Vec<u8> {
        let c = &self.cache.stats;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let arrays = lock(&self.dirs).values().filter(|d| matches!(d, DirState::Array(_))).count();
        let doc = serde_json::json!({
            "cache": {
                "hits": load(&c.hits), "misses": load(&c.misses), "decoded_bytes": load(&c.decoded_bytes),
                "bytes": self.cache.bytes(), "capacity": self.cache.capacity(), "load_errors": load(&c.errors),
            },
            "dirty_bytes": self.budget.held(),
            "arrays_open": arrays,
            "pid": std::process::id(),
            "requests": self.stats.requests(),
            "errors": self.stats.errors(),
        });
        let mut out = serde_json::to_vec_pretty(&doc).unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// Set once the mount exists: how to tell the kernel that a file changed.
    pub fn set_kernel_cache(&self, kernel: Box<dyn KernelCache>) {
        let _ = self.kernel.set(kernel);
    }

    pub fn cache(&self) -> &ChunkCache {
        &self.cache
    }

    /// What the directory at `path` is; parsed once and kept.
    fn dir_state(&self, path: &str) -> Result<DirState> {
        if let Some(s) = lock(&self.dirs).get(path) {
            return Ok(s.clone());
        }
        let state = match read_node(self.store.as_ref(), path) {
            Ok(Some(NodeMetadata::Group)) => DirState::Group,
            Ok(Some(NodeMetadata::Array(meta))) => {
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                DirState::Array(Arc::new(OpenArray::new(id, Array::new(self.store.clone(), path, *meta), self.budget.clone())))
            }
            Ok(None) => return Err(Error::NotFound),
            Err(Error::Io(e)) => return Err(Error::Io(e)),
            Err(e) => {
                tracing::warn!(node = %display_path(path), "cannot serve node: {e}");
                DirState::Broken(Arc::from(format!("{e}\n")))
            }
        };
        lock(&self.dirs).insert(path.to_string(), state.clone());
        Ok(state)
    }

    fn dir_node(&self, ino: u64) -> Result<Arc<tree::Node>> {
        let node = self.tree.get(ino).ok_or(Error::NotFound)?;
        if node.kind != NodeKind::Dir && node.kind != NodeKind::ControlDir {
            return Err(Error::Invalid("not a directory".into()));
        }
        Ok(node)
    }

    pub fn lookup(&self, parent: u64, name: &str) -> Result<Attr> {
        let dir = self.dir_node(parent)?;
        match (dir.kind, name) {
            (NodeKind::ControlDir, STATS) => return self.getattr(self.tree.child(parent, name, NodeKind::StatsFile, String::new())),
            (NodeKind::ControlDir, _) => return Err(Error::NotFound),
            (_, CONTROL_DIR) if parent == tree::ROOT => {
                return self.getattr(self.tree.child(parent, name, NodeKind::ControlDir, String::new()));
            }
            _ => {}
        }
        let state = self.dir_state(&dir.path)?;
        let kind = match (name, &state) {
            (DATA, DirState::Array(_)) => NodeKind::Data,
            (PREPEND, DirState::Array(_)) => NodeKind::Prepend,
            (ERROR, DirState::Broken(_)) => NodeKind::ErrorFile,
            (n, _) if METADATA_DOCUMENTS.contains(&n) => {
                if self.store.get_range(&store::join(&dir.path, n), store::ByteRange::Range { start: 0, len: 0 })?.is_none() {
                    return Err(Error::NotFound);
                }
                NodeKind::MetaFile
            }
            (n, DirState::Group) if !is_hidden(n) && is_node(self.store.as_ref(), &store::join(&dir.path, n))? => NodeKind::Dir,
            _ => return Err(Error::NotFound),
        };
        let path = match kind {
            NodeKind::Dir | NodeKind::MetaFile => store::join(&dir.path, name),
            _ => dir.path.clone(),
        };
        let ino = self.tree.child(parent, name, kind, path);
        self.getattr(ino)
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        let node = self.tree.get(ino).ok_or(Error::NotFound)?;
        let file = |size: u64, perm: u16| Attr { ino, kind: FileKind::RegularFile, size, perm, mtime: self.mount_time, volatile: false };
        Ok(match node.kind {
            NodeKind::Dir => Attr { ino, kind: FileKind::Directory, size: 0, perm: 0o755, mtime: self.mount_time, volatile: false },
            NodeKind::MetaFile => Attr { volatile: true, ..file(self.meta_file_len(&node.path)?, 0o444) },
            NodeKind::Data => match self.dir_state(&node.path)? {
                DirState::Array(a) => {
                    let meta = &a.array().meta;
                    let perm = if self.config.read_only { 0o444 } else { 0o644 };
                    if meta.dtype.is_variable() {
                        // A text view's size moves with every rewrite the kernel cannot predict.
                        let index = text::index(&a, &self.cache, &self.pool)
                            .inspect_err(|e| tracing::error!(array = %display_path(&node.path), "the text view cannot be rendered: {e}"))?;
                        Attr { volatile: true, ..file(index.len(), perm) }
                    } else {
                        file(meta.byte_len(), perm)
                    }
                }
                _ => return Err(Error::NotFound),
            },
            NodeKind::Prepend => file(0, 0o200),
            NodeKind::ErrorFile => match self.dir_state(&node.path)? {
                DirState::Broken(msg) => file(msg.len() as u64, 0o444),
                _ => return Err(Error::NotFound),
            },
            NodeKind::ControlDir => Attr { ino, kind: FileKind::Directory, size: 0, perm: 0o555, mtime: self.mount_time, volatile: false },
            NodeKind::StatsFile => Attr { volatile: true, ..file(self.stats_json().len() as u64, 0o444) },
        })
    }

    /// The entries of a directory (without `.` and `..`).
    pub fn readdir(&self, ino: u64) -> Result<Vec<DirEntry>> {
        let dir = self.dir_node(ino)?;
        if dir.kind == NodeKind::ControlDir {
            let stats = self.tree.child(ino, STATS, NodeKind::StatsFile, String::new());
            return Ok(vec![DirEntry { ino: stats, kind: FileKind::RegularFile, name: STATS.into() }]);
        }
        let state = self.dir_state(&dir.path)?;
        let mut out = Vec::new();
        if ino == tree::ROOT {
            let control = self.tree.child(ino, CONTROL_DIR, NodeKind::ControlDir, String::new());
            out.push(DirEntry { ino: control, kind: FileKind::Directory, name: CONTROL_DIR.into() });
        }
        let mut push = |name: &str, kind: NodeKind, path: String| {
            let file_kind = if kind == NodeKind::Dir { FileKind::Directory } else { FileKind::RegularFile };
            out.push(DirEntry { ino: self.tree.child(ino, name, kind, path), kind: file_kind, name: name.to_string() });
        };
        let listing = self.store.list_dir(&dir.path)?;
        for e in listing.iter().filter(|e| !e.is_dir && METADATA_DOCUMENTS.contains(&e.name.as_str())) {
            push(&e.name, NodeKind::MetaFile, store::join(&dir.path, &e.name));
        }
        match state {
            DirState::Array(_) => {
                push(DATA, NodeKind::Data, dir.path.clone());
                push(PREPEND, NodeKind::Prepend, dir.path.clone());
            }
            DirState::Broken(_) => push(ERROR, NodeKind::ErrorFile, dir.path.clone()),
            DirState::Group => {
                for e in listing.iter().filter(|e| e.is_dir && !is_hidden(&e.name)) {
                    let path = store::join(&dir.path, &e.name);
                    if is_node(self.store.as_ref(), &path)? {
                        push(&e.name, NodeKind::Dir, path);
                    }
                }
            }
        }
        Ok(out)
    }

    /// A metadata document: as stored, or — for an array's own document while its shape
    /// changed in memory — as it will be stored at the next flush.
    fn meta_file_bytes(&self, key: &str) -> Result<Vec<u8>> {
        let stored = self.store.get(key, crate::zarr::limits::MAX_DOCUMENT_BYTES)?.ok_or(Error::NotFound)?;
        Ok(match self.pending_document(key) {
            Some(array) => crate::zarr::metadata::render_like(Some(&stored), &array.meta.document),
            None => stored,
        })
    }

    /// The length of `meta_file_bytes`: a stored document's is known without reading it.
    fn meta_file_len(&self, key: &str) -> Result<u64> {
        match self.pending_document(key) {
            Some(_) => Ok(self.meta_file_bytes(key)?.len() as u64),
            None => Ok(self.store.head(key)?.ok_or(Error::NotFound)?.len),
        }
    }

    /// The array whose changed metadata `key` will hold at the next flush, if it is one.
    fn pending_document(&self, key: &str) -> Option<Arc<crate::zarr::array::Array>> {
        let (dir, name) = key.rsplit_once('/').unwrap_or(("", key));
        match lock(&self.dirs).get(dir).cloned() {
            Some(DirState::Array(a)) if a.metadata_dirty() => Some(a.array()).filter(|array| array.meta.document_name() == name),
            _ => None,
        }
    }

    /// Open a file for the process `pid` (`truncate`: O_TRUNC); returns the handle id.
    pub fn open(&self, ino: u64, write: bool, truncate: bool, pid: u32) -> Result<u64> {
        let node = self.tree.get(ino).ok_or(Error::NotFound)?;
        if node.kind == NodeKind::Dir || node.kind == NodeKind::ControlDir {
            return Err(Error::Invalid("is a directory".into()));
        }
        let _change = if write { Some(self.change()?) } else { None };
        match (node.kind, write) {
            (NodeKind::Prepend, false) => return Err(Error::Invalid("prepend is write-only".into())),

            (NodeKind::MetaFile | NodeKind::ErrorFile | NodeKind::StatsFile, true) => {
                return Err(Error::NotPermitted("metadata documents are read-only through the mount".into()));
            }
            _ => {}
        }
        let array = match node.kind {
            NodeKind::Data | NodeKind::Prepend => Some(self.data_array(&node.path)?),
            _ => None,
        };
        let spool = match (&array, node.kind) {
            (Some(a), NodeKind::Prepend) => {
                prepend::check_or_adopt(a, self.config.adopt_offset)?;
                Some(Mutex::new(spool::Spool::create(&self.config.spool_dir)?))
            }
            _ => None,
        };
        let snapshot = match node.kind {
            NodeKind::MetaFile => Some(Arc::from(self.meta_file_bytes(&node.path)?)),
            NodeKind::StatsFile => Some(Arc::from(self.stats_json())),
            _ => None,
        };
        let fh = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.handles).insert(fh, Arc::new(Handle { array, spool, opener: pid, writable: write, snapshot, ..Handle::default() }));
        if truncate && write && node.kind == NodeKind::Data {
            drop(_change);
            if let Err(e) = self.truncate(ino, 0, Some(fh)) {
                lock(&self.handles).remove(&fh);
                return Err(e);
            }
        }
        Ok(fh)
    }

    fn data_array(&self, path: &str) -> Result<Arc<OpenArray>> {
        match self.dir_state(path)? {
            DirState::Array(a) => Ok(a),
            _ => Err(Error::NotFound),
        }
    }

    fn handle(&self, fh: u64) -> Option<Arc<Handle>> {
        lock(&self.handles).get(&fh).cloned()
    }

    /// Write to `data` (over the dirty limit, the array is flushed before returning), or stage
    /// bytes written to `prepend`.
    pub fn write(&self, ino: u64, fh: u64, offset: u64, data: &[u8], append: bool) -> Result<u32> {
        let node = self.tree.get(ino).ok_or(Error::NotFound)?;
        let _change = self.change()?;
        if node.kind == NodeKind::Prepend {
            let handle = self.handle(fh).ok_or(Error::Invalid("unknown file handle".into()))?;
            let spool = handle.spool.as_ref().ok_or(Error::Invalid("prepend is not open for writing".into()))?;
            lock(spool).write(offset, data)?;
            return Ok(data.len() as u32);
        }
        if node.kind != NodeKind::Data {
            return Err(Error::NotPermitted("only data and prepend are written to".into()));
        }
        let array = self.data_array(&node.path)?;
        if array.array().meta.dtype.is_variable() {
            self.write_text(&array, fh, offset, data, append)?;
            return Ok(data.len() as u32);
        }
        tracing::trace!(offset, len = data.len(), "write data");
        raw::write(&array, &self.cache, &self.pool, offset, data)?;
        if self.budget.held() > self.config.dirty_limit as u64 {
            self.flush_array(&array)?;
        } else if lock(&array.edits).dirty_bytes() >= (self.config.dirty_limit / 8).min(BACKGROUND_START) {
            writeback::store_in_background(&array, &self.cache, &self.pool);
        }
        Ok(data.len() as u32)
    }

    /// Text written to a variable-length array: after a cut to zero, the new text; at the end,
    /// lines to append; anywhere else it cannot keep element boundaries (EOPNOTSUPP).
    /// (`append`: the file was opened O_APPEND, so every write goes at the end, whatever size
    /// the kernel thinks the text has.)
    fn write_text(&self, array: &Arc<OpenArray>, fh: u64, offset: u64, data: &[u8], append: bool) -> Result<()> {
        let handle = self.handle(fh).ok_or(Error::Invalid("unknown file handle".into()))?;
        let mut edit = lock(&handle.text);
        if edit.is_none() {
            let size = text::index(array, &self.cache, &self.pool)?.len();
            if offset != size && !append {
                return Err(Error::Unsupported(
                    "writes into the middle of a text view cannot keep element boundaries: rewrite it (O_TRUNC) or append lines".into(),
                ));
            }
            *edit =
                Some(text::TextEdit { mode: text::TextMode::Append { base: size }, spool: spool::Spool::create(&self.config.spool_dir)? });
        }
        let Some(edit) = edit.as_mut() else { return Ok(()) };
        match edit.mode {
            text::TextMode::Append { .. } if append => {
                let end = edit.spool.len();
                edit.spool.write(end, data)
            }
            text::TextMode::Rewrite => edit.spool.write(offset, data),
            text::TextMode::Append { base } if offset >= base => edit.spool.write(offset - base, data),
            text::TextMode::Append { .. } => Err(Error::Unsupported("appended lines are written at the end".into())),
        }
    }

    /// Set the size of `data` (a whole number of rows). `truncate(2)` by path has no open file
    /// whose close would store the change, so it is stored at once; `ftruncate` waits for close.
    pub fn truncate(&self, ino: u64, size: u64, fh: Option<u64>) -> Result<Attr> {
        let node = self.tree.get(ino).ok_or(Error::NotFound)?;
        let _change = self.change()?;
        let open_file = fh.is_some();
        match node.kind {
            NodeKind::Data if self.data_array(&node.path)?.array().meta.dtype.is_variable() => {
                let array = self.data_array(&node.path)?;
                if size == text::index(&array, &self.cache, &self.pool)?.len() {
                    return self.getattr(ino);
                }
                if size != 0 {
                    return Err(Error::Unsupported("a text view is cut to zero (and rewritten) or appended to, not cut elsewhere".into()));
                }
                match fh.and_then(|fh| self.handle(fh)) {
                    // The new text follows through this handle.
                    Some(h) => {
                        *lock(&h.text) =
                            Some(text::TextEdit { mode: text::TextMode::Rewrite, spool: spool::Spool::create(&self.config.spool_dir)? })
                    }
                    // `_change` is held already: a second shared hold could wait behind a stop.
                    None => self.store_text(&array, text::TextMode::Rewrite, None)?,
                }
            }
            NodeKind::Data => {
                let array = self.data_array(&node.path)?;
                raw::truncate(&array, &self.cache, size)?;
                if !open_file {
                    self.flush_array(&array)?;
                }
            }
            // Opening `prepend` for writing truncates it: it is always empty.
            NodeKind::Prepend if size == 0 => {}
            _ => return Err(Error::NotPermitted("only data can change size".into())),
        }
        self.getattr(ino)
    }

    fn flush_array(&self, array: &Arc<OpenArray>) -> Result<()> {
        writeback::flush(array, &self.cache, &self.pool)
    }

    /// close() by `pid`: store what was written to this file's array, or commit what was
    /// written to `prepend`; the first error is returned. A prepend commits on the opener's
    /// close only: another process closing an inherited descriptor must not cut it short (the
    /// last close, `release`, commits in any case).
    pub fn flush(&self, fh: u64, pid: u32) -> Result<()> {
        let Some(handle) = self.handle(fh) else { return Ok(()) };
        let Some(array) = handle.array.clone() else { return Ok(()) };
        if pid == handle.opener
            && let Some(edit) = lock(&handle.text).take()
        {
            return self.commit_text(&array, edit.mode, &edit.spool);
        }
        match &handle.spool {
            Some(spool) if pid == handle.opener => self.commit_prepend(&array, &mut lock(spool)),
            Some(_) => Ok(()),
            // A reader's close neither stores nor reports what other descriptors wrote. A
            // writer's flushes even when nothing looks dirty: another flush may have taken the
            // chunks and not stored them yet, and this close must wait for (and report) that.
            None if handle.writable => self.flush_array(&array),
            None => Ok(()),
        }
    }

    /// Store text written to a variable-length array: the new elements, or the appended ones.
    fn commit_text(&self, array: &Arc<OpenArray>, mode: text::TextMode, staged: &spool::Spool) -> Result<()> {
        let _change = self.change()?;
        self.store_text(array, mode, Some(staged))
    }

    /// `commit_text`, with permission to change already held (`staged`: `None` is no text).
    fn store_text(&self, array: &Arc<OpenArray>, mode: text::TextMode, staged: Option<&spool::Spool>) -> Result<()> {
        let new_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let result = match (mode, staged) {
            (text::TextMode::Rewrite, _) => text::rewrite(array, staged, new_id),
            (text::TextMode::Append { .. }, Some(staged)) => text::append(array, staged, new_id),
            (text::TextMode::Append { .. }, None) => Ok(()),
        };
        if let Err(e) = &result {
            tracing::warn!(array = %display_path(&array.array().path), "text refused: {e}");
        }
        // What the kernel cached is what was written, not necessarily how it renders now.
        self.invalidate_data(array);
        result
    }

    fn invalidate_data(&self, array: &Arc<OpenArray>) {
        let Some(dir) = self.tree.find_dir(&array.array().path) else { return };
        for name in [DATA, crate::zarr::metadata::DOCUMENT_NAMES[0], crate::zarr::metadata::DOCUMENT_NAMES[1]] {
            if let Some(ino) = self.tree.find(dir, name) {
                lock(&self.stale).insert(ino);
                if let Some(kernel) = self.kernel.get() {
                    kernel.invalidate(ino);
                }
            }
        }
    }

    /// Whether an open of `ino` that just succeeded may keep the kernel's cached pages: not for
    /// documents that change behind the kernel's back, nor once after the core changed the file.
    pub fn keep_cache(&self, ino: u64) -> bool {
        let changed = lock(&self.stale).remove(&ino);
        !changed && matches!(self.getattr(ino), Ok(a) if !a.volatile)
    }

    fn commit_prepend(&self, array: &Arc<OpenArray>, spool: &mut spool::Spool) -> Result<()> {
        if spool.is_empty() {
            return Ok(());
        }
        let _change = self.change()?;
        let new_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        prepend::commit(array, spool, &self.cache, &self.pool, new_id)
            .inspect_err(|e| tracing::warn!(array = %display_path(&array.array().path), "prepend refused: {e}"))?;
        // The data file changed under the kernel's cache: every page moved.
        self.invalidate_data(array);
        Ok(())
    }

    /// fsync(): flush, then make the written files and their directories durable.
    pub fn fsync(&self, fh: u64) -> Result<()> {
        let Some(array) = self.handle(fh).and_then(|h| h.array.clone()) else { return Ok(()) };
        self.flush_array(&array)?;
        writeback::sync(&array, self.store.as_ref())
    }

    /// Store everything still dirty (unmount).
    pub fn flush_all(&self) -> Result<()> {
        let arrays: Vec<Arc<OpenArray>> = lock(&self.dirs)
            .values()
            .filter_map(|d| match d {
                DirState::Array(a) => Some(a.clone()),
                _ => None,
            })
            .collect();
        let mut first = Ok(());
        for a in &arrays {
            if let Err(e) = self.flush_array(a).and_then(|_| writeback::sync(a, self.store.as_ref())) {
                tracing::error!(array = %display_path(&a.array().path), "flush at unmount failed: {e}");
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// For a sequential reader, start decoding the window after this read on the pool, so
    /// that decoding runs ahead of the reader.
    fn read_ahead(&self, array: &Arc<OpenArray>, h: &Handle, offset: u64, size: u32) {
        let end = offset + u64::from(size);
        let furthest = h.furthest.fetch_max(end, Ordering::Relaxed);
        let sequential =
            offset > 0 && offset <= furthest.saturating_add(SEQUENTIAL_SLACK) && offset.saturating_add(SEQUENTIAL_SLACK) >= furthest;
        let window = self.config.read_ahead.min(self.cache.capacity() as u64 / 4);
        if !sequential {
            h.streak.store(0, Ordering::Relaxed);
            return;
        }
        if h.streak.fetch_add(u64::from(size), Ordering::Relaxed) + u64::from(size) < MIN_STREAK || window == 0 {
            return;
        }
        let from = h.ahead.load(Ordering::Relaxed).max(end);
        let to = end + window;
        // Extend in steps of a quarter window, not on every request.
        if to >= from + window / 4 && h.ahead.fetch_max(to, Ordering::Relaxed) < to {
            raw::read_ahead(array, &self.cache, &self.pool, from, to - from);
        }
    }

    /// The last close of a file: what is still dirty (written through mmap after the last
    /// close, or left by a failed flush) is stored; errors can only be logged here.
    pub fn release(&self, fh: u64) {
        let Some(handle) = lock(&self.handles).remove(&fh) else { return };
        let Some(array) = handle.array.clone() else { return };
        let text = lock(&handle.text).take();
        let result = match &handle.spool {
            _ if text.is_some() => text.map_or(Ok(()), |t| self.commit_text(&array, t.mode, &t.spool)),
            Some(spool) => self.commit_prepend(&array, &mut lock(spool)),
            None if handle.writable && array.is_dirty() => self.flush_array(&array),
            None => Ok(()),
        };
        if let Err(e) = result {
            tracing::error!(array = %display_path(&array.array().path), "write-back at release failed: {e}");
        }
    }

    pub fn read(&self, ino: u64, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let node = self.tree.get(ino).ok_or(Error::NotFound)?;
        let slice = |bytes: &[u8]| {
            let start = (offset.min(bytes.len() as u64)) as usize;
            let end = (start + size as usize).min(bytes.len());
            bytes[start..end].to_vec()
        };
        if let Some(snapshot) = self.handle(fh).and_then(|h| h.snapshot.clone()) {
            return Ok(slice(&snapshot));
        }
        match node.kind {
            NodeKind::MetaFile => Ok(slice(&self.meta_file_bytes(&node.path)?)),
            NodeKind::ErrorFile => match self.dir_state(&node.path)? {
                DirState::Broken(msg) => Ok(slice(msg.as_bytes())),
                _ => Err(Error::NotFound),
            },
            NodeKind::Data => {
                let array = self.data_array(&node.path)?;
                if array.array().meta.dtype.is_variable() {
                    return text::read(&array, &self.cache, &self.pool, offset, size);
                }
                if let Some(h) = self.handle(fh) {
                    self.read_ahead(&array, &h, offset, size);
                }
                let mut data = raw::read(&array, &self.cache, &self.pool, offset, size)?;
                pad_last_page(&mut data, &array.array().meta, offset, size);
                Ok(data)
            }
            NodeKind::StatsFile => Ok(slice(&self.stats_json())),
            NodeKind::Prepend => Err(Error::Invalid("prepend is write-only".into())),
            NodeKind::Dir | NodeKind::ControlDir => Err(Error::Invalid("is a directory".into())),
        }
    }
}

/// The kernel caches the page that holds the end of the file, zero past the end. A write past
/// the end grows the file without reading that page again, so the gap would show zeros where
/// the array has fill. Replying with fill up to the end of that page (the kernel shows nothing
/// past the size) keeps the cached page right.
fn pad_last_page(data: &mut Vec<u8>, meta: &crate::zarr::metadata::ArrayMetadata, offset: u64, size: u32) {
    const PAGE: u64 = 4096;
    let total = meta.byte_len();
    let end = (offset + u64::from(size)).min(total.next_multiple_of(PAGE));
    if offset + data.len() as u64 != total || end <= total || meta.fill.is_empty() {
        return;
    }
    let item = meta.fill.len() as u64;
    data.extend((total..end).map(|p| meta.fill[(p % item) as usize]));
}
