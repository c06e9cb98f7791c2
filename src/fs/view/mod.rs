//! What an array's `data` file shows: its elements as raw bytes (`raw`), or as text, one
//! element per line, for variable-length arrays (`text`). One trait, chosen once when the array
//! is opened (`DataFile::new`), so no other code asks which it is. Views know the array, the
//! shared context and what a handle staged; they know nothing of the node tree or of handles'
//! lifetimes.

mod raw;
mod readahead;
mod text;

pub use readahead::ReadPattern;
pub use text::TextEdit;

use std::sync::{Arc, Mutex};

use super::context::Context;
use super::open::OpenArray;
use crate::headers::HeaderFormat;
use crate::{Error, Result};

/// What a handle has staged for its view until it closes (text: the new text, or the lines
/// to append).
pub type Staged = Mutex<Option<TextEdit>>;

pub trait View: Send + Sync {
    /// The file's size, and whether it changes in ways the kernel cannot predict (so that
    /// its attributes must not be cached).
    fn size(&self, cx: &Context, array: &Arc<OpenArray>) -> Result<(u64, bool)>;
    /// Bytes `offset .. offset + size` (short at the end), for a handle reading in `reads`.
    fn read(&self, cx: &Context, array: &Arc<OpenArray>, reads: Option<&ReadPattern>, offset: u64, size: u32) -> Result<Vec<u8>>;
    /// A write through a handle (`append`: opened O_APPEND) that stages in `staged`.
    fn write(&self, cx: &Context, array: &Arc<OpenArray>, staged: &Staged, offset: u64, data: &[u8], append: bool) -> Result<()>;
    /// Set the size: through a handle (`staged`: ftruncate, O_TRUNC), whose close completes
    /// the change, or by path, stored at once.
    fn truncate(&self, cx: &Context, array: &Arc<OpenArray>, staged: Option<&Staged>, size: u64) -> Result<()>;
    /// Store what a handle staged, at its close.
    fn commit(&self, cx: &Context, array: &Arc<OpenArray>, staged: TextEdit) -> Result<()>;
}

/// An array's `data`: the array and the view it is shown through.
#[derive(Clone)]
pub struct DataFile {
    pub array: Arc<OpenArray>,
    pub view: &'static dyn View,
}

impl DataFile {
    pub fn new(array: OpenArray) -> DataFile {
        let view: &'static dyn View = if array.array().meta.dtype.is_variable() { &text::TextView } else { &raw::RawView };
        DataFile { array: Arc::new(array), view }
    }

    pub fn size(&self, cx: &Context) -> Result<(u64, bool)> {
        self.view.size(cx, &self.array)
    }

    /// The header of this array's `format` view, when the mount shows that view and the
    /// format can express the array (else why not).
    pub fn header(&self, cx: &Context, format: HeaderFormat) -> std::result::Result<Vec<u8>, String> {
        if !cx.config.views.contains(&format) {
            return Err(format!("{} views are off (-o views)", format.option_name()));
        }
        let array = self.array.array();
        format.header(&array.meta.dtype, &array.meta.shape)
    }

    /// Bytes of a view that shows `header` and then the bytes of `data` (`data.npy`).
    pub fn read_after(&self, cx: &Context, header: &[u8], reads: Option<&ReadPattern>, offset: u64, size: u32) -> Result<Vec<u8>> {
        let h = header.len() as u64;
        let end = offset.saturating_add(u64::from(size));
        let mut out = header.get(offset.min(h) as usize..end.min(h) as usize).unwrap_or_default().to_vec();
        if end > h {
            let from = offset.max(h) - h;
            out.extend(self.view.read(cx, &self.array, reads, from, (end - h - from) as u32)?);
        }
        Ok(out)
    }

    /// A write to such a view: header bytes may be written back unchanged (a page of an mmap),
    /// never changed; the rest are writes to `data`, within its size (a view cannot resize).
    pub fn write_after(&self, cx: &Context, header: &[u8], staged: &Staged, offset: u64, data: &[u8]) -> Result<()> {
        let h = header.len() as u64;
        let end = offset.saturating_add(data.len() as u64);
        if offset < h {
            let n = (h - offset).min(data.len() as u64) as usize;
            if data[..n] != header[offset as usize..offset as usize + n] {
                return Err(Error::NotPermitted("a view's header is the array's type and shape: change those through data".into()));
            }
        }
        if end <= h {
            return Ok(());
        }
        if end - h > self.size(cx)?.0 {
            return Err(Error::Unsupported("a view does not change the array's size: grow it through data or prepend".into()));
        }
        let skip = h.saturating_sub(offset) as usize;
        self.view.write(cx, &self.array, staged, offset.max(h) - h, &data[skip..], false)
    }
}
