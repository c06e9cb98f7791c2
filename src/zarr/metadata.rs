//! Array and group metadata, v3 (`zarr.json`) and v2 (`.zarray`, `.zgroup`), into one model.

use serde_json::{Value, json};

pub use super::document::{Attributes, Document};

use super::codec::{BytesCodec, BytesToBytesCodec, CodecChain, TransposeCodec};
use super::dtype::DataType;
use super::grid::{AxisGrid, ChunkGrid, parse_shape};
use super::key::ChunkKeyEncoding;
use crate::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZarrFormat {
    V2,
    V3,
}

#[derive(Debug)]
pub struct ArrayMetadata {
    pub format: ZarrFormat,
    pub shape: Vec<u64>,
    pub dtype: DataType,
    pub grid: ChunkGrid,
    pub key_encoding: ChunkKeyEncoding,
    /// One element of fill, little-endian.
    pub fill: Vec<u8>,
    pub codecs: CodecChain,
    pub dimension_names: Option<Vec<Option<String>>>,
    /// The document as stored (`zarr.json` or `.zarray`), kept so that rewrites change only
    /// what changed; its attributes as their text.
    pub document: Document,
}

/// The documents an array's metadata is stored in (v3, v2).
pub const DOCUMENT_NAMES: [&str; 2] = ["zarr.json", ".zarray"];

/// What a node's metadata says it is: a group with its attributes (v3: from `zarr.json`; v2:
/// `.zattrs`, read beside it), or an array.
#[derive(Debug)]
pub enum NodeMetadata {
    Group(Attributes),
    Array(Box<ArrayMetadata>),
}

const V3_ARRAY_FIELDS: [&str; 11] = [
    "zarr_format",
    "node_type",
    "shape",
    "data_type",
    "chunk_grid",
    "chunk_key_encoding",
    "fill_value",
    "codecs",
    "attributes",
    "storage_transformers",
    "dimension_names",
];
const V3_GROUP_FIELDS: [&str; 4] = ["zarr_format", "node_type", "attributes", "consolidated_metadata"];

/// Refuse unknown fields unless they say `"must_understand": false`.
fn check_fields(doc: &Document, known: &[&str]) -> Result<()> {
    for k in doc.keys() {
        if known.contains(&k) {
            continue;
        }
        if doc.get(k).and_then(|v| v.get("must_understand")).and_then(Value::as_bool) == Some(false) {
            continue;
        }
        return Err(Error::metadata(format!("unsupported metadata field {k:?} (it must be understood)")));
    }
    Ok(())
}

fn field<'a>(doc: &'a Document, name: &str) -> Result<&'a Value> {
    doc.get(name).ok_or_else(|| Error::metadata(format!("metadata has no {name:?}")))
}

pub fn parse_json(bytes: &[u8], what: &str) -> Result<Value> {
    serde_json::from_slice(bytes).map_err(|e| Error::metadata(format!("{what} is not valid JSON: {e}")))
}

/// Parse a v3 `zarr.json` (taken, not copied: a large document is held once).
pub fn parse_v3(doc: Document) -> Result<NodeMetadata> {
    match doc.get("zarr_format") {
        Some(v) if v.as_u64() == Some(3) => {}
        other => {
            return Err(Error::metadata(format!("zarr.json has zarr_format {}, expected 3", other.unwrap_or(&Value::Null))));
        }
    }
    match field(&doc, "node_type")?.as_str() {
        Some("group") => {
            check_fields(&doc, &V3_GROUP_FIELDS)?;
            Ok(NodeMetadata::Group(doc.attributes().cloned().unwrap_or_default()))
        }
        Some("array") => {
            check_fields(&doc, &V3_ARRAY_FIELDS)?;
            Ok(NodeMetadata::Array(Box::new(parse_v3_array(doc)?)))
        }
        _ => Err(Error::metadata(format!("zarr.json has node_type {}, expected \"array\" or \"group\"", field(&doc, "node_type")?))),
    }
}

