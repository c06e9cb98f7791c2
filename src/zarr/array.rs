//! An array in a store: its metadata and the chunks it reads, by grid cell or (sharded) by
//! inner chunk. It knows nothing of caching or files.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::codec::{ChunkRepr, ShardIndex, ShardingCodec};
use super::consolidated;
use super::grid::ChunkGrid;
use super::metadata::{self, ArrayMetadata, NodeMetadata};
use super::region::IndexBox;
use crate::error::lock;
use crate::limits::MAX_DOCUMENT_BYTES;
use crate::metrics::COUNTERS;
use crate::store::{self, ByteRange, Store, Version};
use crate::{Error, Result};

/// How long a change of an array's shape waits for another mount's to end.
const SHAPE_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

pub struct Array {
    /// The array's key prefix in the store (`""` when the store root is the array).
    pub path: String,
    pub meta: ArrayMetadata,
    pub(crate) store: Arc<dyn Store>,
    /// The grid of inner chunks, when shards are read one inner chunk at a time.
    inner_grid: Option<ChunkGrid>,
    /// The version of the metadata document as this array (and those derived from it) last
    /// read or stored it, when known: storing the metadata over a document another writer has
    /// changed since is refused rather than silently undoing their change.
    stored_version: Arc<Mutex<Option<Version>>>,
    /// Whether the array held no chunk when first asked (`held_no_chunk`).
    held_no_chunk: Arc<std::sync::OnceLock<bool>>,
}

/// The cells reads are cached by: whole chunks, or the inner chunks of shards.
pub enum ReadUnits<'a> {
    Chunks,
    InnerChunks { sharding: &'a ShardingCodec },
}

impl Array {
    pub fn new(store: Arc<dyn Store>, path: &str, meta: ArrayMetadata) -> Array {
        // Parsing checked that inner chunks divide every shard edge.
        let inner_grid = meta.codecs.partial_sharding().and_then(|s| meta.grid.subdivided(&s.inner_shape).ok());
        Array { path: path.to_string(), meta, store, inner_grid, stored_version: Arc::default(), held_no_chunk: Arc::default() }
    }

    /// The same array with other metadata; it shares the stored version.
    fn derived(&self, meta: ArrayMetadata) -> Array {
        Array {
            stored_version: self.stored_version.clone(),
            held_no_chunk: self.held_no_chunk.clone(),
            ..Array::new(self.store.clone(), &self.path, meta)
        }
    }

    /// The version the metadata document was read at (taken before reading it).
    pub fn set_stored_version(&self, version: Option<Version>) {
        *lock(&self.stored_version) = version;
    }

    pub fn open(store: Arc<dyn Store>, path: &str) -> Result<Array> {
        match super::node::read_node(store.as_ref(), path)? {
            Some((NodeMetadata::Array(meta), version)) => {
                let array = Array::new(store, path, *meta);
                array.set_stored_version(Some(version));
                Ok(array)
            }
            Some((NodeMetadata::Group(_), _)) => Err(Error::metadata(format!("{path:?} is a group, not an array"))),
            None => Err(Error::NotFound),
        }
    }

    pub fn chunk_key(&self, coords: &[u64]) -> String {
        let mut key = String::with_capacity(self.path.len() + 4 + coords.len() * 8);
        self.push_chunk_key(coords, &mut key);
        key
    }

    fn push_chunk_key(&self, coords: &[u64], out: &mut String) {
        if !self.path.is_empty() {
            out.push_str(&self.path);
            out.push('/');
        }
        self.meta.key_encoding.push_key(coords, out);
    }

