//! `sharding_indexed` (array→bytes): a shard holds inner chunks, each encoded with the inner
//! codecs, and an index of `(offset, nbytes)` per inner chunk (C order; all-ones = empty).
//! Reads can fetch the index and then single inner chunks by byte range.
//! Spec: zarr v3 `sharding_indexed`. v3 `{"name": "sharding_indexed", "configuration":
//! {"chunk_shape": [32, 32], "codecs": [{"name": "bytes"}], "index_codecs": [{"name": "bytes"},
//! {"name": "crc32c"}], "index_location": "end"}}`; no v2 form.

use serde_json::{Value, json};

use super::{ArrayToBytesCodec, ChunkRepr, CodecChain, CodecTraits, corrupt};
use crate::store::ByteRange;
use crate::zarr::dtype::DataType;
use crate::zarr::region::{Strided, copy_box, filled};
use crate::{Error, Result};

static INDEX_DTYPE: DataType = DataType::UInt64;
const EMPTY: u64 = u64::MAX;

#[derive(Debug)]
pub struct ShardingCodec {
    pub inner_shape: Vec<u64>,
    pub inner: CodecChain,
    pub index: CodecChain,
    pub index_at_end: bool,
}

/// A decoded shard index: `(offset, nbytes)` per inner chunk in C order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardIndex {
    pub entries: Vec<(u64, u64)>,
}

impl ShardIndex {
    /// The byte range of inner chunk `i`, or `None` when it is empty (fill).
    pub fn range(&self, i: usize) -> Option<(u64, u64)> {
        self.entries.get(i).copied().filter(|&(o, n)| !(o == EMPTY && n == EMPTY))
    }

    /// Heap bytes held, for cache accounting.
    pub fn byte_len(&self) -> usize {
        self.entries.len() * 16
    }
}

impl ShardingCodec {
    pub fn parse(config: &Value, dtype: &DataType, shard_shape: &[u64]) -> Result<ShardingCodec> {
        let inner_shape = crate::zarr::grid::parse_shape(
            config.get("chunk_shape").ok_or_else(|| Error::metadata("sharding_indexed needs configuration.chunk_shape"))?,
            "sharding chunk_shape",
        )?;
        if inner_shape.len() != shard_shape.len() || inner_shape.iter().zip(shard_shape).any(|(&i, &s)| i == 0 || s % i != 0) {
            return Err(Error::metadata(format!("sharding chunk_shape {inner_shape:?} does not divide the shard shape {shard_shape:?}")));
        }
        let inner = CodecChain::parse_v3(
            config.get("codecs").unwrap_or(&json!([{"name": "bytes", "configuration": {"endian": "little"}}])),
            dtype,
            &inner_shape,
        )?;
        let per_shard: Vec<u64> = shard_shape.iter().zip(&inner_shape).map(|(s, i)| s / i).collect();
        // The index is read and held whole: 16 bytes per inner chunk, within the chunk bound.
        let bound = crate::limits::max_chunk_bytes();
        if per_shard.iter().try_fold(16u64, |acc, &n| acc.checked_mul(n)).is_none_or(|n| n > bound) {
            return Err(Error::metadata(format!(
                "sharding chunk_shape {inner_shape:?} makes a shard index of more than {bound} bytes (the --max-chunk-size bound)"
            )));
        }
        let default_index = json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]);
        let index = CodecChain::parse_v3(config.get("index_codecs").unwrap_or(&default_index), &INDEX_DTYPE, &index_shape(&per_shard))?;
        let index_at_end = match config.get("index_location").and_then(Value::as_str).unwrap_or("end") {
            "end" => true,
            "start" => false,
            other => {
                return Err(Error::metadata(format!("sharding index_location {other:?} must be \"start\" or \"end\"")));
            }
        };
        let codec = ShardingCodec { inner_shape, inner, index, index_at_end };
        codec.index_size(shard_shape).ok_or_else(|| Error::metadata("sharding index_codecs must have a fixed size (no compression)"))?;
        Ok(codec)
    }

    /// Inner chunks per shard along each axis.
    pub fn per_shard(&self, shard_shape: &[u64]) -> Vec<u64> {
        shard_shape.iter().zip(&self.inner_shape).map(|(s, i)| s / i).collect()
    }

    fn index_repr(&self, shard_shape: &[u64]) -> ChunkRepr<'static> {
        ChunkRepr { shape: index_shape(&self.per_shard(shard_shape)), dtype: &INDEX_DTYPE, fill: (&[0xff; 8]).into() }
    }

    pub fn index_size(&self, shard_shape: &[u64]) -> Option<u64> {
        self.index.encoded_size(&self.index_repr(shard_shape))
    }

    /// Where the index lies in the shard object.
    pub fn index_range(&self, shard_shape: &[u64]) -> Result<ByteRange> {
        let n = self.index_size(shard_shape).ok_or_else(|| Error::metadata("sharding index has no fixed size"))?;
        Ok(if self.index_at_end { ByteRange::Suffix(n) } else { ByteRange::Range { start: 0, len: n } })
    }

    pub fn decode_index(&self, bytes: Vec<u8>, shard_shape: &[u64]) -> Result<ShardIndex> {
        let raw = self.index.decode(bytes, &self.index_repr(shard_shape))?;
        let entries = raw
            .chunks_exact(16)
            .map(|e| (u64::from_le_bytes(e[..8].try_into().unwrap_or([0; 8])), u64::from_le_bytes(e[8..].try_into().unwrap_or([0; 8]))))
            .collect();
        Ok(ShardIndex { entries })
    }

    fn inner_repr<'a>(&self, repr: &ChunkRepr<'a>) -> ChunkRepr<'a> {
        ChunkRepr { shape: self.inner_shape.clone(), ..repr.clone() }
    }

    /// The most bytes one inner chunk of a shard of `shard_repr` can take.
    pub fn inner_bound(&self, shard_repr: &ChunkRepr<'_>) -> u64 {
        self.inner.encoded_bound(&self.inner_repr(shard_repr))
    }

    /// Decode one inner chunk's bytes.
    pub fn decode_inner<'b>(&self, bytes: impl Into<std::borrow::Cow<'b, [u8]>>, shard_repr: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        self.inner.decode(bytes, &self.inner_repr(shard_repr))
    }

    /// The origin (in elements, inside the shard) of inner chunk number `i` (C order).
    fn inner_origin(&self, per_shard: &[u64], mut i: u64) -> Vec<u64> {
        let mut origin = vec![0u64; per_shard.len()];
        for axis in (0..per_shard.len()).rev() {
            origin[axis] = (i % per_shard[axis]) * self.inner_shape[axis];
            i /= per_shard[axis];
        }
        origin
    }
}

