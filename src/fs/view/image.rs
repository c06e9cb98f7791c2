//! `image.ome.tif`: the OME-TIFF of an OME-NGFF image group (`headers::ometiff`), over its
//! levels' `data`. Made from the levels' current metadata whenever it is asked for (a growth,
//! a prepend or a write through a level is seen at once); its pixel bytes are read through
//! each level's `data`, with the same cache and read-ahead.

use super::{DataFile, ReadPattern};
use crate::fs::context::Context;
use crate::headers::ometiff::{OmeTiff, Pyramid};
use crate::zarr::ome::Image;
use crate::{Error, Result};

/// An image's OME-TIFF as its levels are now.
pub struct ImageFile {
    /// The levels it holds, largest first.
    levels: Vec<DataFile>,
    pub layout: OmeTiff,
}

impl ImageFile {
    /// The OME-TIFF of `image` (named `name`), its level arrays opened by `level` (by path
    /// within the group). `Ok(Err(why))` when the image cannot be one; errors of the store
    /// are errors.
    pub fn new(name: &str, image: &Image, level: impl Fn(&str) -> Result<DataFile>) -> Result<std::result::Result<ImageFile, String>> {
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
        Ok(OmeTiff::new(&pyramid)
            .map(|layout| ImageFile { levels: selection.levels.iter().filter_map(|&i| files[i].clone()).collect(), layout }))
    }

    /// The level arrays it reads, largest first.
    pub fn levels(&self) -> &[DataFile] {
        &self.levels
    }

    /// Bytes `offset .. offset + size` (short at the end); `reads` is the handle's read pattern
    /// of each level.
    pub fn read(&self, cx: &Context, reads: Option<&[ReadPattern]>, offset: u64, size: u32) -> Result<Vec<u8>> {
        let end = offset.saturating_add(u64::from(size)).min(self.layout.file_len());
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let spans = self.layout.spans();
        let mut at = offset;
        while at < end {
            match spans.iter().find(|&&(_, start, len)| at >= start && at < start + len) {
                Some(&(level, start, len)) => {
                    let until = end.min(start + len);
                    let file = &self.levels[level];
                    let want = (until - at) as usize;
                    let mut bytes = file.view.read(cx, &file.array, reads.and_then(|r| r.get(level)), at - start, want as u32)?;
                    // A level that shrank since the layout was made: its end reads as zeros.
                    bytes.resize(want, 0);
                    out.extend_from_slice(&bytes);
                    at = until;
                }
                None => {
                    let next = spans.iter().map(|&(_, start, _)| start).filter(|&s| s > at).min().unwrap_or(end).min(end);
                    out.extend(self.layout.own_bytes(at, next));
                    at = next;
                }
            }
        }
        Ok(out)
    }

    /// Bytes of the file that are its own (headers and directories), for `du`.
    pub fn own_len(&self) -> u64 {
        self.layout.file_len() - self.layout.spans().iter().map(|&(_, _, len)| len).sum::<u64>()
    }
}
