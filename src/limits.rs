//! Bounds on what metadata and stored objects may ask of memory. A store may be hostile: a
//! shape, a chunk shape or a compressed frame decides allocations only within these bounds.

use std::sync::atomic::{AtomicU64, Ordering};

/// The default of `--max-chunk-size`: the most bytes one decoded chunk (or shard) may hold.
pub const DEFAULT_MAX_CHUNK_BYTES: u64 = 2 << 30;
/// The most bytes a metadata document may hold.
pub const MAX_DOCUMENT_BYTES: u64 = 64 << 20;
/// The longest axis: far beyond any real array, and short enough that grid arithmetic on it
/// (an index plus a chunk edge) never overflows.
pub const MAX_AXIS: u64 = 1 << 62;

/// The most bytes one fixed-size element may take (`raw_bytes`, `null_terminated_bytes`,
/// `fixed_length_utf32`, `rN`): far beyond any real record, and small enough that a fill value
/// or a row of one costs nothing to hold.
pub const MAX_ELEMENT_BYTES: u64 = 1 << 24;

/// Process-wide, set once from the command line before anything is parsed.
static MAX_CHUNK_BYTES: AtomicU64 = AtomicU64::new(DEFAULT_MAX_CHUNK_BYTES);

pub fn max_chunk_bytes() -> u64 {
    MAX_CHUNK_BYTES.load(Ordering::Relaxed)
}

pub fn set_max_chunk_bytes(n: u64) {
    MAX_CHUNK_BYTES.store(n, Ordering::Relaxed);
}

/// What one variable-length element costs in memory at least, decoded (its bytes, a vector):
/// a chunk's element count is bounded by `--max-chunk-size` at this cost.
pub const TEXT_ELEMENT_COST: u64 = 32;

/// The most bytes a chunk of `elements` variable-length elements may decode to: 4 KiB an
/// element (16 MiB at least), and no more than a quarter of the cache (`cache` bytes), where
/// its text is kept, nor `--max-chunk-size`. A hostile store's small chunk cannot make a `stat`
/// inflate gigabytes.
pub fn text_chunk_bound(elements: u64, cache: u64) -> u64 {
    elements.saturating_mul(4096).max(16 << 20).min(cache / 4).min(max_chunk_bytes()).max(1 << 20)
}

/// The most bytes a compressor's output may take for `decoded` bytes of input: every
/// compressor here stores incompressible data with a small overhead per block (zstd's bound is
/// n + n/256 + 64 KiB at most; deflate's 5 bytes per 16 KiB block; blosc's 16 bytes), and
/// container headers (gzip's name and extra fields) are small.
pub fn compressed_bound(decoded: u64) -> u64 {
    decoded.saturating_add(decoded / 64).saturating_add(64 << 10)
}

/// The error of an allocation that cannot be made: it fails the request that needed it, never
/// the daemon.
pub fn out_of_memory() -> crate::Error {
    crate::Error::Io(std::io::Error::from_raw_os_error(libc::ENOMEM))
}

/// `len` zeroed bytes, or ENOMEM (rather than the abort of an infallible allocation) when the
/// memory cannot be had. Zeroed pages come from the allocator as they are (calloc), unwritten.
pub fn zeroed(len: usize) -> crate::Result<Vec<u8>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(len).map_err(|_| out_of_memory())?;
    // SAFETY: the layout's size is not zero.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return Err(out_of_memory());
    }
    // SAFETY: `ptr` was allocated by the global allocator with this layout (align 1, `len`
    // bytes), all of them initialised (zero); the Vec owns it from here.
    Ok(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_allocation_that_cannot_be_made_is_an_error() {
        assert_eq!(super::zeroed(5).unwrap(), [0; 5]);
        assert_eq!(super::zeroed(usize::MAX / 2).unwrap_err().errno(), libc::ENOMEM);
        assert_eq!(super::zeroed(1 << 46).unwrap_err().errno(), libc::ENOMEM);
    }
}
