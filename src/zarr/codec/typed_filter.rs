//! numcodecs' filters in v3 documents (`numcodecs.delta`, `numcodecs.fixedscaleoffset`, …) and
//! `scale_offset`: array→array codecs that zarr-python runs on the chunk in the machine's byte
//! order, before `bytes`. The element transforms are the ones v2 runs as filters after the bytes
//! (the same files, `BytesToBytesCodec`s over typed elements); this gives them the chunk's
//! shape and the data type they produce.

use serde_json::Value;

use super::{ArrayToArrayCodec, BytesToBytesCodec, ChunkRepr, CodecTraits, corrupt};
use crate::Result;
use crate::zarr::dtype::DataType;

#[derive(Debug)]
pub struct TypedFilter {
    pub transform: Box<dyn BytesToBytesCodec>,
    /// The data type of the encoded chunk, where it is not the decoded one.
    pub encoded: Option<DataType>,
    /// `packbits`: the chunk becomes one row of bytes.
    pub packs_bits: bool,
}

impl CodecTraits for TypedFilter {
    fn name(&self) -> &'static str {
        self.transform.name()
    }
    fn configuration(&self) -> Value {
        self.transform.configuration()
    }
}

impl ArrayToArrayCodec for TypedFilter {
    fn encoded_shape(&self, shape: &[u64]) -> Vec<u64> {
        if self.packs_bits { vec![super::PackBitsCodec::packed_len(shape.iter().product())] } else { shape.to_vec() }
    }

    fn encoded_dtype(&self) -> Option<&DataType> {
        self.encoded.as_ref()
    }

    /// Element-wise transforms encode the fill as one element; packed bits of fill are zero.
    fn encoded_fill(&self, fill: &[u8]) -> Vec<u8> {
        let size = self.encoded.as_ref().and_then(DataType::size).unwrap_or(fill.len());
        match self.transform.encode(fill.to_vec()) {
            Ok(one) if one.len() == size && !self.packs_bits => one,
            _ => vec![0; size],
        }
    }

    fn decode(&self, encoded: Vec<u8>, decoded: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        let out = self.transform.decode(encoded, decoded.byte_len())?;
        if out.len() != decoded.byte_len() {
            return Err(corrupt(format!("{}: {} bytes where the chunk needs {}", self.name(), out.len(), decoded.byte_len())));
        }
        Ok(out)
    }

    fn encode(&self, decoded: Vec<u8>, _repr: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        self.transform.encode(decoded)
    }

    fn lossy(&self) -> Option<String> {
        self.transform.lossy()
    }

    fn elementwise(&self) -> bool {
        !self.packs_bits && self.transform.elementwise()
    }
}
