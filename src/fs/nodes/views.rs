//! The views made from a node and kept: an array's header views (their layout, with the axes an
//! image gives it and the georeference its group's coordinate arrays give it), a group's OME-TIFF
//! and `dataset.nc`. Each is made once and made again when the arrays it was made from change.

use std::sync::Arc;
use std::time::Instant;

use super::{DirState, Nodes};
use crate::error::lock;
use crate::fs::context::Context;
use crate::fs::view::DataFile;
use crate::fs::view::group::GroupFile;
use crate::headers::{GroupView, HeaderFormat, Layout};
use crate::store;
use crate::zarr::axes::Axes;
use crate::zarr::geo::Georeference;
use crate::zarr::metadata::{Attributes, NodeMetadata, ZarrFormat};
use crate::zarr::node::is_hidden;
use crate::zarr::ome::Image;
use crate::{Error, Result};

/// A group view made (or why there is none), when, and at which count of layout changes.
pub(super) type MadeGroupFile = (std::result::Result<Arc<GroupFile>, String>, Instant, u64);

/// An array's georeference, the arrays (and their metadata) it was made from, and when.
#[derive(Clone)]
pub(super) struct MadeGeoreference {
    geo: Option<Arc<Georeference>>,
    from: Vec<(DataFile, Arc<crate::zarr::array::Array>)>,
    at: Instant,
}

/// The arrays of a group, as `zarr::geo` asks for them: through the mount's nodes and cache;
/// each array used is noted, so that a change of its metadata makes the georeference again.
struct NodeSiblings<'a> {
    nodes: &'a Nodes,
    cx: &'a Context,
    parent: String,
    used: Vec<(DataFile, Arc<crate::zarr::array::Array>)>,
}

impl NodeSiblings<'_> {
    fn file(&mut self, name: &str) -> Option<DataFile> {
        let file = match self.nodes.dir_state(self.cx, &store::join(&self.parent, name)) {
            Ok(DirState::Array(file)) => file,
            _ => return None,
        };
        if !self.used.iter().any(|(f, _)| Arc::ptr_eq(&f.array, &file.array)) {
            self.used.push((file.clone(), file.array.array()));
        }
        Some(file)
    }
}

impl crate::zarr::geo::Siblings for NodeSiblings<'_> {
    fn meta(&mut self, name: &str) -> Option<(Vec<u64>, serde_json::Value)> {
        let file = self.file(name)?;
        let array = file.array.array();
        let attributes = self.nodes.attributes_of(self.cx, &store::join(&self.parent, name), &array).ok()?;
        Some((array.meta.shape.clone(), attributes))
    }

    fn values(&mut self, name: &str) -> Option<Vec<f64>> {
        let file = self.file(name)?;
        let array = file.array.array();
        let (len, mut bytes) = (array.meta.byte_len(), Vec::new());
        while (bytes.len() as u64) < len {
            let want = (len - bytes.len() as u64).min(1 << 20) as u32;
            let chunk = file.view.read(self.cx, &file.array, None, bytes.len() as u64, want).ok()?;
            if chunk.is_empty() {
                break;
            }
            bytes.extend(chunk);
        }
        bytes.truncate(len as usize);
        crate::zarr::geo::values_of(&bytes, &array.meta.dtype)
    }
}

/// A group of more children than this shows no `dataset.nc` (it would read every one's metadata
/// to list the group).
const MOST_DATASET_CHILDREN: usize = 1000;

/// How many group views are kept made.
const GROUP_FILES_KEPT: std::num::NonZeroUsize = std::num::NonZeroUsize::new(1024).unwrap();

impl Nodes {
    /// What is known of the axes of the array at `path`: where it is a level of the image its
    /// parent group is, the image's axes with that level's steps; else its own axis names.
    pub fn axes(&self, cx: &Context, path: &str, file: &DataFile) -> Result<Axes> {
        let array = file.array.array();
        let ndim = array.meta.shape.len();
        if let Some((parent, name)) = path.rsplit_once('/').or(if path.is_empty() { None } else { Some(("", path)) })
            && let DirState::Group(info) = self.dir_state(cx, parent)?
            && let Some(Ok(image)) = info.image.as_deref()
            && let Some(level) = image.level_of(name)
            && image.axes.len() == ndim
        {
            return Ok(image.level_axes(level));
        }
        Ok(Axes::named(array.meta.dimension_names.as_deref(), ndim))
    }

