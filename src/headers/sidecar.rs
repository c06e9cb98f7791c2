//! The sidecar headers, which name `data`: ENVI `.hdr` (GDAL opens `data` and finds it),
//! NRRD `.nhdr` and MetaImage `.mhd`. Sizes are listed fastest axis
//! first.

use super::no_type;
use crate::zarr::axes::{Axes, AxisKind, Unit};
use crate::zarr::dtype::DataType;
use crate::zarr::geo::Georeference;

/// Sizes fastest axis first, as the sidecar formats list them.
fn fastest_first(shape: &[u64]) -> String {
    shape.iter().rev().map(u64::to_string).collect::<Vec<_>>().join(" ")
}

/// ENVI, band sequential: the last axis is `samples`, the one before `lines`, any others
/// folded into `bands`.
pub fn envi(dtype: &DataType, shape: &[u64], geo: Option<&Georeference>) -> Result<Vec<u8>, String> {
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
    let mut header = format!(
        "ENVI\nsamples = {samples}\nlines = {lines}\nbands = {bands}\nheader offset = 0\nfile type = ENVI Standard\n\
         data type = {code}\ninterleave = bsq\nbyte order = 0\n"
    );
    if let Some(geo) = geo {
        header += &envi_georeference(geo, bands);
    }
    Ok(header.into_bytes())
}

/// ENVI's georeferencing: `map info` (north-up rasters: the pixel (1, 1)'s corner and the
/// pixel sizes), the CRS as `coordinate system string` (WKT, which GDAL reads), `data ignore
/// value` and `band names`.
fn envi_georeference(geo: &Georeference, bands: u64) -> String {
    let mut out = String::new();
    let t = geo.transform;
    let wkt = geo.crs.as_ref().and_then(|c| c.wkt.clone().or_else(|| (c.epsg == Some(4326)).then(|| WGS84_WKT.to_string())));
    if geo.is_north_up() {
        // The datum, and a UTM zone with its hemisphere, as ENVI names them (GDAL reads a bare
        // system as a local one).
        let (system, rest) = match geo.crs.as_ref().map(|c| (c.epsg, c.is_geographic())) {
            Some((Some(4326), _)) => ("Geographic Lat/Lon", ", WGS-84, units=Degrees".to_string()),
            Some((_, true)) => ("Geographic Lat/Lon", ", units=Degrees".to_string()),
            Some((Some(code @ 32601..=32660), _)) => ("UTM", format!(", {}, North, WGS-84, units=Meters", code - 32600)),
            Some((Some(code @ 32701..=32760), _)) => ("UTM", format!(", {}, South, WGS-84, units=Meters", code - 32700)),
            _ => ("Arbitrary", String::new()),
        };
        out += &format!("map info = {{{system}, 1, 1, {}, {}, {}, {}{rest}}}\n", t[0], t[3], t[1], -t[5]);
    }
    if let Some(wkt) = wkt {
        out += &format!("coordinate system string = {{{wkt}}}\n");
    }
    if let Some(nodata) = geo.nodata {
        out += &format!("data ignore value = {}\n", nodata.to_string().to_lowercase());
    }
    // CF packing as ENVI's per-band gain and offset (GDAL reads them as each band's scale and offset).
    if geo.packing.is_packed() && bands > 0 {
        let each = |v: f64| vec![v.to_string(); bands as usize].join(", ");
        out += &format!("data gain values = {{{}}}\n", each(geo.packing.scale.unwrap_or(1.0)));
        out += &format!("data offset values = {{{}}}\n", each(geo.packing.offset.unwrap_or(0.0)));
    }
    if geo.bands.len() as u64 == bands && bands > 0 {
        out += &format!("band names = {{{}}}\n", geo.bands.iter().map(|b| b.replace([',', '{', '}'], " ")).collect::<Vec<_>>().join(", "));
    }
    out
}

