//! Codecs, one file each, behind three kinds (as the spec and zarrs split them):
//! array→array (`transpose`), array→bytes (`bytes`, `sharding_indexed`) and bytes→bytes
//! (compressors, checksums, v2 filters). numcodecs' filters over typed elements are written once,
//! as bytes→bytes over typed elements (v2 runs them so), and run as array→array in v3
//! documents (`typed_filter`). A `CodecChain` runs a full pipeline.

mod astype;
mod axis_delta;
mod bitround;
mod blosc;
mod bytes;
mod bz2;
mod cast_value;
mod checksum32;
mod delta;
mod fixedscaleoffset;
mod float_predictor;
mod gzip;
mod lz4;
mod lzma;
mod numeric;
mod packbits;
mod pcodec;
mod quantize;
mod scale_offset;
mod sharding;
mod shuffle;
pub mod table;
mod tiff_lzw;
mod tiff_packbits;
mod transpose;
mod typed_filter;
mod vlen;
mod zlib;
mod zstd;

pub use self::astype::AsTypeCodec;
pub use self::axis_delta::AxisDeltaCodec;
pub use self::bitround::BitRoundCodec;
pub use self::blosc::BloscCodec;
pub use self::bytes::BytesCodec;
pub use self::bz2::Bz2Codec;
pub use self::cast_value::CastValueCodec;
pub use self::checksum32::Checksum32Codec;
pub use self::delta::DeltaCodec;
pub use self::fixedscaleoffset::FixedScaleOffsetCodec;
pub use self::float_predictor::FloatPredictorCodec;
pub use self::gzip::GzipCodec;
pub use self::lz4::Lz4Codec;
pub use self::lzma::LzmaCodec;
pub use self::packbits::PackBitsCodec;
pub use self::pcodec::PcodecCodec;
pub use self::quantize::QuantizeCodec;
pub use self::scale_offset::ScaleOffsetCodec;
pub use self::sharding::{ShardIndex, ShardingCodec};
pub use self::shuffle::ShuffleCodec;
pub use self::tiff_lzw::TiffLzwCodec;
pub use self::tiff_packbits::TiffPackBitsCodec;
pub use self::transpose::TransposeCodec;
pub use self::vlen::{VlenInterleavedCodec, ZarrsVlenCodec};
pub use self::zlib::ZlibCodec;
pub use self::zstd::ZstdCodec;

use std::borrow::Cow;

use serde_json::Value;

use super::dtype::DataType;
use crate::{Error, Result};
use table::Built;

/// What a codec needs to know of the chunk it encodes: its shape, data type and fill.
#[derive(Clone, Debug)]
pub struct ChunkRepr<'a> {
    pub shape: Vec<u64>,
    pub dtype: &'a DataType,
    pub fill: std::borrow::Cow<'a, [u8]>,
}

impl ChunkRepr<'_> {
    pub fn num_elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Decoded size in bytes (fixed-size types).
    pub fn byte_len(&self) -> usize {
        self.num_elements() as usize * self.dtype.size().unwrap_or(0)
    }
}

/// Shared by every codec: how it is named and configured (for `info` and metadata).
pub trait CodecTraits: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &'static str;
    fn configuration(&self) -> Value;
}