    pub fn chunk_repr(&self, coords: &[u64]) -> ChunkRepr<'_> {
        ChunkRepr { shape: self.meta.grid.chunk_shape(coords), dtype: &self.meta.dtype, fill: (&self.meta.fill).into() }
    }

    pub fn read_units(&self) -> ReadUnits<'_> {
        match (self.meta.codecs.partial_sharding(), &self.inner_grid) {
            (Some(sharding), Some(_)) => ReadUnits::InnerChunks { sharding },
            _ => ReadUnits::Chunks,
        }
    }

    /// The grid of read units: the chunk grid, or the grid of inner chunks.
    pub fn unit_grid(&self) -> &ChunkGrid {
        self.inner_grid.as_ref().unwrap_or(&self.meta.grid)
    }

    /// The (outer) chunk holding read unit `unit`, and the unit's number inside it (C order).
    pub fn chunk_of_unit<'a>(&self, unit: &'a [u64]) -> (Cow<'a, [u64]>, usize) {
        let Some(inner) = &self.inner_grid else { return (Cow::Borrowed(unit), 0) };
        let grid = &self.meta.grid;
        let mut chunk = Vec::with_capacity(unit.len());
        let mut index = 0u64;
        for (axis, &u) in unit.iter().enumerate() {
            let start = inner.chunk_start(axis, u);
            let c = grid.chunk_of(axis, start).0;
            let local = (start - grid.chunk_start(axis, c)) / inner.chunk_len(axis, u);
            let per_chunk = grid.chunk_len(axis, c) / inner.chunk_len(axis, u);
            index = index * per_chunk + local;
            chunk.push(c);
        }
        (Cow::Owned(chunk), index as usize)
    }

    /// The grid coordinates of every chunk stored, found by listing the store (for grids far
    /// larger than what they hold). Keys that are not this array's chunks are passed over.
    pub fn stored_chunks(&self) -> Result<Vec<Vec<u64>>> {
        let encoding = &self.meta.key_encoding;
        let ndim = self.meta.shape.len();
        let mut out = Vec::new();
        // Keys are split into directories by '/': walk as deep as a key goes.
        let depth = match encoding.separator() {
            '/' => ndim + usize::from(!matches!(encoding, super::key::ChunkKeyEncoding::V2 { .. })),
            _ => 1,
        };
        let mut pending = vec![(String::new(), 1usize)];
        while let Some((rel, level)) = pending.pop() {
            for e in self.store.list_dir(&store::join(&self.path, &rel))? {
                let key = if rel.is_empty() { e.name.clone() } else { format!("{rel}/{}", e.name) };
                if e.is_dir && level < depth {
                    pending.push((key, level + 1));
                } else if !e.is_dir
                    && let Some(coords) = encoding.decode(&key, ndim)
                {
                    out.push(coords);
                }
            }
        }
        Ok(out)
    }

    /// Every key under the array's prefix but its documents, split into those a removal of the
    /// array deletes — its chunks (any grid index its key encoding names) and the temporary
    /// names of interrupted writes — and the rest, which are not the array's and are kept.
    pub fn stored_keys(&self) -> Result<(Vec<String>, Vec<String>)> {
        let encoding = &self.meta.key_encoding;
        let ndim = self.meta.shape.len();
        let (mut ours, mut others) = (Vec::new(), Vec::new());
        let mut pending = vec![(String::new(), 0usize)];
        while let Some((rel, depth)) = pending.pop() {
            let dir = if rel.is_empty() { self.path.clone() } else { store::join(&self.path, &rel) };
            for e in self.store.list_dir(&dir)? {
                let key = if rel.is_empty() { e.name.clone() } else { format!("{rel}/{}", e.name) };
                let full = store::join(&self.path, &key);
                if e.is_dir && depth <= ndim {
                    pending.push((key, depth + 1));
                } else if e.is_dir {
                    others.push(format!("{full}/"));
                } else if rel.is_empty() && super::node::METADATA_DOCUMENTS.contains(&e.name.as_str()) {
                } else if encoding.decode(&key, ndim).is_some() || store::is_temporary(&e.name) {
                    ours.push(full);
                } else {
                    others.push(full);
                }
            }
        }
        Ok((ours, others))
    }

    /// The same array at another path (moved with its node).
    pub fn moved_to(&self, path: &str) -> Result<Array> {
        let mut moved = self.derived(self.meta.edited(|_| {})?);
        moved.path = path.to_string();
        Ok(moved)
    }

    /// Which of `chunks` are surely not stored, from one listing of the directory their keys
    /// share, taken only when it holds no more names than there are chunks (so it costs no more
    /// than probing them one by one would). `false` means "may be stored". Sparse arrays with
    /// tiny chunks make a read touch thousands of absent keys; this answers them together.
    pub fn known_absent<'a>(&self, chunks: impl Iterator<Item = &'a [u64]>) -> Result<Vec<bool>> {
        let (mut keys, mut ends) = (String::new(), Vec::new());
        for c in chunks {
            self.push_chunk_key(c, &mut keys);
            ends.push(keys.len());
        }
        let key = |i: usize| &keys[if i == 0 { 0 } else { ends[i - 1] }..ends[i]];
        let Some(&first_end) = ends.first() else { return Ok(Vec::new()) };
        let first = &keys[..first_end];
        let common =
            (1..ends.len()).fold(first.len(), |n, i| first.bytes().zip(key(i).bytes()).take(n).take_while(|(a, b)| a == b).count());
        let slash = first.as_bytes()[..common].iter().rposition(|&b| b == b'/');
        let (dir, dir_len) = slash.map_or(("", 0), |i| (&first[..i], i + 1));
        let Some(names) = self.store.list_names_upto(dir, ends.len())? else {
            return Ok(vec![false; ends.len()]);
        };
        let names: std::collections::HashSet<String> = names.into_iter().collect();
        Ok((0..ends.len())
            .map(|i| {
                let rest = &key(i)[dir_len..];
                !names.contains(rest.split('/').next().unwrap_or(rest))
            })
            .collect())
    }

    /// Whether the array's directory held no chunk key when first asked: one listing of at most
    /// a few names (none once a read found a chunk), kept for the array's life. Chunks stored
    /// since (by this mount or another) are not counted: this is a belief, for a conditional
    /// create to check, that spares a new array's chunks written in part a read each (a GET
    /// that would find nothing).
    pub fn held_no_chunk(&self) -> bool {
        *self.held_no_chunk.get_or_init(|| match self.store.list_names_upto(&self.path, 8) {
            // Metadata documents, and the mount's lock files beside them, are no chunks.
            Ok(Some(names)) => names.iter().all(|n| n.starts_with('.') || n == "zarr.json"),
            _ => false,
        })
    }

    /// Whether `held_no_chunk` is answered already (asks nothing).
    pub fn held_no_chunk_known(&self) -> bool {
        self.held_no_chunk.get().is_some()
    }

    /// The read units inside (outer) chunk `chunk`.
    pub fn units_of_chunk(&self, chunk: &[u64]) -> IndexBox {
        match &self.inner_grid {
            Some(inner) => inner.cells_touching(&self.meta.grid.cell_region(chunk)),
            None => IndexBox { start: chunk.to_vec(), end: chunk.iter().map(|c| c + 1).collect() },
        }
    }

    /// A whole decoded chunk and the version it was stored at, or `None` when its key is
    /// absent (fill).
    pub fn retrieve_chunk(&self, coords: &[u64]) -> Result<Option<(Vec<u8>, Version)>> {
        self.retrieve(coords, false)
    }

    /// `retrieve_chunk` as the store holds it now, not as a recent listing showed it: what a
    /// merge into another writer's chunk reads.
    pub fn retrieve_current_chunk(&self, coords: &[u64]) -> Result<Option<(Vec<u8>, Version)>> {
        self.retrieve(coords, true)
    }

    fn retrieve(&self, coords: &[u64], current: bool) -> Result<Option<(Vec<u8>, Version)>> {
        let key = self.chunk_key(coords);
        let repr = self.chunk_repr(coords);
        let started = Instant::now();
        let bound = self.meta.codecs.encoded_bound(&repr);
        let value = if current { self.store.get_current(&key, bound)? } else { self.store.get_value(&key, bound)? };
        let Some(value) = value else {
            tracing::debug!(key, took_us = started.elapsed().as_micros() as u64, "chunk absent: fill");
            return Ok(None);
        };
        // A chunk found stored: no listing need ask whether the array holds any.
        let _ = self.held_no_chunk.set(false);
        let (fetched, bytes) = (started.elapsed(), value.bytes.len());
        let decoded = COUNTERS.decode.time(|| self.meta.codecs.decode(value.bytes, &repr)).map_err(|e| e.in_key(&key))?;
        tracing::debug!(
            key,
            bytes,
            decoded = decoded.len(),
            fetch_us = fetched.as_micros() as u64,
            decode_us = (started.elapsed() - fetched).as_micros() as u64,
            "chunk read and decoded"
        );
        Ok(Some((decoded, value.version)))
    }

    /// Calls `f` with the elements of each stored chunk that lie inside the array, a run along
    /// the last axis at a time, and says whether any chunk is absent (its elements the fill).
    /// Every chunk is read: for small arrays only.
    pub fn visit_stored_elements(&self, f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        let meta = &self.meta;
        let (grid, item) = (meta.grid.grid_shape(&meta.shape), meta.item_size());
        let mut result = Ok(false);
        IndexBox::whole(&grid).for_each(|coords| {
            let Ok(absent) = result else { return };
            let chunk = match self.retrieve_chunk(coords) {
                Ok(Some((chunk, _))) => chunk,
                Ok(None) => {
                    result = Ok(true);
                    return;
                }
                Err(e) => {
                    result = Err(e);
                    return;
                }
            };
            // The part of the chunk inside the array, and the chunk's strides in elements.
            let declared = meta.grid.chunk_shape(coords);
            let inside: Vec<u64> =
                meta.grid.cell_region(coords).iter().zip(&meta.shape).map(|(&(from, to), &n)| to.min(n).saturating_sub(from)).collect();
            let Some((&run, outer)) = inside.split_last() else {
                f(chunk.get(..item).unwrap_or_default());
                result = Ok(absent);
                return;
            };
            let mut strides = vec![1u64; declared.len()];
            for a in (0..declared.len().saturating_sub(1)).rev() {
                strides[a] = strides[a + 1] * declared[a + 1];
            }
            if run > 0 {
                IndexBox::whole(outer).for_each(|row| {
                    let at = row.iter().zip(&strides).map(|(i, s)| i * s).sum::<u64>() as usize * item;
                    f(chunk.get(at..at + run as usize * item).unwrap_or_default());
                });
            }
            result = Ok(absent);
        });
        result
    }

    /// The version of the stored chunk at `coords`, or `None` when its key is absent.
    pub fn chunk_version(&self, coords: &[u64]) -> Result<Option<Version>> {
        let key = self.chunk_key(coords);
        Ok(self.store.head(&key).map_err(|e| e.in_key(&key))?.map(|h| h.version))
    }

    /// The elements of a chunk of variable-length elements (C order, padding included), or
    /// `None` when its key is absent; they decode to at most `max` bytes.
    pub fn retrieve_elements(&self, coords: &[u64], max: u64) -> Result<Option<Vec<Vec<u8>>>> {
        let key = self.chunk_key(coords);
        let Some(bytes) = self.store.get(&key, self.meta.codecs.elements_bound(max))? else { return Ok(None) };
        let n = self.meta.grid.chunk_shape(coords).iter().product::<u64>() as usize;
        COUNTERS.decode.time(|| self.meta.codecs.decode_elements(bytes, n, max)).map(Some).map_err(|e| e.in_key(&key))
    }

    /// Store a chunk of variable-length elements, or delete it when every element is the fill.
    pub fn store_elements(&self, coords: &[u64], elements: &[Vec<u8>]) -> Result<String> {
        let key = self.chunk_key(coords);
        if elements.iter().all(|e| *e == self.meta.fill) {
            self.store.delete(&key)?;
        } else {
            self.store.set(&key, &COUNTERS.encode.time(|| self.meta.codecs.encode_elements(elements))?)?;
        }
        Ok(key)
    }

    /// The index of the shard at `shard` with the version of the shard it was read from, or
    /// `None` when the shard is absent.
    pub fn retrieve_shard_index(&self, sharding: &ShardingCodec, shard: &[u64]) -> Result<Option<(ShardIndex, Version)>> {
        let key = self.chunk_key(shard);
        let shape = self.meta.grid.chunk_shape(shard);
        let range = sharding.index_range(&shape)?;
        let Some((bytes, version)) = self.store.get_range_versioned(&key, range).map_err(|e| e.in_key(&key))? else {
            return Ok(None);
        };
        sharding.decode_index(bytes, &shape).map(|index| Some((index, version))).map_err(|e| e.in_key(&key))
    }

    /// A whole shard in one request: its bytes, its decoded index and its version, or `None`
    /// when it is absent. What a read of most of a shard's inner chunks fetches, rather than its
    /// index and then each chunk.
    pub fn retrieve_shard(&self, sharding: &ShardingCodec, shard: &[u64]) -> Result<Option<(Vec<u8>, ShardIndex, Version)>> {
        let key = self.chunk_key(shard);
        let shape = self.meta.grid.chunk_shape(shard);
        let bound = self.meta.codecs.encoded_bound(&self.chunk_repr(shard));
        let Some(value) = self.store.get_value(&key, bound)? else { return Ok(None) };
        let n = sharding.index_size(&shape).ok_or_else(|| Error::metadata("sharding index has no fixed size"))?;
        let len = value.bytes.len() as u64;
        if len < n {
            return Err(Error::corrupt(&key, format!("{len} bytes, fewer than its {n}-byte index")));
        }
        let at = if sharding.index_at_end { (len - n) as usize } else { 0 };
        let index = sharding.decode_index(value.bytes[at..at + n as usize].to_vec(), &shape).map_err(|e| e.in_key(&key))?;
        tracing::debug!(key, len, "whole shard read");
        Ok(Some((value.bytes, index, value.version)))
    }

    /// `len` bytes from `start` of a shard, which must still be the write of version `version`
    /// (else an `Error::Stale`: its index must be read again).
    pub fn retrieve_shard_range(&self, shard: &[u64], start: u64, len: u64, version: Version) -> Result<Vec<u8>> {
        let key = self.chunk_key(shard);
        let changed = || Error::Stale(format!("{key} was rewritten since its index was read"));
        let read = match self.store.get_range_versioned(&key, ByteRange::Range { start, len }) {
            // A range past the end of a shard rewritten shorter.
            Err(Error::Corrupt { .. }) if self.store.head(&key)?.is_none_or(|h| h.version != version) => return Err(changed()),
            other => other.map_err(|e| e.in_key(&format!("{key} (bytes {start}..{})", start + len)))?,
        };
        match read {
            Some((bytes, now)) if now == version => {
                tracing::debug!(key, start, len, "shard range read");
                Ok(bytes)
            }
            _ => Err(changed()),
        }
    }

    /// Decode inner chunk number `inner` of a shard from its stored bytes.
    pub fn decode_inner_chunk<'b>(
        &self,
        sharding: &ShardingCodec,
        shard: &[u64],
        inner: usize,
        bytes: impl Into<std::borrow::Cow<'b, [u8]>>,
    ) -> Result<Vec<u8>> {
        let what = || format!("{} (inner chunk {inner})", self.chunk_key(shard));
        let repr = self.chunk_repr(shard);
        let bound = sharding.inner_bound(&repr);
        let bytes = bytes.into();
        let len = bytes.len() as u64;
        if len > bound {
            return Err(Error::corrupt(what(), format!("the shard index gives it {len} bytes, more than the {bound} it can take")));
        }
        COUNTERS.decode.time(|| sharding.decode_inner(bytes, &repr)).map_err(|e| e.in_key(&what()))
    }

    /// Inner chunk number `inner` (C order) of a shard, read at the offsets of `index`, which
    /// was read from the shard's version `version`: `Ok(None)` when it is empty, and an
    /// `Error::Stale` when the shard is now another write (its index must be read again).
    pub fn retrieve_inner_chunk(
        &self,
        sharding: &ShardingCodec,
        shard: &[u64],
        index: &ShardIndex,
        version: Version,
        inner: usize,
    ) -> Result<Option<Vec<u8>>> {
        let Some((start, len)) = index.range(inner) else {
            return Ok(None);
        };
        let bound = sharding.inner_bound(&self.chunk_repr(shard));
        if len > bound {
            let what = format!("{} (inner chunk {inner})", self.chunk_key(shard));
            return Err(Error::corrupt(what, format!("the shard index gives it {len} bytes, more than the {bound} it can take")));
        }
        let bytes = self.retrieve_shard_range(shard, start, len, version)?;
        self.decode_inner_chunk(sharding, shard, inner, bytes).map(Some)
    }
}

