//! `imagecodecs_lzw` (bytes→bytes): TIFF's LZW (compression 5), as tifffile's fsspec references
//! name a TIFF's LZW strips and tiles: codes most significant bit first, from 9 to 12 bits, the
//! width switched one code early (TIFF's rule, not GIF's), a clear code at 256, the end at 257.
//! v2 compressor `{"id": "imagecodecs_lzw"}`.

use serde_json::{Value, json};

use super::{BytesToBytesCodec, CodecTraits, corrupt, too_large};
use crate::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TiffLzwCodec;

impl CodecTraits for TiffLzwCodec {
    fn name(&self) -> &'static str {
        "imagecodecs_lzw"
    }
    fn configuration(&self) -> Value {
        json!({})
    }
}

impl BytesToBytesCodec for TiffLzwCodec {
    fn decode(&self, bytes: Vec<u8>, max: usize) -> Result<Vec<u8>> {
        use weezl::LzwStatus;
        let mut decoder = weezl::decode::Decoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8);
        let (mut out, mut at) = (Vec::new(), 0);
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let step = decoder.decode_bytes(&bytes[at..], &mut buf);
            at += step.consumed_in;
            if out.len() + step.consumed_out > max {
                return Err(too_large("imagecodecs_lzw", max));
            }
            out.extend_from_slice(&buf[..step.consumed_out]);
            match step.status.map_err(|e| corrupt(format!("imagecodecs_lzw: {e}")))? {
                LzwStatus::Done => return Ok(out),
                // Input used up without the end code (some writers leave it out).
                LzwStatus::NoProgress if at == bytes.len() => return Ok(out),
                LzwStatus::NoProgress if step.consumed_in == 0 && step.consumed_out == 0 => {
                    return Err(corrupt("imagecodecs_lzw: the decoder makes no progress"));
                }
                LzwStatus::Ok | LzwStatus::NoProgress => {}
            }
        }
    }

    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        weezl::encode::Encoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8)
            .encode(&bytes)
            .map_err(|e| crate::Error::Io(std::io::Error::other(format!("imagecodecs_lzw: {e}"))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiff_lzw_as_imagecodecs_writes_it() {
        // imagecodecs.lzw_encode(b"TOBEORNOTTOBEORTOBEORNOT" * 2): clear, codes, end.
        let imagecodecs = [
            0x80, 0x15, 0x09, 0xe4, 0x22, 0x29, 0x3c, 0xa4, 0x4e, 0x27, 0x95, 0x20, 0x50, 0x48, 0x34, 0x2e, 0x0b, 0x07, 0x84, 0xc3, 0xa0,
            0xd0, 0x88, 0x54, 0x0e, 0x1f, 0x12, 0x88, 0x15, 0x20, 0x20,
        ];
        let text = b"TOBEORNOTTOBEORTOBEORNOT".repeat(2);
        assert_eq!(TiffLzwCodec.decode(imagecodecs.to_vec(), 1000).unwrap(), text);
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let enc = TiffLzwCodec.encode(data.clone()).unwrap();
        assert_eq!(TiffLzwCodec.decode(enc.clone(), data.len()).unwrap(), data);
        assert!(TiffLzwCodec.decode(enc, 1000).unwrap_err().to_string().contains("more than the 1000 bytes"));
        assert!(TiffLzwCodec.decode(vec![0xff; 40], 1000).is_err());
    }
}
