//! Reading a byte range of an array's flat C-order file as the chunks it touches: through
//! the cache, in parallel on the worker pool, from chunks changed in memory first; read-ahead
//! decodes on the pool without waiting. The layout helpers (`Cells`, `RangeBuf`) serve writes too.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use super::open::{ChunkEdit, OpenArray};
use super::shard::{load_inner, load_inner_together};
use super::stored::{Completed, complete};
use crate::Result;
use crate::cache::{Cached, ChunkCache};
use crate::error::lock;
use crate::pool::WorkerPool;
use crate::store::Version;
use crate::zarr::array::{Array, ReadUnits};
use crate::zarr::grid::ChunkGrid;
use crate::zarr::node::display_path;
use crate::zarr::region::{FlatRange, Region, Strided, c_strides, copy_box, fill_box, filled};

/// Call `f` with each cell of `grid` the boxes touch and the part of the box inside it, box by
/// box (the cells of a box in C order), until `f` breaks.
fn visit_cells(grid: &ChunkGrid, boxes: &[Region], mut f: impl FnMut(&[u64], &[(u64, u64)]) -> ControlFlow<()>) {
    let mut inside = Vec::with_capacity(grid.axes.len());
    for b in boxes {
        let flow = grid.cells_touching(b).try_for_each(|coords| {
            inside.clear();
            inside.extend(coords.iter().enumerate().map(|(a, &c)| {
                let start = grid.chunk_start(a, c);
                (b[a].0.max(start), b[a].1.min(start + grid.chunk_len(a, c)))
            }));
            f(coords, &inside)
        });
        if flow.is_break() {
            return;
        }
    }
}

/// Per axis, how many cells of `grid` the box `b` touches.
fn cells_per_axis(grid: &ChunkGrid, b: &[(u64, u64)]) -> Vec<u64> {
    let cells = grid.cells_touching(b);
    cells.end.iter().zip(&cells.start).map(|(e, s)| e - s).collect()
}

/// The boxes of `range` in batches touching at most `max_cells` cells each, boxes cut at cell
/// borders where needed: a huge read of tiny chunks is done in pieces of bounded memory; an
/// ordinary read is one batch.
fn batches(grid: &ChunkGrid, shape: &[u64], range: FlatRange, max_cells: u64) -> Vec<Vec<Region>> {
    let mut pieces = Vec::new();
    for b in range.boxes(shape) {
        split_box(grid, b, max_cells, &mut pieces);
    }
    let mut out: Vec<Vec<Region>> = Vec::new();
    let mut cells_in_last = u64::MAX;
    for piece in pieces {
        let cells = cells_per_axis(grid, &piece).iter().product::<u64>();
        match out.last_mut() {
            Some(last) if cells_in_last.saturating_add(cells) <= max_cells => {
                last.push(piece);
                cells_in_last += cells;
            }
            _ => {
                out.push(vec![piece]);
                cells_in_last = cells;
            }
        }
    }
    out
}

/// Cut `b` at cell borders into boxes of at most `max_cells` (≥ 1) cells each.
fn split_box(grid: &ChunkGrid, b: Region, max_cells: u64, out: &mut Vec<Region>) {
    let cells = cells_per_axis(grid, &b);
    let Some(axis) = cells.iter().position(|&n| n > 1).filter(|_| cells.iter().product::<u64>() > max_cells) else {
        out.push(b);
        return;
    };
    let cut = grid.chunk_start(axis, grid.chunk_of(axis, b[axis].0).0 + cells[axis] / 2);
    let (mut lo, mut hi) = (b.clone(), b);
    lo[axis].1 = cut;
    hi[axis].0 = cut;
    split_box(grid, lo, max_cells, out);
    split_box(grid, hi, max_cells, out);
}

/// The cells of a grid a flat element range touches, each with the boxes of the range inside
/// it, in C order of the cells. Held in flat vectors: one read can touch tens of thousands of
/// tiny chunks, and a few allocations per cell would cost more than the cell's work.
pub(crate) struct Cells {
    ndim: usize,
    /// `ndim` coordinates per cell.
    coords: Vec<u64>,
    /// Per cell, the end of its boxes in `spans`, counted in boxes.
    ends: Vec<usize>,
    /// `ndim` spans per box.
    spans: Vec<(u64, u64)>,
}

