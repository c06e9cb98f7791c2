//! `.nii`: a single-file NIfTI-1 header (348 bytes and the 4-byte extension flag) with
//! `vox_offset` 4096, then the bytes of `data`; dims fastest-first, up to 7 (the NIfTI-1
//! standard). Each dim is an i16.
//!
//! Where the axes are known (time, channels, z, y, x), they go where NIfTI wants them: x, y, z
//! on dims 1-3, time on 4, channels on 5 (dims of length 1 fill the gaps, which moves no byte),
//! with the voxel sizes in `pixdim` and their units in `xyzt_units`.

use super::{CARRIED_DATA_OFFSET, no_type, padded};
use crate::zarr::axes::{Axes, AxisKind, Unit};
use crate::zarr::dtype::DataType;

/// NIfTI's units (`xyzt_units`): its code, and the unit.
const SPACE_UNITS: [(u8, &str); 3] = [(1, "meter"), (2, "millimeter"), (3, "micrometer")];
const TIME_UNITS: [(u8, &str); 3] = [(8, "second"), (16, "millisecond"), (24, "microsecond")];

/// The NIfTI unit (code, unit) to give steps of `unit` in: the same where NIfTI has it, else
/// the nearest it has (nanometres in micrometres, minutes in seconds).
fn nifti_unit(unit: &Unit, table: &[(u8, &str); 3]) -> Option<(u8, Unit)> {
    let units: Vec<(u8, Unit)> = table.iter().filter_map(|&(code, name)| Unit::parse(name).map(|u| (code, u))).collect();
    if let Some(&same) = units.iter().find(|(_, u)| u.name == unit.name) {
        return Some(same);
    }
    units
        .iter()
        .filter(|(_, u)| u.quantity == unit.quantity)
        .min_by(|a, b| {
            let distance = |u: &Unit| (u.si / unit.si).log10().abs();
            distance(&a.1).total_cmp(&distance(&b.1))
        })
        .copied()
}

/// The NIfTI dims of each array axis, or why the axes cannot be put where NIfTI wants them.
/// `None` when the axes are not known: then dims are the array's, fastest first.
fn placed(shape: &[u64], axes: &Axes) -> Result<Option<Vec<usize>>, String> {
    let Some(stack) = axes.stack_positions().filter(|_| axes.len() == shape.len()) else { return Ok(None) };
    let n = shape.len();
    let mut dims = vec![0; n];
    dims[n - 1] = 1;
    dims[n - 2] = 2;
    for (axis, dim) in [(stack.z, 3), (stack.t, 4), (stack.c, 5)] {
        if let Some(axis) = axis {
            dims[axis] = dim;
        }
    }
    // The bytes are fastest-first in the array's order: the dims of axes longer than 1 must
    // rise as the axes go from last to first.
    let held: Vec<usize> = (0..n).rev().filter(|&a| shape[a] > 1 || a >= n - 2).map(|a| dims[a]).collect();
    if held.windows(2).any(|w| w[0] > w[1]) {
        return Err("NIfTI wants time on its 4th axis and channels on its 5th: this array holds its channels inside its time steps".into());
    }
    Ok(Some(dims))
}

