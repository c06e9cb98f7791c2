//! Headers that let legacy tools open an array's flat file by themselves (legacy-headers.md):
//! `.npy` (the header, then the bytes of `data`), and the sidecars ENVI `.hdr`, NRRD `.nhdr`
//! and MetaImage `.mhd`, which name `data`. Each is a pure function of the data type and
//! shape; a format that cannot express an array says why. It knows nothing of files or mounts.

use crate::zarr::dtype::DataType;

/// The bytes of `data` start at this offset in a view that carries them (`.npy`): the view's
/// pages line up with those of `data`.
pub const CARRIED_DATA_OFFSET: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeaderFormat {
    Npy,
    Envi,
    Nrrd,
    MetaImage,
}

impl HeaderFormat {
    pub const ALL: [HeaderFormat; 4] = [HeaderFormat::Npy, HeaderFormat::Envi, HeaderFormat::Nrrd, HeaderFormat::MetaImage];

    /// The view's name beside `data`.
    pub fn file_name(self) -> &'static str {
        match self {
            HeaderFormat::Npy => "data.npy",
            HeaderFormat::Envi => "data.hdr",
            HeaderFormat::Nrrd => "data.nhdr",
            HeaderFormat::MetaImage => "data.mhd",
        }
    }

    /// Its name in `-o views=`.
    pub fn option_name(self) -> &'static str {
        match self {
            HeaderFormat::Npy => "npy",
            HeaderFormat::Envi => "envi",
            HeaderFormat::Nrrd => "nrrd",
            HeaderFormat::MetaImage => "mhd",
        }
    }

    pub fn by_file_name(name: &str) -> Option<HeaderFormat> {
        HeaderFormat::ALL.into_iter().find(|f| f.file_name() == name)
    }

    /// A list of views: `all`, `none`, or names joined with `,` (`--views`) or `:` / `+` (in
    /// `-o views=`, where commas separate mount options).
    pub fn parse_list(list: &str) -> Result<Vec<HeaderFormat>, String> {
        match list {
            "all" => return Ok(HeaderFormat::ALL.to_vec()),
            "none" | "" => return Ok(Vec::new()),
            _ => {}
        }
        list.split([',', ':', '+'])
            .map(|name| {
                HeaderFormat::ALL
                    .into_iter()
                    .find(|f| f.option_name() == name)
                    .ok_or_else(|| format!("views: unknown view {name:?} (npy, envi, nrrd, mhd; all or none)"))
            })
            .collect()
    }

    /// Whether the array's bytes follow the header in the view itself (else it names `data`).
    pub fn carries_data(self) -> bool {
        self == HeaderFormat::Npy
    }

    /// The header for an array of `dtype` and `shape` (C order, little-endian), or why this
    /// format cannot show it.
    pub fn header(self, dtype: &DataType, shape: &[u64]) -> Result<Vec<u8>, String> {
        if dtype.is_variable() {
            return Err("variable-length elements have no fixed size".into());
        }
        if self != HeaderFormat::Npy {
            if shape.is_empty() {
                return Err("a 0-d array has no axes to describe".into());
            }
            if shape.contains(&0) {
                return Err("an axis of length 0".into());
            }
        }
        match self {
            HeaderFormat::Npy => npy(dtype, shape),
            HeaderFormat::Envi => envi(dtype, shape),
            HeaderFormat::Nrrd => nrrd(dtype, shape),
            HeaderFormat::MetaImage => metaimage(dtype, shape),
        }
    }
}

fn no_type(format: &str, dtype: &DataType) -> String {
    format!("{format} has no type for {}", dtype.name())
}

/// Sizes fastest axis first, as the sidecar formats list them.
fn fastest_first(shape: &[u64]) -> String {
    shape.iter().rev().map(u64::to_string).collect::<Vec<_>>().join(" ")
}

/// npy format 1.0, padded so that the data starts at `CARRIED_DATA_OFFSET`.
fn npy(dtype: &DataType, shape: &[u64]) -> Result<Vec<u8>, String> {
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
    let header_len = CARRIED_DATA_OFFSET - 10;
    if dict.len() + 1 > header_len {
        return Err("the npy header would not fit before the data".into());
    }
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header_len as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.resize(CARRIED_DATA_OFFSET - 1, b' ');
    out.push(b'\n');
    Ok(out)
}

