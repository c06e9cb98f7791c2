//! v2 `zlib` (bytes→bytes): an RFC 1950 zlib stream.

use std::io::{Read, Write};

use serde_json::{Value, json};

use super::{BytesToBytesCodec, CodecTraits, corrupt};
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
    fn decode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        flate2::read::ZlibDecoder::new(&bytes[..]).read_to_end(&mut out).map_err(|e| corrupt(format!("zlib: {e}")))?;
        Ok(out)
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
        assert_eq!(c.decode(enc).unwrap(), vec![3; 100]);
        assert!(c.decode(vec![0x78, 0x01, 0xff]).is_err());
    }
}
