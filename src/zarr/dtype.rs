//! Data types and fill values: every element is held as its little-endian bytes.

use base64::Engine;
use serde_json::Value;

use crate::limits;
use crate::{Error, Result};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataType {
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Float16,
    Float32,
    Float64,
    Complex64,
    Complex128,
    /// `r<N>`: N/8 opaque bytes.
    RawBits(usize),
    /// `fixed_length_utf32` (v2 `<U k`): code units, NUL padded; the size is in bytes.
    FixedUtf32(usize),
    /// `numpy.datetime64` (v2 `<M8[unit]`): int64, unit kept for display.
    DateTime64(String),
    /// `numpy.timedelta64` (v2 `<m8[unit]`).
    TimeDelta64(String),
    /// zarr-python's `null_terminated_bytes` (v2 `|S n`).
    NullTerminatedBytes(usize),
    /// zarr-python's `raw_bytes` (v2 `|V n`).
    RawBytes(usize),
    /// Variable-length UTF-8 strings.
    String,
    /// Variable-length bytes.
    Bytes,
}

/// Numeric view of a data type, for codecs that compute on elements (v2 `delta`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumericKind {
    Signed,
    Unsigned,
    Float,
}

impl DataType {
    /// Element equality for "is this fill": bitwise, except that any NaN equals any NaN.
    pub fn same_element(&self, a: &[u8], b: &[u8]) -> bool {
        if a == b {
            return true;
        }
        let is_nan = |x: &[u8]| match x.len() {
            2 => half::f16::from_le_bytes([x[0], x[1]]).is_nan(),
            4 => f32::from_le_bytes([x[0], x[1], x[2], x[3]]).is_nan(),
            8 => f64::from_le_bytes(x.try_into().unwrap_or([0; 8])).is_nan(),
            _ => false,
        };
        match self {
            DataType::Float16 | DataType::Float32 | DataType::Float64 => is_nan(a) && is_nan(b),
            DataType::Complex64 | DataType::Complex128 => {
                let h = a.len() / 2;
                (a[..h] == b[..h] || (is_nan(&a[..h]) && is_nan(&b[..h]))) && (a[h..] == b[h..] || (is_nan(&a[h..]) && is_nan(&b[h..])))
            }
            _ => self.numeric_kind() == Some(NumericKind::Float) && is_nan(a) && is_nan(b),
        }
    }

    /// The v3 `data_type` value (core types as strings, extensions as objects).
    pub fn parse_v3(v: &Value) -> Result<DataType> {
        let (name, config) = match v {
            Value::String(s) => (s.as_str(), None),
            Value::Object(o) => {
                let name = o.get("name").and_then(Value::as_str).ok_or_else(|| Error::metadata("data_type object without a name"))?;
                (name, o.get("configuration"))
            }
            _ => {
                return Err(Error::metadata(format!("data_type must be a string or an object, got {v}")));
            }
        };
        let length_bytes = || -> Result<usize> {
            config
                .and_then(|c| c.get("length_bytes"))
                .and_then(Value::as_u64)
                .filter(|&n| n > 0)
                .map(|n| n as usize)
                .ok_or_else(|| Error::metadata(format!("data type {name} needs configuration.length_bytes")))
        };
        let unit = || -> Result<String> {
            let c = config.ok_or_else(|| Error::metadata(format!("data type {name} needs a configuration")))?;
            let unit = c.get("unit").and_then(Value::as_str).ok_or_else(|| Error::metadata(format!("data type {name} needs a unit")))?;
            let scale = c.get("scale_factor").and_then(Value::as_u64).unwrap_or(1);
            Ok(if scale == 1 { unit.to_string() } else { format!("{scale}{unit}") })
        };
        let dt = match name {
            "bool" => DataType::Bool,
            "int8" => DataType::Int8,
            "int16" => DataType::Int16,
            "int32" => DataType::Int32,
            "int64" => DataType::Int64,
            "uint8" => DataType::UInt8,
            "uint16" => DataType::UInt16,
            "uint32" => DataType::UInt32,
            "uint64" => DataType::UInt64,
            "float16" => DataType::Float16,
            "float32" => DataType::Float32,
            "float64" => DataType::Float64,
            "complex64" => DataType::Complex64,
            "complex128" => DataType::Complex128,
            "fixed_length_utf32" => {
                let n = length_bytes()?;
                if n % 4 != 0 {
                    return Err(Error::metadata(format!("fixed_length_utf32 length_bytes {n} is not a multiple of 4")));
                }
                DataType::FixedUtf32(n)
            }
            "null_terminated_bytes" => DataType::NullTerminatedBytes(length_bytes()?),
            "raw_bytes" => DataType::RawBytes(length_bytes()?),
            "numpy.datetime64" => DataType::DateTime64(unit()?),
            "numpy.timedelta64" => DataType::TimeDelta64(unit()?),
            "string" => DataType::String,
            "bytes" | "variable_length_bytes" | "binary" => DataType::Bytes,
            r if r.starts_with('r') && r[1..].parse::<usize>().is_ok() => {
                let bits: usize = r[1..].parse().unwrap_or(0);
                if bits == 0 || !bits.is_multiple_of(8) {
                    return Err(Error::metadata(format!("raw bits type {r}: the bit count must be a positive multiple of 8")));
                }
                DataType::RawBits(bits / 8)
            }
            other => return Err(Error::metadata(format!("unsupported data type {other:?}"))),
        };
        dt.bounded()
    }

