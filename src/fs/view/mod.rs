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
use crate::Result;

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
}
