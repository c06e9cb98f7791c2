//! Storing a changed chunk without undoing another writer's change: a chunk read and changed
//! here is stored only if it is still the version read; when another mount (or host) stored
//! it since, it is read again, the elements written here are put into it, and that is stored
//! on the same condition, a few times at most (tensorstore's read-modify-write does the same).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use crate::metrics::COUNTERS;
use crate::store::{Expect, Version};
use crate::zarr::array::{Array, StoredChunk};
use crate::zarr::region::{Strided, box_runs};
use crate::{Error, Result};

/// Which elements of a chunk this mount wrote since it read the chunk: one bit each; and of an
/// element written only in part (a `dd` block that ends inside an element), which of its bytes,
/// so that a merge keeps another writer's other bytes of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ElementMask {
    bits: Vec<u64>,
    /// Element → one bit per byte written, for elements whose own bit is clear.
    partial: BTreeMap<usize, Vec<u8>>,
}

/// How many elements of one chunk are held as written in part; past it, a further one counts
/// as written whole (as every element did before). Writes in part are the edges of writes, and
/// the next write usually completes them; this bounds a hostile pattern's memory.
const MOST_PARTIAL: usize = 1 << 16;

impl ElementMask {
    pub fn new(elements: usize) -> Result<ElementMask> {
        let mut bits = Vec::new();
        bits.try_reserve_exact(elements.div_ceil(64)).map_err(|_| crate::limits::out_of_memory())?;
        bits.resize(elements.div_ceil(64), 0);
        Ok(ElementMask { bits, partial: BTreeMap::new() })
    }

    /// How many elements it has room for.
    pub fn len(&self) -> usize {
        self.bits.len() * 64
    }

    /// Mark `len` elements from `start`.
    pub fn mark_run(&mut self, start: u64, len: u64) {
        let (mut i, end) = (start as usize, (start + len) as usize);
        while i < end {
            let (word, bit) = (i / 64, i % 64);
            let n = (64 - bit).min(end - i);
            let ones = if n == 64 { u64::MAX } else { ((1u64 << n) - 1) << bit };
            if let Some(w) = self.bits.get_mut(word) {
                *w |= ones;
            }
            i += n;
        }
    }

    /// Mark the box `extent` of the chunk laid out as `view`.
    pub fn mark_box(&mut self, view: &Strided, extent: &[u64]) {
        box_runs(view, extent, |start, len| self.mark_run(start, len));
    }

    /// Whether element `i` is marked as written whole.
    pub fn is_marked(&self, i: usize) -> bool {
        self.bits.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Mark the bytes `from..to` of element `i` (of `item` bytes) as written: the element
    /// counts as written whole once all its bytes are.
    pub fn mark_bytes(&mut self, i: usize, from: usize, to: usize, item: usize) {
        if self.is_marked(i) || i >= self.len() {
            return;
        }
        // Past the bound, an element written in part counts as written whole.
        if !self.partial.contains_key(&i) && self.partial.len() >= MOST_PARTIAL {
            self.mark_run(i as u64, 1);
            return;
        }
        let bytes = self.partial.entry(i).or_insert_with(|| vec![0; item.div_ceil(8)]);
        for b in from..to.min(item) {
            bytes[b / 8] |= 1 << (b % 8);
        }
        if (0..item).all(|b| bytes[b / 8] & (1 << (b % 8)) != 0) {
            self.partial.remove(&i);
            self.mark_run(i as u64, 1);
        }
    }

    /// Mark what `other` marks too.
    pub fn union(&mut self, other: &ElementMask) {
        for (w, o) in self.bits.iter_mut().zip(&other.bits) {
            *w |= o;
        }
        for (&i, theirs) in &other.partial {
            if self.is_marked(i) {
                continue;
            }
            let ours = self.partial.entry(i).or_insert_with(|| vec![0; theirs.len()]);
            for (a, b) in ours.iter_mut().zip(theirs) {
                *a |= b;
            }
        }
        let bits = &self.bits;
        self.partial.retain(|&i, _| bits.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) == 0));
    }

    /// The runs of marked elements: `f(first, count)`.
    pub fn runs(&self, mut f: impl FnMut(usize, usize)) {
        let mut run: Option<usize> = None;
        let total = self.bits.len() * 64;
        let mut i = 0;
        while i < total {
            let word = self.bits[i / 64];
            let set = word & (1 << (i % 64)) != 0;
            match (set, run) {
                (true, None) => run = Some(i),
                (false, Some(s)) => {
                    f(s, i - s);
                    run = None;
                }
                _ => {}
            }
            // A whole word at once where it holds no edge of a run.
            let whole = i % 64 == 0 && word == if set { u64::MAX } else { 0 };
            i += if whole { 64 } else { 1 };
        }
        if let Some(s) = run {
            f(s, total - s);
        }
    }

    /// Copy the marked elements (of `item` bytes) of `from` into `to`, and the marked bytes of
    /// elements written in part.
    pub fn copy_marked(&self, from: &[u8], to: &mut [u8], item: usize) {
        let elements = from.len().min(to.len()) / item.max(1);
        self.runs(|start, n| {
            let end = (start + n).min(elements);
            if start < end {
                to[start * item..end * item].copy_from_slice(&from[start * item..end * item]);
            }
        });
        for (&i, bytes) in self.partial.range(..elements) {
            for b in (0..item).filter(|b| bytes.get(b / 8).is_some_and(|m| m & (1 << (b % 8)) != 0)) {
                to[i * item + b] = from[i * item + b];
            }
        }
    }
}

