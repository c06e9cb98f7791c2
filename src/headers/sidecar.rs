//! The sidecar headers, which name `data`: ENVI `.hdr` (GDAL opens `data` and finds it),
//! NRRD `.nhdr` and MetaImage `.mhd`. Sizes are listed fastest axis
//! first.

use super::no_type;
use crate::zarr::axes::{Axes, AxisKind, Unit};
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

/// NRRD, detached: `data file: data`. Known axes add their `kinds` (`domain` for space,
/// `time`, `list` for channels), `spacings` and `units`, fastest axis first.
pub fn nrrd(dtype: &DataType, shape: &[u64], axes: &Axes) -> Result<Vec<u8>, String> {
    let (kind, _) = sidecar_types(dtype).ok_or_else(|| no_type("NRRD", dtype))?;
    let endian = if dtype.size() == Some(1) { "" } else { "endian: little\n" };
    let mut fields = String::new();
    if axes.len() == shape.len() && axes.0.iter().any(|a| a.kind != AxisKind::Other) {
        let per_axis = |f: &dyn Fn(usize) -> String| (0..shape.len()).rev().map(f).collect::<Vec<_>>().join(" ");
        fields += &format!(
            "kinds: {}\n",
            per_axis(&|i| match axes.kind(i) {
                AxisKind::Time => "time".into(),
                AxisKind::Channel => "list".into(),
                _ => "domain".into(),
            })
        );
        if axes.0.iter().any(|a| a.step.is_some()) {
            fields += &format!(
                "spacings: {}\n",
                per_axis(&|i| match (axes.kind(i), axes.0[i].step) {
                    (AxisKind::Channel, _) | (_, None) => "nan".into(),
                    (_, Some(step)) => step.to_string(),
                })
            );
        }
        if axes.0.iter().any(|a| a.unit.is_some()) {
            fields +=
                &format!("units: {}\n", per_axis(&|i| format!("\"{}\"", axes.0[i].unit.map_or_else(String::new, |u| u.ascii_symbol()))));
        }
    }
    Ok(format!(
        "NRRD0004\ntype: {kind}\ndimension: {}\nsizes: {}\n{fields}{endian}encoding: raw\ndata file: data\n",
        shape.len(),
        fastest_first(shape)
    )
    .into_bytes())
}

/// MetaImage: `ElementDataFile = data`, last as the format wants. Spatial steps go in
/// `ElementSpacing` in millimetres (ITK's unit), others as they are. A 1-D array is shown as
/// N x 1 (ITK reads images of 2 dimensions or more).
pub fn metaimage(dtype: &DataType, shape: &[u64], axes: &Axes) -> Result<Vec<u8>, String> {
    let (_, kind) = sidecar_types(dtype).ok_or_else(|| no_type("MetaImage", dtype))?;
    let mm = Unit::parse("millimeter");
    let mut spacings: Vec<String> = (0..shape.len())
        .rev()
        .map(|i| {
            let step = match (axes.kind(i), mm) {
                (AxisKind::Space, Some(mm)) => axes.step_in(i, &mm),
                _ => axes.0.get(i).and_then(|a| a.step),
            };
            step.map_or_else(|| "1".to_string(), |s| s.to_string())
        })
        .collect();
    let mut sizes = fastest_first(shape);
    if shape.len() == 1 {
        sizes += " 1";
        spacings.push("1".into());
    }
    Ok(format!(
        "ObjectType = Image\nNDims = {}\nDimSize = {sizes}\nElementType = {kind}\nElementByteOrderMSB = False\nHeaderSize = 0\n\
         ElementSpacing = {}\nElementDataFile = data\n",
        shape.len().max(2),
        spacings.join(" ")
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
        let unnamed = |n| Axes::named(None, n);
        let nhdr = String::from_utf8(nrrd(&DataType::Int16, &[3, 5], &unnamed(2)).unwrap()).unwrap();
        assert_eq!(nhdr, "NRRD0004\ntype: int16\ndimension: 2\nsizes: 5 3\nendian: little\nencoding: raw\ndata file: data\n");
        let mhd = String::from_utf8(metaimage(&DataType::Int64, &[2, 3, 4], &unnamed(3)).unwrap()).unwrap();
        assert!(mhd.contains("NDims = 3\nDimSize = 4 3 2\nElementType = MET_LONG_LONG\n"));
        assert!(mhd.ends_with("ElementDataFile = data\n"));
        assert!(nrrd(&DataType::Float16, &[4], &unnamed(1)).is_err());
        // ITK reads 2 dimensions or more: a 1-D array is N x 1.
        let line = String::from_utf8(metaimage(&DataType::UInt8, &[17], &unnamed(1)).unwrap()).unwrap();
        assert!(line.contains("NDims = 2\nDimSize = 17 1\n") && line.contains("ElementSpacing = 1 1\n"), "{line}");
    }

    #[test]
    fn known_axes_give_kinds_spacings_and_units() {
        use crate::zarr::axes::Axis;
        let names: Vec<Option<String>> = ["c", "y", "x"].iter().map(|n| Some(n.to_string())).collect();
        let mut axes = Axes::named(Some(&names), 3);
        for a in axes.0.iter_mut().skip(1) {
            *a = Axis { unit: Unit::parse("micrometer"), step: Some(0.5), ..a.clone() };
        }
        let nhdr = String::from_utf8(nrrd(&DataType::UInt16, &[2, 4, 5], &axes).unwrap()).unwrap();
        assert!(nhdr.contains("sizes: 5 4 2\nkinds: domain domain list\nspacings: 0.5 0.5 nan\nunits: \"um\" \"um\" \"\"\n"), "{nhdr}");
        let mhd = String::from_utf8(metaimage(&DataType::UInt16, &[2, 4, 5], &axes).unwrap()).unwrap();
        assert!(mhd.contains("ElementSpacing = 0.0005 0.0005 1\n"), "{mhd}");
    }
}
