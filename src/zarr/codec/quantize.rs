//! numcodecs `quantize` (a filter over float elements): keeps `digits` decimal digits by
//! rounding to a power of two, `around(x * 2^bits) / 2^bits`, stored as `astype`; decoding
//! casts back to `dtype`. v2 filter `{"id": "quantize", "digits": 2, "dtype": "<f8"}`; v3
//! `numcodecs.quantize` (array→array). Where a value written would not read back as written, the
//! mount shows the array read-only (`lossy`).

use serde_json::{Value, json};

use super::numeric::{Num, Typed};
use super::{BytesToBytesCodec, CodecTraits};
use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct QuantizeCodec {
    digits: i64,
    dtype: Typed,
    astype: Typed,
}

impl QuantizeCodec {
    pub fn parse(config: &Value, native: Option<&Typed>) -> Result<QuantizeCodec> {
        let dtype = match (config.get("dtype"), native) {
            (Some(v), _) => Typed::parse("quantize", v)?,
            (None, Some(t)) => t.clone(),
            (None, None) => return Err(Error::metadata("quantize needs a dtype")),
        };
        let astype = config.get("astype").map(|v| Typed::parse("quantize", v)).transpose()?.unwrap_or_else(|| dtype.clone());
        if !dtype.is_float() || !astype.is_float() {
            return Err(Error::metadata("quantize supports only float types"));
        }
        let digits = config
            .get("digits")
            .and_then(Value::as_i64)
            .filter(|d| d.abs() <= 300)
            .ok_or_else(|| Error::metadata("quantize needs digits, a whole number"))?;
        Ok(QuantizeCodec { digits, dtype, astype })
    }

    pub fn encoded_type(&self) -> &Typed {
        &self.astype
    }

    /// numcodecs' `2.0 ** ceil(log2(10 ** -exp))`, `exp` the decimal exponent of `10 ** -digits`.
    fn scale(&self) -> f64 {
        let exp = 10f64.powi(-self.digits as i32).log10();
        let exp = if exp < 0.0 { exp.floor() } else { exp.ceil() };
        2f64.powf(10f64.powf(-exp).log2().ceil())
    }
}

impl CodecTraits for QuantizeCodec {
    fn name(&self) -> &'static str {
        "quantize"
    }
    fn configuration(&self) -> Value {
        json!({"digits": self.digits, "dtype": self.dtype.name(), "astype": self.astype.name()})
    }
}

impl BytesToBytesCodec for QuantizeCodec {
    fn decode(&self, bytes: Vec<u8>, _max: usize) -> Result<Vec<u8>> {
        self.dtype.map_from("quantize", &self.astype, &bytes, |x| x)
    }

    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let (p, scale) = (self.dtype.precision(), Num::F(self.scale()));
        self.astype.map_from("quantize", &self.dtype, &bytes, |x| p.div(p.around(p.mul(scale, x)), scale))
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn lossy(&self) -> Option<String> {
        Some(format!("quantize keeps {} digits: written values would not read back as written", self.digits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numcodecs_values() {
        // numcodecs.Quantize(digits=1, dtype='<f8').encode([0.1234, -5.55, 3.0]) is
        // [0.125, -5.5625, 3.0] (scale 16).
        let c = QuantizeCodec::parse(&json!({"digits": 1, "dtype": "<f8"}), None).unwrap();
        assert_eq!(c.scale(), 16.0);
        let data: Vec<u8> = [0.1234f64, -5.55, 3.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let enc: Vec<f64> = c.encode(data).unwrap().chunks(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(enc, [0.125, -5.5625, 3.0]);
        assert_eq!(QuantizeCodec::parse(&json!({"digits": 2, "dtype": "<f4"}), None).unwrap().scale(), 128.0);
        assert!(QuantizeCodec::parse(&json!({"digits": 2, "dtype": "<i4"}), None).is_err());
    }
}
