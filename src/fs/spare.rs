//! Spare chunk buffers. A chunk stored in the background hands its buffer back here, and the
//! next chunk a write starts takes it, instead of fresh memory that the kernel faults in page by
//! page (a `dd` of 512 MiB faulted in 88 000 pages this way). Malloc alone does not reuse them:
//! the buffer goes back to the arena of the FUSE thread that made it, and the next chunk is
//! mostly started by another.

use std::sync::Mutex;

use crate::error::lock;
use crate::zarr::region::{fill_pattern, filled};

/// Spare bytes kept at most: the background stores under way of one writer
/// (`OpenArray::wait_backlog`) come back here, and a few more.
const SPARE_BYTES: usize = 64 << 20;

static SPARE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// A buffer of `n` elements of `fill`: a spare one of that length when there is one.
pub fn chunk_buffer(n: usize, fill: &[u8]) -> crate::Result<Vec<u8>> {
    let len = n * fill.len();
    let spare = {
        let mut spare = lock(&SPARE);
        spare.iter().rposition(|b| b.len() == len).map(|i| spare.remove(i))
    };
    match spare {
        Some(mut buf) => {
            fill_pattern(&mut buf, fill);
            Ok(buf)
        }
        None => filled(n, fill),
    }
}

/// Keep `buf` for a later `chunk_buffer`, making room by dropping the oldest kept (of chunk
/// sizes perhaps no longer written).
pub fn give_back(buf: Vec<u8>) {
    if buf.len() > SPARE_BYTES {
        return;
    }
    let mut spare = lock(&SPARE);
    let mut kept: usize = spare.iter().map(Vec::len).sum();
    while kept + buf.len() > SPARE_BYTES && !spare.is_empty() {
        kept -= spare.remove(0).len();
    }
    spare.push(buf);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spare_buffer_comes_back_filled() {
        give_back(vec![7u8; 4096 * 3]);
        assert_eq!(chunk_buffer(4096, &[1, 2, 0]).unwrap(), [1u8, 2, 0].repeat(4096));
        give_back(vec![7u8; 4096 * 3]);
        assert_eq!(chunk_buffer(4096 * 3, &[0]).unwrap(), vec![0u8; 4096 * 3]);
        // Another length is made afresh.
        assert_eq!(chunk_buffer(5, &[9]).unwrap(), vec![9u8; 5]);
    }
}
