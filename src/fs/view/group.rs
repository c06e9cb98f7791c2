//! A group's view: one file made of its own bytes (headers, directories) and spans of its
//! arrays' `data` (`image.ome.tif`, `dataset.nc`). The layout says where each array's bytes go
//! and whether their elements are byte-swapped on the way (netCDF is big-endian); the bytes are
//! read through each array's `data`, with its cache and read-ahead, only where a read touches.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{DataFile, ReadPattern};
use crate::fs::context::Context;
use crate::headers::Element;
use crate::zarr::array::Array;
use crate::{Error, Result};

/// Where an array's bytes lie in a group's file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Which of the file's arrays.
    pub array: usize,
    /// File offset of its first byte.
    pub start: u64,
    /// Its length in the file.
    pub len: u64,
    /// How the array's elements become the file's.
    pub element: Element,
}

/// A group's file format: its length and its own bytes (headers, directories).
pub trait GroupLayout: Send + Sync {
    fn file_len(&self) -> u64;
    /// The file's own bytes in `from..to` (zeros where the arrays' spans lie).
    fn own_bytes(&self, from: u64, to: u64) -> Vec<u8>;
}

impl GroupLayout for crate::headers::ometiff::OmeTiff {
    fn file_len(&self) -> u64 {
        self.file_len()
    }

    fn own_bytes(&self, from: u64, to: u64) -> Vec<u8> {
        self.own_bytes(from, to)
    }
}

impl GroupLayout for crate::headers::netcdf::NetCdf {
    fn file_len(&self) -> u64 {
        self.file_len()
    }

    fn own_bytes(&self, from: u64, to: u64) -> Vec<u8> {
        self.own_bytes(from, to)
    }
}

/// A group's file as its arrays are now.
pub struct GroupFile {
    arrays: Vec<DataFile>,
    /// Each array's metadata when the layout was made: a change of any makes it stale.
    made_from: Vec<Arc<Array>>,
    layout: Box<dyn GroupLayout>,
    /// Where the arrays' bytes lie, in file order.
    spans: Vec<Span>,
    /// A value was met that the layout's types cannot hold: it is made again.
    outgrown: AtomicBool,
}

impl GroupFile {
    pub fn new(arrays: Vec<DataFile>, layout: Box<dyn GroupLayout>, spans: Vec<Span>) -> GroupFile {
        let made_from = arrays.iter().map(|f| f.array.array()).collect();
        GroupFile { arrays, made_from, layout, spans, outgrown: AtomicBool::new(false) }
    }

    /// The paths of the arrays it is made from.
    pub fn member_paths(&self) -> impl Iterator<Item = String> + '_ {
        self.made_from.iter().map(|a| a.path.clone())
    }

    /// Whether its arrays' metadata is what the layout was made from.
    pub fn is_current(&self) -> bool {
        !self.outgrown.load(Ordering::Relaxed) && self.arrays.iter().zip(&self.made_from).all(|(f, a)| Arc::ptr_eq(&f.array.array(), a))
    }

    pub fn arrays(&self) -> &[DataFile] {
        &self.arrays
    }

    pub fn file_len(&self) -> u64 {
        self.layout.file_len()
    }

    /// Bytes of the file that are its own (headers and directories), for `du`.
    pub fn own_len(&self) -> u64 {
        self.file_len() - self.spans.iter().map(|s| s.len).sum::<u64>()
    }

    /// Bytes `offset .. offset + size` (short at the end); `reads` is the handle's read pattern
    /// of each array.
    pub fn read(&self, cx: &Context, reads: Option<&[ReadPattern]>, offset: u64, size: u32) -> Result<Vec<u8>> {
        let end = offset.saturating_add(u64::from(size)).min(self.file_len());
        let spans = &self.spans;
        // Most reads lie within one array's span: its bytes are the reply, not copied again.
        let i = spans.partition_point(|s| s.start + s.len <= offset);
        if let Some(span) = spans.get(i).filter(|s| s.start <= offset && end <= s.start + s.len) {
            return self.read_span(cx, reads, span, offset - span.start, end - span.start);
        }
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut at = offset;
        while at < end {
            // Spans are in file order.
            let i = spans.partition_point(|s| s.start + s.len <= at);
            match spans.get(i).filter(|s| s.start <= at) {
                Some(span) => {
                    let until = end.min(span.start + span.len);
                    out.extend(self.read_span(cx, reads, span, at - span.start, until - span.start)?);
                    at = until;
                }
                None => {
                    let next = spans.get(i).map_or(end, |s| s.start).min(end);
                    out.extend(self.layout.own_bytes(at, next));
                    at = next;
                }
            }
        }
        Ok(out)
    }

    /// Bytes `from..to` of a span (offsets within it), whole elements read and encoded.
    fn read_span(&self, cx: &Context, reads: Option<&[ReadPattern]>, span: &Span, from: u64, to: u64) -> Result<Vec<u8>> {
        let (k, source_k) = (span.element.view_size() as u64, span.element.source_size() as u64);
        let (first, last) = (from / k, to.div_ceil(k));
        let file = &self.arrays[span.array];
        let want = ((last - first) * source_k) as usize;
        let mut bytes = file.view.read(cx, &file.array, reads.and_then(|r| r.get(span.array)), first * source_k, want as u32)?;
        // An array that shrank since the layout was made: its end reads as zeros.
        bytes.resize(want, 0);
        let mut bytes = span.element.encode(bytes).map_err(|value| {
            // Laid out again at the next open, from the values as they are then.
            self.outgrown.store(true, Ordering::Relaxed);
            Error::Stale(format!("{} holds {value} now, which the view's type cannot hold exactly: open it again", file.array.array().path))
        })?;
        bytes.truncate((to - first * k) as usize);
        bytes.drain(..(from - first * k) as usize);
        Ok(bytes)
    }
}
