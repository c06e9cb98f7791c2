//! The filesystem core: what the mount shows and how its files read and write. It knows
//! nothing of FUSE; `crate::fuse` translates kernel requests into these calls. This file is the
//! core's face, a thin dispatch: `nodes` finds what an inode is, `handle` what a handle holds
//! and what its close must do, `view` how `data` reads and writes; `context` is what they share;
//! `report` what the mount says of itself.

mod context;
mod grant;
mod handle;
mod hierarchy;
mod listing;
mod merge;
mod nodes;
mod open;
mod prepend;
mod read;
mod report;
mod scratch;
mod shard;
mod snapshots;
mod spare;
mod spool;
pub mod stats;
mod stored;
pub mod tree;
mod view;
mod write;
mod writeback;

pub use context::{CONTROL_DIR, Config, DATA, ERROR, ERRORS, KernelCache, PREPEND, STATS};
pub use listing::Listing;
pub use nodes::{DirEntry, FileKind};
pub use open::{DirtyBudget, OpenArray};
pub use snapshots::{Mounted, OpenSnapshot, Routed};
pub use spool::prepare_spool_dir;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::SystemTime;

use crate::cache::ChunkCache;
use crate::store::Store;
use crate::zarr::node::display_path;
use crate::{Error, Result};
use context::Context;
use handle::{Handle, Handles, OnClose, Opened};
use nodes::Nodes;
use tree::NodeKind;

/// What a flush of everything could not store.
#[derive(Debug, Default)]
pub struct FlushReport {
    pub unstored: Vec<Unstored>,
}

/// An array whose changes could not be stored.
#[derive(Debug, Clone)]
pub struct Unstored {
    pub array: String,
    /// Bytes written through its file since its changes were last all stored, which this
    /// flush did not store (held in memory, lost when the daemon exits; or dropped, another
    /// writer having won).
    pub bytes: u64,
    pub error: String,
}

impl FlushReport {
    pub fn is_ok(&self) -> bool {
        self.unstored.is_empty()
    }
}

impl std::fmt::Display for FlushReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list: Vec<String> =
            self.unstored.iter().map(|u| format!("{} ({} bytes written, not stored): {}", u.array, u.bytes, u.error)).collect();
        write!(f, "changes of {} array(s) could not be stored: {}", list.len(), list.join("; "))
    }
}

/// Attributes of a node, for stat.
#[derive(Clone, Copy, Debug)]
pub struct Attr {
    pub ino: u64,
    pub kind: FileKind,
    pub size: u64,
    /// Bytes the file takes of its own: a view that carries `data`'s bytes counts only its
    /// header, so that `du` counts an array once.
    pub own_bytes: u64,
    pub perm: u16,
    pub mtime: SystemTime,
    /// Changes behind the kernel's back (metadata documents): not to be cached.
    pub volatile: bool,
}

/// Nodes whose memory is worth giving back once they have left the table.
const MANY_NODES: usize = 10_000;

pub struct ZarrFs {
    cx: Context,
    nodes: Nodes,
    handles: Handles,
    mount_time: SystemTime,
    stats: stats::Stats,
    /// Held by every change of the hierarchy (a node made, removed, moved, or its document
    /// rewritten), so that each sees the tree as the one before left it.
    hierarchy: Mutex<()>,
    /// Cleared when the daemon stops. Every change holds it shared while it runs, so that
    /// `stop_changes` returns only once none is under way: everything acknowledged is then in
    /// memory for the last flush, and every later change is refused.
    accepting: RwLock<bool>,
    /// The listings of directories, as the kernel reads them.
    listings: listing::Listings,
    /// Nodes that came into the table or left it since memory was last given back.
    churned: std::sync::atomic::AtomicUsize,
}

impl ZarrFs {
    pub fn new(store: Arc<dyn Store>, config: Config) -> ZarrFs {
        ZarrFs {
            cx: Context::new(store, config),
            nodes: Nodes::default(),
            handles: Handles::default(),
            mount_time: SystemTime::now(),
            stats: stats::Stats::default(),
            hierarchy: Mutex::new(()),
            accepting: RwLock::new(true),
            listings: listing::Listings::default(),
            churned: Default::default(),
        }
    }