fn parse_v3_array(doc: Document) -> Result<ArrayMetadata> {
    let shape = parse_shape(field(&doc, "shape")?, "shape")?;
    let ndim = shape.len();
    let dtype = DataType::parse_v3(field(&doc, "data_type")?)?;
    if let Some(st) = doc.get("storage_transformers")
        && st.as_array().is_none_or(|a| !a.is_empty())
    {
        return Err(Error::metadata(format!("storage transformers are not supported: {st}")));
    }
    let dimension_names = match doc.get("dimension_names") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) if a.len() == ndim => Some(a.iter().map(|x| x.as_str().map(str::to_string)).collect()),
        Some(other) => {
            return Err(Error::metadata(format!("dimension_names {other} must list one name (or null) per dimension")));
        }
    };
    let grid = ChunkGrid::parse_v3(field(&doc, "chunk_grid")?, &shape)?;
    let key_encoding = ChunkKeyEncoding::parse_v3(field(&doc, "chunk_key_encoding")?, ndim)?;
    let fill = dtype.parse_fill(field(&doc, "fill_value")?)?;
    let chunk_shape = grid.chunk_shape(&vec![0; ndim]);
    check_sizes(&shape, &dtype, &grid)?;
    let codecs = CodecChain::parse_v3(field(&doc, "codecs")?, &dtype, &chunk_shape)?;
    if let Some(sharding) = codecs.array_to_bytes.as_sharding() {
        // Every shard edge, not only the first, must hold whole inner chunks.
        grid.subdivided(&sharding.inner_shape)?;
    }
    Ok(ArrayMetadata { format: ZarrFormat::V3, shape, dtype, grid, key_encoding, fill, codecs, dimension_names, document: doc })
}

/// Parse a v2 `.zarray`.
pub fn parse_v2_array(doc: &Document) -> Result<ArrayMetadata> {
    let format = field(doc, "zarr_format")?;
    if format.as_u64() != Some(2) {
        return Err(Error::metadata(format!(".zarray has zarr_format {format}, expected 2")));
    }
    let shape = parse_shape(field(doc, "shape")?, "shape")?;
    let ndim = shape.len();
    let chunks = parse_shape(field(doc, "chunks")?, "chunks")?;
    let filters: Vec<Value> = match doc.get("filters") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(other) => {
            return Err(Error::metadata(format!("filters must be a list or null, got {other}")));
        }
    };
    let filter_id = |f: &Value| f.get("id").and_then(Value::as_str).map(str::to_string);
    let first_filter = filters.first().and_then(filter_id);
    let (dtype, big_endian) = DataType::parse_v2(field(doc, "dtype")?, first_filter.as_deref())?;
    let grid = ChunkGrid::regular(chunks, ndim)?;
    check_sizes(&shape, &dtype, &grid)?;
    let separator = match doc.get("dimension_separator").and_then(Value::as_str) {
        None | Some(".") => '.',
        Some("/") => '/',
        Some(other) => {
            return Err(Error::metadata(format!("dimension_separator {other:?} must be \".\" or \"/\"")));
        }
    };
    let fill = match doc.get("fill_value") {
        // zarr-python 2 wrote 0 as the fill of `|O` arrays: zarr-python 3 reads a number there
        // as its text ("0"); its bytes arrays, which zarr-python 3 refuses, as empty.
        Some(Value::Number(n)) if dtype == DataType::String => n.to_string().into_bytes(),
        Some(Value::Number(_)) if dtype == DataType::Bytes => Vec::new(),
        v => dtype.parse_fill(v.unwrap_or(&Value::Null))?,
    };
    let mut array_to_array: Vec<Box<dyn super::codec::ArrayToArrayCodec>> = Vec::new();
    match doc.get("order").and_then(Value::as_str) {
        Some("C") | None => {}
        Some("F") => {
            if ndim > 1 {
                array_to_array.push(Box::new(TransposeCodec::new((0..ndim).rev().collect(), ndim)?));
            }
        }
        Some(other) => {
            return Err(Error::metadata(format!("order {other:?} must be \"C\" or \"F\"")));
        }
    }
    let mut bytes_to_bytes: Vec<Box<dyn BytesToBytesCodec>> = Vec::new();
    // For `|O` arrays the first filter (vlen-utf8 / vlen-bytes) turns elements into bytes.
    let filters = if dtype.is_variable() { &filters[1..] } else { &filters[..] };
    for f in filters {
        bytes_to_bytes.push(super::codec::table::v2(f, &dtype, big_endian)?);
    }
    match doc.get("compressor") {
        None | Some(Value::Null) => {}
        Some(c) => bytes_to_bytes.push(super::codec::table::v2(c, &dtype, big_endian)?),
    }
    let endian = if big_endian { json!({"endian": "big"}) } else { json!({"endian": "little"}) };
    let array_to_bytes: Box<dyn super::codec::ArrayToBytesCodec> = match (&dtype, first_filter.as_deref()) {
        (DataType::String, _) => Box::new(super::codec::VlenInterleavedCodec { name: "vlen-utf8" }),
        (DataType::Bytes, _) => Box::new(super::codec::VlenInterleavedCodec { name: "vlen-bytes" }),
        _ => Box::new(BytesCodec::parse(&endian, &dtype)?),
    };
    if dtype.is_variable() && !array_to_array.is_empty() {
        return Err(Error::Unsupported("order \"F\" for variable-length elements".into()));
    }
    let codecs = CodecChain { array_to_array, array_to_bytes, bytes_to_bytes };
    Ok(ArrayMetadata {
        format: ZarrFormat::V2,
        shape,
        dtype,
        grid,
        key_encoding: ChunkKeyEncoding::V2 { separator },
        fill,
        codecs,
        dimension_names: None,
        document: doc.clone(),
    })
}

