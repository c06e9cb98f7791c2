//! Write-back: dirty chunks are encoded on the worker pool and stored (or deleted when all
//! fill), then the metadata; `sync` makes what was written durable.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::merge::{self, Base, Stored};
use super::open::{ChunkEdit, OpenArray, Touch, dirty_cost};
use crate::cache::{Cached, ChunkCache};
use crate::error::lock;
use crate::metrics::COUNTERS;
use crate::pool::WorkerPool;
use crate::zarr::array::{Array, ReadUnits};
use crate::zarr::node::display_path;
use crate::{Error, Result};

/// Store every changed chunk and the metadata of `open`. Returns the first error; chunks that
/// failed stay dirty, to be tried again.
pub fn flush(open: &Arc<OpenArray>, cache: &ChunkCache, pool: &WorkerPool) -> Result<()> {
    let _exclusive = open.exclusive();
    flush_locked(open, cache, pool)
}

/// `flush`, with the array's store lock already held exclusively.
pub fn flush_locked(open: &Arc<OpenArray>, cache: &ChunkCache, pool: &WorkerPool) -> Result<()> {
    let array = open.array();
    if !open.is_dirty() {
        return Ok(());
    }
    // A shape change is stored holding the array's shape lock: no other mount grows, shrinks
    // or prepends it meanwhile, so none of the chunks stored beyond the stored shape lands over
    // another's (the loser finds the metadata changed, just below, and stores nothing).
    let shape = match open.metadata_dirty() {
        true => array
            .hold_shape_lock()
            .inspect_err(|e| tracing::error!(array = %display_path(&array.path), "write-back waits no longer: {e}"))?,
        false => None,
    };
    // Nothing is stored over another writer's change of the array: this mount lost the race,
    // and its changes go (their writers are told), so that a retry starts from what is stored.
    // Only a race of two shape changes is lost so: changes that leave the shape as it is go
    // into an array another mount grew meanwhile.
    ask_held_no_chunk_beside(open, &array, pool);
    let mut current = array.check_metadata_current();
    if matches!(current, Err(Error::Conflict { .. })) && !open.metadata_dirty() && take_growth(open, &array)? {
        current = Ok(());
    }
    let array = open.array();
    if let Err(e) = current {
        open.failed_stores.fetch_add(1, Ordering::Relaxed);
        COUNTERS.write_back_failures.fetch_add(1, Ordering::Relaxed);
        tracing::error!(array = %display_path(&array.path), "write-back refused: {e}");
        if matches!(e, Error::Conflict { .. }) {
            COUNTERS.write_conflicts.fetch_add(1, Ordering::Relaxed);
            open.drop_lost(&e);
        }
        return Err(e);
    }
    // The chunks taken stay counted until they are stored: they are in memory until then. The
    // metadata stays marked changed until it is stored: meanwhile the store still holds the old
    // document, which a metadata re-check must not take for another writer's (`Nodes::recheck`).
    let (chunks, metadata_dirty, held) = {
        let mut edits = open.wait_stored(lock(&open.edits));
        let held = edits.dirty_bytes();
        edits.touched.clear();
        (std::mem::take(&mut edits.chunks), edits.metadata_dirty, held)
    };
    if chunks.is_empty() && !metadata_dirty {
        // Nothing held: no failure is waiting for a retry (a change another writer's won over
        // was dropped and its writer told).
        open.failed_stores.store(0, Ordering::Relaxed);
        open.written_unstored.store(0, Ordering::Relaxed);
        return Ok(());
    }
    let n = chunks.len();
    let results = pool.run_all(chunks.into_iter().map(|(coords, edit)| {
        let array = array.clone();
        move || {
            let result = crate::error::catch("write-back", || match &edit {
                ChunkEdit::Dirty(chunk, base) => merge::store_edit(&array, &coords, Some(chunk), base),
                ChunkEdit::Storing(chunk, base) => merge::store_edit(&array, &coords, Some(chunk), base),
                ChunkEdit::Deleted(base) => merge::store_edit(&array, &coords, None, base),
            });
            (coords, edit, result)
        }
    }));
    let mut first_error: Option<Error> = None;
    let mut restored = 0usize;
    let mut done = 0;
    for (coords, edit, result) in results.iter() {
        done += 1;
        match result {
            Ok((stored, merged)) => {
                // Merged with another writer's (or the stored) bytes: those are what the cache holds.
                let edit = match merged {
                    Some(bytes) => ChunkEdit::Dirty(bytes, Base::Whole),
                    None => edit,
                };
                cache_stored(open, &array, cache, &coords, edit, stored.version);
                lock(&open.edits).unsynced.insert(stored.key);
            }
            Err(e) => {
                open.failed_stores.fetch_add(1, Ordering::Relaxed);
                tracing::error!(array = %display_path(&array.path), key = %array.chunk_key(&coords), "write-back failed: {e}");
                let mut edits = lock(&open.edits);
                let edit = match edit {
                    ChunkEdit::Storing(c, base) => ChunkEdit::Dirty(c.to_vec(), base),
                    other => other,
                };
                restored += edit.cost();
                edits.chunks.entry(coords).or_insert(edit);
                first_error.get_or_insert(e);
            }
        }
    }
    if done != n {
        first_error.get_or_insert(Error::Io(std::io::Error::other("a write-back worker stopped")));
    }
    lock(&open.edits).charge(restored as isize - held as isize);
    if metadata_dirty {
        // Metadata last: chunks outside the stored shape are invisible until it lands. The edits
        // are not locked meanwhile: a store that waits on the network (retries included) must not
        // hold up a `stat`; the array cannot change, its writers being held out.
        // Still this mount's shape lock (a lease lost while the chunks were stored is not).
        let confirmed = || shape.as_ref().map_or(Ok(()), |held| held.confirm());
        match first_error.is_none().then(|| confirmed().and_then(|()| array.store_metadata())) {
            Some(Ok(touched)) => {
                let mut edits = lock(&open.edits);
                edits.unsynced.extend(touched.keys);
                edits.metadata_dirty = false;
            }
            Some(Err(e)) => {
                open.failed_stores.fetch_add(1, Ordering::Relaxed);
                COUNTERS.write_back_failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(array = %display_path(&array.path), "metadata write failed: {e}");
                first_error = Some(e);
            }
            None => {}
        }
    }
    if first_error.is_none() {
        // Everything held is stored: what failed before (and `zarrfs status` showed) was
        // stored by this retry.
        open.failed_stores.store(0, Ordering::Relaxed);
        open.written_unstored.store(0, Ordering::Relaxed);
    }
    first_error.map_or(Ok(()), Err)
}

