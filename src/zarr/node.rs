//! What makes a directory of a store a Zarr node: the metadata documents that mark one, the
//! documents shown beside it, the names a group hides, and reading a node's metadata. It knows
//! nothing of files or caching.

use super::metadata::{self, Attributes, Document, NodeMetadata};
use crate::limits::MAX_DOCUMENT_BYTES;
use crate::store::{self, Store, Version};
use crate::{Error, Result};

/// The documents that make a node, in the order they are looked for: v3, v2 array, v2 group.
pub const NODE_DOCUMENTS: [&str; 3] = ["zarr.json", ".zarray", ".zgroup"];

/// Every metadata document a node may hold (v2 attributes and consolidated metadata too).
pub const METADATA_DOCUMENTS: [&str; 5] = ["zarr.json", ".zgroup", ".zarray", ".zattrs", ".zmetadata"];

/// A node's path for logs and messages: `/` for the root, with what a terminal would act on
/// escaped (`crate::error::printable`).
pub fn display_path(path: &str) -> String {
    format!("/{}", crate::error::printable(path))
}

/// Whether a group hides a child of this name: `__`-prefixed names are reserved by the spec.
pub fn is_hidden(name: &str) -> bool {
    name.starts_with("__")
}

/// Whether `path` holds a node document, found without reading it. A document the store
/// refuses to serve (a link out, a FIFO) still makes a node, which shows why it cannot be served.
pub fn is_node(store: &dyn Store, path: &str) -> Result<bool> {
    for name in NODE_DOCUMENTS {
        match store.head(&store::join(path, name)) {
            Ok(Some(_)) | Err(Error::Refused { .. }) => return Ok(true),
            Ok(None) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// Read a node's metadata: `zarr.json`, else `.zarray` / `.zgroup`, with the version of the
/// document read (one request each: what was read is what the version says). A v2 node's
/// `.zattrs` is read too: a group's attributes, an array's axis names (`_ARRAY_DIMENSIONS`).
/// `None` when it is no node.
pub fn read_node(store: &dyn Store, path: &str) -> Result<Option<(NodeMetadata, Version)>> {
    for name in NODE_DOCUMENTS {
        let key = store::join(path, name);
        let Some(value) = store.get_document(&key, MAX_DOCUMENT_BYTES)? else { continue };
        let meta = match parse_node(store, path, name, &value.bytes) {
            // What stood for the document (a consolidated entry) does not parse: the document
            // itself decides.
            Err(e) => match store.get_value(&key, MAX_DOCUMENT_BYTES)? {
                Some(stored) if stored.bytes != value.bytes => {
                    return Ok(Some((parse_node(store, path, name, &stored.bytes)?, stored.version)));
                }
                _ => return Err(e),
            },
            Ok(meta) => meta,
        };
        return Ok(Some((meta, value.version)));
    }
    Ok(None)
}

/// The array at `path` as its document `name` holds it now, asked of the store itself
/// (`Store::get_current`), with the version read; `None` when that is no array's document.
pub fn read_array_current(store: &dyn Store, path: &str, name: &str) -> Result<Option<(metadata::ArrayMetadata, Version)>> {
    let Some(value) = store.get_current(&store::join(path, name), MAX_DOCUMENT_BYTES)? else { return Ok(None) };
    match parse_node(store, path, name, &value.bytes)? {
        NodeMetadata::Array(meta) => Ok(Some((*meta, value.version))),
        NodeMetadata::Group(_) => Ok(None),
    }
}

/// The node document `name` of the node at `path`, parsed.
fn parse_node(store: &dyn Store, path: &str, name: &str, bytes: &[u8]) -> Result<NodeMetadata> {
    if bytes.len() > LARGE_DOCUMENT {
        LARGE_DOCUMENT_READ.set(true);
    }
    Ok(match name {
        "zarr.json" => metadata::parse_v3(Document::parse(bytes, name)?)?,
        ".zarray" => {
            let mut array = metadata::parse_v2_array(&Document::parse(bytes, name)?)?;
            array.dimension_names = v2_dimension_names(&v2_attributes(store, path)?, array.shape.len());
            NodeMetadata::Array(Box::new(array))
        }
        _ => {
            metadata::parse_v2_group(&metadata::parse_json(bytes, name)?)?;
            NodeMetadata::Group(v2_attributes(store, path)?)
        }
    })
}

/// A document this large parses to many times its size in memory.
const LARGE_DOCUMENT: usize = 4 << 20;

thread_local! {
    /// Whether this thread parsed a large document since `release_parsed_memory`.
    static LARGE_DOCUMENT_READ: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Once what was parsed of a large document is dropped, give the memory it took back.
pub fn release_parsed_memory() {
    if LARGE_DOCUMENT_READ.replace(false) {
        crate::heap::give_back();
    }
}

/// A v2 node's `.zattrs`: `{}` when absent. One that is not a JSON object (or cannot be
/// served) holds no attributes the views could use: also `{}`, said in the log.
pub fn v2_attributes(store: &dyn Store, path: &str) -> Result<Attributes> {
    let key = store::join(path, ".zattrs");
    match store.get_document(&key, MAX_DOCUMENT_BYTES).map(|v| v.map(|v| v.bytes)) {
        Ok(Some(bytes)) if bytes.len() > LARGE_DOCUMENT => {
            LARGE_DOCUMENT_READ.set(true);
            v2_attributes_of(&bytes, path)
        }
        Ok(Some(bytes)) => v2_attributes_of(&bytes, path),
        Ok(None) => Ok(Attributes::default()),
        Err(Error::Io(e)) => Err(Error::Io(e)),
        Err(e) => {
            tracing::warn!(node = %display_path(path), ".zattrs cannot be read: {e}");
            Ok(Attributes::default())
        }
    }
}

fn v2_attributes_of(bytes: &[u8], path: &str) -> Result<Attributes> {
    Ok(Attributes::parse(bytes, ".zattrs").unwrap_or_else(|e| {
        tracing::warn!(node = %display_path(path), "{e}; its attributes are not used");
        Attributes::default()
    }))
}

/// xarray's `_ARRAY_DIMENSIONS` (one name per axis), when it is that.
pub fn v2_dimension_names(attributes: &Attributes, ndim: usize) -> Option<Vec<Option<String>>> {
    let names = attributes.get("_ARRAY_DIMENSIONS")?;
    let names = names.as_array()?;
    (names.len() == ndim).then(|| names.iter().map(|n| n.as_str().map(str::to_string)).collect())
}
