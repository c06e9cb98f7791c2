//! `crc32c` (bytes→bytes): the input followed by its CRC-32C, little-endian.
//! Spec: zarr v3 core codecs (`crc32c`). v3 `{"name": "crc32c"}`; no v2 form.

use serde_json::{Value, json};

use super::{BytesToBytesCodec, CodecTraits, corrupt};
use crate::Result;

#[derive(Debug, Clone, Copy)]
pub struct Crc32cCodec;

impl CodecTraits for Crc32cCodec {
    fn name(&self) -> &'static str {
        "crc32c"
    }
    fn configuration(&self) -> Value {
        json!({})
    }
}

impl BytesToBytesCodec for Crc32cCodec {
    fn decode(&self, mut bytes: Vec<u8>, _max: usize) -> Result<Vec<u8>> {
        if bytes.len() < 4 {
            return Err(corrupt("crc32c: shorter than its checksum"));
        }
        let n = bytes.len() - 4;
        let stored = u32::from_le_bytes([bytes[n], bytes[n + 1], bytes[n + 2], bytes[n + 3]]);
        let actual = crc32c::crc32c(&bytes[..n]);
        if stored != actual {
            return Err(corrupt(format!("crc32c mismatch: stored {stored:08x}, computed {actual:08x}")));
        }
        bytes.truncate(n);
        Ok(bytes)
    }

    fn encode(&self, mut bytes: Vec<u8>) -> Result<Vec<u8>> {
        let crc = crc32c::crc32c(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        Ok(bytes)
    }

    fn encoded_size(&self, decoded: u64) -> Option<u64> {
        Some(decoded + 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_value_and_mismatch() {
        // RFC 3720 test vector: CRC-32C of 32 zero bytes is 0x8a9136aa.
        let enc = Crc32cCodec.encode(vec![0; 32]).unwrap();
        assert_eq!(&enc[32..], &0x8a9136aau32.to_le_bytes());
        assert_eq!(Crc32cCodec.decode(enc.clone(), 32).unwrap(), vec![0; 32]);
        let mut bad = enc;
        bad[0] = 1;
        assert!(Crc32cCodec.decode(bad, 32).is_err());
        assert!(Crc32cCodec.decode(vec![1, 2], 32).is_err());
    }
}
