//! `image.ome.tif` of an OME-NGFF image group: a pyramidal OME-TIFF (BigTIFF past 4 GiB) over
//! the bytes of its levels' `data`. The file is
//!
//! ```text
//! 0      TIFF header, zeros to 4096
//! 4096   level 0's data, then each lower level's, each starting on a 4096-byte boundary
//!        the OME-XML (the first directory's ImageDescription)
//!        one block per level-0 plane (XYZCT order: z fastest, then c, then t): the plane's
//!        directory, then one SubIFD per lower level (NewSubfileType 1), largest first
//! ```
//!
//! Every plane is made of strips of a few rows pointing into its level's data, so a reader of a
//! region reads only its rows. Blocks are all the same size, so any byte of them is computed
//! from its offset alone: a 10 000-plane image costs nothing until a directory is read.

use super::ifd::{Directory, Entry, IFD, IFD8, Seq, Values, rational};
use super::tiff::sample_format;
use crate::zarr::axes::{Axes, AxisKind, StackAxes, Unit};
use crate::zarr::dtype::DataType;
use crate::zarr::ome::Channel;

/// Where level 0's data starts, and what levels' starts are rounded up to.
const PAGE: u64 = 4096;
/// Strips are about this long (a few rows of a wide plane, more of a narrow one).
const STRIP_BYTES: u64 = 16 * 1024;

/// What an image's OME-TIFF is made of.
pub struct Pyramid<'a> {
    pub dtype: &'a DataType,
    pub name: &'a str,
    /// Level 0's axes: kinds, units and the physical size of a step.
    pub axes: &'a Axes,
    pub channels: &'a [Channel],
    /// Each level's shape (level 0 first); lower levels differ from it in y and x only.
    pub shapes: Vec<Vec<u64>>,
}

/// One level's planes.
#[derive(Debug)]
struct Level {
    width: u64,
    height: u64,
    row_bytes: u64,
    rows_per_strip: u64,
    /// File offset of the level's data.
    start: u64,
    /// Pixels per centimetre in x and y, when known.
    resolution: Option<(f64, f64)>,
    /// Bytes its directory takes in every block.
    slot: u64,
}

impl Level {
    fn plane_bytes(&self) -> u64 {
        self.row_bytes * self.height
    }

    fn strips(&self) -> u64 {
        self.height.div_ceil(self.rows_per_strip)
    }
}

/// The layout of an `image.ome.tif`.
#[derive(Debug)]
pub struct OmeTiff {
    big: bool,
    bits: u16,
    sample_format: u16,
    planes: u64,
    levels: Vec<Level>,
    xml: Vec<u8>,
    xml_at: u64,
    blocks_at: u64,
    block: u64,
    len: u64,
}

/// OME-XML's name of a pixel type.
fn ome_type(dtype: &DataType) -> Option<&'static str> {
    Some(match dtype {
        DataType::Bool | DataType::UInt8 => "uint8",
        DataType::Int8 => "int8",
        DataType::Int16 => "int16",
        DataType::UInt16 => "uint16",
        DataType::Int32 => "int32",
        DataType::UInt32 => "uint32",
        DataType::Float32 => "float",
        DataType::Float64 => "double",
        _ => return None,
    })
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            // XML 1.0 has no other control characters.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => {}
            c => out.push(c),
        }
    }
    out
}