/// ENVI, band sequential: the last axis is `samples`, the one before `lines`, any others
/// folded into `bands`.
fn envi(dtype: &DataType, shape: &[u64]) -> Result<Vec<u8>, String> {
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
fn nrrd(dtype: &DataType, shape: &[u64]) -> Result<Vec<u8>, String> {
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
fn metaimage(dtype: &DataType, shape: &[u64]) -> Result<Vec<u8>, String> {
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
    fn npy_headers_put_the_data_at_4096() {
        let h = HeaderFormat::Npy.header(&DataType::UInt16, &[128, 256, 512]).unwrap();
        assert_eq!(h.len(), CARRIED_DATA_OFFSET);
        assert_eq!(&h[..8], b"\x93NUMPY\x01\x00");
        assert_eq!(u16::from_le_bytes([h[8], h[9]]) as usize, CARRIED_DATA_OFFSET - 10);
        let text = std::str::from_utf8(&h[10..]).unwrap();
        assert!(text.starts_with("{'descr': '<u2', 'fortran_order': False, 'shape': (128, 256, 512), }"), "{text}");
        assert!(text.ends_with(" \n"));
        let one = HeaderFormat::Npy.header(&DataType::Float16, &[7]).unwrap();
        assert!(std::str::from_utf8(&one[10..]).unwrap().contains("'descr': '<f2', 'fortran_order': False, 'shape': (7,)"));
        let scalar = HeaderFormat::Npy.header(&DataType::Bool, &[]).unwrap();
        assert!(std::str::from_utf8(&scalar[10..]).unwrap().contains("'descr': '|b1', 'fortran_order': False, 'shape': ()"));
        assert!(HeaderFormat::Npy.header(&DataType::String, &[3]).is_err());
    }

    #[test]
    fn sidecars_list_sizes_fastest_first_and_refuse_what_they_cannot_express() {
        let envi = String::from_utf8(HeaderFormat::Envi.header(&DataType::UInt16, &[128, 256, 512]).unwrap()).unwrap();
        assert!(envi.starts_with("ENVI\nsamples = 512\nlines = 256\nbands = 128\n"), "{envi}");
        assert!(envi.contains("data type = 12\ninterleave = bsq\nbyte order = 0\n"));
        let folded = String::from_utf8(HeaderFormat::Envi.header(&DataType::Float32, &[2, 3, 4, 5]).unwrap()).unwrap();
        assert!(folded.contains("samples = 5\nlines = 4\nbands = 6\n"));
        assert!(HeaderFormat::Envi.header(&DataType::Int8, &[4, 4]).unwrap_err().contains("int8"));
        let nrrd = String::from_utf8(HeaderFormat::Nrrd.header(&DataType::Int16, &[3, 5]).unwrap()).unwrap();
        assert_eq!(nrrd, "NRRD0004\ntype: int16\ndimension: 2\nsizes: 5 3\nendian: little\nencoding: raw\ndata file: data\n");
        let mhd = String::from_utf8(HeaderFormat::MetaImage.header(&DataType::Int64, &[2, 3, 4]).unwrap()).unwrap();
        assert!(mhd.contains("NDims = 3\nDimSize = 4 3 2\nElementType = MET_LONG_LONG\n"));
        assert!(mhd.ends_with("ElementDataFile = data\n"));
        assert!(HeaderFormat::Nrrd.header(&DataType::Float16, &[4]).is_err());
        assert!(HeaderFormat::MetaImage.header(&DataType::UInt8, &[]).is_err());
        assert!(HeaderFormat::Envi.header(&DataType::UInt8, &[0, 4]).is_err());
        assert_eq!(HeaderFormat::parse_list("npy:nrrd").unwrap(), vec![HeaderFormat::Npy, HeaderFormat::Nrrd]);
        assert_eq!(HeaderFormat::parse_list("all").unwrap().len(), 4);
        assert!(HeaderFormat::parse_list("tiff").is_err());
    }
}
