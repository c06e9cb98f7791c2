//! What every part of the core shares: the store, the options, the inode table, the decoded
//! chunk cache and its workers, the dirty budget, ids, and the way back to the kernel's caches.
//! It decides nothing about nodes, handles or views.

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, OnceLock};

use super::open::{DirtyBudget, OpenArray};
use super::tree::Tree;
use super::writeback;
use crate::cache::ChunkCache;
use crate::error::lock;
use crate::headers::{GroupView, HeaderFormat, Views};
use crate::pool::WorkerPool;
use crate::store::Store;
use crate::zarr::metadata::DOCUMENT_NAMES;
use crate::{Error, Result};

pub use super::tree::{CONTROL_DIR, DATA, ERROR, ERRORS, PREPEND, SNAPSHOTS, STATS};

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
    /// Where bytes written to `prepend` (and text rewrites) are staged, when given
    /// (`--spool-dir`); else a private directory made at the first need.
    pub spool_dir: Option<std::path::PathBuf>,
    /// The header views shown beside `data` and in groups (where the format can express
    /// the array or the group).
    pub views: Views,
    /// How long a node's metadata is served before the store is asked whether it changed.
    pub metadata_ttl: std::time::Duration,
    /// Other users may use the mount (allow_other): they get no more than the store grants them.
    pub shared: bool,
    /// The store's only writer (`--exclusive`): an open keeps the kernel's pages and the
    /// decoded chunks of an array however old. Else an open after the metadata TTL since the
    /// array's last refresh reads what other mounts stored (close-to-open, as NFS).
    pub exclusive: bool,
    /// Arrays whose codecs are lossy are written, each value as the codecs round it
    /// (`--lossy-writes`); else they are read-only.
    pub lossy_writes: bool,
    /// Where the store is, as given (for `.zarrfs/stats`).
    pub source: String,
    /// Where the daemon logs, when to a file (for `.zarrfs/stats`).
    pub log: Option<std::path::PathBuf>,
    /// The root shows `.zarrfs` (not in a snapshot's tree, which is inside one).
    pub control_dir: bool,
    /// `.zarrfs/snapshots` shows the store's history (an Icechunk repository).
    pub snapshots: bool,
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
            spool_dir: None,
            views: Views::all(),
            metadata_ttl: std::time::Duration::from_secs(5),
            shared: false,
            exclusive: false,
            lossy_writes: false,
            source: String::new(),
            log: None,
            control_dir: true,
            snapshots: false,
        }
    }
}

/// What the core asks of the kernel's caches when it changes a file itself (a prepend): the
/// FUSE layer implements it.
pub trait KernelCache: Send + Sync {
    /// Drop the cached attributes of `ino` before returning, and its cached pages soon.
    fn invalidate(&self, ino: u64);
    /// Drop, soon, what the kernel holds of the name `name` in the directory `dir`: the file
    /// it found there, or that it found none.
    fn invalidate_name(&self, dir: u64, name: &str);
}

/// An array holding this many changed bytes starts storing the chunks its writers moved on
/// from (`writeback::store_in_background`).
const BACKGROUND_START: usize = 8 << 20;

pub struct Context {
    pub store: Arc<dyn Store>,
    pub config: Config,
    pub tree: Tree,
    pub cache: Arc<ChunkCache>,
    pub pool: WorkerPool,
    /// Bytes of changed chunks held, all arrays together.
    pub budget: Arc<DirtyBudget>,
    /// Where written bytes are staged until close.
    pub spool: super::spool::SpoolDir,
    kernel: OnceLock<Box<dyn KernelCache>>,
    /// Files the core changed under the kernel's page cache: their next open drops the cached
    /// pages at once (the queued invalidation may come after that open's first read).
    stale: Mutex<HashSet<u64>>,
}

impl Context {
    pub fn new(store: Arc<dyn Store>, config: Config) -> Context {
        Context {
            store,
            cache: Arc::new(ChunkCache::new(config.cache_size)),
            pool: WorkerPool::new(config.workers),
            spool: super::spool::SpoolDir::new(config.spool_dir.clone()),
            config,
            tree: Tree::new(),
            budget: Arc::new(DirtyBudget::default()),
            kernel: OnceLock::new(),
            stale: Mutex::new(HashSet::new()),
        }
    }

    pub fn next_id(&self) -> u64 {
        super::open::new_id()
    }

    /// Set once the mount exists: how to tell the kernel that a file changed.
    pub fn set_kernel_cache(&self, kernel: Box<dyn KernelCache>) {
        let _ = self.kernel.set(kernel);
    }

