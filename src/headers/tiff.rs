//! `.tif` over the bytes of `data` (TIFF 6.0, BigTIFF past 4 GiB): the 8- or 16-byte TIFF
//! header padded to `CARRIED_DATA_OFFSET`, the data, then one page directory per 2-D plane,
//! each with one uncompressed strip pointing into the data. Growth moves only the directories.
//!
//! Which planes are pages: a 2-D array is one page; a 3-D array has one per index of axis 0;
//! a 4-D or 5-D array whose axes are known as time, channels, z, y, x (`Axes::stack_positions`)
//! is an ImageJ hyperstack, its pages in the order ImageJ wants (channels fastest, then z, then
//! time) pointing at its planes wherever the array holds them. A stack of planes of a type
//! ImageJ knows (8- and 16-bit unsigned, 32-bit float) is described as an ImageJ stack
//! (`ImageDescription` in the header's padding: `channels=`/`slices=`/`frames=`, the unit and
//! spacings); ImageJ/Fiji and tifffile then read planes that lie in order as one block after
//! parsing one directory. Physical pixel sizes go in `XResolution`/`YResolution`.

use super::ifd::{Directory, Entry, Seq, Values, rational};
use super::{CARRIED_DATA_OFFSET, Layout, no_type, padded};
use crate::zarr::axes::{Axes, Quantity, StackAxes, Unit};
use crate::zarr::dtype::DataType;
use crate::zarr::geo::Georeference;

/// Where the ImageJ description lies in the header's padding.
const DESCRIPTION_AT: u64 = 64;

/// TIFF's bits per sample and sample format (1 unsigned, 2 signed, 3 float) of a data type.
pub fn sample_format(dtype: &DataType) -> Option<(u16, u16)> {
    Some(match dtype {
        DataType::Bool | DataType::UInt8 => (8, 1),
        DataType::UInt16 => (16, 1),
        DataType::UInt32 => (32, 1),
        DataType::UInt64 => (64, 1),
        DataType::Int8 => (8, 2),
        DataType::Int16 => (16, 2),
        DataType::Int32 => (32, 2),
        DataType::Int64 => (64, 2),
        DataType::Float16 => (16, 3),
        DataType::Float32 => (32, 3),
        DataType::Float64 => (64, 3),
        _ => return None,
    })
}

/// Which plane of the array each page shows.
#[derive(Debug)]
enum Pages {
    /// Page k is plane k.
    InOrder,
    /// Pages in ImageJ's order (channels fastest, then z, then time) of an array holding its
    /// planes in another: page k is plane `stack.plane_index(...)`.
    Hyperstack { shape: Vec<u64>, stack: StackAxes, sizes: (u64, u64, u64) },
}

impl Pages {
    fn plane(&self, page: u64) -> u64 {
        match self {
            Pages::InOrder => page,
            Pages::Hyperstack { shape, stack, sizes: (_, c, z) } => {
                let (ci, rest) = (page % c, page / c);
                let (zi, ti) = (rest % z, rest / z);
                stack.plane_index(shape, ti, ci, zi)
            }
        }
    }
}

/// The page directories after the data.
#[derive(Debug)]
pub struct Directories {
    big: bool,
    pages: u64,
    plane_bytes: u64,
    order: Pages,
    /// Every page's entries; the strip offset (at `strip_entry`) is set per page.
    entries: Vec<Entry>,
    strip_entry: usize,
    /// One directory's size.
    size: u64,
    /// Zeros after the data, so that the first directory starts on an 8-byte boundary.
    pad: u64,
}

impl Directories {
    /// The file offset of the trailer (the end of the data).
    fn start(&self) -> u64 {
        CARRIED_DATA_OFFSET + self.pages * self.plane_bytes
    }

    pub fn len(&self) -> u64 {
        self.pad + self.pages * self.size
    }

    fn directory(&self, page: u64) -> Directory {
        let here = self.start() + self.pad + page * self.size;
        let next = if page + 1 < self.pages { here + self.size } else { 0 };
        let mut entries = self.entries.clone();
        entries[self.strip_entry] =
            Entry::offsets(273, self.big, Seq::one(CARRIED_DATA_OFFSET + self.order.plane(page) * self.plane_bytes));
        Directory::new(&entries, self.big, here, next)
    }

