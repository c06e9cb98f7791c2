//! Elements as numbers, for numcodecs' typed filters (delta, astype, fixedscaleoffset, quantize,
//! bitround) and `scale_offset`: read from and written to the bytes of a NumPy type in either
//! byte order, with NumPy's casts and its arithmetic in the precision NumPy would use.

use serde_json::Value;

use super::corrupt;
use crate::zarr::dtype::DataType;
use crate::{Error, Result};

/// One element as a wide number.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    I(i128),
    F(f64),
}

impl Num {
    pub fn as_f64(self) -> f64 {
        match self {
            Num::I(i) => i as f64,
            Num::F(f) => f,
        }
    }

    /// A JSON number (or a string holding one, as `scale_offset` allows) as a `Num`.
    pub fn parse(codec: &str, what: &str, v: &Value) -> Result<Num> {
        let bad = || Error::metadata(format!("{codec}: {what} must be a number, got {v}"));
        match v {
            Value::Number(n) => match n.as_i64() {
                Some(i) => Ok(Num::I(i128::from(i))),
                None => match n.as_u64() {
                    Some(u) => Ok(Num::I(i128::from(u))),
                    None => n.as_f64().map(Num::F).ok_or_else(bad),
                },
            },
            Value::String(s) => match s.parse::<i128>() {
                Ok(i) => Ok(Num::I(i)),
                Err(_) => match s.as_str() {
                    "NaN" => Ok(Num::F(f64::NAN)),
                    "Infinity" => Ok(Num::F(f64::INFINITY)),
                    "-Infinity" => Ok(Num::F(f64::NEG_INFINITY)),
                    other => other.parse::<f64>().map(Num::F).map_err(|_| bad()),
                },
            },
            _ => Err(bad()),
        }
    }
}

/// Which arithmetic NumPy does: wrapping integers or floats rounded to a width after each step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    Int,
    F16,
    F32,
    F64,
}

impl Precision {
    /// A float result of one operation, rounded as NumPy's would be in this precision (one
    /// operation done in f64 and rounded once to f32 or f16 is exact: f64 has the spare bits).
    pub fn round(self, f: f64) -> f64 {
        match self {
            Precision::F16 => half::f16::from_f64(f).to_f64(),
            Precision::F32 => f as f32 as f64,
            Precision::F64 | Precision::Int => f,
        }
    }

    fn apply(self, a: Num, b: Num, int: fn(i128, i128) -> i128, float: fn(f64, f64) -> f64) -> Num {
        match (self, a, b) {
            (Precision::Int, Num::I(x), Num::I(y)) => Num::I(int(x, y)),
            _ => Num::F(self.round(float(a.as_f64(), b.as_f64()))),
        }
    }

    pub fn add(self, a: Num, b: Num) -> Num {
        self.apply(a, b, i128::wrapping_add, |x, y| x + y)
    }
    pub fn sub(self, a: Num, b: Num) -> Num {
        self.apply(a, b, i128::wrapping_sub, |x, y| x - y)
    }
    pub fn mul(self, a: Num, b: Num) -> Num {
        self.apply(a, b, i128::wrapping_mul, |x, y| x * y)
    }
    /// True division: always a float.
    pub fn div(self, a: Num, b: Num) -> Num {
        Num::F(self.round(a.as_f64() / b.as_f64()))
    }
    /// `np.around`: half to even; integers are left alone.
    pub fn around(self, a: Num) -> Num {
        match a {
            Num::F(f) => Num::F(self.round(f.round_ties_even())),
            i => i,
        }
    }
}

/// A numeric NumPy type in a byte order, as a numcodecs configuration names it ("<f8", "f8",
/// "float64"; no byte order is the machine's, little-endian here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Typed {
    pub dtype: DataType,
    pub big: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    Signed,
    Unsigned,
    Float,
}

impl Typed {
    pub fn parse(codec: &str, v: &Value) -> Result<Typed> {
        let (dtype, big) = DataType::parse_v2(v, None).map_err(|_| Error::metadata(format!("{codec}: unsupported dtype {v}")))?;
        let typed = Typed { dtype, big };
        typed.kind().ok_or_else(|| Error::metadata(format!("{codec}: dtype {v} is not a number type")))?;
        Ok(typed)
    }