    /// Store everything changed in `array`. When another mount changed its metadata first (its
    /// changes were dropped), what the store holds is served from now on.
    pub fn flush_array(&self, array: &Arc<OpenArray>) -> Result<()> {
        let before = array.cache_id();
        let flushed = writeback::flush(array, &self.cache, &self.pool).inspect_err(|e| {
            if matches!(e, Error::Conflict { .. }) && !array.is_dirty() {
                self.reload(array);
            }
        });
        // Another mount's growth taken on the way: the file is longer now.
        if array.cache_id() != before {
            *lock(&array.text) = None;
            self.invalidate_data(array);
        }
        flushed
    }

    /// Serve `array` as the store holds it now, its cached chunks and the kernel's pages
    /// dropped.
    fn reload(&self, array: &Arc<OpenArray>) {
        let path = array.array().path.clone();
        match crate::zarr::array::Array::open(self.store.clone(), &path) {
            Ok(now) => {
                array.replace(Arc::new(now), self.next_id());
                *lock(&array.text) = None;
                self.invalidate_data(array);
            }
            Err(e) => tracing::warn!(array = %crate::zarr::node::display_path(&path), "the array as stored now cannot be read: {e}"),
        }
    }

    /// After a write: over the dirty limit the array is flushed before the write returns; an
    /// array holding enough starts storing in the background.
    pub fn after_write(&self, array: &Arc<OpenArray>) -> Result<()> {
        if self.budget.held() > self.config.dirty_limit as u64 {
            self.flush_array(array)?;
        } else if lock(&array.edits).dirty_bytes() >= (self.config.dirty_limit / 8).min(BACKGROUND_START) {
            writeback::store_in_background(array, &self.cache, &self.pool);
            array.wait_backlog(self.config.dirty_limit / 8, 2 * self.config.workers.get());
        }
        Ok(())
    }

    /// The core changed `array`'s data (and maybe its metadata) under the kernel's caches: of
    /// `data`, its documents and its views.
    pub fn invalidate_data(&self, array: &Arc<OpenArray>) {
        self.invalidate_files(array, "");
    }

    /// A write through `written` (`data` or a view) changed bytes that the array's other
    /// files show too: the kernel's cached pages and sizes of those are dropped (and of the
    /// file written, where writes are rounded: its pages hold the bytes as written; a mapping's).
    pub fn invalidate_files(&self, array: &Arc<OpenArray>, written: &str) {
        let path = array.array().path.clone();
        let Some(dir) = self.tree.find_dir(&path) else { return };
        let views = HeaderFormat::ALL.map(HeaderFormat::file_name);
        let documents = if written.is_empty() { &DOCUMENT_NAMES[..] } else { &[] };
        let rounded = array.rounds_writes();
        for name in [DATA].iter().chain(&views).chain(documents).filter(|&&n| n != written || rounded) {
            self.invalidate_child(dir, name);
        }
        // The array may be a level of the image its parent is: that image's OME-TIFF shows it.
        if !path.is_empty() {
            let parent = path.rsplit_once('/').map_or("", |(parent, _)| parent);
            self.invalidate_group_views(parent);
            // A new layout may make the group's views appear or go.
            if array.take_layout_change() {
                self.invalidate_group_view_names(parent);
            }
        }
    }

    /// The views of the group at `path` (made from its attributes and its arrays) changed.
    pub fn invalidate_group_views(&self, path: &str) {
        if let Some(dir) = self.tree.find_dir(path) {
            for view in GroupView::ALL {
                self.invalidate_child(dir, view.file_name());
            }
        }
    }

    /// The group at `path` may show views it did not, or no longer show some: the kernel
    /// forgets their names, found or not.
    pub fn invalidate_group_view_names(&self, path: &str) {
        if let (Some(kernel), Some(dir)) = (self.kernel.get(), self.tree.find_dir(path)) {
            for view in GroupView::ALL {
                kernel.invalidate_name(dir, view.file_name());
            }
        }
    }

    fn invalidate_child(&self, dir: u64, name: &str) {
        if let Some(ino) = self.tree.find(dir, name) {
            lock(&self.stale).insert(ino);
            if let Some(kernel) = self.kernel.get() {
                kernel.invalidate(ino);
            }
        }
    }

    /// Whether the core changed `ino` since the kernel last opened it (and forget that it did).
    pub fn take_stale(&self, ino: u64) -> bool {
        lock(&self.stale).remove(&ino)
    }

    /// The error for a change the mount cannot make (a node created, removed or renamed; a
    /// mode, owner or time set): EROFS on a read-only mount, EPERM otherwise.
    pub fn refuse_change(&self, why: &str) -> Error {
        if self.config.read_only { Error::ReadOnly } else { Error::NotPermitted(why.into()) }
    }
}
