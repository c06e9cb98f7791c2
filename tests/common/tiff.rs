//! A small TIFF reader for the tests: directories (classic and BigTIFF), their SubIFDs, and the
//! bytes of a plane gathered from its strips.

use std::collections::BTreeMap;

pub struct Page {
    /// Every tag's values as numbers (ASCII as bytes).
    pub tags: BTreeMap<u16, Vec<u64>>,
    pub subifds: Vec<Page>,
}

impl Page {
    pub fn get(&self, tag: u16) -> u64 {
        self.tags.get(&tag).and_then(|v| v.first().copied()).unwrap_or_else(|| panic!("tag {tag} missing"))
    }

    /// The plane's bytes, from its strips.
    pub fn plane(&self, file: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for (&at, &len) in self.tags[&273].iter().zip(&self.tags[&279]) {
            out.extend_from_slice(&file[at as usize..(at + len) as usize]);
        }
        out
    }

    /// The ImageDescription, as text.
    pub fn description(&self) -> Option<String> {
        let bytes: Vec<u8> = self.tags.get(&270)?.iter().map(|&b| b as u8).take_while(|&b| b != 0).collect();
        Some(String::from_utf8(bytes).expect("UTF-8 description"))
    }
}

struct Reader<'a> {
    b: &'a [u8],
    big: bool,
}

impl Reader<'_> {
    fn uint(&self, at: usize, width: usize) -> u64 {
        let mut v = [0u8; 8];
        v[..width].copy_from_slice(&self.b[at..at + width]);
        u64::from_le_bytes(v)
    }

    fn directory(&self, at: u64) -> (Page, u64) {
        let at = at as usize;
        let (count, head, entry, field) = if self.big { (self.uint(at, 8), 8, 20, 8) } else { (self.uint(at, 2), 2, 12, 4) };
        let mut tags = BTreeMap::new();
        for i in 0..count as usize {
            let e = at + head + i * entry;
            let tag = self.uint(e, 2) as u16;
            let kind = self.uint(e + 2, 2) as u16;
            let n = if self.big { self.uint(e + 4, 8) } else { self.uint(e + 4, 4) } as usize;
            let size = match kind {
                1 | 2 | 7 => 1,
                3 => 2,
                4 | 13 => 4,
                5 => 8,
                12 | 16 | 18 => 8,
                other => panic!("type {other}"),
            };
            let value_at = e + 4 + if self.big { 8 } else { 4 };
            let values_at = if n * size <= field { value_at } else { self.uint(value_at, field) as usize };
            let values: Vec<u64> = if kind == 5 {
                (0..n).map(|k| self.uint(values_at + 8 * k, 4) << 32 | self.uint(values_at + 8 * k + 4, 4)).collect()
            } else {
                (0..n).map(|k| self.uint(values_at + size * k, size)).collect()
            };
            tags.insert(tag, values);
        }
        let next = self.uint(at + head + count as usize * entry, field);
        let subifds = tags.get(&330).cloned().unwrap_or_default().iter().map(|&s| self.directory(s).0).collect();
        (Page { tags, subifds }, next)
    }
}

/// Every page of a TIFF file, in chain order.
pub fn pages(b: &[u8]) -> Vec<Page> {
    assert_eq!(&b[..2], b"II", "little-endian TIFF");
    let big = match u16::from_le_bytes([b[2], b[3]]) {
        42 => false,
        43 => true,
        other => panic!("not a TIFF: {other}"),
    };
    let r = Reader { b, big };
    let mut next = if big { r.uint(8, 8) } else { r.uint(4, 4) };
    let mut out = Vec::new();
    while next != 0 {
        let (page, n) = r.directory(next);
        out.push(page);
        next = n;
    }
    out
}

/// Whether the file is BigTIFF.
pub fn is_big(b: &[u8]) -> bool {
    u16::from_le_bytes([b[2], b[3]]) == 43
}