    /// Bytes `from..to` of the trailer: only the directories they touch are built.
    pub fn bytes(&self, from: u64, to: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(to.saturating_sub(from) as usize);
        let mut at = from;
        while at < to {
            if at < self.pad {
                let n = (self.pad.min(to) - at) as usize;
                out.resize(out.len() + n, 0);
                at += n as u64;
                continue;
            }
            let page = (at - self.pad) / self.size;
            let within = (at - self.pad) % self.size;
            let end = (within + (to - at)).min(self.size);
            self.directory(page).render(within, end, &mut out);
            at += end - within;
        }
        out
    }
}

/// The unit ImageJ writes for a length unit (`micron` for µm; the symbol otherwise), in ASCII
/// as TIFF text is.
fn imagej_unit(unit: &Unit) -> String {
    if unit.symbol == "µm" { "micron".into() } else { unit.ascii_symbol() }
}

/// GeoTIFF's tags for a georeferenced raster (after every baseline tag, in tag order): the
/// transform (a pixel scale and tie point when north-up, else the full matrix), the EPSG code
/// where known, and GDAL's no-data value.
fn geotiff(geo: &Georeference) -> Vec<Entry> {
    let t = geo.transform;
    let mut entries = if geo.is_north_up() {
        vec![Entry::doubles(33550, &[t[1], -t[5], 0.0]), Entry::doubles(33922, &[0.0, 0.0, 0.0, t[0], t[3], 0.0])]
    } else {
        let m = [t[1], t[2], 0.0, t[0], t[4], t[5], 0.0, t[3], 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0];
        vec![Entry::doubles(34264, &m)]
    };
    if let Some(crs) = &geo.crs
        && let Some(code) = crs.epsg.and_then(|c| u16::try_from(c).ok())
    {
        // GTModelType (2 geographic, 1 projected), GTRasterType PixelIsArea, the CRS's code.
        let (model, key) = if crs.is_geographic() { (2, 2048) } else { (1, 3072) };
        entries.push(Entry::shorts(34735, &[1, 1, 0, 3, 1024, 0, 1, model, 1025, 0, 1, 1, key, 0, 1, code]));
    }
    // GDAL's metadata: CF packing and units of the first band, the one GDAL sees.
    let mut items = Vec::new();
    if geo.packing.is_packed() {
        items.push(format!("<Item name=\"OFFSET\" sample=\"0\" role=\"offset\">{}</Item>", geo.packing.offset.unwrap_or(0.0)));
        items.push(format!("<Item name=\"SCALE\" sample=\"0\" role=\"scale\">{}</Item>", geo.packing.scale.unwrap_or(1.0)));
    }
    if let Some(units) = &geo.packing.units {
        items.push(format!("<Item name=\"UNITTYPE\" sample=\"0\" role=\"unittype\">{}</Item>", super::sidecar::xml_escape(units)));
    }
    if !items.is_empty() {
        entries.push(Entry::ascii(42112, &format!("<GDALMetadata>{}</GDALMetadata>", items.concat())));
    }
    if let Some(nodata) = geo.nodata {
        entries.push(Entry::ascii(42113, &nodata.to_string().to_lowercase()));
    }
    entries
}