    /// The type, if one element of it fits `limits::MAX_ELEMENT_BYTES`: an element's size
    /// sizes fill values, rows and buffers before any chunk is read.
    fn bounded(self) -> Result<DataType> {
        match self.size() {
            Some(n) if n as u64 > limits::MAX_ELEMENT_BYTES => {
                Err(Error::metadata(format!("elements of {n} bytes: more than the {} a data type may take", limits::MAX_ELEMENT_BYTES)))
            }
            _ => Ok(self),
        }
    }

    /// A v2 NumPy type string; returns the type and whether its chunks are big-endian.
    pub fn parse_v2(v: &Value, first_filter: Option<&str>) -> Result<(DataType, bool)> {
        let s = match v {
            Value::String(s) => s.as_str(),
            Value::Array(_) => {
                return Err(Error::metadata("structured v2 dtypes are not supported"));
            }
            _ => return Err(Error::metadata(format!("dtype must be a string, got {v}"))),
        };
        let bad = || Error::metadata(format!("unsupported v2 dtype {s:?}"));
        let typestr = numpy_typestr(s);
        let mut chars = typestr.chars();
        let order = chars.next().ok_or_else(bad)?;
        let big = match order {
            '<' | '|' | '=' => false,
            '>' => true,
            _ => return Err(bad()),
        };
        let kind = chars.next().ok_or_else(bad)?;
        let rest = chars.as_str();
        let (size_str, unit) = match rest.find('[') {
            Some(i) if rest.ends_with(']') => (&rest[..i], Some(&rest[i + 1..rest.len() - 1])),
            _ => (rest, None),
        };
        let size: usize = if kind == 'O' { 0 } else { size_str.parse().map_err(|_| bad())? };
        let dt = match (kind, size) {
            ('b', 1) => DataType::Bool,
            ('i', 1) => DataType::Int8,
            ('i', 2) => DataType::Int16,
            ('i', 4) => DataType::Int32,
            ('i', 8) => DataType::Int64,
            ('u', 1) => DataType::UInt8,
            ('u', 2) => DataType::UInt16,
            ('u', 4) => DataType::UInt32,
            ('u', 8) => DataType::UInt64,
            ('f', 2) => DataType::Float16,
            ('f', 4) => DataType::Float32,
            ('f', 8) => DataType::Float64,
            ('c', 8) => DataType::Complex64,
            ('c', 16) => DataType::Complex128,
            ('M', 8) => DataType::DateTime64(unit.unwrap_or("generic").to_string()),
            ('m', 8) => DataType::TimeDelta64(unit.unwrap_or("generic").to_string()),
            ('U', n) if n > 0 => DataType::FixedUtf32(n.checked_mul(4).ok_or_else(bad)?),
            ('S', n) if n > 0 => DataType::NullTerminatedBytes(n),
            ('V', n) if n > 0 => DataType::RawBytes(n),
            ('O', _) => match first_filter {
                Some("vlen-utf8") => DataType::String,
                Some("vlen-bytes") => DataType::Bytes,
                Some(f) => {
                    return Err(Error::metadata(format!("object dtype with filter {f:?} is not supported")));
                }
                None => return Err(Error::metadata("object dtype without a vlen filter")),
            },
            _ => return Err(bad()),
        };
        Ok((dt.bounded()?, big))
    }