/// Refuse sizes that overflow, or a chunk larger than one decoded chunk may be
/// (`limits::max_chunk_bytes`), before anything is allocated by them. Shards are chunks too,
/// so their inner chunks and index are bounded with them.
fn check_sizes(shape: &[u64], dtype: &DataType, grid: &ChunkGrid) -> Result<()> {
    use crate::limits::{MAX_AXIS, max_chunk_bytes};
    if let Some((axis, n)) = shape.iter().enumerate().find(|&(_, &n)| n > MAX_AXIS) {
        return Err(Error::metadata(format!("shape {shape:?}: axis {axis} has {n} elements, more than 2^62")));
    }
    // Variable-length elements take some memory each once decoded, whatever their length.
    let item = dtype.size().map_or(u128::from(crate::limits::TEXT_ELEMENT_COST), |s| s.max(1) as u128);
    let product = |dims: &[u64]| dims.iter().try_fold(item, |acc, &n| acc.checked_mul(u128::from(n)));
    match product(shape) {
        Some(bytes) if bytes <= i64::MAX as u128 => {}
        _ => return Err(Error::metadata(format!("shape {shape:?}: the array's bytes do not fit in a file (2^63 bytes at most)"))),
    }
    let chunk: Vec<u64> = grid.axes.iter().map(|a| a.largest_chunk()).collect();
    let bound = max_chunk_bytes();
    match product(&chunk) {
        Some(bytes) if bytes <= u128::from(bound) => Ok(()),
        _ => Err(Error::metadata(format!(
            "chunk shape {chunk:?}: one chunk would take more than {bound} bytes in memory (the --max-chunk-size bound)"
        ))),
    }
}

/// Parse a v2 `.zgroup`.
pub fn parse_v2_group(doc: &Value) -> Result<NodeMetadata> {
    if doc.get("zarr_format").and_then(Value::as_u64) != Some(2) {
        return Err(Error::metadata(".zgroup does not say zarr_format 2"));
    }
    // Its attributes are in `.zattrs` (`node::read_node` reads them).
    Ok(NodeMetadata::Group(Attributes::default()))
}

impl ArrayMetadata {
    pub fn item_size(&self) -> usize {
        self.dtype.size().unwrap_or(0)
    }

    /// How many chunks its grid has (saturating: a rectilinear grid may have trillions).
    pub fn chunk_count(&self) -> u64 {
        self.grid.grid_shape(&self.shape).iter().fold(1, |n: u64, &c| n.saturating_mul(c))
    }

    /// Bytes in the flat file (parsing checked that they fit).
    pub fn byte_len(&self) -> u64 {
        self.shape.iter().product::<u64>() * self.item_size() as u64
    }

    /// Bytes of one row (one index along axis 0); a 0-d array's one element.
    pub fn row_bytes(&self) -> u64 {
        self.shape.iter().skip(1).product::<u64>() * self.item_size() as u64
    }

