//! `dataset.nc`: the netCDF classic file of a group's arrays (`headers::netcdf`), each variable
//! its array's `data` made big-endian as it is copied into the reply.

use serde_json::Value;

use super::DataFile;
use super::group::{GroupFile, Span};
use crate::fs::context::Context;
use crate::headers::netcdf::{self, Int64Range, Source};
use crate::zarr::metadata::ZarrFormat;

/// An array of the group: its name, its file and its attributes.
pub struct Member {
    pub name: String,
    pub file: DataFile,
    pub attributes: Value,
}

/// The `dataset.nc` of a group with `attributes` and arrays `members`, or why there is none.
pub fn build(cx: &Context, attributes: &Value, members: Vec<Member>) -> std::result::Result<GroupFile, String> {
    let arrays: Vec<_> = members.iter().map(|m| m.file.array.array()).collect();
    // An int64 array's values as the mount has them (its own writes included).
    let values: Vec<_> = members.iter().map(|m| move |missing: Option<i64>| int64_range(cx, &m.file, missing)).collect();
    let sources: Vec<Source> = members
        .iter()
        .zip(&arrays)
        .zip(&values)
        .map(|((m, a), v)| Source {
            name: &m.name,
            dtype: &a.meta.dtype,
            shape: &a.meta.shape,
            dimension_names: a.meta.dimension_names.as_deref(),
            attributes: &m.attributes,
            fill: (a.meta.format == ZarrFormat::V2).then(|| a.meta.document.get("fill_value")).flatten(),
            chunks: a.meta.chunk_count(),
            values: Some(v as &dyn Fn(Option<i64>) -> Option<Int64Range>),
        })
        .collect();
    let plan = netcdf::plan(attributes, &sources)?;
    let spans = plan
        .file
        .data()
        .iter()
        .zip(&plan.elements)
        .enumerate()
        .map(|(i, (&(start, len), &element))| Span { array: i, start, len, element })
        .collect();
    let mut members: Vec<Option<Member>> = members.into_iter().map(Some).collect();
    let files = plan.sources.iter().filter_map(|&s| members[s].take().map(|m| m.file)).collect();
    Ok(GroupFile::new(files, Box::new(plan.file), spans))
}

/// The range of an int64 array's values but `missing`, read through its `data` a few MiB at a
/// time; `None` when they cannot be read.
fn int64_range(cx: &Context, file: &DataFile, missing: Option<i64>) -> Option<Int64Range> {
    const PIECE: u64 = 4 << 20;
    let len = file.array.array().meta.byte_len();
    let mut range = None;
    let mut at = 0;
    while at < len {
        let bytes = file.view.read(cx, &file.array, None, at, PIECE.min(len - at) as u32).ok()?;
        if bytes.is_empty() {
            break;
        }
        netcdf::widen(&mut range, &bytes, missing);
        at += bytes.len() as u64;
    }
    Some(range)
}
