//! Stored chunks through every codec chain: the first byte picks an array, the rest is its chunk.
//! Decoding never panics, never produces more than the chunk holds, and a chunk that decodes
//! has exactly the chunk's size (or element count). Covers the compressors (bombs included),
//! checksums, transpose, delta, the shard index and inner chunks, and the vlen layouts.
//!
//! Shared by the fuzz target (`fuzz/fuzz_targets`) and the replay of its corpus in `cargo test`
//! (`tests/fuzz_corpus.rs`).

use std::sync::OnceLock;

use zarrfs::zarr::codec::ChunkRepr;
use zarrfs::zarr::metadata::{self, ArrayMetadata, NodeMetadata};

const BYTES: &str = r#"{"name": "bytes", "configuration": {"endian": "little"}}"#;

fn v3(dtype: &str, chunks: &str, codecs: &str) -> String {
    let fill = match dtype {
        "string" => "\"\"",
        "bytes" => "[]",
        _ => "0",
    };
    format!(
        r#"{{"zarr_format": 3, "node_type": "array", "shape": {chunks}, "data_type": "{dtype}", "fill_value": {fill},
        "chunk_grid": {{"name": "regular", "configuration": {{"chunk_shape": {chunks}}}}},
        "chunk_key_encoding": {{"name": "default"}}, "codecs": {codecs}}}"#
    )
}

fn v2(dtype: &str, filters: &str, compressor: &str) -> String {
    format!(
        r#"{{"zarr_format": 2, "shape": [6, 5], "chunks": [6, 5], "dtype": "{dtype}", "fill_value": 0, "order": "F",
        "filters": {filters}, "compressor": {compressor}}}"#
    )
}

fn arrays() -> &'static [ArrayMetadata] {
    static ARRAYS: OnceLock<Vec<ArrayMetadata>> = OnceLock::new();
    ARRAYS.get_or_init(|| {
        let docs = [
            v3("uint16", "[8, 8]", &format!("[{BYTES}, {{\"name\": \"zstd\", \"configuration\": {{\"level\": 1, \"checksum\": true}}}}]")),
            v3("int32", "[16]", &format!("[{BYTES}, {{\"name\": \"gzip\", \"configuration\": {{\"level\": 1}}}}]")),
            v3("float32", "[4, 4]", &format!("[{BYTES}, {{\"name\": \"blosc\", \"configuration\": {{\"cname\": \"lz4\", \"clevel\": 5, \"shuffle\": \"shuffle\", \"typesize\": 4}}}}]")),
            v3("uint8", "[3, 4, 5]", &format!("[{{\"name\": \"transpose\", \"configuration\": {{\"order\": [2, 0, 1]}}}}, {BYTES}, {{\"name\": \"crc32c\"}}]")),
            v3("uint16", "[8, 8]", &format!(
                "[{{\"name\": \"sharding_indexed\", \"configuration\": {{\"chunk_shape\": [4, 2], \"codecs\": [{BYTES}, {{\"name\": \"zstd\", \"configuration\": {{\"level\": 1}}}}], \"index_codecs\": [{BYTES}, {{\"name\": \"crc32c\"}}], \"index_location\": \"end\"}}}}]")),
            v3("uint8", "[8]", &format!(
                "[{{\"name\": \"sharding_indexed\", \"configuration\": {{\"chunk_shape\": [2], \"codecs\": [{BYTES}], \"index_codecs\": [{BYTES}], \"index_location\": \"start\"}}}}]")),
            v3("string", "[6]", r#"[{"name": "vlen-utf8"}]"#),
            v3("bytes", "[6]", r#"[{"name": "vlen-bytes"}, {"name": "zstd", "configuration": {"level": 1}}]"#),
            v3("string", "[6]", r#"[{"name": "zarrs.vlen", "configuration": {"index_data_type": "uint32", "index_location": "end"}}]"#),
            v3("bytes", "[6]", r#"[{"name": "zarrs.vlen", "configuration": {"index_data_type": "uint64", "data_codecs": [{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 1}}]}}]"#),
            v2("<i4", "null", r#"{"id": "zlib", "level": 1}"#),
            v2(">u2", "null", r#"{"id": "lz4", "acceleration": 1}"#),
            v2("<i8", r#"[{"id": "delta", "dtype": "<i8", "astype": "<i1"}]"#, r#"{"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2}"#),
            v2("<f8", "null", r#"{"id": "gzip", "level": 1}"#),
        ];
        docs.iter()
            .map(|d| {
                let doc = metadata::Document::parse(d.as_bytes(), "doc").expect("valid JSON");
                match doc.get("zarr_format").and_then(|v| v.as_u64()) {
                    Some(3) => match metadata::parse_v3(doc).unwrap_or_else(|e| panic!("{d}: {e}")) {
                        NodeMetadata::Array(a) => *a,
                        NodeMetadata::Group(_) => unreachable!(),
                    },
                    _ => metadata::parse_v2_array(&doc).unwrap_or_else(|e| panic!("{d}: {e}")),
                }
            })
            .collect()
    })
}

/// The check of one input: it may fail to parse or decode, but never panics, and what it gives holds.
pub fn check(data: &[u8]) {
    let Some((&pick, chunk)) = data.split_first() else { return };
    let all = arrays();
    let meta = &all[pick as usize % all.len()];
    let coords = vec![0u64; meta.shape.len()];
    let repr = ChunkRepr { shape: meta.grid.chunk_shape(&coords), dtype: &meta.dtype, fill: (&meta.fill[..]).into() };
    if meta.dtype.is_variable() {
        let n = repr.num_elements() as usize;
        let bound = zarrfs::limits::text_chunk_bound(n as u64, 1 << 30);
        if let Ok(elements) = meta.codecs.decode_elements(chunk.to_vec(), n, bound) {
            assert_eq!(elements.len(), n);
        }
        return;
    }
    if let Ok(decoded) = meta.codecs.decode(chunk.to_vec(), &repr) {
        assert_eq!(decoded.len(), repr.byte_len());
    }
    if let Some(sharding) = meta.codecs.partial_sharding()
        && let Ok(index) = sharding.decode_index(chunk.to_vec(), &repr.shape)
    {
        for i in 0..index.entries.len() {
            if let Some((start, len)) = index.range(i)
                && let Some(bytes) = chunk.get(start as usize..(start as usize).saturating_add(len as usize))
                && let Ok(inner) = sharding.decode_inner(bytes.to_vec(), &repr)
            {
                assert_eq!(inner.len() as u64, sharding.inner_shape.iter().product::<u64>() * meta.item_size() as u64);
            }
        }
    }
}
