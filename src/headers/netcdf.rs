//! `dataset.nc`: a netCDF classic file (CDF-2, 64-bit offsets; CDF-5 where a variable needs
//! its unsigned or 64-bit integer types, or passes 4 GiB) over the arrays of a group. The
//! header lists the dimensions, the global attributes and one fixed-size variable per array;
//! each variable's data is its array's `data`, big-endian, contiguous at its `begin` offset
//! (4-byte aligned, as the format wants). It knows nothing of files or mounts: the caller reads
//! each variable's bytes from its array and swaps them.

use serde_json::Value;

use super::{Element, MOST_EXACT_DOUBLE};
use crate::zarr::dtype::DataType;

const NC_DIMENSION: u32 = 0x0A;
const NC_VARIABLE: u32 = 0x0B;
const NC_ATTRIBUTE: u32 = 0x0C;

/// netCDF external types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NcType {
    Byte = 1,
    Char = 2,
    Short = 3,
    Int = 4,
    Float = 5,
    Double = 6,
    UByte = 7,
    UShort = 8,
    UInt = 9,
    Int64 = 10,
    UInt64 = 11,
}

impl NcType {
    /// The type of a Zarr data type, when netCDF has it (bool as a byte).
    pub fn of(dtype: &DataType) -> Option<NcType> {
        Some(match dtype {
            DataType::Bool | DataType::Int8 => NcType::Byte,
            DataType::Int16 => NcType::Short,
            DataType::Int32 => NcType::Int,
            DataType::Float32 => NcType::Float,
            DataType::Float64 => NcType::Double,
            DataType::UInt8 => NcType::UByte,
            DataType::UInt16 => NcType::UShort,
            DataType::UInt32 => NcType::UInt,
            DataType::Int64 => NcType::Int64,
            DataType::UInt64 => NcType::UInt64,
            _ => return None,
        })
    }

    pub fn size(self) -> u64 {
        match self {
            NcType::Byte | NcType::Char | NcType::UByte => 1,
            NcType::Short | NcType::UShort => 2,
            NcType::Int | NcType::Float | NcType::UInt => 4,
            NcType::Double | NcType::Int64 | NcType::UInt64 => 8,
        }
    }

    /// Whether only CDF-5 has it.
    fn needs_cdf5(self) -> bool {
        (self as u32) >= 7
    }

    /// `value` as one element of this type, big-endian; `None` when it does not fit.
    fn encode(self, value: &Value) -> Option<Vec<u8>> {
        let float = || match value {
            Value::String(s) if s.eq_ignore_ascii_case("nan") => Some(f64::NAN),
            Value::String(s) if s.eq_ignore_ascii_case("infinity") => Some(f64::INFINITY),
            Value::String(s) if s.eq_ignore_ascii_case("-infinity") => Some(f64::NEG_INFINITY),
            Value::Bool(b) => Some(f64::from(u8::from(*b))),
            v => v.as_f64(),
        };
        let int = || match value {
            Value::Bool(b) => Some(i128::from(*b)),
            v => v.as_i64().map(i128::from).or_else(|| v.as_u64().map(i128::from)),
        };
        macro_rules! integer {
            ($t:ty) => {
                int().and_then(|i| <$t>::try_from(i).ok()).map(|i| i.to_be_bytes().to_vec())
            };
        }
        match self {
            NcType::Byte => integer!(i8),
            NcType::Short => integer!(i16),
            NcType::Int => integer!(i32),
            NcType::UByte => integer!(u8),
            NcType::UShort => integer!(u16),
            NcType::UInt => integer!(u32),
            NcType::Int64 => integer!(i64),
            NcType::UInt64 => integer!(u64),
            NcType::Float => float().map(|f| (f as f32).to_be_bytes().to_vec()),
            NcType::Double => float().map(|f| f.to_be_bytes().to_vec()),
            NcType::Char => None,
        }
    }
}

/// An attribute ready for the header: its type, element count and big-endian values.
#[derive(Clone, Debug, PartialEq)]
pub struct Attribute {
    pub name: String,
    pub kind: NcType,
    count: u64,
    values: Vec<u8>,
}

/// The most bytes one attribute may take in a `dataset.nc` header, and the whole header: the
/// header is made and held whole, so attributes far past what any netCDF tool shows (a long
/// list kept in Zarr attributes) are left out, said so, rather than sizing it.
const MOST_ATTRIBUTE_BYTES: usize = 1 << 20;
const MOST_HEADER_BYTES: usize = 16 << 20;

