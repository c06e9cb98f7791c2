//! The sidecar headers, which name `data`: ENVI `.hdr` (GDAL opens `data` and finds it),
//! NRRD `.nhdr` and MetaImage `.mhd`. Sizes are listed fastest axis
//! first.

use super::no_type;
use crate::zarr::dtype::DataType;

/// Sizes fastest axis first, as the sidecar formats list them.
fn fastest_first(shape: &[u64]) -> String {
    shape.iter().rev().map(u64::to_string).collect::<Vec<_>>().join(" ")
}

/// ENVI, band sequential: the last axis is `samples`, the one before `lines`, any others
/// folded into `bands`.
pub fn envi(dtype: &DataType, shape: &[u64]) -> Result<Vec<u8>, String> {
    let code = match dtype {
        DataType::UInt8 | DataType::Bool => 1,
        DataType::Int16 => 2,
        DataType::Int32 => 3,
        DataType::Float32 => 4,
        DataType::Float64 => 5,
        DataType::Complex64 => 6,
        DataType::Complex128 => 9,
        DataType::UInt16 => 12,
        DataType::UInt32 => 13,
        DataType::Int64 => 14,
        DataType::UInt64 => 15,
        _ => return Err(no_type("ENVI", dtype)),
    };
    let n = shape.len();
    let samples = shape[n - 1];
    let lines = if n >= 2 { shape[n - 2] } else { 1 };
    let bands: u64 = shape[..n.saturating_sub(2)].iter().product();
    let item = dtype.size().unwrap_or(1) as u64;
    let int_max = i32::MAX as u64;
    if samples > int_max || lines > int_max || bands > int_max || samples.saturating_mul(item).saturating_mul(bands) > int_max {
        return Err(format!("ENVI (GDAL) takes at most {int_max} samples, lines and bands, and a line of all bands under 2 GiB"));
    }
    Ok(format!(
        "ENVI\nsamples = {samples}\nlines = {lines}\nbands = {bands}\nheader offset = 0\nfile type = ENVI Standard\n\
         data type = {code}\ninterleave = bsq\nbyte order = 0\n"
    )
    .into_bytes())
}

/// The NRRD and MetaImage names of a type: both have the integers and float32/64, no float16
/// or complex; bool shows as uint8.
fn sidecar_types(dtype: &DataType) -> Option<(&'static str, &'static str)> {
    Some(match dtype {
        DataType::Int8 => ("int8", "MET_CHAR"),
        DataType::UInt8 | DataType::Bool => ("uint8", "MET_UCHAR"),
        DataType::Int16 => ("int16", "MET_SHORT"),
        DataType::UInt16 => ("uint16", "MET_USHORT"),
        DataType::Int32 => ("int32", "MET_INT"),
        DataType::UInt32 => ("uint32", "MET_UINT"),
        DataType::Int64 => ("int64", "MET_LONG_LONG"),
        DataType::UInt64 => ("uint64", "MET_ULONG_LONG"),
        DataType::Float32 => ("float", "MET_FLOAT"),
        DataType::Float64 => ("double", "MET_DOUBLE"),
        _ => return None,
    })
}

/// NRRD, detached: `data file: data`.
pub fn nrrd(dtype: &DataType, shape: &[u64]) -> Result<Vec<u8>, String> {
    let (kind, _) = sidecar_types(dtype).ok_or_else(|| no_type("NRRD", dtype))?;
    let endian = if dtype.size() == Some(1) { "" } else { "endian: little\n" };
    Ok(format!(
        "NRRD0004\ntype: {kind}\ndimension: {}\nsizes: {}\n{endian}encoding: raw\ndata file: data\n",
        shape.len(),
        fastest_first(shape)
    )
    .into_bytes())
}

/// MetaImage: `ElementDataFile = data`, last as the format wants.
pub fn metaimage(dtype: &DataType, shape: &[u64]) -> Result<Vec<u8>, String> {
    let (_, kind) = sidecar_types(dtype).ok_or_else(|| no_type("MetaImage", dtype))?;
    let ones = vec!["1"; shape.len()].join(" ");
    Ok(format!(
        "ObjectType = Image\nNDims = {}\nDimSize = {}\nElementType = {kind}\nElementByteOrderMSB = False\nHeaderSize = 0\n\
         ElementSpacing = {ones}\nElementDataFile = data\n",
        shape.len(),
        fastest_first(shape)
    )
    .into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecars_list_sizes_fastest_first_and_refuse_what_they_cannot_express() {
        let hdr = String::from_utf8(envi(&DataType::UInt16, &[128, 256, 512]).unwrap()).unwrap();
        assert!(hdr.starts_with("ENVI\nsamples = 512\nlines = 256\nbands = 128\n"), "{hdr}");
        assert!(hdr.contains("data type = 12\ninterleave = bsq\nbyte order = 0\n"));
        let folded = String::from_utf8(envi(&DataType::Float32, &[2, 3, 4, 5]).unwrap()).unwrap();
        assert!(folded.contains("samples = 5\nlines = 4\nbands = 6\n"));
        assert!(envi(&DataType::Int8, &[4, 4]).unwrap_err().contains("int8"));
        let nhdr = String::from_utf8(nrrd(&DataType::Int16, &[3, 5]).unwrap()).unwrap();
        assert_eq!(nhdr, "NRRD0004\ntype: int16\ndimension: 2\nsizes: 5 3\nendian: little\nencoding: raw\ndata file: data\n");
        let mhd = String::from_utf8(metaimage(&DataType::Int64, &[2, 3, 4]).unwrap()).unwrap();
        assert!(mhd.contains("NDims = 3\nDimSize = 4 3 2\nElementType = MET_LONG_LONG\n"));
        assert!(mhd.ends_with("ElementDataFile = data\n"));
        assert!(nrrd(&DataType::Float16, &[4]).is_err());
    }
}