/// Whether the array held no chunk (`Array::held_no_chunk`: a listing, once) is asked on the
/// pool while the metadata check that comes before any store is made, rather than by the first
/// store of a chunk never read, after it: one round trip less before a new array's first
/// chunks go out. Asked only where a chunk never read waits to be stored.
fn ask_held_no_chunk_beside(open: &OpenArray, array: &Arc<Array>, pool: &WorkerPool) {
    if array.held_no_chunk_known() {
        return;
    }
    let unread = |base: &Base| matches!(base, Base::Unread { .. });
    let wanted = lock(&open.edits).chunks.values().any(|edit| match edit {
        ChunkEdit::Dirty(_, base) | ChunkEdit::Deleted(base) | ChunkEdit::Storing(_, base) => unread(base),
    });
    if wanted {
        let array = array.clone();
        pool.submit(move || {
            array.held_no_chunk();
        });
    }
}

/// When another mount only grew the array (its document is this one's with a shape no smaller
/// along any axis; attributes aside), serve the grown array and return true: the chunks changed
/// here keep their places in it. A chunk the old shape cut through, written whole here, is
/// merged as one read (only the elements inside the old shape are this mount's: the other
/// mount's rows past it are kept). Anything else (a shrink, a prepend, a new layout): false.
fn take_growth(open: &OpenArray, array: &Array) -> Result<bool> {
    // The document as it is now: a listing's copy may be the one this mount read.
    let name = array.meta.document_name();
    let Some((stored, version)) = crate::zarr::node::read_array_current(array.store.as_ref(), &array.path, name)? else {
        return Ok(false);
    };
    if !array.meta.grown_into(&stored) {
        return Ok(false);
    }
    let old = &array.meta.shape;
    let next = Array::new(array.store.clone(), &array.path, stored);
    next.set_stored_version(Some(version));
    let grid = &next.meta.grid;
    let mut edits = lock(&open.edits);
    for (coords, edit) in edits.chunks.iter_mut() {
        let shape = grid.chunk_shape(coords);
        let inside = |sizes: &[u64]| -> Vec<u64> {
            (0..shape.len()).map(|a| sizes[a].saturating_sub(grid.chunk_start(a, coords[a])).min(shape[a])).collect()
        };
        let (before, now) = (inside(old), inside(&next.meta.shape));
        let base = match edit {
            ChunkEdit::Dirty(_, base) | ChunkEdit::Deleted(base) | ChunkEdit::Storing(_, base) => base,
        };
        if before != now && *base == Base::Whole {
            let mut written = merge::ElementMask::new(shape.iter().product::<u64>() as usize)?;
            written.mark_box(&crate::zarr::region::Strided::of(&shape, &vec![0; shape.len()], 0), &before);
            *base = Base::Reread { written };
        }
    }
    drop(edits);
    tracing::info!(array = %display_path(&array.path), shape = ?next.meta.shape, "another mount grew the array: its changes here go into the grown array");
    // A new cache id: another mount's rows may be in chunks cached here as fill.
    open.replace(Arc::new(next), super::open::new_id());
    Ok(true)
}

