//! What the codecs of an array can do on this machine, with no FUSE, no cache and no copies out:
//! `decode` reads every chunk from the local store and decodes it on all cores (the decode
//! limit `scripts/bench-read` measures the mount against), in the units the mount reads: the
//! inner chunks of a sharded array (its shard indexes read before the clock starts), whole
//! chunks otherwise; `encode` decodes every chunk first,
//! then times encoding them all on all cores, storing nothing (the encode limit of
//! `scripts/bench-write`); `store` likewise, but stores each chunk as the mount does (through
//! the local store: a temporary file renamed into place) into the array at ARRAY_PATH of
//! DEST_STORE, a fresh one of the same metadata, and makes them durable at the end, as a
//! writer's fsync does (the store limit: all the work of a write but FUSE's).
//!
//!   cargo run --release --example codec-limit -- decode|encode STORE ARRAY_PATH [THREADS]
//!   cargo run --release --example codec-limit -- store STORE ARRAY_PATH DEST_STORE [THREADS]
//!
//! With `CODEC_LIMIT_WAIT` set, it prints `ready` once its input is in memory and starts the clock
//! on the next line of standard input: a bench can run it beside another contender with the
//! preparation left out.
//!
//! Prints `<mode>-limit <MB/s> <threads> <units> <cpu-seconds>`: decoded bytes per second of wall
//! time, and the CPU time (user and system, all threads) the timed part took, which is what it
//! costs the machine's cores whatever their number (the whole run's busy cores would also count
//! the decoding before the clock starts).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use zarrfs::store::LocalStore;
use zarrfs::store::Store;
use zarrfs::zarr::array::{Array, ReadUnits};
use zarrfs::zarr::codec::ShardIndex;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mode), Some(root), Some(path)) = (args.get(1), args.get(2), args.get(3)) else {
        return Err("usage: codec-limit decode|encode STORE ARRAY_PATH [THREADS] | store STORE ARRAY_PATH DEST_STORE [THREADS]".into());
    };
    let (encode, dest) = match (mode.as_str(), args.get(4)) {
        ("decode", _) => (false, None),
        ("encode", _) => (true, None),
        ("store", Some(dest)) => {
            let dest: Arc<dyn Store> = Arc::new(LocalStore::open(dest.as_str())?);
            (true, Some((Array::open(dest.clone(), path)?, dest)))
        }
        _ => return Err(format!("unknown mode {mode} (or no DEST_STORE): decode, encode or store").into()),
    };
    let threads = match args.get(if dest.is_some() { 5 } else { 4 }) {
        Some(n) => n.parse()?,
        None => std::thread::available_parallelism()?.get(),
    };
    let store: Arc<dyn Store> = Arc::new(LocalStore::open(root.as_str())?);
    let array = Array::open(store, path)?;
    let whole: Vec<(u64, u64)> = array.meta.shape.iter().map(|&n| (0, n)).collect();
    let mut chunks: Vec<Vec<u64>> = Vec::new();
    array.meta.grid.cells_touching(&whole).for_each(|c| chunks.push(c.to_vec()));
    // Encoding starts from the decoded chunks, in memory before the clock starts.
    let decoded: Vec<Vec<u8>> = if encode {
        chunks.iter().map(|c| Ok(array.retrieve_chunk(c)?.map(|(bytes, _)| bytes).unwrap_or_default())).collect::<zarrfs::Result<_>>()?
    } else {
        Vec::new()
    };
    // Decoding inner chunks: (shard, its index, inner chunk number) for each stored one.
    // A shard's index with the version it was read at.
    type Indexed = Arc<(ShardIndex, zarrfs::store::Version)>;
    let inner: Vec<(&[u64], Indexed, usize)> = match array.read_units() {
        ReadUnits::InnerChunks { sharding } if !encode => {
            let mut inner = Vec::new();
            for shard in &chunks {
                if let Some(index) = array.retrieve_shard_index(sharding, shard)? {
                    let index = Arc::new(index);
                    inner.extend((0..index.0.entries.len()).map(|i| (shard.as_slice(), index.clone(), i)));
                }
            }
            inner
        }
        _ => Vec::new(),
    };
    let units = if inner.is_empty() { chunks.len() } else { inner.len() };
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let one = |i: usize| -> zarrfs::Result<usize> {
        if let (Some((shard, index, n)), ReadUnits::InnerChunks { sharding }) = (inner.get(i), array.read_units()) {
            return Ok(array.retrieve_inner_chunk(sharding, shard, &index.0, index.1, *n)?.map_or(0, |bytes| bytes.len()));
        }
        let coords = &chunks[i];
        if !encode {
            return Ok(array.retrieve_chunk(coords)?.map_or(0, |(bytes, _)| bytes.len()));
        }
        let bytes = &decoded[i];
        match &dest {
            Some((dest, _)) => {
                dest.store_chunk(coords, bytes)?;
            }
            None if !bytes.is_empty() => {
                array.meta.codecs.encode(bytes.clone(), &array.chunk_repr(coords))?;
            }
            None => {}
        }
        Ok(bytes.len())
    };
    if std::env::var_os("CODEC_LIMIT_WAIT").is_some() {
        use std::io::{BufRead, Write};
        println!("ready");
        std::io::stdout().flush()?;
        std::io::stdin().lock().read_line(&mut String::new())?;
    }
    let (start, cpu_start) = (Instant::now(), process_cpu_seconds());
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| -> zarrfs::Result<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= units {
                            return Ok(());
                        }
                        done.fetch_add(one(i)?, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| w.join().map_err(|_| zarrfs::Error::Invalid("a codec thread panicked".into()))?)
    })?;
    if let Some((dest, store)) = &dest {
        store.sync(&chunks.iter().map(|c| dest.chunk_key(c)).collect::<Vec<_>>())?;
    }
    let (secs, cpu) = (start.elapsed().as_secs_f64(), process_cpu_seconds() - cpu_start);
    println!("{mode}-limit {:.0} {threads} {units} {cpu:.3}", done.load(Ordering::Relaxed) as f64 / secs / 1e6);
    Ok(())
}

/// User and system CPU time of this process so far, all its threads.
fn process_cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF cannot fail.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}
