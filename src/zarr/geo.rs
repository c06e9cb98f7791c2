//! Where a raster lies on Earth, as a dataset's metadata says: the affine transform of its last
//! two axes (from regular 1-D coordinate arrays, or GeoZarr's `spatial:transform`), its
//! coordinate reference system (GeoZarr `proj:code`/`proj:wkt2`, a CF `grid_mapping` variable's
//! `crs_wkt`/`spatial_ref`/`epsg_code`, or WGS 84 for latitude/longitude axes), the value that
//! marks no data, and the names of its bands (the leading axis' coordinate, CF times decoded).
//! Pure: the caller reads the coordinates and attributes.

use serde_json::Value;

use super::dtype::DataType;

/// A coordinate reference system: its EPSG code, its WKT, or both.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Crs {
    pub epsg: Option<u32>,
    pub wkt: Option<String>,
}

impl Crs {
    /// Whether it is geographic (latitude/longitude) rather than projected.
    pub fn is_geographic(&self) -> bool {
        match (&self.wkt, self.epsg) {
            (Some(wkt), _) => {
                let head = wkt.trim_start().to_ascii_uppercase();
                head.starts_with("GEOGCS") || head.starts_with("GEOGCRS") || head.starts_with("GEODCRS")
            }
            (None, Some(code)) => (4000..5000).contains(&code),
            (None, None) => false,
        }
    }

    /// What GDAL takes as the CRS: the WKT, else `EPSG:n`.
    pub fn user_input(&self) -> Option<String> {
        self.wkt.clone().or_else(|| self.epsg.map(|c| format!("EPSG:{c}")))
    }
}

/// WGS 84, for latitude/longitude axes that name no other system.
pub const WGS84: Crs = Crs { epsg: Some(4326), wkt: None };

/// A georeferenced raster's metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Georeference {
    /// GDAL's geotransform of pixel corners: x0, dx, row rotation, y0, column rotation, dy.
    pub transform: [f64; 6],
    pub crs: Option<Crs>,
    pub nodata: Option<f64>,
    /// A name per band (each plane of the leading axes, in order); empty when unknown.
    pub bands: Vec<String>,
    /// CF packing: what a stored value stands for is value × scale + offset, in `units`.
    pub packing: Packing,
}

/// CF's `scale_factor`, `add_offset` and `units`, as the GIS views carry them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Packing {
    pub scale: Option<f64>,
    pub offset: Option<f64>,
    pub units: Option<String>,
}

impl Packing {
    /// What `attributes` say (a number, or CF's list of one).
    pub fn of(attributes: &Value) -> Packing {
        let number = |k: &str| match attributes.get(k) {
            Some(Value::Array(a)) if a.len() == 1 => a[0].as_f64(),
            v => v.and_then(Value::as_f64),
        };
        let units = attributes.get("units").and_then(Value::as_str).filter(|u| !u.is_empty()).map(str::to_string);
        Packing { scale: number("scale_factor"), offset: number("add_offset"), units }
    }

    /// Whether values are packed (a scale or an offset that changes them).
    pub fn is_packed(&self) -> bool {
        self.scale.is_some_and(|s| s != 1.0) || self.offset.is_some_and(|o| o != 0.0)
    }
}

impl Georeference {
    /// Whether rows run north to south with no rotation (what ENVI's `map info` and a GeoTIFF
    /// tie point with a pixel scale can say).
    pub fn is_north_up(&self) -> bool {
        self.transform[2] == 0.0 && self.transform[4] == 0.0 && self.transform[5] < 0.0
    }
}

/// The transform of a grid whose pixel centres are `xs` along columns and `ys` along rows, when
/// both are regular (equal steps within a part in 10^4 of a step, as float32 coordinates are).
pub fn transform_of_centres(xs: &[f64], ys: &[f64]) -> Option<[f64; 6]> {
    let step = |v: &[f64]| {
        if v.len() < 2 || v.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let d = (v[v.len() - 1] - v[0]) / (v.len() - 1) as f64;
        let regular = d != 0.0 && v.windows(2).all(|w| ((w[1] - w[0]) - d).abs() <= d.abs() * 1e-4);
        regular.then_some(d)
    };
    let (dx, dy) = (step(xs)?, step(ys)?);
    Some([xs[0] - dx / 2.0, dx, 0.0, ys[0] - dy / 2.0, 0.0, dy])
}

