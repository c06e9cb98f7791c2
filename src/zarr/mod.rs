//! The Zarr format: metadata (v2 and v3 into one model), data types and fill values, chunk
//! grids, chunk key encodings, codecs, and the array. No caching, no files, no FUSE.

pub mod array;
pub mod axes;
pub mod chunk_merge;
pub mod codec;
pub mod consolidated;
pub mod document;
pub mod dtype;
pub mod geo;
pub mod grid;
pub mod key;
pub mod metadata;
pub mod node;
pub mod normalize;
pub mod ome;
pub mod region;