    /// Bytes per element; `None` for variable-length types.
    pub fn size(&self) -> Option<usize> {
        Some(match self {
            DataType::Bool | DataType::Int8 | DataType::UInt8 => 1,
            DataType::Int16 | DataType::UInt16 | DataType::Float16 => 2,
            DataType::Int32 | DataType::UInt32 | DataType::Float32 => 4,
            DataType::Int64 | DataType::UInt64 | DataType::Float64 | DataType::Complex64 => 8,
            DataType::DateTime64(_) | DataType::TimeDelta64(_) => 8,
            DataType::Complex128 => 16,
            DataType::RawBits(n) | DataType::FixedUtf32(n) | DataType::NullTerminatedBytes(n) | DataType::RawBytes(n) => *n,
            DataType::String | DataType::Bytes => return None,
        })
    }

    pub fn is_variable(&self) -> bool {
        self.size().is_none()
    }

    /// The size of the units an endianness swap reverses (1 = nothing to swap).
    pub fn swap_unit(&self) -> usize {
        match self {
            DataType::Complex64 => 4,
            DataType::Complex128 => 8,
            DataType::FixedUtf32(_) => 4,
            DataType::RawBits(_) | DataType::NullTerminatedBytes(_) | DataType::RawBytes(_) => 1,
            DataType::String | DataType::Bytes => 1,
            other => other.size().unwrap_or(1),
        }
    }

    pub fn numeric_kind(&self) -> Option<NumericKind> {
        match self {
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => Some(NumericKind::Signed),
            DataType::DateTime64(_) | DataType::TimeDelta64(_) => Some(NumericKind::Signed),
            DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 | DataType::Bool => Some(NumericKind::Unsigned),
            DataType::Float32 | DataType::Float64 => Some(NumericKind::Float),
            _ => None,
        }
    }

    /// A name for people (`info`, error files).
    pub fn name(&self) -> String {
        match self {
            DataType::Bool => "bool".into(),
            DataType::Int8 => "int8".into(),
            DataType::Int16 => "int16".into(),
            DataType::Int32 => "int32".into(),
            DataType::Int64 => "int64".into(),
            DataType::UInt8 => "uint8".into(),
            DataType::UInt16 => "uint16".into(),
            DataType::UInt32 => "uint32".into(),
            DataType::UInt64 => "uint64".into(),
            DataType::Float16 => "float16".into(),
            DataType::Float32 => "float32".into(),
            DataType::Float64 => "float64".into(),
            DataType::Complex64 => "complex64".into(),
            DataType::Complex128 => "complex128".into(),
            DataType::RawBits(n) => format!("r{}", n * 8),
            DataType::FixedUtf32(n) => format!("fixed_length_utf32[{}]", n / 4),
            DataType::DateTime64(u) => format!("datetime64[{u}]"),
            DataType::TimeDelta64(u) => format!("timedelta64[{u}]"),
            DataType::NullTerminatedBytes(n) => format!("null_terminated_bytes[{n}]"),
            DataType::RawBytes(n) => format!("raw_bytes[{n}]"),
            DataType::String => "string".into(),
            DataType::Bytes => "bytes".into(),
        }
    }

