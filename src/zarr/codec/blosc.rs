//! `blosc` (bytes→bytes): Blosc1 frames through C-Blosc (`blosc-src`), memcpyed frames included.
//! Spec: zarr v3 core codecs (`blosc`). v3 `{"name": "blosc", "configuration": {"cname": "zstd",
//! "clevel": 5, "shuffle": "shuffle", "typesize": 4, "blocksize": 0}}`; v2 compressor
//! `{"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}`.

use std::ffi::{CString, c_void};

use serde_json::{Value, json};

use super::{BytesToBytesCodec, CodecTraits, corrupt};
use crate::zarr::dtype::DataType;
use crate::{Error, Result};

const CNAMES: [&str; 6] = ["lz4", "lz4hc", "blosclz", "zstd", "snappy", "zlib"];
const BLOSC_MAX_OVERHEAD: usize = 16;
const BLOSC_MIN_HEADER_LENGTH: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BloscCodec {
    pub cname: String,
    pub clevel: i32,
    /// 0 none, 1 byte shuffle, 2 bit shuffle.
    pub shuffle: i32,
    pub typesize: usize,
    pub blocksize: usize,
}

impl BloscCodec {
    fn common(config: &Value, shuffle: i32, typesize: usize) -> Result<BloscCodec> {
        let cname = config.get("cname").and_then(Value::as_str).unwrap_or("lz4").to_string();
        if !CNAMES.contains(&cname.as_str()) {
            return Err(Error::metadata(format!("blosc cname {cname:?} is not one of {CNAMES:?}")));
        }
        let clevel = config.get("clevel").and_then(Value::as_i64).unwrap_or(5).clamp(0, 9) as i32;
        let blocksize = config.get("blocksize").and_then(Value::as_u64).unwrap_or(0) as usize;
        Ok(BloscCodec { cname, clevel, shuffle, typesize: typesize.max(1), blocksize })
    }

    pub fn parse_v3(config: &Value, dtype: &DataType) -> Result<BloscCodec> {
        let shuffle = match config.get("shuffle").and_then(Value::as_str).unwrap_or("noshuffle") {
            "noshuffle" => 0,
            "shuffle" => 1,
            "bitshuffle" => 2,
            other => {
                return Err(Error::metadata(format!("blosc shuffle {other:?} must be noshuffle, shuffle or bitshuffle")));
            }
        };
        let typesize = config.get("typesize").and_then(Value::as_u64).map(|n| n as usize).unwrap_or_else(|| dtype.size().unwrap_or(1));
        BloscCodec::common(config, shuffle, typesize)
    }

    /// numcodecs: shuffle is an integer (-1 auto), typesize is the dtype's item size.
    pub fn parse_v2(config: &Value, itemsize: usize) -> Result<BloscCodec> {
        let shuffle = match config.get("shuffle").and_then(Value::as_i64).unwrap_or(1) {
            -1 if itemsize == 1 => 2,
            -1 => 1,
            s @ 0..=2 => s as i32,
            other => {
                return Err(Error::metadata(format!("blosc shuffle {other} must be -1, 0, 1 or 2")));
            }
        };
        BloscCodec::common(config, shuffle, itemsize)
    }
}

impl CodecTraits for BloscCodec {
    fn name(&self) -> &'static str {
        "blosc"
    }
    fn configuration(&self) -> Value {
        let shuffle = ["noshuffle", "shuffle", "bitshuffle"][self.shuffle.clamp(0, 2) as usize];
        json!({"typesize": self.typesize, "cname": self.cname, "clevel": self.clevel, "shuffle": shuffle, "blocksize": self.blocksize})
    }
}

impl BytesToBytesCodec for BloscCodec {
    fn decode(&self, bytes: Vec<u8>, max: usize) -> Result<Vec<u8>> {
        self.decode_from(&bytes, max)
    }

