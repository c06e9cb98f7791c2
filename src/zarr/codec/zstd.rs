//! `zstd` (bytes→bytes): a standard zstd frame, with or without checksum and content size.

use std::io::Write;

use serde_json::{Value, json};

use super::{BytesToBytesCodec, CodecTraits, corrupt};
use crate::{Error, Result};

/// Larger declared sizes are not trusted for one allocation up front.
const MAX_ONE_SHOT: u64 = 1 << 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZstdCodec {
    pub level: i32,
    pub checksum: bool,
}

impl ZstdCodec {
    /// v3 `{"level":…, "checksum":…}` and v2 `{"id":"zstd","level":…}` alike.
    pub fn parse(config: &Value) -> Result<ZstdCodec> {
        let level = config
            .get("level")
            .map(|l| l.as_i64().ok_or_else(|| Error::metadata(format!("zstd level {l} must be an integer"))))
            .transpose()?
            .unwrap_or(0);
        let checksum = config.get("checksum").and_then(Value::as_bool).unwrap_or(false);
        Ok(ZstdCodec { level: level as i32, checksum })
    }
}

impl CodecTraits for ZstdCodec {
    fn name(&self) -> &'static str {
        "zstd"
    }
    fn configuration(&self) -> Value {
        json!({"level": self.level, "checksum": self.checksum})
    }
}

impl BytesToBytesCodec for ZstdCodec {
    fn decode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        // With a content size, decode straight into a buffer of that size (no copies); without
        // one (or for several frames), stream. Both verify checksums.
        if let Ok(Some(n)) = zstd::zstd_safe::get_frame_content_size(&bytes)
            && n <= MAX_ONE_SHOT
            && let Ok(out) = zstd::bulk::decompress(&bytes, n as usize)
            && out.len() as u64 == n
        {
            return Ok(out);
        }
        zstd::stream::decode_all(&bytes[..]).map_err(|e| corrupt(format!("zstd: {e}")))
    }

    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let mut enc = zstd::stream::Encoder::new(Vec::with_capacity(bytes.len() / 2 + 64), self.level)?;
        enc.include_checksum(self.checksum)?;
        enc.include_contentsize(true)?;
        enc.set_pledged_src_size(Some(bytes.len() as u64))?;
        enc.write_all(&bytes)?;
        Ok(enc.finish()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_with_and_without_content_size_and_checksum() {
        let data: Vec<u8> = (0..5000u32).flat_map(|i| (i % 7).to_le_bytes()).collect();
        for checksum in [false, true] {
            let c = ZstdCodec { level: 3, checksum };
            let enc = c.encode(data.clone()).unwrap();
            assert_eq!(&enc[..4], &[0x28, 0xb5, 0x2f, 0xfd]);
            assert_ne!(enc[4] & 0xc0, 0, "frame content size is written");
            assert_eq!(enc[4] & 0x04 != 0, checksum);
            assert_eq!(c.decode(enc).unwrap(), data);
        }
        // A streamed frame without a content size.
        let mut e = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
        e.include_contentsize(false).unwrap();
        e.write_all(&data).unwrap();
        let frame = e.finish().unwrap();
        assert_eq!(frame[4] & 0xc0, 0);
        assert_eq!(ZstdCodec::parse(&json!({})).unwrap().decode(frame.clone()).unwrap(), data);
        assert!(ZstdCodec { level: 0, checksum: false }.decode(frame[..frame.len() / 2].to_vec()).is_err());
    }
}
