//! `data`: a byte range of the flat C-order file as the chunks it touches. Reads go through the
//! cache (in parallel on the worker pool); writes merge into whole chunks kept in memory until
//! the next flush (`writeback`); shape changes along axis 0 grow and shrink the file.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use super::display_path;
use super::open::{ChunkEdit, OpenArray, lock};
use crate::cache::{CacheKey, Cached, ChunkCache, KeyKind, WorkerPool};
use crate::zarr::array::{Array, ReadUnits};
use crate::zarr::grid::ChunkGrid;
use crate::zarr::region::{FlatRange, Region, Strided, copy_box, fill_box, filled, for_each_cell};
use crate::{Error, Result};

/// The cells of `grid` a flat element range touches, each with the boxes of the range inside it.
pub(crate) fn cells_of(grid: &ChunkGrid, shape: &[u64], range: FlatRange) -> Vec<(Vec<u64>, Vec<Region>)> {
    let mut order: Vec<Vec<u64>> = Vec::new();
    let mut parts: HashMap<Vec<u64>, Vec<Region>> = HashMap::new();
    for b in range.boxes(shape) {
        let lo: Vec<u64> = b.iter().enumerate().map(|(a, r)| grid.chunk_of(a, r.0).0).collect();
        let hi: Vec<u64> = b.iter().enumerate().map(|(a, r)| grid.chunk_of(a, r.1 - 1).0).collect();
        for_each_cell(&lo, &hi, |coords| {
            let inter: Region = coords
                .iter()
                .enumerate()
                .map(|(a, &c)| {
                    let start = grid.chunk_start(a, c);
                    (b[a].0.max(start), b[a].1.min(start + grid.chunk_len(a, c)))
                })
                .collect();
            parts
                .entry(coords.to_vec())
                .or_insert_with(|| {
                    order.push(coords.to_vec());
                    Vec::new()
                })
                .push(inter);
        });
    }
    order
        .into_iter()
        .map(|c| {
            let regions = parts.remove(&c).unwrap_or_default();
            (c, regions)
        })
        .collect()
}

pub(crate) fn unit_key(open: &OpenArray, coords: &[u64], is_index: bool) -> CacheKey {
    let kind = if is_index { KeyKind::ShardIndex } else { KeyKind::Unit };
    CacheKey { array: open.cache_id(), kind, coords: coords.into() }
}

/// One read unit (a chunk, or an inner chunk of a shard), decoded, through the cache.
fn load_unit(open: &OpenArray, a: &Array, cache: &ChunkCache, coords: &[u64]) -> Result<Arc<Cached>> {
    let result = cache.get_or_load(&unit_key(open, coords, false), || match a.read_units() {
        ReadUnits::Chunks => a.retrieve_chunk(coords).map(Cached::chunk),
        ReadUnits::InnerChunks { sharding } => {
            let (shard, inner) = a.chunk_of_unit(coords);
            let index = cache.get_or_load(&unit_key(open, &shard, true), || a.retrieve_shard_index(sharding, &shard).map(Cached::index))?;
            match index.as_ref() {
                Cached::Index(index) => a.retrieve_inner_chunk(sharding, &shard, index, inner).map(Cached::chunk),
                _ => Ok(Cached::Missing),
            }
        }
    });
    if let Err(e) = &result {
        tracing::error!(array = %display_path(&a.path), "read failed: {e}");
    }
    result
}

/// Read units smaller than this are loaded by the reading thread, not handed to workers.
const PARALLEL_UNIT_BYTES: u64 = 64 << 10;

/// Decoded bytes of the read unit at `coords`.
fn unit_bytes(array: &Array, coords: &[u64]) -> u64 {
    array.unit_grid().chunk_shape(coords).iter().product::<u64>() * array.meta.item_size() as u64
}

/// Have a worker load a unit into the cache, unless it is there or on its way. Skipped while a
/// flush of the array runs.
fn warm(open: &Arc<OpenArray>, cache: &Arc<ChunkCache>, pool: &WorkerPool, coords: Vec<u64>) {
    if !cache.is_present_or_loading(&unit_key(open, &coords, false)) {
        let (open, cache) = (open.clone(), cache.clone());
        pool.submit(move || {
            if let Some(_shared) = open.try_shared() {
                let _ = load_unit(&open, &open.array(), &cache, &coords);
            }
        });
    }
}

