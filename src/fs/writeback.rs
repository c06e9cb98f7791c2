//! Write-back: dirty chunks are encoded on the worker pool and stored (or deleted when all
//! fill), then the metadata; `sync` makes what was written durable.

use std::sync::Arc;

use super::display_path;
use super::open::{ChunkEdit, OpenArray, lock};
use super::raw::unit_key;
use crate::cache::{Cached, ChunkCache, WorkerPool};
use crate::zarr::array::{Array, ReadUnits};
use crate::zarr::region::for_each_cell;
use crate::{Error, Result};

/// Store every changed chunk and the metadata of `open`. Returns the change in dirty bytes and
/// the first error; chunks that failed stay dirty, to be tried again.
pub fn flush(open: &Arc<OpenArray>, cache: &ChunkCache, pool: &WorkerPool) -> (isize, Result<()>) {
    let _exclusive = open.exclusive();
    flush_locked(open, cache, pool)
}

/// `flush`, with the array's store lock already held exclusively.
pub fn flush_locked(open: &Arc<OpenArray>, cache: &ChunkCache, pool: &WorkerPool) -> (isize, Result<()>) {
    let array = open.array();
    let (chunks, metadata_dirty, bytes) = {
        let mut edits = lock(&open.edits);
        let bytes = std::mem::take(&mut edits.dirty_bytes);
        (std::mem::take(&mut edits.chunks), std::mem::take(&mut edits.metadata_dirty), bytes)
    };
    if chunks.is_empty() && !metadata_dirty {
        return (0, Ok(()));
    }
    let (tx, rx) = crossbeam_channel::unbounded();
    let n = chunks.len();
    for (coords, edit) in chunks {
        let (array, tx) = (array.clone(), tx.clone());
        pool.submit(move || {
            let result = match &edit {
                ChunkEdit::Dirty(chunk) => array.store_chunk(&coords, chunk),
                ChunkEdit::Deleted => array.delete_chunk(&coords),
            };
            let _ = tx.send((coords, edit, result));
        });
    }
    drop(tx);
    let mut first_error: Option<Error> = None;
    let mut restored = 0usize;
    let mut done = 0;
    for (coords, edit, result) in rx.iter() {
        done += 1;
        match result {
            Ok((key, fill)) => {
                forget_stored(open, &array, cache, &coords, edit, fill);
                lock(&open.edits).unsynced.insert(key);
            }
            Err(e) => {
                tracing::error!(array = %display_path(&array.path), key = %array.chunk_key(&coords), "write-back failed: {e}");
                let mut edits = lock(&open.edits);
                if let ChunkEdit::Dirty(c) = &edit {
                    restored += c.len();
                }
                edits.chunks.entry(coords).or_insert(edit);
                first_error.get_or_insert(e);
            }
        }
    }
    if done != n {
        first_error.get_or_insert(Error::Io(std::io::Error::other("a write-back worker stopped")));
    }
    let mut edits = lock(&open.edits);
    edits.dirty_bytes += restored;
    if metadata_dirty {
        // Metadata last: chunks outside the stored shape are invisible until it lands.
        match first_error.is_none().then(|| array.store_metadata()) {
            Some(Ok(touched)) => edits.unsynced.extend(touched.keys),
            Some(Err(e)) => {
                tracing::error!(array = %display_path(&array.path), "metadata write failed: {e}");
                first_error = Some(e);
                edits.metadata_dirty = true;
            }
            None => edits.metadata_dirty = true,
        }
    }
    (restored as isize - bytes as isize, first_error.map_or(Ok(()), Err))
}

/// After a chunk was stored: the cache holds the new contents (or forgets the old ones).
fn forget_stored(open: &OpenArray, array: &Array, cache: &ChunkCache, coords: &[u64], edit: ChunkEdit, fill: bool) {
    match array.read_units() {
        ReadUnits::Chunks => match edit {
            ChunkEdit::Dirty(c) if !fill => cache.insert(unit_key(open, coords, false), Cached::Chunk(c)),
            _ => cache.remove(&unit_key(open, coords, false)),
        },
        ReadUnits::InnerChunks { .. } => {
            cache.remove(&unit_key(open, coords, true));
            let (lo, hi) = array.units_of_chunk(coords);
            for_each_cell(&lo, &hi, |unit| cache.remove(&unit_key(open, unit, false)));
        }
    }
}

/// Make the keys written since the last sync durable.
pub fn sync(open: &OpenArray, store: &dyn crate::store::Store) -> Result<()> {
    let keys: Vec<String> = std::mem::take(&mut lock(&open.edits).unsynced).into_iter().collect();
    store.sync(&keys).inspect_err(|_| lock(&open.edits).unsynced.extend(keys.iter().cloned()))
}
