//! The stored chunk beneath a change: read for a read-modify-write, or under the elements a
//! write put into a chunk it never read (`Base::Unread`), when something first reads it.

use super::merge::Base;
use super::open::{ChunkEdit, OpenArray};
use super::spare::chunk_buffer;
use crate::cache::{Cached, ChunkCache};
use crate::error::lock;
use crate::store::Version;
use crate::zarr::array::{Array, ReadUnits};
use crate::zarr::node::display_path;
use crate::{Error, Result};

/// The decoded contents of a whole (outer) chunk as stored, for a read-modify-write, with the
/// version read (`None`: absent, fill). A cached copy serves only while it is the stored
/// version: another program may have rewritten the chunk since, and merging into a stale copy
/// would put its old bytes back.
pub(super) fn stored_chunk(open: &OpenArray, array: &Array, cache: &ChunkCache, coords: &[u64]) -> Result<(Vec<u8>, Option<Version>)> {
    let log = |e: &Error| tracing::error!(array = %display_path(&array.path), "read for write failed: {e}");
    let repr = array.chunk_repr(coords);
    let fill = || chunk_buffer(repr.num_elements() as usize, &repr.fill);
    let key = open.unit_key(coords, false);
    if matches!(array.read_units(), ReadUnits::Chunks)
        && let Some(cached) = cache.peek(&key)
    {
        let now = array.chunk_version(coords).inspect_err(log)?;
        match cached.as_ref() {
            Cached::Chunk { decoded, version: Some(v) } if now == Some(*v) => return Ok((decoded.clone(), now)),
            Cached::Missing if now.is_none() => return Ok((fill()?, None)),
            _ => cache.remove(&key),
        }
    }
    open.check_value(array, &array.chunk_key(coords)).inspect_err(log)?;
    match array.retrieve_chunk(coords).inspect_err(log)? {
        Some((decoded, version)) => Ok((decoded, Some(version))),
        None => Ok((fill()?, None)),
    }
}

/// What a read finds of a chunk written here but never read (`Base::Unread`).
pub(super) enum Completed {
    /// The chunk's bytes: the stored chunk with the elements written here put in.
    Bytes(Vec<u8>),
    /// To be deleted: fill.
    Fill,
    /// Stored and no longer changed here: read as any chunk.
    Stored,
}

/// The chunk at `coords`, which was written here without being read, as a read sees it: the
/// stored chunk with this mount's written elements put in. A chunk changed in memory keeps
/// that (it becomes `Base::Read`, as if it had been read first); of a copy made while a store
/// of it is under way, that store is waited for (it holds the elements written before it).
pub(super) fn complete(open: &OpenArray, array: &Array, cache: &ChunkCache, coords: &[u64]) -> Result<Completed> {
    let item = array.meta.item_size().max(1);
    loop {
        {
            let mut edits = lock(&open.edits);
            while edits.storing.contains(coords)
                && matches!(edits.chunks.get(coords), Some(ChunkEdit::Dirty(_, base)) if base.unread_written().is_some())
            {
                edits = open.stored.wait(edits).unwrap_or_else(|p| p.into_inner());
            }
        }
        let (mut stored, version) = stored_chunk(open, array, cache, coords)?;
        let mut edits = lock(&open.edits);
        let storing = edits.storing.contains(coords);
        let differs = || Error::Stale(format!("{}: the stored chunk is not the size of the one written", array.chunk_key(coords)));
        return Ok(match edits.chunks.get_mut(coords) {
            Some(ChunkEdit::Dirty(chunk, base)) => match base {
                // A store began meanwhile: wait for it, and read again.
                Base::Unread { .. } if storing => continue,
                Base::Unread { written } => {
                    if chunk.len() != stored.len() {
                        return Err(differs());
                    }
                    written.copy_marked(chunk, &mut stored, item);
                    let written = std::mem::take(written);
                    *base = Base::Read { version, written };
                    chunk.copy_from_slice(&stored);
                    Completed::Bytes(stored)
                }
                _ => Completed::Bytes(chunk.clone()),
            },
            Some(ChunkEdit::Storing(chunk, base)) => match base.unread_written() {
                Some(written) => {
                    written.copy_marked(chunk, &mut stored, item);
                    Completed::Bytes(stored)
                }
                None => Completed::Bytes(chunk.to_vec()),
            },
            Some(ChunkEdit::Deleted(_)) => Completed::Fill,
            None => Completed::Stored,
        });
    }
}