/// Copy `regions` of a source (a decoded chunk of `src_shape` whose first element is at
/// `src_origin`; fill when `None`) into `dst`, a flat range of the array starting at element `base`.
#[allow(clippy::too_many_arguments)]
fn copy_out(
    src: Option<&[u8]>,
    src_shape: &[u64],
    src_origin: &[u64],
    regions: &[Region],
    shape: &[u64],
    base: u64,
    dst: &mut [u8],
    fill: &[u8],
) {
    for region in regions {
        let origin: Vec<u64> = region.iter().map(|r| r.0).collect();
        let extent: Vec<u64> = region.iter().map(|r| r.1 - r.0).collect();
        let view = Strided::of(shape, &origin, base);
        match src {
            Some(chunk) => {
                let local: Vec<u64> = origin.iter().zip(src_origin).map(|(o, s)| o - s).collect();
                copy_box(chunk, &Strided::of(src_shape, &local, 0), dst, &view, &extent, fill.len());
            }
            None => fill_box(dst, &view, &extent, fill),
        }
    }
}

fn origin_of(grid: &ChunkGrid, coords: &[u64]) -> Vec<u64> {
    coords.iter().enumerate().map(|(a, &c)| grid.chunk_start(a, c)).collect()
}

/// Bytes `offset .. offset + size` of the array's flat file (short at the end of the file).
pub fn read(open: &Arc<OpenArray>, cache: &Arc<ChunkCache>, pool: &WorkerPool, offset: u64, size: u32) -> Result<Vec<u8>> {
    let _shared = open.shared();
    read_shared(open, &open.array(), cache, pool, offset, u64::from(size))
}

/// `read`, with the array's store lock already shared.
fn read_shared(
    open: &Arc<OpenArray>,
    array: &Array,
    cache: &Arc<ChunkCache>,
    pool: &WorkerPool,
    offset: u64,
    size: u64,
) -> Result<Vec<u8>> {
    let meta = &array.meta;
    let total = meta.byte_len();
    let item = meta.item_size() as u64;
    if offset >= total || size == 0 || item == 0 {
        return Ok(Vec::new());
    }
    let end = (offset + size).min(total);
    let range = FlatRange { start: offset / item, end: end.div_ceil(item) };
    let mut buf = vec![0u8; ((range.end - range.start) * item) as usize];
    let grid = array.unit_grid();
    let units = cells_of(grid, &meta.shape, range);
    // Units inside chunks changed in memory are served from there; the rest are loaded.
    let mut to_load = Vec::new();
    {
        let edits = lock(&open.edits);
        for (i, (coords, regions)) in units.iter().enumerate() {
            let outer = array.chunk_of_unit(coords).0;
            match edits.chunks.get(&outer) {
                Some(edit @ (ChunkEdit::Dirty(_) | ChunkEdit::Storing(_))) => {
                    let chunk: &[u8] = match edit {
                        ChunkEdit::Storing(c) => c,
                        ChunkEdit::Dirty(c) => c,
                        ChunkEdit::Deleted => &[],
                    };
                    let shape = meta.grid.chunk_shape(&outer);
                    copy_out(Some(chunk), &shape, &origin_of(&meta.grid, &outer), regions, &meta.shape, range.start, &mut buf, &meta.fill);
                }
                Some(ChunkEdit::Deleted) => copy_out(None, &[], &[], regions, &meta.shape, range.start, &mut buf, &meta.fill),
                None => to_load.push(i),
            }
        }
    }
    // The workers start on all but the first unit; this thread loads them in order, joining
    // loads already under way and doing those not yet started. Small units are not worth a
    // worker's round trip: this thread alone is faster at them.
    for &i in to_load.iter().skip(1) {
        if unit_bytes(array, &units[i].0) >= PARALLEL_UNIT_BYTES {
            warm(open, cache, pool, units[i].0.clone());
        }
    }
    for i in to_load {
        let (coords, regions) = &units[i];
        let data = load_unit(open, array, cache, coords)?;
        let chunk = match data.as_ref() {
            Cached::Chunk(c) => Some(&c[..]),
            _ => None,
        };
        copy_out(chunk, &grid.chunk_shape(coords), &origin_of(grid, coords), regions, &meta.shape, range.start, &mut buf, &meta.fill);
    }
    let skip = (offset - range.start * item) as usize;
    buf.truncate(skip + (end - offset) as usize);
    if skip > 0 {
        buf.drain(..skip);
    }
    Ok(buf)
}

