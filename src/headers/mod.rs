//! Headers that let legacy tools open an array's flat file by themselves (docs/views.md):
//! views that carry the bytes of `data` after a 4096-byte header — `.npy`, `.tif` (whose page
//! directories follow the data) and `.nii` — and the sidecars ENVI `.hdr`, NRRD `.raw.nhdr` and
//! MetaImage `.mhd`, which name `data`. Each is a pure function of the data type, the shape and
//! what is known of the axes; a format that cannot express an array says why. Beside them, the
//! OME-TIFF of an OME-NGFF image group (`ometiff`). It knows nothing of files or mounts.

mod ifd;
pub mod netcdf;
mod nifti;
mod npy;
pub mod ometiff;
mod sidecar;
mod tiff;

use crate::zarr::axes::Axes;
use crate::zarr::dtype::DataType;
use crate::zarr::geo::Georeference;

/// The bytes of `data` start at this offset in a view that carries them: the view's pages
/// line up with those of `data`, and growth leaves the header's length alone.
pub const CARRIED_DATA_OFFSET: u64 = 4096;

/// The largest integer a double holds exactly, with every one below it: 2^53.
pub const MOST_EXACT_DOUBLE: i64 = 1 << 53;

/// How an array's elements (little-endian, as `data` holds them) become a group view's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    /// Copied as they are.
    Copied,
    /// Each element of this many bytes reversed (big-endian).
    Swapped(usize),
    /// An int64 as a big-endian 32-bit int (netCDF classic has no int64); `missing` (the fill
    /// that marks missing values) becomes `fill`.
    Int64AsInt { missing: Option<i64>, fill: i32 },
    /// An int64 as a big-endian double.
    Int64AsDouble,
}

impl Element {
    /// Bytes of one element in `data`.
    pub fn source_size(self) -> usize {
        match self {
            Element::Copied => 1,
            Element::Swapped(size) => size.max(1),
            Element::Int64AsInt { .. } | Element::Int64AsDouble => 8,
        }
    }

    /// Bytes of one element in the view.
    pub fn view_size(self) -> usize {
        match self {
            Element::Int64AsInt { .. } => 4,
            e => e.source_size(),
        }
    }

    /// Whole elements of `data` as the view has them; `Err(value)` for an int64 the view's type
    /// cannot hold exactly (written since the view was laid out).
    pub fn encode(self, mut data: Vec<u8>) -> std::result::Result<Vec<u8>, i64> {
        fn int64s(data: &[u8]) -> impl Iterator<Item = i64> + '_ {
            data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or_default()))
        }
        let mut out = Vec::with_capacity(data.len());
        match self {
            Element::Copied | Element::Swapped(1) => return Ok(data),
            Element::Swapped(size) => {
                swap_elements(&mut data, size);
                return Ok(data);
            }
            Element::Int64AsInt { missing, fill } => {
                for v in int64s(&data) {
                    let v = if Some(v) == missing { fill } else { i32::try_from(v).map_err(|_| v)? };
                    out.extend_from_slice(&v.to_be_bytes());
                }
            }
            Element::Int64AsDouble => {
                for v in int64s(&data) {
                    if !(-MOST_EXACT_DOUBLE..=MOST_EXACT_DOUBLE).contains(&v) {
                        return Err(v);
                    }
                    out.extend_from_slice(&(v as f64).to_be_bytes());
                }
            }
        }
        Ok(out)
    }
}