/// Where the bytes of a prepend come from: positioned reads of the new region (C order), from
/// any worker.
pub trait PrependSource: Send + Sync {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
    /// Whether `len` bytes from `offset` are surely zeros never written (a hole of a sparse
    /// file): they need not be read.
    fn is_hole(&self, offset: u64, len: u64) -> bool {
        let _ = (offset, len);
        false
    }
}

impl PrependSource for std::fs::File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }

    fn is_hole(&self, offset: u64, len: u64) -> bool {
        use std::os::fd::AsRawFd;
        let Ok(at) = i64::try_from(offset) else { return false };
        // SAFETY: lseek on a descriptor this file owns; the file's own offset is not used by
        // positioned reads.
        let data = unsafe { libc::lseek(self.as_raw_fd(), at, libc::SEEK_DATA) };
        // ENXIO: no data from `offset` to the end.
        (data < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO))
            || (data >= 0 && data as u64 >= offset.saturating_add(len))
    }
}

/// The keys an array write touched.
#[derive(Debug, Default)]
pub struct Touched {
    pub keys: Vec<String>,
}

/// A chunk written: its key, and the version stored (`None`: the key was deleted, all fill).
pub struct StoredChunk {
    pub key: String,
    pub version: Option<Version>,
}

impl Array {
    /// Whether every element of a decoded chunk equals the fill value (NaN equals NaN).
    pub fn is_fill(&self, decoded: &[u8]) -> bool {
        let fill = &self.meta.fill;
        // Only a chunk that differs from the fill's bytes somewhere is compared element by
        // element, for NaNs.
        if crate::zarr::region::is_filled(decoded, fill) {
            return true;
        }
        decoded.chunks_exact(fill.len()).all(|e| self.meta.dtype.same_element(e, fill))
    }