    /// One element of fill, as little-endian bytes. `null` (v2 "undefined") is all zeros.
    pub fn parse_fill(&self, v: &Value) -> Result<Vec<u8>> {
        let bad = || Error::metadata(format!("fill_value {v} is not valid for {}", self.name()));
        if v.is_null() {
            return Ok(vec![0u8; self.size().unwrap_or(0)]);
        }
        let int = |min: i128, max: i128, size: usize| -> Result<Vec<u8>> {
            let n: i128 = match v {
                Value::Number(n) => n
                    .as_i64()
                    .map(i128::from)
                    .or_else(|| n.as_u64().map(i128::from))
                    .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i128))
                    .ok_or_else(bad)?,
                Value::Bool(b) => *b as i128,
                _ => return Err(bad()),
            };
            if n < min || n > max {
                return Err(bad());
            }
            Ok(n.to_le_bytes()[..size].to_vec())
        };
        Ok(match self {
            DataType::Bool => match v {
                Value::Bool(b) => vec![*b as u8],
                Value::Number(n) if n.as_u64() == Some(0) || n.as_u64() == Some(1) => {
                    vec![n.as_u64().unwrap_or(0) as u8]
                }
                _ => return Err(bad()),
            },
            DataType::Int8 => int(i8::MIN.into(), i8::MAX.into(), 1)?,
            DataType::Int16 => int(i16::MIN.into(), i16::MAX.into(), 2)?,
            DataType::Int32 => int(i32::MIN.into(), i32::MAX.into(), 4)?,
            DataType::Int64 => int(i64::MIN.into(), i64::MAX.into(), 8)?,
            DataType::UInt8 => int(0, u8::MAX.into(), 1)?,
            DataType::UInt16 => int(0, u16::MAX.into(), 2)?,
            DataType::UInt32 => int(0, u32::MAX.into(), 4)?,
            DataType::UInt64 => int(0, u64::MAX.into(), 8)?,
            DataType::DateTime64(_) | DataType::TimeDelta64(_) => match v {
                Value::String(s) if s == "NaT" => i64::MIN.to_le_bytes().to_vec(),
                _ => int(i64::MIN.into(), i64::MAX.into(), 8)?,
            },
            DataType::Float16 | DataType::Float32 | DataType::Float64 => float_fill(v, self.size().unwrap_or(8)).ok_or_else(bad)?,
            DataType::Complex64 | DataType::Complex128 => {
                let half = self.size().unwrap_or(16) / 2;
                let parts = v.as_array().filter(|a| a.len() == 2).ok_or_else(bad)?;
                let mut out = float_fill(&parts[0], half).ok_or_else(bad)?;
                out.extend(float_fill(&parts[1], half).ok_or_else(bad)?);
                out
            }
            DataType::RawBits(n) => {
                let a = v.as_array().ok_or_else(bad)?;
                let bytes: Option<Vec<u8>> = a.iter().map(|x| x.as_u64().filter(|&b| b < 256).map(|b| b as u8)).collect();
                let bytes = bytes.ok_or_else(bad)?;
                if bytes.len() != *n {
                    return Err(bad());
                }
                bytes
            }
            DataType::FixedUtf32(n) => {
                let s = v.as_str().ok_or_else(bad)?;
                let mut out: Vec<u8> = s.chars().flat_map(|c| (c as u32).to_le_bytes()).collect();
                if out.len() > *n {
                    return Err(bad());
                }
                out.resize(*n, 0);
                out
            }
            DataType::NullTerminatedBytes(n) | DataType::RawBytes(n) => {
                let mut out = match v {
                    Value::String(s) => base64::engine::general_purpose::STANDARD.decode(s).map_err(|_| bad())?,
                    Value::Array(a) => {
                        a.iter().map(|x| x.as_u64().filter(|&b| b < 256).map(|b| b as u8)).collect::<Option<Vec<u8>>>().ok_or_else(bad)?
                    }
                    _ => return Err(bad()),
                };
                if out.len() > *n {
                    return Err(bad());
                }
                out.resize(*n, 0);
                out
            }
            DataType::String => v.as_str().ok_or_else(bad)?.as_bytes().to_vec(),
            DataType::Bytes => match v {
                Value::String(s) => base64::engine::general_purpose::STANDARD.decode(s).map_err(|_| bad())?,
                Value::Array(a) => {
                    a.iter().map(|x| x.as_u64().filter(|&b| b < 256).map(|b| b as u8)).collect::<Option<Vec<u8>>>().ok_or_else(bad)?
                }
                _ => return Err(bad()),
            },
        })
    }
}

