//! `.tif` over the bytes of `data` (TIFF 6.0, BigTIFF past 4 GiB): the
//! 8- or 16-byte TIFF header padded to `CARRIED_DATA_OFFSET`, the data, then one page
//! directory per 2-D plane (a 2-D array: one page; 3-D: one per index of axis 0), each with one
//! uncompressed strip pointing into the data. Growth moves only the directories. A stack of
//! planes of a type ImageJ knows (8- and 16-bit unsigned, 32-bit float) is described as an
//! ImageJ stack (`ImageDescription`, kept in the header's padding): ImageJ/Fiji and tifffile
//! then read its planes as one contiguous block after parsing one directory, not thousands.

use super::{CARRIED_DATA_OFFSET, Layout, no_type, padded};
use crate::zarr::dtype::DataType;

/// Tags per directory: 256, 257, 258, 259, 262, (270,) 273, 277, 278, 279, 339.
const TAGS: u64 = 10;
/// Where the ImageJ description lies in the header's padding.
const DESCRIPTION_AT: u64 = 64;

/// The page directories after the data.
#[derive(Debug)]
pub struct Directories {
    big: bool,
    pages: u64,
    width: u64,
    height: u64,
    bits: u16,
    sample_format: u16,
    plane_bytes: u64,
    /// Zeros after the data, so that the first directory starts on an 8-byte boundary.
    pad: u64,
    /// The length of the ImageJ description (with its NUL) at `DESCRIPTION_AT`, if any.
    description: Option<u64>,
}

impl Directories {
    fn tags(&self) -> u64 {
        TAGS + u64::from(self.description.is_some())
    }

    fn size(&self) -> u64 {
        if self.big { 8 + self.tags() * 20 + 8 } else { 2 + self.tags() * 12 + 4 }
    }

    /// The file offset of the trailer (the end of the data).
    fn start(&self) -> u64 {
        CARRIED_DATA_OFFSET + self.pages * self.plane_bytes
    }

    pub fn len(&self) -> u64 {
        self.pad + self.pages * self.size()
    }

    /// Directory `page`.
    fn directory(&self, page: u64) -> Vec<u8> {
        let here = self.start() + self.pad + page * self.size();
        let next = if page + 1 < self.pages { here + self.size() } else { 0 };
        let strip = CARRIED_DATA_OFFSET + page * self.plane_bytes;
        // (tag, type, value): SHORT 3, LONG 4, LONG8 16.
        let offset_type = if self.big { 16 } else { 4 };
        // (tag, type, count, value): ASCII 2, SHORT 3, LONG 4, LONG8 16; in tag order.
        let description = self.description.map(|len| (270u16, 2u16, len, DESCRIPTION_AT));
        let entries =
            [(256, 4, 1, self.width), (257, 4, 1, self.height), (258, 3, 1, u64::from(self.bits)), (259, 3, 1, 1), (262, 3, 1, 1)]
                .into_iter()
                .chain(description)
                .chain([
                    (273, offset_type, 1, strip),
                    (277, 3, 1, 1),
                    (278, 4, 1, self.height),
                    (279, offset_type, 1, self.plane_bytes),
                    (339, 3, 1, u64::from(self.sample_format)),
                ]);
        let mut out = Vec::with_capacity(self.size() as usize);
        if self.big {
            out.extend_from_slice(&self.tags().to_le_bytes());
        } else {
            out.extend_from_slice(&(self.tags() as u16).to_le_bytes());
        }
        for (tag, kind, count, value) in entries {
            out.extend_from_slice(&tag.to_le_bytes());
            out.extend_from_slice(&kind.to_le_bytes());
            // One value each, left-justified in the value field (the description: its offset).
            if self.big {
                out.extend_from_slice(&count.to_le_bytes());
                out.extend_from_slice(&value.to_le_bytes());
            } else {
                out.extend_from_slice(&(count as u32).to_le_bytes());
                let field = if kind == 3 { (value as u16 as u32).to_le_bytes() } else { (value as u32).to_le_bytes() };
                out.extend_from_slice(&field);
            }
        }
        if self.big {
            out.extend_from_slice(&next.to_le_bytes());
        } else {
            out.extend_from_slice(&(next as u32).to_le_bytes());
        }
        out
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
            let page = (at - self.pad) / self.size();
            let within = ((at - self.pad) % self.size()) as usize;
            let directory = self.directory(page);
            let n = (directory.len() - within).min((to - at) as usize);
            out.extend_from_slice(&directory[within..within + n]);
            at += n as u64;
        }
        out
    }
}

