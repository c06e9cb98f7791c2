//! The names a directory shows: a lookup of one name, and a listing of all of them — the
//! control directory's files, the snapshots, an array's `data`, documents and views, a group's
//! child nodes (checked on every core for a huge group) — each given its inode.

use std::sync::Arc;
use std::time::Instant;

use super::{DirState, Nodes};
use crate::error::lock;
use crate::fs::context::{CONTROL_DIR, Context, DATA, ERROR, ERRORS, PREPEND, SNAPSHOTS, STATS};
use crate::fs::tree::{self, Node, NodeKind};
use crate::headers::{GroupView, HeaderFormat};
use crate::store::{self, ByteRange};
use crate::zarr::metadata::ZarrFormat;
use crate::zarr::node::{METADATA_DOCUMENTS, is_hidden, is_node};
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

/// How many of a listing's children one thread checks at least: fewer are not worth a thread.
const CHECKS_PER_THREAD: usize = 512;

impl Nodes {
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
}