/// Attributes whose type must be the variable's (CF).
const TYPED_LIKE_THE_VARIABLE: [&str; 7] =
    ["_FillValue", "missing_value", "valid_min", "valid_max", "valid_range", "flag_values", "flag_masks"];

impl Attribute {
    /// A JSON attribute as netCDF holds it: text as characters, numbers and lists of numbers as
    /// the narrowest type that holds them all (`var_type` for the CF attributes that must have
    /// the variable's). `Err(why)` for what it cannot hold (objects, lists of text, null).
    pub fn from_json(name: &str, value: &Value, var_type: Option<NcType>, cdf5: bool) -> Result<Attribute, String> {
        // Bounded before anything is encoded: 8 bytes an item at most.
        let most = match value {
            Value::String(s) => s.len(),
            Value::Array(items) => items.len().saturating_mul(8),
            _ => 8,
        };
        if most > MOST_ATTRIBUTE_BYTES {
            return Err(format!("longer than the {} KiB an attribute of the header may take", MOST_ATTRIBUTE_BYTES >> 10));
        }
        if let Value::String(s) = value
            && !(TYPED_LIKE_THE_VARIABLE.contains(&name) && var_type.is_some())
        {
            return Ok(Attribute { name: name.into(), kind: NcType::Char, count: s.len() as u64, values: s.as_bytes().to_vec() });
        }
        let items: Vec<&Value> = match value {
            Value::Array(a) if a.is_empty() => return Err("an empty list".into()),
            Value::Array(a) => a.iter().collect(),
            Value::Object(_) => return Err("an object (netCDF attributes are flat)".into()),
            Value::Null => return Err("null".into()),
            v => vec![v],
        };
        if items.iter().any(|v| v.is_object() || v.is_array() || v.is_null()) {
            return Err("a list of other than numbers".into());
        }
        let numeric = |v: &&Value| {
            v.is_number()
                || v.is_boolean()
                || v.as_str().is_some_and(|s| ["nan", "infinity", "-infinity"].contains(&s.to_ascii_lowercase().as_str()))
        };
        if !items.iter().all(numeric) {
            return Err("a list of text".into());
        }
        let candidates: Vec<NcType> = match var_type.filter(|_| TYPED_LIKE_THE_VARIABLE.contains(&name)) {
            Some(t) => vec![t],
            None if items.iter().all(|v| v.is_i64() || v.is_u64() || v.is_boolean()) => {
                let mut c = vec![NcType::Byte, NcType::Short, NcType::Int];
                if cdf5 {
                    c.extend([NcType::Int64, NcType::UInt64]);
                }
                c.push(NcType::Double);
                c
            }
            None => vec![NcType::Double],
        };
        for kind in candidates {
            let encoded: Option<Vec<Vec<u8>>> = items.iter().map(|v| kind.encode(v)).collect();
            if let Some(encoded) = encoded {
                return Ok(Attribute { name: name.into(), kind, count: items.len() as u64, values: encoded.concat() });
            }
        }
        Err(format!("values that do not fit the variable's type {var_type:?}"))
    }
}

/// A variable: an array of the group.
#[derive(Clone, Debug)]
pub struct Variable {
    pub name: String,
    /// Indices into the file's dimensions, slowest first.
    pub dims: Vec<usize>,
    pub kind: NcType,
    pub attributes: Vec<Attribute>,
}

/// An array of the group, as the view needs it.
pub struct Source<'a> {
    pub name: &'a str,
    pub dtype: &'a DataType,
    pub shape: &'a [u64],
    pub dimension_names: Option<&'a [Option<String>]>,
    pub attributes: &'a Value,
    /// The Zarr fill value where it marks missing values (v2, as xarray reads it); `None` for v3,
    /// whose arrays always have one and keep a `_FillValue` attribute where they mean one.
    pub fill: Option<&'a Value>,
    /// How many chunks it is stored in (as its grid has them).
    pub chunks: u64,
    /// An int64 array's values read whole, skipping the missing one: their range, or `None`
    /// when they cannot be read. Asked only of arrays of up to `MOST_CHECKED_INT64_VALUES` in
    /// `MOST_CHECKED_INT64_CHUNKS`.
    pub values: Option<&'a dyn Fn(Option<i64>) -> Option<Int64Range>>,
}

