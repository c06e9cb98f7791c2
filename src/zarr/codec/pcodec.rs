//! numcodecs `pcodec` (Pcodec's standalone format, by the `pco` crate that Python's `pcodec`
//! wraps): numbers of 16, 32 or 64 bits, compressed as one sequence in C order. v3
//! `numcodecs.pcodec` is an array→bytes codec (zarr-python hands it the chunk in the machine's
//! byte order); v2 gives it as a compressor over the array's own (little-endian) elements.
//! Configuration as numcodecs': `level` (0-12, default 8), `mode_spec` (`auto`, `classic`),
//! `delta_spec` (`auto`, `no_op`, `none`, `try_consecutive`, `try_lookback`),
//! `delta_encoding_order`, `paging_spec` (`equal_pages_up_to`) and `equal_pages_up_to`.

use pco::data_types::Number as PcoNumber;
use pco::{ChunkConfig, DeltaSpec, ModeSpec, PagingSpec};
use serde_json::{Value, json};

use super::{ArrayToBytesCodec, BytesToBytesCodec, ChunkRepr, CodecTraits, corrupt, too_large};
use crate::zarr::dtype::DataType;
use crate::{Error, Result};

/// The element types Pcodec takes (numcodecs refuses 8-bit ones, as Pcodec does by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Numbers {
    I16,
    I32,
    I64,
    U16,
    U32,
    U64,
    F16,
    F32,
    F64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcodecCodec {
    numbers: Numbers,
    level: usize,
    mode_spec: String,
    delta_spec: String,
    delta_encoding_order: Option<usize>,
    equal_pages_up_to: usize,
}

/// A number as little-endian bytes.
trait LittleEndian: PcoNumber {
    const SIZE: usize;
    fn read(bytes: &[u8]) -> Self;
    fn write(self, out: &mut Vec<u8>);
}