impl Cells {
    /// The cells of `grid` the boxes (of one flat range) touch.
    pub(crate) fn of(grid: &ChunkGrid, boxes: &[Region]) -> Cells {
        let ndim = grid.axes.len();
        let (mut coords, mut spans, mut n) = (Vec::new(), Vec::new(), 0usize);
        visit_cells(grid, boxes, |c, inside| {
            coords.extend_from_slice(c);
            spans.extend_from_slice(inside);
            n += 1;
            ControlFlow::Continue(())
        });
        if boxes.len() <= 1 {
            return Cells { ndim, coords, ends: (1..=n).collect(), spans };
        }
        // Boxes share the cells at their borders: order by cell (each box is already in C
        // order, and the sort is stable) and give each cell all its boxes.
        let cell = |i: usize| &coords[i * ndim..(i + 1) * ndim];
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&i, &j| cell(i).cmp(cell(j)));
        let mut merged = Cells { ndim, coords: Vec::with_capacity(coords.len()), ends: Vec::new(), spans: Vec::with_capacity(spans.len()) };
        for (k, &i) in order.iter().enumerate() {
            if k == 0 || cell(order[k - 1]) != cell(i) {
                merged.coords.extend_from_slice(cell(i));
                merged.ends.push(merged.ends.last().copied().unwrap_or(0));
            }
            merged.spans.extend_from_slice(&spans[i * ndim..(i + 1) * ndim]);
            if let Some(end) = merged.ends.last_mut() {
                *end += 1;
            }
        }
        merged
    }

    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(crate) fn coords(&self, i: usize) -> &[u64] {
        &self.coords[i * self.ndim..(i + 1) * self.ndim]
    }

    /// The boxes of the range inside cell `i`.
    pub(crate) fn boxes(&self, i: usize) -> impl Iterator<Item = &[(u64, u64)]> {
        let first = if i == 0 { 0 } else { self.ends[i - 1] };
        (first..self.ends[i]).map(move |b| &self.spans[b * self.ndim..(b + 1) * self.ndim])
    }
}

/// One read unit (a chunk, or an inner chunk of a shard), decoded, through the cache. For an
/// inner chunk, with the version of the shard it is of (`None`: no shard): a read takes all the
/// inner chunks of a shard from one version.
fn load_unit(open: &OpenArray, a: &Array, cache: &ChunkCache, coords: &[u64]) -> Result<(Arc<Cached>, Option<Version>)> {
    let result = match a.read_units() {
        ReadUnits::Chunks => cache
            .get_or_load_holding(&open.unit_key(coords, false), worth_holding_probed_missing(a, coords), || {
                open.check_value(a, &a.chunk_key(coords))?;
                Ok(a.retrieve_chunk(coords)?
                    .map_or(Cached::Missing, |(decoded, version)| Cached::Chunk { decoded, version: Some(version) }))
            })
            .map(|unit| (unit, None)),
        ReadUnits::InnerChunks { sharding } => load_inner(open, a, cache, sharding, coords),
    };
    if let Err(e) = &result {
        tracing::error!(array = %display_path(&a.path), "read failed: {e}");
    }
    result
}

/// Read units smaller than this are loaded by the reading thread, not handed to workers.
const PARALLEL_UNIT_BYTES: u64 = 64 << 10;

/// Reads with at least this many units to load first learn from one listing which of them are
/// absent (`Array::known_absent`), instead of probing each.
const ABSENT_LISTING_UNITS: usize = 32;

/// Reads go in batches of at most this many units (bounding their memory).
const READ_BATCH_CELLS: u64 = 4096;

/// Decoded bytes of the read unit at `coords`.
fn unit_bytes(array: &Array, coords: &[u64]) -> u64 {
    array.unit_grid().chunk_shape(coords).iter().product::<u64>() * array.meta.item_size() as u64
}

