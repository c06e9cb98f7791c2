//! A group's view: one file made of its own bytes (headers, directories) and spans of its
//! arrays' `data` (`image.ome.tif`, `dataset.nc`). The layout says where each array's bytes go
//! and whether their elements are byte-swapped on the way (netCDF is big-endian); the bytes are
//! read through each array's `data`, with its cache and read-ahead, only where a read touches.

use std::sync::Arc;

use super::{DataFile, ReadPattern};
use crate::Result;
use crate::fs::context::Context;
use crate::zarr::array::Array;

/// Where an array's bytes lie in a group's file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Which of the file's arrays.
    pub array: usize,
    /// File offset of its first byte.
    pub start: u64,
    /// Its length: the array's bytes.
    pub len: u64,
    /// Elements of this many bytes are reversed (little- to big-endian); 1: copied as they are.
    pub swap: usize,
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
}

impl GroupFile {
    pub fn new(arrays: Vec<DataFile>, layout: Box<dyn GroupLayout>, spans: Vec<Span>) -> GroupFile {
        let made_from = arrays.iter().map(|f| f.array.array()).collect();
        GroupFile { arrays, made_from, layout, spans }
    }

    /// The paths of the arrays it is made from.
    pub fn member_paths(&self) -> impl Iterator<Item = String> + '_ {
        self.made_from.iter().map(|a| a.path.clone())
    }

    /// Whether its arrays' metadata is what the layout was made from.
    pub fn is_current(&self) -> bool {
        self.arrays.iter().zip(&self.made_from).all(|(f, a)| Arc::ptr_eq(&f.array.array(), a))
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

    /// Bytes `from..to` of a span (offsets within it), whole elements read and swapped.
    fn read_span(&self, cx: &Context, reads: Option<&[ReadPattern]>, span: &Span, from: u64, to: u64) -> Result<Vec<u8>> {
        let k = span.swap.max(1) as u64;
        let (first, last) = (from / k * k, to.div_ceil(k) * k);
        let file = &self.arrays[span.array];
        let want = (last - first) as usize;
        let mut bytes = file.view.read(cx, &file.array, reads.and_then(|r| r.get(span.array)), first, want as u32)?;
        // An array that shrank since the layout was made: its end reads as zeros.
        bytes.resize(want, 0);
        swap_elements(&mut bytes, k as usize);
        bytes.truncate((to - first) as usize);
        bytes.drain(..(from - first) as usize);
        Ok(bytes)
    }
}

/// Reverse the bytes of each element of `size` bytes (as whole words, which compile to
/// vector byte swaps).
fn swap_elements(bytes: &mut [u8], size: usize) {
    macro_rules! words {
        ($t:ty) => {
            for c in bytes.chunks_exact_mut(size) {
                let v = <$t>::from_ne_bytes(c.try_into().unwrap_or_default()).swap_bytes();
                c.copy_from_slice(&v.to_ne_bytes());
            }
        };
    }
    match size {
        2 => words!(u16),
        4 => words!(u32),
        8 => words!(u64),
        1 => {}
        _ => bytes.chunks_exact_mut(size).for_each(<[u8]>::reverse),
    }
}
