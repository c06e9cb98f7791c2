//! `imagecodecs_packbits` (bytes→bytes): TIFF's PackBits run lengths (compression 32773), as
//! tifffile's fsspec references name them. Each run starts with a signed byte n: 0 to 127, the
//! next n + 1 bytes as they are; -1 to -127, the next byte 1 - n times; -128, nothing.
//! Not numcodecs' `packbits`, which packs bools into bits (`packbits.rs`).
//! v2 compressor `{"id": "imagecodecs_packbits"}`.

use serde_json::{Value, json};

use super::{BytesToBytesCodec, CodecTraits, corrupt, too_large};
use crate::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TiffPackBitsCodec;

impl CodecTraits for TiffPackBitsCodec {
    fn name(&self) -> &'static str {
        "imagecodecs_packbits"
    }
    fn configuration(&self) -> Value {
        json!({})
    }
}

/// The longest run one header byte says.
const RUN: usize = 128;

impl BytesToBytesCodec for TiffPackBitsCodec {
    fn decode(&self, bytes: Vec<u8>, max: usize) -> Result<Vec<u8>> {
        let short = || corrupt("imagecodecs_packbits: a run past the end of the data");
        let mut out = Vec::new();
        let mut at = 0;
        while let Some(&n) = bytes.get(at) {
            let n = n as i8;
            at += 1;
            let len = match n {
                0..=127 => n as usize + 1,
                -127..=-1 => (1 - n as isize) as usize,
                -128 => continue,
            };
            if out.len() + len > max {
                return Err(too_large("imagecodecs_packbits", max));
            }
            if n >= 0 {
                out.extend_from_slice(bytes.get(at..at + len).ok_or_else(short)?);
                at += len;
            } else {
                let &b = bytes.get(at).ok_or_else(short)?;
                out.resize(out.len() + len, b);
                at += 1;
            }
        }
        Ok(out)
    }

    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(bytes.len() + bytes.len() / RUN + 1);
        let run_at = |i: usize| bytes[i..].iter().take(RUN).take_while(|&&b| b == bytes[i]).count();
        let mut i = 0;
        while i < bytes.len() {
            let run = run_at(i);
            if run >= 2 {
                out.extend([(1 - run as isize) as i8 as u8, bytes[i]]);
                i += run;
                continue;
            }
            // Bytes as they are, up to where a run of two or more starts.
            let start = i;
            while i < bytes.len() && i - start < RUN && (i == start || run_at(i) < 2) {
                i += 1;
            }
            out.push((i - start - 1) as u8);
            out.extend_from_slice(&bytes[start..i]);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiff_packbits_as_imagecodecs_writes_it() {
        // imagecodecs.packbits_encode of each.
        let cases: [(Vec<u8>, Vec<u8>); 2] = [
            ([&[b'A'; 10][..], b"bbbcdef", &[0, 1, 2, 3, 4]].concat(), vec![247, 65, 254, 98, 8, 99, 100, 101, 102, 0, 1, 2, 3, 4]),
            ([&[7u8; 300][..], b"xyz\0"].concat(), vec![129, 7, 129, 7, 213, 7, 3, 120, 121, 122, 0]),
        ];
        for (data, theirs) in cases {
            assert_eq!(TiffPackBitsCodec.decode(theirs, data.len()).unwrap(), data);
            let ours = TiffPackBitsCodec.encode(data.clone()).unwrap();
            assert_eq!(TiffPackBitsCodec.decode(ours, data.len()).unwrap(), data);
        }
        // A no-op header, a cut run, a bomb.
        assert_eq!(TiffPackBitsCodec.decode(vec![128, 0, 5], 10).unwrap(), [5]);
        assert!(TiffPackBitsCodec.decode(vec![5, 1, 2], 10).is_err());
        assert!(TiffPackBitsCodec.decode([129, 0].repeat(100), 1000).unwrap_err().to_string().contains("more than the 1000 bytes"));
        let mixed: Vec<u8> = (0..5000u32).map(|i| if i % 300 < 150 { 9 } else { (i % 7) as u8 }).collect();
        assert_eq!(TiffPackBitsCodec.decode(TiffPackBitsCodec.encode(mixed.clone()).unwrap(), mixed.len()).unwrap(), mixed);
    }
}