/// A `dataset.nc` planned: the file, which source each variable is (in file order), and what
/// was left out and why.
#[derive(Debug)]
pub struct Plan {
    pub file: NetCdf,
    pub sources: Vec<usize>,
    /// How each variable's elements become the file's (in file order).
    pub elements: Vec<Element>,
    pub left_out: Vec<String>,
    /// Names netCDF classic does not take, and what they are in the file.
    pub renamed: Vec<String>,
    /// int64 variables not held as an int, and why.
    pub narrowed: Vec<String>,
}

/// The `units` of a datetime64 unit, as CF writes them.
fn time_units(unit: &str) -> Option<&'static str> {
    Some(match unit {
        "ns" => "nanoseconds",
        "us" => "microseconds",
        "ms" => "milliseconds",
        "s" => "seconds",
        "m" => "minutes",
        "h" => "hours",
        "D" => "days",
        _ => return None,
    })
}

/// `_FillValue` as xarray writes it in a v3 array's attributes: a float as the base64 of its
/// little-endian double.
fn decoded_fill(value: &Value, kind: NcType) -> Value {
    use base64::Engine;
    match (value, kind) {
        (Value::String(s), NcType::Float | NcType::Double) => {
            match base64::engine::general_purpose::STANDARD.decode(s).ok().and_then(|b| <[u8; 8]>::try_from(b).ok()) {
                Some(bytes) => {
                    let f = f64::from_le_bytes(bytes);
                    if f.is_nan() { Value::from("NaN") } else { serde_json::Number::from_f64(f).map_or(Value::from("NaN"), Value::Number) }
                }
                None => value.clone(),
            }
        }
        _ => value.clone(),
    }
}

/// Why a group has no `dataset.nc` when none of its arrays is a dataset's.
pub const NO_DATASET: &str = "no numeric array with named axes";

/// Plan the `dataset.nc` of a group with `attributes` and arrays `sources`; why there is none.
pub fn plan(attributes: &Value, sources: &[Source]) -> Result<Plan, String> {
    let mut left_out = Vec::new();
    let mut renamed = Vec::new();
    let mut narrowed = Vec::new();
    // Which arrays are variables, with their type and their dimension names.
    let mut candidates = Vec::new();
    for (i, s) in sources.iter().enumerate() {
        let kind = match s.dtype {
            DataType::DateTime64(_) | DataType::TimeDelta64(_) => Some(NcType::Int64),
            d => NcType::of(d),
        };
        let why = match (kind, s.dimension_names) {
            (None, _) => Some(format!("netCDF classic has no type for {}", s.dtype.name())),
            (_, None) if !s.shape.is_empty() => Some("its axes are not named".to_string()),
            _ => None,
        };
        let Some(kind) = kind.filter(|_| why.is_none()) else {
            left_out.push(format!("{}: {}", s.name, why.unwrap_or_default()));
            continue;
        };
        let names: Vec<String> = (0..s.shape.len())
            .map(|a| s.dimension_names.and_then(|n| n.get(a).cloned().flatten()).unwrap_or_else(|| format!("{}_dim{a}", s.name)))
            .map(|n| nc_name_noted(&n, &mut renamed))
            .collect();
        let (kind, element) =
            if kind == NcType::Int64 { held_int64(s, &mut narrowed) } else { (kind, Element::Swapped(kind.size() as usize)) };
        candidates.push(Candidate { source: i, kind, element, names });
    }
    if !candidates.iter().any(|c| !sources[c.source].shape.is_empty()) {
        return Err(NO_DATASET.into());
    }
    // Dimensions: one per name, one length each.
    let mut dims: Vec<(String, u64)> = Vec::new();
    for c in &candidates {
        for (name, &len) in c.names.iter().zip(sources[c.source].shape) {
            match dims.iter().find(|(n, _)| n == name) {
                Some((_, other)) if *other != len => {
                    return Err(format!("dimension {name} is {other} long in one array and {len} in {}", sources[c.source].name));
                }
                Some(_) => {}
                None => dims.push((name.clone(), len)),
            }
        }
    }
    // Coordinates (1-D, named as their dimension) first, then the others; by name in each.
    let is_coordinate = |c: &Candidate| c.names.len() == 1 && c.names[0] == nc_name(sources[c.source].name);
    candidates.sort_by_key(|c| (!is_coordinate(c), sources[c.source].name.to_string()));
    let cdf5 = candidates.iter().any(|c| c.kind.needs_cdf5());
    let mut vars = Vec::new();
    for c in &candidates {
        let (s, kind) = (&sources[c.source], c.kind);
        // The fill an int64 held as int has instead of its own.
        let held = |v: &Value| match c.element {
            Element::Int64AsInt { missing: Some(m), fill } if v.as_i64() == Some(m) => Value::from(fill),
            _ => v.clone(),
        };
        let mut attrs = Vec::new();
        for (k, v) in s.attributes.as_object().into_iter().flatten() {
            if k == "_ARRAY_DIMENSIONS" {
                continue;
            }
            let v = if k == "_FillValue" { decoded_fill(v, kind) } else { v.clone() };
            let v = if TYPED_LIKE_THE_VARIABLE.contains(&k.as_str()) { held(&v) } else { v };
            match Attribute::from_json(k, &v, Some(kind), cdf5) {
                Ok(a) => attrs.push(a),
                Err(why) => left_out.push(format!("{}.{k}: {why}", s.name)),
            }
        }
        let has = |attrs: &[Attribute], name: &str| attrs.iter().any(|a| a.name == name);
        if !has(&attrs, "_FillValue")
            && let Some(fill) = s.fill.filter(|f| !f.is_null())
            && let Ok(a) = Attribute::from_json("_FillValue", &held(fill), Some(kind), cdf5)
        {
            attrs.push(a);
        }
        if let DataType::DateTime64(unit) | DataType::TimeDelta64(unit) = s.dtype
            && !has(&attrs, "units")
            && let Some(units) = time_units(unit)
        {
            let text = match s.dtype {
                DataType::DateTime64(_) => format!("{units} since 1970-01-01 00:00:00"),
                _ => units.to_string(),
            };
            attrs.extend(Attribute::from_json("units", &Value::from(text), None, cdf5));
            if !has(&attrs, "_FillValue") {
                attrs.extend(Attribute::from_json("_FillValue", &held(&Value::from(NOT_A_TIME)), Some(kind), cdf5));
            }
        }
        let dim_ids = c.names.iter().map(|n| dims.iter().position(|(d, _)| d == n).unwrap_or(0)).collect();
        vars.push(Variable { name: nc_name_noted(s.name, &mut renamed), dims: dim_ids, kind, attributes: attrs });
    }
    let mut globals = Vec::new();
    for (k, v) in attributes.as_object().into_iter().flatten() {
        match Attribute::from_json(k, v, None, cdf5) {
            Ok(a) => globals.push(a),
            Err(why) => left_out.push(format!("global {k}: {why}")),
        }
    }
    let file = NetCdf::new(&dims, &globals, &vars)?;
    let elements = candidates.iter().map(|c| c.element).collect();
    Ok(Plan { file, sources: candidates.iter().map(|c| c.source).collect(), elements, left_out, renamed, narrowed })
}

