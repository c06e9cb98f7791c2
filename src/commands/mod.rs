//! The offline commands, which change or describe a store without mounting it: `adopt`,
//! `prepend`, `normalize`, `pack` and `log` here; `info` (the hierarchy, one block per array,
//! from the metadata and a count of what each array stores — never reading a chunk) in `info`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::progress::{human_bytes, while_counting};
use crate::store::{self, Location, Store};
use crate::zarr::array::{Array, PrependSource};
use crate::zarr::key::ChunkKeyEncoding;
use crate::zarr::normalize::Normalization;
use crate::{Error, Result};

/// The store an offline command works on, opened, and where it is (for messages).
pub struct OpenedStore {
    pub store: Arc<dyn Store>,
    pub location: Location,
}

/// A line on stdout; a reader that went away is not an error of the command's.
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod info;

pub use info::info;

/// `zarrfs adopt`: switch an array to the offset chunk key encoding (metadata only).
pub fn adopt(store: &OpenedStore, array: &str) -> ExitCode {
    offline(store, array, |a| {
        if matches!(a.meta.key_encoding, ChunkKeyEncoding::Offset { .. }) {
            say!("{array}: already uses the offset chunk key encoding; nothing to do");
            return Ok(());
        }
        let adopted = a.adopted_offset()?;
        adopted.store_metadata()?;
        say!("{array}: chunk key encoding {} (no chunk moved); it can be prepended to", adopted.meta.key_encoding.describe());
        Ok(())
    })
}

/// `zarrfs prepend`: prepend a raw file's rows along `axis`, with progress on a terminal.
pub fn prepend(store: &OpenedStore, array: &str, file: &Path, axis: usize) -> ExitCode {
    let refusal = store.store.prepend_refusal();
    offline(store, array, |a| {
        if let Some(why) = refusal.or(a.meta.prepend_refusal()) {
            return Err(Error::Unsupported(format!("cannot prepend: {why}")));
        }
        let f = std::fs::File::open(file).map_err(|e| Error::Invalid(format!("{}: {e}", file.display())))?;
        let len = f.metadata()?.len();
        // As a mount's prepend: one at a time with mounts of the store, over the metadata read.
        let _shape = a.hold_shape_lock()?;
        a.check_metadata_current()?;
        let source = Arc::new(CountingSource { file: f, read: AtomicU64::new(0) });
        let prepended = while_counting("prepending", None, len, &source.read, || {
            a.prepend(axis, len, source.clone(), &crate::pool::WorkerPool::per_core())
        })?;
        match prepended {
            Some((next, _)) => {
                next.store_metadata()?;
                say!(
                    "{array}: prepended {} along axis {axis}; shape {:?}, chunk key encoding {}",
                    human_bytes(len),
                    next.meta.shape,
                    next.meta.key_encoding.describe()
                );
            }
            None => say!("{array}: {} is empty; nothing to prepend", file.display()),
        }
        Ok(())
    })
}

/// A prepend's source that counts the bytes read from it, for the progress line.
struct CountingSource {
    file: std::fs::File,
    read: AtomicU64,
}

impl PrependSource for CountingSource {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.file.read_exact_at(buf, offset)?;
        self.read.fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn is_hole(&self, offset: u64, len: u64) -> bool {
        let hole = self.file.is_hole(offset, len);
        if hole {
            self.read.fetch_add(len, Ordering::Relaxed);
        }
        hole
    }
}

/// `zarrfs normalize`: rewrite an offset-encoded array to the default encoding, with
/// progress on a terminal.
pub fn normalize(store: &OpenedStore, array: &str) -> ExitCode {
    offline(store, array, |a| {
        // Mounts would write chunks where they no longer are: none may serve the store, and
        // on object storage (no claim there) the array's shape lock keeps their shape
        // changes out, while their next store finds the metadata changed and stores nothing.
        a.store.claim(crate::store::Claim::Rewriting)?;
        let _shape = a.hold_shape_lock()?;
        a.check_metadata_current()?;
        let Some(plan) = Normalization::plan(a)? else {
            say!("{array}: not offset-encoded ({}); nothing to do", a.meta.key_encoding.describe());
            return Ok(());
        };
        let done = AtomicU64::new(0);
        let renamed = while_counting("renaming chunk keys", Some("moves"), plan.moves(), &done, || plan.run(&done))?;
        say!("{array}: chunk key encoding default; {renamed} chunk(s) renamed; every Zarr reader opens it now");
        Ok(())
    })
}

/// `zarrfs pack`: the store written into the archive `out`.
pub fn pack(opened: &OpenedStore, out: &Path, deflate: bool) -> ExitCode {
    match store::pack(opened.store.as_ref(), out, deflate) {
        Ok(packed) => {
            let variant = match packed.ome {
                Some(v) => format!("; zipped OME-Zarr {v} (RFC-9)"),
                None => String::new(),
            };
            say!("{}: {} entries, {}{variant}", out.display(), packed.entries, human_bytes(packed.bytes));
            if !packed.left_out.is_empty() {
                let shown: Vec<&str> = packed.left_out.iter().take(10).map(String::as_str).collect();
                eprintln!(
                    "zarrfs: left out {} name(s) that are not UTF-8, which no Zarr key can be (the mount does not show them either): {}{}",
                    packed.left_out.len(),
                    shown.join(", "),
                    if packed.left_out.len() > shown.len() { ", ..." } else { "" }
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("zarrfs: pack {} into {}: {e}", opened.location, out.display());
            ExitCode::FAILURE
        }
    }
}

/// `zarrfs log`: the snapshots of an Icechunk repository, newest first.
pub fn log(opened: &OpenedStore) -> ExitCode {
    match opened.store.history() {
        Ok(Some(snapshots)) => {
            for s in snapshots {
                say!("{}  {}  {}", s.id, s.made, s.message);
            }
            ExitCode::SUCCESS
        }
        Ok(None) => {
            eprintln!("zarrfs: {}: keeps no history (only an Icechunk repository has snapshots)", opened.location);
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("zarrfs: {}: {e}", opened.location);
            ExitCode::FAILURE
        }
    }
}

/// Run an offline change on one array of a store.
fn offline(opened: &OpenedStore, array: &str, change: impl FnOnce(&Array) -> Result<()>) -> ExitCode {
    let path = array.trim_matches('/');
    let result = Array::open(opened.store.clone(), path).and_then(|a| change(&a));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Error::NotFound) => {
            eprintln!("zarrfs: {}: no array at {path:?}", opened.location);
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("zarrfs: {}/{path}: {e}", opened.location);
            ExitCode::FAILURE
        }
    }
}
