//! Variable-length elements (array→bytes). `vlen-utf8` / `vlen-bytes` (and zarrs' `vlen_v2`,
//! byte-identical): u32 count, then per element u32 length and bytes. zarrs' `vlen`: an index
//! of n+1 offsets encoded with `index_codecs`, the concatenated bytes with `data_codecs`, and
//! the encoded index's length as u64, at the start or the end (as zarrs writes them).
//! Names: v3 `{"name": "vlen-utf8"}`, `{"name": "vlen-bytes"}`, zarrs' `vlen` / `zarrs.vlen`
//! (`{"name": "zarrs.vlen", "configuration": {"index_data_type": "uint64", "index_codecs": [...],
//! "data_codecs": [...], "index_location": "end"}}`) and `vlen_v2` / `zarrs.vlen_v2`; v2 filters
//! `{"id": "vlen-utf8"}` and `{"id": "vlen-bytes"}` on `|O` arrays.

use serde_json::{Value, json};

use super::{ArrayToBytesCodec, ChunkRepr, CodecChain, CodecTraits, corrupt};
use crate::zarr::dtype::DataType;
use crate::{Error, Result};

/// `vlen-utf8`, `vlen-bytes`, `zarrs.vlen_v2`: interleaved lengths and bytes.
#[derive(Debug, Clone)]
pub struct VlenInterleavedCodec {
    pub name: &'static str,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

impl CodecTraits for VlenInterleavedCodec {
    fn name(&self) -> &'static str {
        self.name
    }
    fn configuration(&self) -> Value {
        json!({})
    }
}

impl ArrayToBytesCodec for VlenInterleavedCodec {
    fn decode(&self, _bytes: Vec<u8>, repr: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        Err(Error::metadata(format!("{} holds variable-length elements, not {}", self.name, repr.dtype.name())))
    }
    fn encode(&self, _decoded: Vec<u8>, repr: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        Err(Error::metadata(format!("{} holds variable-length elements, not {}", self.name, repr.dtype.name())))
    }
    fn encoded_size(&self, _repr: &ChunkRepr<'_>) -> Option<u64> {
        None
    }
    fn is_variable(&self) -> bool {
        true
    }

    fn decode_elements(&self, bytes: Vec<u8>, n: usize, _max: u64) -> Result<Vec<Vec<u8>>> {
        let count = u32_at(&bytes, 0).ok_or_else(|| corrupt(format!("{}: no element count", self.name)))? as usize;
        if count != n {
            return Err(corrupt(format!("{}: {count} elements where the chunk holds {n}", self.name)));
        }
        // Four bytes of length at least per element: the count is checked before it sizes memory.
        if n.checked_mul(4).is_none_or(|b| b > bytes.len()) {
            return Err(corrupt(format!("{}: {} bytes cannot hold {n} elements", self.name, bytes.len())));
        }
        let mut at = 4;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let len = u32_at(&bytes, at).ok_or_else(|| corrupt(format!("{}: element {i} has no length", self.name)))? as usize;
            let body = bytes.get(at + 4..at + 4 + len).ok_or_else(|| corrupt(format!("{}: element {i} runs past the end", self.name)))?;
            out.push(body.to_vec());
            at += 4 + len;
        }
        if at != bytes.len() {
            return Err(corrupt(format!("{}: {} bytes after the last element", self.name, bytes.len() - at)));
        }
        Ok(out)
    }

    fn encode_elements(&self, elements: &[Vec<u8>]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(4 + elements.iter().map(|e| e.len() + 4).sum::<usize>());
        out.extend((elements.len() as u32).to_le_bytes());
        for e in elements {
            let len = u32::try_from(e.len()).map_err(|_| Error::Invalid("an element longer than 4 GiB".into()))?;
            out.extend(len.to_le_bytes());
            out.extend(e);
        }
        Ok(out)
    }
}

static U8: DataType = DataType::UInt8;
static U32: DataType = DataType::UInt32;
static U64: DataType = DataType::UInt64;

/// zarrs' `vlen`: offsets and data, each through codecs of their own.
#[derive(Debug)]
pub struct ZarrsVlenCodec {
    index: CodecChain,
    data: CodecChain,
    wide_index: bool,
    index_at_end: bool,
    config: Value,
}

impl ZarrsVlenCodec {
    pub fn parse(config: &Value) -> Result<ZarrsVlenCodec> {
        let wide_index = match config.get("index_data_type").and_then(Value::as_str).unwrap_or("uint64") {
            "uint32" => false,
            "uint64" => true,
            other => return Err(Error::metadata(format!("zarrs.vlen index_data_type {other:?} must be uint32 or uint64"))),
        };
        let index_at_end = match config.get("index_location").and_then(Value::as_str).unwrap_or("start") {
            "start" => false,
            "end" => true,
            other => return Err(Error::metadata(format!("zarrs.vlen index_location {other:?} must be start or end"))),
        };
        let bytes = json!([{"name": "bytes", "configuration": {"endian": "little"}}]);
        let index = CodecChain::parse_v3(config.get("index_codecs").unwrap_or(&bytes), if wide_index { &U64 } else { &U32 }, &[1])?;
        let data = CodecChain::parse_v3(config.get("data_codecs").unwrap_or(&json!([{"name": "bytes"}])), &U8, &[1])?;
        Ok(ZarrsVlenCodec { index, data, wide_index, index_at_end, config: config.clone() })
    }

    fn index_type(&self) -> &'static DataType {
        if self.wide_index { &U64 } else { &U32 }
    }
}

impl CodecTraits for ZarrsVlenCodec {
    fn name(&self) -> &'static str {
        "zarrs.vlen"
    }
    fn configuration(&self) -> Value {
        self.config.clone()
    }
}

