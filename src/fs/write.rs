//! Writing a byte range of an array's flat file: a read-modify-write of the chunks it
//! touches, merged into whole decoded chunks held in memory until the next flush
//! (`writeback`); growing and shrinking axis 0 by whole rows.

use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use super::merge::{Base, ElementMask};
use super::open::{ChunkEdit, OpenArray, Touch};
use super::read::{Cells, RangeBuf};
use super::spare::chunk_buffer;
use super::stored::stored_chunk;
use crate::cache::{Cached, ChunkCache};
use crate::error::lock;
use crate::zarr::array::{Array, ReadUnits};
use crate::zarr::grid::ChunkGrid;
use crate::zarr::node::display_path;
use crate::zarr::region::{FlatRange, IndexBox, Strided, fill_box, is_filled};
use crate::{Error, Result};

/// Elements of the chunk at `coords` inside the array (its padding excluded).
fn elements_inside(grid: &ChunkGrid, shape: &[u64], coords: &[u64]) -> u64 {
    coords
        .iter()
        .enumerate()
        .map(|(a, &c)| (grid.chunk_start(a, c) + grid.chunk_len(a, c)).min(shape[a]).saturating_sub(grid.chunk_start(a, c)))
        .product()
}

/// Where a chunk that a write changes starts from, when it is not changed already.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Fill: the change overwrites all of it.
    Fill,
    /// The cached copy, or fill with a mask of what is written (`Base::Unread`).
    Cached,
    /// The stored chunk, read now where it is not cached: a part of an element is written
    /// to an array whose writes are rounded, and the element rounds whole.
    Stored,
}

/// The values a write puts in the chunks of `array`: as given, or as its codecs will give
/// them back (`--lossy-writes`), so that a read before and after the chunk is stored agree.
fn as_stored<'a>(open: &OpenArray, array: &Array, values: &'a [u8]) -> Result<Cow<'a, [u8]>> {
    if open.rounds_writes() {
        array.meta.codecs.stored_values(values.to_vec(), &array.meta.dtype).map(Cow::Owned)
    } else {
        Ok(Cow::Borrowed(values))
    }
}

/// Run `change` on the decoded chunk at `coords`, making it dirty: from memory when it is
/// already changed, from fill when `start` says (the change overwrites all of it) or it is to
/// be deleted, otherwise from the cached copy (stored over its version: a change since is
/// merged then), or from fill, not read (`Base::Unread`): the stored chunk is read when it is
/// stored or first read, so a write waits for no store. `change` marks what it writes in the
/// mask it is given (where the chunk was not written whole).
fn edit_chunk(
    open: &OpenArray,
    array: &Array,
    cache: &ChunkCache,
    coords: &[u64],
    start: Start,
    change: impl FnOnce(&mut [u8], Option<&mut ElementMask>),
) -> Result<()> {
    let elements = array.chunk_repr(coords).num_elements() as usize;
    let fresh = || chunk_buffer(elements, &array.meta.fill);
    let from_fill = start == Start::Fill;
    let loaded = {
        let edits = lock(&open.edits);
        match edits.chunks.get(coords) {
            Some(_) => None,
            None if from_fill => Some((fresh()?, Base::Whole)),
            None => {
                drop(edits);
                // What a read of the stored chunk would be refused, its write is too.
                open.check_value(array, &array.chunk_key(coords))?;
                let cached = match array.read_units() {
                    ReadUnits::Chunks => cache.peek(&open.unit_key(coords, false)),
                    ReadUnits::InnerChunks { .. } => None,
                };
                Some(match cached.as_deref() {
                    Some(Cached::Chunk { decoded, version: Some(v) }) => (decoded.clone(), Base::read(Some(*v), elements)?),
                    Some(Cached::Missing) => (fresh()?, Base::read(None, elements)?),
                    _ if start == Start::Stored => {
                        let (decoded, version) = stored_chunk(open, array, cache, coords)?;
                        (decoded, Base::read(version, elements)?)
                    }
                    _ => (fresh()?, Base::unread(elements)?),
                })
            }
        }
    };
    let mut edits = lock(&open.edits);
    let mut added = 0isize;
    let chunk = match edits.chunks.entry(coords.to_vec()) {
        Entry::Occupied(o) => {
            let slot = o.into_mut();
            let restart = match slot {
                ChunkEdit::Deleted(base) => Some((fresh()?, base.clone())),
                // Being stored: change a copy; the store under way finishes with the old one.
                ChunkEdit::Storing(c, base) => Some((c.to_vec(), base.for_copy()?)),
                ChunkEdit::Dirty(..) => None,
            };
            if let Some((c, base)) = restart {
                let c = ChunkEdit::Dirty(c, base);
                added += c.cost() as isize - slot.cost() as isize;
                *slot = c;
            }
            slot
        }
        Entry::Vacant(v) => {
            let (c, base) = match loaded {
                Some(l) => l,
                None => (fresh()?, Base::Whole),
            };
            let c = ChunkEdit::Dirty(c, base);
            added += c.cost() as isize;
            v.insert(c)
        }
    };
    if let ChunkEdit::Dirty(c, base) = chunk {
        change(c, base.written_mut());
        // Written whole now: what was read no longer matters.
        if from_fill {
            *base = Base::Whole;
        }
    }
    edits.charge(added);
    Ok(())
}

