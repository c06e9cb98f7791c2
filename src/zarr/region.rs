//! Boxes of elements: a flat C-order byte range of an array as a few boxes, and strided copies
//! between C-order buffers (chunk to file range, inner chunk to shard).

use std::ops::ControlFlow;

/// A half-open range of elements in the C-order flattening of an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlatRange {
    pub start: u64,
    pub end: u64,
}

/// A box: per axis, `start..end`.
pub type Region = Vec<(u64, u64)>;

impl FlatRange {
    /// The boxes whose union is exactly this range (at most `2 * ndim - 1` of them), in order.
    pub fn boxes(&self, shape: &[u64]) -> Vec<Region> {
        let mut out = Vec::new();
        if self.start < self.end {
            decompose(shape, self.start, self.end, &mut Vec::new(), &mut out);
        }
        out
    }
}

fn decompose(shape: &[u64], lo: u64, hi: u64, prefix: &mut Region, out: &mut Vec<Region>) {
    let Some((&_, rest)) = shape.split_first() else {
        out.push(prefix.clone());
        return;
    };
    let inner: u64 = rest.iter().product();
    let full_rest = |r0: u64, r1: u64, prefix: &Region| {
        let mut b = prefix.clone();
        b.push((r0, r1));
        b.extend(rest.iter().map(|&n| (0, n)));
        b
    };
    let (r0, o0) = (lo / inner, lo % inner);
    let (r1, o1) = (hi / inner, hi % inner);
    if r0 == r1 {
        prefix.push((r0, r0 + 1));
        decompose(rest, o0, o1, prefix, out);
        prefix.pop();
        return;
    }
    let mut first_full = r0;
    if o0 != 0 {
        prefix.push((r0, r0 + 1));
        decompose(rest, o0, inner, prefix, out);
        prefix.pop();
        first_full += 1;
    }
    if first_full < r1 {
        out.push(full_rest(first_full, r1, prefix));
    }
    if o1 != 0 {
        prefix.push((r1, r1 + 1));
        decompose(rest, 0, o1, prefix, out);
        prefix.pop();
    }
}

/// A box of indices — grid cells or elements — `start[a]..end[a]` on each axis (zarrs'
/// `ArraySubset` is the model), visited in C order (last axis fastest).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexBox {
    pub start: Vec<u64>,
    pub end: Vec<u64>,
}

impl IndexBox {
    /// Every index of `shape`.
    pub fn whole(shape: &[u64]) -> IndexBox {
        IndexBox { start: vec![0; shape.len()], end: shape.to_vec() }
    }

    /// Indices `from..to` along axis 0 and all of `shape` along the others: a band of a chunk
    /// grid, or rows of an array.
    pub fn band(shape: &[u64], from: u64, to: u64) -> IndexBox {
        let mut b = IndexBox::whole(shape);
        if let (Some(s), Some(e)) = (b.start.first_mut(), b.end.first_mut()) {
            (*s, *e) = (from, to.min(*e));
        }
        b
    }

    /// The box of a region (per axis `start..end`).
    pub fn of_region(region: &[(u64, u64)]) -> IndexBox {
        IndexBox { start: region.iter().map(|r| r.0).collect(), end: region.iter().map(|r| r.1).collect() }
    }

    /// Call `f` for every index in the box.
    pub fn for_each(&self, mut f: impl FnMut(&[u64])) {
        let _ = self.try_for_each(|c| {
            f(c);
            ControlFlow::Continue(())
        });
    }

    /// `for_each`, stopping when `f` breaks.
    pub fn try_for_each(&self, mut f: impl FnMut(&[u64]) -> ControlFlow<()>) -> ControlFlow<()> {
        if self.start.iter().zip(&self.end).any(|(s, e)| s >= e) {
            return ControlFlow::Continue(());
        }
        let mut index = self.start.clone();
        loop {
            f(&index)?;
            let mut axis = index.len();
            loop {
                if axis == 0 {
                    return ControlFlow::Continue(());
                }
                axis -= 1;
                index[axis] += 1;
                if index[axis] < self.end[axis] {
                    break;
                }
                index[axis] = self.start[axis];
            }
        }
    }