/// What a changed chunk was made from: how it is stored without undoing another writer's change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Base {
    /// Written whole here (or changed only while the mount holds the array's shape lock):
    /// stored over whatever is there, in one step with others' conditional writes.
    Whole,
    /// Read, or found absent (`None`), at `version`; `written` are the elements changed here
    /// since.
    Read { version: Option<Version>, written: ElementMask },
    /// A copy of the chunk while a store of it was under way, which did not end with this
    /// mount's bytes alone stored (merged with another writer's, or unknown yet): read again
    /// when stored; `written` are the elements changed here since the copy.
    Reread { written: ElementMask },
    /// Never read: started from fill so that a write into part of a chunk waits for no store.
    /// Only the `written` elements are this mount's; the rest are the stored chunk's, read
    /// when the chunk is stored (as `Reread`) or first read here (`complete`).
    Unread { written: ElementMask },
}

/// How a store of a chunk ended, for the copy made while it was under way.
pub(crate) enum Stored {
    /// This mount's bytes alone, at `version` (`None`: deleted).
    Exactly(Option<Version>),
    /// Another writer's bytes merged in: the copy lacks them.
    Merged,
    /// Not stored: the store's own base counts on.
    Failed(Base),
}

impl Base {
    /// A chunk read at `version` (`None`: absent) and not yet written.
    pub fn read(version: Option<Version>, elements: usize) -> Result<Base> {
        Ok(Base::Read { version, written: ElementMask::new(elements)? })
    }

    /// A chunk of `elements` not read, nothing written yet.
    pub fn unread(elements: usize) -> Result<Base> {
        Ok(Base::Unread { written: ElementMask::new(elements)? })
    }

    /// The base of a copy made while a store with this base was under way. A copy of a chunk
    /// never read is as incomplete as the chunk: its other elements are still the store's.
    pub fn for_copy(&self) -> Result<Base> {
        Ok(match self {
            Base::Whole => Base::Whole,
            Base::Read { written, .. } | Base::Reread { written } => Base::Reread { written: ElementMask::new(written.len())? },
            Base::Unread { written } => Base::Unread { written: ElementMask::new(written.len())? },
        })
    }

    /// The elements written into a chunk never read (`Unread`): a read of it needs the stored
    /// chunk beneath them (`ElementMask::copy_marked`).
    pub fn unread_written(&self) -> Option<&ElementMask> {
        match self {
            Base::Unread { written } => Some(written),
            _ => None,
        }
    }

    /// The elements written here since the chunk was read, where they count.
    pub fn written_mut(&mut self) -> Option<&mut ElementMask> {
        match self {
            Base::Whole => None,
            Base::Read { written, .. } | Base::Reread { written } | Base::Unread { written } => Some(written),
        }
    }

    /// This copy's base once the store under way when it was made ended as `stored`.
    pub fn after_store(self, stored: Stored) -> Base {
        match (self, stored) {
            // Still not read; what the store did not keep counts as written here again.
            (Base::Unread { mut written }, Stored::Failed(Base::Unread { written: before })) => {
                written.union(&before);
                Base::Unread { written }
            }
            (Base::Reread { written }, Stored::Exactly(version)) => Base::Read { version, written },
            (Base::Reread { mut written }, Stored::Failed(Base::Read { version, written: before })) => {
                written.union(&before);
                Base::Read { version, written }
            }
            (Base::Reread { mut written }, Stored::Failed(Base::Reread { written: before })) => {
                written.union(&before);
                Base::Reread { written }
            }
            (_, Stored::Failed(Base::Whole)) => Base::Whole,
            (copy, _) => copy,
        }
    }
}

