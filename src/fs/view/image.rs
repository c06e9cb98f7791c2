//! `image.ome.tif`: the OME-TIFF of an OME-NGFF image group (`headers::ometiff`), over its
//! levels' `data`, made from the levels' current metadata.

use super::DataFile;
use super::group::{GroupFile, Span};
use crate::headers::Element;
use crate::headers::ometiff::{OmeTiff, Pyramid};
use crate::zarr::ome::Image;
use crate::{Error, Result};

/// The OME-TIFF of `image` (named `name`), its level arrays opened by `level` (by path within
/// the group). `Ok(Err(why))` when the image cannot be one; errors of the store are errors.
pub fn build(name: &str, image: &Image, level: impl Fn(&str) -> Result<DataFile>) -> Result<std::result::Result<GroupFile, String>> {
    let mut files = Vec::new();
    let mut arrays = Vec::new();
    for l in &image.levels {
        match level(&l.path) {
            Ok(file) => {
                let array = file.array.array();
                arrays.push(Ok((array.meta.dtype.clone(), array.meta.shape.clone())));
                files.push(Some(file));
            }
            Err(Error::Io(e)) => return Err(Error::Io(e)),
            Err(Error::NotFound) => {
                arrays.push(Err("no array there".to_string()));
                files.push(None);
            }
            Err(e) => {
                arrays.push(Err(e.to_string()));
                files.push(None);
            }
        }
    }
    let selection = match image.select(&arrays) {
        Ok(s) => s,
        Err(why) => return Ok(Err(why)),
    };
    let shapes = selection.levels.iter().filter_map(|&i| arrays[i].as_ref().ok().map(|(_, shape)| shape.clone())).collect();
    let Some(Ok((dtype, _))) = arrays.first() else { return Ok(Err("level 0 cannot be read".into())) };
    let axes = image.level_axes(0);
    let pyramid = Pyramid { dtype, name, axes: &axes, channels: &image.channels, shapes };
    Ok(OmeTiff::new(&pyramid).map(|tiff| {
        let spans = tiff.spans().into_iter().map(|(array, start, len)| Span { array, start, len, element: Element::Copied }).collect();
        let levels = selection.levels.iter().filter_map(|&i| files[i].clone()).collect();
        GroupFile::new(levels, Box::new(tiff), spans)
    }))
}
