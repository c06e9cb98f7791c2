//! `data`: a byte range of the flat C-order file as the read units (chunks or inner chunks)
//! it touches, fetched through the cache (in parallel on the worker pool) and copied out.

use std::collections::HashMap;
use std::sync::Arc;

use super::{OpenArray, display_path};
use crate::Result;
use crate::cache::{CacheKey, Cached, ChunkCache, WorkerPool};
use crate::zarr::array::ReadUnits;
use crate::zarr::grid::ChunkGrid;
use crate::zarr::region::{FlatRange, Region, Strided, copy_box, fill_box};

/// The read units a flat element range touches, each with the boxes of the range inside it.
fn units_of(grid: &ChunkGrid, shape: &[u64], range: FlatRange) -> Vec<(Vec<u64>, Vec<Region>)> {
    let mut order: Vec<Vec<u64>> = Vec::new();
    let mut parts: HashMap<Vec<u64>, Vec<Region>> = HashMap::new();
    for b in range.boxes(shape) {
        let lo: Vec<u64> = b
            .iter()
            .enumerate()
            .map(|(a, r)| grid.chunk_of(a, r.0).0)
            .collect();
        let hi: Vec<u64> = b
            .iter()
            .enumerate()
            .map(|(a, r)| grid.chunk_of(a, r.1 - 1).0)
            .collect();
        let mut coords = lo.clone();
        'units: loop {
            let inter: Region = coords
                .iter()
                .enumerate()
                .map(|(a, &c)| {
                    let start = grid.chunk_start(a, c);
                    (b[a].0.max(start), b[a].1.min(start + grid.chunk_len(a, c)))
                })
                .collect();
            parts
                .entry(coords.clone())
                .or_insert_with(|| {
                    order.push(coords.clone());
                    Vec::new()
                })
                .push(inter);
            // Next coordinate in the box of units, last axis fastest.
            let mut axis = coords.len();
            loop {
                if axis == 0 {
                    break 'units;
                }
                axis -= 1;
                if coords[axis] < hi[axis] {
                    coords[axis] += 1;
                    continue 'units;
                }
                coords[axis] = lo[axis];
            }
        }
    }
    order
        .into_iter()
        .map(|c| {
            let regions = parts.remove(&c).unwrap_or_default();
            (c, regions)
        })
        .collect()
}

fn unit_key(array: &OpenArray, coords: &[u64]) -> CacheKey {
    CacheKey {
        array: array.id,
        is_index: false,
        coords: coords.into(),
    }
}

/// One read unit, decoded, through the cache.
fn load_unit(array: &OpenArray, cache: &ChunkCache, coords: &[u64]) -> Result<Arc<Cached>> {
    let a = &array.array;
    let result = cache.get_or_load(&unit_key(array, coords), || match a.read_units() {
        ReadUnits::Chunks => a.retrieve_chunk(coords).map(Cached::chunk),
        ReadUnits::InnerChunks {
            sharding,
            per_shard,
        } => {
            let shard: Vec<u64> = coords.iter().zip(&per_shard).map(|(c, p)| c / p).collect();
            let inner = coords
                .iter()
                .zip(&per_shard)
                .fold(0u64, |acc, (c, p)| acc * p + c % p) as usize;
            let index_key = CacheKey {
                array: array.id,
                is_index: true,
                coords: shard.clone().into(),
            };
            let index = cache.get_or_load(&index_key, || {
                a.retrieve_shard_index(sharding, &shard).map(Cached::index)
            })?;
            match index.as_ref() {
                Cached::Index(index) => a
                    .retrieve_inner_chunk(sharding, &shard, index, inner)
                    .map(Cached::chunk),
                _ => Ok(Cached::Missing),
            }
        }
    });
    if let Err(e) = &result {
        tracing::error!(array = %display_path(&a.path), "read failed: {e}");
    }
    result
}

/// Have a worker load a unit into the cache, unless it is there or on its way.
fn warm(array: &Arc<OpenArray>, cache: &Arc<ChunkCache>, pool: &WorkerPool, coords: Vec<u64>) {
    if !cache.is_present_or_loading(&unit_key(array, &coords)) {
        let (array, cache) = (array.clone(), cache.clone());
        pool.submit(move || {
            let _ = load_unit(&array, &cache, &coords);
        });
    }
}

/// Fetch several units in parallel: the workers start on all but the first, and this thread
/// loads them in order, joining loads already under way and doing those not yet started.
fn load_units(
    array: &Arc<OpenArray>,
    cache: &Arc<ChunkCache>,
    pool: &WorkerPool,
    units: &[Vec<u64>],
) -> Vec<Result<Arc<Cached>>> {
    for coords in units.iter().skip(1) {
        warm(array, cache, pool, coords.clone());
    }
    units.iter().map(|c| load_unit(array, cache, c)).collect()
}

/// Bytes `offset .. offset + size` of the array's flat file (short at the end of the file).
pub fn read(
    array: &Arc<OpenArray>,
    cache: &Arc<ChunkCache>,
    pool: &WorkerPool,
    offset: u64,
    size: u32,
) -> Result<Vec<u8>> {
    let meta = &array.array.meta;
    let total = meta.byte_len();
    let item = meta.item_size() as u64;
    if offset >= total || size == 0 || item == 0 {
        return Ok(Vec::new());
    }
    let end = (offset + u64::from(size)).min(total);
    let range = FlatRange {
        start: offset / item,
        end: end.div_ceil(item),
    };
    let grid = array.array.unit_grid();
    let units = units_of(&grid, &meta.shape, range);
    let coords: Vec<Vec<u64>> = units.iter().map(|(c, _)| c.clone()).collect();
    let loaded = load_units(array, cache, pool, &coords);
    let mut buf = vec![0u8; ((range.end - range.start) * item) as usize];
    for ((coords, regions), data) in units.iter().zip(loaded) {
        let data = data?;
        let chunk_shape = grid.chunk_shape(coords);
        for region in regions {
            let origin: Vec<u64> = region.iter().map(|r| r.0).collect();
            let extent: Vec<u64> = region.iter().map(|r| r.1 - r.0).collect();
            let dst = Strided::of(&meta.shape, &origin, range.start);
            match data.as_ref() {
                Cached::Chunk(chunk) => {
                    let local: Vec<u64> = origin
                        .iter()
                        .enumerate()
                        .map(|(a, &o)| o - grid.chunk_start(a, coords[a]))
                        .collect();
                    copy_box(
                        chunk,
                        &Strided::of(&chunk_shape, &local, 0),
                        &mut buf,
                        &dst,
                        &extent,
                        item as usize,
                    );
                }
                _ => fill_box(&mut buf, &dst, &extent, &meta.fill),
            }
        }
    }
    let skip = (offset - range.start * item) as usize;
    buf.truncate(skip + (end - offset) as usize);
    if skip > 0 {
        buf.drain(..skip);
    }
    Ok(buf)
}

/// Start decoding the units of the next `len` bytes after `offset` on the pool, without waiting.
pub fn read_ahead(
    array: &Arc<OpenArray>,
    cache: &Arc<ChunkCache>,
    pool: &WorkerPool,
    offset: u64,
    len: u64,
) {
    let meta = &array.array.meta;
    let item = meta.item_size() as u64;
    let total = meta.byte_len();
    if offset >= total || item == 0 || len == 0 {
        return;
    }
    let range = FlatRange {
        start: offset / item,
        end: (offset + len).min(total).div_ceil(item),
    };
    for (coords, _) in units_of(&array.array.unit_grid(), &meta.shape, range) {
        warm(array, cache, pool, coords);
    }
}
