//! TIFF image file directories (IFDs), classic or BigTIFF, built as pieces that render any byte
//! range on demand: a directory of a plane of 40 000 one-row strips lists 40 000 strip offsets,
//! and a reader asking for 4 KiB of them gets those 4 KiB, computed, not the list built.

/// TIFF field types.
pub const ASCII: u16 = 2;
pub const SHORT: u16 = 3;
pub const LONG: u16 = 4;
pub const RATIONAL: u16 = 5;
pub const LONG8: u16 = 16;
pub const DOUBLE: u16 = 12;
pub const IFD: u16 = 13;
pub const IFD8: u16 = 18;

fn type_size(kind: u16) -> u64 {
    match kind {
        ASCII => 1,
        SHORT => 2,
        LONG | IFD => 4,
        _ => 8,
    }
}

/// Numbers `first, first + step, ...` (`count` of them), the last one `last` when given (the
/// short last strip of a plane).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Seq {
    pub first: u64,
    pub step: u64,
    pub count: u64,
    pub last: Option<u64>,
}

impl Seq {
    pub fn one(value: u64) -> Seq {
        Seq { first: value, step: 0, count: 1, last: None }
    }

    fn get(&self, i: u64) -> u64 {
        match self.last {
            Some(last) if i + 1 == self.count => last,
            _ => self.first + i * self.step,
        }
    }
}

/// An entry's values.
#[derive(Clone, Debug)]
pub enum Values {
    /// Encoded already (ASCII text with its NUL, rationals).
    Bytes(Vec<u8>),
    /// Numbers of the entry's type.
    Numbers(Seq),
    /// Held elsewhere in the file, at this offset (a description too long to repeat).
    At(u64),
}

#[derive(Clone, Debug)]
pub struct Entry {
    pub tag: u16,
    pub kind: u16,
    pub count: u64,
    pub values: Values,
}

impl Entry {
    pub fn short(tag: u16, value: u16) -> Entry {
        Entry { tag, kind: SHORT, count: 1, values: Values::Numbers(Seq::one(u64::from(value))) }
    }

    pub fn long(tag: u16, value: u64) -> Entry {
        Entry { tag, kind: LONG, count: 1, values: Values::Numbers(Seq::one(value)) }
    }

    /// Offsets or byte counts: LONG in classic TIFF, LONG8 in BigTIFF.
    pub fn offsets(tag: u16, big: bool, seq: Seq) -> Entry {
        Entry { tag, kind: if big { LONG8 } else { LONG }, count: seq.count, values: Values::Numbers(seq) }
    }

    pub fn rational(tag: u16, (num, den): (u32, u32)) -> Entry {
        let mut b = num.to_le_bytes().to_vec();
        b.extend_from_slice(&den.to_le_bytes());
        Entry { tag, kind: RATIONAL, count: 1, values: Values::Bytes(b) }
    }

    pub fn shorts(tag: u16, values: &[u16]) -> Entry {
        Entry { tag, kind: SHORT, count: values.len() as u64, values: Values::Bytes(values.iter().flat_map(|v| v.to_le_bytes()).collect()) }
    }

    pub fn doubles(tag: u16, values: &[f64]) -> Entry {
        Entry {
            tag,
            kind: DOUBLE,
            count: values.len() as u64,
            values: Values::Bytes(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
        }
    }

    /// Text, NUL-terminated.
    pub fn ascii(tag: u16, text: &str) -> Entry {
        let mut bytes = text.as_bytes().to_vec();
        bytes.push(0);
        Entry { tag, kind: ASCII, count: bytes.len() as u64, values: Values::Bytes(bytes) }
    }

    fn len(&self) -> u64 {
        self.count * type_size(self.kind)
    }
}

/// A run of a directory's bytes.
#[derive(Clone, Debug)]
enum Piece {
    Bytes(Vec<u8>),
    Numbers { seq: Seq, width: u64 },
}

impl Piece {
    fn len(&self) -> u64 {
        match self {
            Piece::Bytes(b) => b.len() as u64,
            Piece::Numbers { seq, width } => seq.count * width,
        }
    }