    /// What a rewrite of the array's document may change in place (through a mount): the
    /// attributes always; `shape[0]` where the flat file can take a new length (not 0-d, not
    /// variable-length text). Anything else needs every chunk rewritten.
    pub fn in_place_edits(&self) -> &'static [&'static str] {
        if self.shape.is_empty() || self.dtype.is_variable() { &["attributes"] } else { &["attributes", "shape[0]"] }
    }

    /// The name of the document this metadata is stored in.
    pub fn document_name(&self) -> &'static str {
        match self.format {
            ZarrFormat::V3 => "zarr.json",
            ZarrFormat::V2 => ".zarray",
        }
    }

    /// Whether `after` is this array grown and nothing else (attributes aside): a shape no
    /// smaller along any axis, the document otherwise this one's, so that every chunk keeps
    /// its place and meaning.
    pub fn grown_into(&self, after: &ArrayMetadata) -> bool {
        after.shape.len() == self.shape.len()
            && after.shape.iter().zip(&self.shape).all(|(a, b)| a >= b)
            && self.with_shape(&after.shape).is_ok_and(|grown| grown.document.with_attributes(None) == after.document.with_attributes(None))
    }

    /// The same array with another shape: the document with `shape` replaced, parsed again. A
    /// rectilinear edge list that no longer reaches the end gets one new edge for the growth,
    /// as zarr-python's `resize` writes it; shrinking keeps the edges.
    pub fn with_shape(&self, shape: &[u64]) -> Result<ArrayMetadata> {
        let mut grid = self.grid.clone();
        for (axis, a) in self.grid.axes.iter().enumerate() {
            if let AxisGrid::Edges(edges) = a
                && shape[axis] > edges.total()
            {
                grid.axes[axis] = AxisGrid::Edges(edges.pushed_back(shape[axis] - edges.total())?);
            }
        }
        self.edited(|doc| {
            doc["shape"] = json!(shape);
            if grid != self.grid {
                doc["chunk_grid"] = grid.to_json();
            }
        })
    }

    /// The same array after `rows` new elements in front along `axis` (docs/offset-encoding.md),
    /// and how many chunks they make. A regular axis takes whole chunks: `offset[axis]` drops by
    /// their count. A rectilinear edge list takes any number as one new edge: `offset[axis] -= 1`.
    pub fn prepended(&self, axis: usize, rows: u64) -> Result<(ArrayMetadata, u64)> {
        let ChunkKeyEncoding::Offset { offset, .. } = &self.key_encoding else {
            return Err(Error::Unsupported("prepending needs the offset chunk key encoding".into()));
        };
        let mut grid = self.grid.clone();
        let chunks = match &self.grid.axes[axis] {
            AxisGrid::Step(n) if rows.is_multiple_of(*n) => rows / n,
            AxisGrid::Step(n) => {
                return Err(Error::Invalid(format!("{rows} rows along axis {axis} are not a whole number of {n}-row chunks")));
            }
            AxisGrid::Edges(edges) => {
                grid.axes[axis] = AxisGrid::Edges(edges.pushed_front(rows)?);
                1
            }
        };
        let mut shape = self.shape.clone();
        let mut offset = offset.clone();
        let too_far = || Error::Invalid(format!("a prepend of {rows} rows takes axis {axis} past what its shape or key offset can hold"));
        shape[axis] = shape[axis].checked_add(rows).ok_or_else(too_far)?;
        offset[axis] = i64::try_from(chunks).ok().and_then(|c| offset[axis].checked_sub(c)).ok_or_else(too_far)?;
        let meta = self.edited(|doc| {
            doc["shape"] = json!(shape);
            doc["chunk_key_encoding"]["configuration"]["offset"] = json!(offset);
            if grid != self.grid {
                doc["chunk_grid"] = grid.to_json();
            }
        })?;
        Ok((meta, chunks))
    }

    /// The same array with the `offset` chunk key encoding, zero offsets and the same separator:
    /// the same keys, so a metadata-only change. Only `default`-encoded v3 arrays can adopt it.
    pub fn adopted_offset(&self) -> Result<ArrayMetadata> {
        match (&self.key_encoding, self.format) {
            (ChunkKeyEncoding::Offset { .. }, _) => self.edited(|_| {}),
            (ChunkKeyEncoding::Default { separator }, ZarrFormat::V3) => {
                let encoding =
                    json!({"name": "offset", "configuration": {"offset": vec![0; self.shape.len()], "separator": separator.to_string()}});
                self.edited(|doc| doc["chunk_key_encoding"] = encoding)
            }
            _ => Err(Error::Unsupported(self.prepend_refusal().unwrap_or_default().into())),
        }
    }

    /// The same array under the `default` chunk key encoding with the same separator (what
    /// `zarrfs normalize` writes once the keys are renamed).
    pub fn default_encoded(&self) -> Result<ArrayMetadata> {
        let encoding = json!({"name": "default", "configuration": {"separator": self.key_encoding.separator().to_string()}});
        self.edited(|doc| doc["chunk_key_encoding"] = encoding)
    }

    /// Why rows cannot be prepended to this array (as it is), if they cannot.
    pub fn prepend_refusal(&self) -> Option<&'static str> {
        match (&self.key_encoding, self.format) {
            (ChunkKeyEncoding::Offset { .. }, _) => None,
            (_, ZarrFormat::V2) => Some("it is a Zarr v2 array: its chunk keys cannot shift without renaming every chunk"),
            (ChunkKeyEncoding::Default { .. }, _) => Some(
                "it uses the default chunk key encoding: switch it to offset first with `zarrfs adopt STORE ARRAY` \
                 (the metadata only), or mount with --adopt-offset",
            ),
            (ChunkKeyEncoding::V2 { .. }, _) => Some("its v2 chunk key encoding cannot shift without renaming every chunk"),
        }
    }

    /// The document after `edit` of its fields, parsed again.
    pub fn edited(&self, edit: impl FnOnce(&mut Value)) -> Result<ArrayMetadata> {
        self.reparsed(self.document.edited(edit))
    }

    /// The same array with other attributes (`None`: none).
    pub fn with_attributes(&self, attributes: Option<Attributes>) -> Result<ArrayMetadata> {
        self.reparsed(self.document.with_attributes(attributes))
    }

    /// `doc`, an edit of this array's document, parsed.
    fn reparsed(&self, doc: Document) -> Result<ArrayMetadata> {
        match self.format {
            // The names were read from `.zattrs`, which the edit leaves alone.
            ZarrFormat::V2 => parse_v2_array(&doc).map(|a| ArrayMetadata { dimension_names: self.dimension_names.clone(), ..a }),
            ZarrFormat::V3 => match parse_v3(doc)? {
                NodeMetadata::Array(a) => Ok(*a),
                NodeMetadata::Group(_) => Err(Error::metadata("zarr.json became a group")),
            },
        }
    }
}