/// How long a chunk is read again and merged, while other writers keep changing it, before its
/// store fails with the conflict. Every refusal means another writer's store landed, so the
/// writers together always progress; but a writer that stores a chunk as often as a merge takes
/// (a GET and a PUT) can win every time for a while: a count of tries ran out under such a
/// writer on a busy S3 server (8 refusals in 0.6 s), a time does not.
const MERGE_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// Store (or delete, when all fill) the decoded chunk at `coords` as `base` allows: over
/// anything (`Base::Whole`), or only over the version it was read at, merging into another
/// writer's version when that changed. Returns what was stored and, where another writer's
/// bytes (or, of a chunk never read, the stored ones) were merged in, the bytes stored: then
/// `decoded` is not what the store holds.
pub(crate) fn store_chunk(array: &Array, coords: &[u64], decoded: &[u8], base: &Base) -> Result<(StoredChunk, Option<Vec<u8>>)> {
    let (mut expect, written) = match base {
        Base::Whole => return Ok((array.store_chunk_if(coords, decoded, Expect::Any)?, None)),
        Base::Read { version, written } => (Some(Expect::seen(*version)), written),
        // Never read, of an array that held no chunk: created only if still absent.
        Base::Unread { written } if array.held_no_chunk() => (Some(Expect::seen(None)), written),
        Base::Reread { written } | Base::Unread { written } => (None, written),
    };
    let started = std::time::Instant::now();
    let mut merged: Option<Vec<u8>> = None;
    let mut attempt = 0usize;
    loop {
        if let Some(expect) = expect {
            match array.store_chunk_if(coords, merged.as_deref().unwrap_or(decoded), expect) {
                Err(e @ Error::Conflict { .. }) => {
                    COUNTERS.write_conflicts.fetch_add(1, Ordering::Relaxed);
                    if started.elapsed() > MERGE_FOR {
                        return Err(Error::conflict(
                            array.chunk_key(coords),
                            format!(
                                "changed by other writers {} times in {} s while this mount merged its bytes into it",
                                attempt + 1,
                                started.elapsed().as_secs()
                            ),
                        ));
                    }
                    tracing::debug!(attempt, "merging: {e}");
                    back_off(attempt);
                    attempt += 1;
                }
                other => return other.map(|stored| (stored, merged)),
            }
        }
        // Another writer's version: ours goes into it, element by element.
        let item = array.meta.item_size().max(1);
        let (mut fresh, now) = match array.retrieve_current_chunk(coords)? {
            Some((fresh, version)) => (fresh, Some(version)),
            None => (crate::zarr::region::filled(decoded.len() / item, &array.meta.fill)?, None),
        };
        written.copy_marked(decoded, &mut fresh, item);
        merged = Some(fresh);
        expect = Some(Expect::seen(now));
    }
}

/// Wait a while before merge `attempt` + 1: writers that collided on a chunk all read it again
/// at once, and would collide again, in step. A random wait, longer after each collision (up to
/// some 100 ms), lets one of them through at a time.
fn back_off(attempt: usize) {
    use std::hash::{BuildHasher, Hasher};
    let most_us = 1000u64 << attempt.min(7);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_usize(attempt);
    std::thread::sleep(std::time::Duration::from_micros(h.finish() % most_us));
}

/// Store the change of the chunk at `coords`: `decoded` (`None`: to be deleted, all fill) as
/// `base` allows (`store_chunk`).
pub(crate) fn store_edit(array: &Array, coords: &[u64], decoded: Option<&[u8]>, base: &Base) -> Result<(StoredChunk, Option<Vec<u8>>)> {
    let counted = match store_edit_uncounted(array, coords, decoded, base) {
        Ok(stored) => (&COUNTERS.written_back, Ok(stored)),
        Err(e) => (&COUNTERS.write_back_failures, Err(e)),
    };
    counted.0.fetch_add(1, Ordering::Relaxed);
    counted.1
}