/// Store, on the pool, the changed chunks that are settled (wholly written, or no longer being
/// written: `Touch::settled`) while writing goes on: encoding overlaps writing, little is left
/// for close(), and a chunk is encoded once, not each time a part of it lands. Readers keep
/// reading them from memory until each is stored; a write to one changes a copy. Chunks to
/// delete are deleted likewise, so that they do not pile up until close(). A chunk that fails
/// stays changed, for close() to try again and report.
pub fn store_in_background(open: &Arc<OpenArray>, cache: &Arc<ChunkCache>, pool: &WorkerPool) {
    let array = open.array();
    // Asked at most once a second: a writer calls here after every write.
    if open.due_for_metadata_check() {
        ask_held_no_chunk_beside(open, &array, pool);
        if array.check_metadata_current().is_err() {
            return;
        }
    }
    // Per chunk picked: the contents to store (`None` to delete it) and what it was made from.
    type Picked = (Vec<u64>, Option<Arc<Vec<u8>>>, Base);
    let picked: Vec<Picked> = {
        let mut guard = lock(&open.edits);
        let edits = &mut *guard;
        // A shape not yet stored is stored with the array's shape lock held, by a flush: the
        // chunks of a growth land only while no other mount can grow the array too.
        if edits.metadata_dirty {
            return;
        }
        let mut picked = Vec::new();
        for (coords, edit) in edits.chunks.iter_mut() {
            if edits.storing.contains(coords) || !Touch::settled(edits.touched.get(coords), edits.writes) {
                continue;
            }
            edits.touched.remove(coords);
            match edit {
                ChunkEdit::Dirty(buf, base) => {
                    // The store under way counts the chunk from here on (`ChunkEdit::cost`).
                    let buf = Arc::new(std::mem::take(buf));
                    let base = std::mem::replace(base, Base::Whole);
                    *edit = ChunkEdit::Storing(buf.clone(), base.clone());
                    picked.push((coords.clone(), Some(buf), base));
                }
                ChunkEdit::Deleted(base) => picked.push((coords.clone(), None, base.clone())),
                ChunkEdit::Storing(..) => {}
            }
        }
        edits.storing.extend(picked.iter().map(|(c, _, _)| c.clone()));
        edits.storing_bytes += picked.iter().filter_map(|(_, b, _)| b.as_ref()).map(|b| b.len()).sum::<usize>();
        picked
    };
    for (coords, buf, base) in picked {
        let (open, cache, array) = (open.clone(), cache.clone(), array.clone());
        pool.submit(move || {
            let result = crate::error::catch("background write-back", || merge::store_edit(&array, &coords, buf.as_deref().map(|b| b.as_slice()), &base));
            let mut edits = lock(&open.edits);
            edits.storing.remove(&coords);
            edits.storing_bytes -= buf.as_ref().map_or(0, |b| b.len());
            let current = match (edits.chunks.get(&coords), &buf) {
                (Some(ChunkEdit::Storing(b, _)), Some(buf)) => Arc::ptr_eq(b, buf),
                (Some(ChunkEdit::Deleted(now)), None) => *now == base,
                _ => false,
            };
            // The store's own count ends here, whatever became of the chunk meanwhile.
            edits.charge(-(buf.as_ref().map_or(0, |b| dirty_cost(b)) as isize));
            match result {
                Ok((stored, merged)) => {
                    edits.unsynced.insert(stored.key);
                    if current {
                        // The cache forgets the old contents before readers stop finding the new.
                        cache_stored(&open, &array, &cache, &coords, ChunkEdit::Deleted(Base::Whole), None);
                        edits.forget(&coords);
                    } else if let Some(copy) = edits.base_mut(&coords) {
                        let ended = if merged.is_some() { Stored::Merged } else { Stored::Exactly(stored.version) };
                        *copy = std::mem::replace(copy, Base::Whole).after_store(ended);
                    }
                }
                Err(e) => {
                    open.failed_stores.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(array = %display_path(&array.path), key = %array.chunk_key(&coords), "background write-back failed (close will retry): {e}");
                    if current && let Some(buf) = &buf {
                        edits.set(coords, ChunkEdit::Dirty(buf.to_vec(), base));
                    } else if !current && let Some(copy) = edits.base_mut(&coords) {
                        *copy = std::mem::replace(copy, Base::Whole).after_store(Stored::Failed(base));
                    }
                }
            }
            drop(edits);
            open.stored.notify_all();
            // Unless a reader still holds it, the buffer serves the next chunk written.
            if let Some(buf) = buf.and_then(|b| Arc::try_unwrap(b).ok()) {
                super::spare::give_back(buf);
            }
        });
    }
}

/// After a chunk was stored (at `version`; `None`: deleted): the cache holds the new contents
/// (or forgets the old ones).
fn cache_stored(
    open: &OpenArray,
    array: &Array,
    cache: &ChunkCache,
    coords: &[u64],
    edit: ChunkEdit,
    version: Option<crate::store::Version>,
) {
    match array.read_units() {
        ReadUnits::Chunks => match (edit, version) {
            (ChunkEdit::Dirty(decoded, _), Some(version)) => {
                cache.insert(open.unit_key(coords, false), Cached::Chunk { decoded, version: Some(version) })
            }
            _ => cache.remove(&open.unit_key(coords, false)),
        },
        ReadUnits::InnerChunks { .. } => {
            cache.remove(&open.unit_key(coords, true));
            array.units_of_chunk(coords).for_each(|unit| cache.remove(&open.unit_key(unit, false)));
        }
    }
}

/// Make the keys written since the last sync durable.
pub fn sync(open: &OpenArray, store: &dyn crate::store::Store) -> Result<()> {
    let keys: Vec<String> = std::mem::take(&mut lock(&open.edits).unsynced).into_iter().collect();
    store.sync(&keys).inspect_err(|_| lock(&open.edits).unsynced.extend(keys.iter().cloned()))
}