pub trait ArrayToArrayCodec: CodecTraits {
    fn encoded_shape(&self, shape: &[u64]) -> Vec<u64>;
    /// The data type of the encoded chunk, where the codec changes it (numcodecs' `astype`).
    fn encoded_dtype(&self) -> Option<&DataType> {
        None
    }
    /// The fill value as the encoded chunk holds it, where the data type changes (what a
    /// sharding codec after this one leaves out).
    fn encoded_fill(&self, fill: &[u8]) -> Vec<u8> {
        fill.to_vec()
    }
    /// Why an encoding would not give back what was written, if it would not.
    fn lossy(&self) -> Option<String> {
        None
    }
    /// Whether each element is encoded alone, wherever it lies (so that a run of elements
    /// written can be passed through it as the chunk would be).
    fn elementwise(&self) -> bool {
        false
    }
    /// `encoded` is C order over `encoded_shape(decoded.shape)`; returns C order over `decoded.shape`.
    fn decode(&self, encoded: Vec<u8>, decoded: &ChunkRepr<'_>) -> Result<Vec<u8>>;
    fn encode(&self, decoded: Vec<u8>, repr: &ChunkRepr<'_>) -> Result<Vec<u8>>;
}

pub trait ArrayToBytesCodec: CodecTraits {
    fn decode(&self, bytes: Vec<u8>, repr: &ChunkRepr<'_>) -> Result<Vec<u8>>;
    fn encode(&self, decoded: Vec<u8>, repr: &ChunkRepr<'_>) -> Result<Vec<u8>>;
    /// Encoded size for a decoded size, where it is fixed.
    fn encoded_size(&self, repr: &ChunkRepr<'_>) -> Option<u64>;
    /// The most bytes an encoding of a chunk of `repr` can take (variable-length elements: the
    /// chunk size bound).
    fn encoded_bound(&self, repr: &ChunkRepr<'_>) -> u64 {
        self.encoded_size(repr).unwrap_or_else(crate::limits::max_chunk_bytes)
    }
    /// Why an encoding would not give back what was written (a lossy codec inside a shard).
    fn lossy(&self) -> Option<String> {
        None
    }
    /// Whether each element is encoded alone, wherever it lies.
    fn elementwise(&self) -> bool {
        false
    }
    /// Sharding exposes its index so that a read can fetch single inner chunks.
    fn as_sharding(&self) -> Option<&ShardingCodec> {
        None
    }
    /// Whether this codec holds variable-length elements (and the two methods below work).
    fn is_variable(&self) -> bool {
        false
    }
    /// The `n` elements of a chunk of variable-length elements.
    fn decode_elements(&self, _bytes: Vec<u8>, _n: usize, _max: u64) -> Result<Vec<Vec<u8>>> {
        Err(Error::metadata(format!("{} does not hold variable-length elements", self.name())))
    }
    fn encode_elements(&self, _elements: &[Vec<u8>]) -> Result<Vec<u8>> {
        Err(Error::metadata(format!("{} does not hold variable-length elements", self.name())))
    }
}

pub trait BytesToBytesCodec: CodecTraits {
    /// Decode into at most `max` bytes: a decoder that would produce more stops there and
    /// fails (a decompression bomb is never inflated past what the chunk can hold).
    fn decode(&self, bytes: Vec<u8>, max: usize) -> Result<Vec<u8>>;
    /// `decode` of bytes it is not given to own (an inner chunk inside a shard read whole): a
    /// decoder that only reads its input decodes it where it lies, with no copy first.
    fn decode_from(&self, bytes: &[u8], max: usize) -> Result<Vec<u8>> {
        self.decode(bytes.to_vec(), max)
    }
    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>>;
    /// Encoded size for a decoded size, where it is fixed (checksums, not compressors).
    fn encoded_size(&self, _decoded: u64) -> Option<u64> {
        None
    }
    /// The most bytes an encoding of `decoded` bytes can take.
    fn encoded_bound(&self, decoded: u64) -> u64 {
        self.encoded_size(decoded).unwrap_or_else(|| crate::limits::compressed_bound(decoded))
    }
    /// Why an encoding would not give back what was written, if it would not.
    fn lossy(&self) -> Option<String> {
        None
    }
    /// Whether each element is encoded alone, wherever it lies.
    fn elementwise(&self) -> bool {
        false
    }
}

/// The error of a decoder that would produce more than `max` bytes.
pub(crate) fn too_large(codec: &str, max: usize) -> Error {
    corrupt(format!("{codec}: decodes to more than the {max} bytes the chunk can hold"))
}

/// Read a decoder to its end, but never past `max` bytes; memory that cannot be had is ENOMEM.
pub(crate) fn read_bounded(codec: &str, mut reader: impl std::io::Read, max: usize) -> Result<Vec<u8>> {
    let mut out: Vec<u8> = Vec::new();
    loop {
        if out.len() == out.capacity() {
            // Doubling, as read_to_end grows, but fallibly; one byte past `max` tells a bomb.
            let more = out.len().max(64 << 10).min(max + 1 - out.len().min(max));
            out.try_reserve(more.max(1)).map_err(|_| crate::limits::out_of_memory())?;
        }
        let start = out.len();
        let room = (out.capacity() - start).min(max + 1 - start);
        out.resize(start + room, 0);
        match reader.read(&mut out[start..]) {
            Ok(0) => {
                out.truncate(start);
                return Ok(out);
            }
            Ok(n) => out.truncate(start + n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => out.truncate(start),
            Err(e) => return Err(corrupt(format!("{codec}: {e}"))),
        }
        if out.len() > max {
            return Err(too_large(codec, max));
        }
    }
}

/// An empty buffer with room for `n` bytes, or ENOMEM.
pub(crate) fn with_room(n: usize) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|_| crate::limits::out_of_memory())?;
    Ok(out)
}

/// A decode failure without a key yet; the array adds the key.
pub(crate) fn corrupt(cause: impl std::fmt::Display) -> Error {
    Error::corrupt("", cause)
}

/// A full pipeline: array→array codecs, one array→bytes codec, bytes→bytes codecs.
#[derive(Debug)]
pub struct CodecChain {
    pub array_to_array: Vec<Box<dyn ArrayToArrayCodec>>,
    pub array_to_bytes: Box<dyn ArrayToBytesCodec>,
    pub bytes_to_bytes: Vec<Box<dyn BytesToBytesCodec>>,
}

impl CodecChain {
    /// Parse a v3 `codecs` list for chunks of `chunk_shape` elements of `dtype`.
    pub fn parse_v3(list: &Value, dtype: &DataType, chunk_shape: &[u64]) -> Result<CodecChain> {
        let items = list.as_array().ok_or_else(|| Error::metadata(format!("codecs must be a list, got {list}")))?;
        let mut a2a: Vec<Box<dyn ArrayToArrayCodec>> = Vec::new();
        let mut a2b: Option<Box<dyn ArrayToBytesCodec>> = None;
        let mut b2b: Vec<Box<dyn BytesToBytesCodec>> = Vec::new();
        let mut shape = chunk_shape.to_vec();
        let mut stage_dtype = dtype.clone();
        for item in items {
            // The spec's short-hand: a bare name stands for {"name": name}.
            let expanded;
            let item = match item {
                Value::String(name) => {
                    expanded = serde_json::json!({"name": name});
                    &expanded
                }
                other => other,
            };
            let obj = item.as_object().ok_or_else(|| Error::metadata(format!("a codec must be an object or a name, got {item}")))?;
            let name = obj.get("name").and_then(Value::as_str).ok_or_else(|| Error::metadata(format!("codec without a name: {item}")))?;
            let empty = Value::Object(Default::default());
            let config = obj.get("configuration").unwrap_or(&empty);
            let order_error = |kind: &str| Error::metadata(format!("codec {name} ({kind}) is out of order in the codec list"));
            match table::v3(name, config, &stage_dtype, &shape)? {
                Built::ArrayToArray(codec) => {
                    if a2b.is_some() {
                        return Err(order_error("array→array"));
                    }
                    shape = codec.encoded_shape(&shape);
                    if let Some(encoded) = codec.encoded_dtype() {
                        stage_dtype = encoded.clone();
                    }
                    a2a.push(codec);
                }
                Built::ArrayToBytes(codec) => {
                    if a2b.is_some() {
                        return Err(Error::metadata("codecs has more than one array→bytes codec"));
                    }
                    if codec.is_variable() != stage_dtype.is_variable() {
                        return Err(Error::metadata(format!("codec {name} does not fit the data type {}", stage_dtype.name())));
                    }
                    if codec.is_variable() && !a2a.is_empty() {
                        return Err(Error::metadata("array→array codecs before a variable-length codec are not supported"));
                    }
                    a2b = Some(codec);
                }
                Built::BytesToBytes(codec) => {
                    if a2b.is_none() {
                        return Err(order_error("bytes→bytes"));
                    }
                    b2b.push(codec);
                }
            }
        }
        let array_to_bytes = a2b.ok_or_else(|| Error::metadata("codecs has no array→bytes codec"))?;
        Ok(CodecChain { array_to_array: a2a, array_to_bytes, bytes_to_bytes: b2b })
    }

    /// The chunk representation each array→array stage produces, first the input.
    fn reprs<'a>(&'a self, repr: &ChunkRepr<'a>) -> Vec<ChunkRepr<'a>> {
        Self::reprs_through(&self.array_to_array, repr)
    }

    /// The chunk representation each of `codecs` produces, first the input.
    fn reprs_through<'a>(codecs: &'a [Box<dyn ArrayToArrayCodec>], repr: &ChunkRepr<'a>) -> Vec<ChunkRepr<'a>> {
        let mut out = vec![repr.clone()];
        for c in codecs {
            let Some(last) = out.last() else { break };
            let next = match c.encoded_dtype() {
                Some(dtype) => ChunkRepr { shape: c.encoded_shape(&last.shape), dtype, fill: c.encoded_fill(&last.fill).into() },
                None => ChunkRepr { shape: c.encoded_shape(&last.shape), ..last.clone() },
            };
            out.push(next);
        }
        out
    }

    /// The most bytes each stage's output can take, from the array→bytes codec's on: the bound
    /// of each bytes→bytes decode, and last the bound of the stored object.
    fn stage_bounds(&self, repr: &ChunkRepr<'_>) -> Vec<u64> {
        let reprs = self.reprs(repr);
        let mut bounds = vec![self.array_to_bytes.encoded_bound(reprs.last().unwrap_or(repr))];
        for c in &self.bytes_to_bytes {
            let last = bounds.last().copied().unwrap_or(0);
            bounds.push(c.encoded_bound(last));
        }
        bounds
    }

    /// Why chunks written with these codecs would not read back as written (a lossy filter):
    /// the array is read-only unless the mount rounds writes (`stored_values`).
    pub fn lossy(&self) -> Option<String> {
        self.array_to_array
            .iter()
            .find_map(|c| c.lossy())
            .or_else(|| self.array_to_bytes.lossy())
            .or_else(|| self.bytes_to_bytes.iter().find_map(|c| c.lossy()))
    }

    /// A run of whole decoded elements of `dtype` as the store will give them back: passed
    /// through the codecs up to the last lossy one and back, element by element (a write is
    /// rounded where it lands, so that what the mount shows before and after the chunk is
    /// stored is the same). Refused where a codec on that way does not encode each element
    /// alone (`delta`, `shuffle`, `transpose`): a run alone would not round as the chunk does.
    pub fn stored_values(&self, run: Vec<u8>, dtype: &DataType) -> Result<Vec<u8>> {
        let not_alone = |name: &str| Error::Unsupported(format!("{name} does not encode each element alone"));
        let b2b_end = self.bytes_to_bytes.iter().rposition(|c| c.lossy().is_some()).map_or(0, |i| i + 1);
        let inner = self.array_to_bytes.lossy().is_some();
        let a2a_end = if b2b_end > 0 || inner {
            self.array_to_array.len()
        } else {
            self.array_to_array.iter().rposition(|c| c.lossy().is_some()).map_or(0, |i| i + 1)
        };
        if a2a_end == 0 && !inner && b2b_end == 0 {
            return Ok(run);
        }
        let size = dtype.size().filter(|&s| s > 0 && run.len().is_multiple_of(s));
        let size = size.ok_or_else(|| Error::Invalid(format!("{} bytes are not whole elements of {}", run.len(), dtype.name())))?;
        let a2a = &self.array_to_array[..a2a_end];
        if let Some(c) = a2a.iter().find(|c| !c.elementwise()) {
            return Err(not_alone(c.name()));
        }
        let repr = ChunkRepr { shape: vec![(run.len() / size) as u64], dtype, fill: vec![0; size].into() };
        let reprs = Self::reprs_through(a2a, &repr);
        let len = run.len();
        let mut values = run;
        for (c, r) in a2a.iter().zip(&reprs) {
            values = c.encode(values, r)?;
        }
        if inner || b2b_end > 0 {
            let at = &reprs[a2a_end];
            match self.array_to_bytes.as_sharding() {
                Some(sharding) if b2b_end == 0 => values = sharding.inner.stored_values(values, at.dtype)?,
                _ => {
                    if !self.array_to_bytes.elementwise() {
                        return Err(not_alone(self.array_to_bytes.name()));
                    }
                    let mut bytes = self.array_to_bytes.encode(values, at)?;
                    let b2b = &self.bytes_to_bytes[..b2b_end];
                    let mut lens = Vec::with_capacity(b2b.len());
                    for c in b2b {
                        if !c.elementwise() {
                            return Err(not_alone(c.name()));
                        }
                        lens.push(bytes.len());
                        bytes = c.encode(bytes)?;
                    }
                    for (c, len) in b2b.iter().zip(lens).rev() {
                        bytes = c.decode(bytes, len)?;
                    }
                    values = self.array_to_bytes.decode(bytes, at)?;
                }
            }
        }
        for (c, r) in a2a.iter().zip(&reprs).rev() {
            values = c.decode(values, r)?;
        }
        if values.len() != len {
            return Err(corrupt(format!("the codecs gave back {} bytes of {len}", values.len())));
        }
        Ok(values)
    }

    /// The most bytes a stored chunk of `repr` can take; a larger object is not read.
    pub fn encoded_bound(&self, repr: &ChunkRepr<'_>) -> u64 {
        self.stage_bounds(repr).last().copied().unwrap_or(0)
    }

    /// Undo the bytes→bytes codecs, each within the bound of what it can produce.
    fn decode_bytes(&self, bytes: Cow<'_, [u8]>, repr: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        self.decode_bytes_within(bytes, self.stage_bounds(repr))
    }

    /// The bound of each stage when the array→bytes codec's output may take `first` bytes.
    fn bounds_from(&self, first: u64) -> Vec<u64> {
        let mut bounds = vec![first];
        for c in &self.bytes_to_bytes {
            let last = bounds.last().copied().unwrap_or(0);
            bounds.push(c.encoded_bound(last));
        }
        bounds
    }

    /// Bytes borrowed are decoded where they lie by the first codec that can (`decode_from`).
    fn decode_bytes_within(&self, mut bytes: Cow<'_, [u8]>, bounds: Vec<u64>) -> Result<Vec<u8>> {
        for (i, c) in self.bytes_to_bytes.iter().enumerate().rev() {
            let max = usize::try_from(bounds[i]).unwrap_or(usize::MAX);
            let decoded = match bytes {
                Cow::Borrowed(b) => c.decode_from(b, max)?,
                Cow::Owned(v) => c.decode(v, max)?,
            };
            if decoded.len() > max {
                return Err(too_large(c.name(), max));
            }
            bytes = Cow::Owned(decoded);
        }
        Ok(bytes.into_owned())
    }

    /// Decode a stored chunk, given to own (`Vec<u8>`) or borrowed (`&[u8]`, copied only where a
    /// codec needs it so).
    pub fn decode<'b>(&self, bytes: impl Into<Cow<'b, [u8]>>, repr: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        let bytes = self.decode_bytes(bytes.into(), repr)?;
        let reprs = self.reprs(repr);
        let mut data = self.array_to_bytes.decode(bytes, reprs.last().unwrap_or(repr))?;
        for (i, c) in self.array_to_array.iter().enumerate().rev() {
            data = c.decode(data, &reprs[i])?;
        }
        Ok(data)
    }

    pub fn encode(&self, decoded: Vec<u8>, repr: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        let reprs = self.reprs(repr);
        let mut data = decoded;
        for (i, c) in self.array_to_array.iter().enumerate() {
            data = c.encode(data, &reprs[i])?;
        }
        let mut bytes = self.array_to_bytes.encode(data, reprs.last().unwrap_or(repr))?;
        for c in &self.bytes_to_bytes {
            bytes = c.encode(bytes)?;
        }
        Ok(bytes)
    }

    /// A chunk of variable-length elements: its `n` elements in C order, decoding to at most
    /// `max` bytes (`limits::text_chunk_bound`).
    pub fn decode_elements(&self, bytes: Vec<u8>, n: usize, max: u64) -> Result<Vec<Vec<u8>>> {
        let bytes = self.decode_bytes_within(Cow::Owned(bytes), self.bounds_from(max))?;
        self.array_to_bytes.decode_elements(bytes, n, max)
    }

    /// The most bytes a stored chunk of variable-length elements decoding to at most `max`
    /// bytes can take.
    pub fn elements_bound(&self, max: u64) -> u64 {
        self.bounds_from(max).last().copied().unwrap_or(max)
    }

    pub fn encode_elements(&self, elements: &[Vec<u8>]) -> Result<Vec<u8>> {
        let mut bytes = self.array_to_bytes.encode_elements(elements)?;
        for c in &self.bytes_to_bytes {
            bytes = c.encode(bytes)?;
        }
        Ok(bytes)
    }

    pub fn encoded_size(&self, repr: &ChunkRepr<'_>) -> Option<u64> {
        let reprs = self.reprs(repr);
        let mut n = self.array_to_bytes.encoded_size(reprs.last()?)?;
        for c in &self.bytes_to_bytes {
            n = c.encoded_size(n)?;
        }
        Some(n)
    }

    /// The sharding codec, when a chunk can be read one inner chunk at a time: sharding is the
    /// array→bytes codec with nothing before or after it.
    pub fn partial_sharding(&self) -> Option<&ShardingCodec> {
        if self.array_to_array.is_empty() && self.bytes_to_bytes.is_empty() { self.array_to_bytes.as_sharding() } else { None }
    }

    /// `[{"name":…, "configuration":…}, …]`, for `info`.
    pub fn describe(&self) -> Vec<Value> {
        let mut out = Vec::new();
        let mut push = |c: &dyn CodecTraits| out.push(serde_json::json!({"name": c.name(), "configuration": c.configuration()}));
        self.array_to_array.iter().for_each(|c| push(c.as_ref()));
        push(self.array_to_bytes.as_ref());
        self.bytes_to_bytes.iter().for_each(|c| push(c.as_ref()));
        out
    }
}

#[cfg(test)]
pub(crate) mod test_util {
    use super::*;

    /// Encode then decode through `chain` and check the round trip.
    pub fn round_trip(chain: &CodecChain, repr: &ChunkRepr<'_>, data: &[u8]) -> Vec<u8> {
        let enc = chain.encode(data.to_vec(), repr).expect("encode");
        let dec = chain.decode(enc.clone(), repr).expect("decode");
        assert_eq!(dec, data);
        enc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const BYTES: Value = Value::Null;

    fn chain(codecs: Value, dtype: &DataType) -> CodecChain {
        // BYTES stands for the bytes codec, little-endian.
        let le = |c: &Value| if c.is_null() { json!({"name": "bytes", "configuration": {"endian": "little"}}) } else { c.clone() };
        let mut codecs = codecs;
        for c in codecs.as_array_mut().into_iter().flatten() {
            if let Some(inner) = c.pointer_mut("/configuration/codecs").and_then(Value::as_array_mut) {
                inner.iter_mut().for_each(|i| *i = le(i));
            }
            if let Some(inner) = c.pointer_mut("/configuration/index_codecs").and_then(Value::as_array_mut) {
                inner.iter_mut().for_each(|i| *i = le(i));
            }
            *c = le(c);
        }
        CodecChain::parse_v3(&codecs, dtype, &[4, 4]).unwrap()
    }

    fn f32s(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn a_run_written_rounds_as_the_chunk_is_stored() {
        let f4 = DataType::Float32;
        // numcodecs.BitRound(keepbits=3).encode([1.1, -3.3, 1e30]) (see bitround.rs).
        let rounded: Vec<u8> = [0x3f90_0000u32, 0xc050_0000, 0x7150_0000].iter().flat_map(|v| v.to_le_bytes()).collect();
        let run = f32s(&[1.1, -3.3, 1e30]);
        let bitround = json!({"name": "numcodecs.bitround", "configuration": {"keepbits": 3}});
        let plain = chain(json!([bitround, BYTES, {"name": "zstd", "configuration": {"level": 1}}]), &f4);
        assert_eq!(plain.stored_values(run.clone(), &f4).unwrap(), rounded);
        // Inside a shard, with a checksum after it, as zarr-python writes filters with shards.
        let sharded = json!([{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2, 2], "codecs": [bitround, BYTES], "index_codecs": [BYTES, "crc32c"]}}, "crc32c"]);
        let sharded = chain(sharded, &f4);
        assert!(sharded.lossy().is_some(), "a lossy codec inside a shard makes the array lossy");
        assert_eq!(sharded.stored_values(run.clone(), &f4).unwrap(), rounded);
        // A narrowing astype: float64 values as float32 holds them.
        let f8 = DataType::Float64;
        let astype = chain(json!([{"name": "numcodecs.astype", "configuration": {"encode_dtype": "<f4"}}, BYTES]), &f8);
        let narrowed = astype.stored_values(0.1f64.to_le_bytes().to_vec(), &f8).unwrap();
        assert_eq!(narrowed, f64::from(0.1f32).to_le_bytes());
        // Lossless codecs give the run back untouched.
        let lossless = chain(json!([BYTES, {"name": "zstd", "configuration": {"level": 1}}]), &f4);
        assert_eq!(lossless.stored_values(run.clone(), &f4).unwrap(), run);
    }

    #[test]
    fn bytes_borrowed_decode_as_bytes_owned_do() {
        let f4 = DataType::Float32;
        let repr = ChunkRepr { shape: vec![4, 4], dtype: &f4, fill: vec![0; 4].into() };
        let values = f32s(&(0..16).map(|i| i as f32 * 0.5).collect::<Vec<_>>());
        for compressor in [
            json!({"name": "zstd", "configuration": {"level": 1}}),
            json!({"name": "gzip", "configuration": {"level": 1}}),
            json!({"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4, "blocksize": 0}}),
            json!({"name": "numcodecs.zlib", "configuration": {"level": 1}}),
            json!({"name": "numcodecs.bz2", "configuration": {"level": 1}}),
            json!({"name": "numcodecs.lzma", "configuration": {}}),
            json!({"name": "numcodecs.lz4", "configuration": {}}),
            // One that decodes by owning its bytes (it drops its checksum in place), after one that reads them.
            json!("crc32c"),
        ] {
            let chain = chain(json!([BYTES, {"name": "zstd", "configuration": {"level": 3}}, compressor]), &f4);
            let stored = chain.encode(values.clone(), &repr).unwrap();
            // Inside a larger buffer, as an inner chunk lies in its shard.
            let shard = [vec![7u8; 5], stored.clone(), vec![9u8; 3]].concat();
            assert_eq!(chain.decode(&shard[5..5 + stored.len()], &repr).unwrap(), values, "{compressor}");
            assert_eq!(chain.decode(stored.clone(), &repr).unwrap(), values, "{compressor}");
            // Damaged or cut short: the same error either way.
            for bad in [&stored[..stored.len() / 2], &shard[..stored.len()]] {
                let (owned, borrowed) = (chain.decode(bad.to_vec(), &repr), chain.decode(bad, &repr));
                assert_eq!(owned.map_err(|e| e.to_string()), borrowed.map_err(|e| e.to_string()), "{compressor}");
            }
        }
    }

    #[test]
    fn a_run_is_not_rounded_where_a_codec_does_not_encode_each_element_alone() {
        let f4 = DataType::Float32;
        let run = f32s(&[1.5, 2.25]);
        // A float delta rounds each element by the ones before it.
        let delta = chain(json!([{"name": "numcodecs.delta", "configuration": {"dtype": "<f4"}}, BYTES]), &f4);
        assert!(delta.lossy().is_some());
        let err = delta.stored_values(run.clone(), &f4).unwrap_err().to_string();
        assert!(err.contains("delta") && err.contains("alone"), "{err}");
        // A transpose before a lossy filter: the run alone has no shape to transpose.
        let transposed = chain(
            json!([{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "numcodecs.bitround", "configuration": {"keepbits": 3}}, BYTES]),
            &f4,
        );
        assert!(transposed.stored_values(run.clone(), &f4).unwrap_err().to_string().contains("transpose"));
        // Not whole elements.
        let bitround = chain(json!([{"name": "numcodecs.bitround", "configuration": {"keepbits": 3}}, BYTES]), &f4);
        assert!(bitround.stored_values(run[..5].to_vec(), &f4).is_err());
    }
}
