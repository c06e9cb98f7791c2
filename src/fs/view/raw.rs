//! `data` as raw bytes: the array's elements as one flat file, C order, little-endian.

use std::sync::Arc;

use super::{ReadKind, ReadPattern, Staged, TextEdit, View};
use crate::Result;
use crate::fs::context::Context;
use crate::fs::open::OpenArray;
use crate::fs::{read, write};
use crate::zarr::metadata::ArrayMetadata;

pub struct RawView;

impl View for RawView {
    fn size(&self, _cx: &Context, array: &Arc<OpenArray>) -> Result<(u64, bool)> {
        Ok((array.array().meta.byte_len(), false))
    }

    fn read(&self, cx: &Context, array: &Arc<OpenArray>, reads: Option<&ReadPattern>, offset: u64, size: u32) -> Result<Vec<u8>> {
        let window = cx.config.read_ahead.min(cx.cache.capacity() as u64 / 4);
        let eager = array.array().store.requests_are_round_trips();
        let kind = reads.map_or(ReadKind::Scattered, |r| r.note(offset, size, window, eager));
        if let ReadKind::Sequential { ahead: Some((from, len)), .. } = kind {
            read::read_ahead(array, &cx.cache, &cx.pool, from, len);
        }
        let mut data = read::read(array, &cx.cache, &cx.pool, offset, size)?;
        if let ReadKind::Sequential { read_before, .. } = kind {
            read::release_read(array, &cx.cache, read_before, u64::from(size));
        }
        // A file of an array whose writes are rounded is read past the page cache
        // (`direct_io`): the reply is what the reader gets, so it ends at the size.
        if !array.rounds_writes() {
            pad_last_page(&mut data, &array.array().meta, offset, size);
        }
        Ok(data)
    }

    fn write(&self, cx: &Context, array: &Arc<OpenArray>, _staged: &Staged, offset: u64, data: &[u8], append: bool) -> Result<()> {
        tracing::trace!(offset, len = data.len(), "write data");
        // O_APPEND: the kernel appends at the size it holds, which rows another mount stored
        // since may have passed. The bytes go at the end, as a local file's appends do, not
        // over those rows; the kernel's pages and size are dropped. A size inside the last row
        // is this mount's own append that ended mid-row (the row shows fill after it): the
        // next block continues it, as dd's 512-byte blocks over longer rows do.
        let meta = &array.array().meta;
        let end = meta.byte_len();
        let offset = if append && offset + meta.row_bytes() <= end {
            cx.invalidate_data(array);
            end
        } else {
            offset
        };
        write::write(array, &cx.cache, offset, data)?;
        cx.after_write(array)
    }

    fn truncate(&self, cx: &Context, array: &Arc<OpenArray>, staged: Option<&Staged>, size: u64) -> Result<()> {
        write::truncate(array, &cx.cache, size)?;
        // By path there is no open file whose close would store the change.
        if staged.is_none() {
            cx.flush_array(array)?;
        }
        Ok(())
    }

    /// Raw writes stage nothing: they are merged into chunks as they come.
    fn commit(&self, _cx: &Context, _array: &Arc<OpenArray>, _staged: TextEdit) -> Result<()> {
        Ok(())
    }
}

/// The kernel caches the page that holds the end of the file, zero past the end. A write past
/// the end grows the file without reading that page again, so the gap would show zeros where
/// the array has fill. Replying with fill up to the end of that page (the kernel shows nothing
/// past the size) keeps the cached page right.
fn pad_last_page(data: &mut Vec<u8>, meta: &ArrayMetadata, offset: u64, size: u32) {
    const PAGE: u64 = 4096;
    let total = meta.byte_len();
    let end = (offset + u64::from(size)).min(total.next_multiple_of(PAGE));
    if offset + data.len() as u64 != total || end <= total || meta.fill.is_empty() {
        return;
    }
    let item = meta.fill.len() as u64;
    data.extend((total..end).map(|p| meta.fill[(p % item) as usize]));
}