/// The OME-XML of the image: one `Image`, its `Pixels` in XYZCT order, its channels, and a
/// `TiffData` taking every directory in order.
fn ome_xml(p: &Pyramid, stack: StackAxes, sizes: (u64, u64, u64), pixel_type: &str) -> String {
    let shape = &p.shapes[0];
    let n = shape.len();
    let (t, c, z) = sizes;
    let mut pixels = format!(
        "<Pixels ID=\"Pixels:0\" DimensionOrder=\"XYZCT\" Type=\"{pixel_type}\" SizeX=\"{}\" SizeY=\"{}\" SizeZ=\"{z}\" SizeC=\"{c}\" SizeT=\"{t}\"",
        shape[n - 1],
        shape[n - 2]
    );
    let mut physical = |axis: Option<usize>, key: &str| {
        let Some(axis) = axis else { return };
        if let Some(a) = p.axes.0.get(axis)
            && let (Some(step), Some(unit)) = (a.step, a.unit)
        {
            pixels += &format!(" {key}=\"{step}\" {key}Unit=\"{}\"", unit.symbol);
        }
    };
    physical(Some(n - 1), "PhysicalSizeX");
    physical(Some(n - 2), "PhysicalSizeY");
    physical(stack.z, "PhysicalSizeZ");
    physical(stack.t, "TimeIncrement");
    pixels += " BigEndian=\"false\" Interleaved=\"false\">";
    for i in 0..c {
        let channel = p.channels.get(i as usize).cloned().unwrap_or_default();
        pixels += &format!("<Channel ID=\"Channel:0:{i}\" SamplesPerPixel=\"1\"");
        if let Some(name) = &channel.name {
            pixels += &format!(" Name=\"{}\"", escape(name));
        }
        if let Some(rgb) = channel.color {
            // OME colours are RGBA as a signed 32-bit integer.
            pixels += &format!(" Color=\"{}\"", ((rgb << 8) | 0xFF) as i32);
        }
        pixels += "/>";
    }
    pixels += &format!("<TiffData IFD=\"0\" PlaneCount=\"{}\"/></Pixels>", t * c * z);
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<OME xmlns=\"http://www.openmicroscopy.org/Schemas/OME/2016-06\" \
         xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" \
         xsi:schemaLocation=\"http://www.openmicroscopy.org/Schemas/OME/2016-06 http://www.openmicroscopy.org/Schemas/OME/2016-06/ome.xsd\" \
         Creator=\"zarrfs {}\"><Image ID=\"Image:0\" Name=\"{}\">{pixels}</Image></OME>",
        env!("CARGO_PKG_VERSION"),
        escape(p.name)
    )
}

impl OmeTiff {
    pub fn new(p: &Pyramid) -> Result<OmeTiff, String> {
        let pixel_type = ome_type(p.dtype).ok_or_else(|| format!("OME-TIFF has no pixel type for {}", p.dtype.name()))?;
        let (bits, sample_format) = sample_format(p.dtype).ok_or_else(|| format!("TIFF has no type for {}", p.dtype.name()))?;
        let item = u64::from(bits / 8);
        let shape = p.shapes.first().ok_or("an image without levels")?;
        let stack = p.axes.stack_positions().filter(|_| p.axes.len() == shape.len()).ok_or("its axes are not time, channel and space")?;
        if p.shapes.iter().flatten().any(|&n| n == 0) {
            return Err("a level has an axis of length 0".into());
        }
        let sizes = stack.sizes(shape);
        let planes = sizes.0.checked_mul(sizes.1).and_then(|n| n.checked_mul(sizes.2)).ok_or("too many planes")?;
        let n = shape.len();
        let cm = Unit::parse("centimeter");
        let mut levels = Vec::new();
        let mut start = PAGE;
        for s in &p.shapes {
            let (height, width) = (s[n - 2], s[n - 1]);
            if height > u64::from(u32::MAX) || width > u64::from(u32::MAX) {
                return Err("TIFF planes are at most 2^32 - 1 pixels on a side".into());
            }
            let row_bytes = width * item;
            // Level i's pixels are this many times level 0's, in x and y.
            let factor = |axis: usize| shape[axis] as f64 / s[axis] as f64;
            let resolution = cm.and_then(|cm| {
                let size = |axis: usize| p.axes.step_in(axis, &cm).filter(|_| p.axes.kind(axis) == AxisKind::Space);
                Some((1.0 / (size(n - 1)? * factor(n - 1)), 1.0 / (size(n - 2)? * factor(n - 2))))
            });
            let level =
                Level { width, height, row_bytes, rows_per_strip: (STRIP_BYTES / row_bytes).clamp(1, height), start, resolution, slot: 0 };
            let bytes = level.plane_bytes().checked_mul(planes).ok_or("the image would pass 2^64 bytes")?;
            start = start.checked_add(bytes).and_then(|e| e.checked_next_multiple_of(PAGE)).ok_or("the image would pass 2^64 bytes")?;
            levels.push(level);
        }
        let mut xml = ome_xml(p, stack, sizes, pixel_type).into_bytes();
        xml.push(0);
        let xml_at = start;
        let blocks_at = xml_at + (xml.len() as u64).next_multiple_of(8);
        let mut tiff = OmeTiff { big: false, bits, sample_format, planes, levels, xml, xml_at, blocks_at, block: 0, len: 0 };
        tiff.size_blocks(false)?;
        if tiff.len > u64::from(u32::MAX) {
            tiff.size_blocks(true)?;
        }
        if tiff.len > i64::MAX as u64 {
            return Err("the OME-TIFF view would pass 2^63 bytes".into());
        }
        Ok(tiff)
    }

