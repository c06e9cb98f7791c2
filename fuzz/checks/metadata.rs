//! v3 and v2 metadata documents: parsing never panics, and what parses can be sized, keyed,
//! bounded and resized without overflow (the checks the mount relies on).
//!
//! Shared by the fuzz target (`fuzz/fuzz_targets`) and the replay of its corpus in `cargo test`
//! (`tests/fuzz_corpus.rs`).

use zarrfs::zarr::codec::ChunkRepr;
use zarrfs::zarr::metadata::{self, ArrayMetadata, NodeMetadata};

/// The check of one input: it may fail to parse or decode, but never panics, and what it gives holds.
pub fn check(data: &[u8]) {
    let Ok(doc) = metadata::Document::parse(data, "doc") else { return };
    let _ = metadata::parse_v2_group(&doc.to_value());
    let v3 = match metadata::parse_v3(doc.clone()) {
        Ok(NodeMetadata::Array(a)) => Some(*a),
        _ => None,
    };
    for meta in [v3, metadata::parse_v2_array(&doc).ok()].into_iter().flatten() {
        exercise(&meta);
    }
}

fn exercise(meta: &ArrayMetadata) {
    let len = meta.byte_len();
    assert!(len <= i64::MAX as u64);
    let _ = meta.row_bytes();
    let grid = meta.grid.grid_shape(&meta.shape);
    let first = vec![0u64; grid.len()];
    let last: Vec<u64> = grid.iter().map(|n| n.saturating_sub(1)).collect();
    for coords in [first, last] {
        let repr = ChunkRepr { shape: meta.grid.chunk_shape(&coords), dtype: &meta.dtype, fill: (&meta.fill[..]).into() };
        assert!(repr.num_elements() as u128 * meta.item_size() as u128 <= zarrfs::limits::max_chunk_bytes() as u128);
        let _ = meta.codecs.encoded_bound(&repr);
        let mut key = String::new();
        meta.key_encoding.push_key(&coords, &mut key);
    }
    if let Some(&rows) = meta.shape.first() {
        let mut grown = meta.shape.clone();
        grown[0] = rows.saturating_add(1);
        let _ = meta.with_shape(&grown);
        grown[0] = rows / 2;
        let _ = meta.with_shape(&grown);
    }
}
