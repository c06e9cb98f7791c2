//! `.nii`: a single-file NIfTI-1 header (348 bytes and the 4-byte extension flag) with
//! `vox_offset` 4096, then the bytes of `data`; dims fastest-first, up to 7 (the NIfTI-1
//! standard). Each dim is an i16.

use super::{CARRIED_DATA_OFFSET, no_type, padded};
use crate::zarr::dtype::DataType;

pub fn header(dtype: &DataType, shape: &[u64]) -> Result<Vec<u8>, String> {
    let code: i16 = match dtype {
        DataType::Bool | DataType::UInt8 => 2,
        DataType::Int16 => 4,
        DataType::Int32 => 8,
        DataType::Float32 => 16,
        DataType::Complex64 => 32,
        DataType::Float64 => 64,
        DataType::Int8 => 256,
        DataType::UInt16 => 512,
        DataType::UInt32 => 768,
        DataType::Int64 => 1024,
        DataType::UInt64 => 1280,
        DataType::Complex128 => 1792,
        _ => return Err(no_type("NIfTI-1", dtype)),
    };
    if shape.len() > 7 {
        return Err(format!("NIfTI-1 has at most 7 dimensions, not {}", shape.len()));
    }
    if shape.iter().any(|&n| n > i16::MAX as u64) {
        return Err(format!("NIfTI-1 axes are at most {} long", i16::MAX));
    }
    let mut h = vec![0u8; 352];
    let put = |h: &mut Vec<u8>, at: usize, bytes: &[u8]| h[at..at + bytes.len()].copy_from_slice(bytes);
    put(&mut h, 0, &348i32.to_le_bytes());
    h[38] = b'r';
    let mut dim = [1i16; 8];
    dim[0] = shape.len() as i16;
    for (i, &n) in shape.iter().rev().enumerate() {
        dim[i + 1] = n as i16;
    }
    for (i, d) in dim.iter().enumerate() {
        put(&mut h, 40 + 2 * i, &d.to_le_bytes());
    }
    put(&mut h, 70, &code.to_le_bytes());
    put(&mut h, 72, &((dtype.size().unwrap_or(1) * 8) as i16).to_le_bytes());
    for i in 0..8 {
        put(&mut h, 76 + 4 * i, &1f32.to_le_bytes());
    }
    put(&mut h, 108, &(CARRIED_DATA_OFFSET as f32).to_le_bytes());
    put(&mut h, 344, b"n+1\0");
    Ok(padded(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_lists_dims_fastest_first_and_puts_the_data_at_4096() {
        let h = header(&DataType::Int16, &[4, 5, 6]).unwrap();
        assert_eq!(h.len() as u64, CARRIED_DATA_OFFSET);
        let i16_at = |at: usize| i16::from_le_bytes([h[at], h[at + 1]]);
        assert_eq!(i32::from_le_bytes(h[..4].try_into().unwrap()), 348);
        assert_eq!((0..8).map(|i| i16_at(40 + 2 * i)).collect::<Vec<_>>(), vec![3, 6, 5, 4, 1, 1, 1, 1]);
        assert_eq!((i16_at(70), i16_at(72)), (4, 16));
        assert_eq!(f32::from_le_bytes(h[108..112].try_into().unwrap()), 4096.0);
        assert_eq!(&h[344..348], b"n+1\0");
        assert!(header(&DataType::Float16, &[4]).is_err());
        assert!(header(&DataType::UInt8, &[40000]).is_err());
        assert!(header(&DataType::UInt8, &[2; 8]).is_err());
    }
}