/// Whether the cache holds the unit at `coords` as missing once a listing found it absent: units
/// worth a worker are (several requests and the read-ahead touch each); tiny ones are not (their
/// entries would outweigh them, and a read of many lists their directory again instead).
fn worth_holding_missing(array: &Array, coords: &[u64]) -> bool {
    unit_bytes(array, coords) >= PARALLEL_UNIT_BYTES
}

/// Whether the cache holds the unit at `coords` as missing once a request for it found it
/// absent: as a listing's, and any unit of a store where asking again is a round trip (its entry
/// costs less than the request it saves).
fn worth_holding_probed_missing(array: &Array, coords: &[u64]) -> bool {
    worth_holding_missing(array, coords) || array.store.requests_are_round_trips()
}

/// Have a worker load a unit into the cache, unless it is there or on its way. Skipped while a
/// flush of the array runs, and once a sequential reader got to the unit first (loading it
/// itself) and is done with it: the job may wait in the queue that long.
fn warm(open: &Arc<OpenArray>, cache: &Arc<ChunkCache>, pool: &WorkerPool, coords: Vec<u64>) {
    if !cache.is_present_or_loading(&open.unit_key(&coords, false)) {
        let (open, cache) = (open.clone(), cache.clone());
        pool.submit(move || {
            if cache.was_released(&open.unit_key(&coords, false)) {
                return;
            }
            if let Some(_shared) = open.try_shared() {
                let _ = load_unit(&open, &open.array(), &cache, &coords);
            }
        });
    }
}

/// Have the workers load small units into the cache, several to a job: one job each would flood
/// the queue ahead of other work. Job `j` of `n` takes every `n`th unit from the `j`th on, so the
/// units a reader needs next are loading at once, on as many workers as there are jobs.
fn warm_small(open: &Arc<OpenArray>, cache: &Arc<ChunkCache>, pool: &WorkerPool, units: Vec<Vec<u64>>) {
    let units = Arc::new(units);
    let jobs = pool.threads().min(units.len());
    for j in 0..jobs {
        let (open, cache, units) = (open.clone(), cache.clone(), units.clone());
        pool.submit(move || {
            let Some(_shared) = open.try_shared() else { return };
            let array = open.array();
            for coords in units.iter().skip(j).step_by(jobs) {
                if load_unit(&open, &array, &cache, coords).is_err() {
                    return;
                }
            }
        });
    }
}

/// The buffer of a flat range of the array: its elements from `base` on. A write borrows the
/// caller's bytes where they are whole elements, rather than copying them first.
pub(crate) struct RangeBuf<'a, B = Vec<u8>> {
    pub shape: &'a [u64],
    pub base: u64,
    pub item: usize,
    pub bytes: B,
}

impl<B: AsRef<[u8]>> RangeBuf<'_, B> {
    /// For a box of the range inside the chunk at `coords` of `grid`: its view in this buffer,
    /// its view in the chunk, and its extent.
    fn views(&self, grid: &ChunkGrid, coords: &[u64], b: &[(u64, u64)]) -> (Strided, Strided, Vec<u64>) {
        let origin: Vec<u64> = b.iter().map(|r| r.0).collect();
        let local: Vec<u64> = origin.iter().enumerate().map(|(a, o)| o - grid.chunk_start(a, coords[a])).collect();
        let extent = b.iter().map(|r| r.1 - r.0).collect();
        (Strided::of(self.shape, &origin, self.base), Strided::of(&grid.chunk_shape(coords), &local, 0), extent)
    }

    /// Mark the elements of `boxes` in the mask of the chunk at `coords` of `grid`.
    pub(crate) fn mark_in_chunk<'b>(
        &self,
        grid: &ChunkGrid,
        coords: &[u64],
        mask: &mut super::merge::ElementMask,
        boxes: impl Iterator<Item = &'b [(u64, u64)]>,
    ) {
        for b in boxes {
            let (_, in_chunk, extent) = self.views(grid, coords, b);
            mask.mark_box(&in_chunk, &extent);
        }
    }

    /// Copy `boxes` into the decoded chunk at `coords` of `grid`.
    pub(crate) fn copy_into_chunk<'b>(
        &self,
        grid: &ChunkGrid,
        coords: &[u64],
        chunk: &mut [u8],
        boxes: impl Iterator<Item = &'b [(u64, u64)]>,
    ) {
        for b in boxes {
            let (in_range, in_chunk, extent) = self.views(grid, coords, b);
            copy_box(self.bytes.as_ref(), &in_range, chunk, &in_chunk, &extent, self.item);
        }
    }
}

