//! OME-NGFF images (OME-Zarr): a group whose attributes hold `multiscales` — 0.4 (on v2, and
//! the same layout on v3) or 0.5 (under `attributes.ome`). What an image is, read from its
//! group's attributes alone: its axes (names, kinds, units), its levels (array paths and the
//! physical size of a step along each axis) and its channels (`omero`). Whether the levels'
//! arrays agree with it is for the views to check, with their metadata.

use serde_json::Value;

use super::axes::{Axes, Axis, AxisKind, Unit};
use super::dtype::DataType;

/// The most axes an OME-NGFF image has (t, c, z, y, x).
const MOST_AXES: usize = 5;
/// Levels and channels past these are not read (a hostile document could list millions).
const MOST_LEVELS: usize = 64;
const MOST_CHANNELS: usize = 4096;

#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    /// `0.4`, `0.5`, ... as the document says.
    pub version: String,
    pub name: Option<String>,
    /// One per array dimension: name, kind, unit (no step: that is per level).
    pub axes: Vec<Axis>,
    pub levels: Vec<Level>,
    pub channels: Vec<Channel>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Level {
    /// The level array's path relative to the image group.
    pub path: String,
    /// The physical size of a step along each axis (the dataset's scale times the
    /// multiscale's own).
    pub scale: Vec<f64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Channel {
    pub name: Option<String>,
    /// 0xRRGGBB.
    pub color: Option<u32>,
}

/// The image a group's `attributes` describe: `None` when they hold no `multiscales`, else the
/// image or why it cannot be read.
pub fn find(attributes: &Value) -> Option<Result<Image, String>> {
    // 0.5 keeps everything under `ome`; 0.4 at the top (v2 `.zattrs`, and v3 writers of 0.4).
    let (root, version) = match attributes.get("ome") {
        Some(ome) if ome.get("multiscales").is_some() => (ome, ome.get("version").and_then(Value::as_str)),
        _ => (attributes, None),
    };
    let multiscales = root.get("multiscales")?;
    Some(parse(root, multiscales, version))
}

fn parse(root: &Value, multiscales: &Value, version: Option<&str>) -> Result<Image, String> {
    let first = multiscales.as_array().and_then(|m| m.first()).ok_or("multiscales is not a list of images")?;
    let version = version.or_else(|| first.get("version").and_then(Value::as_str)).unwrap_or("0.4").to_string();
    let axes = parse_axes(first.get("axes").ok_or("the multiscale lists no axes (OME-NGFF before 0.4)")?)?;
    let global = first.get("coordinateTransformations").map(|t| scale_of(t, axes.len())).transpose()?;
    let datasets = first.get("datasets").and_then(Value::as_array).filter(|d| !d.is_empty()).ok_or("the multiscale lists no datasets")?;
    let mut levels = Vec::new();
    for d in datasets.iter().take(MOST_LEVELS) {
        let path = d.get("path").and_then(Value::as_str).ok_or("a dataset has no path")?;
        if path.is_empty() || path.starts_with('/') || path.contains('\0') || path.split('/').any(|p| p.is_empty() || p == "." || p == "..")
        {
            return Err(format!("dataset path {path:?} is not a path inside the image group"));
        }
        let mut scale = match d.get("coordinateTransformations") {
            Some(t) => scale_of(t, axes.len())?,
            None => vec![1.0; axes.len()],
        };
        if let Some(g) = &global {
            scale.iter_mut().zip(g).for_each(|(s, g)| *s *= g);
        }
        levels.push(Level { path: path.to_string(), scale });
    }
    let omero = root.get("omero").or_else(|| root.get("ome").and_then(|o| o.get("omero")));
    let channels = omero.and_then(|o| o.get("channels")).and_then(Value::as_array).map_or_else(Vec::new, |cs| {
        cs.iter()
            .take(MOST_CHANNELS)
            .map(|c| Channel {
                name: c.get("label").and_then(Value::as_str).map(str::to_string),
                color: c.get("color").and_then(Value::as_str).and_then(|h| u32::from_str_radix(h.trim_start_matches('#'), 16).ok()),
            })
            .collect()
    });
    let name = first.get("name").and_then(Value::as_str).map(str::to_string);
    Ok(Image { version, name, axes, levels, channels })
}

/// The axes, checked as OME-NGFF orders them: time, then channels, then 2 or 3 spatial axes.
fn parse_axes(value: &Value) -> Result<Vec<Axis>, String> {
    let list = value.as_array().ok_or("axes is not a list")?;
    if list.len() < 2 || list.len() > MOST_AXES {
        return Err(format!("{} axes: an OME-NGFF image has 2 to 5", list.len()));
    }
    let mut axes = Vec::new();
    for a in list {
        // 0.3 listed axes as bare names.
        let (name, kind, unit) = match a {
            Value::String(name) => (name.clone(), None, None),
            Value::Object(o) => (
                o.get("name").and_then(Value::as_str).ok_or("an axis has no name")?.to_string(),
                o.get("type").and_then(Value::as_str),
                o.get("unit").and_then(Value::as_str),
            ),
            _ => return Err("an axis is neither a name nor an object".into()),
        };
        let kind = match kind {
            Some("space") => AxisKind::Space,
            Some("time") => AxisKind::Time,
            Some("channel") => AxisKind::Channel,
            Some(other) => return Err(format!("axis {name:?} has the custom type {other:?}, which OME-TIFF cannot hold")),
            None => match AxisKind::from_name(&name) {
                AxisKind::Other => return Err(format!("axis {name:?} has no type, and its name says none")),
                kind => kind,
            },
        };
        axes.push(Axis { name: Some(name), kind, unit: unit.and_then(Unit::parse), step: None });
    }
    let rank = |k: AxisKind| match k {
        AxisKind::Time => 0,
        AxisKind::Channel => 1,
        _ => 2,
    };
    let count = |k: AxisKind| axes.iter().filter(|a| a.kind == k).count();
    if count(AxisKind::Time) > 1 || count(AxisKind::Channel) > 1 {
        return Err("more than one time or channel axis".into());
    }
    if !(2..=3).contains(&count(AxisKind::Space)) {
        return Err(format!("{} spatial axes: an image has 2 or 3", count(AxisKind::Space)));
    }
    if axes.windows(2).any(|w| rank(w[0].kind) > rank(w[1].kind)) {
        return Err("axes must be time, then channel, then the spatial axes".into());
    }
    Ok(axes)
}

/// The scale of a list of coordinate transformations (1 on each axis without one).
fn scale_of(transforms: &Value, n: usize) -> Result<Vec<f64>, String> {
    let list = transforms.as_array().ok_or("coordinateTransformations is not a list")?;
    let mut scale = vec![1.0; n];
    for t in list.iter().filter(|t| t.get("type").and_then(Value::as_str) == Some("scale")) {
        let values = t.get("scale").and_then(Value::as_array).ok_or("a scale transformation lists no scale (a path is not read)")?;
        if values.len() != n {
            return Err(format!("a scale of {} values for {n} axes", values.len()));
        }
        for (s, v) in scale.iter_mut().zip(values) {
            match v.as_f64() {
                Some(v) if v.is_finite() && v > 0.0 => *s *= v,
                _ => return Err(format!("scale value {v} is not a positive number")),
            }
        }
    }
    Ok(scale)
}

/// Which levels of an image an OME-TIFF holds: level 0 and the lower levels that shrink
/// only y and x, by one integer factor; the others, and why they are left out.
#[derive(Debug, PartialEq)]
pub struct Selection {
    pub levels: Vec<usize>,
    pub left_out: Vec<(usize, String)>,
}

impl Image {
    /// The levels an OME-TIFF of this image holds, given each level's array (its data type and
    /// shape, or why it cannot be read); why there can be none.
    pub fn select(&self, arrays: &[Result<(DataType, Vec<u64>), String>]) -> Result<Selection, String> {
        let n = self.axes.len();
        let (dtype, base) = match arrays.first() {
            Some(Ok((dtype, shape))) if shape.len() == n => (dtype, shape),
            Some(Ok((_, shape))) => return Err(format!("level 0 has {} axes, the image {n}", shape.len())),
            Some(Err(why)) => return Err(format!("level 0: {why}")),
            None => return Err("the image lists no levels".into()),
        };
        let (y, x) = (n - 2, n - 1);
        let mut selection = Selection { levels: vec![0], left_out: Vec::new() };
        for (i, array) in arrays.iter().enumerate().skip(1) {
            let why = match array {
                Err(why) => Some(why.clone()),
                Ok((d, _)) if d != dtype => Some(format!("its data type {} is not level 0's {}", d.name(), dtype.name())),
                Ok((_, shape)) if shape.len() != n => Some(format!("{} axes, not {n}", shape.len())),
                Ok((_, shape)) => (0..y).find(|&a| shape[a] != base[a]).map(|a| {
                    let name = self.axes[a].name.as_deref().unwrap_or("?");
                    format!("it also changes axis {name} ({} against {}): OME-TIFF sub-resolutions shrink y and x only", shape[a], base[a])
                }),
            };
            if let Some(why) = why {
                self.left_out(&mut selection, i, why);
                continue;
            }
            let factor = |axis: usize| self.levels[i].scale[axis] / self.levels[0].scale[axis];
            let (fy, fx) = (factor(y), factor(x));
            let integer = |f: f64| (f - f.round()).abs() <= 1e-6 * f;
            if !integer(fx) || !integer(fy) || (fx - fy).abs() > 1e-6 * fx {
                return Err(format!(
                    "level {i} is downsampled by {fx} in x and {fy} in y: OME-TIFF pyramids need one integer factor for both"
                ));
            }
            if fx.round() < 2.0 {
                self.left_out(&mut selection, i, "it is not smaller than level 0".into());
                continue;
            }
            selection.levels.push(i);
        }
        Ok(selection)
    }

    fn left_out(&self, selection: &mut Selection, level: usize, why: String) {
        selection.left_out.push((level, format!("{}: {why}", self.levels[level].path)));
    }

    /// The axes of level `i`: each with its step at that level.
    pub fn level_axes(&self, i: usize) -> Axes {
        let scale = self.levels.get(i).map(|l| l.scale.as_slice()).unwrap_or_default();
        Axes(self.axes.iter().enumerate().map(|(k, a)| Axis { step: scale.get(k).copied(), ..a.clone() }).collect())
    }

    /// Which level `path` (relative to the image group) is.
    pub fn level_of(&self, path: &str) -> Option<usize> {
        self.levels.iter().position(|l| l.path == path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v04() -> Value {
        json!({"multiscales": [{"version": "0.4", "name": "cells",
            "axes": [{"name": "c", "type": "channel"}, {"name": "z", "type": "space", "unit": "micrometer"},
                     {"name": "y", "type": "space", "unit": "micrometer"}, {"name": "x", "type": "space", "unit": "micrometer"}],
            "datasets": [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 2.0, 0.5, 0.5]}]},
                         {"path": "1", "coordinateTransformations": [{"type": "scale", "scale": [1, 2.0, 1.0, 1.0]}]}],
            "coordinateTransformations": [{"type": "scale", "scale": [1, 1, 2, 2]}]}],
            "omero": {"channels": [{"label": "DAPI", "color": "0000FF"}, {"label": "GFP", "color": "00FF00"}]}})
    }

    #[test]
    fn a_0_4_image_and_its_levels() {
        let image = find(&v04()).unwrap().unwrap();
        assert_eq!(image.version, "0.4");
        assert_eq!(image.name.as_deref(), Some("cells"));
        assert_eq!(image.levels.len(), 2);
        // The multiscale's own scale multiplies each dataset's.
        assert_eq!(image.levels[0].scale, vec![1.0, 2.0, 1.0, 1.0]);
        assert_eq!(image.channels[1], Channel { name: Some("GFP".into()), color: Some(0x00FF00) });
        let axes = image.level_axes(1);
        assert_eq!(axes.0[3].step, Some(2.0));
        assert_eq!(axes.0[3].unit.map(|u| u.symbol), Some("µm"));
        assert_eq!(image.level_of("1"), Some(1));
    }

    #[test]
    fn a_0_5_image_lives_under_ome() {
        let mut inner = v04();
        let multiscales = inner["multiscales"].take();
        let attrs = json!({"ome": {"version": "0.5", "multiscales": multiscales, "omero": inner["omero"].take()}});
        let image = find(&attrs).unwrap().unwrap();
        assert_eq!(image.version, "0.5");
        assert_eq!(image.channels.len(), 2);
        assert!(find(&json!({"other": 1})).is_none());
    }

    #[test]
    fn what_ome_tiff_cannot_hold_is_refused_with_why() {
        let with_axes = |axes: Value| {
            let mut a = v04();
            a["multiscales"][0]["axes"] = axes;
            find(&a).unwrap()
        };
        let err = |axes: Value| with_axes(axes).unwrap_err();
        assert!(err(json!([{"name": "x", "type": "space"}, {"name": "q", "type": "wavelength"}])).contains("custom"));
        assert!(err(json!([{"name": "t", "type": "time"}, {"name": "t2", "type": "time"}, {"name": "y", "type": "space"}, {"name": "x", "type": "space"}])).contains("more than one"));
        assert!(
            err(json!([{"name": "y", "type": "space"}, {"name": "c", "type": "channel"}, {"name": "x", "type": "space"}])).contains("then")
        );
        // Untyped axes with conventional names are fine (0.3-style lists of names too).
        let mut a = v04();
        a["multiscales"][0]["axes"] = json!(["c", "z", "y", "x"]);
        assert!(find(&a).unwrap().is_ok());
        let mut a = v04();
        a["multiscales"][0]["datasets"][1]["path"] = json!("../escape");
        assert!(find(&a).unwrap().unwrap_err().contains("inside"));
    }

    #[test]
    fn levels_that_shrink_more_than_y_and_x_are_left_out() {
        let image = find(&v04()).unwrap().unwrap();
        let u16 = |shape: &[u64]| Ok((DataType::UInt16, shape.to_vec()));
        // Level 1 also halves z (the scale says 2 -> 2 for z, but the shape says otherwise).
        let s = image.select(&[u16(&[2, 8, 64, 64]), u16(&[2, 4, 32, 32])]).unwrap();
        assert_eq!(s.levels, vec![0]);
        assert!(s.left_out[0].1.contains("axis z"), "{:?}", s.left_out);
        let s = image.select(&[u16(&[2, 8, 64, 64]), u16(&[2, 8, 32, 32])]).unwrap();
        assert_eq!(s.levels, vec![0, 1]);
        let s = image.select(&[u16(&[2, 8, 64, 64]), Ok((DataType::Float32, vec![2, 8, 32, 32]))]).unwrap();
        assert_eq!(s.levels, vec![0]);
        assert!(image.select(&[Err("missing".into())]).unwrap_err().contains("level 0"));
        // x shrinks by 2, y by 3: no pyramid.
        let mut odd = v04();
        odd["multiscales"][0]["datasets"][1]["coordinateTransformations"][0]["scale"] = json!([1, 2.0, 1.5, 1.0]);
        let image = find(&odd).unwrap().unwrap();
        assert!(image.select(&[u16(&[2, 8, 64, 64]), u16(&[2, 8, 21, 32])]).unwrap_err().contains("one integer factor"));
    }
}
