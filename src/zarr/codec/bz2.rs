//! `bz2` (bytes→bytes): a bzip2 stream (or several, one after another, as Python's `bz2`
//! reads them). numcodecs `BZ2`: v2 compressor `{"id": "bz2", "level": 1}`; v3
//! `numcodecs.bz2` (zarr-python's name for it) with `{"level": 1}`.

use std::io::Write;

use serde_json::{Value, json};

use super::{BytesToBytesCodec, CodecTraits, read_bounded};
use crate::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bz2Codec {
    pub level: u32,
}

impl Bz2Codec {
    pub fn parse(config: &Value) -> Result<Bz2Codec> {
        Ok(Bz2Codec { level: config.get("level").and_then(Value::as_u64).unwrap_or(1).clamp(1, 9) as u32 })
    }
}

impl CodecTraits for Bz2Codec {
    fn name(&self) -> &'static str {
        "bz2"
    }
    fn configuration(&self) -> Value {
        json!({"level": self.level})
    }
}

impl BytesToBytesCodec for Bz2Codec {
    fn decode(&self, bytes: Vec<u8>, max: usize) -> Result<Vec<u8>> {
        self.decode_from(&bytes, max)
    }

    fn decode_from(&self, bytes: &[u8], max: usize) -> Result<Vec<u8>> {
        read_bounded("bz2", bzip2::read::MultiBzDecoder::new(bytes), max)
    }

    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let mut enc = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::new(self.level));
        enc.write_all(&bytes)?;
        Ok(enc.finish()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bzip2_stream() {
        let c = Bz2Codec::parse(&json!({"id": "bz2", "level": 1})).unwrap();
        let enc = c.encode(vec![3; 100]).unwrap();
        // "BZh" and the block size in hundreds of kB (the level).
        assert_eq!(&enc[..4], b"BZh1");
        assert_eq!(c.decode(enc.clone(), 100).unwrap(), vec![3; 100]);
        // Two streams one after another read as one value, as Python's bz2 reads them.
        let two = [enc.clone(), c.encode(vec![4; 10]).unwrap()].concat();
        assert_eq!(c.decode(two, 110).unwrap(), [vec![3; 100], vec![4; 10]].concat());
        assert!(c.decode(enc[..enc.len() - 4].to_vec(), 100).is_err());
        let bomb = c.encode(vec![0; 1 << 20]).unwrap();
        assert!(c.decode(bomb, 1000).unwrap_err().to_string().contains("more than the 1000 bytes"));
    }
}