impl RangeBuf<'_> {
    /// Fill `boxes` of the cell at `coords` of `grid` with `fill`.
    fn fill_box_of<'b>(&mut self, grid: &ChunkGrid, coords: &[u64], boxes: impl Iterator<Item = &'b [(u64, u64)]>, fill: &[u8]) {
        for b in boxes {
            let (in_range, _, extent) = self.views(grid, coords, b);
            fill_box(&mut self.bytes, &in_range, &extent, fill);
        }
    }

    /// Copy `boxes` out of the decoded chunk at `coords` of `grid`.
    fn copy_from_chunk<'b>(&mut self, grid: &ChunkGrid, coords: &[u64], chunk: &[u8], boxes: impl Iterator<Item = &'b [(u64, u64)]>) {
        for b in boxes {
            let (in_range, in_chunk, extent) = self.views(grid, coords, b);
            copy_box(chunk, &in_chunk, &mut self.bytes, &in_range, &extent, self.item);
        }
    }
}

/// Bytes `offset .. offset + size` of the array's flat file (short at the end of the file).
pub fn read(open: &Arc<OpenArray>, cache: &Arc<ChunkCache>, pool: &WorkerPool, offset: u64, size: u32) -> Result<Vec<u8>> {
    let _shared = open.shared();
    read_shared(open, &open.array(), cache, pool, offset, u64::from(size))
}

/// `read`, with the array's store lock already shared.
pub(crate) fn read_shared(
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
    // Fill to start with: units absent or deleted need no copy.
    let mut buf = RangeBuf {
        shape: &meta.shape,
        base: range.start,
        item: item as usize,
        bytes: filled((range.end - range.start) as usize, &meta.fill)?,
    };
    let grid = array.unit_grid();
    for batch in batches(grid, &meta.shape, range, READ_BATCH_CELLS) {
        let cells = Cells::of(grid, &batch);
        // A shard rewritten by another program part way through: read again, from its new write.
        let mut tries = 0;
        loop {
            match read_units(open, array, cache, pool, &cells, &mut buf) {
                Err(crate::Error::Stale(_)) if tries < 3 => tries += 1,
                other => break other?,
            }
        }
    }
    let mut bytes = buf.bytes;
    let skip = (offset - range.start * item) as usize;
    bytes.truncate(skip + (end - offset) as usize);
    if skip > 0 {
        bytes.drain(..skip);
    }
    Ok(bytes)
}