/// A float fill value of `size` bytes: a number, `"NaN"`, `"Infinity"`, `"-Infinity"`, a hex bit
/// pattern (its width picks the source type, as zarr-python does) or a numeric string.
fn float_fill(v: &Value, size: usize) -> Option<Vec<u8>> {
    let x: f64 = match v {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => match s.as_str() {
            "NaN" => f64::NAN,
            "Infinity" => f64::INFINITY,
            "-Infinity" => f64::NEG_INFINITY,
            hex if hex.starts_with("0x") => {
                let digits = &hex[2..];
                let bits = u64::from_str_radix(digits, 16).ok()?;
                // The exact bits when the width matches the type: NaN payloads survive.
                match (digits.len(), size) {
                    (4, 2) => return Some((bits as u16).to_le_bytes().to_vec()),
                    (8, 4) => return Some((bits as u32).to_le_bytes().to_vec()),
                    (16, 8) => return Some(bits.to_le_bytes().to_vec()),
                    (4, _) => half::f16::from_bits(bits as u16).to_f64(),
                    (8, _) => f32::from_bits(bits as u32) as f64,
                    (16, _) => f64::from_bits(bits),
                    _ => return None,
                }
            }
            other => other.parse().ok()?,
        },
        _ => return None,
    };
    Some(match size {
        2 => half::f16::from_f64(x).to_bits().to_le_bytes().to_vec(),
        4 => (x as f32).to_le_bytes().to_vec(),
        _ => x.to_le_bytes().to_vec(),
    })
}