/// WGS 84 as WKT1 (EPSG:4326), for the formats that want the text.
const WGS84_WKT: &str = "GEOGCS[\"WGS 84\",DATUM[\"WGS_1984\",SPHEROID[\"WGS 84\",6378137,298.257223563,AUTHORITY[\"EPSG\",\"7030\"]],\
AUTHORITY[\"EPSG\",\"6326\"]],PRIMEM[\"Greenwich\",0,AUTHORITY[\"EPSG\",\"8901\"]],UNIT[\"degree\",0.0174532925199433,\
AUTHORITY[\"EPSG\",\"9122\"]],AXIS[\"Latitude\",NORTH],AXIS[\"Longitude\",EAST],AUTHORITY[\"EPSG\",\"4326\"]]";

/// GDAL's name of a data type, for a VRT.
fn gdal_type(dtype: &DataType) -> Option<&'static str> {
    Some(match dtype {
        DataType::Bool | DataType::UInt8 => "Byte",
        DataType::Int8 => "Int8",
        DataType::Int16 => "Int16",
        DataType::UInt16 => "UInt16",
        DataType::Int32 => "Int32",
        DataType::UInt32 => "UInt32",
        DataType::Int64 => "Int64",
        DataType::UInt64 => "UInt64",
        DataType::Float32 => "Float32",
        DataType::Float64 => "Float64",
        DataType::Complex64 => "CFloat32",
        DataType::Complex128 => "CFloat64",
        _ => return None,
    })
}

pub(crate) fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The most bands a VRT lists (each is a few hundred bytes of text).
const MOST_VRT_BANDS: u64 = 65536;