macro_rules! little_endian {
    ($($t:ty),*) => {$(
        impl LittleEndian for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn read(bytes: &[u8]) -> Self {
                let mut le = [0u8; std::mem::size_of::<$t>()];
                le.copy_from_slice(bytes);
                <$t>::from_le_bytes(le)
            }
            fn write(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
little_endian!(i16, i32, i64, u16, u32, u64, half::f16, f32, f64);

fn pco_error(e: pco::errors::PcoError) -> Error {
    corrupt(format!("pcodec: {e}"))
}

fn compress_as<T: LittleEndian>(bytes: &[u8], config: &ChunkConfig) -> Result<Vec<u8>> {
    let numbers: Vec<T> = bytes.chunks_exact(T::SIZE).map(T::read).collect();
    pco::standalone::simple_compress(&numbers, config).map_err(|e| Error::Invalid(format!("pcodec: {e}")))
}

/// Exactly `n` numbers, never more: a stream that holds more or fewer is corrupt.
fn decompress_as<T: LittleEndian>(bytes: &[u8], n: usize) -> Result<Vec<u8>> {
    let mut numbers = Vec::new();
    numbers.try_reserve_exact(n).map_err(|_| crate::limits::out_of_memory())?;
    numbers.resize(n, T::default());
    let progress = pco::standalone::simple_decompress_into(bytes, &mut numbers).map_err(pco_error)?;
    if !progress.finished {
        return Err(too_large("pcodec", n * T::SIZE));
    }
    if progress.n_processed != n {
        return Err(corrupt(format!("pcodec: {} numbers where the chunk holds {n}", progress.n_processed)));
    }
    let mut out = super::with_room(n * T::SIZE)?;
    numbers.into_iter().for_each(|x| x.write(&mut out));
    Ok(out)
}

impl PcodecCodec {
    /// numcodecs' keyword arguments (a v3 `configuration`, or a v2 codec object), for
    /// elements of `dtype` (`big`: a v2 dtype in big-endian order, which numcodecs refuses too).
    pub fn parse(config: &Value, dtype: &DataType, big: bool) -> Result<PcodecCodec> {
        let numbers = match dtype {
            DataType::Int16 => Numbers::I16,
            DataType::Int32 => Numbers::I32,
            DataType::Int64 | DataType::DateTime64(_) | DataType::TimeDelta64(_) => Numbers::I64,
            DataType::UInt16 => Numbers::U16,
            DataType::UInt32 => Numbers::U32,
            DataType::UInt64 => Numbers::U64,
            DataType::Float16 => Numbers::F16,
            DataType::Float32 => Numbers::F32,
            DataType::Float64 => Numbers::F64,
            other => return Err(Error::metadata(format!("pcodec does not support the data type {}", other.name()))),
        };
        if big {
            return Err(Error::metadata("pcodec takes numbers in the machine's byte order, not big-endian ones"));
        }
        let text = |key: &str, default: &str| -> Result<String> {
            match config.get(key) {
                None | Some(Value::Null) => Ok(default.to_string()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(other) => Err(Error::metadata(format!("pcodec {key} must be a string, got {other}"))),
            }
        };
        let whole = |key: &str| -> Result<Option<usize>> {
            match config.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_u64()
                    .map(|n| Some(n as usize))
                    .ok_or_else(|| Error::metadata(format!("pcodec {key} must be a whole number, got {v}"))),
            }
        };
        let codec = PcodecCodec {
            numbers,
            level: whole("level")?.unwrap_or(pco::DEFAULT_COMPRESSION_LEVEL),
            mode_spec: text("mode_spec", "auto")?,
            delta_spec: text("delta_spec", "auto")?,
            delta_encoding_order: whole("delta_encoding_order")?,
            equal_pages_up_to: whole("equal_pages_up_to")?.unwrap_or(pco::DEFAULT_MAX_PAGE_N),
        };
        let paging = text("paging_spec", "equal_pages_up_to")?;
        if paging != "equal_pages_up_to" {
            return Err(Error::metadata(format!("pcodec paging_spec {paging:?} is not supported")));
        }
        codec.chunk_config()?;
        Ok(codec)
    }

    /// The compressor's configuration, as numcodecs makes it from the same arguments.
    fn chunk_config(&self) -> Result<ChunkConfig> {
        let bad = |what: String| Error::metadata(format!("pcodec {what}"));
        if self.level > 12 {
            return Err(bad(format!("level {} is not within 0-12", self.level)));
        }
        let mode_spec = match self.mode_spec.as_str() {
            "auto" => ModeSpec::Auto,
            "classic" => ModeSpec::Classic,
            other => return Err(bad(format!("mode_spec {other:?} is not supported"))),
        };
        // pco's bound (its `MAX_CONSECUTIVE_DELTA_ORDER`, not exported): a larger order is
        // refused when the array is opened, not at the first chunk written.
        if let Some(order) = self.delta_encoding_order.filter(|&order| order > 7) {
            return Err(bad(format!("delta_encoding_order {order} is not within 0-7")));
        }
        let delta_spec = match (self.delta_spec.as_str(), self.delta_encoding_order) {
            // Before delta_spec, an order alone chose consecutive deltas.
            ("auto" | "try_consecutive", Some(order)) => DeltaSpec::TryConsecutive(order),
            (_, Some(_)) => return Err(bad("delta_encoding_order needs delta_spec \"try_consecutive\"".into())),
            ("auto", None) => DeltaSpec::Auto,
            ("no_op" | "none", None) => DeltaSpec::NoOp,
            ("try_lookback", None) => DeltaSpec::TryLookback,
            (other, None) => return Err(bad(format!("delta_spec {other:?} is not supported (or needs delta_encoding_order)"))),
        };
        Ok(ChunkConfig::default()
            .with_compression_level(self.level)
            .with_mode_spec(mode_spec)
            .with_delta_spec(delta_spec)
            .with_paging_spec(PagingSpec::EqualPagesUpTo(self.equal_pages_up_to.max(1))))
    }

    fn size(&self) -> usize {
        match self.numbers {
            Numbers::I16 | Numbers::U16 | Numbers::F16 => 2,
            Numbers::I32 | Numbers::U32 | Numbers::F32 => 4,
            Numbers::I64 | Numbers::U64 | Numbers::F64 => 8,
        }
    }

    fn compress(&self, bytes: &[u8]) -> Result<Vec<u8>> {
        if !bytes.len().is_multiple_of(self.size()) {
            return Err(Error::Invalid(format!("pcodec: {} bytes are not whole numbers of {} bytes", bytes.len(), self.size())));
        }
        let config = self.chunk_config()?;
        match self.numbers {
            Numbers::I16 => compress_as::<i16>(bytes, &config),
            Numbers::I32 => compress_as::<i32>(bytes, &config),
            Numbers::I64 => compress_as::<i64>(bytes, &config),
            Numbers::U16 => compress_as::<u16>(bytes, &config),
            Numbers::U32 => compress_as::<u32>(bytes, &config),
            Numbers::U64 => compress_as::<u64>(bytes, &config),
            Numbers::F16 => compress_as::<half::f16>(bytes, &config),
            Numbers::F32 => compress_as::<f32>(bytes, &config),
            Numbers::F64 => compress_as::<f64>(bytes, &config),
        }
    }

    fn decompress(&self, bytes: &[u8], n: usize) -> Result<Vec<u8>> {
        match self.numbers {
            Numbers::I16 => decompress_as::<i16>(bytes, n),
            Numbers::I32 => decompress_as::<i32>(bytes, n),
            Numbers::I64 => decompress_as::<i64>(bytes, n),
            Numbers::U16 => decompress_as::<u16>(bytes, n),
            Numbers::U32 => decompress_as::<u32>(bytes, n),
            Numbers::U64 => decompress_as::<u64>(bytes, n),
            Numbers::F16 => decompress_as::<half::f16>(bytes, n),
            Numbers::F32 => decompress_as::<f32>(bytes, n),
            Numbers::F64 => decompress_as::<f64>(bytes, n),
        }
    }
}

impl CodecTraits for PcodecCodec {
    fn name(&self) -> &'static str {
        "pcodec"
    }
    fn configuration(&self) -> Value {
        json!({
            "level": self.level,
            "mode_spec": self.mode_spec,
            "delta_spec": self.delta_spec,
            "delta_encoding_order": self.delta_encoding_order,
            "paging_spec": "equal_pages_up_to",
            "equal_pages_up_to": self.equal_pages_up_to,
        })
    }
}

impl ArrayToBytesCodec for PcodecCodec {
    fn decode(&self, bytes: Vec<u8>, repr: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        self.decompress(&bytes, repr.num_elements() as usize)
    }

    fn encode(&self, decoded: Vec<u8>, _repr: &ChunkRepr<'_>) -> Result<Vec<u8>> {
        self.compress(&decoded)
    }

    fn encoded_size(&self, _repr: &ChunkRepr<'_>) -> Option<u64> {
        None
    }

    fn encoded_bound(&self, repr: &ChunkRepr<'_>) -> u64 {
        crate::limits::compressed_bound(repr.byte_len() as u64)
    }
}

/// v2: a compressor over the chunk's elements; the chunk is whole, `max` bytes of them.
impl BytesToBytesCodec for PcodecCodec {
    fn decode(&self, bytes: Vec<u8>, max: usize) -> Result<Vec<u8>> {
        self.decompress(&bytes, max / self.size())
    }

    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        self.compress(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip_and_a_stream_of_more_is_refused() {
        let c = PcodecCodec::parse(&json!({"level": 8}), &DataType::Float64, false).unwrap();
        let values: Vec<u8> = (0..1000).flat_map(|i| (f64::from(i) * 0.1).to_le_bytes()).collect();
        let packed = BytesToBytesCodec::encode(&c, values.clone()).unwrap();
        assert!(packed.len() < values.len() / 2, "{} bytes", packed.len());
        assert_eq!(BytesToBytesCodec::decode(&c, packed.clone(), values.len()).unwrap(), values);
        // A chunk of fewer elements than the stream holds: never decoded past them.
        assert!(BytesToBytesCodec::decode(&c, packed.clone(), 80).is_err());
        assert!(BytesToBytesCodec::decode(&c, packed[..packed.len() / 2].to_vec(), values.len()).is_err());
        assert!(BytesToBytesCodec::decode(&c, b"not pcodec".to_vec(), 80).is_err());
        // Damaged streams: an error or numbers, within the chunk, never a panic.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..3000 {
            let mut damaged = packed.clone();
            for _ in 0..1 + seed % 3 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = (seed >> 8) as usize % damaged.len();
                damaged[at] ^= 1 << (seed % 8);
            }
            if let Ok(out) = BytesToBytesCodec::decode(&c, damaged, values.len()) {
                assert_eq!(out.len(), values.len());
            }
        }
    }

    #[test]
    fn configurations_are_refused_as_numcodecs_refuses_them() {
        let f4 = DataType::Float32;
        assert!(PcodecCodec::parse(&json!({"mode_spec": "try_dict"}), &f4, false).is_err());
        assert!(PcodecCodec::parse(&json!({"delta_spec": "no_op", "delta_encoding_order": 2}), &f4, false).is_err());
        assert!(PcodecCodec::parse(&json!({"delta_spec": "try_consecutive", "delta_encoding_order": 2}), &f4, false).is_ok());
        assert!(PcodecCodec::parse(&json!({"delta_spec": "try_consecutive", "delta_encoding_order": 7}), &f4, false).is_ok());
        assert!(PcodecCodec::parse(&json!({"delta_spec": "try_consecutive", "delta_encoding_order": 8}), &f4, false).is_err());
        assert!(PcodecCodec::parse(&json!({"level": 13}), &f4, false).is_err());
        assert!(PcodecCodec::parse(&json!({}), &DataType::UInt8, false).is_err());
        assert!(PcodecCodec::parse(&json!({}), &f4, true).is_err());
    }
}
