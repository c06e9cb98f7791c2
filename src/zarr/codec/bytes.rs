//! `bytes` (array→bytes): elements in C order, little- or big-endian.
//! Spec: zarr v3 core codecs (`bytes`). v3 `{"name": "bytes", "configuration": {"endian": "little"}}`;
//! in v2 the byte order comes from the dtype (`<f8`, `>f8`), not a codec.

use serde_json::{Value, json};

use super::{ArrayToBytesCodec, ChunkRepr, CodecTraits, corrupt};
use crate::zarr::dtype::DataType;
use crate::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BytesCodec {
    /// `None` when the configuration leaves it out (allowed for one-byte types).
    pub big_endian: Option<bool>,
}

impl BytesCodec {
    pub fn parse(config: &Value, dtype: &DataType) -> Result<BytesCodec> {
        let big_endian = match config.get("endian").and_then(Value::as_str) {
            Some("little") => Some(false),
            Some("big") => Some(true),
            None => None,
            Some(other) => {
                return Err(Error::metadata(format!("bytes codec endian {other:?} must be \"little\" or \"big\"")));
            }
        };
        if big_endian.is_none() && dtype.swap_unit() > 1 {
            return Err(Error::metadata(format!("bytes codec needs an endian for {}", dtype.name())));
        }
        Ok(BytesCodec { big_endian })
    }

    fn swap(&self, mut data: Vec<u8>, dtype: &DataType) -> Vec<u8> {
        let unit = dtype.swap_unit();
        if self.big_endian == Some(true) && unit > 1 {
            data.chunks_exact_mut(unit).for_each(<[u8]>::reverse);
        }
        data
    }
}

impl CodecTraits for BytesCodec {
    fn name(&self) -> &'static str {
        "bytes"
    }
    fn configuration(&self) -> Value {
        match self.big_endian {
            Some(big) => json!({"endian": if big { "big" } else { "little" }}),
            None => json!({}),
        }
    }
}

impl ArrayToBytesCodec for BytesCodec {
    fn decode(&self, bytes: Vec<u8>, repr: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        if bytes.len() != repr.byte_len() {
            return Err(corrupt(format!("{} bytes where the chunk needs {}", bytes.len(), repr.byte_len())));
        }
        Ok(self.swap(bytes, repr.dtype))
    }

    fn encode(&self, decoded: Vec<u8>, repr: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        Ok(self.swap(decoded, repr.dtype))
    }

    fn encoded_size(&self, repr: &ChunkRepr<'_>) -> Option<u64> {
        Some(repr.byte_len() as u64)
    }

    fn elementwise(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_endian_swaps_components() {
        let dt = DataType::Complex64;
        let c = BytesCodec::parse(&json!({"endian": "big"}), &dt).unwrap();
        let repr = ChunkRepr { shape: vec![1], dtype: &dt, fill: (&[0; 8]).into() };
        let stored = vec![0x3f, 0x80, 0, 0, 0x40, 0, 0, 0]; // 1.0 + 2.0i, big-endian
        let dec = c.decode(stored.clone(), &repr).unwrap();
        assert_eq!(&dec[..4], &1f32.to_le_bytes());
        assert_eq!(&dec[4..], &2f32.to_le_bytes());
        assert_eq!(c.encode(dec, &repr).unwrap(), stored);
        assert!(c.decode(vec![0; 7], &repr).is_err());
        assert!(BytesCodec::parse(&json!({}), &DataType::Int16).is_err());
        assert!(BytesCodec::parse(&json!({}), &DataType::UInt8).is_ok());
    }
}