    /// Read the root node (and keep it, as any node read): `NotFound` when the store's root is
    /// no node.
    pub fn load_root(&self) -> Result<()> {
        self.nodes.dir_state(&self.cx, "").map(drop)
    }

    /// Changed bytes held in memory, not yet stored.
    pub fn dirty_bytes(&self) -> u64 {
        self.cx.budget.held()
    }

    /// The text of report `kind`: the daemon's stats or its recent errors, as they are now.
    fn report(&self, kind: NodeKind) -> Vec<u8> {
        if kind == NodeKind::ErrorsFile { crate::logging::recent_errors() } else { self.stats_json() }
    }

    /// The space `df` shows: the store's file system's, or a nominal one for object storage.
    pub fn space(&self) -> crate::store::Space {
        self.cx.store.space().unwrap_or(crate::store::Space::NOMINAL)
    }

    pub fn stats(&self) -> &stats::Stats {
        &self.stats
    }

    pub fn cache(&self) -> &ChunkCache {
        &self.cx.cache
    }

    /// Set once the mount exists: how to tell the kernel that a file changed.
    pub fn set_kernel_cache(&self, kernel: Box<dyn KernelCache>) {
        self.cx.set_kernel_cache(kernel);
    }

    /// Refuse changes from now on, once those under way are done (the daemon is stopping).
    pub fn stop_changes(&self) {
        *self.accepting.write().unwrap_or_else(|p| p.into_inner()) = false;
    }