/// Write `data` at `offset`; past the end the array grows by whole rows.
pub fn write(open: &Arc<OpenArray>, cache: &Arc<ChunkCache>, offset: u64, data: &[u8]) -> Result<()> {
    let _writer = open.writer();
    let _shared = open.shared();
    let mut array = open.array();
    let item = array.meta.item_size() as u64;
    let end = offset + data.len() as u64;
    if data.is_empty() {
        return Ok(());
    }
    open.written_unstored.fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
    if end > array.meta.byte_len() {
        let row = array.meta.row_bytes();
        if array.meta.shape.is_empty() || row == 0 {
            return Err(Error::Invalid(format!("{} cannot grow: it has no rows to add", display_path(&array.path))));
        }
        let rows = end.div_ceil(row);
        resize_shared(open, cache, rows)?;
        array = open.array();
    }
    let meta = &array.meta;
    // The whole elements written; an element written only in part (at either end, where the
    // offset or the end is not a multiple of the element size) is changed in its chunk byte by
    // byte below, its other bytes as the chunk holds them, and only the bytes written count
    // when the chunk is merged into another writer's.
    let range = FlatRange { start: offset.div_ceil(item), end: end / item };
    let whole = if range.start < range.end { range.boxes(&meta.shape) } else { Vec::new() };
    let cells = Cells::of(&meta.grid, &whole);
    // Per cell: the elements this write covers, and the chunk's elements inside the array.
    let coverage: Vec<(u64, u64)> = (0..cells.len())
        .map(|i| {
            let covered = cells.boxes(i).map(|b| b.iter().map(|(s, e)| e - s).product::<u64>()).sum();
            (covered, elements_inside(&meta.grid, &meta.shape, cells.coords(i)))
        })
        .collect();
    {
        let mut edits = lock(&open.edits);
        edits.writes += 1;
        let write = edits.writes;
        for (i, &(covered, elements)) in coverage.iter().enumerate() {
            let touch = edits.touched.entry(cells.coords(i).to_vec()).or_insert(Touch { write, written: 0, elements });
            touch.write = write;
            touch.written += covered;
        }
    }
    if range.start < range.end {
        let bytes = as_stored(open, &array, &data[(range.start * item - offset) as usize..(range.end * item - offset) as usize])?;
        let bytes = &bytes[..];
        write_cells(
            open,
            &array,
            cache,
            &cells,
            &coverage,
            &RangeBuf { shape: &meta.shape, base: range.start, item: item as usize, bytes },
        )?;
    }
    // Where writes are rounded, an element written in part rounds whole, from the stored one.
    let rounds = open.rounds_writes();
    for edge in partial_edges(meta, offset, end) {
        let item = item as usize;
        let (from, to) = edge.bytes;
        let written = &data[(edge.flat * item as u64 + from as u64 - offset) as usize..][..to - from];
        let mut rounded = Ok(());
        edit_chunk(open, &array, cache, &edge.coords, if rounds { Start::Stored } else { Start::Cached }, |chunk, mask| {
            let element = &mut chunk[edge.element * item..][..item];
            let mut value = element.to_vec();
            value[from..to].copy_from_slice(written);
            match as_stored(open, &array, &value) {
                Ok(value) => {
                    element.copy_from_slice(&value);
                    if let Some(mask) = mask {
                        let (from, to) = if rounds { (0, item) } else { (from, to) };
                        mask.mark_bytes(edge.element, from, to, item);
                    }
                }
                Err(e) => rounded = Err(e),
            }
        })?;
        rounded?;
    }
    Ok(())
}

