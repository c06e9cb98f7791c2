//! numcodecs `fixedscaleoffset` (a filter over typed elements): stores `around((x - offset) *
//! scale)` as `astype`; decoding is `enc / scale + offset` cast to `dtype`, in the precision
//! NumPy computes it in. v2 filter `{"id": "fixedscaleoffset", "offset": 0, "scale": 10,
//! "dtype": "<f8", "astype": "<i2"}`; v3 `numcodecs.fixedscaleoffset` (array→array).
//! Values written would not read back as written: the mount shows the array read-only (`lossy`).

use serde_json::{Value, json};

use super::numeric::{Num, Precision, Typed};
use super::{BytesToBytesCodec, CodecTraits};
use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct FixedScaleOffsetCodec {
    dtype: Typed,
    astype: Typed,
    offset: Num,
    scale: Num,
}

impl FixedScaleOffsetCodec {
    pub fn parse(config: &Value, native: Option<&Typed>) -> Result<FixedScaleOffsetCodec> {
        const NAME: &str = "fixedscaleoffset";
        let dtype = match (config.get("dtype"), native) {
            (Some(v), _) => Typed::parse(NAME, v)?,
            (None, Some(t)) => t.clone(),
            (None, None) => return Err(Error::metadata("fixedscaleoffset needs a dtype")),
        };
        let astype = config.get("astype").map(|v| Typed::parse(NAME, v)).transpose()?.unwrap_or_else(|| dtype.clone());
        let number = |what: &str| {
            config
                .get(what)
                .ok_or_else(|| Error::metadata(format!("fixedscaleoffset needs a {what}")))
                .and_then(|v| Num::parse(NAME, what, v))
        };
        Ok(FixedScaleOffsetCodec { dtype, astype, offset: number("offset")?, scale: number("scale")? })
    }

    pub fn encoded_type(&self) -> &Typed {
        &self.astype
    }
}

impl CodecTraits for FixedScaleOffsetCodec {
    fn name(&self) -> &'static str {
        "fixedscaleoffset"
    }
    fn configuration(&self) -> Value {
        let n = |x: Num| match x {
            Num::I(i) => json!(i as i64),
            Num::F(f) => json!(f),
        };
        json!({"offset": n(self.offset), "scale": n(self.scale), "dtype": self.dtype.name(), "astype": self.astype.name()})
    }
}

impl BytesToBytesCodec for FixedScaleOffsetCodec {
    /// `enc / scale` is a float of `astype`'s precision if `astype` is a float, else f64.
    fn decode(&self, bytes: Vec<u8>, _max: usize) -> Result<Vec<u8>> {
        let p = if self.astype.is_float() { self.astype.precision() } else { Precision::F64 };
        self.dtype.map_from("fixedscaleoffset", &self.astype, &bytes, |x| p.add(p.div(x, self.scale), self.offset))
    }

    /// `(x - offset) * scale` stays an integer where `dtype`, offset and scale all are.
    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let ints = matches!((self.offset, self.scale), (Num::I(_), Num::I(_)));
        let p = match self.dtype.precision() {
            Precision::Int if !ints => Precision::F64,
            other => other,
        };
        self.astype.map_from("fixedscaleoffset", &self.dtype, &bytes, |x| p.around(p.mul(p.sub(x, self.offset), self.scale)))
    }

    /// Values are stored rounded to 1/scale (zarr-python stores them so; written through the
    /// mount they would not read back as written).
    fn elementwise(&self) -> bool {
        true
    }

    fn lossy(&self) -> Option<String> {
        Some(format!(
            "fixedscaleoffset stores values rounded to 1/{:?} as {}: written values would not read back as written",
            self.scale,
            self.astype.name()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numcodecs_values() {
        // numcodecs.FixedScaleOffset(offset=1000, scale=10, dtype='<f8', astype='<u1') on
        // [1000, 1000.11, 1025.5]: [0, 1, 255]; decoded [1000.0, 1000.1, 1025.5].
        let c = FixedScaleOffsetCodec::parse(&json!({"offset": 1000, "scale": 10, "dtype": "<f8", "astype": "|u1"}), None).unwrap();
        let data: Vec<u8> = [1000.0f64, 1000.11, 1025.5].iter().flat_map(|x| x.to_le_bytes()).collect();
        let enc = c.encode(data).unwrap();
        assert_eq!(enc, [0, 1, 255]);
        let dec: Vec<f64> = c.decode(enc, 24).unwrap().chunks(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(dec, [1000.0, 1000.1, 1025.5]);
        assert!(FixedScaleOffsetCodec::parse(&json!({"scale": 1, "dtype": "<f8"}), None).is_err());
        let native = Typed::native("t", &crate::zarr::dtype::DataType::Float32).unwrap();
        assert_eq!(FixedScaleOffsetCodec::parse(&json!({"offset": 0, "scale": 1}), Some(&native)).unwrap().encoded_type(), &native);
    }
}
