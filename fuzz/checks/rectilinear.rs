//! Rectilinear edges: the first 8 bytes are the array's extent, the rest the JSON of its
//! `chunk_shapes` (one axis). Whatever parses must answer lookups consistently: the chunk
//! holding an element starts at or before it and is longer than the element's offset in it.
//!
//! Shared by the fuzz target (`fuzz/fuzz_targets`) and the replay of its corpus in `cargo test`
//! (`tests/fuzz_corpus.rs`).

use zarrfs::zarr::grid::ChunkGrid;

/// The check of one input: it may fail to parse or decode, but never panics, and what it gives holds.
pub fn check(data: &[u8]) {
    let Some((extent, json)) = data.split_first_chunk::<8>() else { return };
    let extent = u64::from_le_bytes(*extent) % (1 << 62);
    let Ok(shapes) = serde_json::from_slice::<serde_json::Value>(json) else { return };
    let doc = serde_json::json!({"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": [shapes]}});
    let Ok(grid) = ChunkGrid::parse_v3(&doc, &[extent]) else { return };
    let axis = &grid.axes[0];
    let chunks = axis.chunks_for(extent);
    let probes = [0, 1, extent / 3, extent / 2, extent.saturating_sub(1), extent];
    for &i in probes.iter().filter(|&&i| i < extent) {
        let (c, off) = axis.chunk_of(i);
        assert!(c < chunks, "element {i} in chunk {c} of {chunks}");
        assert_eq!(axis.chunk_start(c) + off, i);
        assert!(off < axis.chunk_len(c));
        assert!(axis.chunk_len(c) <= axis.largest_chunk());
    }
    let _ = grid.to_json();
}