/// Reverse the bytes of each element of `size` bytes (as whole words, which compile to
/// vector byte swaps).
fn swap_elements(bytes: &mut [u8], size: usize) {
    macro_rules! words {
        ($t:ty) => {
            for c in bytes.chunks_exact_mut(size) {
                let v = <$t>::from_ne_bytes(c.try_into().unwrap_or_default()).swap_bytes();
                c.copy_from_slice(&v.to_ne_bytes());
            }
        };
    }
    match size {
        2 => words!(u16),
        4 => words!(u32),
        8 => words!(u64),
        _ => bytes.chunks_exact_mut(size).for_each(<[u8]>::reverse),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeaderFormat {
    Npy,
    Tiff,
    Nifti,
    Envi,
    Nrrd,
    MetaImage,
    /// GDAL's VRT of a georeferenced raster.
    Vrt,
}

/// A view's own bytes: the header, and (TIFF) what follows the array's bytes.
#[derive(Debug)]
pub struct Layout {
    pub header: Vec<u8>,
    trailer: Option<tiff::Directories>,
}

impl Layout {
    pub fn trailer_len(&self) -> u64 {
        self.trailer.as_ref().map_or(0, tiff::Directories::len)
    }

    /// Bytes `from..to` of the trailer (offsets within it).
    pub fn trailer_bytes(&self, from: u64, to: u64) -> Vec<u8> {
        self.trailer.as_ref().map_or_else(Vec::new, |t| t.bytes(from, to.min(t.len())))
    }
}

impl HeaderFormat {
    pub const ALL: [HeaderFormat; 7] = [
        HeaderFormat::Npy,
        HeaderFormat::Tiff,
        HeaderFormat::Nifti,
        HeaderFormat::Envi,
        HeaderFormat::Nrrd,
        HeaderFormat::MetaImage,
        HeaderFormat::Vrt,
    ];

    /// The view's name beside `data`.
    pub fn file_name(self) -> &'static str {
        match self {
            HeaderFormat::Npy => "data.npy",
            HeaderFormat::Tiff => "data.tif",
            HeaderFormat::Nifti => "data.nii",
            HeaderFormat::Envi => "data.hdr",
            // Not `data.nhdr`: Bio-Formats takes any `data.*` beside a `data.nhdr` for NRRD.
            HeaderFormat::Nrrd => "data.raw.nhdr",
            HeaderFormat::MetaImage => "data.mhd",
            HeaderFormat::Vrt => "data.vrt",
        }
    }

    /// Its name in `--views` and `-o views=`.
    pub fn option_name(self) -> &'static str {
        match self {
            HeaderFormat::Npy => "npy",
            HeaderFormat::Tiff => "tiff",
            HeaderFormat::Nifti => "nifti",
            HeaderFormat::Envi => "envi",
            HeaderFormat::Nrrd => "nrrd",
            HeaderFormat::MetaImage => "mhd",
            HeaderFormat::Vrt => "vrt",
        }
    }

    pub fn by_file_name(name: &str) -> Option<HeaderFormat> {
        HeaderFormat::ALL.into_iter().find(|f| f.file_name() == name)
    }

    /// Whether the array's bytes follow the header in the view itself (else it names `data`).
    pub fn carries_data(self) -> bool {
        matches!(self, HeaderFormat::Npy | HeaderFormat::Tiff | HeaderFormat::Nifti)
    }

    /// The view's own bytes for an array of `dtype` and `shape` (C order, little-endian) with
    /// `axes`, georeferenced by `geo` where it is, or why this format cannot show it.
    pub fn layout(self, dtype: &DataType, shape: &[u64], axes: &Axes, geo: Option<&Georeference>) -> Result<Layout, String> {
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
        // A view that carries the data is longer than it: it must still be a file size.
        let data = shape.iter().try_fold(dtype.size().unwrap_or(1) as u128, |n, &d| n.checked_mul(u128::from(d)));
        if self.carries_data() && data.is_none_or(|n| n + CARRIED_DATA_OFFSET as u128 > i64::MAX as u128) {
            return Err("the view would pass 2^63 bytes".into());
        }
        let header = |bytes: Result<Vec<u8>, String>| bytes.map(|header| Layout { header, trailer: None });
        match self {
            HeaderFormat::Npy => header(npy::header(dtype, shape)),
            HeaderFormat::Tiff => tiff::layout(dtype, shape, axes, geo),
            HeaderFormat::Nifti => header(nifti::header(dtype, shape, axes)),
            HeaderFormat::Envi => header(sidecar::envi(dtype, shape, geo)),
            HeaderFormat::Nrrd => header(sidecar::nrrd(dtype, shape, axes)),
            HeaderFormat::MetaImage => header(sidecar::metaimage(dtype, shape, axes)),
            HeaderFormat::Vrt => header(sidecar::vrt(dtype, shape, geo)),
        }
    }
}

/// The views a group shows, made from its attributes and its arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupView {
    /// `image.ome.tif` of an OME-NGFF image.
    OmeTiff,
    /// `dataset.nc` of a group of arrays with named axes (an xarray dataset).
    NetCdf,
}

