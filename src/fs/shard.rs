//! Reading the inner chunks of a shard: one at a time at the offsets of the shard's cached
//! index, or several together — the whole shard in one request when a read wants most of it
//! and its index is not cached (the index comes with it), else one ranged request per run of
//! inner chunks that lie next to each other in the shard. Every inner chunk is read from the
//! version its index was read from: never new bytes at old offsets.

use std::sync::Arc;

use super::open::OpenArray;
use crate::Result;
use crate::cache::{Cached, ChunkCache, Claim};
use crate::store::Version;
use crate::zarr::array::Array;
use crate::zarr::codec::{ShardIndex, ShardingCodec};

/// An inner chunk, read at the offsets of its shard's cached index from the version that index
/// was read from. A shard another program rewrote since has its index and inner chunks dropped
/// from the cache and is read again: never new bytes at old offsets.
pub(crate) fn load_inner(
    open: &OpenArray,
    a: &Array,
    cache: &ChunkCache,
    sharding: &ShardingCodec,
    coords: &[u64],
) -> Result<(Arc<Cached>, Option<Version>)> {
    let (shard, inner) = a.chunk_of_unit(coords);
    let index_key = open.unit_key(&shard, true);
    for _ in 0..3 {
        let index = cache.get_or_load(&index_key, || {
            open.check_value(a, &a.chunk_key(&shard))?;
            a.retrieve_shard_index(sharding, &shard).map(Cached::index)
        })?;
        let Cached::Index { index, version } = index.as_ref() else { return Ok((Arc::new(Cached::Missing), None)) };
        // Empty inner chunks are told by the index alone (they are not held: their version
        // would be lost).
        if index.range(inner).is_none() {
            return Ok((Arc::new(Cached::Missing), Some(*version)));
        }
        let unit = cache.get_or_load_holding(&open.unit_key(coords, false), false, || {
            Ok(match a.retrieve_inner_chunk(sharding, &shard, index, *version, inner)? {
                Some(decoded) => Cached::Chunk { decoded, version: Some(*version) },
                None => Cached::Missing,
            })
        });
        match unit {
            Ok(unit) if matches!(unit.as_ref(), Cached::Chunk { version: Some(v), .. } if v == version) => {
                return Ok((unit, Some(*version)));
            }
            // Cached from another write of the shard, or the shard changed since its index was read.
            Ok(_) | Err(crate::Error::Stale(_)) => forget_shard(open, a, cache, &shard),
            Err(e) => return Err(e),
        }
    }
    Err(crate::Error::corrupt(a.chunk_key(&shard), "rewritten again each time it was read"))
}

/// Drop a shard's index and inner chunks from the cache.
fn forget_shard(open: &OpenArray, a: &Array, cache: &ChunkCache, shard: &[u64]) {
    cache.remove(&open.unit_key(shard, true));
    a.units_of_chunk(shard).for_each(|unit| cache.remove(&open.unit_key(unit, false)));
}

/// Runs of inner chunks this far apart or nearer are read as one range: a round trip to object
/// storage costs more than this many bytes more.
const RUN_GAP_BYTES: u64 = 256 << 10;

/// A run is not grown past this many bytes: one request's bytes are held until it is decoded.
const RUN_MAX_BYTES: u64 = 64 << 20;

/// Load the inner chunks `units` (coordinates in the unit grid) of `shard` that are neither
/// cached nor being loaded, with as few requests as their layout allows. Readers of them wait
/// for this load; those it could not serve (an error, a shard rewritten meanwhile) they load
/// themselves, one by one, and get the error with its cause.
pub(crate) fn load_inner_together(
    open: &OpenArray,
    a: &Array,
    cache: &ChunkCache,
    sharding: &ShardingCodec,
    shard: &[u64],
    units: &[&[u64]],
) {
    // Units of another shard (the array was laid out anew since they were grouped) are left.
    let mut keys: Vec<_> = units.iter().filter(|u| a.chunk_of_unit(u).0 == shard).map(|u| open.unit_key(u, false)).collect();
    // Most of a shard wanted and its index not at hand: the whole shard is read, and the rest
    // of it comes with it (decoding it costs less than any request for it later). All of its
    // inner chunks are claimed at once, those wanted first: another loader that claimed the
    // rest in between would read the whole shard again.
    if reads_whole(a, cache, &open.unit_key(shard, true), shard, keys.len()) {
        let wanted: std::collections::HashSet<_> = keys.iter().cloned().collect();
        let mut rest = Vec::new();
        a.units_of_chunk(shard).for_each(|unit| rest.push(open.unit_key(unit, false)));
        keys.extend(rest.into_iter().filter(|k| !wanted.contains(k)));
    }
    let claims = cache.claim_absent(keys);
    let claims: Vec<(usize, Claim)> = claims.into_iter().map(|c| (a.chunk_of_unit(&c.key().coords).1, c)).collect();
    if let Err(e) = serve_claims(open, a, cache, sharding, shard, claims) {
        tracing::debug!(shard = a.chunk_key(shard), "inner chunks read together failed, each is read alone: {e}");
        if matches!(e, crate::Error::Stale(_)) {
            forget_shard(open, a, cache, shard);
        }
    }
}

