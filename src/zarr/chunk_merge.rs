//! One writer's changes of a chunk put into another writer's version of it, for a store that
//! holds both versions at once (Icechunk, rebasing a commit over another): a three-way merge
//! of the decoded chunks, byte by byte. What this writer changed from the common base is taken
//! from its version, everything else from the other's, so that disjoint changes of one chunk,
//! or of one element, are both kept; where both changed a byte, this writer's (the later
//! commit) wins, as it does where two writers of a plain store write the same bytes.

use super::codec::ChunkRepr;
use super::document::Document;
use super::metadata::{ArrayMetadata, NodeMetadata, parse_v3};
use crate::store::{ChunkMerge, ChunkVersions};
use crate::{Error, Result};

/// What the format layer hands stores (`RemoteOptions::chunk_merge`).
pub const FOR_STORES: ChunkMerge = ChunkMerge { merge, grown_only };

fn array_of(document: &[u8]) -> Result<ArrayMetadata> {
    match parse_v3(Document::parse(document, "zarr.json")?)? {
        NodeMetadata::Array(meta) => Ok(*meta),
        NodeMetadata::Group(_) => Err(Error::metadata("a chunk of a group")),
    }
}

/// The chunk `key` (within the array of `document`, `c/0/1`) with this writer's changes from
/// `base` to `ours` put into `theirs` (`None`: absent, fill); `None` when the result is all fill.
fn merge(document: &[u8], key: &str, versions: ChunkVersions<'_>) -> Result<Option<Vec<u8>>> {
    let ChunkVersions { base, ours, theirs } = versions;
    let meta = array_of(document)?;
    let coords = meta.key_encoding.decode(key, meta.shape.len()).ok_or_else(|| Error::refused(key, "not a chunk key of its array"))?;
    let repr = ChunkRepr { shape: meta.grid.chunk_shape(&coords), dtype: &meta.dtype, fill: (&meta.fill).into() };
    if meta.dtype.is_variable() {
        return Err(Error::Unsupported(format!("{key}: chunks of variable-length elements are not merged")));
    }
    let decoded = |bytes: Option<&[u8]>| match bytes {
        Some(b) => meta.codecs.decode(b, &repr).map_err(|e| e.in_key(key)),
        None => super::region::filled(repr.num_elements() as usize, &meta.fill),
    };
    let (base, ours, mut merged) = (decoded(base)?, decoded(ours)?, decoded(theirs)?);
    if base.len() != ours.len() || ours.len() != merged.len() {
        return Err(Error::corrupt(key, "its versions decode to different sizes"));
    }
    for ((m, o), b) in merged.iter_mut().zip(&ours).zip(&base) {
        if o != b {
            *m = *o;
        }
    }
    if super::region::is_filled(&merged, &meta.fill) {
        return Ok(None);
    }
    meta.codecs.encode(merged, &repr).map(Some)
}

/// Whether the array of `after` is that of `before` grown and nothing else.
fn grown_only(before: &[u8], after: &[u8]) -> bool {
    matches!((array_of(before), array_of(after)), (Ok(b), Ok(a)) if b.grown_into(&a))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"{"zarr_format": 3, "node_type": "array", "shape": [8], "data_type": "int16",
      "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
      "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
      "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}]}"#;

    fn encoded(values: [i16; 4]) -> Vec<u8> {
        let meta = array_of(DOC.as_bytes()).unwrap();
        let repr = ChunkRepr { shape: vec![4], dtype: &meta.dtype, fill: (&meta.fill).into() };
        meta.codecs.encode(values.iter().flat_map(|v| v.to_le_bytes()).collect(), &repr).unwrap()
    }

    fn decoded(bytes: &[u8]) -> Vec<i16> {
        let meta = array_of(DOC.as_bytes()).unwrap();
        let repr = ChunkRepr { shape: vec![4], dtype: &meta.dtype, fill: (&meta.fill).into() };
        meta.codecs.decode(bytes.to_vec(), &repr).unwrap().chunks(2).map(|b| i16::from_le_bytes([b[0], b[1]])).collect()
    }

    #[test]
    fn both_writers_changes_of_one_chunk_are_kept_down_to_the_byte() {
        let base = encoded([1, 2, 3, 4]);
        // Ours changed element 0 and the low byte of element 3; theirs element 1 and the high
        // byte of element 3.
        let ours = encoded([10, 2, 3, 0x0005]);
        let theirs = encoded([1, 20, 3, 0x0704]);
        let merged =
            merge(DOC.as_bytes(), "c/1", ChunkVersions { base: Some(&base), ours: Some(&ours), theirs: Some(&theirs) }).unwrap().unwrap();
        assert_eq!(decoded(&merged), [10, 20, 3, 0x0705]);
        // An absent base and theirs: fill, so all ours differs; ours as the base was: theirs.
        let merged = merge(DOC.as_bytes(), "c/0", ChunkVersions { base: None, ours: Some(&ours), theirs: None }).unwrap().unwrap();
        assert_eq!(decoded(&merged), [10, 2, 3, 0x0005]);
        assert_eq!(merge(DOC.as_bytes(), "c/0", ChunkVersions { base: Some(&base), ours: Some(&base), theirs: None }).unwrap(), None);
        assert!(merge(DOC.as_bytes(), "c/9/9", ChunkVersions { base: None, ours: None, theirs: None }).is_err());
    }

    #[test]
    fn only_a_growth_keeps_every_chunk_in_place() {
        let grown = DOC.replace("\"shape\": [8]", "\"shape\": [12]");
        let shrunk = DOC.replace("\"shape\": [8]", "\"shape\": [4]");
        let recoded = DOC.replace("\"level\": 1", "\"level\": 3");
        assert!(grown_only(DOC.as_bytes(), grown.as_bytes()));
        assert!(!grown_only(DOC.as_bytes(), shrunk.as_bytes()));
        assert!(!grown_only(DOC.as_bytes(), recoded.as_bytes()));
    }
}
