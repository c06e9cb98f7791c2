//! `transpose` (array→array): a permutation of the chunk's axes.
//! Spec: zarr v3 core codecs (`transpose`). v3 `{"name": "transpose", "configuration": {"order":
//! [1, 0]}}`; a v2 `"order": "F"` becomes the transpose that reverses the axes.

use serde_json::{Value, json};

use super::{ArrayToArrayCodec, ChunkRepr, CodecTraits, corrupt};
use crate::zarr::region::{Strided, c_strides, copy_box};
use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransposeCodec {
    /// `encoded_shape[i] = shape[order[i]]`.
    pub order: Vec<usize>,
}

impl TransposeCodec {
    pub fn parse(config: &Value, ndim: usize) -> Result<TransposeCodec> {
        let raw = config
            .get("order")
            .and_then(Value::as_array)
            .ok_or_else(|| Error::metadata("transpose needs configuration.order (a permutation)"))?;
        let order: Option<Vec<usize>> = raw.iter().map(|x| x.as_u64().map(|n| n as usize)).collect();
        let order = order.ok_or_else(|| Error::metadata(format!("transpose order {raw:?} must be integers")))?;
        TransposeCodec::new(order, ndim)
    }

    pub fn new(order: Vec<usize>, ndim: usize) -> Result<TransposeCodec> {
        let mut seen = vec![false; ndim];
        if order.len() != ndim || order.iter().any(|&i| i >= ndim || std::mem::replace(&mut seen[i], true)) {
            return Err(Error::metadata(format!("transpose order {order:?} is not a permutation of {ndim} axes")));
        }
        Ok(TransposeCodec { order })
    }

    /// Move elements between the decoded C-order layout and the encoded (permuted) one.
    fn permute(&self, data: &[u8], decoded_shape: &[u64], item: usize, encode: bool) -> Result<Vec<u8>> {
        let enc_shape = self.encoded_shape(decoded_shape);
        let enc_strides = c_strides(&enc_shape);
        // Stride in the encoded buffer of each decoded axis: decoded axis order[i] is encoded axis i.
        let mut dec_axis_stride = vec![0u64; decoded_shape.len()];
        for (i, &a) in self.order.iter().enumerate() {
            dec_axis_stride[a] = enc_strides[i];
        }
        let mut out = crate::limits::zeroed(data.len())?;
        // Walk the decoded shape in C order; one side is the C-order decoded buffer, the other
        // the encoded buffer seen through permuted strides. Runs are one element long unless the
        // last decoded axis is also last in the encoding.
        let dec_view = Strided { offset: 0, strides: c_strides(decoded_shape) };
        let enc_view = Strided { offset: 0, strides: dec_axis_stride };
        let (src_view, dst_view) = if encode { (&dec_view, &enc_view) } else { (&enc_view, &dec_view) };
        copy_elements(data, src_view, &mut out, dst_view, decoded_shape, item);
        Ok(out)
    }
}

/// Element-wise strided copy that does not assume unit innermost strides.
fn copy_elements(src: &[u8], sv: &Strided, dst: &mut [u8], dv: &Strided, extent: &[u64], item: usize) {
    if sv.strides.last() == Some(&1) && dv.strides.last() == Some(&1) {
        copy_box(src, sv, dst, dv, extent, item);
        return;
    }
    if extent.contains(&0) {
        return;
    }
    let n = extent.len();
    let mut idx = vec![0u64; n];
    loop {
        let s = idx.iter().zip(&sv.strides).map(|(i, st)| i * st).sum::<u64>() as usize * item;
        let d = idx.iter().zip(&dv.strides).map(|(i, st)| i * st).sum::<u64>() as usize * item;
        dst[d..d + item].copy_from_slice(&src[s..s + item]);
        let mut k = n;
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < extent[k] {
                break;
            }
            idx[k] = 0;
        }
    }
}

impl CodecTraits for TransposeCodec {
    fn name(&self) -> &'static str {
        "transpose"
    }
    fn configuration(&self) -> Value {
        json!({"order": self.order})
    }
}

impl ArrayToArrayCodec for TransposeCodec {
    fn encoded_shape(&self, shape: &[u64]) -> Vec<u64> {
        self.order.iter().map(|&a| shape[a]).collect()
    }

    fn decode(&self, encoded: Vec<u8>, decoded: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        if encoded.len() != decoded.byte_len() {
            return Err(corrupt(format!("transpose got {} bytes, expected {}", encoded.len(), decoded.byte_len())));
        }
        let item = decoded.dtype.size().unwrap_or(1);
        self.permute(&encoded, &decoded.shape, item, false)
    }

    fn encode(&self, decoded: Vec<u8>, repr: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        let item = repr.dtype.size().unwrap_or(1);
        self.permute(&decoded, &repr.shape, item, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::dtype::DataType;

    #[test]
    fn transpose_matches_the_spec_example() {
        // chunk [[0,1,2],[4,5,6]] with order [1,0] is stored 0 4 1 5 2 6.
        let t = TransposeCodec::parse(&json!({"order": [1, 0]}), 2).unwrap();
        let dt = DataType::UInt8;
        let repr = ChunkRepr { shape: vec![2, 3], dtype: &dt, fill: (&[0]).into() };
        let enc = t.encode(vec![0, 1, 2, 4, 5, 6], &repr).unwrap();
        assert_eq!(enc, [0, 4, 1, 5, 2, 6]);
        assert_eq!(t.decode(enc, &repr).unwrap(), [0, 1, 2, 4, 5, 6]);
        assert!(TransposeCodec::parse(&json!({"order": [0, 0]}), 2).is_err());
    }

    #[test]
    fn transpose_3d_round_trip() {
        let t = TransposeCodec::new(vec![2, 0, 1], 3).unwrap();
        let dt = DataType::UInt16;
        let repr = ChunkRepr { shape: vec![2, 3, 4], dtype: &dt, fill: (&[0, 0]).into() };
        let data: Vec<u8> = (0..48).collect();
        let enc = t.encode(data.clone(), &repr).unwrap();
        // Encoded shape [4,2,3]: encoded[k][i][j] = decoded[i][j][k].
        let at = |buf: &[u8], off: usize| u16::from_le_bytes([buf[2 * off], buf[2 * off + 1]]);
        assert_eq!(at(&enc, 6 + 3 + 2), at(&data, 12 + 2 * 4 + 1));
        assert_eq!(t.decode(enc, &repr).unwrap(), data);
    }
}