/// An array that is to be a variable.
struct Candidate {
    source: usize,
    /// Its type in the file, and how its elements become the file's.
    kind: NcType,
    element: Element,
    /// Its dimensions' names.
    names: Vec<String>,
}

/// numpy's NaT: a datetime's missing value when it names no other.
const NOT_A_TIME: i64 = i64::MIN;

/// netCDF-C's default fill of an int (`NC_FILL_INT`).
const NC_FILL_INT: i32 = -2_147_483_647;

/// An int64 array holds at most this many values for them to be read when the file is laid
/// out (8 MiB)...
pub const MOST_CHECKED_INT64_VALUES: u64 = 1 << 20;
/// ...and in at most this many chunks (each a request to the store).
pub const MOST_CHECKED_INT64_CHUNKS: u64 = 1 << 10;

/// How an int64 variable is held, as its values allow: as an int when they fit one (xarray's
/// netCDF3 writer narrows so; times counted in hours or days always do), as a double when they
/// fit its 53-bit mantissa, and as int64 — which only CDF-5 has, and GDAL 3.6 and scipy cannot
/// read — only when they fit neither or were not read. Each choice but the first is noted.
fn held_int64(s: &Source, narrowed: &mut Vec<String>) -> (NcType, Element) {
    let missing = s.attributes.get("_FillValue").or(s.fill.filter(|f| !f.is_null())).and_then(Value::as_i64).or(matches!(
        s.dtype,
        DataType::DateTime64(_)
    )
    .then_some(NOT_A_TIME));
    let count = s.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).unwrap_or(u64::MAX);
    let too_many = if count > MOST_CHECKED_INT64_VALUES {
        Some(format!("more than {MOST_CHECKED_INT64_VALUES} values"))
    } else if s.chunks > MOST_CHECKED_INT64_CHUNKS {
        Some(format!("stored in more than {MOST_CHECKED_INT64_CHUNKS} chunks"))
    } else {
        None
    };
    if let Some(why) = too_many {
        narrowed.push(format!("{}: int64 ({why}: its values are not read to check them; CDF-5)", s.name));
        return (NcType::Int64, Element::Swapped(8));
    }
    let range = s.values.and_then(|read| read(missing));
    match range {
        Some(r) if r.is_none_or(|(lo, hi)| i32::try_from(lo).is_ok() && i32::try_from(hi).is_ok()) => {
            let fill = missing.map_or(NC_FILL_INT, |m| i32::try_from(m).unwrap_or(NC_FILL_INT));
            (NcType::Int, Element::Int64AsInt { missing, fill })
        }
        Some(Some((lo, hi))) if -MOST_EXACT_DOUBLE <= lo && hi <= MOST_EXACT_DOUBLE => {
            narrowed.push(format!("{}: int64 as double (its values pass an int's range)", s.name));
            (NcType::Double, Element::Int64AsDouble)
        }
        Some(_) => {
            narrowed.push(format!("{}: int64 (its values pass 2^53, which a double holds exactly; CDF-5)", s.name));
            (NcType::Int64, Element::Swapped(8))
        }
        None => {
            narrowed.push(format!("{}: int64 (its values could not be read to check them; CDF-5)", s.name));
            (NcType::Int64, Element::Swapped(8))
        }
    }
}

