//! What is changed by hand in a node's files before the store holds it: metadata documents
//! being rewritten (and the layout each process last read in one), why a document written into
//! a directory was refused, and the files unlinked on the way to removing their directory.

use std::sync::{Arc, Mutex};

use super::{DirState, Nodes};
use crate::error::lock;
use crate::fs::context::Context;
use crate::limits::MAX_DOCUMENT_BYTES;
use crate::zarr::array::Array;
use crate::zarr::metadata::render_like;
use crate::{Error, Result};

/// A metadata document being rewritten through a handle: what it will hold at close (held in
/// memory, counted with the scratch files).
pub struct DocumentEdit {
    pub bytes: crate::fs::scratch::HeldBytes,
    /// Written to (or truncated) since opened or last stored.
    pub dirty: bool,
}

/// How many (process, document) reads are remembered.
const READS_REMEMBERED: std::num::NonZeroUsize = std::num::NonZeroUsize::new(4096).unwrap();

impl Nodes {
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
            let layout = crate::fs::open::layout_of(&doc);
            lock(&self.reads).get_or_insert_with(|| lru::LruCache::new(READS_REMEMBERED)).put((pid, key.to_string()), layout);
        }
    }

    /// The layout process `pid` last read in the document `key`, if it read one.
    pub fn read_by(&self, pid: u32, key: &str) -> Option<serde_json::Value> {
        lock(&self.reads).as_mut()?.get(&(pid, key.to_string())).cloned()
    }

    pub(super) fn is_edited(&self, key: &str) -> bool {
        lock(&self.edits).contains_key(key)
    }

    /// Start rewriting the document `key` from `bytes`; the buffer is the handle's.
    pub fn begin_edit(&self, key: &str, bytes: Vec<u8>, dirty: bool) -> Result<Arc<Mutex<DocumentEdit>>> {
        let edit = Arc::new(Mutex::new(DocumentEdit { bytes: crate::fs::scratch::HeldBytes::new(bytes, &self.scratch.held)?, dirty }));
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
}