fn index_shape(per_shard: &[u64]) -> Vec<u64> {
    let mut s = per_shard.to_vec();
    s.push(2);
    s
}

impl CodecTraits for ShardingCodec {
    fn name(&self) -> &'static str {
        "sharding_indexed"
    }
    fn configuration(&self) -> Value {
        json!({
            "chunk_shape": self.inner_shape,
            "codecs": self.inner.describe(),
            "index_codecs": self.index.describe(),
            "index_location": if self.index_at_end { "end" } else { "start" },
        })
    }
}

impl ArrayToBytesCodec for ShardingCodec {
    fn lossy(&self) -> Option<String> {
        self.inner.lossy()
    }

    /// The index and every inner chunk at its largest.
    fn encoded_bound(&self, repr: &ChunkRepr<'_>) -> u64 {
        let n_inner: u64 = self.per_shard(&repr.shape).iter().product();
        let inner = self.inner_bound(repr);
        self.index_size(&repr.shape).unwrap_or(0).saturating_add(n_inner.saturating_mul(inner))
    }

    fn decode(&self, bytes: Vec<u8>, repr: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        let total = bytes.len() as u64;
        let index_bytes = match self.index_range(&repr.shape)? {
            ByteRange::Suffix(n) if n <= total => bytes[(total - n) as usize..].to_vec(),
            ByteRange::Range { start, len } if start + len <= total => bytes[start as usize..(start + len) as usize].to_vec(),
            _ => {
                return Err(corrupt(format!("shard of {total} bytes is shorter than its index")));
            }
        };
        let index = self.decode_index(index_bytes, &repr.shape)?;
        let per_shard = self.per_shard(&repr.shape);
        let item = repr.dtype.size().unwrap_or(1);
        let mut out = filled(repr.num_elements() as usize, &repr.fill)?;
        let inner_view = Strided::of(&self.inner_shape, &vec![0; self.inner_shape.len()], 0);
        for i in 0..index.entries.len() {
            let Some((off, n)) = index.range(i) else {
                continue;
            };
            let end = off
                .checked_add(n)
                .filter(|&e| e <= total)
                .ok_or_else(|| corrupt(format!("inner chunk {i} at {off}+{n} is outside the shard ({total} bytes)")))?;
            let data = self.decode_inner(&bytes[off as usize..end as usize], repr)?;
            let dst = Strided::of(&repr.shape, &self.inner_origin(&per_shard, i as u64), 0);
            copy_box(&data, &inner_view, &mut out, &dst, &self.inner_shape, item);
        }
        Ok(out)
    }

