//! `.npy` format 1.0, padded so that the data starts at `CARRIED_DATA_OFFSET` (numpy reads any
//! header length; the NPY format 1.0).

use super::{CARRIED_DATA_OFFSET, no_type};
use crate::zarr::dtype::DataType;

pub fn header(dtype: &DataType, shape: &[u64]) -> Result<Vec<u8>, String> {
    let descr = match dtype {
        DataType::Bool => "|b1".to_string(),
        DataType::Int8 => "|i1".to_string(),
        DataType::UInt8 => "|u1".to_string(),
        DataType::Int16 => "<i2".to_string(),
        DataType::UInt16 => "<u2".to_string(),
        DataType::Int32 => "<i4".to_string(),
        DataType::UInt32 => "<u4".to_string(),
        DataType::Int64 => "<i8".to_string(),
        DataType::UInt64 => "<u8".to_string(),
        DataType::Float16 => "<f2".to_string(),
        DataType::Float32 => "<f4".to_string(),
        DataType::Float64 => "<f8".to_string(),
        DataType::Complex64 => "<c8".to_string(),
        DataType::Complex128 => "<c16".to_string(),
        DataType::DateTime64(unit) => format!("<M8[{unit}]"),
        DataType::TimeDelta64(unit) => format!("<m8[{unit}]"),
        DataType::FixedUtf32(bytes) => format!("<U{}", bytes / 4),
        DataType::NullTerminatedBytes(n) => format!("|S{n}"),
        DataType::RawBytes(n) | DataType::RawBits(n) => format!("|V{n}"),
        DataType::String | DataType::Bytes => return Err(no_type("npy", dtype)),
    };
    let dims = match shape {
        [n] => format!("({n},)"),
        _ => format!("({})", shape.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {dims}, }}");
    let header_len = CARRIED_DATA_OFFSET as usize - 10;
    if dict.len() + 1 > header_len {
        return Err("the npy header would not fit before the data".into());
    }
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header_len as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.resize(CARRIED_DATA_OFFSET as usize - 1, b' ');
    out.push(b'\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_headers_put_the_data_at_4096() {
        let h = header(&DataType::UInt16, &[128, 256, 512]).unwrap();
        assert_eq!(h.len() as u64, CARRIED_DATA_OFFSET);
        assert_eq!(&h[..8], b"\x93NUMPY\x01\x00");
        assert_eq!(u16::from_le_bytes([h[8], h[9]]) as u64, CARRIED_DATA_OFFSET - 10);
        let text = std::str::from_utf8(&h[10..]).unwrap();
        assert!(text.starts_with("{'descr': '<u2', 'fortran_order': False, 'shape': (128, 256, 512), }"), "{text}");
        assert!(text.ends_with(" \n"));
        let one = header(&DataType::Float16, &[7]).unwrap();
        assert!(std::str::from_utf8(&one[10..]).unwrap().contains("'descr': '<f2', 'fortran_order': False, 'shape': (7,)"));
        let scalar = header(&DataType::Bool, &[]).unwrap();
        assert!(std::str::from_utf8(&scalar[10..]).unwrap().contains("'descr': '|b1', 'fortran_order': False, 'shape': ()"));
        assert!(header(&DataType::String, &[3]).is_err());
    }
}