    /// The array's own type, little-endian (a v3 array→array codec's input).
    pub fn native(codec: &str, dtype: &DataType) -> Result<Typed> {
        let typed = Typed { dtype: dtype.clone(), big: false };
        typed.kind().ok_or_else(|| Error::metadata(format!("{codec} does not support the data type {}", dtype.name())))?;
        Ok(typed)
    }

    fn kind(&self) -> Option<Kind> {
        Some(match self.dtype {
            DataType::Bool => Kind::Bool,
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => Kind::Signed,
            DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => Kind::Unsigned,
            DataType::Float16 | DataType::Float32 | DataType::Float64 => Kind::Float,
            _ => return None,
        })
    }

    pub fn size(&self) -> usize {
        self.dtype.size().unwrap_or(1)
    }

    pub fn is_float(&self) -> bool {
        self.kind() == Some(Kind::Float)
    }

    /// The smallest and largest integer of an integer type.
    pub fn int_range(&self) -> Option<(i128, i128)> {
        let bits = 8 * self.size() as u32;
        match self.kind()? {
            Kind::Signed => Some((-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)),
            Kind::Unsigned => Some((0, (1i128 << bits) - 1)),
            Kind::Bool => Some((0, 1)),
            Kind::Float => None,
        }
    }

    /// Bits of a float's mantissa (`bitround`), or `None` for integers.
    pub fn mantissa_bits(&self) -> Option<u32> {
        match self.dtype {
            DataType::Float16 => Some(10),
            DataType::Float32 => Some(23),
            DataType::Float64 => Some(52),
            _ => None,
        }
    }

    /// The precision of NumPy's arithmetic on arrays of this type with Python scalars.
    pub fn precision(&self) -> Precision {
        match self.dtype {
            DataType::Float16 => Precision::F16,
            DataType::Float32 => Precision::F32,
            DataType::Float64 => Precision::F64,
            _ => Precision::Int,
        }
    }

    /// Whether every value of `narrow` is a value of this type (an `astype` to it is exact).
    pub fn holds_all_of(&self, narrow: &Typed) -> bool {
        let (wk, nk) = (self.kind(), narrow.kind());
        let (ws, ns) = (self.size(), narrow.size());
        let int_bits =
            |k: Option<Kind>, s: usize| if k == Some(Kind::Bool) { 1 } else { 8 * s as u32 - u32::from(k == Some(Kind::Signed)) };
        match (wk, nk) {
            _ if self.dtype == narrow.dtype => true,
            (Some(Kind::Float), Some(Kind::Float)) => ws >= ns,
            (Some(Kind::Float), _) => self.mantissa_bits().is_some_and(|m| m + 1 >= int_bits(nk, ns)),
            (_, Some(Kind::Float)) => false,
            (Some(Kind::Signed), _) => int_bits(wk, ws) >= int_bits(nk, ns),
            (_, Some(Kind::Signed)) => false,
            _ => int_bits(wk, ws) >= int_bits(nk, ns),
        }
    }