    fn encode(&self, decoded: Vec<u8>, repr: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        let per_shard = self.per_shard(&repr.shape);
        let n_inner: u64 = per_shard.iter().product();
        let item = repr.dtype.size().unwrap_or(1);
        let inner_repr = self.inner_repr(repr);
        let inner_len = inner_repr.byte_len();
        let inner_view = Strided::of(&self.inner_shape, &vec![0; self.inner_shape.len()], 0);
        let index_len = self.index_size(&repr.shape).unwrap_or(0);
        let base = if self.index_at_end { 0 } else { index_len };
        let mut data = Vec::new();
        let mut entries: Vec<u8> = Vec::with_capacity(n_inner as usize * 16);
        let mut buf = vec![0u8; inner_len];
        for i in 0..n_inner {
            let src = Strided::of(&repr.shape, &self.inner_origin(&per_shard, i), 0);
            copy_box(&decoded, &src, &mut buf, &inner_view, &self.inner_shape, item);
            // Inner chunks equal to fill are left out, as every writer does.
            if buf.chunks_exact(item).all(|e| repr.dtype.same_element(e, &repr.fill)) {
                entries.extend(EMPTY.to_le_bytes());
                entries.extend(EMPTY.to_le_bytes());
                continue;
            }
            let enc = self.inner.encode(buf.clone(), &inner_repr)?;
            entries.extend((base + data.len() as u64).to_le_bytes());
            entries.extend((enc.len() as u64).to_le_bytes());
            data.extend(enc);
        }
        let index = self.index.encode(entries, &self.index_repr(&repr.shape))?;
        Ok(if self.index_at_end {
            data.extend(index);
            data
        } else {
            let mut out = index;
            out.extend(data);
            out
        })
    }

    fn encoded_size(&self, _repr: &ChunkRepr<'_>) -> Option<u64> {
        None
    }

    fn as_sharding(&self) -> Option<&ShardingCodec> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::codec::test_util::round_trip;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    fn codec(location: &str) -> CodecChain {
        let cfg = json!([{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2, 2], "codecs": [{"name": "bytes"}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": location}}]);
        CodecChain::parse_v3(&cfg, &DataType::UInt8, &[4, 4]).unwrap()
    }

    /// Shard (0,0) of a worked example of the sharding spec, as a 4x4 block.
    fn expected_block() -> Vec<u8> {
        vec![1, 1, 3, 3, 1, 1, 3, 3, 2, 2, 0, 0, 2, 2, 0, 0]
    }

    #[test]
    fn decodes_the_worked_examples() {
        let dt = DataType::UInt8;
        let repr = ChunkRepr { shape: vec![4, 4], dtype: &dt, fill: (&[0]).into() };
        let zarr_python_end = hex("01010101 02020202 03030303
             0000000000000000 0400000000000000 0800000000000000 0400000000000000
             0400000000000000 0400000000000000 ffffffffffffffff ffffffffffffffff f6246450");
        let tensorstore_end = hex("01010101 03030303 02020202
             0000000000000000 0400000000000000 0400000000000000 0400000000000000
             0800000000000000 0400000000000000 ffffffffffffffff ffffffffffffffff 430bc9df");
        let zarr_python_start = hex("4400000000000000 0400000000000000 4c00000000000000 0400000000000000
             4800000000000000 0400000000000000 ffffffffffffffff ffffffffffffffff ff5884c7
             01010101 02020202 03030303");
        assert_eq!(codec("end").decode(zarr_python_end, &repr).unwrap(), expected_block());
        let ts = codec("end").decode(tensorstore_end.clone(), &repr).unwrap();
        assert_eq!(ts, expected_block());
        assert_eq!(codec("start").decode(zarr_python_start, &repr).unwrap(), expected_block());
        // Our encoder writes lexicographic order, like tensorstore and zarrs: byte-identical.
        assert_eq!(round_trip(&codec("end"), &repr, &expected_block()), tensorstore_end);
        round_trip(&codec("start"), &repr, &expected_block());
    }

    #[test]
    fn partial_access_and_damage() {
        let dt = DataType::UInt8;
        let repr = ChunkRepr { shape: vec![4, 4], dtype: &dt, fill: (&[0]).into() };
        let chain = codec("end");
        let s = chain.partial_sharding().unwrap();
        assert_eq!(s.index_range(&[4, 4]).unwrap(), ByteRange::Suffix(68));
        let enc = chain.encode(expected_block(), &repr).unwrap();
        let index = s.decode_index(enc[enc.len() - 68..].to_vec(), &[4, 4]).unwrap();
        assert_eq!(index.range(3), None);
        let (off, n) = index.range(2).unwrap();
        assert_eq!(s.decode_inner(enc[off as usize..(off + n) as usize].to_vec(), &repr).unwrap(), vec![2; 4]);
        let mut bad = enc.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(chain.decode(bad, &repr).is_err(), "index checksum is checked");
        assert!(chain.decode(enc[..10].to_vec(), &repr).is_err());
        let cfg = json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": [3, 2], "codecs": [{"name": "bytes"}]}}]);
        assert!(CodecChain::parse_v3(&cfg, &DataType::UInt8, &[4, 4]).is_err());
    }
}