/// Start decoding the units of the next `len` bytes after `offset` on the pool, without waiting.
pub fn read_ahead(open: &Arc<OpenArray>, cache: &Arc<ChunkCache>, pool: &WorkerPool, offset: u64, len: u64) {
    let array = open.array();
    let meta = &array.meta;
    let item = meta.item_size() as u64;
    let total = meta.byte_len();
    if offset >= total || item == 0 || len == 0 {
        return;
    }
    let range = FlatRange { start: offset / item, end: (offset + len).min(total).div_ceil(item) };
    for (coords, _) in cells_of(array.unit_grid(), &meta.shape, range) {
        if unit_bytes(&array, &coords) >= PARALLEL_UNIT_BYTES {
            warm(open, cache, pool, coords);
        }
    }
}

/// The decoded contents of a whole (outer) chunk as stored, for a read-modify-write.
fn stored_chunk(open: &OpenArray, array: &Array, cache: &ChunkCache, coords: &[u64]) -> Result<Vec<u8>> {
    let repr = array.chunk_repr(coords);
    if matches!(array.read_units(), ReadUnits::Chunks) {
        match cache.peek(&unit_key(open, coords, false)).as_deref() {
            Some(Cached::Chunk(c)) => return Ok(c.clone()),
            Some(Cached::Missing) => return Ok(filled(repr.num_elements() as usize, repr.fill)),
            _ => {}
        }
    }
    let decoded =
        array.retrieve_chunk(coords).inspect_err(|e| tracing::error!(array = %display_path(&array.path), "read for write failed: {e}"))?;
    Ok(decoded.unwrap_or_else(|| filled(repr.num_elements() as usize, repr.fill)))
}

/// Elements of the chunk at `coords` inside the array (its padding excluded).
fn in_bounds(grid: &ChunkGrid, shape: &[u64], coords: &[u64]) -> u64 {
    coords
        .iter()
        .enumerate()
        .map(|(a, &c)| (grid.chunk_start(a, c) + grid.chunk_len(a, c)).min(shape[a]).saturating_sub(grid.chunk_start(a, c)))
        .product()
}

/// Run `change` on the decoded chunk at `coords`, making it dirty: from memory when it is
/// already changed, from fill when `from_fill` (the change overwrites all of it) or it is to
/// be deleted, otherwise from the store. Returns the change in dirty bytes.
fn edit_chunk(
    open: &OpenArray,
    array: &Array,
    cache: &ChunkCache,
    coords: &[u64],
    from_fill: bool,
    change: impl FnOnce(&mut [u8]),
) -> Result<isize> {
    let fresh = || filled(array.chunk_repr(coords).num_elements() as usize, &array.meta.fill);
    let loaded = {
        let edits = lock(&open.edits);
        match edits.chunks.get(coords) {
            Some(_) => None,
            None if from_fill => Some(fresh()),
            None => {
                drop(edits);
                Some(stored_chunk(open, array, cache, coords)?)
            }
        }
    };
    let mut edits = lock(&open.edits);
    let mut added = 0isize;
    let chunk = match edits.chunks.entry(coords.to_vec()) {
        Entry::Occupied(o) => {
            let slot = o.into_mut();
            let restart = match slot {
                ChunkEdit::Deleted => Some(fresh()),
                // Being stored: change a copy; the store under way finishes with the old one.
                ChunkEdit::Storing(c) => Some(c.to_vec()),
                ChunkEdit::Dirty(_) => None,
            };
            if let Some(c) = restart {
                added += c.len() as isize;
                *slot = ChunkEdit::Dirty(c);
            }
            slot
        }
        Entry::Vacant(v) => {
            let c = loaded.unwrap_or_else(fresh);
            added += c.len() as isize;
            v.insert(ChunkEdit::Dirty(c))
        }
    };
    if let ChunkEdit::Dirty(c) = chunk {
        change(c);
    }
    edits.dirty_bytes = edits.dirty_bytes.saturating_add_signed(added);
    Ok(added)
}

