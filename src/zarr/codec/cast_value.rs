//! `cast_value` (array→array, zarr-extensions; zarr-python 3.4 with cast-value-rs): stores each
//! value converted to `data_type` by value, and decodes by converting back the same way. A float
//! becoming an integer is rounded as `rounding` says (nearest-even unless told); a value the
//! target cannot hold fails the chunk unless `out_of_range` is `clamp` (to an integer type's
//! least or greatest value; into a float, to ±∞ as cast-value-rs does) or `wrap` (integers modulo
//! 2^bits); NaN or ±∞ into an integer always fails. Where a float cannot hold a value exactly it
//! is rounded by the same rule, as cast-value-rs rounds. `scalar_map` names values converted to given ones first:
//! its `encode` pairs (array value → stored value) on the way in, `decode` pairs on the way out.
//! v3 `{"name": "cast_value", "configuration": {"data_type": "uint8", "rounding":
//! "towards-zero", "out_of_range": "clamp", "scalar_map": {"encode": [["NaN", 0]]}}}`.

use serde_json::Value;

use super::numeric::{Num, Typed};
use super::{BytesToBytesCodec, CodecTraits, corrupt};
use crate::zarr::dtype::DataType;
use crate::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rounding {
    NearestEven,
    TowardsZero,
    TowardsPositive,
    TowardsNegative,
    NearestAway,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OutOfRange {
    Fail,
    Clamp,
    Wrap,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CastValueCodec {
    /// The array's (decoded) type and the stored one.
    source: Typed,
    target: Typed,
    rounding: Rounding,
    out_of_range: OutOfRange,
    /// Values converted to given ones before any other rule: source → target, target → source.
    encode_map: ScalarMap,
    decode_map: ScalarMap,
    /// The configuration as written, for `info`.
    config: Value,
}

/// A scalar map, looked up by its source value in constant time (a stored map may be long, and
/// every element is looked up): the first pair of a value stands.
type ScalarMap = std::collections::HashMap<MapKey, Num>;

/// A value as a scalar map's key: every NaN one key, and ±0 one key, as `==` compares floats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum MapKey {
    I(i128),
    F(u64),
}

impl MapKey {
    fn of(x: Num) -> MapKey {
        match x {
            Num::I(i) => MapKey::I(i),
            Num::F(f) if f.is_nan() => MapKey::F(f64::NAN.to_bits()),
            // -0.0 + 0.0 is +0.0.
            Num::F(f) => MapKey::F((f + 0.0).to_bits()),
        }
    }
}

/// The types the codec is defined for: integers and floats (not bool).
fn permitted(dtype: &DataType) -> bool {
    use DataType::*;
    matches!(dtype, Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 | Float16 | Float32 | Float64)
}

impl CastValueCodec {
    pub fn parse(config: &Value, dtype: &DataType) -> Result<CastValueCodec> {
        let bad = |why: String| Error::metadata(format!("cast_value: {why}"));
        let fields = config.as_object().ok_or_else(|| bad(format!("its configuration must be an object, got {config}")))?;
        // The spec reserves other keys for later versions: a reader must refuse them.
        if let Some(key) = fields.keys().find(|k| !["data_type", "rounding", "out_of_range", "scalar_map"].contains(&k.as_str())) {
            return Err(bad(format!("unknown configuration key {key:?}")));
        }
        let target = DataType::parse_v3(fields.get("data_type").ok_or_else(|| bad("no data_type".into()))?)?;
        for (role, t) in [("the array's data type", dtype), ("data_type", &target)] {
            if !permitted(t) {
                return Err(bad(format!("{role} {} is not an integer or float type", t.name())));
            }
        }
        let (source, target) = (Typed { dtype: dtype.clone(), big: false }, Typed { dtype: target, big: false });
        let rounding = match fields.get("rounding").map(|v| v.as_str()) {
            None | Some(Some("nearest-even")) => Rounding::NearestEven,
            Some(Some("towards-zero")) => Rounding::TowardsZero,
            Some(Some("towards-positive")) => Rounding::TowardsPositive,
            Some(Some("towards-negative")) => Rounding::TowardsNegative,
            Some(Some("nearest-away")) => Rounding::NearestAway,
            _ => return Err(bad(format!("unknown rounding {}", fields["rounding"]))),
        };
        let out_of_range = match fields.get("out_of_range").map(|v| v.as_str()) {
            None | Some(Some("error")) => OutOfRange::Fail,
            Some(Some("clamp")) => OutOfRange::Clamp,
            Some(Some("wrap")) if !target.is_float() => OutOfRange::Wrap,
            Some(Some("wrap")) => {
                return Err(bad(format!("out_of_range \"wrap\" needs an integer data_type, not {}", target.dtype.name())));
            }
            _ => return Err(bad(format!("unknown out_of_range {}", fields["out_of_range"]))),
        };
        let map = fields.get("scalar_map");
        if let Some(m) = map.and_then(Value::as_object)
            && let Some(key) = m.keys().find(|k| !["encode", "decode"].contains(&k.as_str()))
        {
            return Err(bad(format!("unknown scalar_map key {key:?}")));
        }
        if map.is_some_and(|m| !m.is_object() && !m.is_null()) {
            return Err(bad(format!("scalar_map must be an object, got {}", map.unwrap_or(&Value::Null))));
        }
        let pairs = |direction: &str, from: &Typed, to: &Typed| -> Result<ScalarMap> {
            let Some(list) = map.and_then(|m| m.get(direction)).filter(|v| !v.is_null()) else { return Ok(ScalarMap::new()) };
            let value = |t: &Typed, v: &Value| -> Result<Num> {
                let bytes = t
                    .dtype
                    .parse_fill(v)
                    .map_err(|e| bad(format!("scalar_map {direction}: {v} is not a value of {}: {e}", t.dtype.name())))?;
                Ok(t.read(&bytes))
            };
            let entries = list.as_array().ok_or_else(|| bad(format!("scalar_map {direction} must be a list of pairs, got {list}")))?;
            let mut pairs = ScalarMap::new();
            for pair in entries {
                let Some([k, v]) = pair.as_array().map(Vec::as_slice) else {
                    return Err(bad(format!("scalar_map {direction}: {pair} is not a pair")));
                };
                let v = value(to, v)?;
                pairs.entry(MapKey::of(value(from, k)?)).or_insert(v);
            }
            Ok(pairs)
        };
        let encode_map = pairs("encode", &source, &target)?;
        let decode_map = pairs("decode", &target, &source)?;
        Ok(CastValueCodec { source, target, rounding, out_of_range, encode_map, decode_map, config: config.clone() })
    }

    pub fn encoded_type(&self) -> &Typed {
        &self.target
    }

    /// `x` as a value of `to`, by the codec's rules and the scalar map `map`.
    fn cast(&self, x: Num, to: &Typed, map: &ScalarMap) -> Result<Num> {
        if let Some(v) = map.get(&MapKey::of(x)) {
            return Ok(*v);
        }
        let out_of_range = || corrupt(format!("cast_value: {x:?} is out of the range of {}", to.dtype.name()));
        match (to.int_range(), x) {
            // Into a float: past its finite range by the rule (clamped: to ±∞, as cast-value-rs
            // does); else rounded as told where it cannot hold the value exactly.
            (None, x) => {
                let v = x.as_f64();
                if v.is_finite() && v.abs() > largest(to) {
                    return match self.out_of_range {
                        OutOfRange::Clamp => Ok(Num::F(f64::INFINITY.copysign(v))),
                        _ => Err(out_of_range()),
                    };
                }
                Ok(Num::F(self.round_into(to, v)))
            }
            (Some((lo, hi)), x) => {
                let r = match x {
                    Num::I(i) if (lo..=hi).contains(&i) => return Ok(Num::I(i)),
                    Num::I(i) => Num::I(i),
                    Num::F(f) if !f.is_finite() => {
                        return Err(corrupt(format!("cast_value: {f} has no value in {}", to.dtype.name())));
                    }
                    Num::F(f) => {
                        let r = self.round(f);
                        // Integral and within i128: exact; within the target: done.
                        if r.abs() < 1.7e38 && (lo..=hi).contains(&(r as i128)) {
                            return Ok(Num::I(r as i128));
                        }
                        Num::F(r)
                    }
                };
                let modulus = (hi - lo) + 1;
                match (self.out_of_range, r) {
                    (OutOfRange::Clamp, r) => Ok(Num::I(if r.as_f64() < 0.0 { lo } else { hi })),
                    (OutOfRange::Wrap, Num::I(i)) => Ok(Num::I(lo + (i - lo).rem_euclid(modulus))),
                    // A finite float is an integer here, and its remainder by a power of two exact.
                    (OutOfRange::Wrap, Num::F(f)) => Ok(Num::I(lo + ((f - lo as f64).rem_euclid(modulus as f64)) as i128)),
                    (OutOfRange::Fail, _) => Err(out_of_range()),
                }
            }
        }
    }

    /// `v` (within the float type `t`'s range) as `t` holds it, rounded by the codec's rule: the
    /// nearest value (ties to even), moved one step where the rule wants the other neighbour.
    fn round_into(&self, t: &Typed, v: f64) -> f64 {
        let near = held_as(t, v);
        if near == v || !v.is_finite() {
            return near;
        }
        let other = step(t, near, near < v);
        let pick_other = match self.rounding {
            Rounding::NearestEven => false,
            Rounding::TowardsZero => near.abs() > v.abs(),
            Rounding::TowardsPositive => near < v,
            Rounding::TowardsNegative => near > v,
            Rounding::NearestAway => (v - near).abs() == (other - v).abs() && other.abs() > near.abs(),
        };
        if pick_other { other } else { near }
    }

    fn round(&self, f: f64) -> f64 {
        match self.rounding {
            Rounding::NearestEven => f.round_ties_even(),
            Rounding::TowardsZero => f.trunc(),
            Rounding::TowardsPositive => f.ceil(),
            Rounding::TowardsNegative => f.floor(),
            Rounding::NearestAway => f.round(),
        }
    }

    fn each(&self, bytes: &[u8], from: &Typed, to: &Typed, map: &ScalarMap) -> Result<Vec<u8>> {
        let elements = from.elements("cast_value", bytes)?;
        let mut out = super::with_room(elements.len() * to.size())?;
        for e in elements {
            to.write(self.cast(from.read(e), to, map)?, &mut out);
        }
        Ok(out)
    }
}

/// `v` as the float type `t` holds it (rounded to nearest, ties to even).
fn held_as(t: &Typed, v: f64) -> f64 {
    match t.dtype {
        DataType::Float16 => half::f16::from_f64(v).to_f64(),
        DataType::Float32 => f64::from(v as f32),
        _ => v,
    }
}

/// The neighbour of `x` (a value of the float type `t`) above it, or below it.
fn step(t: &Typed, x: f64, up: bool) -> f64 {
    match t.dtype {
        DataType::Float16 => {
            let h = half::f16::from_f64(x);
            let bits = h.to_bits();
            // Away from zero is one more in magnitude's bits; toward it one less (±0 crosses).
            let away = (h.is_sign_negative() && !up) || (!h.is_sign_negative() && up);
            match (away, bits & 0x7fff) {
                (false, 0) => half::f16::from_bits(0x8001 ^ (bits & 0x8000)).to_f64(),
                (true, _) => half::f16::from_bits(bits + 1).to_f64(),
                (false, _) => half::f16::from_bits(bits - 1).to_f64(),
            }
        }
        DataType::Float32 if up => f64::from((x as f32).next_up()),
        DataType::Float32 => f64::from((x as f32).next_down()),
        _ if up => x.next_up(),
        _ => x.next_down(),
    }
}

/// The greatest finite value of the float type `t`.
fn largest(t: &Typed) -> f64 {
    match t.dtype {
        DataType::Float16 => half::f16::MAX.to_f64(),
        DataType::Float32 => f64::from(f32::MAX),
        _ => f64::MAX,
    }
}

impl CodecTraits for CastValueCodec {
    fn name(&self) -> &'static str {
        "cast_value"
    }
    fn configuration(&self) -> Value {
        self.config.clone()
    }
}

