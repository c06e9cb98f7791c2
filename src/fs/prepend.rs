//! `prepend`: bytes written to it are staged in a spool file and committed on close as one
//! prepend along axis 0 — new chunks first, the metadata last — so that no existing chunk is
//! read, rewritten or moved (docs/design.md §3).

use std::sync::Arc;

use super::open::OpenArray;
use super::spool::Spool;
use super::writeback;
use crate::cache::ChunkCache;
use crate::error::lock;
use crate::pool::WorkerPool;
use crate::zarr::key::ChunkKeyEncoding;
use crate::zarr::metadata::ZarrFormat;
use crate::zarr::node::display_path;
use crate::{Error, Result};

/// Whether `prepend` can be opened for writing on this array: an `offset`-encoded array, or a
/// `default`-encoded v3 one when `adopt` says so. The switch itself is made by the prepend
/// that is stored (`commit`), in the same document write: a prepend refused, or never
/// written, leaves the array as stock readers know it.
pub fn check(open: &Arc<OpenArray>, adopt: bool) -> Result<()> {
    let array = open.array();
    match (&array.meta.key_encoding, array.meta.format) {
        (ChunkKeyEncoding::Offset { .. }, _) => Ok(()),
        (ChunkKeyEncoding::Default { .. }, ZarrFormat::V3) if adopt => Ok(()),
        _ => {
            let why = format!("{} cannot be prepended to: {}", display_path(&array.path), array.meta.prepend_refusal().unwrap_or_default());
            // EOPNOTSUPP alone says nothing of what to do: the log, `.zarrfs/errors` and
            // `zarrfs status` say it.
            tracing::warn!("{why}");
            Err(Error::Unsupported(why))
        }
    }
}

/// Commit the spool as one prepend along axis 0, switching a `default`-encoded array to
/// `offset` keys with it (`check` allowed it at open). The array's pending writes are stored
/// first. On any error the array is as it was; the spool is emptied either way.
pub fn commit(open: &Arc<OpenArray>, spool: &mut Spool, cache: &ChunkCache, pool: &WorkerPool, new_cache_id: u64) -> Result<()> {
    if spool.is_empty() {
        return Ok(());
    }
    let _writer = open.writer();
    let _exclusive = open.exclusive();
    writeback::flush_locked(open, cache, pool)?;
    let array = open.array();
    // The new chunks' keys are another concurrent prepend's too: one at a time, and the loser
    // finds the metadata changed before it stores anything.
    let shape = array.hold_shape_lock()?;
    array.check_metadata_current()?;
    let len = spool.len();
    // Zero offsets keep every key: the adopted array reads what the default one did.
    let adopting = matches!(array.meta.key_encoding, ChunkKeyEncoding::Default { .. });
    let base = if adopting { array.adopted_offset().map(Arc::new) } else { Ok(array) };
    let result = base.and_then(|base| spool.source().and_then(|source| base.prepend(0, len, source, pool))).and_then(|next| match next {
        Some((next, chunks)) => {
            if let Some(held) = &shape {
                held.confirm()?;
            }
            let metadata = next.store_metadata()?;
            // Made durable by the next fsync, as the chunks of writes are.
            lock(&open.edits).unsynced.extend(chunks.keys.into_iter().chain(metadata.keys));
            if adopting {
                tracing::info!(array = %display_path(&next.path), "switched to the offset chunk key encoding");
            }
            tracing::info!(array = %display_path(&next.path), bytes = len, shape = ?next.meta.shape, "prepended");
            open.replace(next, new_cache_id);
            Ok(())
        }
        None => Ok(()),
    });
    spool.clear()?;
    result
}
