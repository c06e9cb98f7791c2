//! numcodecs `delta` (a v2 filter, run as bytes→bytes over typed elements): stores the first
//! element and then the differences, as `astype`; decoding is a running sum.
//! numcodecs `Delta`. v2 filter `{"id": "delta", "dtype": "<i4", "astype": "<i4"}`; no v3 form.

use serde_json::{Value, json};

use super::{BytesToBytesCodec, CodecTraits, corrupt};
use crate::zarr::dtype::{DataType, NumericKind};
use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaCodec {
    dtype: (DataType, bool),
    astype: (DataType, bool),
    /// The JSON strings, for `info`.
    names: (String, String),
}

/// One element as a wide number, and back.
#[derive(Clone, Copy)]
enum Num {
    I(i128),
    F(f64),
}

fn read(b: &[u8], dt: &DataType, big: bool) -> Num {
    let mut le = b.to_vec();
    if big {
        le.reverse();
    }
    let mut wide = [0u8; 16];
    wide[..le.len()].copy_from_slice(&le);
    match dt.numeric_kind() {
        Some(NumericKind::Float) if le.len() == 4 => Num::F(f32::from_le_bytes([le[0], le[1], le[2], le[3]]) as f64),
        Some(NumericKind::Float) => Num::F(f64::from_le_bytes(wide[..8].try_into().unwrap_or([0; 8]))),
        Some(NumericKind::Signed) => {
            let shift = 128 - 8 * le.len() as u32;
            Num::I((i128::from_le_bytes(wide) << shift) >> shift)
        }
        _ => Num::I(i128::from_le_bytes(wide)),
    }
}

fn write(n: Num, out: &mut Vec<u8>, dt: &DataType, big: bool) {
    let size = dt.size().unwrap_or(1);
    let mut bytes = match (n, size) {
        (Num::F(f), 4) => (f as f32).to_le_bytes().to_vec(),
        (Num::F(f), _) => f.to_le_bytes().to_vec(),
        (Num::I(i), _) if dt.numeric_kind() == Some(NumericKind::Float) => write_float(i as f64, size),
        (Num::I(i), _) => i.to_le_bytes()[..size].to_vec(),
    };
    if big {
        bytes.reverse();
    }
    out.extend(bytes);
}

fn write_float(f: f64, size: usize) -> Vec<u8> {
    if size == 4 { (f as f32).to_le_bytes().to_vec() } else { f.to_le_bytes().to_vec() }
}

fn add(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::I(x), Num::I(y)) => Num::I(x.wrapping_add(y)),
        (Num::F(x), Num::F(y)) => Num::F(x + y),
        (Num::I(x), Num::F(y)) => Num::F(x as f64 + y),
        (Num::F(x), Num::I(y)) => Num::F(x + y as f64),
    }
}

fn sub(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::I(x), Num::I(y)) => Num::I(x.wrapping_sub(y)),
        (x, Num::I(y)) => add(x, Num::I(y.wrapping_neg())),
        (x, Num::F(y)) => add(x, Num::F(-y)),
    }
}

impl DeltaCodec {
    pub fn parse_v2(config: &Value) -> Result<DeltaCodec> {
        let name = config.get("dtype").and_then(Value::as_str).ok_or_else(|| Error::metadata("delta filter needs a dtype"))?;
        let asname = config.get("astype").and_then(Value::as_str).unwrap_or(name);
        let parse = |s: &str| -> Result<(DataType, bool)> {
            let t = DataType::parse_v2(&Value::String(s.to_string()), None)?;
            if t.0.numeric_kind().is_none() || matches!(t.0, DataType::Bool) {
                return Err(Error::metadata(format!("delta filter does not support dtype {s:?}")));
            }
            Ok(t)
        };
        Ok(DeltaCodec { dtype: parse(name)?, astype: parse(asname)?, names: (name.to_string(), asname.to_string()) })
    }

    /// Element-wise map from one typed buffer to another with a running state.
    fn convert(&self, bytes: &[u8], from: &(DataType, bool), to: &(DataType, bool), decode: bool) -> Result<Vec<u8>> {
        let (fs, ts) = (from.0.size().unwrap_or(1), to.0.size().unwrap_or(1));
        if !bytes.len().is_multiple_of(fs) {
            return Err(corrupt(format!("delta: {} bytes is not a whole number of {fs}-byte elements", bytes.len())));
        }
        let mut out = Vec::with_capacity(bytes.len() / fs * ts);
        let mut prev: Option<Num> = None;
        for e in bytes.chunks_exact(fs) {
            let x = read(e, &from.0, from.1);
            let y = match prev {
                None => x,
                Some(p) if decode => add(p, x),
                Some(p) => sub(x, p),
            };
            prev = Some(if decode { y } else { x });
            write(y, &mut out, &to.0, to.1);
        }
        Ok(out)
    }
}

impl CodecTraits for DeltaCodec {
    fn name(&self) -> &'static str {
        "delta"
    }
    fn configuration(&self) -> Value {
        json!({"dtype": self.names.0, "astype": self.names.1})
    }
}

impl BytesToBytesCodec for DeltaCodec {
    /// The output is at most 8 times the input (int8 to int64): the chain checks its bound.
    fn decode(&self, bytes: Vec<u8>, _max: usize) -> Result<Vec<u8>> {
        self.convert(&bytes, &self.astype, &self.dtype, true)
    }

    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        self.convert(&bytes, &self.dtype, &self.astype, false)
    }

    /// Integer differences are exact (modulo 2^bits) when `astype` is at least as wide as
    /// `dtype`; narrower ones lose the high bits, and float differences round.
    fn lossy(&self) -> Option<String> {
        let float = |t: &DataType| t.numeric_kind() == Some(NumericKind::Float);
        let (d, a) = (&self.dtype.0, &self.astype.0);
        if float(d) || float(a) {
            return Some(format!(
                "the delta filter's float differences ({} as {}) do not give back the values written",
                self.names.0, self.names.1
            ));
        }
        (a.size() < d.size()).then(|| {
            format!("the delta filter stores {} as the narrower {}: written values would not come back", self.names.0, self.names.1)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_sum() {
        let c = DeltaCodec::parse_v2(&json!({"id": "delta", "dtype": "<i4", "astype": "<i2"})).unwrap();
        let data: Vec<u8> = [10i32, 12, 9, 9, -5].iter().flat_map(|x| x.to_le_bytes()).collect();
        let enc = c.encode(data.clone()).unwrap();
        let diffs: Vec<u8> = [10i16, 2, -3, 0, -14].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(enc, diffs);
        assert_eq!(c.decode(enc, usize::MAX).unwrap(), data);
        let f = DeltaCodec::parse_v2(&json!({"dtype": ">f8"})).unwrap();
        let data: Vec<u8> = [1.5f64, 2.0, -1.0].iter().flat_map(|x| x.to_be_bytes()).collect();
        assert_eq!(f.decode(f.encode(data.clone()).unwrap(), usize::MAX).unwrap(), data);
        assert!(DeltaCodec::parse_v2(&json!({"dtype": "|S4"})).is_err());
        // What cannot be written back exactly says so.
        assert!(c.lossy().unwrap().contains("narrower"));
        assert!(f.lossy().unwrap().contains("float"));
        assert_eq!(DeltaCodec::parse_v2(&json!({"dtype": "<i2", "astype": "<i4"})).unwrap().lossy(), None);
        assert_eq!(DeltaCodec::parse_v2(&json!({"dtype": "<i4", "astype": "<u4"})).unwrap().lossy(), None);
    }
}