/// Write `data` at `offset`; past the end the array grows by whole rows. Returns the change
/// in dirty bytes.
pub fn write(open: &Arc<OpenArray>, cache: &Arc<ChunkCache>, pool: &WorkerPool, offset: u64, data: &[u8]) -> Result<isize> {
    let _writer = open.writer();
    let _shared = open.shared();
    let mut array = open.array();
    let item = array.meta.item_size() as u64;
    let end = offset + data.len() as u64;
    if data.is_empty() {
        return Ok(0);
    }
    let mut added = 0isize;
    if end > array.meta.byte_len() {
        let row = array.meta.row_bytes();
        if array.meta.shape.is_empty() || row == 0 {
            return Err(Error::Invalid(format!("{} cannot grow: it has no rows to add", display_path(&array.path))));
        }
        let rows = end.div_ceil(row);
        added += resize_shared(open, cache, rows)?;
        array = open.array();
    }
    let meta = &array.meta;
    let range = FlatRange { start: offset / item, end: end.div_ceil(item) };
    let cells = cells_of(&meta.grid, &meta.shape, range);
    lock(&open.edits).recent = cells.iter().map(|(c, _)| c.clone()).collect();
    // Whole elements: the bytes of partly written elements at either end come from the file.
    let base = range.start * item;
    let mut buf = vec![0u8; ((range.end - range.start) * item) as usize];
    if !offset.is_multiple_of(item) || !end.is_multiple_of(item) {
        let head = read_shared(open, &array, cache, pool, base, item)?;
        let n = buf.len();
        let tail = read_shared(open, &array, cache, pool, range.end * item - item, item)?;
        buf[..head.len()].copy_from_slice(&head);
        buf[n - tail.len()..].copy_from_slice(&tail);
    }
    buf[(offset - base) as usize..(end - base) as usize].copy_from_slice(data);
    for (coords, regions) in cells {
        let covered: u64 = regions.iter().map(|r| r.iter().map(|(s, e)| e - s).product::<u64>()).sum();
        let from_fill = covered == in_bounds(&meta.grid, &meta.shape, &coords);
        let chunk_shape = meta.grid.chunk_shape(&coords);
        let origin = origin_of(&meta.grid, &coords);
        added += edit_chunk(open, &array, cache, &coords, from_fill, |chunk| {
            for region in &regions {
                let start: Vec<u64> = region.iter().map(|r| r.0).collect();
                let extent: Vec<u64> = region.iter().map(|r| r.1 - r.0).collect();
                let local: Vec<u64> = start.iter().zip(&origin).map(|(s, o)| s - o).collect();
                copy_box(
                    &buf,
                    &Strided::of(&meta.shape, &start, range.start),
                    chunk,
                    &Strided::of(&chunk_shape, &local, 0),
                    &extent,
                    item as usize,
                );
            }
        })?;
    }
    Ok(added)
}

/// Set the file's size; it must be a whole number of rows. Returns the change in dirty bytes.
pub fn truncate(open: &Arc<OpenArray>, cache: &Arc<ChunkCache>, size: u64) -> Result<isize> {
    let _writer = open.writer();
    let _shared = open.shared();
    let meta = &open.array().meta;
    let row = meta.row_bytes();
    if size == meta.byte_len() {
        return Ok(0);
    }
    if meta.shape.is_empty() {
        return Err(Error::Invalid("a 0-d array cannot change size".into()));
    }
    if row == 0 || !size.is_multiple_of(row) {
        return Err(Error::Invalid(format!("size {size} is not a whole number of {row}-byte rows")));
    }
    resize_shared(open, cache, size / row)
}