pub fn header(dtype: &DataType, shape: &[u64], axes: &Axes) -> Result<Vec<u8>, String> {
    let code: i16 = match dtype {
        DataType::Bool | DataType::UInt8 => 2,
        DataType::Int16 => 4,
        DataType::Int32 => 8,
        DataType::Float32 => 16,
        DataType::Complex64 => 32,
        DataType::Float64 => 64,
        DataType::Int8 => 256,
        DataType::UInt16 => 512,
        DataType::UInt32 => 768,
        DataType::Int64 => 1024,
        DataType::UInt64 => 1280,
        DataType::Complex128 => 1792,
        _ => return Err(no_type("NIfTI-1", dtype)),
    };
    if shape.len() > 7 {
        return Err(format!("NIfTI-1 has at most 7 dimensions, not {}", shape.len()));
    }
    if shape.iter().any(|&n| n > i16::MAX as u64) {
        return Err(format!("NIfTI-1 axes are at most {} long", i16::MAX));
    }
    let mut dim = [1i16; 8];
    let mut pixdim = [1f32; 8];
    let mut units = 0u8;
    match placed(shape, axes)? {
        Some(dims) => {
            for (axis, &d) in dims.iter().enumerate() {
                dim[d] = shape[axis] as i16;
            }
            dim[0] = dims.iter().zip(shape).filter(|&(&d, &n)| n > 1 || d <= 2).map(|(&d, _)| d as i16).max().unwrap_or(2);
            // Voxel sizes: spatial steps in one NIfTI length unit, the time step in a time unit.
            if let Some((code, unit)) = axes.length_unit().and_then(|u| nifti_unit(&u, &SPACE_UNITS)) {
                units |= code;
                for (axis, &d) in dims.iter().enumerate().filter(|&(_, &d)| d <= 3) {
                    if let Some(step) = axes.step_in(axis, &unit) {
                        pixdim[d] = step as f32;
                    }
                }
            }
            let time = dims.iter().position(|&d| d == 4).filter(|&a| axes.kind(a) == AxisKind::Time);
            if let Some(t) = time
                && let Some((code, unit)) = axes.0[t].unit.and_then(|u| nifti_unit(&u, &TIME_UNITS))
                && let Some(step) = axes.step_in(t, &unit)
            {
                units |= code;
                pixdim[4] = step as f32;
            }
        }
        None => {
            dim[0] = shape.len() as i16;
            for (i, &n) in shape.iter().rev().enumerate() {
                dim[i + 1] = n as i16;
            }
        }
    }
    let mut h = vec![0u8; 352];
    let put = |h: &mut Vec<u8>, at: usize, bytes: &[u8]| h[at..at + bytes.len()].copy_from_slice(bytes);
    put(&mut h, 0, &348i32.to_le_bytes());
    h[38] = b'r';
    for (i, d) in dim.iter().enumerate() {
        put(&mut h, 40 + 2 * i, &d.to_le_bytes());
    }
    put(&mut h, 70, &code.to_le_bytes());
    put(&mut h, 72, &((dtype.size().unwrap_or(1) * 8) as i16).to_le_bytes());
    for (i, p) in pixdim.iter().enumerate() {
        put(&mut h, 76 + 4 * i, &p.to_le_bytes());
    }
    put(&mut h, 108, &(CARRIED_DATA_OFFSET as f32).to_le_bytes());
    h[123] = units;
    put(&mut h, 344, b"n+1\0");
    Ok(padded(h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::axes::Axis;

    fn i16_at(h: &[u8], at: usize) -> i16 {
        i16::from_le_bytes([h[at], h[at + 1]])
    }

    fn dims(h: &[u8]) -> Vec<i16> {
        (0..8).map(|i| i16_at(h, 40 + 2 * i)).collect()
    }

    fn pixdim(h: &[u8], i: usize) -> f32 {
        f32::from_le_bytes(h[76 + 4 * i..80 + 4 * i].try_into().unwrap())
    }

    #[test]
    fn the_header_lists_dims_fastest_first_and_puts_the_data_at_4096() {
        let unnamed = |n| Axes::named(None, n);
        let h = header(&DataType::Int16, &[4, 5, 6], &unnamed(3)).unwrap();
        assert_eq!(h.len() as u64, CARRIED_DATA_OFFSET);
        assert_eq!(i32::from_le_bytes(h[..4].try_into().unwrap()), 348);
        assert_eq!(dims(&h), vec![3, 6, 5, 4, 1, 1, 1, 1]);
        assert_eq!((i16_at(&h, 70), i16_at(&h, 72)), (4, 16));
        assert_eq!(f32::from_le_bytes(h[108..112].try_into().unwrap()), 4096.0);
        assert_eq!(&h[344..348], b"n+1\0");
        assert!(header(&DataType::Float16, &[4], &unnamed(1)).is_err());
        assert!(header(&DataType::UInt8, &[40000], &unnamed(1)).is_err());
        assert!(header(&DataType::UInt8, &[2; 8], &unnamed(8)).is_err());
    }

    fn image(names: &[&str]) -> Axes {
        let mut axes = Axes::named(Some(&names.iter().map(|n| Some(n.to_string())).collect::<Vec<_>>()), names.len());
        for a in &mut axes.0 {
            *a = match a.kind {
                AxisKind::Space => Axis { unit: Unit::parse("nanometer"), step: Some(500.0), ..a.clone() },
                AxisKind::Time => Axis { unit: Unit::parse("minute"), step: Some(2.0), ..a.clone() },
                _ => a.clone(),
            };
        }
        axes
    }

    #[test]
    fn time_goes_on_the_4th_dim_channels_on_the_5th_with_sizes_and_units() {
        // (c, z, y, x): channels on dim 5, time absent (1).
        let h = header(&DataType::UInt16, &[2, 3, 4, 5], &image(&["c", "z", "y", "x"])).unwrap();
        assert_eq!(dims(&h), vec![5, 5, 4, 3, 1, 2, 1, 1]);
        // Nanometres go in micrometres (NIfTI has no nanometre).
        assert_eq!((pixdim(&h, 1), pixdim(&h, 3)), (0.5, 0.5));
        assert_eq!(h[123], 3);
        // (t, z, y, x): minutes in seconds.
        let h = header(&DataType::UInt16, &[6, 3, 4, 5], &image(&["t", "z", "y", "x"])).unwrap();
        assert_eq!(dims(&h), vec![4, 5, 4, 3, 6, 1, 1, 1]);
        assert_eq!((pixdim(&h, 4), h[123]), (120.0, 3 | 8));
        // (t, c, z, y, x) with both longer than 1: time inside channels cannot be.
        assert!(header(&DataType::UInt16, &[2, 2, 3, 4, 5], &image(&["t", "c", "z", "y", "x"])).unwrap_err().contains("4th"));
        // One channel: fine.
        let h = header(&DataType::UInt16, &[2, 1, 3, 4, 5], &image(&["t", "c", "z", "y", "x"])).unwrap();
        assert_eq!(dims(&h), vec![4, 5, 4, 3, 2, 1, 1, 1]);
    }
}