impl ArrayToBytesCodec for ZarrsVlenCodec {
    fn decode(&self, _bytes: Vec<u8>, repr: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        Err(Error::metadata(format!("zarrs.vlen holds variable-length elements, not {}", repr.dtype.name())))
    }
    fn encode(&self, _decoded: Vec<u8>, repr: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        Err(Error::metadata(format!("zarrs.vlen holds variable-length elements, not {}", repr.dtype.name())))
    }
    fn encoded_size(&self, _repr: &ChunkRepr<'_>) -> Option<u64> {
        None
    }
    fn is_variable(&self) -> bool {
        true
    }

    fn decode_elements(&self, bytes: Vec<u8>, n: usize, max: u64) -> Result<Vec<Vec<u8>>> {
        let short = || corrupt("zarrs.vlen: shorter than its index length");
        let (len_at, rest): (usize, usize) = if self.index_at_end { (bytes.len().checked_sub(8).ok_or_else(short)?, 0) } else { (0, 8) };
        let len_bytes = bytes.get(len_at..len_at + 8).ok_or_else(short)?;
        let index_len = usize::try_from(u64::from_le_bytes(len_bytes.try_into().map_err(|_| short())?)).map_err(|_| short())?;
        let (index_bytes, data_bytes) = if self.index_at_end {
            let data_end = len_at.checked_sub(index_len).ok_or_else(short)?;
            (&bytes[data_end..len_at], &bytes[..data_end])
        } else {
            let end = rest.checked_add(index_len).filter(|&e| e <= bytes.len()).ok_or_else(short)?;
            (&bytes[rest..end], &bytes[end..])
        };
        let index_repr = ChunkRepr { shape: vec![n as u64 + 1], dtype: self.index_type(), fill: (&[0; 8]).into() };
        let raw = self.index.decode(index_bytes, &index_repr)?;
        let offsets: Vec<u64> = if self.wide_index {
            raw.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect()
        } else {
            raw.chunks_exact(4).map(|c| u64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect()
        };
        let total = *offsets.last().ok_or_else(|| corrupt("zarrs.vlen: an empty index"))?;
        if total > max {
            return Err(corrupt(format!("zarrs.vlen: {total} bytes of elements, more than the {max} the chunk's {n} elements may hold")));
        }
        let data = self.data.decode(data_bytes, &ChunkRepr { shape: vec![total], dtype: &U8, fill: (&[0]).into() })?;
        offsets
            .windows(2)
            .map(|w| {
                data.get(w[0] as usize..w[1] as usize)
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| corrupt("zarrs.vlen: offsets out of order or past the data"))
            })
            .collect()
    }

    fn encode_elements(&self, elements: &[Vec<u8>]) -> Result<Vec<u8>> {
        let mut offsets = Vec::with_capacity((elements.len() + 1) * 8);
        let mut data = Vec::new();
        let push = |n: u64, out: &mut Vec<u8>| {
            if self.wide_index { out.extend(n.to_le_bytes()) } else { out.extend((n as u32).to_le_bytes()) }
        };
        push(0, &mut offsets);
        for e in elements {
            data.extend(e);
            push(data.len() as u64, &mut offsets);
        }
        if !self.wide_index && data.len() > u32::MAX as usize {
            return Err(Error::Invalid("a chunk of more than 4 GiB of elements needs a uint64 index".into()));
        }
        let index = self
            .index
            .encode(offsets, &ChunkRepr { shape: vec![elements.len() as u64 + 1], dtype: self.index_type(), fill: (&[0; 8]).into() })?;
        let total = data.len() as u64;
        let data = self.data.encode(data, &ChunkRepr { shape: vec![total], dtype: &U8, fill: (&[0]).into() })?;
        let len = (index.len() as u64).to_le_bytes();
        Ok(if self.index_at_end { [data, index, len.to_vec()].concat() } else { [len.to_vec(), index, data].concat() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn interleaved_layout_from_the_digest() {
        let c = VlenInterleavedCodec { name: "vlen-utf8" };
        let stored = hex("03000000 01000000 61 06000000 68c3a96c6c6f 00000000");
        let elements = vec![b"a".to_vec(), "héllo".as_bytes().to_vec(), Vec::new()];
        assert_eq!(c.decode_elements(stored.clone(), 3, u64::MAX).unwrap(), elements);
        assert_eq!(c.encode_elements(&elements).unwrap(), stored);
        assert!(c.decode_elements(stored.clone(), 4, u64::MAX).is_err(), "the count covers the whole chunk");
        assert!(c.decode_elements(stored[..stored.len() - 2].to_vec(), 3, u64::MAX).is_err());
    }

    #[test]
    fn zarrs_vlen_layout_from_the_digest() {
        // ["a","bb"]: 0c00000000000000 | 00000000 01000000 03000000 | 616262
        let c = ZarrsVlenCodec::parse(&json!({"data_codecs": [{"name": "bytes"}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}], "index_data_type": "uint32"}))
        .unwrap();
        let stored = hex("0c00000000000000 00000000 01000000 03000000 616262");
        let elements = vec![b"a".to_vec(), b"bb".to_vec()];
        assert_eq!(c.decode_elements(stored.clone(), 2, u64::MAX).unwrap(), elements);
        assert_eq!(c.encode_elements(&elements).unwrap(), stored);
        let end = ZarrsVlenCodec::parse(&json!({"index_location": "end", "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]})).unwrap();
        let enc = end.encode_elements(&elements).unwrap();
        assert_eq!(end.decode_elements(enc, 2, u64::MAX).unwrap(), elements);
        assert!(c.decode_elements(stored[..10].to_vec(), 2, u64::MAX).is_err());
    }
}