/// GDAL's VRT over `data`: one raw band per plane of the leading axes, with the raster's
/// transform, CRS, no-data value and band names.
pub fn vrt(dtype: &DataType, shape: &[u64], geo: Option<&Georeference>) -> Result<Vec<u8>, String> {
    let geo = geo.ok_or("not georeferenced (no regular coordinates, GeoZarr transform or CF grid mapping)")?;
    let kind = gdal_type(dtype).ok_or_else(|| no_type("GDAL", dtype))?;
    let n = shape.len();
    if n < 2 {
        return Err("a raster has rows and columns".into());
    }
    let (lines, samples) = (shape[n - 2], shape[n - 1]);
    let bands: u64 = shape[..n - 2].iter().product();
    if bands > MOST_VRT_BANDS {
        return Err(format!("more than {MOST_VRT_BANDS} bands"));
    }
    let item = dtype.size().unwrap_or(1) as u64;
    let t = geo.transform;
    let mut out = format!("<VRTDataset rasterXSize=\"{samples}\" rasterYSize=\"{lines}\">\n");
    if let Some(srs) = geo.crs.as_ref().and_then(|c| c.user_input()) {
        out += &format!(
            "  <SRS dataAxisToSRSAxisMapping=\"{}\">{}</SRS>\n",
            if geo.crs.as_ref().is_some_and(|c| c.is_geographic()) { "2,1" } else { "1,2" },
            xml_escape(&srs)
        );
    }
    out += &format!("  <GeoTransform>{}, {}, {}, {}, {}, {}</GeoTransform>\n", t[0], t[1], t[2], t[3], t[4], t[5]);
    for b in 0..bands {
        out += &format!("  <VRTRasterBand dataType=\"{kind}\" band=\"{}\" subClass=\"VRTRawRasterBand\">\n", b + 1);
        if let Some(name) = geo.bands.get(b as usize) {
            out += &format!("    <Description>{}</Description>\n", xml_escape(name));
        }
        if let Some(nodata) = geo.nodata {
            out += &format!("    <NoDataValue>{}</NoDataValue>\n", nodata.to_string().to_lowercase());
        }
        if let Some(units) = &geo.packing.units {
            out += &format!("    <UnitType>{}</UnitType>\n", xml_escape(units));
        }
        if geo.packing.is_packed() {
            out += &format!(
                "    <Offset>{}</Offset>\n    <Scale>{}</Scale>\n",
                geo.packing.offset.unwrap_or(0.0),
                geo.packing.scale.unwrap_or(1.0)
            );
        }
        out += &format!(
            "    <SourceFilename relativeToVRT=\"1\">data</SourceFilename>\n    <ImageOffset>{}</ImageOffset>\n    \
             <PixelOffset>{item}</PixelOffset>\n    <LineOffset>{}</LineOffset>\n    <ByteOrder>LSB</ByteOrder>\n  </VRTRasterBand>\n",
            b * lines * samples * item,
            samples * item
        );
    }
    out += "</VRTDataset>\n";
    Ok(out.into_bytes())
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
        let hdr = String::from_utf8(envi(&DataType::UInt16, &[128, 256, 512], None).unwrap()).unwrap();
        assert!(hdr.starts_with("ENVI\nsamples = 512\nlines = 256\nbands = 128\n"), "{hdr}");
        assert!(hdr.contains("data type = 12\ninterleave = bsq\nbyte order = 0\n"));
        let folded = String::from_utf8(envi(&DataType::Float32, &[2, 3, 4, 5], None).unwrap()).unwrap();
        assert!(folded.contains("samples = 5\nlines = 4\nbands = 6\n"));
        assert!(envi(&DataType::Int8, &[4, 4], None).unwrap_err().contains("int8"));
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

    #[test]
    fn georeferenced_rasters_carry_their_transform_crs_nodata_and_band_names() {
        use crate::zarr::geo::WGS84;
        let geo = Georeference {
            transform: [-1.25, 2.5, 0.0, 91.25, 0.0, -2.5],
            crs: Some(WGS84),
            nodata: Some(f64::NAN),
            bands: vec!["2013-01-01T00:00:00".into(), "2013-01-01T06:00:00".into()],
            packing: crate::zarr::geo::Packing { scale: Some(0.01), offset: Some(273.15), units: Some("K".into()) },
        };
        let hdr = String::from_utf8(envi(&DataType::Float32, &[2, 73, 144], Some(&geo)).unwrap()).unwrap();
        assert!(hdr.contains("map info = {Geographic Lat/Lon, 1, 1, -1.25, 91.25, 2.5, 2.5, WGS-84, units=Degrees}\n"), "{hdr}");
        assert!(hdr.contains("coordinate system string = {GEOGCS[\"WGS 84\""), "{hdr}");
        // A UTM zone by its EPSG code alone: named with its hemisphere and datum.
        let utm = Georeference {
            transform: [500000.0, 10.0, 0.0, 6000200.0, 0.0, -10.0],
            crs: Some(crate::zarr::geo::Crs { epsg: Some(32733), wkt: None }),
            nodata: None,
            bands: vec![],
            packing: Default::default(),
        };
        let utm_hdr = String::from_utf8(envi(&DataType::UInt8, &[5, 7], Some(&utm)).unwrap()).unwrap();
        assert!(utm_hdr.contains("map info = {UTM, 1, 1, 500000, 6000200, 10, 10, 33, South, WGS-84, units=Meters}\n"), "{utm_hdr}");
        assert!(hdr.contains("data ignore value = nan\n") && hdr.contains("band names = {2013-01-01T00:00:00, 2013-01-01T06:00:00}\n"));
        let vrt = String::from_utf8(vrt(&DataType::Float32, &[2, 73, 144], Some(&geo)).unwrap()).unwrap();
        assert!(
            vrt.starts_with("<VRTDataset rasterXSize=\"144\" rasterYSize=\"73\">\n  <SRS dataAxisToSRSAxisMapping=\"2,1\">EPSG:4326</SRS>"),
            "{vrt}"
        );
        assert!(vrt.contains("<GeoTransform>-1.25, 2.5, 0, 91.25, 0, -2.5</GeoTransform>"));
        assert!(vrt.contains("band=\"2\"") && vrt.contains(&format!("<ImageOffset>{}</ImageOffset>", 73 * 144 * 4)));
        // CF packing: each band's scale, offset and units, as GDAL reads them.
        assert!(vrt.contains("    <UnitType>K</UnitType>\n    <Offset>273.15</Offset>\n    <Scale>0.01</Scale>\n"), "{vrt}");
        assert!(hdr.contains("data gain values = {0.01, 0.01}\ndata offset values = {273.15, 273.15}\n"), "{hdr}");
        assert!(!utm_hdr.contains("gain"), "{utm_hdr}");
        assert!(super::vrt(&DataType::Float32, &[2, 73, 144], None).is_err());
    }
}