impl GroupView {
    pub const ALL: [GroupView; 2] = [GroupView::OmeTiff, GroupView::NetCdf];

    pub fn file_name(self) -> &'static str {
        match self {
            GroupView::OmeTiff => "image.ome.tif",
            GroupView::NetCdf => "dataset.nc",
        }
    }

    pub fn option_name(self) -> &'static str {
        match self {
            GroupView::OmeTiff => "ome",
            GroupView::NetCdf => "nc",
        }
    }

    pub fn by_file_name(name: &str) -> Option<GroupView> {
        GroupView::ALL.into_iter().find(|v| v.file_name() == name)
    }
}

/// Which views a mount shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Views {
    pub arrays: Vec<HeaderFormat>,
    pub groups: Vec<GroupView>,
}

impl Views {
    pub fn all() -> Views {
        Views { arrays: HeaderFormat::ALL.to_vec(), groups: GroupView::ALL.to_vec() }
    }

    /// A list of views: `all`, `none`, or names joined with `,` (`--views`) or `:` / `+` (in
    /// `-o views=`, where commas separate mount options).
    pub fn parse(list: &str) -> Result<Views, String> {
        match list {
            "all" => return Ok(Views::all()),
            "none" | "" => return Ok(Views { arrays: Vec::new(), groups: Vec::new() }),
            _ => {}
        }
        let mut views = Views { arrays: Vec::new(), groups: Vec::new() };
        for name in list.split([',', ':', '+']) {
            if let Some(f) = HeaderFormat::ALL.into_iter().find(|f| f.option_name() == name) {
                views.arrays.push(f);
            } else if let Some(g) = GroupView::ALL.into_iter().find(|g| g.option_name() == name) {
                views.groups.push(g);
            } else {
                return Err(format!("views: unknown view {name:?} (npy, tiff, nifti, envi, nrrd, mhd, vrt, ome, nc; all or none)"));
            }
        }
        Ok(views)
    }
}

fn no_type(format: &str, dtype: &DataType) -> String {
    format!("{format} has no type for {}", dtype.name())
}

/// A header padded with zeros to `CARRIED_DATA_OFFSET`.
fn padded(mut header: Vec<u8>) -> Vec<u8> {
    header.resize(CARRIED_DATA_OFFSET as usize, 0);
    header
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_lists_parse() {
        assert_eq!(Views::parse("npy:nrrd").unwrap().arrays, vec![HeaderFormat::Npy, HeaderFormat::Nrrd]);
        let v = Views::parse("tiff,nifti,ome").unwrap();
        assert_eq!((v.arrays, v.groups), (vec![HeaderFormat::Tiff, HeaderFormat::Nifti], vec![GroupView::OmeTiff]));
        assert_eq!(Views::parse("all").unwrap(), Views::all());
        assert_eq!(Views::parse("vrt,nc").unwrap(), Views { arrays: vec![HeaderFormat::Vrt], groups: vec![GroupView::NetCdf] });
        assert!(Views::parse("none").unwrap().arrays.is_empty());
        assert!(Views::parse("png").is_err());
    }

    #[test]
    fn only_npy_shows_0_d_arrays_and_none_shows_empty_axes_or_text() {
        let none = |n| Axes::named(None, n);
        assert!(HeaderFormat::Npy.layout(&DataType::UInt8, &[], &none(0), None).is_ok());
        for f in HeaderFormat::ALL.into_iter().filter(|&f| f != HeaderFormat::Npy) {
            assert!(f.layout(&DataType::UInt8, &[], &none(0), None).is_err(), "{f:?}");
            assert!(f.layout(&DataType::UInt8, &[0, 4], &none(2), None).is_err(), "{f:?}");
        }
        assert!(HeaderFormat::ALL.iter().all(|f| f.layout(&DataType::String, &[3], &none(1), None).is_err()));
        // Data of 2^63 - 2 bytes fits a file; with a 4096-byte header in front it would not.
        assert!(HeaderFormat::Npy.layout(&DataType::UInt8, &[2, (1 << 62) - 1], &none(2), None).unwrap_err().contains("2^63"));
        assert!(HeaderFormat::Nrrd.layout(&DataType::UInt8, &[2, (1 << 62) - 1], &none(2), None).is_ok());
    }
}
