//! zarrfs: a Zarr store mounted as a directory tree in which every array is one flat raw file.
//!
//! Layers, each calling only the one below it: `cli` → `fuse` (the only fuser-aware code) →
//! `fs` (the filesystem core) → `cache` → `zarr` (the format) → `store`.

pub mod cache;
pub mod cli;
pub mod error;
pub mod fs;
pub mod fuse;
pub mod info;
pub mod logging;
pub mod store;
pub mod zarr;

pub use error::{Error, Result};