pub fn layout(dtype: &DataType, shape: &[u64], axes: &Axes, geo: Option<&Georeference>) -> Result<Layout, String> {
    let (bits, sample_format) = sample_format(dtype).ok_or_else(|| no_type("TIFF", dtype))?;
    let stack = axes.stack_positions().filter(|_| axes.len() == shape.len());
    let (pages, order, sizes) = match (shape, stack) {
        ([_, _], _) => (1, Pages::InOrder, (1, 1, 1)),
        (_, Some(stack)) if shape.len() <= 5 => {
            let (t, c, z) = stack.sizes(shape);
            // In order when the array holds time outside z outside channels (ImageJ's order).
            let held: Vec<Option<usize>> = [stack.t, stack.z, stack.c].into_iter().filter(|a| a.is_some_and(|a| shape[a] > 1)).collect();
            let order = if held.windows(2).all(|w| w[0] < w[1]) {
                Pages::InOrder
            } else {
                Pages::Hyperstack { shape: shape.to_vec(), stack, sizes: (t, c, z) }
            };
            (t * c * z, order, (t, c, z))
        }
        ([p, _, _], None) => (*p, Pages::InOrder, (1, 1, *p)),
        ([_], _) | ([], _) => return Err(format!("TIFF pages are 2-D planes: a {}-d array has none", shape.len())),
        _ => return Err(format!("TIFF pages are 2-D planes: a {}-d array needs axes named t, c, z, y, x", shape.len())),
    };
    let (height, width) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    if height > u64::from(u32::MAX) || width > u64::from(u32::MAX) {
        return Err("TIFF planes are at most 2^32 - 1 pixels on a side".into());
    }
    let plane_bytes = height * width * u64::from(bits / 8);
    // Sizes come from metadata: the whole file, directories included, must stay a file size.
    let largest = 4096 + u128::from(pages) * (u128::from(plane_bytes) + 400) + 8;
    if largest > i64::MAX as u128 {
        return Err("the TIFF view would pass 2^63 bytes".into());
    }
    let end = CARRIED_DATA_OFFSET + pages * plane_bytes;
    let (y_axis, x_axis) = (shape.len() - 2, shape.len() - 1);
    let length_unit = axes.length_unit();
    let step = |axis: usize| length_unit.and_then(|u| axes.step_in(axis, &u));
    // ImageJ stacks: 8- and 16-bit unsigned, 32-bit float planes.
    let imagej = matches!(dtype, DataType::UInt8 | DataType::UInt16 | DataType::Float32)
        && (pages > 1 || (step(x_axis).is_some() && step(y_axis).is_some()));
    let description = imagej.then(|| {
        let (t, c, z) = sizes;
        let mut d = String::from("ImageJ=1.11a\n");
        match (&order, stack) {
            (Pages::InOrder, _) => d += &format!("images={pages}\n"),
            // ImageJ and Bio-Formats walk the directories; tifffile reads the planes as one
            // block when they lie before the directories, and takes their order from here
            // (fastest first; an absent axis anywhere).
            (Pages::Hyperstack { .. }, Some(stack)) => {
                let mut held: Vec<(usize, char)> =
                    [(stack.t, 't'), (stack.c, 'c'), (stack.z, 'z')].iter().map(|&(a, k)| (a.map_or(0, |a| usize::MAX - a), k)).collect();
                held.sort();
                d += &format!("order={}\n", held.iter().map(|&(_, k)| k).collect::<String>());
            }
            (Pages::Hyperstack { .. }, None) => {}
        }
        let named = |n: u64, key: &str| if n > 1 { format!("{key}={n}\n") } else { String::new() };
        match stack {
            Some(_) => d += &(named(c, "channels") + &named(z, "slices") + &named(t, "frames")),
            None if pages > 1 => d += &format!("slices={pages}\n"),
            None => {}
        }
        if [t, c, z].iter().filter(|&&n| n > 1).count() > 1 {
            d += "hyperstack=true\n";
        }
        if let Some(unit) = length_unit {
            d += &format!("unit={}\n", imagej_unit(&unit));
            if let Some(dz) = stack.and_then(|s| s.z).and_then(step) {
                d += &format!("spacing={dz}\n");
            }
        }
        let seconds = Unit::parse("second").filter(|u| u.quantity == Quantity::Time);
        if let Some(dt) = stack.and_then(|s| s.t).zip(seconds).and_then(|(t, s)| axes.step_in(t, &s)) {
            d += &format!("finterval={dt}\n");
        }
        d + "loop=false\n\0"
    });
    if description.as_ref().is_some_and(|d| DESCRIPTION_AT as usize + d.len() > CARRIED_DATA_OFFSET as usize) {
        return Err("the ImageJ description would not fit before the data".into());
    }
    // Pixels per unit: ImageJ's own unit (ResolutionUnit none) under an ImageJ description,
    // else centimetres, the unit TIFF has.
    let resolution = match (step(x_axis), step(y_axis), length_unit) {
        (Some(dx), Some(dy), Some(_)) if imagej => Some((1.0 / dx, 1.0 / dy, 1)),
        (Some(dx), Some(dy), Some(unit)) => {
            let cm = Unit::parse("centimeter").unwrap_or(unit);
            Some((1.0 / unit.convert(dx, &cm), 1.0 / unit.convert(dy, &cm), 3))
        }
        _ => None,
    };
    let entries = |big: bool| {
        let mut entries =
            vec![Entry::long(256, width), Entry::long(257, height), Entry::short(258, bits), Entry::short(259, 1), Entry::short(262, 1)];
        if let Some(d) = &description {
            entries.push(Entry { tag: 270, kind: super::ifd::ASCII, count: d.len() as u64, values: Values::At(DESCRIPTION_AT) });
        }
        entries.extend([
            Entry::offsets(273, big, Seq::one(0)),
            Entry::short(277, 1),
            Entry::long(278, height),
            Entry::offsets(279, big, Seq::one(plane_bytes)),
        ]);
        if let Some((x, y, unit)) = resolution {
            entries.extend([Entry::rational(282, rational(x)), Entry::rational(283, rational(y)), Entry::short(296, unit)]);
        }
        entries.push(Entry::short(339, sample_format));
        entries.extend(geo.map(geotiff).unwrap_or_default());
        entries
    };
    let strip_entry = 5 + usize::from(description.is_some());
    let pad = end.next_multiple_of(8) - end;
    // Classic TIFF offsets are 32-bit: past them, BigTIFF.
    let big = end + pad + pages * Directory::size(&entries(false), false) > u64::from(u32::MAX);
    let entries = entries(big);
    let size = Directory::size(&entries, big);
    let trailer = Directories { big, pages, plane_bytes, order, entries, strip_entry, size, pad };
    let first = end + pad;
    let mut header = if big {
        let mut h = b"II\x2b\x00\x08\x00\x00\x00".to_vec();
        h.extend_from_slice(&first.to_le_bytes());
        h
    } else {
        let mut h = b"II\x2a\x00".to_vec();
        h.extend_from_slice(&(first as u32).to_le_bytes());
        h
    };
    if let Some(d) = description {
        header.resize(DESCRIPTION_AT as usize, 0);
        header.extend_from_slice(d.as_bytes());
    }
    Ok(Layout { header: padded(header), trailer: Some(trailer) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::axes::{Axis, AxisKind};

    /// A minimal reader: per page, its tags as (tag, first value).
    fn pages(layout: &Layout, data_len: u64) -> Vec<std::collections::BTreeMap<u16, u64>> {
        let trailer = layout.trailer_bytes(0, layout.trailer_len());
        let base = CARRIED_DATA_OFFSET + data_len;
        let mut next = u64::from(u32::from_le_bytes(layout.header[4..8].try_into().unwrap()));
        let mut out = Vec::new();
        while next != 0 {
            let d = &trailer[(next - base) as usize..];
            let count = u16::from_le_bytes([d[0], d[1]]) as usize;
            let mut tags = std::collections::BTreeMap::new();
            for i in 0..count {
                let e = &d[2 + i * 12..2 + (i + 1) * 12];
                let kind = u16::from_le_bytes([e[2], e[3]]);
                let value = if kind == 3 {
                    u64::from(u16::from_le_bytes([e[8], e[9]]))
                } else {
                    u64::from(u32::from_le_bytes(e[8..12].try_into().unwrap()))
                };
                tags.insert(u16::from_le_bytes([e[0], e[1]]), value);
            }
            out.push(tags);
            next = u64::from(u32::from_le_bytes(d[2 + count * 12..6 + count * 12].try_into().unwrap()));
        }
        out
    }

    fn unnamed(n: usize) -> Axes {
        Axes::named(None, n)
    }

    fn description(tif: &Layout) -> String {
        let at = DESCRIPTION_AT as usize;
        let end = tif.header[at..].iter().position(|&b| b == 0).unwrap();
        String::from_utf8(tif.header[at..at + end].to_vec()).unwrap()
    }

    #[test]
    fn each_page_points_at_its_plane_of_the_data() {
        let tif = layout(&DataType::UInt16, &[3, 5, 7], &unnamed(3), None).unwrap();
        assert_eq!(&tif.header[..4], b"II\x2a\x00");
        assert_eq!(tif.header.len() as u64, CARRIED_DATA_OFFSET);
        let plane = 5 * 7 * 2;
        let got: Vec<(u64, u64, u64, u64)> = pages(&tif, 3 * plane).iter().map(|t| (t[&273], t[&279], t[&256], t[&257])).collect();
        assert_eq!(got, vec![(4096, plane, 7, 5), (4096 + plane, plane, 7, 5), (4096 + 2 * plane, plane, 7, 5)]);
        // Any slice of the trailer is the same bytes as the whole.
        let whole = tif.trailer_bytes(0, tif.trailer_len());
        assert_eq!(tif.trailer_bytes(3, 200), whole[3..200]);
        assert!(layout(&DataType::Complex64, &[2, 2], &unnamed(2), None).is_err());
        assert!(layout(&DataType::UInt8, &[2, 2, 2, 2], &unnamed(4), None).is_err());
        // 2^61 one-byte planes: the data fits a file, its directories would not.
        assert!(layout(&DataType::UInt8, &[1 << 61, 1, 1], &unnamed(3), None).unwrap_err().contains("2^63"));
    }

    #[test]
    fn past_4_gib_it_is_bigtiff() {
        let big = layout(&DataType::UInt8, &[2, 65536, 65536], &unnamed(3), None).unwrap();
        assert_eq!(&big.header[..8], b"II\x2b\x00\x08\x00\x00\x00");
        let first = u64::from_le_bytes(big.header[8..16].try_into().unwrap());
        assert_eq!(first, 4096 + 2 * (1 << 32));
        let d = big.trailer_bytes(0, 236);
        assert_eq!(u64::from_le_bytes(d[..8].try_into().unwrap()), 11);
    }

    #[test]
    fn stacks_of_imagej_types_carry_an_imagej_description_in_the_header() {
        let tif = layout(&DataType::UInt16, &[3, 5, 7], &unnamed(3), None).unwrap();
        assert_eq!(description(&tif), "ImageJ=1.11a\nimages=3\nslices=3\nloop=false\n");
        let d = pages(&tif, 3 * 70);
        assert_eq!(d[0][&270], DESCRIPTION_AT);
        // ImageJ has no such types, and one plane without sizes needs no description.
        for (dtype, shape) in [(DataType::Int32, vec![3, 5, 7]), (DataType::UInt16, vec![5, 7])] {
            let plain = layout(&dtype, &shape, &unnamed(shape.len()), None).unwrap();
            assert!(plain.header[DESCRIPTION_AT as usize..].iter().all(|&b| b == 0));
        }
    }

    fn axes(names: &[&str], unit: &str, steps: &[f64]) -> Axes {
        let mut a = Axes::named(Some(&names.iter().map(|n| Some(n.to_string())).collect::<Vec<_>>()), names.len());
        for (axis, step) in a.0.iter_mut().zip(steps) {
            if axis.kind == AxisKind::Space {
                *axis = Axis { unit: Unit::parse(unit), step: Some(*step), ..axis.clone() };
            }
        }
        a
    }

    #[test]
    fn a_5_d_image_is_a_hyperstack_in_imagej_order_and_its_pixels_have_a_size() {
        // (t, c, z, y, x) = (2, 3, 4, 5, 6): ImageJ wants c fastest, then z, then t.
        let shape = [2, 3, 4, 5, 6];
        let tif =
            layout(&DataType::UInt16, &shape, &axes(&["t", "c", "z", "y", "x"], "micrometer", &[1., 1., 2., 0.5, 0.5]), None).unwrap();
        let text = description(&tif);
        assert_eq!(text, "ImageJ=1.11a\norder=zct\nchannels=3\nslices=4\nframes=2\nhyperstack=true\nunit=micron\nspacing=2\nloop=false\n");
        let plane = 5 * 6 * 2;
        let d = pages(&tif, 24 * plane);
        assert_eq!(d.len(), 24);
        // Page 1 is channel 1 of z 0 of t 0: plane (0, 1, 0) = index 4 of the array's.
        let plane_of = |page: usize| (d[page][&273] - 4096) / plane;
        assert_eq!((plane_of(0), plane_of(1), plane_of(3), plane_of(12)), (0, 4, 1, 12));
        // Pixels per micron, ImageJ's way (ResolutionUnit none).
        assert_eq!((d[0][&296], d[0][&282] != 0), (1, true));
        // Held in ImageJ's order already (t, z, c): the pages are the planes in order.
        let tif = layout(&DataType::UInt8, &[2, 4, 3, 5, 6], &axes(&["t", "z", "c", "y", "x"], "micrometer", &[1.; 5]), None).unwrap();
        assert!(description(&tif).contains("images=24\nchannels=3\nslices=4\nframes=2\n"));
        // Unnamed 4-d arrays still have no TIFF.
        assert!(layout(&DataType::UInt8, &shape, &unnamed(5), None).is_err());
    }

    #[test]
    fn a_plain_tiff_gives_its_pixel_size_in_centimetres() {
        let tif = layout(&DataType::Int32, &[5, 6], &axes(&["y", "x"], "micrometer", &[0.5, 0.25]), None).unwrap();
        let d = pages(&tif, 120);
        assert_eq!(d[0][&296], 3);
        let channels = layout(&DataType::UInt8, &[3, 5, 6], &axes(&["c", "y", "x"], "micrometer", &[1., 1., 1.]), None).unwrap();
        assert_eq!(description(&channels), "ImageJ=1.11a\nimages=3\nchannels=3\nunit=micron\nloop=false\n");
    }
}