    /// The own bytes of the array at `path`'s `format` view, when the mount shows that view
    /// and the format can express the array; else why not.
    pub fn view_layout(
        &self,
        cx: &Context,
        path: &str,
        file: &DataFile,
        format: HeaderFormat,
    ) -> Result<std::result::Result<Layout, String>> {
        if !cx.config.views.arrays.contains(&format) {
            return Ok(Err(format!("{} views are off (--views)", format.option_name())));
        }
        let geo = match format {
            HeaderFormat::Tiff | HeaderFormat::Envi | HeaderFormat::Vrt => self.georeference(cx, path, file),
            _ => None,
        };
        Ok(file.layout(format, &self.axes(cx, path, file)?, geo.as_deref()))
    }

    /// Where the raster of the array at `path` lies, when its metadata says (`zarr::geo`).
    /// Made once and kept while the arrays it was made from are unchanged (and for the
    /// metadata TTL, for their attributes). Coordinates that cannot be read leave it unknown.
    pub fn georeference(&self, cx: &Context, path: &str, file: &DataFile) -> Option<Arc<Georeference>> {
        if let Some(made) = lock(&self.georeferences).as_mut().and_then(|c| c.get(path).cloned())
            && made.at.elapsed() < cx.config.metadata_ttl
            && made.from.iter().all(|(f, a)| Arc::ptr_eq(&f.array.array(), a))
        {
            return made.geo;
        }
        let at = Instant::now();
        let array = file.array.array();
        let names = array.meta.dimension_names.clone().unwrap_or_default();
        let attributes = self.attributes_of(cx, path, &array).unwrap_or_default();
        let fill = (array.meta.format == ZarrFormat::V2).then(|| array.meta.document.get("fill_value")).flatten();
        let parent = path.rsplit_once('/').map_or("", |(p, _)| p).to_string();
        let mut siblings = NodeSiblings { nodes: self, cx, parent, used: vec![(file.clone(), array.clone())] };
        let geo = if path.is_empty() {
            None
        } else {
            let nodata = crate::zarr::geo::nodata(&attributes, fill);
            crate::zarr::geo::georeference(&names, &array.meta.shape, &attributes, nodata, &mut siblings).map(Arc::new)
        };
        let made = MadeGeoreference { geo: geo.clone(), from: siblings.used, at };
        lock(&self.georeferences).get_or_insert_with(|| lru::LruCache::new(GROUP_FILES_KEPT)).put(path.to_string(), made);
        geo
    }

    /// An array's attributes as the views read them: in its document (v3), or its `.zattrs` (v2).
    fn attributes_of(&self, cx: &Context, path: &str, array: &crate::zarr::array::Array) -> Result<serde_json::Value> {
        match array.meta.format {
            ZarrFormat::V3 => Ok(array.meta.document.attributes().map(Attributes::for_views).unwrap_or_default()),
            ZarrFormat::V2 => Ok(crate::zarr::node::v2_attributes(cx.store.as_ref(), path)?.for_views()),
        }
    }

    /// The image the group at `path` is, as its attributes say (`None`: it is none).
    pub fn image_of(&self, cx: &Context, path: &str) -> Result<Option<Arc<std::result::Result<Image, String>>>> {
        Ok(match self.dir_state(cx, path)? {
            DirState::Group(info) => info.image,
            _ => None,
        })
    }

    /// The `view` file of the group at `path` as its arrays are now, or why there is none. Made
    /// once and kept while its arrays' metadata is what it was made from (and for the metadata
    /// TTL, for what the group's attributes say).
    pub fn group_file(&self, cx: &Context, path: &str, view: GroupView) -> Result<std::result::Result<Arc<GroupFile>, String>> {
        self.group_file_listed(cx, path, view, None)
    }