    /// Size every level's directory slot and the file, as classic TIFF or BigTIFF.
    fn size_blocks(&mut self, big: bool) -> Result<(), String> {
        self.big = big;
        let mut block = 0u64;
        for l in 0..self.levels.len() {
            let slot = Directory::size(&self.entries(0, l), big);
            self.levels[l].slot = slot.next_multiple_of(8);
            block += self.levels[l].slot;
        }
        self.block = block;
        self.len =
            block.checked_mul(self.planes).and_then(|b| b.checked_add(self.blocks_at)).ok_or("the OME-TIFF view would pass 2^64 bytes")?;
        Ok(())
    }

    /// The file's size.
    pub fn file_len(&self) -> u64 {
        self.len
    }

    pub fn is_big(&self) -> bool {
        self.big
    }

    /// Where each level's data lies in the file: (level, offset, length).
    pub fn spans(&self) -> Vec<(usize, u64, u64)> {
        self.levels.iter().enumerate().map(|(i, l)| (i, l.start, l.plane_bytes() * self.planes)).collect()
    }

    fn block_at(&self, plane: u64) -> u64 {
        self.blocks_at + plane * self.block
    }

    /// The file offset of plane `plane`'s directory of level `level`.
    fn directory_at(&self, plane: u64, level: usize) -> u64 {
        self.block_at(plane) + self.levels[..level].iter().map(|l| l.slot).sum::<u64>()
    }

    /// The entries of plane `plane`'s directory of level `level`.
    fn entries(&self, plane: u64, level: usize) -> Vec<Entry> {
        let l = &self.levels[level];
        let base = l.start + plane * l.plane_bytes();
        let strip = l.rows_per_strip * l.row_bytes;
        let last_rows = l.height - (l.strips() - 1) * l.rows_per_strip;
        let mut entries = vec![
            Entry::long(254, u64::from(level > 0)),
            Entry::long(256, l.width),
            Entry::long(257, l.height),
            Entry::short(258, self.bits),
            Entry::short(259, 1),
            Entry::short(262, 1),
        ];
        if level == 0 && plane == 0 {
            entries.push(Entry { tag: 270, kind: super::ifd::ASCII, count: self.xml.len() as u64, values: Values::At(self.xml_at) });
        }
        entries.extend([
            Entry::offsets(273, self.big, Seq { first: base, step: strip, count: l.strips(), last: None }),
            Entry::short(277, 1),
            Entry::long(278, l.rows_per_strip),
            Entry::offsets(279, self.big, Seq { first: strip, step: 0, count: l.strips(), last: Some(last_rows * l.row_bytes) }),
        ]);
        if let Some((x, y)) = l.resolution {
            entries.extend([Entry::rational(282, rational(x)), Entry::rational(283, rational(y))]);
        }
        entries.push(Entry::short(284, 1));
        if l.resolution.is_some() {
            entries.push(Entry::short(296, 3));
        }
        if level == 0 && self.levels.len() > 1 {
            let width = if self.big { 8 } else { 4 };
            let mut offsets = Vec::new();
            for sub in 1..self.levels.len() {
                offsets.extend_from_slice(&self.directory_at(plane, sub).to_le_bytes()[..width]);
            }
            let kind = if self.big { IFD8 } else { IFD };
            entries.push(Entry { tag: 330, kind, count: (self.levels.len() - 1) as u64, values: Values::Bytes(offsets) });
        }
        entries.push(Entry::short(339, self.sample_format));
        entries
    }

    fn directory(&self, plane: u64, level: usize) -> Directory {
        let at = self.directory_at(plane, level);
        // Level-0 directories chain from plane to plane; each SubIFD stands alone.
        let next = if level == 0 && plane + 1 < self.planes { self.directory_at(plane + 1, 0) } else { 0 };
        Directory::new(&self.entries(plane, level), self.big, at, next)
    }