    fn decode_from(&self, bytes: &[u8], max: usize) -> Result<Vec<u8>> {
        // A frame with bytes after it (z5py writes 16): what the header declares is the frame,
        // as c-blosc and so numcodecs read it. One that declares more than it holds is refused.
        let declared = bytes.get(12..16).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
        let frame = if declared >= BLOSC_MIN_HEADER_LENGTH && declared < bytes.len() { &bytes[..declared] } else { bytes };
        let mut nbytes: usize = 0;
        // SAFETY: validate reads only within `frame.len()` and reports the decoded size.
        let valid = unsafe { blosc_src::blosc_cbuffer_validate(frame.as_ptr() as *const c_void, frame.len(), &mut nbytes) };
        if valid < 0 {
            return Err(corrupt("blosc: not a valid blosc frame"));
        }
        if nbytes > max {
            return Err(super::too_large("blosc", max));
        }
        let mut out = super::with_room(nbytes)?;
        // SAFETY: the frame was validated against its length; `out` has room for `nbytes`.
        let n = unsafe { blosc_src::blosc_decompress_ctx(frame.as_ptr() as *const c_void, out.as_mut_ptr() as *mut c_void, nbytes, 1) };
        if n < 0 || n as usize != nbytes {
            return Err(corrupt(format!("blosc: decompression failed ({n})")));
        }
        // SAFETY: blosc wrote exactly `n` bytes.
        unsafe { out.set_len(n as usize) };
        Ok(out)
    }

    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let cname = CString::new(self.cname.as_str()).map_err(|_| Error::Invalid("blosc cname".into()))?;
        let cap = bytes.len() + BLOSC_MAX_OVERHEAD;
        let mut out = super::with_room(cap)?;
        // SAFETY: `out` has room for `cap` bytes, the most blosc writes for this input.
        let n = unsafe {
            blosc_src::blosc_compress_ctx(
                self.clevel,
                self.shuffle,
                self.typesize,
                bytes.len(),
                bytes.as_ptr() as *const c_void,
                out.as_mut_ptr() as *mut c_void,
                cap,
                cname.as_ptr(),
                self.blocksize,
                1,
            )
        };
        if n <= 0 {
            return Err(Error::Io(std::io::Error::other(format!("blosc: compression failed ({n})"))));
        }
        // SAFETY: blosc wrote exactly `n` bytes.
        unsafe { out.set_len(n as usize) };
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcpyed_frame_from_the_spec_digest() {
        // the C-Blosc header: 02 01 33 08 20000000 20000000 30000000 + 32 raw bytes.
        let mut frame = vec![0x02, 0x01, 0x33, 0x08, 0x20, 0, 0, 0, 0x20, 0, 0, 0, 0x30, 0, 0, 0];
        let raw: Vec<u8> = (0..32).collect();
        frame.extend(&raw);
        let c = BloscCodec::parse_v2(&json!({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}), 8).unwrap();
        assert_eq!(c.decode(frame.clone(), raw.len()).unwrap(), raw);
        // Bytes after the frame are not the frame's.
        let mut padded = frame.clone();
        padded.extend([0xaa; 16]);
        assert_eq!(c.decode(padded, raw.len()).unwrap(), raw);
        frame.truncate(40);
        assert!(c.decode(frame, raw.len()).is_err());
    }

    #[test]
    fn every_compressor_and_shuffle_round_trips() {
        let data: Vec<u8> = (0..4096u32).flat_map(|i| (i / 3).to_le_bytes()).collect();
        for cname in CNAMES {
            for shuffle in ["noshuffle", "shuffle", "bitshuffle"] {
                let cfg = json!({"typesize": 4, "cname": cname, "clevel": 5, "shuffle": shuffle, "blocksize": 0});
                let c = BloscCodec::parse_v3(&cfg, &DataType::UInt32).unwrap();
                let enc = c.encode(data.clone()).unwrap();
                assert!(enc.len() < data.len(), "{cname} {shuffle} compresses");
                assert_eq!(c.decode(enc, data.len()).unwrap(), data, "{cname} {shuffle}");
            }
        }
        assert!(BloscCodec::parse_v3(&json!({"cname": "lzma"}), &DataType::UInt8).is_err());
        // A frame that says it holds more than the chunk can is refused before anything is inflated.
        let c = BloscCodec::parse_v3(&json!({"cname": "lz4", "clevel": 5, "shuffle": "noshuffle"}), &DataType::UInt8).unwrap();
        let bomb = c.encode(vec![0; 1 << 20]).unwrap();
        assert!(c.decode(bomb, 1000).unwrap_err().to_string().contains("more than the 1000 bytes"));
    }
}
