//! v2 `zlib` (bytes→bytes): an RFC 1950 zlib stream.
//! numcodecs `Zlib`. v2 compressor `{"id": "zlib", "level": 1}`; no v3 form (v3 has `gzip`).

use std::io::Write;

use serde_json::{Value, json};

use super::{BytesToBytesCodec, CodecTraits, read_bounded};
use crate::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZlibCodec {
    pub level: u32,
}

impl ZlibCodec {
    pub fn parse(config: &Value) -> Result<ZlibCodec> {
        Ok(ZlibCodec { level: config.get("level").and_then(Value::as_u64).unwrap_or(1).min(9) as u32 })
    }
}

impl CodecTraits for ZlibCodec {
    fn name(&self) -> &'static str {
        "zlib"
    }
    fn configuration(&self) -> Value {
        json!({"level": self.level})
    }
}

impl BytesToBytesCodec for ZlibCodec {
    fn decode(&self, bytes: Vec<u8>, max: usize) -> Result<Vec<u8>> {
        self.decode_from(&bytes, max)
    }

    fn decode_from(&self, bytes: &[u8], max: usize) -> Result<Vec<u8>> {
        read_bounded("zlib", flate2::read::ZlibDecoder::new(bytes), max)
    }

    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(self.level));
        enc.write_all(&bytes)?;
        Ok(enc.finish()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zlib_stream() {
        let c = ZlibCodec::parse(&json!({"id": "zlib", "level": 1})).unwrap();
        let enc = c.encode(vec![3; 100]).unwrap();
        assert_eq!(&enc[..2], &[0x78, 0x01]);
        assert_eq!(c.decode(enc, 100).unwrap(), vec![3; 100]);
        assert!(c.decode(vec![0x78, 0x01, 0xff], 100).is_err());
        let bomb = c.encode(vec![0; 1 << 20]).unwrap();
        assert!(c.decode(bomb, 1000).unwrap_err().to_string().contains("more than the 1000 bytes"));
    }
}
