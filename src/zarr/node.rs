//! What makes a directory of a store a Zarr node: the metadata documents that mark one, the
//! documents shown beside it, the names a group hides, and reading a node's metadata. It knows
//! nothing of files or caching.

use super::limits::MAX_DOCUMENT_BYTES;
use super::metadata::{self, NodeMetadata};
use crate::store::{self, ByteRange, Store, Version};
use crate::{Error, Result};

/// The documents that make a node, in the order they are looked for: v3, v2 array, v2 group.
pub const NODE_DOCUMENTS: [&str; 3] = ["zarr.json", ".zarray", ".zgroup"];

/// Every metadata document a node may hold (v2 attributes and consolidated metadata too).
pub const METADATA_DOCUMENTS: [&str; 5] = ["zarr.json", ".zgroup", ".zarray", ".zattrs", ".zmetadata"];

/// A node's path for logs and messages: `/` for the root.
pub fn display_path(path: &str) -> String {
    format!("/{path}")
}

/// Whether a group hides a child of this name: `__`-prefixed names are reserved by the spec.
pub fn is_hidden(name: &str) -> bool {
    name.starts_with("__")
}

/// Whether `path` holds a node document, found without reading it. A document the store
/// refuses to serve (a link out, a FIFO) still makes a node, which shows why it cannot be served.
pub fn is_node(store: &dyn Store, path: &str) -> Result<bool> {
    for name in NODE_DOCUMENTS {
        match store.get_range(&store::join(path, name), ByteRange::Range { start: 0, len: 0 }) {
            Ok(Some(_)) | Err(Error::Refused { .. }) => return Ok(true),
            Ok(None) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// Read a node's metadata: `zarr.json`, else `.zarray` / `.zgroup`, with the version of the
/// document read (one request each: what was read is what the version says). `None` when it is
/// no node.
pub fn read_node(store: &dyn Store, path: &str) -> Result<Option<(NodeMetadata, Version)>> {
    for name in NODE_DOCUMENTS {
        let Some(value) = store.get_value(&store::join(path, name), MAX_DOCUMENT_BYTES)? else { continue };
        let doc = metadata::parse_json(&value.bytes, name)?;
        let meta = match name {
            "zarr.json" => metadata::parse_v3(&doc)?,
            ".zarray" => NodeMetadata::Array(Box::new(metadata::parse_v2_array(&doc)?)),
            _ => metadata::parse_v2_group(&doc)?,
        };
        return Ok(Some((meta, value.version)));
    }
    Ok(None)
}