/// Copy the units of `units` into `buf`: from chunks changed in memory, else through the cache.
fn read_units(
    open: &Arc<OpenArray>,
    array: &Array,
    cache: &Arc<ChunkCache>,
    pool: &WorkerPool,
    units: &Cells,
    buf: &mut RangeBuf,
) -> Result<()> {
    let (meta, grid) = (&array.meta, array.unit_grid());
    // Units inside chunks changed in memory are served from there; the rest are loaded.
    let mut to_load = Vec::new();
    // Units of chunks written here but never read: the stored chunk beneath is read first.
    let mut unread: Vec<usize> = Vec::new();
    let edits = lock(&open.edits);
    if edits.chunks.is_empty() {
        to_load.extend(0..units.len());
    } else {
        for i in 0..units.len() {
            let outer = array.chunk_of_unit(units.coords(i)).0;
            match edits.chunks.get(outer.as_ref()) {
                Some(ChunkEdit::Dirty(_, base) | ChunkEdit::Storing(_, base)) if base.unread_written().is_some() => unread.push(i),
                Some(ChunkEdit::Dirty(c, _)) => buf.copy_from_chunk(&meta.grid, &outer, c, units.boxes(i)),
                Some(ChunkEdit::Storing(c, _)) => buf.copy_from_chunk(&meta.grid, &outer, c, units.boxes(i)),
                Some(ChunkEdit::Deleted(_)) => {}
                None => to_load.push(i),
            }
        }
    }
    drop(edits);
    // Once per chunk (a shard holds several units).
    let mut completed: HashMap<Cow<[u64]>, Completed> = HashMap::new();
    for i in unread {
        let outer = array.chunk_of_unit(units.coords(i)).0;
        if !completed.contains_key(&outer) {
            completed.insert(outer.clone(), complete(open, array, cache, &outer)?);
        }
        match &completed[&outer] {
            Completed::Bytes(c) => buf.copy_from_chunk(&meta.grid, &outer, c, units.boxes(i)),
            Completed::Fill => buf.fill_box_of(&meta.grid, &outer, units.boxes(i), &meta.fill),
            Completed::Stored => to_load.push(i),
        }
    }
    let sharded = matches!(array.read_units(), ReadUnits::InnerChunks { .. });
    // Units neither cached nor on their way may be absent: when many, one listing tells which,
    // and those it finds absent are held as missing (if worth it). A listing error leaves every
    // unit to its own probe, which reports it precisely.
    let unknown: Vec<usize> =
        to_load.iter().copied().filter(|&i| !cache.is_present_or_loading(&open.unit_key(units.coords(i), false))).collect();
    let chunks: Vec<Cow<[u64]>> = match unknown.len() >= ABSENT_LISTING_UNITS {
        true => unknown.iter().map(|&i| array.chunk_of_unit(units.coords(i)).0).collect(),
        false => Vec::new(),
    };
    // Counted in stored values: the inner chunks of a few shards are a few probes.
    if !chunks.is_empty() && (!sharded || chunks.iter().collect::<std::collections::HashSet<_>>().len() >= ABSENT_LISTING_UNITS) {
        let since = cache.changes();
        let absent = array.known_absent(chunks.iter().map(|c| c.as_ref())).unwrap_or_default();
        let mut is_absent = vec![false; units.len()];
        for (&i, a) in unknown.iter().zip(absent) {
            is_absent[i] = a;
        }
        to_load.retain(|&i| !is_absent[i]);
        let absent_keys = unknown
            .iter()
            .filter(|&&i| is_absent[i] && worth_holding_missing(array, units.coords(i)))
            .map(|&i| open.unit_key(units.coords(i), false));
        cache.insert_missing(absent_keys, since);
    }
    // The workers start on all but the first unit (the inner chunks of a shard together, with
    // as few requests as their layout allows); this thread loads them in order, joining loads
    // already under way and doing those not yet started. Small units are not worth a worker's
    // round trip: this thread alone is faster at them.
    match array.read_units() {
        ReadUnits::InnerChunks { sharding } if array.store.requests_are_round_trips() => {
            let mut mine = Vec::new();
            for (k, (shard, group)) in shard_groups(open, cache, array, to_load.iter().map(|&i| units.coords(i))).into_iter().enumerate() {
                if k > 0 && group_bytes(array, &group) >= PARALLEL_UNIT_BYTES {
                    warm_shard(open, cache, pool, shard, group);
                } else {
                    mine.push((shard, group));
                }
            }
            for (shard, group) in mine.into_iter().filter(|(_, group)| group.len() > 1) {
                let group: Vec<&[u64]> = group.iter().map(Vec::as_slice).collect();
                load_inner_together(open, array, cache, sharding, &shard, &group);
            }
        }
        // Each unit a job of its own: decoded on every core.
        _ => {
            let mut small = Vec::new();
            for &i in to_load.iter().skip(1) {
                if unit_bytes(array, units.coords(i)) >= PARALLEL_UNIT_BYTES {
                    warm(open, cache, pool, units.coords(i).to_vec());
                } else {
                    small.push(units.coords(i).to_vec());
                }
            }
            // Where each load is a round trip, small units too are loaded many at once.
            if array.store.requests_are_round_trips() {
                warm_small(open, cache, pool, small);
            }
        }
    }
    // The version of each shard the units came from: one per shard, or the read is over again.
    let mut versions: HashMap<Cow<[u64]>, Option<Version>> = HashMap::new();
    for i in to_load {
        let (unit, version) = load_unit(open, array, cache, units.coords(i))?;
        if sharded && *versions.entry(array.chunk_of_unit(units.coords(i)).0).or_insert(version) != version {
            return Err(crate::Error::Stale("a shard was rewritten while it was read".into()));
        }
        match unit.as_ref() {
            Cached::Chunk { decoded: chunk, .. } => buf.copy_from_chunk(grid, units.coords(i), chunk, units.boxes(i)),
            // A retry may find fill where the first try copied bytes.
            _ if sharded => buf.fill_box_of(grid, units.coords(i), units.boxes(i), &meta.fill),
            _ => {}
        }
    }
    Ok(())
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
    // Only units worth a worker are warmed: a window holds few of them, and looking through
    // more cells than that many (tiny chunks) is not worth it either.
    let mut budget = 4 * len.div_ceil(PARALLEL_UNIT_BYTES);
    let mut ahead = Vec::new();
    visit_cells(array.unit_grid(), &range.boxes(&meta.shape), |coords, _| {
        ahead.push(coords.to_vec());
        budget = budget.saturating_sub(1);
        if budget == 0 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
    });
    warm_units(open, cache, pool, &array, ahead.iter().map(Vec::as_slice));
}

