//! `gzip` (bytes→bytes): the gzip file format (RFC 1952), not raw zlib.
//! Spec: zarr v3 core codecs (`gzip`). v3 `{"name": "gzip", "configuration": {"level": 5}}`; v2
//! compressor `{"id": "gzip", "level": 5}`.

use std::io::Write;

use serde_json::{Value, json};

use super::{BytesToBytesCodec, CodecTraits, read_bounded};
use crate::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GzipCodec {
    pub level: u32,
}

impl GzipCodec {
    pub fn parse(config: &Value) -> Result<GzipCodec> {
        Ok(GzipCodec { level: config.get("level").and_then(Value::as_u64).unwrap_or(5).min(9) as u32 })
    }
}

impl CodecTraits for GzipCodec {
    fn name(&self) -> &'static str {
        "gzip"
    }
    fn configuration(&self) -> Value {
        json!({"level": self.level})
    }
}

impl BytesToBytesCodec for GzipCodec {
    fn decode(&self, bytes: Vec<u8>, max: usize) -> Result<Vec<u8>> {
        self.decode_from(&bytes, max)
    }

    fn decode_from(&self, bytes: &[u8], max: usize) -> Result<Vec<u8>> {
        read_bounded("gzip", flate2::read::MultiGzDecoder::new(bytes), max)
    }

    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(self.level));
        enc.write_all(&bytes)?;
        Ok(enc.finish()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_file_format() {
        let c = GzipCodec::parse(&json!({"level": 5})).unwrap();
        let enc = c.encode(b"hello hello hello".to_vec()).unwrap();
        assert_eq!(&enc[..3], &[0x1f, 0x8b, 0x08]);
        assert_eq!(c.decode(enc.clone(), 17).unwrap(), b"hello hello hello");
        assert!(c.decode(enc[..enc.len() - 3].to_vec(), 17).is_err());
        // A bomb stops at the bound.
        let bomb = c.encode(vec![0; 1 << 20]).unwrap();
        assert!(c.decode(bomb, 1000).unwrap_err().to_string().contains("more than the 1000 bytes"));
    }
}
