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

/// Whether this build holds every store kind: object storage, Icechunk and parquet reference
/// sets are cargo features, left out of the quick first build `scripts/demo` makes.
pub const WHOLE_BUILD: bool = cfg!(all(feature = "object-store", feature = "icechunk", feature = "parquet"));

/// What a store kind this build left out says to do.
pub const BUILD_IT_WHOLE: &str = "a quick first build (scripts/demo's) leaves it out: `cargo build --release` builds the whole tool";

pub use error::{Error, Result};
