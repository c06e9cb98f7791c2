//! numcodecs `packbits` (a filter over bools): a byte saying how many bits pad the last byte,
//! then eight elements to a byte, first element in the high bit (NumPy's `packbits`).
//! v2 filter `{"id": "packbits"}`; v3 `numcodecs.packbits` (array→array, to a 1-D uint8 chunk).

use serde_json::{Value, json};

use super::{BytesToBytesCodec, CodecTraits, corrupt, too_large, with_room};
use crate::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackBitsCodec;

impl PackBitsCodec {
    /// The packed length of `n` bools.
    pub fn packed_len(n: u64) -> u64 {
        1 + n.div_ceil(8)
    }
}

impl CodecTraits for PackBitsCodec {
    fn name(&self) -> &'static str {
        "packbits"
    }
    fn configuration(&self) -> Value {
        json!({})
    }
}

impl BytesToBytesCodec for PackBitsCodec {
    fn decode(&self, bytes: Vec<u8>, max: usize) -> Result<Vec<u8>> {
        let (&padding, packed) = bytes.split_first().ok_or_else(|| corrupt("packbits: empty"))?;
        let n = (packed.len() * 8)
            .checked_sub(usize::from(padding))
            .filter(|_| padding < 8)
            .ok_or_else(|| corrupt(format!("packbits: {padding} bits of padding")))?;
        if n > max {
            return Err(too_large("packbits", max));
        }
        let mut out = with_room(n)?;
        out.extend((0..n).map(|i| (packed[i / 8] >> (7 - i % 8)) & 1));
        Ok(out)
    }

    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let padding = (8 - bytes.len() % 8) % 8;
        let mut out = with_room(Self::packed_len(bytes.len() as u64) as usize)?;
        out.push(padding as u8);
        out.extend(bytes.chunks(8).map(|bits| bits.iter().enumerate().fold(0u8, |b, (i, &x)| b | (u8::from(x != 0) << (7 - i)))));
        Ok(out)
    }

    fn encoded_size(&self, decoded: u64) -> Option<u64> {
        Some(Self::packed_len(decoded))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numcodecs_layout() {
        // numcodecs.PackBits().encode(np.array([1,0,1,1,0,0,0,0,1,1], bool)) is [6, 0xb0, 0xc0].
        let data = vec![1, 0, 1, 1, 0, 0, 0, 0, 1, 1];
        let enc = PackBitsCodec.encode(data.clone()).unwrap();
        assert_eq!(enc, [6, 0xb0, 0xc0]);
        assert_eq!(PackBitsCodec.decode(enc, 10).unwrap(), data);
        assert!(PackBitsCodec.decode(vec![9, 0], 10).is_err());
        assert!(PackBitsCodec.decode(vec![], 10).is_err());
        assert!(PackBitsCodec.decode(vec![0, 1, 2], 10).is_err());
    }
}