/// Have workers load `units` into the cache (those worth a worker's round trip; `warm`); where
/// requests are round trips, the inner chunks of one shard together (`warm_shard`).
fn warm_units<'u>(
    open: &Arc<OpenArray>,
    cache: &Arc<ChunkCache>,
    pool: &WorkerPool,
    array: &Array,
    units: impl Iterator<Item = &'u [u64]>,
) {
    match array.read_units() {
        ReadUnits::InnerChunks { .. } if array.store.requests_are_round_trips() => {
            for (shard, group) in shard_groups(open, cache, array, units) {
                if group_bytes(array, &group) >= PARALLEL_UNIT_BYTES {
                    warm_shard(open, cache, pool, shard, group);
                }
            }
        }
        _ => units.filter(|u| unit_bytes(array, u) >= PARALLEL_UNIT_BYTES).for_each(|u| warm(open, cache, pool, u.to_vec())),
    }
}

/// Those of `units` neither cached nor on their way, by shard, the shards in the order their
/// first unit comes in.
fn shard_groups<'u>(
    open: &OpenArray,
    cache: &ChunkCache,
    array: &Array,
    units: impl Iterator<Item = &'u [u64]>,
) -> Vec<(Vec<u64>, Vec<Vec<u64>>)> {
    let mut shards: Vec<(Vec<u64>, Vec<Vec<u64>>)> = Vec::new();
    let mut at: HashMap<Vec<u64>, usize> = HashMap::new();
    for unit in units.filter(|u| !cache.is_present_or_loading(&open.unit_key(u, false))) {
        let shard = array.chunk_of_unit(unit).0.into_owned();
        match at.get(&shard) {
            Some(&k) => shards[k].1.push(unit.to_vec()),
            None => {
                at.insert(shard.clone(), shards.len());
                shards.push((shard, vec![unit.to_vec()]));
            }
        }
    }
    shards
}

fn group_bytes(array: &Array, group: &[Vec<u64>]) -> u64 {
    group.iter().map(|u| unit_bytes(array, u)).sum()
}