fn store_edit_uncounted(array: &Array, coords: &[u64], decoded: Option<&[u8]>, base: &Base) -> Result<(StoredChunk, Option<Vec<u8>>)> {
    // Fill written into another writer's version of the chunk.
    let into_theirs = |written: &ElementMask| {
        let fill = crate::zarr::region::filled(array.chunk_repr(coords).num_elements() as usize, &array.meta.fill)?;
        store_chunk(array, coords, &fill, &Base::Reread { written: written.clone() })
    };
    // The version a chunk to delete is known at: read there, or (never read) of an array that
    // held no chunk, absent.
    let seen = match base {
        Base::Read { version, .. } if version.is_none() || array.store.deletes_conditionally() => Some(*version),
        Base::Unread { .. } if array.held_no_chunk() => Some(None),
        _ => None,
    };
    match (decoded, base) {
        (Some(decoded), base) => store_chunk(array, coords, decoded, base),
        (None, Base::Whole) => Ok((array.delete_chunk_if(coords, Expect::Any)?, None)),
        // Fill written into a chunk known at `seen`: deleted if it is still that version, no
        // buffer of fill made for it.
        (None, Base::Read { written, .. } | Base::Reread { written } | Base::Unread { written }) => match seen {
            Some(version) => match array.delete_chunk_if(coords, Expect::seen(version)) {
                Err(Error::Conflict { .. }) => {
                    COUNTERS.write_conflicts.fetch_add(1, Ordering::Relaxed);
                    into_theirs(written)
                }
                other => other.map(|stored| (stored, None)),
            },
            None => into_theirs(written),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(m: &ElementMask) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        m.runs(|s, n| out.push((s, n)));
        out
    }

    #[test]
    fn a_mask_gives_back_the_runs_marked() {
        let mut m = ElementMask::new(300).unwrap();
        m.mark_run(3, 2);
        m.mark_run(60, 140);
        m.mark_run(299, 1);
        assert_eq!(runs(&m), [(3, 2), (60, 140), (299, 1)]);
        let mut all = ElementMask::new(128).unwrap();
        all.mark_run(0, 128);
        assert_eq!(runs(&all), [(0, 128)]);
        assert_eq!(runs(&ElementMask::new(100).unwrap()), []);
    }

    #[test]
    fn bytes_written_in_part_of_an_element_are_all_a_merge_takes_of_it() {
        // Four 8-byte elements; bytes 4..8 of element 1 and 0..3 of element 2 written here.
        let mut m = ElementMask::new(4).unwrap();
        m.mark_bytes(1, 4, 8, 8);
        m.mark_bytes(2, 0, 3, 8);
        let ours = vec![1u8; 32];
        let mut theirs = vec![9u8; 32];
        m.copy_marked(&ours, &mut theirs, 8);
        let mut want = vec![9u8; 32];
        want[12..16].fill(1);
        want[16..19].fill(1);
        assert_eq!(theirs, want);
        // The other bytes written later: the element is whole.
        m.mark_bytes(1, 0, 4, 8);
        assert!(m.is_marked(1) && !m.is_marked(2));
        // Marked whole before: a write in part of it leaves it whole.
        m.mark_run(0, 1);
        m.mark_bytes(0, 2, 3, 8);
        assert!(m.is_marked(0));
        // A union keeps both sides' bytes.
        let mut other = ElementMask::new(4).unwrap();
        other.mark_bytes(2, 3, 8, 8);
        m.union(&other);
        let mut theirs = vec![9u8; 32];
        m.copy_marked(&ours, &mut theirs, 8);
        assert_eq!(theirs[..24], [1u8; 24]);
        assert_eq!(theirs[24..], [9u8; 8]);
    }

    #[test]
    fn a_box_marks_its_elements_only() {
        // A 4×5 chunk; the box rows 1..3, columns 2..4.
        let mut m = ElementMask::new(20).unwrap();
        m.mark_box(&Strided::of(&[4, 5], &[1, 2], 0), &[2, 2]);
        assert_eq!(runs(&m), [(7, 2), (12, 2)]);
        let (ours, mut theirs) = ((0..20u8).collect::<Vec<_>>(), vec![100u8; 20]);
        m.copy_marked(&ours, &mut theirs, 1);
        let mut want = vec![100u8; 20];
        for i in [7, 8, 12, 13] {
            want[i] = i as u8;
        }
        assert_eq!(theirs, want);
    }
}