    /// Permission to change something, held for the length of the change.
    fn change_permit(&self) -> Result<RwLockReadGuard<'_, bool>> {
        let accepting = self.accepting.read().unwrap_or_else(|p| p.into_inner());
        if self.cx.config.read_only || !*accepting { Err(Error::ReadOnly) } else { Ok(accepting) }
    }

    /// The error for a change the mount cannot make (a node created, removed or renamed; a
    /// mode, owner or time set): EROFS on a read-only mount, EPERM otherwise.
    pub fn refuse_change(&self, why: &str) -> Error {
        self.cx.refuse_change(why)
    }

    fn node(&self, ino: u64) -> Result<Arc<tree::Node>> {
        self.cx.tree.get(ino).ok_or(Error::NotFound)
    }

    fn handle(&self, fh: u64) -> Result<Arc<Handle>> {
        self.handles.get(fh).ok_or(Error::Invalid("unknown file handle".into()))
    }

    /// The entry of `name` in `parent`, which the kernel then holds until it forgets it.
    pub fn lookup(&self, parent: u64, name: &str) -> Result<Attr> {
        // A node no one held may leave the table between being found and being remembered (a
        // listing released meanwhile): it is found again.
        for _ in 0..8 {
            let attr = self.getattr(self.nodes.lookup(&self.cx, parent, name)?)?;
            if self.cx.tree.remember(attr.ino) {
                self.churn(1);
                return Ok(attr);
            }
        }
        Err(Error::NotFound)
    }

    /// The attributes of a listed entry the kernel is to take as looked up (readdirplus): it
    /// counts as a lookup. Fails when the entry left the table since it was listed.
    pub fn remember_entry(&self, ino: u64) -> Result<Attr> {
        let attr = self.getattr(ino)?;
        if self.cx.tree.remember(ino) { Ok(attr) } else { Err(Error::NotFound) }
    }

    /// How long the kernel may keep what does not change behind its back.
    pub fn config(&self) -> &Config {
        &self.cx.config
    }

    /// The snapshot ID whose directory `ino` is (`.zarrfs/snapshots/<id>`), if it is one.
    pub fn snapshot_id(&self, ino: u64) -> Option<String> {
        if !self.cx.config.snapshots {
            return None;
        }
        self.cx.tree.get(ino).filter(|n| n.kind == NodeKind::SnapshotDir).map(|n| n.path.clone())
    }

    pub fn metadata_ttl(&self) -> std::time::Duration {
        self.cx.config.metadata_ttl
    }

    /// The kernel forgot `n` lookups of `ino`: a node it holds no more leaves the table.
    pub fn forget(&self, ino: u64, n: u64) {
        let removed = self.cx.tree.forget(ino, n);
        self.nodes_left(removed);
    }

    /// Nodes that left the inode table: what was kept for them goes too (a directory's node,
    /// unless it holds changes or open files).
    fn nodes_left(&self, removed: Vec<(u64, Arc<tree::Node>)>) {
        let count = removed.len();
        for (ino, node) in removed {
            self.cx.take_stale(ino);
            self.listings.remove(ino);
            if node.kind == NodeKind::Dir {
                self.nodes.release_dir(&node.path, |array| self.handles.holds(array));
            }
        }
        self.churn(count);
    }

    /// `count` nodes came or went. After many (a huge listing, a walk, the kernel forgetting
    /// one) the heap gives back what they left free: their own memory, and the room the tables
    /// held before they grew, which the allocator would otherwise keep for good.
    fn churn(&self, count: usize) {
        if self.churned.fetch_add(count, std::sync::atomic::Ordering::Relaxed) + count >= MANY_NODES {
            self.churned.store(0, std::sync::atomic::Ordering::Relaxed);
            crate::heap::give_back();
        }
    }

    /// The listing a directory read at `offset` reads: a new one at the stream's start (the
    /// kernel asks there only when it holds no listing it may use), else the one the reader
    /// started. A reader past the end is done with it: it goes, and the entries the kernel was
    /// not given leave the inode table.
    pub fn readdir(&self, ino: u64, offset: u64) -> Result<Listing> {
        let listing = match (offset > 0).then(|| self.listings.resume(ino, offset)).flatten() {
            Some(listing) => listing,
            None => {
                let (listing, dropped) = self.listings.keep(ino, self.nodes.readdir(&self.cx, ino)?);
                self.release_unheld(ino, dropped);
                listing
            }
        };
        if listing.read_to_end(offset) {
            self.listings.finish(ino, &listing);
            let entries = listing.inos().to_vec();
            // Freed before the nodes go, so that their memory goes back with them.
            drop(listing);
            self.release_unheld(ino, entries);
            return Ok(Listing::ended());
        }
        Ok(listing)
    }

    fn release_unheld(&self, dir: u64, inos: Vec<u64>) {
        if !inos.is_empty() {
            let removed = self.cx.tree.release_unheld(dir, inos);
            self.nodes_left(removed);
        }
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        let node = self.node(ino)?;
        let dir = |perm: u16| {
            let mtime = self.listings.mtime(ino, self.cx.config.metadata_ttl).unwrap_or(self.mount_time);
            Attr { ino, kind: FileKind::Directory, size: 0, own_bytes: 0, perm, mtime, volatile: false }
        };
        let file = |size: u64, perm: u16| Attr {
            ino,
            kind: FileKind::RegularFile,
            size,
            own_bytes: size,
            perm,
            mtime: self.mount_time,
            volatile: false,
        };
        // The owner's rights, then what others get (`grant::Grant`).
        let (owner_dir, owner_file) = if self.cx.config.read_only { (0o500, 0o400) } else { (0o700, 0o600) };
        let grant = match node.kind {
            NodeKind::ControlDir | NodeKind::StatsFile | NodeKind::ErrorsFile | NodeKind::SnapshotsDir | NodeKind::SnapshotDir => {
                grant::Grant { dir: 0, file: 0 }
            }
            NodeKind::MetaFile | NodeKind::Scratch => self.nodes.grant(&self.cx, node.path.rsplit_once('/').map_or("", |(d, _)| d))?,
            // Made of its arrays' bytes: no one may read it who may not read every one of them.
            NodeKind::GroupView(view) if self.cx.config.shared => {
                let members = self.group_file(&node.path, view)?;
                members
                    .member_paths()
                    .try_fold(self.nodes.grant(&self.cx, &node.path)?, |g, p| Ok::<_, Error>(g.and(self.nodes.grant(&self.cx, &p)?)))?
            }
            _ => self.nodes.grant(&self.cx, &node.path)?,
        };
        let data_perm = owner_file | grant.file;
        let read_only_perm = 0o400 | grant.file;
        Ok(match node.kind {
            NodeKind::Dir => dir(owner_dir | grant.dir),
            NodeKind::ControlDir | NodeKind::SnapshotsDir | NodeKind::SnapshotDir => dir(0o500),
            NodeKind::MetaFile => {
                let perm = if node.path.ends_with(".zmetadata") { read_only_perm } else { data_perm };
                // The mount's own changes rewrite documents (shapes, consolidated metadata):
                // a read-write mount's are asked for each time; a read-only mount's are kept
                // for the TTL like every other attribute (and read past it: `direct_io`).
                Attr { volatile: !self.cx.config.read_only, ..file(self.nodes.document_len(&self.cx, &node.path)?, perm) }
            }
            NodeKind::Scratch => {
                let scratch = self.nodes.scratch.get(&node.path).ok_or(Error::NotFound)?;
                Attr { volatile: true, ..file(scratch.len(), scratch.perm() & (0o7700 | grant.file)) }
            }
            NodeKind::Data => {
                let data = self.nodes.data_file(&self.cx, &node.path)?;
                let (size, volatile) = data.size(&self.cx)?;
                let perm = if data.check_writable().is_ok() { data_perm } else { read_only_perm };
                Attr { volatile, ..file(size, perm) }
            }
            // A view follows the array's shape. It is cached as `data` is: every change through
            // the array's other files, or seen in the store, drops it (`invalidate_files`).
            NodeKind::View(format) => {
                let file_of = self.nodes.data_file(&self.cx, &node.path)?;
                let layout = self.view_layout(&node.path, &file_of, format)?;
                let own = layout.header.len() as u64 + layout.trailer_len();
                match format.carries_data() {
                    true => {
                        let (size, volatile) = file_of.size(&self.cx)?;
                        Attr { own_bytes: own, volatile, ..file(own + size, data_perm) }
                    }
                    false => file(own, read_only_perm),
                }
            }
            // Made from its arrays as they are; cached as `data` is, and dropped with theirs.
            NodeKind::GroupView(view) => {
                let group = self.group_file(&node.path, view)?;
                Attr { own_bytes: group.own_len(), ..file(group.file_len(), read_only_perm) }
            }
            NodeKind::Prepend => file(0, 0o200),
            NodeKind::ErrorFile => file(self.nodes.error_text(&self.cx, &node.path)?.len() as u64, read_only_perm),
            // The daemon's pid, its counters and its errors are the owner's business alone.
            NodeKind::StatsFile | NodeKind::ErrorsFile => Attr { volatile: true, ..file(self.report(node.kind).len() as u64, 0o400) },
        })
    }

    /// The layout of the `format` view of the array at `path` (gone when the mount does not
    /// show it, or it cannot show the array any more).
    fn view_layout(&self, path: &str, file: &view::DataFile, format: crate::headers::HeaderFormat) -> Result<crate::headers::Layout> {
        self.nodes.view_layout(&self.cx, path, file, format)?.map_err(|_| Error::NotFound)
    }

    /// The `view` file of the group at `path` (gone when the group cannot show it any more).
    fn group_file(&self, path: &str, view: crate::headers::GroupView) -> Result<Arc<view::group::GroupFile>> {
        self.nodes.group_file(&self.cx, path, view)?.map_err(|_| Error::NotFound)
    }

    /// The group shown as every file's: the store root's in a shared mount (where its group's
    /// rights are what the mount grants the group), else the daemon's.
    pub fn shown_gid(&self) -> u32 {
        let own = || {
            // SAFETY: getgid cannot fail.
            unsafe { libc::getgid() }
        };
        match self.cx.config.shared {
            true => self.cx.store.permissions("").ok().flatten().map_or_else(own, |p| p.gid),
            false => own(),
        }
    }

    /// Open a file for the process `pid` (`truncate`: O_TRUNC); returns the handle id.
    pub fn open(&self, ino: u64, write: bool, truncate: bool, pid: u32) -> Result<u64> {
        let node = self.node(ino)?;
        let permit = if write { Some(self.change_permit()?) } else { None };
        let opened = match (node.kind, write) {
            (NodeKind::Dir | NodeKind::ControlDir | NodeKind::SnapshotsDir | NodeKind::SnapshotDir, _) => return Err(Error::IsADirectory),
            // Reading `prepend` shows nothing (it is never more than what is being staged).
            (NodeKind::Prepend, false) => Opened::Document(Arc::from(&[][..])),
            (NodeKind::MetaFile, true) if node.path.ends_with(".zmetadata") => {
                return Err(Error::NotPermitted("consolidated metadata is kept by the mount".into()));
            }
            (NodeKind::MetaFile, true) => {
                let bytes = if truncate { Vec::new() } else { self.nodes.document(&self.cx, &node.path)? };
                Opened::Edit { key: node.path.clone(), edit: self.nodes.begin_edit(&node.path, bytes, truncate)? }
            }
            (NodeKind::Scratch, _) => {
                let file = self.nodes.scratch.get(&node.path).ok_or(Error::NotFound)?;
                if truncate && write {
                    self.nodes.scratch.truncate(&file, 0)?;
                }
                Opened::Scratch(file)
            }
            (NodeKind::ErrorFile | NodeKind::StatsFile | NodeKind::ErrorsFile, true) => {
                return Err(Error::NotPermitted("the mount's own reports are read-only".into()));
            }
            (NodeKind::View(format), writable) if format.carries_data() => Opened::Data {
                file: self
                    .nodes
                    .data_file(&self.cx, &node.path)
                    .and_then(|f| if writable { f.check_writable().map(|()| f) } else { Ok(f) })?,
                writable,
                reads: view::ReadPattern::default(),
                staged: Mutex::new(None),
                lost_seen: Default::default(),
            },
            (NodeKind::View(_), true) => return Err(Error::NotPermitted("a header view follows the array: change it through data".into())),
            (NodeKind::View(format), false) => {
                let file = self.nodes.data_file(&self.cx, &node.path)?;
                Opened::Document(Arc::from(self.view_layout(&node.path, &file, format)?.header))
            }
            (NodeKind::GroupView(_), true) => {
                return Err(self.cx.refuse_change("a group's view follows its arrays: change them through their data"));
            }
            (NodeKind::GroupView(view), false) => {
                let group = self.group_file(&node.path, view)?;
                group.arrays().iter().for_each(|file| self.refresh(&file.array));
                Opened::GroupView { reads: group.arrays().iter().map(|_| view::ReadPattern::default()).collect() }
            }
            (NodeKind::MetaFile, false) => {
                let bytes = self.nodes.document(&self.cx, &node.path)?;
                self.nodes.note_read(pid, &node.path, &bytes);
                Opened::Document(Arc::from(bytes))
            }
            (NodeKind::ErrorFile, false) => Opened::Document(Arc::from(self.nodes.error_text(&self.cx, &node.path)?.as_bytes())),
            (NodeKind::StatsFile | NodeKind::ErrorsFile, false) => Opened::Document(Arc::from(self.report(node.kind))),
            (NodeKind::Prepend, true) => {
                let file = self.nodes.data_file(&self.cx, &node.path)?;
                file.check_writable()?;
                let array = file.array;
                prepend::check(&array, self.cx.config.adopt_offset)?;
                Opened::Prepend { array, spool: Mutex::new(self.cx.spool.create()?) }
            }
            (NodeKind::Data, writable) => Opened::Data {
                file: self
                    .nodes
                    .data_file(&self.cx, &node.path)
                    .and_then(|f| if writable { f.check_writable().map(|()| f) } else { Ok(f) })?,
                writable,
                reads: view::ReadPattern::default(),
                staged: Mutex::new(None),
                lost_seen: Default::default(),
            },
        };
        if let Opened::Data { file, lost_seen, .. } = &opened {
            lost_seen.store(file.array.lost_count(), std::sync::atomic::Ordering::Relaxed);
            self.refresh(&file.array);
        }
        let fh = self.cx.next_id();
        self.handles.insert(fh, Handle { opener: pid, opened });
        if truncate && write && matches!(node.kind, NodeKind::Data | NodeKind::View(_)) {
            drop(permit);
            if let Err(e) = self.truncate(ino, 0, Some(fh)) {
                self.handles.remove(fh);
                return Err(e);
            }
        }
        Ok(fh)
    }

    pub fn read(&self, ino: u64, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let data = self.read_node(ino, fh, offset, size)?;
        self.stats.bytes_read.fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(data)
    }

    fn read_node(&self, ino: u64, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let node = self.node(ino)?;
        let handle = self.handles.get(fh);
        if let Some(array) = handle.as_ref().and_then(|h| h.array()) {
            array.check_present()?;
        }
        let slice = |bytes: &[u8]| {
            let start = (offset.min(bytes.len() as u64)) as usize;
            let end = (start + size as usize).min(bytes.len());
            bytes[start..end].to_vec()
        };
        match (node.kind, handle.as_ref().map(|h| &h.opened)) {
            (_, Some(Opened::Document(bytes))) => Ok(slice(bytes)),
            (_, Some(Opened::Edit { edit, .. })) => Ok(slice(&crate::error::lock(edit).bytes)),
            (_, Some(Opened::Scratch(file))) => Ok(slice(&crate::error::lock(&file.bytes))),
            (NodeKind::Scratch, _) => Ok(slice(&crate::error::lock(&self.nodes.scratch.get(&node.path).ok_or(Error::NotFound)?.bytes))),
            (NodeKind::Data, Some(Opened::Data { file, reads, .. })) => file.view.read(&self.cx, &file.array, Some(reads), offset, size),
            (NodeKind::View(format), Some(Opened::Data { file, reads, .. })) => {
                let layout = self.view_layout(&node.path, file, format)?;
                file.read_around(&self.cx, &layout, Some(reads), offset, size)
            }
            (NodeKind::View(format), _) => {
                let file = self.nodes.data_file(&self.cx, &node.path)?;
                let layout = self.view_layout(&node.path, &file, format)?;
                if format.carries_data() { file.read_around(&self.cx, &layout, None, offset, size) } else { Ok(slice(&layout.header)) }
            }
            (NodeKind::Data, _) => {
                let file = self.nodes.data_file(&self.cx, &node.path)?;
                file.view.read(&self.cx, &file.array, None, offset, size)
            }
            (NodeKind::GroupView(view), opened) => {
                let group = self.group_file(&node.path, view)?;
                let reads = match opened {
                    Some(Opened::GroupView { reads }) => Some(&reads[..]),
                    _ => None,
                };
                group.read(&self.cx, reads, offset, size)
            }
            (NodeKind::MetaFile, _) => Ok(slice(&self.nodes.document(&self.cx, &node.path)?)),
            (NodeKind::ErrorFile, _) => Ok(slice(self.nodes.error_text(&self.cx, &node.path)?.as_bytes())),
            (NodeKind::StatsFile | NodeKind::ErrorsFile, _) => Ok(slice(&self.report(node.kind))),
            (NodeKind::Prepend, _) => Err(Error::Invalid("prepend is write-only".into())),
            (NodeKind::Dir | NodeKind::ControlDir | NodeKind::SnapshotsDir | NodeKind::SnapshotDir, _) => Err(Error::IsADirectory),
        }
    }

    /// Write to `data` (over the dirty limit, the array is flushed before returning), or stage
    /// bytes written to `prepend`.
    pub fn write(&self, ino: u64, fh: u64, offset: u64, data: &[u8], append: bool) -> Result<u32> {
        let node = self.node(ino)?;
        let _permit = self.change_permit()?;
        let handle = self.handle(fh)?;
        match (node.kind, &handle.opened) {
            (NodeKind::Prepend, Opened::Prepend { spool, .. }) => crate::error::lock(spool).write(offset, data)?,
            (NodeKind::Prepend, _) => return Err(Error::Invalid("prepend is not open for writing".into())),
            (NodeKind::Data, Opened::Data { file, staged, .. }) => {
                file.view.write(&self.cx, &file.array, staged, offset, data, append)?;
                self.cx.invalidate_files(&file.array, DATA);
            }
            (NodeKind::View(format), Opened::Data { file, staged, .. }) => {
                let layout = self.view_layout(&node.path, file, format)?;
                file.write_around(&self.cx, &layout, staged, offset, data)?;
                self.cx.invalidate_files(&file.array, format.file_name());
            }
            (_, Opened::Edit { edit, .. }) => {
                let mut edit = crate::error::lock(edit);
                edit.bytes.write_at(offset, data)?;
                edit.dirty = true;
            }
            (_, Opened::Scratch(file)) => self.nodes.scratch.write(file, offset, data)?,
            // A copy onto a file the mount makes (`mv` between stores): what it holds already.
            (_, Opened::Document(bytes)) if bytes.get(offset as usize..).is_some_and(|rest| rest.starts_with(data)) => {}
            _ => return Err(Error::NotPermitted("only data, prepend and metadata documents are written to".into())),
        }
        self.stats.bytes_written.fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(data.len() as u32)
    }

    /// Set the size of `data`. `truncate(2)` by path has no open file whose close would store
    /// the change, so it is stored at once; `ftruncate` waits for close.
    pub fn truncate(&self, ino: u64, size: u64, fh: Option<u64>) -> Result<Attr> {
        let node = self.node(ino)?;
        let _permit = self.change_permit()?;
        match node.kind {
            NodeKind::Data => {
                let file = self.nodes.data_file(&self.cx, &node.path)?;
                file.check_writable()?;
                let handle = fh.and_then(|fh| self.handles.get(fh));
                let staged = match handle.as_ref().map(|h| &h.opened) {
                    Some(Opened::Data { staged, .. }) => Some(staged),
                    _ => None,
                };
                file.view.truncate(&self.cx, &file.array, staged, size)?;
                self.cx.invalidate_files(&file.array, DATA);
            }
            NodeKind::MetaFile | NodeKind::Scratch => match fh.and_then(|fh| self.handles.get(fh)).as_ref().map(|h| &h.opened) {
                Some(Opened::Edit { edit, .. }) => {
                    let mut edit = crate::error::lock(edit);
                    edit.bytes.resize(size)?;
                    edit.dirty = true;
                }
                _ if node.kind == NodeKind::Scratch => {
                    let file = self.nodes.scratch.get(&node.path).ok_or(Error::NotFound)?;
                    self.nodes.scratch.truncate(&file, size)?
                }
                _ => return Err(Error::NotPermitted("a metadata document is replaced by writing a whole one".into())),
            },
            NodeKind::View(_) if size == self.getattr(ino)?.size => {}
            NodeKind::View(_) => return Err(Error::Unsupported("a view does not change the array's size: resize it through data".into())),
            // Opening `prepend` for writing truncates it: it is always empty.
            NodeKind::Prepend if size == 0 => {}
            _ => return Err(Error::NotPermitted("only data can change size".into())),
        }
        self.getattr(ino)
    }

    /// close() by `pid`: what the handle's rules say (`Handle::on_flush`); the first error is
    /// returned.
    pub fn flush(&self, fh: u64, pid: u32) -> Result<()> {
        let Some(handle) = self.handles.get(fh) else { return Ok(()) };
        let closed = self.close(handle.on_flush(pid));
        closed.and(handle.lost())
    }

    /// The last close of a file (`Handle::on_release`); errors can only be logged here.
    pub fn release(&self, fh: u64) {
        let Some(handle) = self.handles.remove(fh) else { return };
        let closed = self.close(handle.on_release());
        if let Err(e) = closed.and(handle.lost()) {
            match handle.array() {
                Some(array) => tracing::error!(array = %display_path(&array.array().path), "write-back at release failed: {e}"),
                None => tracing::error!("storing a document at release failed: {e}"),
            }
        }
    }

    fn close(&self, what: OnClose<'_>) -> Result<()> {
        match what {
            OnClose::Nothing => Ok(()),
            OnClose::Document { key, edit, last, writer } => {
                let written = {
                    let mut edit = crate::error::lock(edit);
                    std::mem::take(&mut edit.dirty).then(|| edit.bytes.to_vec())
                };
                // A saved document is durable when `close` returns (on Icechunk: committed).
                let stored = match written {
                    Some(bytes) => self
                        .change_permit()
                        .and_then(|_permit| self.commit_document(key, &bytes, writer))
                        .and_then(|()| self.cx.store.sync(&[key.to_string()])),
                    None => Ok(()),
                };
                if last {
                    self.nodes.end_edit(key, edit);
                }
                stored
            }
            OnClose::Flush(array) => self.cx.flush_array(array),
            OnClose::Commit(file, staged) => {
                let _permit = self.change_permit()?;
                file.view.commit(&self.cx, &file.array, staged)
            }
            OnClose::Prepend(array, spool) => {
                // The permit before the spool, as a write takes them (the lock order).
                let permit = self.change_permit();
                let mut spool = crate::error::lock(spool);
                if spool.is_empty() {
                    return Ok(());
                }
                let _permit = permit?;
                prepend::commit(array, &mut spool, &self.cx.cache, &self.cx.pool, self.cx.next_id())
                    .inspect_err(|e| tracing::warn!(array = %display_path(&array.array().path), "prepend refused: {e}"))?;
                // The data file changed under the kernel's cache: every page moved.
                self.cx.invalidate_data(array);
                Ok(())
            }
        }
    }

    /// fsync(): flush, then make the written files and their directories durable.
    pub fn fsync(&self, fh: u64) -> Result<()> {
        let Some(handle) = self.handles.get(fh) else { return Ok(()) };
        if let Opened::Edit { key, edit } = &handle.opened {
            // A document stored is synced as it is stored (`close`): nothing else to sync.
            return self.close(OnClose::Document { key, edit, last: false, writer: handle.opener });
        }
        let Some(array) = handle.array() else { return Ok(()) };
        let flushed = self.cx.flush_array(array);
        flushed.and(handle.lost())?;
        writeback::sync(array, self.cx.store.as_ref())
    }

    /// The daemon stops: its private spool directory goes.
    pub fn remove_spool(&self) {
        self.cx.spool.remove();
    }

    /// Store everything still dirty (unmount): what could not be stored, array by array.
    pub fn flush_all(&self) -> FlushReport {
        let mut unstored = Vec::new();
        for a in &self.nodes.open_arrays() {
            if let Err(e) = self.cx.flush_array(a).and_then(|_| writeback::sync(a, self.cx.store.as_ref())) {
                let path = display_path(&a.array().path);
                tracing::error!(array = %path, "flush at unmount failed: {e}");
                unstored.push(Unstored { array: path, bytes: a.written_unstored.load(Ordering::Relaxed), error: e.to_string() });
            }
        }
        // What no array carried (hierarchy edits): on Icechunk, the last commit.
        if let Err(e) = self.cx.store.sync(&[]) {
            tracing::error!("the store's last sync at unmount failed: {e}");
            unstored.push(Unstored { array: "/".into(), bytes: 0, error: e.to_string() });
        }
        FlushReport { unstored }
    }

    /// Close-to-open, as NFS: unless the mount is the store's only writer, an open of an array's
    /// file (or of a group's view made from it) after the metadata TTL since its last refresh
    /// reads what other mounts stored since
    /// — the decoded chunks are read again (a new cache id; the metadata was checked by the
    /// lookup) and the kernel's pages of the array's files are dropped. Cost: the chunks read
    /// after it, once a TTL; nothing is listed.
    fn refresh(&self, array: &Arc<open::OpenArray>) {
        if self.cx.config.exclusive {
            return;
        }
        if array.due_for_refresh(self.cx.config.metadata_ttl) {
            array.replace(array.array(), self.cx.next_id());
            *crate::error::lock(&array.text) = None;
            self.cx.invalidate_data(array);
        }
    }

    /// Whether an open of `ino` that just succeeded may keep the kernel's cached pages: not for
    /// documents that change behind the kernel's back, nor once after the core changed the file.
    pub fn keep_cache(&self, ino: u64) -> bool {
        let changed = self.cx.take_stale(ino);
        !changed && !self.direct_io(ino) && matches!(self.getattr(ino), Ok(a) if !a.volatile)
    }

    /// Whether reads of `ino` go past the kernel's page cache and the size it holds: a
    /// document whose size the kernel keeps for the TTL, which another writer may have grown
    /// since (read whole, as it is now); a file of an array whose writes are rounded (the
    /// kernel would keep the bytes written, not the values the mount holds).
    pub fn direct_io(&self, ino: u64) -> bool {
        match self.node(ino) {
            Ok(n) if n.kind == NodeKind::MetaFile => self.cx.config.read_only,
            Ok(n) if matches!(n.kind, NodeKind::Data | NodeKind::View(_)) && self.cx.config.lossy_writes && !self.cx.config.read_only => {
                self.nodes.data_file(&self.cx, &n.path).is_ok_and(|f| f.array.rounds_writes())
            }
            _ => false,
        }
    }
}
