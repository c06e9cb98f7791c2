//! `lzma` (bytes→bytes): an xz stream, or an lzma-alone one. numcodecs `LZMA`: v2 compressor
//! `{"id": "lzma", "format": 1, "check": -1, "preset": null, "filters": null}`, v3
//! `numcodecs.lzma`; GDAL writes `{"id": "lzma", "preset": 6, "delta": 1}` (its delta distance,
//! a filter inside the xz stream when over 1). Decoding reads whichever the stream is, as
//! liblzma does for Python's `lzma`. Raw streams (`format` 3) name their filters in the
//! configuration: refused.

use std::io::Write;

use liblzma::stream::{Check, Filters, LzmaOptions, Stream};
use serde_json::{Value, json};

use super::{BytesToBytesCodec, CodecTraits, corrupt, read_bounded};
use crate::{Error, Result};

/// The most memory a decoder may take: a stream names its own dictionary size (up to 4 GiB in an
/// lzma-alone header), and a hostile store would have it allocated. Preset 9 takes 64 MiB.
const DECODER_MEMORY: u64 = 256 << 20;

/// Python's `lzma` format constants.
const FORMAT_AUTO: i64 = 0;
const FORMAT_XZ: i64 = 1;
const FORMAT_ALONE: i64 = 2;

#[derive(Debug, Clone, PartialEq)]
pub struct LzmaCodec {
    format: i64,
    /// Python's `check` (-1: the format's default, CRC64 for xz).
    check: i64,
    preset: u32,
    /// GDAL's delta distance in bytes (1: none).
    delta: u64,
    config: Value,
}

impl LzmaCodec {
    pub fn parse(config: &Value) -> Result<LzmaCodec> {
        let int = |name: &str, default: i64| config.get(name).filter(|v| !v.is_null()).map_or(Some(default), Value::as_i64);
        let bad = |what: &str| Error::metadata(format!("lzma: {what} in {config}"));
        let format = int("format", FORMAT_XZ).ok_or_else(|| bad("format is not a number"))?;
        if !matches!(format, FORMAT_AUTO | FORMAT_XZ | FORMAT_ALONE) {
            return Err(Error::Unsupported(format!("lzma format {format} (raw streams with their filters named) in {config}")));
        }
        if config.get("filters").is_some_and(|f| !f.is_null()) {
            return Err(Error::Unsupported(format!("lzma filters named in the configuration: {config}")));
        }
        let check = int("check", -1).filter(|c| matches!(c, -1 | 0 | 1 | 4 | 10)).ok_or_else(|| bad("check is none of -1, 0, 1, 4, 10"))?;
        let preset = int("preset", 6).filter(|p| (0..=9).contains(p)).ok_or_else(|| bad("preset is not 0 to 9"))? as u32;
        let delta = config
            .get("delta")
            .map_or(Some(1), Value::as_u64)
            .filter(|d| (1..=256).contains(d))
            .ok_or_else(|| bad("delta is not 1 to 256"))?;
        Ok(LzmaCodec { format, check, preset, delta, config: config.clone() })
    }

    fn encoder(&self) -> Result<Stream> {
        let failed = |e: liblzma::stream::Error| Error::Io(std::io::Error::other(format!("lzma: {e}")));
        if self.format == FORMAT_ALONE {
            return Stream::new_lzma_encoder(&LzmaOptions::new_preset(self.preset).map_err(failed)?).map_err(failed);
        }
        let check = match self.check {
            0 => Check::None,
            1 => Check::Crc32,
            10 => Check::Sha256,
            _ => Check::Crc64,
        };
        if self.delta == 1 {
            return Stream::new_easy_encoder(self.preset, check).map_err(failed);
        }
        let mut filters = Filters::new();
        // The delta filter's one property byte is its distance less one.
        filters.delta_properties(&[(self.delta - 1) as u8]).map_err(failed)?;
        filters.lzma2(&LzmaOptions::new_preset(self.preset).map_err(failed)?);
        Stream::new_stream_encoder(&filters, check).map_err(failed)
    }
}

impl CodecTraits for LzmaCodec {
    fn name(&self) -> &'static str {
        "lzma"
    }
    fn configuration(&self) -> Value {
        match self.config.as_object() {
            Some(o) => Value::Object(o.iter().filter(|(k, _)| *k != "id").map(|(k, v)| (k.clone(), v.clone())).collect()),
            None => json!({}),
        }
    }
}

impl BytesToBytesCodec for LzmaCodec {
    fn decode(&self, bytes: Vec<u8>, max: usize) -> Result<Vec<u8>> {
        self.decode_from(&bytes, max)
    }

    fn decode_from(&self, bytes: &[u8], max: usize) -> Result<Vec<u8>> {
        let stream = Stream::new_auto_decoder(DECODER_MEMORY, liblzma::stream::CONCATENATED).map_err(|e| corrupt(format!("lzma: {e}")))?;
        read_bounded("lzma", liblzma::read::XzDecoder::new_stream(bytes, stream), max)
    }

    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let mut enc = liblzma::write::XzEncoder::new_stream(Vec::new(), self.encoder()?);
        enc.write_all(&bytes)?;
        Ok(enc.finish()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xz_and_lzma_alone_streams() {
        let data: Vec<u8> = (0..4000u32).map(|i| (i / 7) as u8).collect();
        for config in [
            json!({"id": "lzma", "format": 1, "check": -1, "preset": null, "filters": null}),
            json!({"id": "lzma", "format": 2, "check": -1, "preset": 1, "filters": null}),
            json!({"id": "lzma", "preset": 6, "delta": 1}),
            json!({"id": "lzma", "preset": 6, "delta": 4}),
        ] {
            let c = LzmaCodec::parse(&config).unwrap();
            let enc = c.encode(data.clone()).unwrap();
            match c.format {
                // The xz magic; an lzma-alone header starts with its properties byte (0x5d).
                FORMAT_XZ => assert_eq!(&enc[..6], b"\xfd7zXZ\0", "{config}"),
                _ => assert_eq!(enc[0], 0x5d, "{config}"),
            }
            assert!(enc.len() < data.len() / 4, "{config}: {} bytes", enc.len());
            assert_eq!(c.decode(enc.clone(), data.len()).unwrap(), data, "{config}");
            assert!(c.decode(enc[..enc.len() - 3].to_vec(), data.len()).is_err(), "{config}: cut short");
            assert!(c.decode(enc, 100).unwrap_err().to_string().contains("more than the 100 bytes"), "{config}");
        }
        // A header that names a 4 GiB dictionary is refused before anything that large is had.
        let c = LzmaCodec::parse(&json!({"id": "lzma", "format": 2})).unwrap();
        let mut hostile = vec![0x5d, 0xff, 0xff, 0xff, 0xff];
        hostile.extend([0xff; 8]);
        hostile.extend([0; 64]);
        let err = c.decode(hostile, 1 << 20).unwrap_err().to_string();
        assert!(err.contains("lzma") && err.to_lowercase().contains("memory"), "{err}");
        assert!(LzmaCodec::parse(&json!({"id": "lzma", "format": 3, "filters": [{"id": 33}]})).is_err());
        assert!(LzmaCodec::parse(&json!({"id": "lzma", "check": 7})).is_err());
    }
}