    /// The file's own bytes in `from..to` (the header, the padding, the OME-XML and the
    /// directories; zeros where level data lies, which callers read from the levels).
    pub fn own_bytes(&self, from: u64, to: u64) -> Vec<u8> {
        let to = to.min(self.len);
        let mut out = Vec::with_capacity(to.saturating_sub(from) as usize);
        let mut header = if self.big { b"II\x2b\x00\x08\x00\x00\x00".to_vec() } else { b"II\x2a\x00".to_vec() };
        let first = self.directory_at(0, 0);
        if self.big {
            header.extend_from_slice(&first.to_le_bytes());
        } else {
            header.extend_from_slice(&(first as u32).to_le_bytes());
        }
        let mut at = from;
        while at < to {
            if at < header.len() as u64 {
                let n = (header.len() as u64).min(to) - at;
                out.extend_from_slice(&header[at as usize..(at + n) as usize]);
                at += n;
            } else if at < self.xml_at {
                let n = self.xml_at.min(to) - at;
                out.resize(out.len() + n as usize, 0);
                at += n;
            } else if at < self.xml_at + self.xml.len() as u64 {
                let end = (self.xml_at + self.xml.len() as u64).min(to);
                out.extend_from_slice(&self.xml[(at - self.xml_at) as usize..(end - self.xml_at) as usize]);
                at = end;
            } else if at < self.blocks_at {
                let n = self.blocks_at.min(to) - at;
                out.resize(out.len() + n as usize, 0);
                at += n;
            } else {
                let plane = (at - self.blocks_at) / self.block;
                let mut slot_at = self.block_at(plane);
                for level in 0..self.levels.len() {
                    let slot_end = slot_at + self.levels[level].slot;
                    if at < slot_end && at < to {
                        let d = self.directory(plane, level);
                        let end = slot_end.min(to);
                        let (within, until) = (at - slot_at, end - slot_at);
                        d.render(within, until.min(d.len()), &mut out);
                        // The slot's padding past the directory.
                        out.resize(out.len() + (until - until.min(d.len()).max(within)) as usize, 0);
                        at = end;
                    }
                    slot_at = slot_end;
                }
            }
        }
        out
    }

