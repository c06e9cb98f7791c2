//! numcodecs `bitround` (a filter over float elements): keeps `keepbits` bits of each
//! mantissa, rounding to nearest (ties to even) on the integer view; decoding is the identity.
//! v2 filter `{"id": "bitround", "keepbits": 10}` (over the array's own type); v3
//! `numcodecs.bitround` (array→array). Where a value written would not read back as written, the
//! mount shows the array read-only (`lossy`).

use serde_json::{Value, json};

use super::numeric::Typed;
use super::{BytesToBytesCodec, CodecTraits, too_large};
use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitRoundCodec {
    keepbits: u32,
    dtype: Typed,
}

impl BitRoundCodec {
    pub fn parse(config: &Value, dtype: Typed) -> Result<BitRoundCodec> {
        let bits = dtype.mantissa_bits().ok_or_else(|| Error::metadata(format!("bitround supports only floats, not {}", dtype.name())))?;
        let keepbits =
            config.get("keepbits").and_then(Value::as_u64).ok_or_else(|| Error::metadata("bitround needs keepbits, a whole number"))?;
        if keepbits > u64::from(bits) {
            return Err(Error::metadata(format!("bitround keepbits {keepbits} is more than the {bits} bits of {}", dtype.name())));
        }
        Ok(BitRoundCodec { keepbits: keepbits as u32, dtype })
    }
}

impl CodecTraits for BitRoundCodec {
    fn name(&self) -> &'static str {
        "bitround"
    }
    fn configuration(&self) -> Value {
        json!({"keepbits": self.keepbits})
    }
}

impl BytesToBytesCodec for BitRoundCodec {
    fn decode(&self, bytes: Vec<u8>, max: usize) -> Result<Vec<u8>> {
        if bytes.len() > max {
            return Err(too_large("bitround", max));
        }
        Ok(bytes)
    }

    fn encode(&self, mut bytes: Vec<u8>) -> Result<Vec<u8>> {
        let bits = self.dtype.mantissa_bits().unwrap_or(0);
        if self.keepbits >= bits {
            return Ok(bytes);
        }
        let size = self.dtype.size();
        let maskbits = bits - self.keepbits;
        let width = 8 * size as u32;
        let mask = (u64::MAX << maskbits) & (u64::MAX >> (64 - width));
        let half_quantum1 = (1u64 << (maskbits - 1)) - 1;
        let _whole_elements = self.dtype.elements("bitround", &bytes)?;
        for e in bytes.chunks_exact_mut(size) {
            let mut le = [0u8; 8];
            le[..size].copy_from_slice(e);
            if self.dtype.big {
                le[..size].reverse();
            }
            let b = u64::from_le_bytes(le);
            // NumPy's signed arithmetic, wrapping at the element's width: the low bits are
            // the same as unsigned.
            let rounded = (b.wrapping_add(((b >> maskbits) & 1) + half_quantum1)) & mask;
            let mut out = rounded.to_le_bytes();
            if self.dtype.big {
                out[..size].reverse();
            }
            e.copy_from_slice(&out[..size]);
        }
        Ok(bytes)
    }

    fn encoded_size(&self, decoded: u64) -> Option<u64> {
        Some(decoded)
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn lossy(&self) -> Option<String> {
        (self.keepbits < self.dtype.mantissa_bits().unwrap_or(0))
            .then(|| format!("bitround keeps {} mantissa bits: written values would not read back as written", self.keepbits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::dtype::DataType;

    #[test]
    fn numcodecs_values() {
        // numcodecs.BitRound(keepbits=3).encode(np.array([1.1, -3.3, 1e30], 'f4')).view('u4')
        // is [0x3f900000, 0xc0500000, 0x71500000].
        let c = BitRoundCodec::parse(&json!({"keepbits": 3}), Typed::native("t", &DataType::Float32).unwrap()).unwrap();
        let data: Vec<u8> = [1.1f32, -3.3, 1e30].iter().flat_map(|x| x.to_le_bytes()).collect();
        let enc: Vec<u32> = c.encode(data.clone()).unwrap().chunks(4).map(|b| u32::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(enc, [0x3f90_0000, 0xc050_0000, 0x7150_0000]);
        assert_eq!(c.decode(data.clone(), 12).unwrap(), data);
        assert!(BitRoundCodec::parse(&json!({"keepbits": 30}), Typed::native("t", &DataType::Float32).unwrap()).is_err());
        assert!(BitRoundCodec::parse(&json!({"keepbits": 3}), Typed::native("t", &DataType::Int32).unwrap()).is_err());
    }
}