/// An element the write covers only in part: its chunk, its index in the chunk, and the bytes
/// of it written.
struct PartialEdge {
    /// Its index in the flat file.
    flat: u64,
    coords: Vec<u64>,
    element: usize,
    bytes: (usize, usize),
}

/// The elements at either end of the write of bytes `offset..end` that it covers in part.
fn partial_edges(meta: &crate::zarr::metadata::ArrayMetadata, offset: u64, end: u64) -> Vec<PartialEdge> {
    let item = meta.item_size() as u64;
    let (first, last) = (offset / item, (end - 1) / item);
    let mut edges = Vec::new();
    let head = (offset % item, if first == last { end - first * item } else { item });
    if head != (0, item) {
        edges.push((first, head));
    }
    if last != first && !end.is_multiple_of(item) {
        edges.push((last, (0, end - last * item)));
    }
    edges
        .into_iter()
        .map(|(flat, (from, to))| {
            // The element's index along each axis (C order), then its chunk and place there.
            let mut rest = flat;
            let mut index = vec![0u64; meta.shape.len()];
            for (a, &n) in meta.shape.iter().enumerate().rev() {
                index[a] = rest % n.max(1);
                rest /= n.max(1);
            }
            let (coords, within): (Vec<u64>, Vec<u64>) = index.iter().enumerate().map(|(a, &i)| meta.grid.chunk_of(a, i)).unzip();
            let shape = meta.grid.chunk_shape(&coords);
            let element = within.iter().zip(&shape).fold(0u64, |acc, (&w, &n)| acc * n + w) as usize;
            PartialEdge { flat, coords, element, bytes: (from as usize, to as usize) }
        })
        .collect()
}

/// Merge the whole elements of `buf` into the chunks of `cells`; a chunk the write covers
/// (`coverage`: elements covered, elements inside) wholly starts from fill, not from the store.
fn write_cells(
    open: &OpenArray,
    array: &Array,
    cache: &ChunkCache,
    cells: &Cells,
    coverage: &[(u64, u64)],
    buf: &RangeBuf<'_, &[u8]>,
) -> Result<()> {
    let meta = &array.meta;
    let only_fill = is_filled(buf.bytes, &meta.fill);
    for (i, &(covered, elements)) in coverage.iter().enumerate() {
        let coords = cells.coords(i);
        let from_fill = covered == elements;
        if only_fill && fill_chunk(open, array, coords, from_fill, |mask| buf.mark_in_chunk(&meta.grid, coords, mask, cells.boxes(i)))? {
            continue;
        }
        edit_chunk(open, array, cache, coords, if from_fill { Start::Fill } else { Start::Cached }, |chunk, written| {
            buf.copy_into_chunk(&meta.grid, coords, chunk, cells.boxes(i));
            if let Some(mask) = written {
                buf.mark_in_chunk(&meta.grid, coords, mask, cells.boxes(i));
            }
        })?;
    }
    Ok(())
}

/// For a write of nothing but fill (byte for byte): when the chunk at `coords` holds only fill
/// afterwards — the write covers all of it (`whole`), or it held only fill before (to be
/// deleted, or not stored) — it becomes a chunk to delete, with nothing loaded, merged or
/// encoded (`mark` marks the write's elements, for a merge into another writer's chunk).
/// Returns whether it did; if not, the write is merged as any other.
fn fill_chunk(open: &OpenArray, array: &Array, coords: &[u64], whole: bool, mark: impl FnOnce(&mut ElementMask)) -> Result<bool> {
    let unchanged = match lock(&open.edits).chunks.get_mut(coords) {
        Some(ChunkEdit::Deleted(base)) => {
            if whole {
                *base = Base::Whole;
            } else if let Some(written) = base.written_mut() {
                mark(written);
            }
            return Ok(true);
        }
        Some(_) => false,
        None => true,
    };
    if whole {
        lock(&open.edits).set(coords.to_vec(), ChunkEdit::Deleted(Base::Whole));
        return Ok(true);
    }
    // Writers are held out (`OpenArray::writer`), so the chunk stays unchanged meanwhile.
    if !(unchanged && array.chunk_version(coords)?.is_none()) {
        return Ok(false);
    }
    let mut base = Base::read(None, array.chunk_repr(coords).num_elements() as usize)?;
    if let Some(written) = base.written_mut() {
        mark(written);
    }
    lock(&open.edits).set(coords.to_vec(), ChunkEdit::Deleted(base));
    Ok(true)
}

