//! The one place a codec's name becomes a codec: v3 names (with the aliases zarrs writes) and
//! numcodecs ids for v2 filters and compressors, each to its constructor.

use serde_json::Value;

use super::{
    ArrayToArrayCodec, ArrayToBytesCodec, BloscCodec, BytesCodec, BytesToBytesCodec, Bz2Codec, Crc32cCodec, DeltaCodec, GzipCodec,
    Lz4Codec, LzmaCodec, ShardingCodec, TransposeCodec, VlenInterleavedCodec, ZarrsVlenCodec, ZlibCodec, ZstdCodec,
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

fn v3_constructor(name: &str) -> Option<V3Constructor> {
    use Built::*;
    Some(match name {
        "transpose" => |c, _, shape| Ok(ArrayToArray(Box::new(TransposeCodec::parse(c, shape.len())?))),
        "bytes" => |c, dtype, _| Ok(ArrayToBytes(Box::new(BytesCodec::parse(c, dtype)?))),
        "sharding_indexed" => |c, dtype, shape| Ok(ArrayToBytes(Box::new(ShardingCodec::parse(c, dtype, shape)?))),
        "vlen-utf8" => |_, _, _| Ok(ArrayToBytes(Box::new(VlenInterleavedCodec { name: "vlen-utf8" }))),
        "vlen-bytes" => |_, _, _| Ok(ArrayToBytes(Box::new(VlenInterleavedCodec { name: "vlen-bytes" }))),
        n if ZARRS_VLEN_V2.contains(&n) => |_, _, _| Ok(ArrayToBytes(Box::new(VlenInterleavedCodec { name: "zarrs.vlen_v2" }))),
        n if ZARRS_VLEN.contains(&n) => |c, _, _| Ok(ArrayToBytes(Box::new(ZarrsVlenCodec::parse(c)?))),
        "blosc" => |c, dtype, _| Ok(BytesToBytes(Box::new(BloscCodec::parse_v3(c, dtype)?))),
        "zstd" => |c, _, _| Ok(BytesToBytes(Box::new(ZstdCodec::parse(c)?))),
        "gzip" => |c, _, _| Ok(BytesToBytes(Box::new(GzipCodec::parse(c)?))),
        "crc32c" => |_, _, _| Ok(BytesToBytes(Box::new(Crc32cCodec))),
        // numcodecs codecs as zarr-python 3 names them in v3 documents.
        "numcodecs.bz2" => |c, _, _| Ok(BytesToBytes(Box::new(Bz2Codec::parse(c)?))),
        "numcodecs.lzma" => |c, _, _| Ok(BytesToBytes(Box::new(LzmaCodec::parse(c)?))),
        _ => return None,
    })
}

/// The v3 codec `name` with its configuration.
pub fn v3(name: &str, config: &Value, dtype: &DataType, shape: &[u64]) -> Result<Built> {
    let build = v3_constructor(name).ok_or_else(|| Error::metadata(format!("unsupported codec {name:?}")))?;
    build(config, dtype, shape)
}

/// A v2 filter or compressor (`{"id": ..., ...}`): numcodecs allows any codec in either place.
pub fn v2(config: &Value, dtype: &DataType) -> Result<Box<dyn BytesToBytesCodec>> {
    let id = config.get("id").and_then(Value::as_str);
    Ok(match id {
        Some("blosc") => Box::new(BloscCodec::parse_v2(config, dtype.size().unwrap_or(1))?),
        Some("zstd") => Box::new(ZstdCodec::parse(config)?),
        Some("zlib") => Box::new(ZlibCodec::parse(config)?),
        Some("gzip") => Box::new(GzipCodec::parse(config)?),
        Some("lz4") => Box::new(Lz4Codec::parse(config)?),
        Some("delta") => Box::new(DeltaCodec::parse_v2(config)?),
        Some("bz2") => Box::new(Bz2Codec::parse(config)?),
        Some("lzma") => Box::new(LzmaCodec::parse(config)?),
        Some(other) => return Err(Error::metadata(format!("unsupported v2 codec {other:?}"))),
        None => return Err(Error::metadata(format!("v2 codec without an id: {config}"))),
    })
}