/// The least and greatest of an int64 array's values other than its missing one (`None`: all
/// are missing).
pub type Int64Range = Option<(i64, i64)>;

/// Widen `range` to the little-endian int64s in `bytes` other than `missing`.
pub fn widen(range: &mut Int64Range, bytes: &[u8], missing: Option<i64>) {
    for c in bytes.chunks_exact(8) {
        let v = i64::from_le_bytes(c.try_into().unwrap_or_default());
        if Some(v) != missing {
            *range = Some(range.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
        }
    }
}

/// The layout of a `dataset.nc`.
#[derive(Debug)]
pub struct NetCdf {
    header: Vec<u8>,
    /// Per variable: (its `begin`, its data bytes).
    data: Vec<(u64, u64)>,
    len: u64,
    pub cdf5: bool,
}

/// `name` as netCDF classic takes it (netCDF-C's `NC_check_name`): any UTF-8 but `/` and
/// control characters, beginning with a letter, a digit, `_` or a multi-byte character, with no
/// trailing space. Only what it does not take changes: such a character becomes `_`, and a
/// name that cannot begin as it does gets a `v` in front (`2m_temperature` stays).
pub fn nc_name(name: &str) -> String {
    let mut out: String = name.chars().map(|c| if c == '/' || c.is_control() { '_' } else { c }).collect();
    let kept = out.trim_end_matches(' ').len();
    let spaces = out.len() - kept;
    out.replace_range(kept.., &"_".repeat(spaces));
    if !out.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || !c.is_ascii()) {
        out.insert(0, 'v');
    }
    out
}

/// `nc_name(name)`, noting in `renamed` when it is not `name`.
fn nc_name_noted(name: &str, renamed: &mut Vec<String>) -> String {
    let out = nc_name(name);
    let note = format!("{name:?} as {out:?}");
    if out != name && !renamed.contains(&note) {
        renamed.push(note);
    }
    out
}

struct Writer {
    out: Vec<u8>,
    cdf5: bool,
}

impl Writer {
    fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }

    /// NON_NEG: 32-bit, 64-bit in CDF-5.
    fn count(&mut self, v: u64) {
        if self.cdf5 {
            self.out.extend_from_slice(&v.to_be_bytes());
        } else {
            self.u32(v as u32);
        }
    }

    fn padded(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
        self.out.resize(self.out.len().next_multiple_of(4), 0);
    }

    fn name(&mut self, name: &str) {
        self.count(name.len() as u64);
        self.padded(name.as_bytes());
    }

    fn attributes(&mut self, attributes: &[Attribute]) {
        if attributes.is_empty() {
            self.u32(0);
            self.count(0);
            return;
        }
        self.u32(NC_ATTRIBUTE);
        self.count(attributes.len() as u64);
        for a in attributes {
            self.name(&a.name);
            self.u32(a.kind as u32);
            self.count(a.count);
            self.padded(&a.values);
        }
    }
}