    /// Every index in the box, in C order.
    pub fn indices(&self) -> Vec<Vec<u64>> {
        let mut out = Vec::new();
        self.for_each(|c| out.push(c.to_vec()));
        out
    }
}

/// C-order strides, in elements, of an array of `shape`.
pub fn c_strides(shape: &[u64]) -> Vec<u64> {
    let mut strides = vec![1u64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

/// A view of a box inside a C-order buffer: element offset of the box origin and the strides.
#[derive(Clone, Debug)]
pub struct Strided {
    pub offset: u64,
    pub strides: Vec<u64>,
}

impl Strided {
    /// The box starting at `origin` of a C-order buffer of `shape`, with `base` subtracted from
    /// every offset (for buffers that hold a flat range starting at element `base`).
    pub fn of(shape: &[u64], origin: &[u64], base: u64) -> Strided {
        let strides = c_strides(shape);
        let offset = origin.iter().zip(&strides).map(|(o, s)| o * s).sum::<u64>() - base;
        Strided { offset, strides }
    }
}

/// Merge axes that are contiguous in both views, so copies run as long as possible.
fn coalesce(extent: &[u64], a: &Strided, b: &Strided) -> (Vec<u64>, Vec<u64>, Vec<u64>) {
    let mut ext: Vec<u64> = Vec::with_capacity(extent.len());
    let mut sa: Vec<u64> = Vec::new();
    let mut sb: Vec<u64> = Vec::new();
    for ((&e, &stride_a), &stride_b) in extent.iter().zip(&a.strides).zip(&b.strides) {
        if let (Some(&last_ext), Some(&la), Some(&lb)) = (ext.last(), sa.last(), sb.last())
            && stride_a * e == la
            && stride_b * e == lb
        {
            let n = ext.len() - 1;
            ext[n] = last_ext * e;
            sa[n] = stride_a;
            sb[n] = stride_b;
            continue;
        }
        ext.push(e);
        sa.push(stride_a);
        sb.push(stride_b);
    }
    (ext, sa, sb)
}

/// Visit each contiguous run of the box: `f(src_elem_offset, dst_elem_offset, run_len)`.
fn for_each_run(extent: &[u64], src: &Strided, dst: &Strided, mut f: impl FnMut(u64, u64, u64)) {
    if extent.contains(&0) {
        return;
    }
    if extent.is_empty() {
        f(src.offset, dst.offset, 1);
        return;
    }
    let (ext, ss, ds) = coalesce(extent, src, dst);
    let n = ext.len();
    let run = ext[n - 1];
    debug_assert!(ss[n - 1] == 1 && ds[n - 1] == 1);
    let mut idx = vec![0u64; n - 1];
    loop {
        let so = src.offset + idx.iter().zip(&ss).map(|(i, s)| i * s).sum::<u64>();
        let d = dst.offset + idx.iter().zip(&ds).map(|(i, s)| i * s).sum::<u64>();
        f(so, d, run);
        let mut k = n - 1;
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < ext[k] {
                break;
            }
            idx[k] = 0;
        }
    }
}

/// Visit each contiguous run of the box `extent` of `view`: `f(first element, elements)`.
pub fn box_runs(view: &Strided, extent: &[u64], mut f: impl FnMut(u64, u64)) {
    for_each_run(extent, view, view, |_, d, n| f(d, n));
}

/// Copy a box of `extent` elements of `item` bytes from `src` to `dst`.
pub fn copy_box(src: &[u8], src_view: &Strided, dst: &mut [u8], dst_view: &Strided, extent: &[u64], item: usize) {
    for_each_run(extent, src_view, dst_view, |s, d, n| {
        let (s, d, n) = (s as usize * item, d as usize * item, n as usize * item);
        dst[d..d + n].copy_from_slice(&src[s..s + n]);
    });
}

/// Fill a box of `dst` with the one-element pattern `fill`.
pub fn fill_box(dst: &mut [u8], dst_view: &Strided, extent: &[u64], fill: &[u8]) {
    let item = fill.len();
    for_each_run(extent, dst_view, dst_view, |_, d, n| {
        let (d, n) = (d as usize * item, n as usize * item);
        fill_pattern(&mut dst[d..d + n], fill);
    });
}

/// Repeat `fill` over `dst` (whose length is a multiple of it).
pub fn fill_pattern(dst: &mut [u8], fill: &[u8]) {
    if fill.iter().all(|&b| b == fill[0]) {
        dst.fill(fill.first().copied().unwrap_or(0));
    } else {
        for c in dst.chunks_exact_mut(fill.len()) {
            c.copy_from_slice(fill);
        }
    }
}

/// Whether `bytes` is `fill` repeated, byte for byte (compared in wide blocks, not element by
/// element).
pub fn is_filled(bytes: &[u8], fill: &[u8]) -> bool {
    let block = fill.repeat(512usize.div_ceil(fill.len().max(1)));
    let mut blocks = bytes.chunks_exact(block.len());
    blocks.all(|b| b == block.as_slice()) && blocks.remainder() == &block[..blocks.remainder().len()]
}

/// A buffer of `n` elements of fill; ENOMEM when the memory cannot be had.
pub fn filled(n: usize, fill: &[u8]) -> crate::Result<Vec<u8>> {
    let len = n.checked_mul(fill.len()).ok_or_else(crate::limits::out_of_memory)?;
    let mut v = crate::limits::zeroed(len)?;
    // Zeroed memory comes from the allocator as is: no second pass.
    if fill.iter().any(|&b| b != 0) {
        fill_pattern(&mut v, fill);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn index_boxes_visit_in_c_order() {
        let band = IndexBox::band(&[4, 2, 3], 1, 3);
        let all = band.indices();
        assert_eq!(all.len(), 2 * 2 * 3);
        assert_eq!((all[0].as_slice(), all[1].as_slice(), all[3].as_slice()), (&[1, 0, 0][..], &[1, 0, 1][..], &[1, 1, 0][..]));
        assert_eq!(all.last().unwrap(), &[2, 1, 2]);
        assert!(all.windows(2).all(|w| w[0] < w[1]));
        // An empty axis makes an empty box; a 0-d box has one index.
        assert!(IndexBox::band(&[4, 0], 0, 4).indices().is_empty());
        assert!(IndexBox::band(&[4, 2], 3, 3).indices().is_empty());
        assert_eq!(IndexBox::whole(&[]).indices(), vec![Vec::<u64>::new()]);
        assert_eq!(IndexBox::of_region(&[(2, 4), (5, 6)]).indices(), vec![vec![2, 5], vec![3, 5]]);
    }

    fn flatten(shape: &[u64], b: &Region) -> Vec<u64> {
        let strides = c_strides(shape);
        let mut out = Vec::new();
        let extent: Vec<u64> = b.iter().map(|(s, e)| e - s).collect();
        let origin: Vec<u64> = b.iter().map(|(s, _)| *s).collect();
        let view = Strided { offset: origin.iter().zip(&strides).map(|(o, s)| o * s).sum(), strides };
        for_each_run(&extent, &view, &view, |s, _, n| out.extend(s..s + n));
        out
    }

    proptest! {
        #[test]
        fn boxes_cover_exactly_the_range(shape in proptest::collection::vec(1u64..5, 0..5), a in 0u64..700, len in 0u64..700) {
            let total: u64 = shape.iter().product();
            let start = a.min(total);
            let end = (start + len).min(total);
            let boxes = FlatRange { start, end }.boxes(&shape);
            prop_assert!(boxes.len() <= (2 * shape.len()).max(1));
            let covered: Vec<u64> = boxes.iter().flat_map(|b| flatten(&shape, b)).collect();
            prop_assert_eq!(covered, (start..end).collect::<Vec<_>>());
        }
    }

    #[test]
    fn copy_box_moves_a_sub_block() {
        // 3x4 source, copy the 2x2 block at (1,1) into a 2x3 destination at (0,1).
        let src: Vec<u8> = (0..12).collect();
        let mut dst = vec![0u8; 6];
        copy_box(&src, &Strided::of(&[3, 4], &[1, 1], 0), &mut dst, &Strided::of(&[2, 3], &[0, 1], 0), &[2, 2], 1);
        assert_eq!(dst, [0, 5, 6, 0, 9, 10]);
        let mut dst = vec![0u8; 6];
        fill_box(&mut dst, &Strided::of(&[2, 3], &[1, 0], 0), &[1, 3], &[7]);
        assert_eq!(dst, [0, 0, 0, 7, 7, 7]);
    }
}
