//! numcodecs `delta` (a v2 filter, run as bytes→bytes over typed elements): stores the first
//! element and then the differences, as `astype`; decoding is a running sum.
//! numcodecs `Delta`. v2 filter `{"id": "delta", "dtype": "<i4", "astype": "<i4"}`; v3
//! `numcodecs.delta` (array→array).

use serde_json::{Value, json};

use super::numeric::{Num, Typed};
use super::{BytesToBytesCodec, CodecTraits};
use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaCodec {
    dtype: Typed,
    astype: Typed,
}

impl DeltaCodec {
    /// `{"dtype": ..., "astype": ...}`; without a dtype (a v3 array→array codec), `native`.
    pub fn parse(config: &Value, native: Option<&Typed>) -> Result<DeltaCodec> {
        let dtype = match (config.get("dtype"), native) {
            (Some(v), _) => Typed::parse("delta", v)?,
            (None, Some(t)) => t.clone(),
            (None, None) => return Err(Error::metadata("delta filter needs a dtype")),
        };
        let astype = config.get("astype").map(|v| Typed::parse("delta", v)).transpose()?.unwrap_or_else(|| dtype.clone());
        if matches!(dtype.dtype, crate::zarr::dtype::DataType::Bool) {
            return Err(Error::metadata("delta filter does not support bool"));
        }
        Ok(DeltaCodec { dtype, astype })
    }

    pub fn parse_v2(config: &Value) -> Result<DeltaCodec> {
        Self::parse(config, None)
    }

    pub fn encoded_type(&self) -> &Typed {
        &self.astype
    }
}

impl CodecTraits for DeltaCodec {
    fn name(&self) -> &'static str {
        "delta"
    }
    fn configuration(&self) -> Value {
        json!({"dtype": self.dtype.name(), "astype": self.astype.name()})
    }
}

impl BytesToBytesCodec for DeltaCodec {
    /// A running sum in `dtype` (NumPy's `cumsum` into it). The output is at most 8 times the
    /// input (int8 to int64): the chain checks its bound.
    fn decode(&self, bytes: Vec<u8>, _max: usize) -> Result<Vec<u8>> {
        let p = self.dtype.precision();
        let mut sum: Option<Num> = None;
        self.dtype.map_from("delta", &self.astype, &bytes, |x| {
            let y = sum.map_or(x, |s| p.add(s, x));
            sum = Some(y);
            y
        })
    }

    /// The first element, then the differences in `dtype` (NumPy's `diff`), as `astype`.
    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let p = self.dtype.precision();
        let mut prev: Option<Num> = None;
        self.astype.map_from("delta", &self.dtype, &bytes, |x| {
            let y = prev.map_or(x, |q| p.sub(x, q));
            prev = Some(x);
            y
        })
    }

    /// Integer differences are exact (modulo 2^bits) when `astype` is at least as wide as
    /// `dtype`; narrower ones lose the high bits, and float differences round.
    fn lossy(&self) -> Option<String> {
        let (d, a) = (&self.dtype, &self.astype);
        if d.is_float() || a.is_float() {
            return Some(format!(
                "the delta filter's float differences ({} as {}) do not give back the values written",
                d.name(),
                a.name()
            ));
        }
        (a.size() < d.size())
            .then(|| format!("the delta filter stores {} as the narrower {}: written values would not come back", d.name(), a.name()))
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