/// Have a worker load inner chunks of `shard` together (`load_inner_together`), as `warm` does
/// one unit.
fn warm_shard(open: &Arc<OpenArray>, cache: &Arc<ChunkCache>, pool: &WorkerPool, shard: Vec<u64>, group: Vec<Vec<u64>>) {
    let (open, cache) = (open.clone(), cache.clone());
    pool.submit(move || {
        let group: Vec<&[u64]> = group.iter().map(Vec::as_slice).filter(|u| !cache.was_released(&open.unit_key(u, false))).collect();
        let Some(_shared) = open.try_shared() else { return };
        let array = open.array();
        if let ReadUnits::InnerChunks { sharding } = array.read_units() {
            load_inner_together(&open, &array, &cache, sharding, &shard, &group);
        }
    });
}

/// Drop from the cache the units a sequential reader has read to their last element by
/// `offset`, looking back `behind` bytes (its previous request): the kernel keeps the pages it
/// was given, so holding them twice costs memory, and fresh memory (a page fault per page) for
/// every unit decoded next. Units dropped early by requests served out of order are decoded again.
/// As with read-ahead, only units worth a worker count, and no more cells are looked at than a
/// request of such units holds (tiny chunks are left to the LRU).
pub fn release_read(open: &OpenArray, cache: &ChunkCache, offset: u64, behind: u64) {
    let array = open.array();
    let meta = &array.meta;
    let item = meta.item_size() as u64;
    if item == 0 {
        return;
    }
    // Elements before `start` have been read whole.
    let start = (offset / item).min(meta.byte_len() / item);
    let from = offset.saturating_sub(behind) / item;
    if from >= start {
        return;
    }
    let grid = array.unit_grid();
    let strides = c_strides(&meta.shape);
    let mut budget = 4 * behind.div_ceil(PARALLEL_UNIT_BYTES);
    let mut done = Vec::new();
    visit_cells(grid, &FlatRange { start: from, end: start }.boxes(&meta.shape), |coords, _| {
        let last: u64 = coords
            .iter()
            .enumerate()
            .map(|(a, &c)| (grid.chunk_start(a, c) + grid.chunk_len(a, c)).min(meta.shape[a]).saturating_sub(1) * strides[a])
            .sum();
        if last < start && unit_bytes(&array, coords) >= PARALLEL_UNIT_BYTES {
            done.push(open.unit_key(coords, false));
        }
        budget = budget.saturating_sub(1);
        if budget == 0 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
    });
    cache.release(&done);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::region::IndexBox;
    use proptest::prelude::*;

    proptest! {
        /// Every element of the range lies in exactly one box of exactly the cell that holds it;
        /// in a batch, cells come once each, in C order, and no more than the batch allows.
        #[test]
        fn batches_of_cells_cover_the_range_once_each(
            shape in proptest::collection::vec(1u64..6, 0..4),
            chunk in proptest::collection::vec(1u64..4, 4),
            a in 0u64..400,
            len in 0u64..400,
            max_cells in 1u64..12,
        ) {
            let ndim = shape.len();
            let grid = ChunkGrid::regular(chunk[..ndim].to_vec(), ndim).unwrap();
            let total: u64 = shape.iter().product();
            let range = FlatRange { start: a.min(total), end: (a + len).min(total) };
            let strides = crate::zarr::region::c_strides(&shape);
            let mut seen = vec![0u32; (range.end - range.start) as usize];
            for batch in batches(&grid, &shape, range, max_cells) {
            let cells = Cells::of(&grid, &batch);
            prop_assert!(cells.len() as u64 <= max_cells);
            for i in 0..cells.len() {
                let coords = cells.coords(i);
                if i > 0 {
                    prop_assert!(cells.coords(i - 1) < coords);
                }
                for b in cells.boxes(i) {
                    IndexBox::of_region(b).for_each(|index| {
                        for (axis, &x) in index.iter().enumerate() {
                            assert_eq!(grid.chunk_of(axis, x).0, coords[axis]);
                        }
                        let flat: u64 = index.iter().zip(&strides).map(|(x, s)| x * s).sum();
                        assert!((range.start..range.end).contains(&flat));
                        seen[(flat - range.start) as usize] += 1;
                    });
                }
            }
            }
            prop_assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
        }
    }
}