impl NetCdf {
    /// The file of `dims` (name, length), `globals` and `vars`, each variable of `shape` (its
    /// dimensions' lengths).
    pub fn new(dims: &[(String, u64)], globals: &[Attribute], vars: &[Variable]) -> Result<NetCdf, String> {
        let attribute_bytes: usize = globals.iter().chain(vars.iter().flat_map(|v| &v.attributes)).map(|a| a.values.len()).sum();
        if attribute_bytes > MOST_HEADER_BYTES {
            return Err(format!("its attributes would make a header of more than {} MiB", MOST_HEADER_BYTES >> 20));
        }
        let bytes_of = |v: &Variable| v.dims.iter().try_fold(v.kind.size(), |n, &d| n.checked_mul(dims[d].1));
        let sizes: Vec<u64> = vars.iter().map(|v| bytes_of(v).ok_or("a variable passes 2^64 bytes")).collect::<Result<_, _>>()?;
        // CDF-2 sizes are 32-bit (and its types the classic ones).
        let cdf5 = vars.iter().any(|v| v.kind.needs_cdf5() || v.attributes.iter().any(|a| a.kind.needs_cdf5()))
            || globals.iter().any(|a| a.kind.needs_cdf5())
            || sizes.iter().any(|&s| s > u64::from(u32::MAX) - 3)
            || dims.iter().any(|d| d.1 > u64::from(u32::MAX >> 1));
        // The header, with `begin` placeholders: its length does not depend on their values.
        let header = |begins: &[u64]| {
            let mut w = Writer { out: Vec::new(), cdf5 };
            w.out.extend_from_slice(if cdf5 { b"CDF\x05" } else { b"CDF\x02" });
            w.count(0);
            if dims.is_empty() {
                w.u32(0);
                w.count(0);
            } else {
                w.u32(NC_DIMENSION);
                w.count(dims.len() as u64);
                for (name, len) in dims {
                    w.name(name);
                    w.count(*len);
                }
            }
            w.attributes(globals);
            if vars.is_empty() {
                w.u32(0);
                w.count(0);
            } else {
                w.u32(NC_VARIABLE);
                w.count(vars.len() as u64);
                for (i, v) in vars.iter().enumerate() {
                    w.name(&v.name);
                    w.count(v.dims.len() as u64);
                    for &d in &v.dims {
                        w.count(d as u64);
                    }
                    w.attributes(&v.attributes);
                    w.u32(v.kind as u32);
                    let vsize = sizes[i].next_multiple_of(4);
                    w.count(if cdf5 { vsize } else { vsize.min(u64::from(u32::MAX)) });
                    w.out.extend_from_slice(&begins.get(i).copied().unwrap_or(0).to_be_bytes());
                }
            }
            w.out
        };
        let header_len = header(&[]).len() as u64;
        let mut at = header_len.next_multiple_of(4);
        let mut data = Vec::new();
        for &size in &sizes {
            data.push((at, size));
            at = at.checked_add(size.next_multiple_of(4)).ok_or("the file would pass 2^64 bytes")?;
        }
        if at > i64::MAX as u64 {
            return Err("the netCDF view would pass 2^63 bytes".into());
        }
        let begins: Vec<u64> = data.iter().map(|d| d.0).collect();
        Ok(NetCdf { header: header(&begins), data, len: at, cdf5 })
    }

    pub fn file_len(&self) -> u64 {
        self.len
    }

    /// Where each variable's data lies: (begin, bytes).
    pub fn data(&self) -> &[(u64, u64)] {
        &self.data
    }

