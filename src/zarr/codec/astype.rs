//! numcodecs `astype` (a filter over typed elements): stores `decode_dtype` elements cast to
//! `encode_dtype` (NumPy's `astype`: integers wrap, floats truncate toward zero into integers);
//! decoding casts back. v2 filter `{"id": "astype", "encode_dtype": "<f4", "decode_dtype":
//! "<f8"}`; v3 `numcodecs.astype` (array→array). Where a value written would not read back as written, the
//! mount shows the array read-only (`lossy`).

use serde_json::{Value, json};

use super::numeric::Typed;
use super::{BytesToBytesCodec, CodecTraits};
use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsTypeCodec {
    encode_dtype: Typed,
    decode_dtype: Typed,
}

impl AsTypeCodec {
    pub fn parse(config: &Value, native: Option<&Typed>) -> Result<AsTypeCodec> {
        let encode_dtype =
            Typed::parse("astype", config.get("encode_dtype").ok_or_else(|| Error::metadata("astype needs an encode_dtype"))?)?;
        let decode_dtype = match (config.get("decode_dtype"), native) {
            (Some(v), _) => Typed::parse("astype", v)?,
            (None, Some(t)) => t.clone(),
            (None, None) => return Err(Error::metadata("astype needs a decode_dtype")),
        };
        Ok(AsTypeCodec { encode_dtype, decode_dtype })
    }

    pub fn encoded_type(&self) -> &Typed {
        &self.encode_dtype
    }
}

impl CodecTraits for AsTypeCodec {
    fn name(&self) -> &'static str {
        "astype"
    }
    fn configuration(&self) -> Value {
        json!({"encode_dtype": self.encode_dtype.name(), "decode_dtype": self.decode_dtype.name()})
    }
}

impl BytesToBytesCodec for AsTypeCodec {
    /// The output is at most 8 times the input (int8 to float64): the chain checks its bound.
    fn decode(&self, bytes: Vec<u8>, _max: usize) -> Result<Vec<u8>> {
        self.decode_dtype.map_from("astype", &self.encode_dtype, &bytes, |x| x)
    }

    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        self.encode_dtype.map_from("astype", &self.decode_dtype, &bytes, |x| x)
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn lossy(&self) -> Option<String> {
        (!self.encode_dtype.holds_all_of(&self.decode_dtype)).then(|| {
            format!(
                "astype stores {} as {}: written values would not read back as written",
                self.decode_dtype.name(),
                self.encode_dtype.name()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_casts() {
        let c = AsTypeCodec::parse(&json!({"encode_dtype": "|i1", "decode_dtype": "<f8"}), None).unwrap();
        let data: Vec<u8> = [1.9f64, -2.7, 300.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let enc = c.encode(data).unwrap();
        assert_eq!(enc, [1, 0xfe, 44]); // truncated; 300 wraps to 44 as NumPy's int cast does
        let dec: Vec<f64> = c.decode(enc, 24).unwrap().chunks(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(dec, [1.0, -2.0, 44.0]);
        assert!(AsTypeCodec::parse(&json!({"decode_dtype": "<f8"}), None).is_err());
    }
}
