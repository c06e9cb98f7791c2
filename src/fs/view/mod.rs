//! What an array's `data` file shows: its elements as raw bytes (`raw`), or as text, one
//! element per line, for variable-length arrays (`text`). One trait, chosen once when the array
//! is opened (`DataFile::new`), so no other code asks which it is. Views know the array, the
//! shared context and what a handle staged; they know nothing of the node tree or of handles'
//! lifetimes.

pub mod dataset;
pub mod group;
pub mod image;
mod raw;
mod readahead;
mod text;

pub use readahead::{ReadKind, ReadPattern};
pub use text::TextEdit;

use std::sync::{Arc, Mutex};

use super::context::Context;
use super::open::OpenArray;
use crate::headers::{HeaderFormat, Layout};
use crate::zarr::axes::Axes;
use crate::zarr::geo::Georeference;
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

    /// Refused for writing, and why: chunks written with its codecs would not read back as
    /// written (a lossy filter), unless the mount writes rounded values.
    pub fn check_writable(&self) -> Result<()> {
        match self.array.write_refusal() {
            Some(why) => Err(Error::NotPermitted(format!("read-only: {why}"))),
            None => Ok(()),
        }
    }

    pub fn size(&self, cx: &Context) -> Result<(u64, bool)> {
        self.view.size(cx, &self.array)
    }

    /// The own bytes of this array's `format` view with `axes` (and `geo`), when the format can express
    /// the array (else why not). Whether the mount shows the view is `Nodes::view_layout`'s.
    pub fn layout(&self, format: HeaderFormat, axes: &Axes, geo: Option<&Georeference>) -> std::result::Result<Layout, String> {
        let array = self.array.array();
        format.layout(&array.meta.dtype, &array.meta.shape, axes, geo)
    }

    /// Bytes of a view that shows its header, the bytes of `data`, then its trailer (`.npy`,
    /// `.tif`, `.nii`).
    pub fn read_around(&self, cx: &Context, layout: &Layout, reads: Option<&ReadPattern>, offset: u64, size: u32) -> Result<Vec<u8>> {
        let h = layout.header.len() as u64;
        let data_end = h + self.size(cx)?.0;
        let end = offset.saturating_add(u64::from(size)).min(data_end + layout.trailer_len());
        // Within the data part (all but the first and last requests of a scan): the bytes of
        // `data` as they come, not copied once more.
        if offset >= h && end <= data_end {
            return self.view.read(cx, &self.array, reads, offset - h, (end - offset) as u32);
        }
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        out.extend_from_slice(layout.header.get(offset.min(h) as usize..end.min(h) as usize).unwrap_or_default());
        if end > h && offset < data_end {
            let from = offset.max(h) - h;
            let to = end.min(data_end) - h;
            out.extend(self.view.read(cx, &self.array, reads, from, (to - from) as u32)?);
        }
        if end > data_end {
            out.extend(layout.trailer_bytes(offset.max(data_end) - data_end, end - data_end));
        }
        Ok(out)
    }

    /// A write to such a view: the view's own bytes may be written back unchanged (a page of
    /// an mmap), never changed; the rest are writes to `data`, within its size (a view cannot
    /// resize the array).
    pub fn write_around(&self, cx: &Context, layout: &Layout, staged: &Staged, offset: u64, data: &[u8]) -> Result<()> {
        let h = layout.header.len() as u64;
        let data_end = h + self.size(cx)?.0;
        let end = offset.saturating_add(data.len() as u64);
        if end > data_end + layout.trailer_len() {
            return Err(Error::Unsupported("a view does not change the array's size: grow it through data or prepend".into()));
        }
        // `own` is what the view holds from `at` on, within this write.
        let unchanged = |own: &[u8], at: u64| own.is_empty() || data[(at - offset) as usize..][..own.len()] == *own;
        let header_part = &layout.header[offset.min(h) as usize..end.min(h) as usize];
        let trailer_from = offset.max(data_end);
        let trailer_part = if end > trailer_from { layout.trailer_bytes(trailer_from - data_end, end - data_end) } else { Vec::new() };
        if !unchanged(header_part, offset) || !unchanged(&trailer_part, trailer_from) {
            return Err(Error::NotPermitted("a view's header is the array's type and shape: change those through data".into()));
        }
        if end <= h || offset >= data_end {
            return Ok(());
        }
        let (from, to) = (offset.max(h), end.min(data_end));
        let part = &data[(from - offset) as usize..(to - offset) as usize];
        self.view.write(cx, &self.array, staged, from - h, part, false)
    }
}
