//! Open files: what each handle holds, by what was opened, and what its close must do — the
//! rules for `flush` (every close) and `release` (the last) in one place. Carrying the rules
//! out (storing, committing) is the core's (`ZarrFs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::nodes::DocumentEdit;
use super::open::OpenArray;
use super::scratch::ScratchFile;
use super::spool::Spool;
use super::view::{DataFile, ReadPattern, Staged, TextEdit};
use crate::error::lock;

/// What a handle is open on.
pub enum Opened {
    /// A document as it was when opened (metadata, `error`, stats): a reader sees one version
    /// of it, and a large one is not read again for every page the kernel asks for. Opened for
    /// writing (a copy onto a file the mount makes itself, as `mv` between stores does), only
    /// the bytes it already holds may be written.
    Document(Arc<[u8]>),
    /// A metadata document opened for writing: the new document, stored at close.
    Edit { key: String, edit: Arc<Mutex<DocumentEdit>> },
    /// A scratch file (an editor's temporary): in memory only.
    Scratch(Arc<ScratchFile>),
    /// `data`, or a view that shows a header before its bytes (`data.npy`). Only a handle
    /// opened for writing stores (and reports) the array's changes at close; `staged` holds
    /// what the view stages until then.
    /// `lost_seen`: the array's count of dropped changes when this handle last heard of them
    /// (`OpenArray::lost_since`).
    Data { file: DataFile, writable: bool, reads: ReadPattern, staged: Staged, lost_seen: std::sync::atomic::AtomicU64 },
    /// `prepend`, opened for writing: the bytes staged for one prepend.
    Prepend { array: Arc<OpenArray>, spool: Mutex<Spool> },
    /// A group's view (`image.ome.tif`), read-only: the read pattern of each array it reads.
    GroupView { reads: Box<[ReadPattern]> },
}

pub struct Handle {
    /// The process that opened it: a prepend or text commits on its close only.
    pub opener: u32,
    pub opened: Opened,
}

/// What a close has to do.
pub enum OnClose<'a> {
    Nothing,
    /// Store what the handle staged for its view (taken out of the handle).
    Commit(&'a DataFile, TextEdit),
    /// Commit the staged prepend.
    Prepend(&'a Arc<OpenArray>, &'a Mutex<Spool>),
    /// Store the array's changes and report their errors.
    Flush(&'a Arc<OpenArray>),
    /// Store the rewritten document `key` (when it was written to) as `writer`'s; `last`: the
    /// handle goes.
    Document {
        key: &'a str,
        edit: &'a Arc<Mutex<DocumentEdit>>,
        last: bool,
        writer: u32,
    },
}

impl Handle {
    /// close() by `pid`. A prepend (or staged text) commits on the opener's close only: another
    /// process closing an inherited descriptor must not cut it short (`release` commits in any
    /// case). A reader's close neither stores nor reports what other descriptors wrote. A
    /// writer's flushes even when nothing looks dirty: another flush may have taken the chunks
    /// and not stored them yet, and this close must wait for (and report) that.
    pub fn on_flush(&self, pid: u32) -> OnClose<'_> {
        let opener = pid == self.opener;
        match &self.opened {
            Opened::Data { file, staged, writable, .. } => match if opener { lock(staged).take() } else { None } {
                Some(edit) => OnClose::Commit(file, edit),
                None if *writable => OnClose::Flush(&file.array),
                None => OnClose::Nothing,
            },
            Opened::Prepend { array, spool } if opener => OnClose::Prepend(array, spool),
            Opened::Edit { key, edit } if opener => OnClose::Document { key, edit, last: false, writer: self.opener },
            Opened::Prepend { .. } | Opened::Document(_) | Opened::Edit { .. } | Opened::Scratch(_) | Opened::GroupView { .. } => {
                OnClose::Nothing
            }
        }
    }

    /// The last close: what is still staged is committed; what is still dirty (written through
    /// mmap after the last close, or left by a failed flush) is stored.
    pub fn on_release(&self) -> OnClose<'_> {
        match &self.opened {
            Opened::Data { file, staged, writable, .. } => match lock(staged).take() {
                Some(edit) => OnClose::Commit(file, edit),
                None if *writable && file.array.is_dirty() => OnClose::Flush(&file.array),
                None => OnClose::Nothing,
            },
            Opened::Prepend { array, spool } => OnClose::Prepend(array, spool),
            Opened::Edit { key, edit } => OnClose::Document { key, edit, last: true, writer: self.opener },
            Opened::Document(_) | Opened::Scratch(_) | Opened::GroupView { .. } => OnClose::Nothing,
        }
    }

    /// Whether changes written through this handle were dropped since it last heard (another
    /// mount won a race for the array's metadata, `OpenArray::drop_lost`): then the error.
    pub fn lost(&self) -> crate::Result<()> {
        match &self.opened {
            Opened::Data { file, writable: true, lost_seen, .. } => file.array.lost_since(lost_seen),
            _ => Ok(()),
        }
    }

    /// The array whose changes an fsync through this handle makes durable.
    pub fn array(&self) -> Option<&Arc<OpenArray>> {
        match &self.opened {
            Opened::Data { file, .. } => Some(&file.array),
            Opened::Prepend { array, .. } => Some(array),
            Opened::Document(_) | Opened::Edit { .. } | Opened::Scratch(_) | Opened::GroupView { .. } => None,
        }
    }
}

/// The open handles, by id.
#[derive(Default)]
pub struct Handles {
    map: Mutex<HashMap<u64, Arc<Handle>>>,
}

impl Handles {
    pub fn insert(&self, fh: u64, handle: Handle) {
        lock(&self.map).insert(fh, Arc::new(handle));
    }

    pub fn get(&self, fh: u64) -> Option<Arc<Handle>> {
        lock(&self.map).get(&fh).cloned()
    }

    pub fn remove(&self, fh: u64) -> Option<Arc<Handle>> {
        lock(&self.map).remove(&fh)
    }

    /// Whether some handle is open on `array`'s files.
    pub fn holds(&self, array: &Arc<OpenArray>) -> bool {
        lock(&self.map).values().any(|h| h.array().is_some_and(|a| Arc::ptr_eq(a, array)))
    }

    /// Whether some handle may change `array` (open for writing, or a prepend): readers do not
    /// keep an array from being removed or moved.
    pub fn holds_for_writing(&self, array: &Arc<OpenArray>) -> bool {
        lock(&self.map).values().any(|h| match &h.opened {
            Opened::Data { file, writable, .. } => *writable && Arc::ptr_eq(&file.array, array),
            Opened::Prepend { array: a, .. } => Arc::ptr_eq(a, array),
            _ => false,
        })
    }
}