    /// The file's own bytes in `from..to`: the header, zeros elsewhere.
    pub fn own_bytes(&self, from: u64, to: u64) -> Vec<u8> {
        let to = to.min(self.len);
        let mut out = vec![0u8; to.saturating_sub(from) as usize];
        let h = self.header.len() as u64;
        if from < h {
            let end = to.min(h);
            out[..(end - from) as usize].copy_from_slice(&self.header[from as usize..end as usize]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attr(name: &str, v: Value) -> Attribute {
        Attribute::from_json(name, &v, Some(NcType::Float), false).unwrap()
    }

    #[test]
    fn attributes_take_the_narrowest_type_and_text_is_characters() {
        assert_eq!(attr("units", json!("K")).kind, NcType::Char);
        assert_eq!(attr("n", json!(7)).kind, NcType::Byte);
        assert_eq!(attr("n", json!([1, 300])).kind, NcType::Short);
        assert_eq!(attr("n", json!(70000)).kind, NcType::Int);
        assert_eq!(attr("n", json!(1u64 << 40)).kind, NcType::Double);
        assert_eq!(attr("scale_factor", json!(0.01)).kind, NcType::Double);
        // The variable's own type for what CF says must have it, NaN too.
        let fill = attr("_FillValue", json!("NaN"));
        assert_eq!((fill.kind, fill.values.clone()), (NcType::Float, f32::NAN.to_be_bytes().to_vec()));
        let range = attr("valid_range", json!([0, 10]));
        assert_eq!((range.kind, range.count), (NcType::Float, 2));
        assert!(Attribute::from_json("x", &json!({"a": 1}), None, false).unwrap_err().contains("object"));
        assert!(Attribute::from_json("x", &json!(["a", "b"]), None, false).unwrap_err().contains("text"));
        assert!(Attribute::from_json("_FillValue", &json!(300), Some(NcType::Byte), false).is_err());
    }

    #[test]
    fn the_header_describes_the_variables_at_their_offsets() {
        let dims = vec![("time".to_string(), 2), ("lat".to_string(), 3)];
        let units = Attribute::from_json("units", &json!("K"), None, false).unwrap();
        let vars = vec![
            Variable { name: "lat".into(), dims: vec![1], kind: NcType::Float, attributes: vec![] },
            Variable { name: "air".into(), dims: vec![0, 1], kind: NcType::Short, attributes: vec![units] },
        ];
        let title = Attribute::from_json("title", &json!("test"), None, false).unwrap();
        let nc = NetCdf::new(&dims, &[title], &vars).unwrap();
        assert!(!nc.cdf5);
        let h = nc.own_bytes(0, nc.data()[0].0);
        assert_eq!(&h[..8], b"CDF\x02\x00\x00\x00\x00");
        // dim_list: NC_DIMENSION, 2, "time" 2, "lat" 3.
        assert_eq!(&h[8..16], &[0, 0, 0, 0x0A, 0, 0, 0, 2]);
        assert_eq!(&h[16..28], b"\x00\x00\x00\x04time\x00\x00\x00\x02");
        // lat: 3 floats, 12 bytes; air: 6 shorts, 12 bytes; each 4-aligned, one after the other.
        let (lat, air) = (nc.data()[0], nc.data()[1]);
        assert_eq!((lat.1, air.1, air.0), (12, 12, lat.0 + 12));
        assert_eq!(nc.file_len(), air.0 + 12);
        // The last 8 bytes of the header are air's begin.
        let end = nc.header.len();
        assert_eq!(u64::from_be_bytes(nc.header[end - 8..end].try_into().unwrap()), air.0);
        // An unsigned type needs CDF-5.
        let u = vec![Variable { name: "mask".into(), dims: vec![0], kind: NcType::UByte, attributes: vec![] }];
        assert!(NetCdf::new(&dims, &[], &u).unwrap().cdf5);
        // What netCDF-C writes and reads stays (ERA5's names, an apostrophe, a space inside).
        for kept in ["2m_temperature", "10m_u_component_of_wind", "niveau_d'eau", "a b", "0", "é_t", "x.y@z+-"] {
            assert_eq!(nc_name(kept), kept);
        }
        assert_eq!(nc_name("a/b"), "a_b");
        assert_eq!(nc_name("tab\tx"), "tab_x");
        assert_eq!(nc_name("x  "), "x__");
        assert_eq!(nc_name("-x"), "v-x");
        assert_eq!(nc_name(""), "v");
    }

    #[test]
    fn a_dataset_plan_orders_coordinates_first_and_leaves_out_what_it_cannot_hold() {
        let names = |n: &[&str]| n.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
        let (air_dims, lat_dims, bad_dims) = (names(&["time", "lat"]), names(&["lat"]), names(&["lat"]));
        let attrs = json!({"units": "K", "_ARRAY_DIMENSIONS": ["time", "lat"], "history": {"nested": 1}});
        let none = json!({});
        let nan = json!("NaN");
        let sources = [
            Source {
                name: "air",
                dtype: &DataType::Float32,
                shape: &[2, 3],
                dimension_names: Some(&air_dims),
                attributes: &attrs,
                fill: Some(&nan),
                chunks: 1,
                values: None,
            },
            Source {
                name: "lat",
                dtype: &DataType::Float64,
                shape: &[3],
                dimension_names: Some(&lat_dims),
                attributes: &none,
                fill: None,
                chunks: 1,
                values: None,
            },
            Source {
                name: "label",
                dtype: &DataType::String,
                shape: &[3],
                dimension_names: Some(&bad_dims),
                attributes: &none,
                fill: None,
                chunks: 1,
                values: None,
            },
            Source {
                name: "raw",
                dtype: &DataType::UInt8,
                shape: &[4],
                dimension_names: None,
                attributes: &none,
                fill: None,
                chunks: 1,
                values: None,
            },
        ];
        let plan = plan(&json!({"title": "t"}), &sources).unwrap();
        assert_eq!(plan.sources, vec![1, 0], "lat is a coordinate: first");
        assert!(plan.left_out.iter().any(|l| l.starts_with("label:")), "{:?}", plan.left_out);
        assert!(plan.left_out.iter().any(|l| l.starts_with("raw: its axes are not named")));
        assert!(plan.left_out.iter().any(|l| l.starts_with("air.history: an object")));
        assert!(!plan.file.cdf5);
        // One name, two lengths: no view.
        let short = [3u64];
        let clash = [Source { shape: &short[..], ..sources[1] }, Source { shape: &[2, 4], ..sources[0] }];
        assert!(plan_of(&clash).unwrap_err().contains("dimension lat"));
    }

    #[test]
    fn int64_variables_are_ints_doubles_or_int64_as_their_values_allow() {
        let dims = [Some("time".to_string())];
        let none = json!({});
        let held = |dtype: &DataType, range: Option<Int64Range>, len: u64| {
            let read = move |_: Option<i64>| range;
            let shape = [len];
            let s = Source {
                name: "time",
                dtype,
                shape: &shape,
                dimension_names: Some(&dims),
                attributes: &none,
                fill: None,
                chunks: 1,
                values: Some(&read),
            };
            let plan = plan_of(&[s]).unwrap();
            let time = &plan.file.header;
            (plan.elements[0], plan.file.cdf5, plan.narrowed.len(), time.clone())
        };
        let when = DataType::DateTime64("h".into());
        // NaT is the missing value of a datetime: the others fit an int, and NaT becomes
        // netCDF's int fill, in the attribute too.
        let (element, cdf5, notes, header) = held(&when, Some(Some((-5, 70_000))), 4);
        assert_eq!(element, Element::Int64AsInt { missing: Some(i64::MIN), fill: NC_FILL_INT });
        assert!(!cdf5 && notes == 0);
        let fill_attr = [b"_FillValue\0\0".as_slice(), &[0, 0, 0, 4, 0, 0, 0, 1], &NC_FILL_INT.to_be_bytes()].concat();
        assert!(header.windows(fill_attr.len()).any(|w| w == fill_attr), "_FillValue is an int");
        assert_eq!(
            element.encode([7i64, i64::MIN].iter().flat_map(|v| v.to_le_bytes()).collect()),
            Ok([7i32, NC_FILL_INT].iter().flat_map(|v| v.to_be_bytes()).collect())
        );
        assert_eq!(element.encode((1i64 << 31).to_le_bytes().to_vec()), Err(1 << 31));
        let far = (1i64 << 53) + 1;
        assert_eq!(Element::Int64AsDouble.encode([-(1i64 << 53), far].iter().flat_map(|v| v.to_le_bytes()).collect()), Err(far));
        // All missing: an int.
        assert!(matches!(held(&DataType::Int64, Some(None), 4).0, Element::Int64AsInt { missing: None, .. }));
        // Past an int, within 2^53: a double, noted.
        let (element, cdf5, notes, _) = held(&DataType::Int64, Some(Some((0, 1 << 40))), 4);
        assert_eq!((element, cdf5, notes), (Element::Int64AsDouble, false, 1));
        // In too many chunks: not read at all.
        let shape = [4];
        let unread = |_: Option<i64>| -> Option<Int64Range> { panic!("read") };
        let s = Source {
            name: "t",
            dtype: &DataType::Int64,
            shape: &shape,
            dimension_names: Some(&dims),
            attributes: &none,
            fill: None,
            chunks: MOST_CHECKED_INT64_CHUNKS + 1,
            values: Some(&unread),
        };
        let plan = plan_of(&[s]).unwrap();
        assert!(plan.file.cdf5 && plan.narrowed[0].contains("chunks"), "{:?}", plan.narrowed);
        // Past 2^53, unreadable, or too many to read: int64 and CDF-5, noted.
        for (range, len) in [(Some(Some((0, (1 << 53) + 1))), 4), (None, 4), (Some(Some((0, 1))), MOST_CHECKED_INT64_VALUES + 1)] {
            let (element, cdf5, notes, _) = held(&DataType::Int64, range, len);
            assert_eq!((element, cdf5, notes), (Element::Swapped(8), true, 1), "{range:?} {len}");
        }
    }

    fn plan_of(sources: &[Source]) -> Result<Plan, String> {
        plan(&json!({}), sources)
    }
}
