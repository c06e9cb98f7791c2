//! The one place a codec's name becomes a codec: v3 names (with the aliases zarrs writes) and
//! numcodecs ids for v2 filters and compressors, each to its constructor.

use serde_json::Value;

use super::numeric::Typed;
use super::typed_filter::TypedFilter;
use super::{
    ArrayToArrayCodec, ArrayToBytesCodec, AsTypeCodec, AxisDeltaCodec, BitRoundCodec, BloscCodec, BytesCodec, BytesToBytesCodec, Bz2Codec,
    CastValueCodec, Checksum32Codec, DeltaCodec, FixedScaleOffsetCodec, FloatPredictorCodec, GzipCodec, Lz4Codec, LzmaCodec, PackBitsCodec,
    PcodecCodec, QuantizeCodec, ScaleOffsetCodec, ShardingCodec, ShuffleCodec, TiffLzwCodec, TiffPackBitsCodec, TransposeCodec,
    VlenInterleavedCodec, ZarrsVlenCodec, ZlibCodec, ZstdCodec,
};
use crate::zarr::dtype::DataType;
use crate::{Error, Result};

/// A codec of one of the three kinds.
pub enum Built {
    ArrayToArray(Box<dyn ArrayToArrayCodec>),
    ArrayToBytes(Box<dyn ArrayToBytesCodec>),
    BytesToBytes(Box<dyn BytesToBytesCodec>),
}

/// Builds a v3 codec from its configuration, for elements of a data type in chunks of a shape
/// (the shape the codecs before it produce).
type V3Constructor = fn(&Value, &DataType, &[u64]) -> Result<Built>;

const ZARRS_VLEN: [&str; 3] = ["vlen", "zarrs.vlen", "https://codec.zarrs.dev/array_to_bytes/vlen"];
const ZARRS_VLEN_V2: [&str; 3] = ["vlen_v2", "zarrs.vlen_v2", "https://codec.zarrs.dev/array_to_bytes/vlen_v2"];

/// numcodecs codecs that run on bytes, by their ids: zarr-python 3 names them `numcodecs.ID` in
/// v3 documents; v2 documents give the same ids as filters and compressors. `itemsize` is what
/// numcodecs sees of the buffer (1 for a v3 bytes→bytes codec, the element in v2). With them,
/// the imagecodecs codecs of TIFF strips and tiles that tifffile's fsspec references name
/// (`imagecodecs_ID`; its predictors carry their own dtype and chunk shape).
fn numcodecs_bytes(id: &str, config: &Value, itemsize: usize) -> Option<Result<Box<dyn BytesToBytesCodec>>> {
    fn boxed<C: BytesToBytesCodec + 'static>(c: Result<C>) -> Result<Box<dyn BytesToBytesCodec>> {
        c.map(|c| Box::new(c) as Box<dyn BytesToBytesCodec>)
    }
    Some(match id {
        "blosc" => boxed(BloscCodec::parse_v2(config, itemsize)),
        "zstd" => boxed(ZstdCodec::parse(config)),
        "zlib" => boxed(ZlibCodec::parse(config)),
        "gzip" => boxed(GzipCodec::parse(config)),
        "lz4" => boxed(Lz4Codec::parse(config)),
        "bz2" => boxed(Bz2Codec::parse(config)),
        "lzma" => boxed(LzmaCodec::parse(config)),
        "shuffle" => boxed(ShuffleCodec::parse(config, itemsize)),
        "crc32" | "crc32c" | "adler32" | "fletcher32" | "jenkins_lookup3" => boxed(Checksum32Codec::parse(id, config)),
        "imagecodecs_lzw" => boxed(Ok(TiffLzwCodec)),
        "imagecodecs_packbits" => boxed(Ok(TiffPackBitsCodec)),
        "imagecodecs_deflate" | "imagecodecs_zlib" => boxed(ZlibCodec::parse(config)),
        "imagecodecs_zstd" => boxed(ZstdCodec::parse(config)),
        "imagecodecs_delta" => boxed(AxisDeltaCodec::parse(config)),
        "imagecodecs_floatpred" => boxed(FloatPredictorCodec::parse(config)),
        _ => return None,
    })
}

