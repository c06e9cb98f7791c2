//! An array in a store: its metadata and the chunks it reads, by grid cell or (sharded) by
//! inner chunk. It knows nothing of caching or files.

use std::sync::Arc;

use super::codec::{ChunkRepr, ShardIndex, ShardingCodec};
use super::dtype::{DataType, NumericKind};
use super::grid::ChunkGrid;
use super::metadata::{self, ArrayMetadata, NodeMetadata};
use crate::store::{self, ByteRange, Store};
use crate::{Error, Result};

pub struct Array {
    /// The array's key prefix in the store (`""` when the store root is the array).
    pub path: String,
    pub meta: ArrayMetadata,
    store: Arc<dyn Store>,
}

/// The cells reads are cached by: whole chunks, or the inner chunks of shards.
pub enum ReadUnits<'a> {
    Chunks,
    InnerChunks {
        sharding: &'a ShardingCodec,
        per_shard: Vec<u64>,
    },
}

/// Read a node's metadata: `zarr.json`, else `.zarray` / `.zgroup`. `None` when it is no node.
pub fn read_node(store: &dyn Store, path: &str) -> Result<Option<NodeMetadata>> {
    if let Some(bytes) = store.get(&store::join(path, "zarr.json"))? {
        return metadata::parse_v3(&metadata::parse_json(&bytes, "zarr.json")?).map(Some);
    }
    if let Some(bytes) = store.get(&store::join(path, ".zarray"))? {
        return Ok(Some(NodeMetadata::Array(Box::new(
            metadata::parse_v2_array(&metadata::parse_json(&bytes, ".zarray")?)?,
        ))));
    }
    if let Some(bytes) = store.get(&store::join(path, ".zgroup"))? {
        return metadata::parse_v2_group(&metadata::parse_json(&bytes, ".zgroup")?).map(Some);
    }
    Ok(None)
}

impl Array {
    pub fn new(store: Arc<dyn Store>, path: &str, meta: ArrayMetadata) -> Array {
        Array {
            path: path.to_string(),
            meta,
            store,
        }
    }

    pub fn open(store: Arc<dyn Store>, path: &str) -> Result<Array> {
        match read_node(store.as_ref(), path)? {
            Some(NodeMetadata::Array(meta)) => Ok(Array::new(store, path, *meta)),
            Some(NodeMetadata::Group) => Err(Error::metadata(format!(
                "{path:?} is a group, not an array"
            ))),
            None => Err(Error::NotFound),
        }
    }

    pub fn chunk_key(&self, coords: &[u64]) -> String {
        store::join(&self.path, &self.meta.key_encoding.key(coords))
    }

    pub fn chunk_repr(&self, coords: &[u64]) -> ChunkRepr<'_> {
        ChunkRepr {
            shape: self.meta.grid.chunk_shape(coords),
            dtype: &self.meta.dtype,
            fill: &self.meta.fill,
        }
    }

    pub fn read_units(&self) -> ReadUnits<'_> {
        match self.meta.codecs.partial_sharding() {
            Some(sharding) => {
                let per_shard = sharding
                    .per_shard(&self.meta.grid.chunk_shape(&vec![0; self.meta.shape.len()]));
                ReadUnits::InnerChunks {
                    sharding,
                    per_shard,
                }
            }
            None => ReadUnits::Chunks,
        }
    }

    /// The grid of read units: the chunk grid, or the (regular) grid of inner chunks.
    pub fn unit_grid(&self) -> ChunkGrid {
        match self.read_units() {
            ReadUnits::Chunks => self.meta.grid.clone(),
            ReadUnits::InnerChunks { sharding, .. } => ChunkGrid::Regular {
                chunk_shape: sharding.inner_shape.clone(),
            },
        }
    }

    /// A whole decoded chunk, or `None` when its key is absent (fill).
    pub fn retrieve_chunk(&self, coords: &[u64]) -> Result<Option<Vec<u8>>> {
        let key = self.chunk_key(coords);
        let Some(bytes) = self.store.get(&key)? else {
            return Ok(None);
        };
        self.meta
            .codecs
            .decode(bytes, &self.chunk_repr(coords))
            .map(Some)
            .map_err(|e| e.in_key(&key))
    }

    /// The index of the shard at `shard`, or `None` when the shard is absent.
    pub fn retrieve_shard_index(
        &self,
        sharding: &ShardingCodec,
        shard: &[u64],
    ) -> Result<Option<ShardIndex>> {
        let key = self.chunk_key(shard);
        let shape = self.meta.grid.chunk_shape(shard);
        let range = sharding.index_range(&shape)?;
        let Some(bytes) = self
            .store
            .get_range(&key, range)
            .map_err(|e| e.in_key(&key))?
        else {
            return Ok(None);
        };
        sharding
            .decode_index(bytes, &shape)
            .map(Some)
            .map_err(|e| e.in_key(&key))
    }

    /// Inner chunk number `inner` (C order) of a shard, or `None` when it is empty.
    pub fn retrieve_inner_chunk(
        &self,
        sharding: &ShardingCodec,
        shard: &[u64],
        index: &ShardIndex,
        inner: usize,
    ) -> Result<Option<Vec<u8>>> {
        let Some((start, len)) = index.range(inner) else {
            return Ok(None);
        };
        let key = self.chunk_key(shard);
        let what = || format!("{key} (inner chunk {inner})");
        let bytes = self
            .store
            .get_range(&key, ByteRange::Range { start, len })
            .map_err(|e| e.in_key(&what()))?;
        let bytes = bytes.ok_or_else(|| Error::corrupt(what(), "the shard disappeared"))?;
        sharding
            .decode_inner(bytes, &self.chunk_repr(shard))
            .map(Some)
            .map_err(|e| e.in_key(&what()))
    }
}

/// Element equality for "is this fill": bitwise, except that any NaN equals any NaN.
pub fn same_element(a: &[u8], b: &[u8], dtype: &DataType) -> bool {
    if a == b {
        return true;
    }
    let is_nan = |x: &[u8]| match x.len() {
        2 => half::f16::from_le_bytes([x[0], x[1]]).is_nan(),
        4 => f32::from_le_bytes([x[0], x[1], x[2], x[3]]).is_nan(),
        8 => f64::from_le_bytes(x.try_into().unwrap_or([0; 8])).is_nan(),
        _ => false,
    };
    match dtype {
        DataType::Float16 | DataType::Float32 | DataType::Float64 => is_nan(a) && is_nan(b),
        DataType::Complex64 | DataType::Complex128 => {
            let h = a.len() / 2;
            (a[..h] == b[..h] || (is_nan(&a[..h]) && is_nan(&b[..h])))
                && (a[h..] == b[h..] || (is_nan(&a[h..]) && is_nan(&b[h..])))
        }
        _ => dtype.numeric_kind() == Some(NumericKind::Float) && is_nan(a) && is_nan(b),
    }
}