pub fn layout(dtype: &DataType, shape: &[u64]) -> Result<Layout, String> {
    let (bits, sample_format) = match dtype {
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
        _ => return Err(no_type("TIFF", dtype)),
    };
    let (pages, height, width) = match shape {
        [h, w] => (1, *h, *w),
        [p, h, w] => (*p, *h, *w),
        _ => return Err(format!("TIFF pages are 2-D planes: a {}-d array has none", shape.len())),
    };
    if height > u64::from(u32::MAX) || width > u64::from(u32::MAX) {
        return Err("TIFF planes are at most 2^32 - 1 pixels on a side".into());
    }
    // Sizes come from metadata: the whole file, directories included, must stay a file size.
    let largest = 4096 + u128::from(pages) * (u128::from(height) * u128::from(width) * u128::from(bits / 8) + 236) + 8;
    if largest > i64::MAX as u128 {
        return Err("the TIFF view would pass 2^63 bytes".into());
    }
    let plane_bytes = height * width * u64::from(bits / 8);
    let end = CARRIED_DATA_OFFSET + pages * plane_bytes;
    // ImageJ stacks: 8- and 16-bit unsigned, 32-bit float planes.
    let imagej = pages > 1 && matches!(dtype, DataType::UInt8 | DataType::UInt16 | DataType::Float32);
    let description = imagej.then(|| format!("ImageJ=1.11a\nimages={pages}\nslices={pages}\nloop=false\n\0"));
    let pad = end.next_multiple_of(8) - end;
    let small = Directories {
        big: false,
        pages,
        width,
        height,
        bits,
        sample_format,
        plane_bytes,
        pad,
        description: description.as_ref().map(|d| d.len() as u64),
    };
    // Classic TIFF offsets are 32-bit: past them, BigTIFF.
    let big = end + small.len() > u64::from(u32::MAX);
    let trailer = Directories { big, ..small };
    let first = end + trailer.pad;
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

    /// A minimal reader: the strip offset, strip length and size of every page.
    fn pages(layout: &Layout, data_len: u64) -> Vec<(u64, u64, u64, u64)> {
        let trailer = layout.trailer_bytes(0, layout.trailer_len());
        let base = CARRIED_DATA_OFFSET + data_len;
        let mut next = u64::from(u32::from_le_bytes(layout.header[4..8].try_into().unwrap()));
        let mut out = Vec::new();
        while next != 0 {
            let d = &trailer[(next - base) as usize..];
            let count = u16::from_le_bytes([d[0], d[1]]) as usize;
            let value = |tag: u16| {
                (0..count)
                    .map(|i| &d[2 + i * 12..2 + (i + 1) * 12])
                    .find(|e| u16::from_le_bytes([e[0], e[1]]) == tag)
                    .map(|e| u64::from(u32::from_le_bytes(e[8..12].try_into().unwrap())))
                    .unwrap()
            };
            out.push((value(273), value(279), value(256), value(257)));
            next = u64::from(u32::from_le_bytes(d[2 + count * 12..6 + count * 12].try_into().unwrap()));
        }
        out
    }

    #[test]
    fn each_page_points_at_its_plane_of_the_data() {
        let tif = layout(&DataType::UInt16, &[3, 5, 7]).unwrap();
        assert_eq!(&tif.header[..4], b"II\x2a\x00");
        assert_eq!(tif.header.len() as u64, CARRIED_DATA_OFFSET);
        let plane = 5 * 7 * 2;
        assert_eq!(pages(&tif, 3 * plane), vec![(4096, plane, 7, 5), (4096 + plane, plane, 7, 5), (4096 + 2 * plane, plane, 7, 5)]);
        // Any slice of the trailer is the same bytes as the whole.
        let whole = tif.trailer_bytes(0, tif.trailer_len());
        assert_eq!(tif.trailer_bytes(3, 200), whole[3..200]);
        assert!(layout(&DataType::Complex64, &[2, 2]).is_err());
        assert!(layout(&DataType::UInt8, &[2, 2, 2, 2]).is_err());
        // 2^61 one-byte planes: the data fits a file, its directories would not.
        assert!(layout(&DataType::UInt8, &[1 << 61, 1, 1]).unwrap_err().contains("2^63"));
    }

    #[test]
    fn past_4_gib_it_is_bigtiff() {
        let big = layout(&DataType::UInt8, &[2, 65536, 65536]).unwrap();
        assert_eq!(&big.header[..8], b"II\x2b\x00\x08\x00\x00\x00");
        let first = u64::from_le_bytes(big.header[8..16].try_into().unwrap());
        assert_eq!(first, 4096 + 2 * (1 << 32));
        let d = big.trailer_bytes(0, 236);
        assert_eq!(u64::from_le_bytes(d[..8].try_into().unwrap()), 11);
    }

    #[test]
    fn stacks_of_imagej_types_carry_an_imagej_description_in_the_header() {
        let tif = layout(&DataType::UInt16, &[3, 5, 7]).unwrap();
        let at = DESCRIPTION_AT as usize;
        assert!(tif.header[at..].starts_with(b"ImageJ=1.11a\nimages=3\nslices=3\n"));
        let d = tif.trailer_bytes(0, tif.trailer_len());
        // Directory 0 (after 2 bytes of padding): 11 entries, the sixth is ImageDescription.
        let first = (u32::from_le_bytes(tif.header[4..8].try_into().unwrap()) as u64 - (4096 + 3 * 70)) as usize;
        assert_eq!(u16::from_le_bytes([d[first], d[first + 1]]), 11);
        let e = &d[first + 2 + 5 * 12..][..12];
        assert_eq!(u16::from_le_bytes([e[0], e[1]]), 270);
        let len = u32::from_le_bytes(e[4..8].try_into().unwrap()) as usize;
        assert_eq!(u32::from_le_bytes(e[8..12].try_into().unwrap()) as usize, at);
        assert_eq!(tif.header[at + len - 1], 0, "NUL-terminated");
        // ImageJ has no such types, and one plane needs no stack.
        for (dtype, shape) in [(DataType::Int32, vec![3, 5, 7]), (DataType::UInt16, vec![5, 7])] {
            let plain = layout(&dtype, &shape).unwrap();
            assert!(plain.header[at..].iter().all(|&b| b == 0));
        }
    }
}