impl BytesToBytesCodec for CastValueCodec {
    fn decode(&self, bytes: Vec<u8>, _max: usize) -> Result<Vec<u8>> {
        self.each(&bytes, &self.target, &self.source, &self.decode_map)
    }

    fn encode(&self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        self.each(&bytes, &self.source, &self.target, &self.encode_map)
    }

    /// Exact only where the stored type holds every value of the array's and nothing is mapped.
    fn elementwise(&self) -> bool {
        true
    }

    fn lossy(&self) -> Option<String> {
        let exact = self.target.holds_all_of(&self.source) && self.encode_map.is_empty() && self.decode_map.is_empty();
        (!exact).then(|| {
            format!(
                "cast_value stores {} as {}: written values would not read back as written",
                self.source.dtype.name(),
                self.target.dtype.name()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn codec(source: DataType, config: Value) -> CastValueCodec {
        CastValueCodec::parse(&config, &source).unwrap()
    }

    fn f64s(v: &[f64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn floats_into_integers_round_and_clamp_as_told() {
        let c = codec(DataType::Float64, json!({"data_type": "int8", "out_of_range": "clamp"}));
        assert_eq!(c.encode(f64s(&[2.5, 3.5, -2.5, 1000.0, -1e300])).unwrap(), [2u8, 4, 0xfe, 127, 0x80]);
        let c = codec(DataType::Float64, json!({"data_type": "uint8", "rounding": "nearest-away", "out_of_range": "wrap"}));
        assert_eq!(c.encode(f64s(&[2.5, -2.5, 256.0, 257.4, -1.0])).unwrap(), [3u8, 253, 0, 1, 255]);
        for (rounding, want) in [("towards-zero", [1u8, 0xff]), ("towards-positive", [2, 0xff]), ("towards-negative", [1, 0xfe])] {
            let c = codec(DataType::Float32, json!({"data_type": "int8", "rounding": rounding}));
            let bytes: Vec<u8> = [1.5f32, -1.5].iter().flat_map(|x| x.to_le_bytes()).collect();
            assert_eq!(c.encode(bytes).unwrap(), want, "{rounding}");
        }
    }

    /// As cast-value-rs rounds where a float cannot hold a value exactly (0.1 towards zero is
    /// 0.099999994 as float32; 2^53 + 1 is 2^53 as float64).
    #[test]
    fn floats_that_cannot_hold_a_value_round_as_told() {
        let f32s = |b: Vec<u8>| -> Vec<f32> { b.chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect() };
        let near = f32s(codec(DataType::Float64, json!({"data_type": "float32"})).encode(f64s(&[0.1, -0.1])).unwrap());
        assert_eq!(near, [0.1f32, -0.1]);
        let zero =
            f32s(codec(DataType::Float64, json!({"data_type": "float32", "rounding": "towards-zero"})).encode(f64s(&[0.1, -0.1])).unwrap());
        assert_eq!(zero, [0.1f32.next_down(), (-0.1f32).next_up()]);
        let up = f32s(
            codec(DataType::Float64, json!({"data_type": "float32", "rounding": "towards-positive"})).encode(f64s(&[0.1, -0.1])).unwrap(),
        );
        assert_eq!(up, [0.1f32, (-0.1f32).next_up()]);
        let big: Vec<u8> = [(1i64 << 53) + 1].iter().flat_map(|x| x.to_le_bytes()).collect();
        let c = codec(DataType::Int64, json!({"data_type": "float64", "rounding": "towards-negative"}));
        assert_eq!(c.encode(big).unwrap(), (2f64.powi(53)).to_le_bytes());
        // A tie between two float16 values (2049 lies halfway between 2048 and 2050).
        let tie = |rounding: &str| {
            let got =
                codec(DataType::Float64, json!({"data_type": "float16", "rounding": rounding})).encode(f64s(&[2049.0, -2049.0])).unwrap();
            got.chunks(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect::<Vec<_>>()
        };
        assert_eq!(tie("nearest-even"), [2048.0, -2048.0]);
        assert_eq!(tie("nearest-away"), [2050.0, -2050.0]);
        assert_eq!(tie("towards-negative"), [2048.0, -2050.0]);
    }

    #[test]
    fn out_of_range_and_nan_fail_unless_told_otherwise() {
        let c = codec(DataType::Float64, json!({"data_type": "int16"}));
        assert!(c.encode(f64s(&[40000.0])).is_err());
        assert!(c.encode(f64s(&[f64::NAN])).is_err());
        let clamped = codec(DataType::Float64, json!({"data_type": "int16", "out_of_range": "clamp"}));
        assert!(clamped.encode(f64s(&[f64::NAN])).is_err(), "NaN into an integer fails whatever the rule");
        // An integer wider than the target: wrapped as two's complement.
        let c = codec(DataType::Int32, json!({"data_type": "int8", "out_of_range": "wrap"}));
        let bytes: Vec<u8> = [200i32, -129, 127].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(c.encode(bytes).unwrap(), [0xc8u8, 0x7f, 0x7f]);
        // Into a narrower float: past its range is out of range, infinities stay.
        let c = codec(DataType::Float64, json!({"data_type": "float16"}));
        assert!(c.encode(f64s(&[1e6])).is_err());
        // Clamped to ±∞, as cast-value-rs clamps into floats; ±∞ into an integer always fails.
        let c = codec(DataType::Float64, json!({"data_type": "float16", "out_of_range": "clamp"}));
        let got = c.encode(f64s(&[1e6, -1e6, f64::INFINITY, 0.5])).unwrap();
        let halves: Vec<f32> = got.chunks(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect();
        assert_eq!(halves, [f32::INFINITY, f32::NEG_INFINITY, f32::INFINITY, 0.5]);
        assert!(clamped.encode(f64s(&[f64::INFINITY])).is_err());
    }

    #[test]
    fn scalar_maps_come_first_each_way() {
        let c = codec(
            DataType::Float32,
            json!({"data_type": "uint8", "out_of_range": "clamp", "scalar_map": {"encode": [["NaN", 0]], "decode": [[0, "NaN"]]}}),
        );
        let bytes: Vec<u8> = [f32::NAN, 3.2, 300.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let stored = c.encode(bytes).unwrap();
        assert_eq!(stored, [0u8, 3, 255]);
        let back: Vec<f32> = c.decode(stored, 12).unwrap().chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        assert!(back[0].is_nan());
        assert_eq!(back[1..], [3.0, 255.0]);
        assert!(c.lossy().is_some());
        assert!(codec(DataType::Int16, json!({"data_type": "int64"})).lossy().is_none());
        assert!(codec(DataType::Int16, json!({"data_type": "float32"})).lossy().is_none());
        // A long map, and a value named twice (the first pair stands); -0.0 is 0.0's key.
        let mut pairs: Vec<Value> = (0..100_000).map(|i| json!([f64::from(i) + 0.5, i % 7])).collect();
        pairs.push(json!([2.5, 99]));
        pairs.push(json!([0.0, 42]));
        let c = codec(DataType::Float64, json!({"data_type": "uint8", "scalar_map": {"encode": pairs}}));
        let bytes: Vec<u8> = [2.5f64, 99_999.5, -0.0, 3.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(c.encode(bytes).unwrap(), [2u8, (99_999 % 7) as u8, 42, 3]);
    }

    #[test]
    fn configurations_outside_the_spec_are_refused() {
        for (source, config) in [
            (DataType::Float64, json!({"data_type": "int8", "extra": 1})),
            (DataType::Float64, json!({"data_type": "float32", "out_of_range": "wrap"})),
            (DataType::Float64, json!({"data_type": "int8", "rounding": "up"})),
            (DataType::Bool, json!({"data_type": "int8"})),
            (DataType::Float64, json!({"data_type": "bool"})),
            (DataType::Float64, json!({"rounding": "towards-zero"})),
            (DataType::Float64, json!({"data_type": "int8", "scalar_map": {"encode": [["NaN"]]}})),
            (DataType::Float64, json!({"data_type": "int8", "scalar_map": {"encode": [["NaN", 1000]]}})),
            (DataType::Float64, json!({"data_type": "int8", "scalar_map": {"both": []}})),
        ] {
            assert!(CastValueCodec::parse(&config, &source).is_err(), "{config}");
        }
    }
}