/// GeoZarr's `spatial:transform` (an affine in rasterio's order: a, b, c, d, e, f) as GDAL's.
pub fn transform_of_affine(value: &Value) -> Option<[f64; 6]> {
    let v: Vec<f64> = value.as_array()?.iter().map(Value::as_f64).collect::<Option<_>>()?;
    match v[..] {
        [a, b, c, d, e, f] | [a, b, c, d, e, f, ..] => Some([c, a, b, f, d, e]),
        _ => None,
    }
}

/// The EPSG code a WKT names for itself: its last `AUTHORITY["EPSG","n"]` (WKT1) or its last
/// top-level `ID["EPSG",n]` (WKT2).
pub fn epsg_of_wkt(wkt: &str) -> Option<u32> {
    let upper = wkt.to_ascii_uppercase();
    let at = upper.rfind("AUTHORITY[\"EPSG\"").or_else(|| upper.rfind("ID[\"EPSG\""))?;
    let rest = &wkt[at..];
    let digits: String = rest.split(',').nth(1)?.chars().filter(char::is_ascii_digit).collect();
    // Only the CRS's own code: the closing brackets after it must end the WKT.
    let end = rest.find(']')?;
    rest[end..].chars().all(|c| c == ']' || c.is_whitespace()).then(|| digits.parse().ok()).flatten()
}

/// `EPSG:n` (or a bare number) as a code.
fn epsg_code(value: &Value) -> Option<u32> {
    match value {
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Value::String(s) => s.trim().strip_prefix("EPSG:").or(Some(s.trim())).and_then(|n| n.parse().ok()),
        _ => None,
    }
}

/// The CRS attributes say (GeoZarr `proj:*`, a CF grid mapping's, or the `_CRS` GDAL's Zarr
/// driver writes: `wkt`, and `url` ending in `/EPSG/0/n`), if any.
pub fn crs_of(attributes: &Value) -> Option<Crs> {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    let gdal = attributes.get("_CRS");
    let wkt = text(attributes.get("proj:wkt2"))
        .or_else(|| text(attributes.get("crs_wkt")))
        .or_else(|| text(attributes.get("spatial_ref")))
        .or_else(|| text(gdal.and_then(|c| c.get("wkt"))));
    let url_code = || text(gdal.and_then(|c| c.get("url")))?.rsplit_once("/EPSG/0/")?.1.parse().ok();
    let epsg = ["proj:code", "proj:epsg", "epsg_code"]
        .iter()
        .find_map(|k| attributes.get(*k).and_then(epsg_code))
        .or_else(url_code)
        .or_else(|| wkt.as_deref().and_then(epsg_of_wkt));
    (wkt.is_some() || epsg.is_some()).then_some(Crs { epsg, wkt })
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Months of a calendar of fixed-length years (`noleap`, `all_leap`, `360_day`).
fn fixed_months(calendar: &str) -> Option<[i64; 12]> {
    match calendar {
        "noleap" | "365_day" => Some([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]),
        "all_leap" | "366_day" => Some([31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]),
        "360_day" => Some([30; 12]),
        _ => None,
    }
}

/// A CF time (`value` in `units` like `hours since 2000-01-01 00:00:00`, in `calendar`) as an
/// ISO 8601 date and time; `None` for units or calendars it does not know (`julian`).
pub fn cf_time(value: f64, units: &str, calendar: &str) -> Option<String> {
    let (unit, since) = units.split_once(" since ")?;
    let seconds_per = match unit.trim().to_ascii_lowercase().trim_end_matches('s') {
        "day" | "d" => 86400.0,
        "hour" | "hr" | "h" => 3600.0,
        "minute" | "min" => 60.0,
        "second" | "sec" => 1.0,
        "millisecond" | "m" => 1e-3,
        "microsecond" | "u" => 1e-6,
        _ => return None,
    };
    let since = since.trim().trim_end_matches('Z').replace('T', " ");
    let (date, time) = since.split_once(' ').unwrap_or((&since, "00:00:00"));
    let mut ymd = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next().flatten().unwrap_or(1), ymd.next().flatten().unwrap_or(1));
    let time = time.split(['+', ' ']).next().unwrap_or("0");
    let mut hms = time.splitn(3, ':').map(|p| p.parse::<f64>().ok());
    let (hh, mm, ss) = (hms.next().flatten().unwrap_or(0.0), hms.next().flatten().unwrap_or(0.0), hms.next().flatten().unwrap_or(0.0));
    let offset = value * seconds_per + hh * 3600.0 + mm * 60.0 + ss;
    if !offset.is_finite() || offset.abs() > 1e15 {
        return None;
    }
    let total = offset.round() as i64;
    let (days, secs) = (total.div_euclid(86400), total.rem_euclid(86400));
    let (y, m, d) = match calendar.to_ascii_lowercase().as_str() {
        "" | "standard" | "gregorian" | "proleptic_gregorian" => civil_from_days(days_from_civil(y, m, d) + days),
        other => {
            let months = fixed_months(other)?;
            let year: i64 = months.iter().sum();
            let before: i64 = months[..(m.clamp(1, 12) - 1) as usize].iter().sum();
            let n = y * year + before + d - 1 + days;
            let (y, mut rest) = (n.div_euclid(year), n.rem_euclid(year));
            let mut month = 0;
            while rest >= months[month] {
                rest -= months[month];
                month += 1;
            }
            (y, month as i64 + 1, rest + 1)
        }
    };
    Some(format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}", secs / 3600, secs % 3600 / 60, secs % 60))
}