    /// Store a decoded chunk: encoded under its key, or its key deleted when it is all fill
    /// (as zarr-python's default `write_empty_chunks=False` does), over whatever is stored.
    pub fn store_chunk(&self, coords: &[u64], decoded: &[u8]) -> Result<StoredChunk> {
        self.store_chunk_if(coords, decoded, store::Expect::Any)
    }

    /// `store_chunk`, only if the stored chunk is still what `expect` says (`Error::Conflict`
    /// else). Where the store cannot delete conditionally, a chunk of fill that must replace a
    /// version is stored as such (it reads the same; zarr-python writes one so with
    /// `write_empty_chunks=True`).
    pub fn store_chunk_if(&self, coords: &[u64], decoded: &[u8], expect: store::Expect) -> Result<StoredChunk> {
        let key = self.chunk_key(coords);
        if self.is_fill(decoded) && (self.store.deletes_conditionally() || !matches!(expect, store::Expect::At(_))) {
            self.store.delete_if(&key, expect)?;
            return Ok(StoredChunk { key, version: None });
        }
        let bytes =
            COUNTERS.encode.time(|| self.meta.codecs.encode(decoded.to_vec(), &self.chunk_repr(coords))).map_err(|e| e.in_key(&key))?;
        let version = self.store.set_if(&key, &bytes, expect)?;
        Ok(StoredChunk { key, version: Some(version) })
    }