/// Whether `wanted` inner chunks of `shard` are read with the whole shard: most of it, and its
/// index (`index_key`) not at hand.
fn reads_whole(a: &Array, cache: &ChunkCache, index_key: &crate::cache::CacheKey, shard: &[u64], wanted: usize) -> bool {
    let cells = a.units_of_chunk(shard);
    let inner_count = cells.start.iter().zip(&cells.end).map(|(s, e)| e - s).product::<u64>();
    cache.peek(index_key).is_none() && wanted as u64 * 2 >= inner_count
}

fn serve_claims<'c>(
    open: &OpenArray,
    a: &Array,
    cache: &'c ChunkCache,
    sharding: &ShardingCodec,
    shard: &[u64],
    mut claims: Vec<(usize, Claim<'c>)>,
) -> Result<()> {
    let index_key = open.unit_key(shard, true);
    // The whole shard, index and all (`reads_whole`, with the claims this loader got), by the
    // loader that claims its index: one whose index another is reading waits for that index
    // and reads its own inner chunks by range, never the whole shard a second time. The chunks
    // wanted are decoded first.
    let index_claim = match reads_whole(a, cache, &index_key, shard, claims.len()) {
        true => cache.claim_absent([index_key.clone()]).pop(),
        false => None,
    };
    if let Some(index_claim) = index_claim {
        open.check_value(a, &a.chunk_key(shard))?;
        let Some((bytes, index, version)) = a.retrieve_shard(sharding, shard)? else {
            index_claim.finish(Ok(Cached::Missing), true)?;
            for (_, claim) in claims {
                claim.finish(Ok(Cached::Missing), false)?;
            }
            return Ok(());
        };
        let decoded_index = index.clone();
        index_claim.finish(Ok(Cached::Index { index, version }), true)?;
        return finish_from(a, sharding, shard, &decoded_index, Fetched { bytes: &bytes, at: 0, version }, claims);
    }
    let index = cache.get_or_load(&index_key, || {
        open.check_value(a, &a.chunk_key(shard))?;
        a.retrieve_shard_index(sharding, shard).map(Cached::index)
    })?;
    let Cached::Index { index, version } = index.as_ref() else {
        for (_, claim) in claims {
            claim.finish(Ok(Cached::Missing), false)?;
        }
        return Ok(());
    };
    // Empty inner chunks are told by the index alone (not held: their version would be lost).
    claims.sort_by_key(|(inner, _)| index.range(*inner).map_or(0, |(start, _)| start));
    let mut runs: Vec<Vec<(usize, Claim)>> = Vec::new();
    let mut run_end = 0;
    // No more is fetched for an inner chunk than it can take: one the index gives more is left
    // to be read alone, which refuses it as corrupt.
    let bound = sharding.inner_bound(&a.chunk_repr(shard));
    for (inner, claim) in claims {
        let Some((start, len)) = index.range(inner) else {
            claim.finish(Ok(Cached::Missing), false)?;
            continue;
        };
        if len > bound {
            continue;
        }
        let joins = runs.last().and_then(|r| r.first()).and_then(|(first, _)| index.range(*first)).is_some_and(|(run_start, _)| {
            start >= run_end && start - run_end <= RUN_GAP_BYTES && start.saturating_add(len) - run_start <= RUN_MAX_BYTES
        });
        match runs.last_mut() {
            Some(run) if joins => run.push((inner, claim)),
            _ => runs.push(vec![(inner, claim)]),
        }
        run_end = start.saturating_add(len);
    }
    for run in runs {
        let Some((start, _)) = run.first().and_then(|(inner, _)| index.range(*inner)) else { continue };
        let end = run.iter().filter_map(|(inner, _)| index.range(*inner)).map(|(s, n)| s.saturating_add(n)).max().unwrap_or(start);
        let bytes = a.retrieve_shard_range(shard, start, end - start, *version)?;
        finish_from(a, sharding, shard, index, Fetched { bytes: &bytes, at: start, version: *version }, run)?;
    }
    Ok(())
}

/// Bytes of a shard read in one request: from byte `at` on, of the write `version`.
struct Fetched<'b> {
    bytes: &'b [u8],
    at: u64,
    version: Version,
}

/// Finish each claim with its inner chunk decoded from what was fetched.
fn finish_from(
    a: &Array,
    sharding: &ShardingCodec,
    shard: &[u64],
    index: &ShardIndex,
    fetched: Fetched,
    claims: Vec<(usize, Claim)>,
) -> Result<()> {
    let Fetched { bytes, at, version } = fetched;
    for (inner, claim) in claims {
        let Some((start, len)) = index.range(inner) else {
            claim.finish(Ok(Cached::Missing), false)?;
            continue;
        };
        let from = start.checked_sub(at).and_then(|s| usize::try_from(s).ok());
        let Some(stored) = from.and_then(|s| bytes.get(s..s.checked_add(usize::try_from(len).ok()?)?)) else {
            let what = format!("{} (inner chunk {inner})", a.chunk_key(shard));
            return Err(crate::Error::corrupt(what, format!("the shard index puts it at bytes {start}+{len}, past the shard's end")));
        };
        let decoded = a.decode_inner_chunk(sharding, shard, inner, stored)?;
        claim.finish(Ok(Cached::Chunk { decoded, version: Some(version) }), false)?;
    }
    Ok(())
}
