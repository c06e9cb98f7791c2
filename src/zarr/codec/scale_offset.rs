//! `scale_offset` (array→array, zarr-extensions; zarr-python 3.2+): stores `(x - offset) *
//! scale` and decodes `x / scale + offset`, in the array's own type: integers exactly (a
//! result out of range, or a division with a remainder, fails the chunk), floats in their own
//! precision. v3 `{"name": "scale_offset", "configuration": {"offset": 0, "scale": 1}}`;
//! offset and scale may be numbers or strings holding them.

use serde_json::Value;

use super::numeric::{Num, Typed};
use super::{BytesToBytesCodec, CodecTraits, corrupt};
use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct ScaleOffsetCodec {
    dtype: Typed,
    offset: Num,
    scale: Num,
    /// The configuration as written, for `info`.
    config: Value,
}

impl ScaleOffsetCodec {
    pub fn parse(config: &Value, dtype: Typed) -> Result<ScaleOffsetCodec> {
        let number = |what: &str, default: i128| -> Result<Num> {
            let n = config.get(what).map_or(Ok(Num::I(default)), |v| Num::parse("scale_offset", what, v))?;
            match n {
                Num::F(f) if !dtype.is_float() && f.fract() == 0.0 && f.abs() < 1e18 => Ok(Num::I(f as i128)),
                Num::F(_) if !dtype.is_float() => {
                    Err(Error::metadata(format!("scale_offset {what} {n:?} is not a value of {}", dtype.name())))
                }
                Num::I(i) if dtype.is_float() => Ok(Num::F(i as f64)),
                n => Ok(n),
            }
        };
        let (offset, scale) = (number("offset", 0)?, number("scale", 1)?);
        if scale == Num::I(0) {
            return Err(Error::metadata("scale_offset scale 0 cannot be decoded"));
        }
        Ok(ScaleOffsetCodec { dtype, offset, scale, config: config.clone() })
    }

    /// An integer result, or why it is not a value of the type.
    fn exact(&self, n: Option<i128>) -> Result<Num> {
        match (n, self.dtype.int_range()) {
            (Some(v), Some((lo, hi))) if (lo..=hi).contains(&v) => Ok(Num::I(v)),
            _ => Err(corrupt(format!("scale_offset: a value out of the range of {}", self.dtype.name()))),
        }
    }

    fn each(&self, bytes: &[u8], f: impl Fn(Num) -> Result<Num>) -> Result<Vec<u8>> {
        let elements = self.dtype.elements("scale_offset", bytes)?;
        let mut out = super::with_room(bytes.len())?;
        for e in elements {
            self.dtype.write(f(self.dtype.read(e))?, &mut out);
        }
        Ok(out)
    }
}

impl CodecTraits for ScaleOffsetCodec {
    fn name(&self) -> &'static str {
        "scale_offset"
    }
    fn configuration(&self) -> Value {
        self.config.clone()
    }
}

impl BytesToBytesCodec for ScaleOffsetCodec {
    fn decode(&self, bytes: Vec<u8>, _max: usize) -> Result<Vec<u8>> {
        let p = self.dtype.precision();
        self.each(&bytes, |x| match (x, self.scale, self.offset) {
            (Num::I(x), Num::I(s), Num::I(o)) => {
                if x % s != 0 {
                    return Err(corrupt(format!("scale_offset: {x} is not a multiple of the scale {s}")));
                }
                self.exact((x / s).checked_add(o))
            }
            _ => Ok(p.add(p.div(x, self.scale), self.offset)),
        })
    }

    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let p = self.dtype.precision();
        self.each(&bytes, |x| match (x, self.scale, self.offset) {
            (Num::I(x), Num::I(s), Num::I(o)) => self.exact(x.checked_sub(o).and_then(|d| d.checked_mul(s))),
            _ => Ok(p.mul(p.sub(x, self.offset), self.scale)),
        })
    }

    fn encoded_size(&self, decoded: u64) -> Option<u64> {
        Some(decoded)
    }

    /// Float arithmetic rounds; integers are exact or refused.
    fn elementwise(&self) -> bool {
        true
    }

    fn lossy(&self) -> Option<String> {
        self.dtype
            .is_float()
            .then(|| format!("scale_offset's float arithmetic on {} does not give back the values written", self.dtype.name()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::dtype::DataType;
    use serde_json::json;

    #[test]
    fn exact_integers_and_float_precision() {
        let i2 = Typed::native("t", &DataType::Int16).unwrap();
        let c = ScaleOffsetCodec::parse(&json!({"offset": 10, "scale": "3"}), i2.clone()).unwrap();
        let data: Vec<u8> = [10i16, 20, -5].iter().flat_map(|x| x.to_le_bytes()).collect();
        let enc = c.encode(data.clone()).unwrap();
        let stored: Vec<i16> = enc.chunks(2).map(|b| i16::from_le_bytes([b[0], b[1]])).collect();
        assert_eq!(stored, [0, 30, -45]);
        assert_eq!(c.decode(enc, 6).unwrap(), data);
        assert!(c.decode(1i16.to_le_bytes().to_vec(), 2).unwrap_err().to_string().contains("multiple"));
        assert!(c.encode(20000i16.to_le_bytes().to_vec()).unwrap_err().to_string().contains("range"));
        assert!(ScaleOffsetCodec::parse(&json!({"scale": 0.5}), i2.clone()).is_err());
        assert!(ScaleOffsetCodec::parse(&json!({"scale": 0}), i2).is_err());
        let f4 = ScaleOffsetCodec::parse(&json!({"offset": 0.5, "scale": 3}), Typed::native("t", &DataType::Float32).unwrap()).unwrap();
        let dec = f4.decode(1f32.to_le_bytes().to_vec(), 4).unwrap();
        assert_eq!(f32::from_le_bytes(dec.try_into().unwrap()), 1f32 / 3f32 + 0.5f32);
        assert!(f4.lossy().is_some());
    }
}
