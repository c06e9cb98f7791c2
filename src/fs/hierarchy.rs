//! Editing the hierarchy with ordinary tools: `mkdir` makes a group; a complete array document
//! written into a new (empty) group makes it an array; a rewritten document changes attributes
//! or the shape; `rm -r` / `rmdir` remove nodes; `mv` renames them. Every change goes through
//! the parser the mount reads with, is stored atomically (documents are single values) and
//! keeps consolidated metadata current. An edit that would need every chunk rewritten (a new
//! data type, codecs, grid or key encoding) is refused.

use std::sync::Arc;

use serde_json::{Value, json};

use super::context::{CONTROL_DIR, DATA, ERROR, PREPEND};
use super::handle::{Handle, Opened};
use super::nodes::DirState;
use super::open::layout_of;
use super::tree::{self, NodeKind};
use super::view::DataFile;
use super::{Attr, ZarrFs, write};
use crate::headers::HeaderFormat;
use crate::store::{self, Store};
use crate::zarr::consolidated::{self, Change, Update};
use crate::zarr::metadata::{self, ArrayMetadata, Document, NodeMetadata, ZarrFormat, render_like};
use crate::zarr::node::{METADATA_DOCUMENTS, NODE_DOCUMENTS, display_path, is_hidden, is_node};
use crate::{Error, Result};

/// The most bytes of documents a rename of a subtree reads before it moves anything (its
/// consolidated entries are rewritten from them).
const MOST_MOVED_DOCUMENT_BYTES: u64 = 256 << 20;

/// The files an array's directory shows besides its documents.
fn is_array_file(name: &str) -> bool {
    name == DATA || name == PREPEND || name == ERROR || HeaderFormat::by_file_name(name).is_some()
}

/// Whether `name` can name a new node.
fn check_node_name(name: &str) -> Result<()> {
    let bad = name.is_empty() || name == "." || name == ".." || name.contains('/') || is_hidden(name) || METADATA_DOCUMENTS.contains(&name);
    if bad || name == CONTROL_DIR {
        return Err(Error::Invalid(format!("{name:?} cannot name a node (reserved by the format or the mount)")));
    }
    Ok(())
}

/// The format of the node at `path`, from the document that makes it one.
fn node_format(store: &dyn Store, path: &str) -> Result<Option<ZarrFormat>> {
    for (name, format) in [("zarr.json", ZarrFormat::V3), (".zarray", ZarrFormat::V2), (".zgroup", ZarrFormat::V2)] {
        if store.head_current(&store::join(path, name))?.is_some() {
            return Ok(Some(format));
        }
    }
    Ok(None)
}