/// Set the file's size; it must be a whole number of rows.
pub fn truncate(open: &Arc<OpenArray>, cache: &Arc<ChunkCache>, size: u64) -> Result<()> {
    let _writer = open.writer();
    let _shared = open.shared();
    let meta = &open.array().meta;
    let row = meta.row_bytes();
    if size == meta.byte_len() {
        return Ok(());
    }
    if meta.shape.is_empty() {
        return Err(Error::Invalid("a 0-d array cannot change size".into()));
    }
    if row == 0 || !size.is_multiple_of(row) {
        return Err(Error::Invalid(format!("size {size} is not a whole number of {row}-byte rows")));
    }
    resize_shared(open, cache, size / row)
}

/// Make axis 0 `rows` long. Shrinking marks chunks wholly outside for deletion, growing the
/// stored chunks wholly past the old end; the chunks the old or the new end cuts through get
/// fill past the end, so growing never resurrects old values.
fn resize_shared(open: &Arc<OpenArray>, cache: &ChunkCache, rows: u64) -> Result<()> {
    let array = open.array();
    let meta = &array.meta;
    let old_rows = meta.shape[0];
    if rows == old_rows {
        return Ok(());
    }
    let grid = &meta.grid;
    let mut new_shape = meta.shape.clone();
    new_shape[0] = rows;
    let old_grid = grid.grid_shape(&meta.shape);
    let new_grid = grid.grid_shape(&new_shape);
    let next = open.reshaped(&new_shape)?;
    if old_grid[1..].contains(&0) {
        open.set_reshaped(&mut lock(&open.edits), next);
        return Ok(());
    }
    let cut = rows.min(old_rows);
    let (cut_chunk, cut_offset) = grid.chunk_of(0, cut);
    if rows < old_rows {
        let mut doomed: Vec<Vec<u64>> = Vec::new();
        array.for_each_chunk_outside(rows, &mut |coords| {
            doomed.push(coords.to_vec());
            Ok(())
        })?;
        doomed.extend(lock(&open.edits).chunks.keys().filter(|c| c[0] >= new_grid[0]).cloned());
        let mut edits = lock(&open.edits);
        for coords in doomed {
            edits.set(coords, ChunkEdit::Deleted(Base::Whole));
        }
    } else {
        // Chunks wholly past the old end can only be strays — of a growth whose metadata never
        // landed (a full disk, a crash): they read as fill and are deleted at the next flush
        // unless written first, so rows that failed to store never come back.
        let mut strays: Vec<Vec<u64>> = Vec::new();
        next.for_each_chunk_outside(old_rows, &mut |coords| {
            strays.push(coords.to_vec());
            Ok(())
        })?;
        let mut edits = lock(&open.edits);
        for coords in strays {
            if !edits.chunks.contains_key(&coords) {
                edits.set(coords, ChunkEdit::Deleted(Base::Whole));
            }
        }
    }
    // The chunk band the cut runs through: everything from the cut on becomes fill.
    if cut_offset != 0 {
        let chunk_rows = grid.chunk_len(0, cut_chunk);
        for coords in IndexBox::band(&old_grid, cut_chunk, cut_chunk + 1).indices() {
            let shape = grid.chunk_shape(&coords);
            let mut start = vec![0u64; shape.len()];
            start[0] = cut_offset;
            let mut extent = shape.clone();
            extent[0] = chunk_rows - cut_offset;
            let view = Strided::of(&shape, &start, 0);
            let fill = &meta.fill;
            let needs_reset = {
                let edits = lock(&open.edits);
                match edits.chunks.get(&coords) {
                    Some(ChunkEdit::Dirty(..) | ChunkEdit::Storing(..)) => true,
                    Some(ChunkEdit::Deleted(_)) => false,
                    None => {
                        drop(edits);
                        let (stored, _) = stored_chunk(open, &array, cache, &coords)?;
                        let mut reset = stored.clone();
                        fill_box(&mut reset, &view, &extent, fill);
                        reset != stored
                    }
                }
            };
            if needs_reset {
                edit_chunk(open, &array, cache, &coords, Start::Cached, |chunk, written| {
                    fill_box(chunk, &view, &extent, fill);
                    if let Some(mask) = written {
                        mask.mark_box(&view, &extent);
                    }
                })?;
            }
        }
    }
    open.set_reshaped(&mut lock(&open.edits), next);
    Ok(())
}