/// Serialise `doc` in the style of the document it replaces: indented with 2 spaces (as
/// zarr-python and zarrs write) when the old one spans lines, compact (as tensorstore writes)
/// otherwise; a trailing newline is kept when there was one.
pub fn render_like<T: serde::Serialize + ?Sized>(old: Option<&[u8]>, doc: &T) -> Vec<u8> {
    let trailing_newline = old.is_some_and(|o| o.ends_with(b"\n"));
    let pretty = old.is_none_or(|o| o.trim_ascii_end().contains(&b'\n'));
    let mut out = if pretty { serde_json::to_vec_pretty(doc) } else { serde_json::to_vec(doc) }.unwrap_or_default();
    if trailing_newline {
        out.push(b'\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v3(extra: Value) -> Value {
        let mut doc = json!({
            "shape": [5, 4], "data_type": "int16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": -1,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 0, "checksum": false}}],
            "attributes": {"units": "m"}, "dimension_names": ["y", null],
            "zarr_format": 3, "node_type": "array", "storage_transformers": []
        });
        for (k, v) in extra.as_object().unwrap() {
            doc[k] = v.clone();
        }
        doc
    }

    fn array(doc: &Value) -> Result<ArrayMetadata> {
        match parse_v3(Document::from_value(doc.clone())?)? {
            NodeMetadata::Array(a) => Ok(*a),
            NodeMetadata::Group(_) => panic!("group"),
        }
    }

    #[test]
    fn zarr_python_document() {
        let a = array(&v3(json!({}))).unwrap();
        assert_eq!(a.shape, vec![5, 4]);
        assert_eq!(a.fill, (-1i16).to_le_bytes());
        assert_eq!(a.byte_len(), 40);
        assert_eq!(a.dimension_names, Some(vec![Some("y".into()), None]));
        assert_eq!(a.key_encoding.key(&[1, 0]), "c/1/0");
    }

    #[test]
    fn tensorstore_document() {
        let doc = parse_json(br#"{"chunk_grid":{"configuration":{"chunk_shape":[2,3]},"name":"regular"},"chunk_key_encoding":{"name":"default"},"codecs":[{"configuration":{"endian":"little"},"name":"bytes"}],"data_type":"int16","fill_value":0,"node_type":"array","shape":[5,4],"zarr_format":3}"#, "t").unwrap();
        assert!(array(&doc).is_ok());
    }

    #[test]
    fn refusals_name_what_they_refuse() {
        let msg = |doc: Value| array(&doc).unwrap_err().to_string();
        assert!(msg(v3(json!({"fancy": {"x": 1}}))).contains("fancy"));
        assert!(array(&v3(json!({"fancy": {"must_understand": false}}))).is_ok());
        assert!(msg(v3(json!({"storage_transformers": [{"name": "x"}]}))).contains("storage transformers"));
        assert!(msg(v3(json!({"codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "lzma"}]}))).contains("lzma"));
        assert!(
            array(&v3(json!({"codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, "crc32c"]}))).is_ok(),
            "short-hand names"
        );
        assert!(msg(v3(json!({"chunk_grid": {"name": "hexagonal"}}))).contains("hexagonal"));
        assert!(msg(v3(json!({"data_type": "float128"}))).contains("float128"));
        assert!(msg(v3(json!({"dimension_names": ["y"]}))).contains("dimension_names"));
        assert!(msg(v3(json!({"zarr_format": 2}))).contains("zarr_format"));
        assert!(msg(v3(json!({"fill_value": "0x01"}))).contains("fill_value"));
        assert!(msg(v3(json!({"codecs": [{"name": "zstd"}]}))).contains("zstd"));
        let vlen = v3(json!({"data_type": "string", "fill_value": "", "codecs": [{"name": "vlen-utf8"}]}));
        assert!(array(&vlen).is_ok());
        let mismatch = v3(json!({"data_type": "string", "fill_value": "", "codecs": [{"name": "bytes"}]}));
        assert!(msg(mismatch).contains("does not fit"));
        let group = json!({"zarr_format": 3, "node_type": "group", "attributes": {}, "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": {}}});
        assert!(matches!(parse_v3(Document::from_value(group).unwrap()), Ok(NodeMetadata::Group(_))));
    }

    #[test]
    fn numbers_at_the_ends_of_their_types_are_refused_not_wrapped() {
        let mut doc = v3(json!({"chunk_key_encoding": {"name": "offset", "configuration": {"offset": [i64::MIN, 0]}}}));
        let a = array(&doc).unwrap();
        assert!(a.prepended(0, 2).unwrap_err().to_string().contains("past what its shape or key offset can hold"));
        doc["chunk_key_encoding"]["configuration"]["offset"] = json!([i64::MIN + 1, 0]);
        assert_eq!(array(&doc).unwrap().prepended(0, 2).unwrap().1, 1, "one chunk more fits");
        let v2 = json!({"zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "<U4611686018427387904", "fill_value": null});
        assert!(parse_v2_array(&Document::from_value(v2.clone()).unwrap()).unwrap_err().to_string().contains("unsupported v2 dtype"));
    }

    #[test]
    fn v2_document() {
        let doc = json!({"shape": [3, 5], "chunks": [2, 2], "dtype": ">f8", "fill_value": "NaN", "order": "F", "filters": [{"id": "delta", "dtype": ">f8"}],
            "dimension_separator": "/", "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}, "zarr_format": 2});
        let a = parse_v2_array(&Document::from_value(doc.clone()).unwrap()).unwrap();
        assert_eq!(a.fill, f64::NAN.to_le_bytes());
        assert_eq!(a.key_encoding.key(&[1, 2]), "1/2");
        assert_eq!(a.codecs.array_to_array.len(), 1);
        assert_eq!(a.codecs.bytes_to_bytes.len(), 2);
        let mut bad = doc.clone();
        bad["compressor"] = json!({"id": "zfpy"});
        assert!(parse_v2_array(&Document::from_value(bad.clone()).unwrap()).unwrap_err().to_string().contains("zfpy"));
        let mut obj = doc;
        obj["dtype"] = json!("|O");
        obj["filters"] = json!([{"id": "vlen-utf8"}]);
        obj["fill_value"] = json!("");
        obj["order"] = json!("C");
        let strings = parse_v2_array(&Document::from_value(obj.clone()).unwrap()).unwrap();
        assert_eq!((strings.dtype.clone(), strings.codecs.array_to_bytes.name()), (DataType::String, "vlen-utf8"));
        // zarr-python 2's fill for `|O`: its text, as zarr-python 3 reads it.
        obj["fill_value"] = json!(0);
        assert_eq!(parse_v2_array(&Document::from_value(obj.clone()).unwrap()).unwrap().fill, b"0");
        obj["filters"] = json!([{"id": "vlen-bytes"}]);
        assert_eq!(parse_v2_array(&Document::from_value(obj).unwrap()).unwrap().fill, b"");
    }
}