/// The names of a leading axis' steps: its coordinate values (CF times as dates).
pub fn band_names(values: &[f64], attributes: &Value) -> Vec<String> {
    let units = attributes.get("units").and_then(Value::as_str).unwrap_or("");
    let calendar = attributes.get("calendar").and_then(Value::as_str).unwrap_or("standard");
    values
        .iter()
        .map(|&v| cf_time(v, units, calendar).unwrap_or_else(|| if units.is_empty() { v.to_string() } else { format!("{v} {units}") }))
        .collect()
}

/// The other arrays of an array's group, as georeferencing needs them.
pub trait Siblings {
    /// The shape and attributes of the group's array `name`, if there is one.
    fn meta(&mut self, name: &str) -> Option<(Vec<u64>, Value)>;
    /// The values of the group's 1-D array `name`, as numbers.
    fn values(&mut self, name: &str) -> Option<Vec<f64>>;
}

/// The most values of a coordinate array read to georeference a raster.
pub const MOST_COORDINATES: u64 = 1 << 24;

/// Elements of `dtype` (little-endian) as numbers: integers, floats, datetime64 as int64.
pub fn values_of(bytes: &[u8], dtype: &DataType) -> Option<Vec<f64>> {
    macro_rules! each {
        ($t:ty) => {
            bytes.chunks_exact(std::mem::size_of::<$t>()).map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or_default()) as f64).collect()
        };
    }
    Some(match dtype {
        DataType::Int8 => each!(i8),
        DataType::UInt8 | DataType::Bool => each!(u8),
        DataType::Int16 => each!(i16),
        DataType::UInt16 => each!(u16),
        DataType::Int32 => each!(i32),
        DataType::UInt32 => each!(u32),
        DataType::Int64 | DataType::DateTime64(_) | DataType::TimeDelta64(_) => each!(i64),
        DataType::UInt64 => each!(u64),
        DataType::Float32 => each!(f32),
        DataType::Float64 => each!(f64),
        _ => return None,
    })
}

/// The value that marks missing data: a `_FillValue` attribute (xarray's base64 double of a v3
/// float too), else the Zarr fill value where it means one (`v2_fill`).
pub fn nodata(attributes: &Value, v2_fill: Option<&Value>) -> Option<f64> {
    let number = |v: &Value| match v {
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "nan" => Some(f64::NAN),
            "infinity" => Some(f64::INFINITY),
            "-infinity" => Some(f64::NEG_INFINITY),
            _ => {
                use base64::Engine;
                let bytes = base64::engine::general_purpose::STANDARD.decode(s).ok()?;
                <[u8; 8]>::try_from(bytes).ok().map(f64::from_le_bytes)
            }
        },
        v => v.as_f64(),
    };
    // CF's `missing_value` (a number, or a list whose first is) when there is no `_FillValue`.
    let missing = || match attributes.get("missing_value")? {
        Value::Array(a) => a.first().and_then(number),
        v => number(v),
    };
    match attributes.get("_FillValue") {
        Some(v) => number(v),
        None => missing().or_else(|| v2_fill.and_then(number)),
    }
}

fn is_latitude(name: &str) -> bool {
    matches!(name.to_ascii_lowercase().as_str(), "lat" | "latitude")
}

fn is_longitude(name: &str) -> bool {
    matches!(name.to_ascii_lowercase().as_str(), "lon" | "long" | "longitude")
}

