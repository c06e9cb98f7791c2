//! The decode limit of an array on this machine: every chunk of it read from its local store and
//! decoded on all cores, with no FUSE, no cache and no copies out. `scripts/bench-read` measures
//! the mount against it.
//!
//!   cargo run --release --example decode-limit -- STORE ARRAY_PATH [THREADS]
//!
//! Prints `decode-limit <MB/s> <threads> <chunks>`: decoded bytes per second of wall time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use zarrfs::store::LocalStore;
use zarrfs::store::Store;
use zarrfs::zarr::array::Array;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(root), Some(path)) = (args.get(1), args.get(2)) else {
        return Err("usage: decode-limit STORE ARRAY_PATH [THREADS]".into());
    };
    let threads = match args.get(3) {
        Some(n) => n.parse()?,
        None => std::thread::available_parallelism()?.get(),
    };
    let store: Arc<dyn Store> = Arc::new(LocalStore::open(root.as_str())?);
    let array = Array::open(store, path)?;
    let grid = &array.meta.grid;
    let mut chunks = Vec::new();
    let whole: Vec<(u64, u64)> = array.meta.shape.iter().map(|&n| (0, n)).collect();
    grid.cells_touching(&whole).for_each(|c| chunks.push(c.to_vec()));
    let next = AtomicUsize::new(0);
    let decoded = AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| -> zarrfs::Result<()> {
                    while let Some(coords) = chunks.get(next.fetch_add(1, Ordering::Relaxed)) {
                        if let Some((bytes, _)) = array.retrieve_chunk(coords)? {
                            decoded.fetch_add(bytes.len(), Ordering::Relaxed);
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| w.join().map_err(|_| zarrfs::Error::Invalid("a decode thread panicked".into()))?)
    })?;
    let secs = start.elapsed().as_secs_f64();
    println!("decode-limit {:.0} {threads} {}", decoded.load(Ordering::Relaxed) as f64 / secs / 1e6, chunks.len());
    Ok(())
}