    /// The elements of `bytes`, or why it is not a whole number of them.
    pub fn elements<'b>(&self, codec: &str, bytes: &'b [u8]) -> Result<std::slice::ChunksExact<'b, u8>> {
        let size = self.size();
        if !bytes.len().is_multiple_of(size) {
            return Err(corrupt(format!("{codec}: {} bytes is not a whole number of {size}-byte elements", bytes.len())));
        }
        Ok(bytes.chunks_exact(size))
    }

    pub fn read(&self, b: &[u8]) -> Num {
        let mut le = [0u8; 16];
        let n = b.len().min(16);
        le[..n].copy_from_slice(&b[..n]);
        if self.big {
            le[..n].reverse();
        }
        match self.kind() {
            Some(Kind::Float) => Num::F(match n {
                2 => half::f16::from_le_bytes([le[0], le[1]]).to_f64(),
                4 => f64::from(f32::from_le_bytes([le[0], le[1], le[2], le[3]])),
                _ => f64::from_le_bytes([le[0], le[1], le[2], le[3], le[4], le[5], le[6], le[7]]),
            }),
            Some(Kind::Signed) => {
                let shift = 128 - 8 * n as u32;
                Num::I((i128::from_le_bytes(le) << shift) >> shift)
            }
            _ => Num::I(i128::from_le_bytes(le)),
        }
    }

    /// Append `n` as NumPy's `astype` to this type would: integers wrap, floats to integers
    /// truncate toward zero, floats round to nearest.
    pub fn write(&self, n: Num, out: &mut Vec<u8>) {
        let size = self.size();
        let mut bytes: [u8; 16] = match (self.kind(), n) {
            (Some(Kind::Bool), n) => (u128::from(n != Num::I(0) && n != Num::F(0.0))).to_le_bytes(),
            (Some(Kind::Float), n) => {
                let mut b = [0u8; 16];
                match size {
                    2 => b[..2].copy_from_slice(&half::f16::from_f64(n.as_f64()).to_le_bytes()),
                    4 => {
                        let f = match n {
                            Num::I(i) => i as f32,
                            Num::F(f) => f as f32,
                        };
                        b[..4].copy_from_slice(&f.to_le_bytes());
                    }
                    _ => b[..8].copy_from_slice(&n.as_f64().to_le_bytes()),
                }
                b
            }
            (_, Num::I(i)) => i.to_le_bytes(),
            (_, Num::F(f)) => (f.trunc() as i128).to_le_bytes(),
        };
        if self.big {
            bytes[..size].reverse();
        }
        out.extend_from_slice(&bytes[..size]);
    }

    /// Every element of `bytes` (of type `from`) mapped by `f` and written as this type.
    pub fn map_from(&self, codec: &str, from: &Typed, bytes: &[u8], mut f: impl FnMut(Num) -> Num) -> Result<Vec<u8>> {
        let elements = from.elements(codec, bytes)?;
        let mut out = super::with_room(elements.len() * self.size())?;
        for e in elements {
            self.write(f(from.read(e)), &mut out);
        }
        Ok(out)
    }

    /// The name NumPy gives it ("<f8"), for `info`.
    pub fn name(&self) -> String {
        let kind = match self.kind() {
            Some(Kind::Bool) => 'b',
            Some(Kind::Signed) => 'i',
            Some(Kind::Unsigned) => 'u',
            _ => 'f',
        };
        let order = if self.size() == 1 {
            '|'
        } else if self.big {
            '>'
        } else {
            '<'
        };
        format!("{order}{kind}{}", self.size())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numpy_casts_and_names() {
        let i2 = Typed::parse("t", &json!(">i2")).unwrap();
        let mut out = Vec::new();
        i2.write(Num::F(-2.9), &mut out);
        i2.write(Num::I(70000), &mut out); // wraps as NumPy's astype does
        assert_eq!(out, [0xff, 0xfe, 0x11, 0x70]);
        assert_eq!(i2.read(&out[..2]), Num::I(-2));
        assert_eq!(i2.name(), ">i2");
        let f4 = Typed::parse("t", &json!("float32")).unwrap();
        assert_eq!(f4.name(), "<f4");
        assert!(!f4.big);
        assert!(Typed::parse("t", &json!("|S4")).is_err());
        let f2 = Typed::parse("t", &json!("<f2")).unwrap();
        let mut h = Vec::new();
        f2.write(Num::F(1.5), &mut h);
        assert_eq!(f2.read(&h), Num::F(1.5));
        assert!(Typed::parse("t", &json!("f8")).unwrap().holds_all_of(&Typed::parse("t", &json!("i4")).unwrap()));
        assert!(!f4.holds_all_of(&Typed::parse("t", &json!("i4")).unwrap()));
        assert!(Typed::parse("t", &json!("i4")).unwrap().holds_all_of(&Typed::parse("t", &json!("u2")).unwrap()));
        assert!(!Typed::parse("t", &json!("u4")).unwrap().holds_all_of(&Typed::parse("t", &json!("i2")).unwrap()));
        // f32 arithmetic rounds each step to f32.
        let third = Precision::F32.div(Num::I(1), Num::I(3));
        assert_eq!(third, Num::F(f64::from(1f32 / 3f32)));
        assert_eq!(Precision::F64.around(Num::F(2.5)), Num::F(2.0));
        assert_eq!(Precision::Int.mul(Num::I(3), Num::I(4)), Num::I(12));
        assert_eq!(Num::parse("t", "s", &json!("0.5")).unwrap(), Num::F(0.5));
        assert!(Num::parse("t", "s", &json!([1])).is_err());
    }
}