    fn render(&self, from: u64, to: u64, out: &mut Vec<u8>) {
        match self {
            Piece::Bytes(b) => out.extend_from_slice(&b[from as usize..to as usize]),
            Piece::Numbers { seq, width } => {
                let mut at = from;
                while at < to {
                    let (i, within) = (at / width, at % width);
                    let bytes = seq.get(i).to_le_bytes();
                    let n = (width - within).min(to - at);
                    out.extend_from_slice(&bytes[within as usize..(within + n) as usize]);
                    at += n;
                }
            }
        }
    }
}

/// One directory laid out at a known offset: its entries, the pointer to the next, and the
/// values that do not fit in an entry right after it.
#[derive(Clone, Debug)]
pub struct Directory {
    pieces: Vec<Piece>,
    len: u64,
}

impl Directory {
    /// The bytes a directory of `entries` takes (out-of-line values included).
    pub fn size(entries: &[Entry], big: bool) -> u64 {
        let (head, entry, tail, field) = if big { (8, 20, 8, 8) } else { (2, 12, 4, 4) };
        let spilled: u64 = entries.iter().filter(|e| e.len() > field && !matches!(e.values, Values::At(_))).map(spilled_len).sum();
        head + entry * entries.len() as u64 + tail + spilled
    }

    /// `entries` (in tag order) laid out at file offset `at`, pointing at `next` (0: the last).
    pub fn new(entries: &[Entry], big: bool, at: u64, next: u64) -> Directory {
        let field = if big { 8 } else { 4 };
        let mut head = Vec::new();
        if big {
            head.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        } else {
            head.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        }
        let mut spilled = Vec::new();
        let mut spill_at = at + if big { 8 + 20 * entries.len() as u64 + 8 } else { 2 + 12 * entries.len() as u64 + 4 };
        for e in entries {
            head.extend_from_slice(&e.tag.to_le_bytes());
            head.extend_from_slice(&e.kind.to_le_bytes());
            if big {
                head.extend_from_slice(&e.count.to_le_bytes());
            } else {
                head.extend_from_slice(&(e.count as u32).to_le_bytes());
            }
            let mut value = Vec::with_capacity(field as usize);
            match &e.values {
                Values::At(offset) => value.extend_from_slice(&offset.to_le_bytes()[..field as usize]),
                _ if e.len() > field => {
                    value.extend_from_slice(&spill_at.to_le_bytes()[..field as usize]);
                    let piece = match &e.values {
                        Values::Bytes(b) => Piece::Bytes(b.clone()),
                        Values::Numbers(seq) => Piece::Numbers { seq: *seq, width: type_size(e.kind) },
                        Values::At(_) => unreachable!("handled above"),
                    };
                    let pad = spilled_len(e) - e.len();
                    spill_at += spilled_len(e);
                    spilled.push(piece);
                    if pad > 0 {
                        spilled.push(Piece::Bytes(vec![0; pad as usize]));
                    }
                }
                Values::Bytes(b) => value.extend_from_slice(b),
                Values::Numbers(seq) => {
                    let width = type_size(e.kind) as usize;
                    for i in 0..seq.count {
                        value.extend_from_slice(&seq.get(i).to_le_bytes()[..width]);
                    }
                }
            }
            value.resize(field as usize, 0);
            head.extend_from_slice(&value);
        }
        if big {
            head.extend_from_slice(&next.to_le_bytes());
        } else {
            head.extend_from_slice(&(next as u32).to_le_bytes());
        }
        let mut pieces = vec![Piece::Bytes(head)];
        pieces.extend(spilled);
        let len = pieces.iter().map(Piece::len).sum();
        Directory { pieces, len }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// Bytes `from..to` of the directory (offsets within it), appended to `out`.
    pub fn render(&self, from: u64, to: u64, out: &mut Vec<u8>) {
        let mut start = 0;
        for p in &self.pieces {
            let end = start + p.len();
            if end > from && start < to {
                p.render(from.max(start) - start, to.min(end) - start, out);
            }
            start = end;
        }
    }
}

/// An out-of-line value's length, padded to a word (TIFF wants values on even offsets; 8
/// keeps LONG8 arrays aligned).
fn spilled_len(e: &Entry) -> u64 {
    e.len().next_multiple_of(8)
}

/// A resolution as a TIFF rational: `per_unit` pixels per unit, to 6 significant digits.
pub fn rational(per_unit: f64) -> (u32, u32) {
    if !per_unit.is_finite() || per_unit <= 0.0 {
        return (1, 1);
    }
    let mut den: u64 = 1;
    while per_unit * (den as f64) < 1e6 && den < 1_000_000 {
        den *= 10;
    }
    let num = (per_unit * den as f64).round();
    if num > f64::from(u32::MAX) {
        return (u32::MAX, (f64::from(u32::MAX) / per_unit).round().max(1.0) as u32);
    }
    let (num, den) = (num.max(1.0) as u64, den);
    let gcd = {
        let (mut a, mut b) = (num, den);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    ((num / gcd) as u32, (den / gcd) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(d: &Directory) -> Vec<u8> {
        let mut out = Vec::new();
        d.render(0, d.len(), &mut out);
        out
    }

    #[test]
    fn values_that_do_not_fit_follow_the_directory() {
        let strips = Seq { first: 1000, step: 100, count: 3, last: Some(50) };
        let entries = [Entry::long(256, 7), Entry::offsets(273, false, strips), Entry::rational(282, (72, 1))];
        let d = Directory::new(&entries, false, 400, 0);
        assert_eq!(d.len(), Directory::size(&entries, false));
        let b = bytes(&d);
        assert_eq!(u16::from_le_bytes([b[0], b[1]]), 3);
        // StripOffsets: 3 LONGs at 400 + 2 + 36 + 4 = 442.
        let e = &b[2 + 12..2 + 24];
        assert_eq!(u32::from_le_bytes(e[8..12].try_into().unwrap()), 442);
        let values: Vec<u32> = (0..3).map(|i| u32::from_le_bytes(b[42 + 4 * i..46 + 4 * i].try_into().unwrap())).collect();
        assert_eq!(values, vec![1000, 1100, 50]);
        // The rational after the (padded) offsets: 442 + 16.
        let r = &b[2 + 24..2 + 36];
        assert_eq!(u32::from_le_bytes(r[8..12].try_into().unwrap()), 458);
        assert_eq!(&b[58..66], &[72, 0, 0, 0, 1, 0, 0, 0]);
        // Any range renders as the same bytes as the whole.
        let mut part = Vec::new();
        d.render(43, 61, &mut part);
        assert_eq!(part, b[43..61]);
    }

    #[test]
    fn bigtiff_keeps_eight_bytes_inline() {
        let entries = [Entry::offsets(273, true, Seq::one(1 << 40)), Entry::rational(282, (3, 1))];
        let d = Directory::new(&entries, true, 16, 99);
        let b = bytes(&d);
        assert_eq!(d.len(), 8 + 40 + 8);
        assert_eq!(u64::from_le_bytes(b[8 + 12..8 + 20].try_into().unwrap()), 1 << 40);
        assert_eq!(u64::from_le_bytes(b[48..56].try_into().unwrap()), 99);
    }

    #[test]
    fn rationals_keep_six_digits() {
        assert_eq!(rational(20000.0), (20000, 1));
        let (n, d) = rational(1.0 / 3.0);
        assert!(((n as f64 / d as f64) - 1.0 / 3.0).abs() < 1e-6);
        assert_eq!(rational(f64::NAN), (1, 1));
    }
}
