//! `dataset.nc`: the netCDF classic file of a group's arrays (`headers::netcdf`), each variable
//! its array's `data` made big-endian as it is copied into the reply.

use serde_json::Value;

use super::DataFile;
use super::group::{GroupFile, Span};
use crate::headers::netcdf::{self, Source};
use crate::zarr::metadata::ZarrFormat;

/// An array of the group: its name, its file and its attributes.
pub struct Member {
    pub name: String,
    pub file: DataFile,
    pub attributes: Value,
}

/// The `dataset.nc` of a group with `attributes` and arrays `members`, or why there is none.
pub fn build(attributes: &Value, members: Vec<Member>) -> std::result::Result<(GroupFile, Vec<String>), String> {
    let arrays: Vec<_> = members.iter().map(|m| m.file.array.array()).collect();
    let sources: Vec<Source> = members
        .iter()
        .zip(&arrays)
        .map(|(m, a)| Source {
            name: &m.name,
            dtype: &a.meta.dtype,
            shape: &a.meta.shape,
            dimension_names: a.meta.dimension_names.as_deref(),
            attributes: &m.attributes,
            fill: (a.meta.format == ZarrFormat::V2).then(|| a.meta.document.get("fill_value")).flatten(),
        })
        .collect();
    let plan = netcdf::plan(attributes, &sources)?;
    let spans = plan
        .sources
        .iter()
        .zip(plan.file.data())
        .enumerate()
        .map(|(i, (&source, &(start, len)))| Span { array: i, start, len, swap: arrays[source].meta.item_size().max(1) })
        .collect();
    let mut members: Vec<Option<Member>> = members.into_iter().map(Some).collect();
    let files = plan.sources.iter().filter_map(|&s| members[s].take().map(|m| m.file)).collect();
    Ok((GroupFile::new(files, Box::new(plan.file), spans), plan.left_out))
}