/// `s` as numpy's array-interface type string (`<i4`): numpy reads a dtype without its order
/// character (`i1`, as GDAL writes in a delta filter), by name (`int8`, `datetime64[ns]`) or
/// by one-character code (`b`, `d`); native order is little-endian wherever Zarr is written.
fn numpy_typestr(s: &str) -> String {
    let (order, body) = match s.chars().next() {
        Some(c @ ('<' | '>' | '|' | '=')) => (c, &s[1..]),
        _ => ('=', s),
    };
    let (name, unit) = body.find('[').map_or((body, ""), |i| body.split_at(i));
    let code = match name {
        "bool" | "?" => "b1",
        "int8" | "b" => "i1",
        "uint8" | "B" => "u1",
        "int16" | "h" => "i2",
        "uint16" | "H" => "u2",
        "int32" | "i" => "i4",
        "uint32" | "I" => "u4",
        "int64" | "l" | "q" => "i8",
        "uint64" | "L" | "Q" => "u8",
        "float16" | "e" => "f2",
        "float32" | "f" => "f4",
        "float64" | "d" => "f8",
        "complex64" | "F" => "c8",
        "complex128" | "D" => "c16",
        "datetime64" | "M" => "M8",
        "timedelta64" | "m" => "m8",
        other => other,
    };
    format!("{order}{code}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn float_fills() {
        assert_eq!(DataType::Float32.parse_fill(&json!("NaN")).unwrap(), 0x7fc00000u32.to_le_bytes());
        assert_eq!(DataType::Float32.parse_fill(&json!("0x7fc00001")).unwrap(), 0x7fc00001u32.to_le_bytes());
        assert_eq!(DataType::Float64.parse_fill(&json!("-Infinity")).unwrap(), f64::NEG_INFINITY.to_le_bytes());
        assert_eq!(DataType::Float64.parse_fill(&json!(1)).unwrap(), 1f64.to_le_bytes());
        assert_eq!(DataType::Float64.parse_fill(&json!("1.5")).unwrap(), 1.5f64.to_le_bytes());
        assert_eq!(DataType::Float16.parse_fill(&json!(1.5)).unwrap(), 0x3e00u16.to_le_bytes());
        assert_eq!(DataType::Float16.parse_fill(&json!("0x7e00")).unwrap(), 0x7e00u16.to_le_bytes());
        let c = DataType::Complex64.parse_fill(&json!(["NaN", "-Infinity"])).unwrap();
        assert_eq!(&c[..4], &0x7fc00000u32.to_le_bytes());
        assert_eq!(&c[4..], &f32::NEG_INFINITY.to_le_bytes());
    }

    #[test]
    fn other_fills() {
        assert_eq!(DataType::Int16.parse_fill(&json!(-1)).unwrap(), [0xff, 0xff]);
        assert!(DataType::Int8.parse_fill(&json!(200)).is_err());
        assert!(DataType::Int32.parse_fill(&json!("0x01")).is_err());
        assert_eq!(DataType::UInt64.parse_fill(&json!(u64::MAX)).unwrap(), [0xff; 8]);
        assert_eq!(DataType::Bool.parse_fill(&json!(true)).unwrap(), [1]);
        assert_eq!(DataType::Bool.parse_fill(&json!(0)).unwrap(), [0]);
        let nat = DataType::DateTime64("s".into());
        assert_eq!(nat.parse_fill(&json!("NaT")).unwrap(), i64::MIN.to_le_bytes());
        assert_eq!(nat.parse_fill(&json!(-9223372036854775808i64)).unwrap(), i64::MIN.to_le_bytes());
        assert_eq!(DataType::FixedUtf32(8).parse_fill(&json!("ab")).unwrap(), [b'a', 0, 0, 0, b'b', 0, 0, 0]);
        assert_eq!(DataType::NullTerminatedBytes(4).parse_fill(&json!("YWIA")).unwrap(), [b'a', b'b', 0, 0]);
        assert_eq!(DataType::RawBits(2).parse_fill(&json!([1, 2])).unwrap(), [1, 2]);
        assert_eq!(DataType::Int32.parse_fill(&Value::Null).unwrap(), [0; 4]);
    }

    #[test]
    fn v2_dtypes() {
        assert_eq!(DataType::parse_v2(&json!(">i4"), None).unwrap(), (DataType::Int32, true));
        assert_eq!(DataType::parse_v2(&json!("<U3"), None).unwrap(), (DataType::FixedUtf32(12), false));
        assert_eq!(DataType::parse_v2(&json!("<M8[ns]"), None).unwrap().0, DataType::DateTime64("ns".into()));
        assert_eq!(DataType::parse_v2(&json!("|O"), Some("vlen-utf8")).unwrap().0, DataType::String);
        assert!(DataType::parse_v2(&json!([["a", "<i4"]]), None).is_err());
        assert!(DataType::parse_v2(&json!("<q8"), None).is_err());
        // What numpy reads without an order character, by name and by code (GDAL writes `i1`).
        for (spelling, dtype) in [
            ("i1", DataType::Int8),
            ("u1", DataType::UInt8),
            ("b1", DataType::Bool),
            ("f8", DataType::Float64),
            ("int16", DataType::Int16),
            ("uint64", DataType::UInt64),
            ("float32", DataType::Float32),
            ("bool", DataType::Bool),
            ("b", DataType::Int8),
            ("<d", DataType::Float64),
            ("datetime64[s]", DataType::DateTime64("s".into())),
        ] {
            assert_eq!(DataType::parse_v2(&json!(spelling), None).unwrap(), (dtype, false), "{spelling}");
        }
        assert!(DataType::parse_v2(&json!("i3"), None).is_err());
    }

    #[test]
    fn v3_dtypes() {
        assert_eq!(DataType::parse_v3(&json!("r16")).unwrap(), DataType::RawBits(2));
        assert!(DataType::parse_v3(&json!("r12")).is_err());
        assert!(DataType::parse_v3(&json!("float128")).is_err());
        let dt = json!({"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 1}});
        assert_eq!(DataType::parse_v3(&dt).unwrap(), DataType::DateTime64("s".into()));
        assert_eq!(DataType::parse_v3(&json!("variable_length_bytes")).unwrap(), DataType::Bytes);
    }
}