    /// The OME-XML, for `info` and tests.
    pub fn xml(&self) -> &str {
        std::str::from_utf8(&self.xml[..self.xml.len() - 1]).unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::axes::Axis;

    fn image_axes() -> Axes {
        let names: Vec<Option<String>> = ["t", "c", "z", "y", "x"].iter().map(|n| Some(n.to_string())).collect();
        let mut axes = Axes::named(Some(&names), 5);
        for (a, step) in axes.0.iter_mut().zip([2.0, 1.0, 1.5, 0.25, 0.25]) {
            let unit = match a.kind {
                AxisKind::Space => Unit::parse("micrometer"),
                AxisKind::Time => Unit::parse("second"),
                _ => None,
            };
            *a = Axis { unit, step: Some(step), ..a.clone() };
        }
        axes
    }

    /// A minimal TIFF reader: each directory as tag → values, and the SubIFDs of each.
    fn read(tiff: &OmeTiff, at: u64) -> std::collections::BTreeMap<u16, Vec<u64>> {
        let b = tiff.own_bytes(0, tiff.file_len());
        let d = &b[at as usize..];
        let count = u16::from_le_bytes([d[0], d[1]]) as usize;
        let mut tags = std::collections::BTreeMap::new();
        for i in 0..count {
            let e = &d[2 + 12 * i..14 + 12 * i];
            let (tag, kind, n) = (
                u16::from_le_bytes([e[0], e[1]]),
                u16::from_le_bytes([e[2], e[3]]),
                u32::from_le_bytes(e[4..8].try_into().unwrap()) as usize,
            );
            let size = match kind {
                2 => 1,
                3 => 2,
                5 => 8,
                _ => 4,
            };
            let values_at =
                if n * size <= 4 { at as usize + 2 + 12 * i + 8 } else { u32::from_le_bytes(e[8..12].try_into().unwrap()) as usize };
            let values = (0..n.min(64))
                .map(|k| {
                    let v = &b[values_at + k * size..];
                    match size {
                        2 => u64::from(u16::from_le_bytes([v[0], v[1]])),
                        1 => u64::from(v[0]),
                        _ => u64::from(u32::from_le_bytes(v[..4].try_into().unwrap())),
                    }
                })
                .collect();
            tags.insert(tag, values);
        }
        let next = u32::from_le_bytes(d[2 + 12 * count..6 + 12 * count].try_into().unwrap());
        tags.insert(0, vec![u64::from(next)]);
        tags
    }

    #[test]
    fn planes_point_into_their_levels_and_lower_levels_are_subifds() {
        let axes = image_axes();
        let channels = [Channel { name: Some("DAPI <nuclei>".into()), color: Some(0x0000FF) }, Channel::default()];
        let p = Pyramid {
            dtype: &DataType::UInt16,
            name: "cells",
            axes: &axes,
            channels: &channels,
            shapes: vec![vec![2, 2, 3, 40, 30], vec![2, 2, 3, 20, 15]],
        };
        let tiff = OmeTiff::new(&p).unwrap();
        assert!(!tiff.is_big());
        let spans = tiff.spans();
        assert_eq!(spans, vec![(0, 4096, 12 * 40 * 60), (1, (4096 + 12 * 2400u64).next_multiple_of(4096), 12 * 20 * 30)]);
        let header = tiff.own_bytes(0, 8);
        assert_eq!(&header[..4], b"II\x2a\x00");
        let first = u64::from(u32::from_le_bytes(header[4..8].try_into().unwrap()));
        let d0 = read(&tiff, first);
        assert_eq!((d0[&256][0], d0[&257][0], d0[&254][0]), (30, 40, 0));
        // 16 KiB strips of 60-byte rows: 40 rows in one strip.
        assert_eq!((d0[&278][0], d0[&273].clone(), d0[&279].clone()), (40, vec![4096], vec![2400]));
        let xml = tiff.xml();
        assert!(
            xml.contains("DimensionOrder=\"XYZCT\" Type=\"uint16\" SizeX=\"30\" SizeY=\"40\" SizeZ=\"3\" SizeC=\"2\" SizeT=\"2\""),
            "{xml}"
        );
        assert!(
            xml.contains("PhysicalSizeX=\"0.25\" PhysicalSizeXUnit=\"µm\"") && xml.contains("TimeIncrement=\"2\" TimeIncrementUnit=\"s\"")
        );
        assert!(xml.contains("Name=\"DAPI &lt;nuclei&gt;\" Color=\"65535\""), "{xml}");
        assert_eq!(d0[&270].len(), 64.min(tiff.xml.len()));
        // Plane 7 (z 1, c 0, t 1) of level 0, and its SubIFD into level 1.
        let mut at = first;
        for _ in 0..7 {
            at = read(&tiff, at)[&0][0];
        }
        let d7 = read(&tiff, at);
        assert_eq!(d7[&273], vec![4096 + 7 * 2400]);
        assert!(!d7.contains_key(&270));
        let sub = read(&tiff, d7[&330][0]);
        assert_eq!((sub[&254][0], sub[&256][0], sub[&257][0], sub[&0][0]), (1, 15, 20, 0));
        assert_eq!(sub[&273], vec![spans[1].1 + 7 * 600]);
        // Any range renders as the same bytes as the whole.
        let whole = tiff.own_bytes(0, tiff.file_len());
        assert_eq!(tiff.own_bytes(first + 5, first + 900), whole[(first + 5) as usize..(first + 900) as usize]);
    }

    #[test]
    fn wide_planes_have_strips_of_a_few_rows() {
        let names: Vec<Option<String>> = ["y", "x"].iter().map(|n| Some(n.to_string())).collect();
        let axes = Axes::named(Some(&names), 2);
        let p = Pyramid { dtype: &DataType::UInt8, name: "wide", axes: &axes, channels: &[], shapes: vec![vec![1001, 4000]] };
        let tiff = OmeTiff::new(&p).unwrap();
        let first = u64::from(u32::from_le_bytes(tiff.own_bytes(4, 8).try_into().unwrap()));
        let d = read(&tiff, first);
        // 4 rows of 4000 bytes per strip; 251 strips, the last of one row.
        assert_eq!(d[&278][0], 4);
        assert_eq!(d[&273][..3], [4096, 4096 + 16000, 4096 + 32000]);
        assert!(!tiff.xml().contains("PhysicalSizeX"));
        // Too big for 32-bit offsets: BigTIFF.
        let huge = Pyramid { shapes: vec![vec![70000, 70000]], ..p };
        let tiff = OmeTiff::new(&huge).unwrap();
        assert!(tiff.is_big());
        assert_eq!(&tiff.own_bytes(0, 8), b"II\x2b\x00\x08\x00\x00\x00");
        assert!(OmeTiff::new(&Pyramid { dtype: &DataType::Float16, ..huge }).unwrap_err().contains("float16"));
    }
}