/// numcodecs filters over typed elements, by their ids, for elements of `dtype` (v3: the
/// chunk's type, little-endian; v2: the array's, in its byte order), with the type they encode to.
fn numcodecs_typed(id: &str, config: &Value, dtype: &Typed) -> Option<Result<(Box<dyn BytesToBytesCodec>, Typed)>> {
    fn typed<C: BytesToBytesCodec + 'static>(c: Result<C>, encoded: impl Fn(&C) -> Typed) -> Result<(Box<dyn BytesToBytesCodec>, Typed)> {
        c.map(|c| {
            let t = encoded(&c);
            (Box::new(c) as Box<dyn BytesToBytesCodec>, t)
        })
    }
    let same = |_: &_| dtype.clone();
    Some(match id {
        "delta" => typed(DeltaCodec::parse(config, Some(dtype)), |c| c.encoded_type().clone()),
        "fixedscaleoffset" => typed(FixedScaleOffsetCodec::parse(config, Some(dtype)), |c| c.encoded_type().clone()),
        "quantize" => typed(QuantizeCodec::parse(config, Some(dtype)), |c| c.encoded_type().clone()),
        "astype" => typed(AsTypeCodec::parse(config, Some(dtype)), |c| c.encoded_type().clone()),
        "bitround" => typed(BitRoundCodec::parse(config, dtype.clone()), same),
        "packbits" if dtype.dtype == DataType::Bool => typed(Ok(PackBitsCodec), |_| Typed { dtype: DataType::UInt8, big: false }),
        "packbits" => Err(Error::metadata(format!("packbits needs bool elements, not {}", dtype.dtype.name()))),
        _ => return None,
    })
}

const TYPED: [&str; 6] = ["delta", "fixedscaleoffset", "quantize", "astype", "bitround", "packbits"];

/// Codecs no crate here does, refused by name rather than as unknown.
const NOT_BUILT: [&str; 3] = ["zfpy", "bitshuffle", "categorize"];

/// A numcodecs filter over typed elements as a v3 array→array codec.
fn typed_filter(id: &str, config: &Value, dtype: &DataType) -> Result<Built> {
    let native = Typed::native(id, dtype)?;
    let (transform, encoded) =
        numcodecs_typed(id, config, &native).unwrap_or_else(|| Err(Error::metadata(format!("unsupported codec \"numcodecs.{id}\""))))?;
    // zarr-python hands these codecs the chunk in the machine's byte order.
    if encoded.big {
        return Err(Error::metadata(format!("numcodecs.{id}: a big-endian result type in a v3 document is not supported")));
    }
    Ok(Built::ArrayToArray(Box::new(TypedFilter {
        packs_bits: id == "packbits",
        encoded: (encoded.dtype != *dtype).then_some(encoded.dtype),
        transform,
    })))
}

fn v3_constructor(name: &str) -> Option<V3Constructor> {
    use Built::*;
    Some(match name {
        "transpose" => |c, _, shape| Ok(ArrayToArray(Box::new(TransposeCodec::parse(c, shape.len())?))),
        "bytes" => |c, dtype, _| Ok(ArrayToBytes(Box::new(BytesCodec::parse(c, dtype)?))),
        "sharding_indexed" => |c, dtype, shape| Ok(ArrayToBytes(Box::new(ShardingCodec::parse(c, dtype, shape)?))),
        "vlen-utf8" => |_, _, _| Ok(ArrayToBytes(Box::new(VlenInterleavedCodec { name: "vlen-utf8" }))),
        "vlen-bytes" => |_, _, _| Ok(ArrayToBytes(Box::new(VlenInterleavedCodec { name: "vlen-bytes" }))),
        "numcodecs.pcodec" => |c, dtype, _| Ok(ArrayToBytes(Box::new(PcodecCodec::parse(c, dtype, false)?))),
        n if ZARRS_VLEN_V2.contains(&n) => |_, _, _| Ok(ArrayToBytes(Box::new(VlenInterleavedCodec { name: "zarrs.vlen_v2" }))),
        n if ZARRS_VLEN.contains(&n) => |c, _, _| Ok(ArrayToBytes(Box::new(ZarrsVlenCodec::parse(c)?))),
        "blosc" => |c, dtype, _| Ok(BytesToBytes(Box::new(BloscCodec::parse_v3(c, dtype)?))),
        "zstd" => |c, _, _| Ok(BytesToBytes(Box::new(ZstdCodec::parse(c)?))),
        "gzip" => |c, _, _| Ok(BytesToBytes(Box::new(GzipCodec::parse(c)?))),
        // The spec's crc32c is numcodecs' with its checksum at the end (its default).
        "crc32c" => |c, _, _| Ok(BytesToBytes(Box::new(Checksum32Codec::parse("crc32c", c)?))),
        "scale_offset" => |c, dtype, _| {
            let transform = Box::new(ScaleOffsetCodec::parse(c, Typed::native("scale_offset", dtype)?)?);
            Ok(ArrayToArray(Box::new(TypedFilter { transform, encoded: None, packs_bits: false })))
        },
        "cast_value" => |c, dtype, _| {
            let transform = CastValueCodec::parse(c, dtype)?;
            let encoded = Some(transform.encoded_type().dtype.clone()).filter(|t| t != dtype);
            Ok(ArrayToArray(Box::new(TypedFilter { transform: Box::new(transform), encoded, packs_bits: false })))
        },
        _ => return None,
    })
}