    pub fn delete_chunk(&self, coords: &[u64]) -> Result<StoredChunk> {
        self.delete_chunk_if(coords, store::Expect::Any)
    }

    /// Delete the chunk at `coords` only if it is still what `expect` says (`Error::Conflict`
    /// else; `Error::Unsupported` where the store cannot delete conditionally).
    pub fn delete_chunk_if(&self, coords: &[u64], expect: store::Expect) -> Result<StoredChunk> {
        let key = self.chunk_key(coords);
        self.store.delete_if(&key, expect)?;
        Ok(StoredChunk { key, version: None })
    }

    /// Call `f` for the chunks wholly past row `rows` along axis 0: enumerated when few, else
    /// those stored, so that cutting a grid of 2^40 chunks costs what is stored, not the grid.
    pub fn for_each_chunk_outside(&self, rows: u64, f: &mut dyn FnMut(&[u64]) -> Result<()>) -> Result<()> {
        let meta = &self.meta;
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
            for coords in self.stored_chunks()?.into_iter().filter(|c| c[0] >= first_out) {
                f(&coords)?;
            }
            return Ok(());
        }
        let mut result = Ok(());
        IndexBox::band(&old_grid, first_out, old_grid[0]).for_each(|coords| {
            if result.is_ok() {
                result = f(coords);
            }
        });
        result
    }

    /// The same array with other attributes (`None`: none); nothing is stored.
    pub fn with_attributes(&self, attributes: Option<metadata::Attributes>) -> Result<Array> {
        Ok(self.derived(self.meta.with_attributes(attributes)?))
    }

    /// The same array with other axis names (v2 keeps them in `.zattrs`; nothing is stored).
    pub fn with_dimension_names(&self, names: Option<Vec<Option<String>>>) -> Result<Array> {
        let mut meta = self.meta.edited(|_| {})?;
        meta.dimension_names = names;
        Ok(self.derived(meta))
    }

    /// The same array with another shape (metadata only; nothing is stored).
    pub fn with_shape(&self, shape: &[u64]) -> Result<Array> {
        Ok(self.derived(self.meta.with_shape(shape)?))
    }

    /// The same array switched to the `offset` chunk key encoding (metadata only).
    pub fn adopted_offset(&self) -> Result<Array> {
        Ok(self.derived(self.meta.adopted_offset()?))
    }

    /// The same array under the `default` chunk key encoding (its keys are not moved here).
    pub fn default_encoded(&self) -> Result<Array> {
        Ok(self.derived(self.meta.default_encoded()?))
    }

    /// Prepend `len` bytes along `axis`: the new region, C order, little-endian, read from
    /// `source`, with every dimension as the array's but `axis`, which must be a whole number of
    /// chunks. The new chunks are stored (their keys lie outside the old grid, so no reader sees
    /// them); the returned array's metadata is not: storing it is the commit. With it, the keys
    /// written. `None` for no bytes. On an error the chunks stored so far are deleted again.
    ///
    /// Each chunk is read from the source by itself (strided reads of its rows) and encoded on a
    /// worker, a few at a time: memory holds a few chunks whatever the width of a row.
    pub fn prepend(
        &self,
        axis: usize,
        len: u64,
        source: Arc<dyn PrependSource>,
        pool: &crate::pool::WorkerPool,
    ) -> Result<Option<(Arc<Array>, Touched)>> {
        let meta = &self.meta;
        if axis >= meta.shape.len() {
            return Err(Error::Invalid(format!("axis {axis} is not an axis of a {}-d array", meta.shape.len())));
        }
        if let Some(why) = meta.prepend_refusal() {
            return Err(Error::Unsupported(format!("cannot prepend: {why}")));
        }
        let others: u64 = meta.shape.iter().enumerate().filter(|&(a, _)| a != axis).map(|(_, &n)| n).product();
        let slab = others * meta.item_size() as u64;
        if len == 0 {
            return Ok(None);
        }
        if slab == 0 || !len.is_multiple_of(slab) {
            return Err(Error::Invalid(format!("{len} bytes is not a whole number of {slab}-byte slabs along axis {axis}")));
        }
        let (next_meta, new_chunks) = meta.prepended(axis, len / slab)?;
        let next = Arc::new(self.derived(next_meta));
        // The new region: the new chunks along `axis`, everything along the other axes; in the
        // new grid it is the chunks from 0 on along `axis`.
        let mut region = meta.shape.clone();
        region[axis] = len / slab;
        let grid = &next.meta.grid;
        let cells: Vec<u64> =
            region.iter().enumerate().map(|(a, &n)| if a == axis { new_chunks } else { grid.axes[a].chunks_for(n) }).collect();
        let region: Arc<[u64]> = region.into();
        let (tx, rx) = crossbeam_channel::unbounded::<Result<String>>();
        let most_in_flight = 2 * pool.threads();
        let (mut in_flight, mut keys, mut failed) = (0usize, Vec::new(), None);
        fn take(result: Result<String>, keys: &mut Vec<String>, failed: &mut Option<Error>) {
            match result {
                Ok(key) => keys.push(key),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        let _ = IndexBox::whole(&cells).try_for_each(|coords| {
            while in_flight >= most_in_flight {
                match rx.recv() {
                    Ok(r) => take(r, &mut keys, &mut failed),
                    Err(_) => failed = Some(Error::Internal("a worker storing prepended chunks stopped".into())),
                }
                in_flight -= 1;
            }
            if failed.is_some() {
                return std::ops::ControlFlow::Break(());
            }
            let (next, region, source, tx, coords) = (next.clone(), region.clone(), source.clone(), tx.clone(), coords.to_vec());
            pool.submit(move || {
                let stored = crate::error::catch("prepend", || {
                    let chunk = next.chunk_from(source.as_ref(), &region, &coords)?;
                    next.store_chunk(&coords, &chunk).map(|stored| stored.key)
                });
                let _ = tx.send(stored);
            });
            in_flight += 1;
            std::ops::ControlFlow::Continue(())
        });
        drop(tx);
        for _ in 0..in_flight {
            match rx.recv() {
                Ok(r) => take(r, &mut keys, &mut failed),
                Err(_) => failed = Some(Error::Internal("a worker storing prepended chunks stopped".into())),
            }
        }
        if let Some(e) = failed {
            // Nothing of a failed prepend stays behind: its chunks lie where the next one goes.
            for key in &keys {
                if let Err(d) = self.store.delete(key) {
                    tracing::warn!(key, "a chunk of a failed prepend stays behind: {d}");
                }
            }
            // And none of the directories made for them (a chunk that failed may have made
            // its own): those named by a new index along `axis` hold new keys only, so the walk
            // costs what the prepend stored.
            let dirs = (0..new_chunks).filter_map(|i| {
                let mut coords = vec![0; cells.len()];
                coords[axis] = i;
                new_key_dir(&self.path, &next.chunk_key(&coords), axis)
            });
            for dir in dirs {
                let _ = self.store.remove_empty_dirs(&dir);
            }
            return Err(e);
        }
        Ok(Some((next, Touched { keys })))
    }

    /// The decoded chunk at `coords` (of this, the prepended array's grid) of the new `region`,
    /// read from `source` (the region's bytes, C order): one read per run of contiguous bytes,
    /// fill where the chunk reaches past the region.
    fn chunk_from(&self, source: &dyn PrependSource, region: &[u64], coords: &[u64]) -> Result<Vec<u8>> {
        let grid = &self.meta.grid;
        let item = self.meta.item_size();
        let chunk_shape = grid.chunk_shape(coords);
        let origin: Vec<u64> = coords.iter().enumerate().map(|(a, &c)| grid.chunk_start(a, c)).collect();
        let extent: Vec<u64> = (0..region.len()).map(|a| chunk_shape[a].min(region[a] - origin[a])).collect();
        // Axes `inner..` form one run: every axis inside `inner` is whole in the region.
        let mut inner = region.len() - 1;
        while inner > 0 && extent[inner] == region[inner] {
            inner -= 1;
        }
        let strides = super::region::c_strides(region);
        let run = extent[inner..].iter().product::<u64>() as usize * item;
        let first: u64 = (0..region.len()).map(|a| origin[a] * strides[a]).sum();
        let last: u64 = (0..region.len()).map(|a| (origin[a] + extent[a] - 1) * strides[a]).sum();
        let chunk_len = chunk_shape.iter().product::<u64>() as usize;
        // A chunk whose bytes all lie in a hole of the source is fill, unread.
        if source.is_hole(first * item as u64, (last + 1 - first) * item as u64) && self.meta.fill.iter().all(|&b| b == 0) {
            return super::region::filled(chunk_len, &self.meta.fill);
        }
        let mut boxed = crate::limits::zeroed(extent.iter().product::<u64>() as usize * item)?;
        let mut runs = boxed.chunks_exact_mut(run.max(1));
        let mut failed = None;
        IndexBox::whole(&extent[..inner]).for_each(|outer| {
            let Some(dst) = runs.next() else { return };
            let at: u64 = (0..region.len()).map(|a| (origin[a] + outer.get(a).copied().unwrap_or(0)) * strides[a]).sum();
            if failed.is_none()
                && let Err(e) = source.read_exact_at(dst, at * item as u64)
            {
                failed = Some(e);
            }
        });
        if let Some(e) = failed {
            return Err(Error::Io(e));
        }
        if extent == chunk_shape {
            return Ok(boxed);
        }
        let mut chunk = super::region::filled(chunk_len, &self.meta.fill)?;
        let zeros = vec![0; chunk_shape.len()];
        let (src, dst) = (super::region::Strided::of(&extent, &zeros, 0), super::region::Strided::of(&chunk_shape, &zeros, 0));
        super::region::copy_box(&boxed, &src, &mut chunk, &dst, &extent, item);
        Ok(chunk)
    }

    /// Hold the lock of this array's shape (of its metadata document) against every other
    /// mount: growing, shrinking and prepending store chunks where the stored shape does not
    /// reach yet, which must not land over another mount's doing the same. None is needed where
    /// the store arbitrates commits itself (Icechunk).
    pub fn hold_shape_lock(&self) -> Result<Option<store::Held>> {
        if self.store.arbitrates_commits() {
            return Ok(None);
        }
        let key = store::join(&self.path, self.meta.document_name());
        self.store.clone().hold_lock(&key, SHAPE_LOCK_WAIT).map(Some)
    }

    /// Refuse, as `store_metadata` would, when another writer changed (or removed) the metadata
    /// document since this array read it: asked before chunks are stored, so that none lands in
    /// an array another writer has changed meanwhile.
    pub fn check_metadata_current(&self) -> Result<()> {
        let Some(read_at) = *lock(&self.stored_version) else { return Ok(()) };
        let key = store::join(&self.path, self.meta.document_name());
        match self.store.head_current(&key)? {
            Some(now) if now.version == read_at => Ok(()),
            Some(_) => Err(Error::conflict(
                &key,
                "changed in the store by another writer since this mount read it; nothing of this array is stored over it",
            )),
            None => Err(Error::refused(&key, "removed from the store since this mount read it; nothing of this array is stored")),
        }
    }

    /// Write the metadata document, and the consolidated metadata of every ancestor group
    /// that lists this array, so that readers preferring consolidated metadata see the new
    /// shape: both or neither (consolidated metadata first, put back if the document fails).
    pub fn store_metadata(&self) -> Result<Touched> {
        let key = store::join(&self.path, self.meta.document_name());
        let old = self.store.get_value(&key, MAX_DOCUMENT_BYTES)?;
        let mut stored = lock(&self.stored_version);
        if let (Some(read_at), Some(now)) = (*stored, &old)
            && now.version != read_at
        {
            return Err(Error::conflict(&key, "changed in the store by another writer since this mount read it; not overwritten"));
        }
        let change = consolidated::Change::Set(self.meta.document_name(), &self.meta.document);
        let update = consolidated::Update::begin(self.store.as_ref(), &[(&self.path, self.meta.format, change)])?;
        match self.store.set(&key, &metadata::render_like(old.as_ref().map(|v| v.bytes.as_slice()), &self.meta.document)) {
            Ok(version) => *stored = Some(version),
            Err(e) => {
                update.undo(self.store.as_ref());
                return Err(e);
            }
        }
        Ok(Touched { keys: std::iter::once(key).chain(update.keys()).collect() })
    }
}

/// The directory of a new key of a prepend along `axis` that holds new keys only: the key's
/// parts below the array up to its index along `axis` (`c/-1` of `c/-1/0` along axis 0).
/// `None` where that part is the key itself (the last axis, or the `.` separator).
fn new_key_dir(array: &str, key: &str, axis: usize) -> Option<String> {
    let relative = if array.is_empty() { key } else { key.strip_prefix(array)?.strip_prefix('/')? };
    let parts: Vec<&str> = relative.split('/').collect();
    (parts.len() > axis + 2).then(|| store::join(array, &parts[..axis + 2].join("/")))
}

#[cfg(test)]
mod tests {
    use super::new_key_dir;

    #[test]
    fn the_directories_of_new_keys_hold_new_keys_only() {
        assert_eq!(new_key_dir("a", "a/c/-1/0", 0).as_deref(), Some("a/c/-1"));
        assert_eq!(new_key_dir("g/a", "g/a/c/0/-1/3", 1).as_deref(), Some("g/a/c/0/-1"));
        assert_eq!(new_key_dir("", "c/-2/0", 0).as_deref(), Some("c/-2"));
        // The last axis's index is the key itself; the `.` separator makes no directories.
        assert_eq!(new_key_dir("a", "a/c/0/-1", 1), None);
        assert_eq!(new_key_dir("a", "a/c.-1.0", 0), None);
    }
}