/// Whether `name`, left in a directory that becomes an array, is what an interrupted removal
/// of an array leaves there: chunk keys (`c/…`, `c.…`, or v2's `0.1` / `0/1`).
fn is_leftover_chunk(name: &str) -> bool {
    name == "c" || name.starts_with("c.") || (!name.is_empty() && name.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
}

impl ZarrFs {
    /// `mkdir`: a new group in a group (v3 `zarr.json`, or `.zgroup` under a v2 group).
    pub fn mkdir(&self, parent: u64, name: &str) -> Result<Attr> {
        let _permit = self.change_permit()?;
        let _hierarchy = crate::error::lock(&self.hierarchy);
        let dir = self.node(parent)?;
        if dir.kind != NodeKind::Dir {
            return Err(self.refuse_change("the mount's own directory holds no nodes"));
        }
        check_node_name(name)?;
        if !matches!(self.nodes.dir_state(&self.cx, &dir.path)?, DirState::Group(_)) {
            return Err(Error::NotPermitted(format!("{} is not a group: only groups hold nodes", display_path(&dir.path))));
        }
        if self.nodes.lookup(&self.cx, parent, name).is_ok() {
            return Err(Error::Exists);
        }
        let path = store::join(&dir.path, name);
        let store = self.cx.store.as_ref();
        let (doc_name, doc) = match node_format(store, &dir.path)?.unwrap_or(ZarrFormat::V3) {
            ZarrFormat::V3 => ("zarr.json", json!({"zarr_format": 3, "node_type": "group", "attributes": {}})),
            ZarrFormat::V2 => (".zgroup", json!({"zarr_format": 2})),
        };
        let doc = Document::from_value(doc)?;
        // What a removal interrupted long ago left there would hide under the new group.
        let cleared = self.clear_leftovers(&path, false)?;
        self.store_node_document(&path, doc_name, &render_like(None, &doc), &doc)?;
        self.nodes.forget(&path);
        tracing::info!(node = %display_path(&path), cleared, "group created");
        self.lookup(parent, name)
    }

    /// `create` (`open` with O_CREAT of a name that is not there): a metadata document, stored
    /// when its writer closes it; a node's own file unlinked before (`mv` between stores
    /// removes a file before it copies one over it), opened again; anything else is a scratch
    /// file in memory. Returns the new file's attributes and handle.
    pub fn create(&self, parent: u64, name: &str, mode: u32, truncate: bool, pid: u32) -> Result<(Attr, u64)> {
        let permit = self.change_permit()?;
        let dir = self.node(parent)?;
        if dir.kind != NodeKind::Dir {
            return Err(self.refuse_change("files are not created in the mount's own directory"));
        }
        let key = store::join(&dir.path, name);
        if self.nodes.attach(&dir.path, name) {
            let ino = self.nodes.lookup(&self.cx, parent, name)?;
            let node = self.node(ino)?;
            let opened = match node.kind {
                // A copy onto a file the mount makes itself: only what it holds may be written.
                NodeKind::Prepend => Some(Opened::Document(Arc::from(&[][..]))),
                NodeKind::ErrorFile => Some(Opened::Document(Arc::from(self.nodes.error_text(&self.cx, &dir.path)?.as_bytes()))),
                NodeKind::View(format) if !format.carries_data() => {
                    let file = self.nodes.data_file(&self.cx, &dir.path)?;
                    Some(Opened::Document(Arc::from(self.view_layout(&dir.path, &file, format)?.header)))
                }
                _ => None,
            };
            drop(permit);
            let fh = match opened {
                Some(opened) => self.insert_handle(pid, opened),
                // A document starts empty: the new one is written whole.
                None => self.open(ino, true, truncate || node.kind == NodeKind::MetaFile, pid)?,
            };
            let attr = self.getattr(ino)?;
            self.cx.tree.remember(ino);
            return Ok((attr, fh));
        }
        if self.nodes.lookup(&self.cx, parent, name).is_ok() {
            return Err(Error::Exists);
        }
        let state = self.nodes.dir_state(&self.cx, &dir.path)?;
        let (kind, opened) = if METADATA_DOCUMENTS.contains(&name) {
            if name == ".zmetadata" {
                return Err(Error::NotPermitted("consolidated metadata is kept by the mount".into()));
            }
            (NodeKind::MetaFile, Opened::Edit { key: key.clone(), edit: self.nodes.begin_edit(&key, Vec::new(), false)? })
        } else if (parent == tree::ROOT && name == CONTROL_DIR) || is_array_file(name) {
            // Not even in a group: a scratch `data` would pass for an array's (`cp -r` of an
            // array would seem to work and store nothing).
            let hint = if matches!(state, DirState::Group(_)) {
                ": a group becomes an array when an array document is written into it"
            } else {
                ""
            };
            return Err(Error::NotPermitted(format!("{name} is a name the mount keeps for its own files{hint}")));
        } else {
            (NodeKind::Scratch, Opened::Scratch(self.nodes.scratch.insert(&key, Vec::new(), mode)?))
        };
        let ino = self.cx.tree.child(parent, name, kind, key);
        let fh = self.insert_handle(pid, opened);
        let attr = self.getattr(ino)?;
        self.cx.tree.remember(ino);
        Ok((attr, fh))
    }

    /// chmod (and touch) of a scratch file: its mode is kept, times are not. Returns whether
    /// `ino` is a scratch file.
    pub fn set_scratch_mode(&self, ino: u64, mode: Option<u32>) -> Result<bool> {
        let node = self.node(ino)?;
        if node.kind != NodeKind::Scratch {
            return Ok(false);
        }
        let file = self.nodes.scratch.get(&node.path).ok_or(Error::NotFound)?;
        if let Some(mode) = mode {
            file.mode.store(mode & 0o7777, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(true)
    }

    pub(super) fn insert_handle(&self, pid: u32, opened: Opened) -> u64 {
        let fh = self.cx.next_id();
        self.handles.insert(fh, Handle { opener: pid, opened });
        fh
    }

    /// `unlink`: a scratch file is gone; a node's own file (its documents, `data`, views) is
    /// hidden until its directory is removed (`rm -r`), which is when the store changes.
    pub fn unlink(&self, parent: u64, name: &str) -> Result<()> {
        let _permit = self.change_permit()?;
        let _hierarchy = crate::error::lock(&self.hierarchy);
        let dir = self.node(parent)?;
        let node = self.node(self.nodes.lookup(&self.cx, parent, name)?)?;
        match node.kind {
            NodeKind::Scratch => drop(self.nodes.scratch.remove(&node.path)),
            NodeKind::Dir | NodeKind::ControlDir | NodeKind::SnapshotsDir | NodeKind::SnapshotDir => return Err(Error::IsADirectory),
            NodeKind::StatsFile | NodeKind::ErrorsFile => return Err(self.refuse_change("the mount's own reports are not removed")),
            // A refusal's report is gone once read and removed.
            NodeKind::ErrorFile if self.nodes.set_refusal(&dir.path, None) => {}
            NodeKind::MetaFile | NodeKind::Data | NodeKind::Prepend | NodeKind::View(_) | NodeKind::GroupView(_) | NodeKind::ErrorFile => {
                self.nodes.detach(&dir.path, name)
            }
        }
        self.cx.tree.unlink(parent, name);
        Ok(())
    }

    /// `rmdir`: remove a group that holds no nodes, or a node whose files were all unlinked
    /// (as `rm -r` does). Everything to delete is listed first (a listing that fails changes
    /// nothing), consolidated metadata is updated, then an array's chunks are deleted and the
    /// node's documents last: until they go, the node is there to be removed again, so no chunk
    /// is ever left where nothing can reach it. A failure shows the node's files again.
    pub fn rmdir(&self, parent: u64, name: &str) -> Result<()> {
        let _permit = self.change_permit()?;
        let _hierarchy = crate::error::lock(&self.hierarchy);
        let ino = self.nodes.lookup(&self.cx, parent, name)?;
        let node = self.node(ino)?;
        match node.kind {
            NodeKind::Dir => {}
            NodeKind::ControlDir | NodeKind::SnapshotsDir | NodeKind::SnapshotDir => {
                return Err(self.refuse_change("the mount's own directory is not removed"));
            }
            _ => return Err(Error::NotADirectory),
        }
        let removed = self.remove_node(ino, &node.path);
        match &removed {
            Ok(()) => {
                self.nodes.forget(&node.path);
                self.cx.tree.unlink(parent, name);
            }
            Err(_) => self.nodes.attach_all(&node.path),
        }
        removed
    }

    fn remove_node(&self, ino: u64, path: &str) -> Result<()> {
        let state = self.nodes.dir_state(&self.cx, path)?;
        // A group that holds nothing but its own documents is empty (`mkdir g; rmdir g`); an
        // array's files are its data, which `rm -r` unlinks first.
        let is_group = matches!(state, DirState::Group(_));
        if self.nodes.readdir(&self.cx, ino)?.iter().any(|e| !(is_group && METADATA_DOCUMENTS.contains(&e.name.as_str()))) {
            return Err(Error::NotEmpty);
        }
        let store = self.cx.store.as_ref();
        let format = node_format(store, path)?.unwrap_or(ZarrFormat::V3);
        let (chunks, kept) = match &state {
            DirState::Array(file) => {
                // Readers do not hold the removal up: their reads fail (ESTALE) from now on.
                if self.handles.holds_for_writing(&file.array) {
                    return Err(Error::Busy(format!("{} is open for writing", display_path(path))));
                }
                file.array.array().stored_keys()?
            }
            _ => (Vec::new(), Vec::new()),
        };
        // Before the consolidated metadata is held: discarding waits for a flush under way,
        // which may itself be waiting to update the consolidated metadata.
        if let DirState::Array(file) = &state {
            file.array.discard();
        }
        let update = Update::begin(store, &[(path, format, Change::Remove)])?;
        let deleted = store.delete_many(&chunks).and_then(|()| {
            let documents: Vec<String> = NODE_DOCUMENTS.iter().chain(&[".zattrs", ".zmetadata"]).map(|d| store::join(path, d)).collect();
            store.delete_many(&documents)
        });
        if let Err(e) = deleted {
            // The node is still there (its documents went last): so is its entry.
            if is_node(store, path).unwrap_or(true) {
                update.undo(store);
            }
            return Err(e);
        }
        if let DirState::Array(file) = &state {
            file.array.mark_removed();
        }
        store.remove_empty_dirs(path)?;
        if !kept.is_empty() {
            tracing::warn!(node = %display_path(path), "kept {} entries of its directory that are not its own: {:?}", kept.len(), &kept[..kept.len().min(5)]);
        }
        tracing::info!(node = %display_path(path), chunks = chunks.len(), "node removed");
        Ok(())
    }

    /// `rename`: scratch files move freely, and one moved over a metadata document is stored
    /// as that document (an editor's save); a document moved away leaves a copy (an editor's
    /// backup) and stays; a node moves within the store (object stores: EXDEV, so that `mv`
    /// copies through the mount instead).
    pub fn rename(&self, from: (u64, &str), to: (u64, &str), no_replace: bool, pid: u32) -> Result<()> {
        let _permit = self.change_permit()?;
        let _hierarchy = crate::error::lock(&self.hierarchy);
        let (parent, name) = from;
        let (new_parent, new_name) = to;
        let node = self.node(self.nodes.lookup(&self.cx, parent, name)?)?;
        let target_dir = self.node(new_parent)?;
        if target_dir.kind != NodeKind::Dir {
            return Err(self.refuse_change("nothing moves into the mount's own directory"));
        }
        let target = self.nodes.lookup(&self.cx, new_parent, new_name).ok().map(|ino| self.node(ino)).transpose()?;
        if target.as_ref().is_some_and(|t| Arc::ptr_eq(t, &node)) {
            return Ok(());
        }
        if no_replace && target.is_some() {
            return Err(Error::Exists);
        }
        let new_key = store::join(&target_dir.path, new_name);
        let target_kind = target.as_ref().map(|t| t.kind);
        match node.kind {
            NodeKind::Dir => return self.rename_node(&node.path, from, to, &new_key, target_kind),
            NodeKind::Scratch if METADATA_DOCUMENTS.contains(&new_name) => {
                let file = self.nodes.scratch.get(&node.path).ok_or(Error::NotFound)?;
                let bytes = crate::error::lock(&file.bytes).to_vec();
                self.store_document(&new_key, &bytes, pid)?;
                self.nodes.scratch.remove(&node.path);
                self.nodes.attach(&target_dir.path, new_name);
                self.cx.tree.rename(from, to, NodeKind::MetaFile, new_key);
                return Ok(());
            }
            _ if target_kind == Some(NodeKind::Dir) => return Err(Error::IsADirectory),
            // A node's own file belongs to its node: into another directory it can only be
            // copied (`mv` does so on EXDEV, as between file systems).
            NodeKind::MetaFile | NodeKind::Data | NodeKind::Prepend | NodeKind::View(_) | NodeKind::GroupView(_) | NodeKind::ErrorFile
                if parent != new_parent =>
            {
                return Err(Error::CrossDevice("a node's own file is copied into another node, not moved".into()));
            }
            _ if target_kind.is_some_and(|k| k != NodeKind::Scratch)
                || METADATA_DOCUMENTS.contains(&new_name)
                || is_array_file(new_name) =>
            {
                return Err(Error::NotPermitted(format!("{new_name} is a node's own file: write to it instead")));
            }
            NodeKind::Scratch => self.nodes.scratch.rename(&node.path, &new_key)?,
            NodeKind::MetaFile => {
                let bytes = self.nodes.document(&self.cx, &node.path)?;
                self.nodes.scratch.insert(&new_key, bytes, 0o644)?;
            }
            _ => return Err(Error::NotPermitted("an array's data, prepend and views stay with it".into())),
        }
        self.cx.tree.rename(from, to, NodeKind::Scratch, new_key);
        Ok(())
    }

    /// Move the node at `path` to `new_path`.
    fn rename_node(&self, path: &str, from: (u64, &str), to: (u64, &str), new_path: &str, target: Option<NodeKind>) -> Result<()> {
        check_node_name(to.1)?;
        match target {
            Some(NodeKind::Dir) => return Err(Error::NotEmpty),
            Some(_) => return Err(Error::NotADirectory),
            None => {}
        }
        let target_dir = self.node(to.0)?;
        if !matches!(self.nodes.dir_state(&self.cx, &target_dir.path)?, DirState::Group(_)) {
            return Err(Error::NotPermitted(format!("{} is not a group: only groups hold nodes", display_path(&target_dir.path))));
        }
        if new_path.starts_with(&format!("{path}/")) {
            return Err(Error::Invalid("a node cannot move beneath itself".into()));
        }
        let store = self.cx.store.as_ref();
        let format = node_format(store, path)?.unwrap_or(ZarrFormat::V3);
        if node_format(store, &target_dir.path)?.is_some_and(|f| f != format) {
            return Err(Error::Invalid("a node moves only between groups of its own Zarr format".into()));
        }
        let arrays = self.nodes.arrays_beneath(path);
        if let Some(open) = arrays.iter().find(|a| self.handles.holds_for_writing(a)) {
            return Err(Error::Busy(format!("{} is open for writing", display_path(&open.array().path))));
        }
        for array in &arrays {
            self.cx.flush_array(array)?;
        }
        // Read before anything moves: a tree that cannot be walked is not moved at all.
        let documents = consolidated::subtree_documents(store, path, MOST_MOVED_DOCUMENT_BYTES)?;
        let moved: Vec<String> = documents.iter().map(|(node, _, _)| format!("{new_path}{}", &node[path.len()..])).collect();
        let mut changes = vec![(path, format, Change::Remove)];
        changes.extend(documents.iter().zip(&moved).map(|((_, name, doc), to)| (to.as_str(), format, Change::Set(name, doc))));
        let update = Update::begin(store, &changes)?;
        if let Err(e) = store.rename_prefix(path, new_path) {
            update.undo(store);
            return Err(e);
        }
        // Files still open (readers) follow the node to its new place.
        self.nodes.moved(path, new_path);
        self.cx.tree.rename(from, to, NodeKind::Dir, new_path.to_string());
        tracing::info!(node = %display_path(path), to = %display_path(new_path), "node moved");
        Ok(())
    }

    /// Store `bytes` as the metadata document `key`, written through the mount, if the
    /// reader's parser takes it and the change is one an edit can make. Refusals are EINVAL
    /// with the reason, which the log and the directory's `error` file show; nothing is stored
    /// then.
    pub(super) fn commit_document(&self, key: &str, bytes: &[u8], writer: u32) -> Result<()> {
        let _hierarchy = crate::error::lock(&self.hierarchy);
        self.store_document(key, bytes, writer)
    }

    /// `e` as the reason the document `key` was refused: logged, shown as its directory's
    /// `error`, and EINVAL for the writer's close().
    fn refused(&self, key: &str, e: Error) -> Error {
        let busy = matches!(e, Error::Busy(_));
        let why = match e {
            Error::Invalid(m) | Error::Metadata(m) | Error::Busy(m) => m,
            other => other.to_string(),
        };
        tracing::warn!(document = %display_path(key), "document refused: {why}");
        let why = format!("{}: {why}", display_path(key));
        let dir = key.rsplit_once('/').map_or("", |(d, _)| d);
        self.nodes.set_refusal(dir, Some(&why));
        if busy { Error::Busy(why) } else { Error::Invalid(why) }
    }

    /// `commit_document`, with the hierarchy lock held.
    fn store_document(&self, key: &str, bytes: &[u8], writer: u32) -> Result<()> {
        let stored = self.check_and_store_document(key, bytes, writer);
        if stored.is_ok() {
            self.nodes.set_refusal(key.rsplit_once('/').map_or("", |(d, _)| d), None);
        }
        stored
    }

    fn check_and_store_document(&self, key: &str, bytes: &[u8], writer: u32) -> Result<()> {
        let (dir, name) = key.rsplit_once('/').unwrap_or(("", key));
        let doc = Document::parse(bytes, name).map_err(|e| self.refused(key, e))?;
        let format = if name == "zarr.json" { ZarrFormat::V3 } else { ZarrFormat::V2 };
        let store = self.cx.store.as_ref();
        if node_format(store, dir)?.is_some_and(|f| f != format) {
            return Err(self.refused(key, Error::Invalid("a document of the other Zarr format than its node's".into())));
        }
        let parsed = match name {
            ".zmetadata" => return Err(self.refused(key, Error::Invalid("consolidated metadata is kept by the mount".into()))),
            ".zattrs" => {
                if matches!(self.nodes.dir_state(&self.cx, dir)?, DirState::Broken(_)) {
                    self.nodes.forget(dir);
                }
                self.store_node_document(dir, name, bytes, &doc)?;
                return self.nodes.attributes_changed(&self.cx, dir);
            }
            "zarr.json" => metadata::parse_v3(doc.clone()),
            ".zarray" => metadata::parse_v2_array(&doc).map(|m| NodeMetadata::Array(Box::new(m))),
            _ => metadata::parse_v2_group(&doc.to_value()),
        }
        .map_err(|e| self.refused(key, e))?;
        match (self.nodes.dir_state(&self.cx, dir)?, parsed) {
            (DirState::Array(file), NodeMetadata::Array(mut meta)) => {
                // A v2 array's axis names are in `.zattrs`, which this document leaves alone.
                if meta.format == ZarrFormat::V2 {
                    meta.dimension_names = file.array.array().meta.dimension_names.clone();
                }
                self.edit_array(&file, *meta, self.nodes.read_by(writer, key)).map_err(|e| match e {
                    Error::Invalid(_) | Error::Metadata(_) | Error::Busy(_) => self.refused(key, e),
                    other => other,
                })
            }
            (DirState::Array(_), NodeMetadata::Group(_)) => {
                Err(self
                    .refused(key, Error::Invalid("an array does not become a group: remove it (rm -r) and make a group (mkdir)".into())))
            }
            (DirState::Group(_), NodeMetadata::Group(_)) => {
                self.store_node_document(dir, name, bytes, &doc)?;
                self.nodes.attributes_changed(&self.cx, dir)
            }
            (DirState::Group(_), NodeMetadata::Array(_)) => self.create_array(dir, name, bytes, &doc).map_err(|e| match e {
                Error::Invalid(_) => self.refused(key, e),
                other => other,
            }),
            // A node that could not be served, repaired.
            (DirState::Broken(_), _) => {
                self.store_node_document(dir, name, bytes, &doc)?;
                self.nodes.forget(dir);
                Ok(())
            }
        }
    }

    /// Store a node's document as given, with consolidated metadata (`also`: other changes of
    /// documents that go with it): both or neither.
    fn store_node_document(&self, path: &str, name: &str, bytes: &[u8], doc: &Document) -> Result<()> {
        self.store_node_documents(path, name, bytes, doc, None)
    }

    fn store_node_documents(&self, path: &str, name: &str, bytes: &[u8], doc: &Document, unset: Option<&str>) -> Result<()> {
        let store = self.cx.store.as_ref();
        let format = if name == "zarr.json" { ZarrFormat::V3 } else { ZarrFormat::V2 };
        let mut changes = vec![(path, format, Change::Set(name, doc))];
        changes.extend(unset.map(|u| (path, format, Change::Unset(u))));
        let update = Update::begin(store, &changes)?;
        let stored = store.set(&store::join(path, name), bytes).and_then(|_| unset.map_or(Ok(()), |u| store.delete(&store::join(path, u))));
        if stored.is_err() {
            update.undo(store);
        }
        stored.map(drop)
    }

    /// Remove from the store directory at `path` (not a node) what an interrupted removal of an
    /// array leaves there — chunk keys, temporary names — before a node is made there: they
    /// would read as its chunks or hide beneath it. Anything else is kept, or refused when
    /// `strict` (it would be lost under an array). Returns how many were removed.
    fn clear_leftovers(&self, path: &str, strict: bool) -> Result<usize> {
        let store = self.cx.store.as_ref();
        let mut leftovers = Vec::new();
        for entry in store.list_dir(path)? {
            let key = store::join(path, &entry.name);
            if METADATA_DOCUMENTS.contains(&entry.name.as_str()) {
                continue;
            }
            if entry.is_dir && is_node(store, &key)? {
                if !strict {
                    continue;
                }
                return Err(Error::Invalid(format!("the group holds the node {}: only an empty group becomes an array", entry.name)));
            }
            if is_leftover_chunk(&entry.name) || store::is_temporary(&entry.name) {
                leftovers.push((key, entry.is_dir));
            } else if strict {
                return Err(Error::Invalid(format!(
                    "the directory holds {:?}, which is not a chunk: it would be lost under an array",
                    entry.name
                )));
            }
        }
        for (key, is_dir) in &leftovers {
            if *is_dir { store.delete_prefix(key).map(drop)? } else { store.delete(key)? }
        }
        Ok(leftovers.len())
    }

    /// A group with no nodes in it becomes the array `doc` describes: all fill until written.
    fn create_array(&self, path: &str, name: &str, bytes: &[u8], doc: &Document) -> Result<()> {
        let store = self.cx.store.as_ref();
        // Chunks an interrupted removal left behind would read as the new array's.
        let cleared = self.clear_leftovers(path, true)?;
        let zgroup = (name == ".zarray" && store.head_current(&store::join(path, ".zgroup"))?.is_some()).then_some(".zgroup");
        self.store_node_documents(path, name, bytes, doc, zgroup)?;
        self.nodes.forget(path);
        // Scratch files under the names of the array's own files would hide them.
        for name in self.nodes.scratch.names_in(path).into_iter().filter(|n| is_array_file(n)) {
            self.nodes.scratch.remove(&store::join(path, &name));
        }
        tracing::info!(node = %display_path(path), cleared, "array created");
        Ok(())
    }

    /// A rewritten array document: attributes are taken as they are; a new `shape[0]` resizes
    /// the array as `ftruncate` of `data` does — when its writer changed the shape it read
    /// (`layout_edit`); anything else would need every chunk rewritten.
    fn edit_array(&self, file: &DataFile, meta: ArrayMetadata, read: Option<Value>) -> Result<()> {
        let current = file.array.array();
        let old = &current.meta;
        let (proposed, now) = (layout_of(&meta.document), layout_of(&old.document));
        let resize = match layout_edit(&proposed, &now, read.as_ref(), |l| file.array.had_layout(l)) {
            LayoutEdit::Keep => false,
            LayoutEdit::Resize => true,
            LayoutEdit::Refuse(why) => return Err(Error::Busy(why)),
        };
        // Kept, the layout is the array's whatever the document says; changed, only shape[0] may.
        let ignored: &[&str] = if resize { &["attributes", "shape"] } else { &["attributes", "shape", "chunk_grid", "chunk_key_encoding"] };
        let without = |doc: &Document| {
            let kept = doc.keys().filter(|k| !ignored.contains(k));
            Value::Object(kept.filter_map(|k| Some((k.to_string(), doc.get(k)?.clone()))).collect())
        };
        let (a, b) = (without(&old.document), without(&meta.document));
        if a != b {
            let fields = |d: &Value| d.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
            let mut changed: Vec<String> = fields(&a).into_iter().chain(fields(&b)).filter(|k| a.get(k) != b.get(k)).collect();
            changed.dedup();
            return Err(Error::Invalid(format!(
                "only attributes and shape[0] change in place; {} changed, which needs every chunk rewritten",
                changed.join(", ")
            )));
        }
        if resize {
            if meta.shape.len() != old.shape.len() || meta.shape[1..] != old.shape[1..] {
                return Err(Error::Invalid("only shape[0] changes in place (as ftruncate of data does)".into()));
            }
            file.check_writable()?;
            if !old.in_place_edits().contains(&"shape[0]") {
                return Err(Error::Invalid("this array's shape does not change in place (0-d; or text: rewrite its data file)".into()));
            }
            write::truncate(&file.array, &self.cx.cache, meta.shape[0] * old.row_bytes())?;
        }
        let attributes = meta.document.attributes().cloned();
        if old.document.attributes() != attributes.as_ref() {
            let _writer = file.array.writer();
            let next = Arc::new(file.array.array().with_attributes(attributes)?);
            file.array.set_reshaped(&mut crate::error::lock(&file.array.edits), next);
        }
        let stored = self.cx.flush_array(&file.array);
        self.cx.invalidate_data(&file.array);
        stored
    }
}

/// What a rewritten array document's layout (shape, rectilinear edges, chunk key offset:
/// `layout_of`) asks for.
#[derive(Debug, PartialEq, Eq)]
enum LayoutEdit {
    /// Nothing: the document's layout is the current one, or the one its writer read while the
    /// array has changed since (a load-edit-save of the attributes racing an appender).
    Keep,
    /// The layout its writer set.
    Resize,
    /// Neither can be told from the other: why.
    Refuse(String),
}

/// What a document with layout `proposed` does to an array whose layout is `current`: its
/// writer last read the document with layout `read` (when known), and `had` tells layouts the
/// array had before. A layout is changed only where its writer changed it; rows another writer
/// added or removed since are never silently undone.
fn layout_edit(proposed: &Value, current: &Value, read: Option<&Value>, had: impl Fn(&Value) -> bool) -> LayoutEdit {
    let shape = |l: &Value| l[0].to_string();
    match read {
        _ if proposed == current => LayoutEdit::Keep,
        Some(read) if read == proposed => LayoutEdit::Keep,
        Some(read) if read == current => LayoutEdit::Resize,
        Some(read) => LayoutEdit::Refuse(format!(
            "the array changed (shape {} to {}) since this document was read, and the document sets shape {}: read it again",
            shape(read),
            shape(current),
            shape(proposed)
        )),
        None if had(proposed) => LayoutEdit::Refuse(format!(
            "the document sets shape {}, which the array had before it became {}: a stale copy? Read the document again (or resize \
             with truncate on data)",
            shape(proposed),
            shape(current)
        )),
        None => LayoutEdit::Resize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_resizes_only_where_its_writer_changed_the_shape() {
        let l = |rows: u64| json!([[rows, 3], null, null]);
        let never = |_: &Value| false;
        // Read at 10 rows, the array grew to 20 meanwhile, written back at 10: the rows stay.
        assert_eq!(layout_edit(&l(10), &l(20), Some(&l(10)), never), LayoutEdit::Keep);
        // Read at 20, set to 12 by its writer: a resize.
        assert_eq!(layout_edit(&l(12), &l(20), Some(&l(20)), never), LayoutEdit::Resize);
        // Read at 10, set to 12, and the array is now 20: both changed.
        assert!(matches!(layout_edit(&l(12), &l(20), Some(&l(10)), never), LayoutEdit::Refuse(m) if m.contains("[20,3]")));
        // No known read: a layout the array had before is a stale copy; any other is the writer's.
        let had_10 = |x: &Value| *x == l(10);
        assert!(matches!(layout_edit(&l(10), &l(20), None, had_10), LayoutEdit::Refuse(_)));
        assert_eq!(layout_edit(&l(30), &l(20), None, had_10), LayoutEdit::Resize);
        assert_eq!(layout_edit(&l(20), &l(20), None, had_10), LayoutEdit::Keep);
    }
}