/// Call `f` for the chunks wholly past row `rows` along axis 0: enumerated when few, else
/// those stored, so that cutting a grid of 2^40 chunks costs what is stored, not the grid.
pub(crate) fn for_each_chunk_outside(array: &Array, rows: u64, f: &mut dyn FnMut(&[u64]) -> Result<()>) -> Result<()> {
    let meta = &array.meta;
    if meta.shape.is_empty() {
        return Ok(());
    }
    let old_grid = meta.grid.grid_shape(&meta.shape);
    let first_out = meta.grid.axes[0].chunks_for(rows);
    if first_out >= old_grid[0] || old_grid[1..].contains(&0) {
        return Ok(());
    }
    let cells = u128::from(old_grid[0] - first_out) * old_grid[1..].iter().map(|&n| u128::from(n)).product::<u128>();
    if cells > 1 << 16 {
        for coords in array.stored_chunks()?.into_iter().filter(|c| c[0] >= first_out) {
            f(&coords)?;
        }
        return Ok(());
    }
    let mut lo = vec![first_out];
    lo.extend(vec![0; old_grid.len() - 1]);
    let hi: Vec<u64> = old_grid.iter().map(|&n| n - 1).collect();
    let mut result = Ok(());
    for_each_cell(&lo, &hi, |coords| {
        if result.is_ok() {
            result = f(coords);
        }
    });
    result
}

/// Make axis 0 `rows` long. Shrinking marks chunks wholly outside for deletion; the chunks the
/// old or the new end cuts through get fill past the end, so growing never resurrects old values.
fn resize_shared(open: &Arc<OpenArray>, cache: &ChunkCache, rows: u64) -> Result<isize> {
    let array = open.array();
    let meta = &array.meta;
    let old_rows = meta.shape[0];
    if rows == old_rows {
        return Ok(0);
    }
    let grid = &meta.grid;
    let mut new_shape = meta.shape.clone();
    new_shape[0] = rows;
    let old_grid = grid.grid_shape(&meta.shape);
    let new_grid = grid.grid_shape(&new_shape);
    let others_hi: Vec<u64> = old_grid[1..].iter().map(|&n| n.saturating_sub(1)).collect();
    if old_grid[1..].contains(&0) {
        let mut edits = lock(&open.edits);
        open.set_shape(&mut edits, &new_shape)?;
        return Ok(0);
    }
    let mut added = 0isize;
    let band = |c0: u64| -> (Vec<u64>, Vec<u64>) {
        let mut lo = vec![c0];
        lo.extend(vec![0; others_hi.len()]);
        let mut hi = vec![c0];
        hi.extend(&others_hi);
        (lo, hi)
    };
    let cut = rows.min(old_rows);
    let (cut_chunk, cut_offset) = grid.chunk_of(0, cut);
    if rows < old_rows {
        let mut doomed: Vec<Vec<u64>> = Vec::new();
        for_each_chunk_outside(&array, rows, &mut |coords| {
            doomed.push(coords.to_vec());
            Ok(())
        })?;
        doomed.extend(lock(&open.edits).chunks.keys().filter(|c| c[0] >= new_grid[0]).cloned());
        let mut edits = lock(&open.edits);
        for coords in doomed {
            if let Some(ChunkEdit::Dirty(old)) = edits.chunks.insert(coords, ChunkEdit::Deleted) {
                added -= old.len() as isize;
            }
        }
        edits.dirty_bytes = edits.dirty_bytes.saturating_add_signed(added);
    }
    // The chunk band the cut runs through: everything from the cut on becomes fill.
    if cut_offset != 0 {
        let (lo, hi) = band(cut_chunk);
        let chunk_rows = grid.chunk_len(0, cut_chunk);
        let mut coords_list = Vec::new();
        for_each_cell(&lo, &hi, |c| coords_list.push(c.to_vec()));
        for coords in coords_list {
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
                    Some(ChunkEdit::Dirty(_) | ChunkEdit::Storing(_)) => true,
                    Some(ChunkEdit::Deleted) => false,
                    None => {
                        drop(edits);
                        let stored = stored_chunk(open, &array, cache, &coords)?;
                        let mut reset = stored.clone();
                        fill_box(&mut reset, &view, &extent, fill);
                        reset != stored
                    }
                }
            };
            if needs_reset {
                added += edit_chunk(open, &array, cache, &coords, false, |chunk| fill_box(chunk, &view, &extent, fill))?;
            }
        }
    }
    let mut edits = lock(&open.edits);
    open.set_shape(&mut edits, &new_shape)?;
    Ok(added)
}