    /// `group_file`, with the group's listing when the caller holds it (not listed again).
    pub(super) fn group_file_listed(
        &self,
        cx: &Context,
        path: &str,
        view: GroupView,
        listing: Option<&[store::Entry]>,
    ) -> Result<std::result::Result<Arc<GroupFile>, String>> {
        if !cx.config.views.groups.contains(&view) {
            return Ok(Err(format!("{} views are off (--views)", view.option_name())));
        }
        let key = (path.to_string(), view);
        // Why there is none is kept too: asking again re-reads the group's attributes.
        // Why there is none holds only while no array took a new layout (a growth may end a clash).
        if let Some((made, at, layouts)) = lock(&self.group_files).as_mut().and_then(|c| c.get(&key).cloned())
            && at.elapsed() < cx.config.metadata_ttl
            && made.as_ref().map_or(layouts == crate::fs::open::layout_changes(), |f| f.is_current())
        {
            return Ok(made);
        }
        let (at, layouts) = (Instant::now(), crate::fs::open::layout_changes());
        let made = match view {
            GroupView::OmeTiff => self.build_image(cx, path)?,
            GroupView::NetCdf => self.build_dataset(cx, path, listing)?,
        }
        .map(Arc::new);
        crate::zarr::node::release_parsed_memory();
        lock(&self.group_files).get_or_insert_with(|| lru::LruCache::new(GROUP_FILES_KEPT)).put(key, (made.clone(), at, layouts));
        Ok(made)
    }

    fn build_image(&self, cx: &Context, path: &str) -> Result<std::result::Result<GroupFile, String>> {
        let image = match self.image_of(cx, path)?.as_deref() {
            Some(Ok(image)) => image.clone(),
            Some(Err(why)) => return Ok(Err(why.clone())),
            None => return Ok(Err("its attributes hold no OME-NGFF multiscales".into())),
        };
        let name = image.name.clone().unwrap_or_else(|| path.rsplit('/').next().unwrap_or("").to_string());
        crate::fs::view::image::build(&name, &image, |level| self.data_file(cx, &store::join(path, level)))
    }

    /// The `dataset.nc` of the group at `path`: its child arrays, its attributes as global ones.
    fn build_dataset(&self, cx: &Context, path: &str, listing: Option<&[store::Entry]>) -> Result<std::result::Result<GroupFile, String>> {
        let store = cx.store.as_ref();
        let listed;
        let listing = match listing {
            Some(listing) => listing,
            None => {
                listed = store.list_dir(path)?;
                &listed
            }
        };
        let children: Vec<&str> = listing.iter().filter(|e| e.is_dir && !is_hidden(&e.name)).map(|e| e.name.as_str()).collect();
        if children.len() > MOST_DATASET_CHILDREN {
            return Ok(Err(format!("more than {MOST_DATASET_CHILDREN} children: a netCDF view of it is not made")));
        }
        let mut members = Vec::new();
        for name in children {
            let child = store::join(path, name);
            let file = match self.dir_state(cx, &child) {
                Ok(DirState::Array(file)) => file,
                Err(Error::Io(e)) => return Err(Error::Io(e)),
                _ => continue,
            };
            let attributes = self.attributes_of(cx, &child, &file.array.array())?;
            members.push(crate::fs::view::dataset::Member { name: name.to_string(), file, attributes });
        }
        // The group's own attributes (its global ones) are read only for a group of arrays.
        if members.is_empty() {
            return Ok(Err(crate::headers::netcdf::NO_DATASET.into()));
        }
        let attributes = match crate::zarr::node::read_node(store, path)? {
            Some((NodeMetadata::Group(attributes), _)) => attributes.for_views(),
            _ => return Ok(Err("not a group".into())),
        };
        Ok(crate::fs::view::dataset::build(cx, &attributes, members))
    }

    /// Drop the group files made for `path` and beneath (it changed, moved or went).
    pub(super) fn drop_group_files(&self, path: &str) {
        let lead = format!("{path}/");
        if let Some(cache) = lock(&self.group_files).as_mut() {
            let stale: Vec<(String, GroupView)> =
                cache.iter().map(|(k, _)| k.clone()).filter(|(p, _)| p == path || p.starts_with(&lead) || path.is_empty()).collect();
            for k in stale {
                cache.pop(&k);
            }
        }
    }
}