/// The v3 codec `name` with its configuration.
pub fn v3(name: &str, config: &Value, dtype: &DataType, shape: &[u64]) -> Result<Built> {
    if let Some(build) = v3_constructor(name) {
        return build(config, dtype, shape);
    }
    // numcodecs codecs as zarr-python 3 names them in v3 documents.
    let id = name.strip_prefix("numcodecs.").unwrap_or(name);
    if NOT_BUILT.contains(&id) {
        return Err(Error::Unsupported(format!("codec {name:?}: no Rust implementation is built into zarrfs")));
    }
    if !name.starts_with("numcodecs.") {
        return Err(Error::metadata(format!("unsupported codec {name:?}")));
    }
    match numcodecs_bytes(id, config, 1) {
        Some(codec) => Ok(Built::BytesToBytes(codec?)),
        None => typed_filter(id, config, dtype),
    }
}

/// `bytes` decompressed by the compressor its first bytes name (gzip, zstd, bzip2, xz), into at
/// most `max` bytes, with the compressor's id; bytes no compressor here names as they are.
pub fn uncompress(bytes: Vec<u8>, max: usize) -> Result<(Option<&'static str>, Vec<u8>)> {
    let id = match bytes.as_slice() {
        [0x1f, 0x8b, ..] => "gzip",
        [0x28, 0xb5, 0x2f, 0xfd, ..] => "zstd",
        [b'B', b'Z', b'h', ..] => "bz2",
        [0xfd, b'7', b'z', b'X', b'Z', 0, ..] => "lzma",
        _ => return Ok((None, bytes)),
    };
    let codec = numcodecs_bytes(id, &serde_json::json!({}), 1).ok_or_else(|| Error::metadata(format!("no {id} codec")))??;
    Ok((Some(id), codec.decode(bytes, max).map_err(|e| Error::metadata(format!("compressed with {id}: {e}")))?))
}

/// A v2 filter or compressor (`{"id": ..., ...}`): numcodecs allows any codec in either place.
/// `dtype` in its byte order (`big`) is what the filter sees: the array's elements as stored.
pub fn v2(config: &Value, dtype: &DataType, big: bool) -> Result<Box<dyn BytesToBytesCodec>> {
    let id = config.get("id").and_then(Value::as_str).ok_or_else(|| Error::metadata(format!("v2 codec without an id: {config}")))?;
    if let Some(codec) = numcodecs_bytes(id, config, dtype.size().unwrap_or(1)) {
        return codec;
    }
    if id == "pcodec" {
        return Ok(Box::new(PcodecCodec::parse(config, dtype, big)?));
    }
    // imagecodecs' image codecs (JPEG, WebP, JPEG 2000, LERC, ...) are not built.
    if NOT_BUILT.contains(&id) || id.starts_with("imagecodecs_") {
        return Err(Error::Unsupported(format!("v2 codec {id:?}: no Rust implementation is built into zarrfs")));
    }
    let unknown = || Error::metadata(format!("unsupported v2 codec {id:?}"));
    if !TYPED.contains(&id) {
        return Err(unknown());
    }
    let typed = Typed { big, ..Typed::native(id, dtype)? };
    Ok(numcodecs_typed(id, config, &typed).ok_or_else(unknown)??.0)
}
