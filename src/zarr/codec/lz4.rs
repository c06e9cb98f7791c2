//! numcodecs `lz4` (v2, bytes→bytes): u32 little-endian decoded size, then one LZ4 block.
//! numcodecs `LZ4`. v2 compressor `{"id": "lz4", "acceleration": 1}`; no v3 form.

use serde_json::{Value, json};

use super::{BytesToBytesCodec, CodecTraits, corrupt, too_large};
use crate::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lz4Codec {
    pub acceleration: i64,
}

impl Lz4Codec {
    pub fn parse(config: &Value) -> Result<Lz4Codec> {
        Ok(Lz4Codec { acceleration: config.get("acceleration").and_then(Value::as_i64).unwrap_or(1) })
    }
}

impl CodecTraits for Lz4Codec {
    fn name(&self) -> &'static str {
        "lz4"
    }
    fn configuration(&self) -> Value {
        json!({"acceleration": self.acceleration})
    }
}

impl BytesToBytesCodec for Lz4Codec {
    fn decode(&self, bytes: Vec<u8>, max: usize) -> Result<Vec<u8>> {
        self.decode_from(&bytes, max)
    }

    fn decode_from(&self, bytes: &[u8], max: usize) -> Result<Vec<u8>> {
        if bytes.len() < 4 {
            return Err(corrupt("lz4: shorter than its size prefix"));
        }
        let n = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        if n > max {
            return Err(too_large("lz4", max));
        }
        let mut out = crate::limits::zeroed(n)?;
        match lz4_flex::block::decompress_into(&bytes[4..], &mut out) {
            Ok(got) if got == n => Ok(out),
            Ok(got) => Err(corrupt(format!("lz4: {got} bytes where the size prefix says {n}"))),
            Err(e) => Err(corrupt(format!("lz4: {e}"))),
        }
    }

    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let mut out = (bytes.len() as u32).to_le_bytes().to_vec();
        out.extend(lz4_flex::block::compress(&bytes));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numcodecs_layout() {
        // numcodecs LZ4: b"hello" is 05000000 50 68656c6c6f.
        let stored = vec![5, 0, 0, 0, 0x50, b'h', b'e', b'l', b'l', b'o'];
        let c = Lz4Codec::parse(&json!({"id": "lz4", "acceleration": 1})).unwrap();
        assert_eq!(c.decode(stored.clone(), 5).unwrap(), b"hello");
        assert_eq!(c.encode(b"hello".to_vec()).unwrap(), stored);
        assert!(c.decode(vec![9, 0, 0, 0, 0x50, b'h'], 9).is_err());
        assert!(c.decode(stored, 4).is_err());
    }
}