/// Where the raster of an array (its axis `names`, `shape`, `attributes`) lies, when its
/// metadata says: GeoZarr `spatial:transform`, or regular coordinate arrays of its last two
/// axes among its `siblings`; with the CRS of GeoZarr `proj:*`, of its CF `grid_mapping`
/// variable, or WGS 84 for latitude/longitude axes; `None` when it is not georeferenced.
pub fn georeference(
    names: &[Option<String>],
    shape: &[u64],
    attributes: &Value,
    nodata: Option<f64>,
    siblings: &mut dyn Siblings,
) -> Option<Georeference> {
    let n = shape.len();
    if n < 2 || names.len() != n {
        return None;
    }
    let (y, x) = (names[n - 2].as_deref(), names[n - 1].as_deref());
    let coordinate = |siblings: &mut dyn Siblings, name: Option<&str>, len: u64| {
        let name = name?;
        let (shape, _) = siblings.meta(name)?;
        (shape == [len] && len <= MOST_COORDINATES).then(|| siblings.values(name)).flatten()
    };
    let transform = match attributes.get("spatial:transform").and_then(transform_of_affine) {
        Some(t) => t,
        None => {
            let xs = coordinate(siblings, x, shape[n - 1])?;
            let ys = coordinate(siblings, y, shape[n - 2])?;
            transform_of_centres(&xs, &ys)?
        }
    };
    // CF: `grid_mapping: crs`, or `crs: lat lon` (the first name is the variable).
    let mapping = attributes.get("grid_mapping").and_then(Value::as_str).and_then(|g| g.split([':', ' ']).next()).filter(|g| !g.is_empty());
    let crs = crs_of(attributes)
        .or_else(|| mapping.and_then(|m| siblings.meta(m)).and_then(|(_, a)| crs_of(&a)))
        .or_else(|| (y.is_some_and(is_latitude) && x.is_some_and(is_longitude)).then_some(WGS84));
    // Bands are named by the leading axis' coordinate, when there is one leading axis.
    let bands = match (n, names[0].as_deref()) {
        (3, Some(lead)) => match siblings.meta(lead) {
            Some((s, a)) if s == [shape[0]] && shape[0] <= MOST_COORDINATES => {
                siblings.values(lead).map(|v| band_names(&v, &a)).unwrap_or_default()
            }
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    Some(Georeference { transform, crs, nodata, bands, packing: Packing::of(attributes) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn regular_centres_give_a_transform_of_corners() {
        // 2.5° cells, latitudes descending from 90, longitudes 0..357.5.
        let lon: Vec<f64> = (0..144).map(|i| i as f64 * 2.5).collect();
        let lat: Vec<f64> = (0..73).map(|i| 90.0 - i as f64 * 2.5).collect();
        assert_eq!(transform_of_centres(&lon, &lat), Some([-1.25, 2.5, 0.0, 91.25, 0.0, -2.5]));
        let uneven = [0.0, 1.0, 3.0];
        assert_eq!(transform_of_centres(&uneven, &lat), None);
        assert_eq!(
            transform_of_affine(&json!([10.0, 0.0, 500000.0, 0.0, -10.0, 6000000.0])),
            Some([500000.0, 10.0, 0.0, 6000000.0, 0.0, -10.0])
        );
    }

    #[test]
    fn crs_from_geozarr_or_cf_attributes() {
        let utm = crs_of(&json!({"proj:code": "EPSG:32633"})).unwrap();
        assert_eq!((utm.epsg, utm.is_geographic()), (Some(32633), false));
        let wkt = "GEOGCS[\"WGS 84\",DATUM[\"WGS_1984\",SPHEROID[\"WGS 84\",6378137,298.257223563,AUTHORITY[\"EPSG\",\"7030\"]],AUTHORITY[\"EPSG\",\"6326\"]],PRIMEM[\"Greenwich\",0],UNIT[\"degree\",0.0174532925199433],AUTHORITY[\"EPSG\",\"4326\"]]";
        let cf = crs_of(&json!({"grid_mapping_name": "latitude_longitude", "crs_wkt": wkt})).unwrap();
        assert_eq!((cf.epsg, cf.is_geographic()), (Some(4326), true));
        // A WKT whose last code is a component's, not its own: no code.
        assert_eq!(epsg_of_wkt("PROJCS[\"x\",GEOGCS[\"y\",AUTHORITY[\"EPSG\",\"4326\"]],UNIT[\"metre\",1]]"), None);
        // GDAL's Zarr driver: `_CRS` with its WKT and the EPSG URL.
        let gdal =
            crs_of(&json!({"_CRS": {"wkt": "PROJCRS[\"WGS 84 / UTM zone 33N\"]", "url": "http://www.opengis.net/def/crs/EPSG/0/32633"}}))
                .unwrap();
        assert_eq!((gdal.epsg, gdal.is_geographic()), (Some(32633), false));
        assert!(crs_of(&json!({"units": "K"})).is_none());
    }

    #[test]
    fn cf_times_decode_in_their_calendars() {
        assert_eq!(cf_time(24.0, "hours since 2000-01-01 00:00:00", "standard").as_deref(), Some("2000-01-02T00:00:00"));
        assert_eq!(cf_time(1.5, "days since 1800-01-01", "gregorian").as_deref(), Some("1800-01-02T12:00:00"));
        assert_eq!(cf_time(59.0, "days since 2001-01-01", "noleap").as_deref(), Some("2001-03-01T00:00:00"));
        assert_eq!(cf_time(30.0, "days since 2000-01-01", "360_day").as_deref(), Some("2000-02-01T00:00:00"));
        assert_eq!(cf_time(-1.0, "days since 2000-03-01", "proleptic_gregorian").as_deref(), Some("2000-02-29T00:00:00"));
        assert_eq!(cf_time(1.0, "fortnights since 2000-01-01", "standard"), None);
        assert_eq!(band_names(&[3.0], &json!({"units": "m"})), vec!["3 m".to_string()]);
    }

    struct Group(Vec<(&'static str, Vec<f64>, Value)>);

    impl Siblings for Group {
        fn meta(&mut self, name: &str) -> Option<(Vec<u64>, Value)> {
            self.0.iter().find(|(n, ..)| *n == name).map(|(_, v, a)| (vec![v.len() as u64], a.clone()))
        }

        fn values(&mut self, name: &str) -> Option<Vec<f64>> {
            self.0.iter().find(|(n, ..)| *n == name).map(|(_, v, _)| v.clone())
        }
    }

    #[test]
    fn a_time_lat_lon_array_is_a_georeferenced_raster_with_dated_bands() {
        let names: Vec<Option<String>> = ["time", "lat", "lon"].iter().map(|n| Some(n.to_string())).collect();
        let mut group = Group(vec![
            ("time", vec![0.0, 6.0], json!({"units": "hours since 2013-01-01", "calendar": "standard"})),
            ("lat", vec![75.0, 72.5, 70.0], json!({})),
            ("lon", vec![200.0, 202.5], json!({})),
        ]);
        let geo = georeference(&names, &[2, 3, 2], &json!({}), Some(f64::NAN), &mut group).unwrap();
        assert_eq!(geo.transform, [198.75, 2.5, 0.0, 76.25, 0.0, -2.5]);
        assert_eq!(geo.crs, Some(WGS84));
        assert_eq!(geo.bands, vec!["2013-01-01T00:00:00", "2013-01-01T06:00:00"]);
        // A CF grid mapping names the CRS.
        group.0.push(("crs", vec![0.0], json!({"grid_mapping_name": "transverse_mercator", "epsg_code": "EPSG:32633"})));
        let geo = georeference(&names, &[2, 3, 2], &json!({"grid_mapping": "crs"}), None, &mut group).unwrap();
        assert_eq!(geo.crs.unwrap().epsg, Some(32633));
        // Axes with no coordinates, and no GeoZarr transform: not georeferenced.
        let plain: Vec<Option<String>> = ["t", "y", "x"].iter().map(|n| Some(n.to_string())).collect();
        assert!(georeference(&plain, &[2, 3, 2], &json!({}), None, &mut group).is_none());
        let geozarr = json!({"spatial:transform": [10.0, 0.0, 500000.0, 0.0, -10.0, 6000000.0], "proj:code": "EPSG:32633"});
        let geo = georeference(&plain, &[2, 3, 2], &geozarr, None, &mut group).unwrap();
        assert_eq!((geo.transform[0], geo.crs.unwrap().epsg), (500000.0, Some(32633)));
        assert_eq!(nodata(&json!({"_FillValue": "AAAAAAAA+H8="}), None).map(f64::is_nan), Some(true));
        assert_eq!(nodata(&json!({}), Some(&json!(-9999))), Some(-9999.0));
    }
}
