//! zarrfs: a Zarr store mounted as a directory tree in which every array is one flat raw file.
//!
//! Layers, each calling only the ones below it: `cli` → `daemon` / `commands` → `fuse` (the
//! only fuser-aware code) → `fs` (the filesystem core) → `cache` → `zarr` (the format) →
//! `store`. CONTRIBUTING.md maps the modules.

pub mod cache;
pub mod cli;
pub mod commands;
pub mod control;
pub mod daemon;
pub mod error;
pub mod fs;
pub mod fuse;
pub mod headers;
pub mod heap;
pub mod limits;
pub mod logging;
pub mod metrics;
pub mod pool;
pub mod progress;
pub mod store;
pub mod zarr;

pub use error::{Error, Result};
