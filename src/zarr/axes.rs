//! What an array's axes are, as far as its metadata says: each axis' name, whether it is
//! spatial, time or channels, its unit and the physical size of one step along it. The views
//! carry what their formats can of it (spacings, units, which axis is time). Names come from
//! `dimension_names` (v3) or `_ARRAY_DIMENSIONS` (v2); kinds, units and steps from an OME-NGFF
//! image the array is a level of (`ome`), else the kind is read from a conventional name.

/// What an axis measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AxisKind {
    Space,
    Time,
    Channel,
    /// Named, but not one of the above (or not named at all).
    Other,
}

impl AxisKind {
    /// The kind a conventional axis name stands for (`x`, `y`, `z`, `t`/`time`,
    /// `c`/`channel`, and the geographic `lat`/`lon`).
    pub fn from_name(name: &str) -> AxisKind {
        match name.to_ascii_lowercase().as_str() {
            "x" | "y" | "z" | "lat" | "lon" | "latitude" | "longitude" => AxisKind::Space,
            "t" | "time" => AxisKind::Time,
            "c" | "ch" | "channel" | "channels" => AxisKind::Channel,
            _ => AxisKind::Other,
        }
    }
}

/// What a unit measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantity {
    Length,
    Time,
}

/// A unit of length or time that OME-NGFF names (UDUNITS-2 names), with its OME-XML symbol and
/// its size in metres or seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Unit {
    pub name: &'static str,
    pub symbol: &'static str,
    pub quantity: Quantity,
    /// Metres (lengths) or seconds (times) per unit.
    pub si: f64,
}

const fn length(name: &'static str, symbol: &'static str, si: f64) -> Unit {
    Unit { name, symbol, quantity: Quantity::Length, si }
}

const fn time(name: &'static str, symbol: &'static str, si: f64) -> Unit {
    Unit { name, symbol, quantity: Quantity::Time, si }
}

/// The units OME-NGFF allows, each with the symbol OME-XML's `UnitsLength` / `UnitsTime` uses.
const UNITS: [Unit; 49] = [
    length("angstrom", "Å", 1e-10),
    length("attometer", "am", 1e-18),
    length("centimeter", "cm", 1e-2),
    length("decimeter", "dm", 1e-1),
    length("exameter", "Em", 1e18),
    length("femtometer", "fm", 1e-15),
    length("foot", "ft", 0.3048),
    length("gigameter", "Gm", 1e9),
    length("hectometer", "hm", 1e2),
    length("inch", "in", 0.0254),
    length("kilometer", "km", 1e3),
    length("megameter", "Mm", 1e6),
    length("meter", "m", 1.0),
    length("micrometer", "µm", 1e-6),
    length("mile", "mi", 1609.344),
    length("millimeter", "mm", 1e-3),
    length("nanometer", "nm", 1e-9),
    length("parsec", "pc", 3.085_677_581_491_367e16),
    length("petameter", "Pm", 1e15),
    length("picometer", "pm", 1e-12),
    length("terameter", "Tm", 1e12),
    length("yard", "yd", 0.9144),
    length("yoctometer", "ym", 1e-24),
    length("yottameter", "Ym", 1e24),
    length("zeptometer", "zm", 1e-21),
    length("zettameter", "Zm", 1e21),
    time("attosecond", "as", 1e-18),
    time("centisecond", "cs", 1e-2),
    time("day", "d", 86400.0),
    time("decisecond", "ds", 1e-1),
    time("exasecond", "Es", 1e18),
    time("femtosecond", "fs", 1e-15),
    time("gigasecond", "Gs", 1e9),
    time("hectosecond", "hs", 1e2),
    time("hour", "h", 3600.0),
    time("kilosecond", "ks", 1e3),
    time("megasecond", "Ms", 1e6),
    time("microsecond", "µs", 1e-6),
    time("millisecond", "ms", 1e-3),
    time("minute", "min", 60.0),
    time("nanosecond", "ns", 1e-9),
    time("petasecond", "Ps", 1e15),
    time("picosecond", "ps", 1e-12),
    time("second", "s", 1.0),
    time("terasecond", "Ts", 1e12),
    time("yoctosecond", "ys", 1e-24),
    time("yottasecond", "Ys", 1e24),
    time("zeptosecond", "zs", 1e-21),
    time("zettasecond", "Zs", 1e21),
];

impl Unit {
    /// The unit of this OME-NGFF name (a few common spellings too: `um`, `µm`, `micron`, `s`).
    pub fn parse(name: &str) -> Option<Unit> {
        let canonical = match name {
            "um" | "µm" | "μm" | "micron" | "microns" => "micrometer",
            "nm" => "nanometer",
            "mm" => "millimeter",
            "cm" => "centimeter",
            "m" => "meter",
            "s" | "sec" | "seconds" => "second",
            "ms" => "millisecond",
            "min" | "minutes" => "minute",
            "h" | "hours" => "hour",
            other => other,
        };
        UNITS.iter().copied().find(|u| u.name == canonical)
    }

    /// The symbol in ASCII (`um` for µm), for formats whose headers are ASCII.
    pub fn ascii_symbol(&self) -> String {
        self.symbol.replace('µ', "u").replace('Å', "A")
    }

    /// `value` of this unit in `other`, a unit of the same quantity.
    pub fn convert(&self, value: f64, other: &Unit) -> f64 {
        value * self.si / other.si
    }
}

/// One axis of an array.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    pub name: Option<String>,
    pub kind: AxisKind,
    pub unit: Option<Unit>,
    /// The physical size of one step along the axis, in `unit` (or unitless).
    pub step: Option<f64>,
}

/// An array's axes, one per dimension.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Axes(pub Vec<Axis>);

impl Axes {
    /// Axes known by their names alone (`None`: unnamed), the kind read from each name.
    pub fn named(names: Option<&[Option<String>]>, ndim: usize) -> Axes {
        Axes(
            (0..ndim)
                .map(|i| {
                    let name = names.and_then(|n| n.get(i).cloned().flatten());
                    let kind = name.as_deref().map_or(AxisKind::Other, AxisKind::from_name);
                    Axis { name, kind, unit: None, step: None }
                })
                .collect(),
        )
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn kind(&self, i: usize) -> AxisKind {
        self.0.get(i).map_or(AxisKind::Other, |a| a.kind)
    }

    /// Whether the last two axes are spatial (a plane of rows and columns).
    pub fn ends_in_a_plane(&self) -> bool {
        let n = self.0.len();
        n >= 2 && self.kind(n - 1) == AxisKind::Space && self.kind(n - 2) == AxisKind::Space
    }

    /// The axes before the plane as (time, channel, z) positions, when each kind appears at
    /// most once and every one of them is known: what a hyperstack (ImageJ) or an OME image
    /// can hold. `None` otherwise.
    pub fn stack_positions(&self) -> Option<StackAxes> {
        if !self.ends_in_a_plane() {
            return None;
        }
        let mut stack = StackAxes::default();
        for i in 0..self.0.len() - 2 {
            let slot = match self.kind(i) {
                AxisKind::Time => &mut stack.t,
                AxisKind::Channel => &mut stack.c,
                AxisKind::Space => &mut stack.z,
                AxisKind::Other => return None,
            };
            if slot.replace(i).is_some() {
                return None;
            }
        }
        Some(stack)
    }

    /// The step and unit along axis `i`, converted to `unit` (of the same quantity), when known.
    pub fn step_in(&self, i: usize, unit: &Unit) -> Option<f64> {
        let axis = self.0.get(i)?;
        let step = axis.step?;
        match axis.unit {
            Some(u) if u.quantity == unit.quantity => Some(u.convert(step, unit)),
            _ => None,
        }
    }

    /// The length unit of the spatial axes, when they all have the same one.
    pub fn length_unit(&self) -> Option<Unit> {
        let mut units = self.0.iter().filter(|a| a.kind == AxisKind::Space).map(|a| a.unit);
        let first = units.next()??;
        units.all(|u| u == Some(first)).then_some(first).filter(|u| u.quantity == Quantity::Length)
    }
}

/// Where time, channels and z are among an array's leading axes (`None`: absent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackAxes {
    pub t: Option<usize>,
    pub c: Option<usize>,
    pub z: Option<usize>,
}

impl StackAxes {
    /// The sizes (t, c, z) of an array of `shape` (1 for an absent axis).
    pub fn sizes(&self, shape: &[u64]) -> (u64, u64, u64) {
        let n = |i: Option<usize>| i.and_then(|i| shape.get(i).copied()).unwrap_or(1);
        (n(self.t), n(self.c), n(self.z))
    }

    /// The index of plane (t, c, z) among the array's planes, in its C order.
    pub fn plane_index(&self, shape: &[u64], t: u64, c: u64, z: u64) -> u64 {
        let leading = shape.len().saturating_sub(2);
        shape.iter().take(leading).enumerate().fold(0, |index, (axis, &n)| {
            let at = match Some(axis) {
                a if a == self.t => t,
                a if a == self.c => c,
                a if a == self.z => z,
                _ => 0,
            };
            index * n + at
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<Option<String>> {
        n.iter().map(|s| Some(s.to_string())).collect()
    }

    #[test]
    fn kinds_come_from_conventional_names() {
        let axes = Axes::named(Some(&names(&["t", "c", "z", "y", "x"])), 5);
        assert_eq!(axes.stack_positions(), Some(StackAxes { t: Some(0), c: Some(1), z: Some(2) }));
        let axes = Axes::named(Some(&names(&["time", "lat", "lon"])), 3);
        assert_eq!(axes.stack_positions(), Some(StackAxes { t: Some(0), c: None, z: None }));
        // Two time axes, or one of no known kind: no stack.
        assert_eq!(Axes::named(Some(&names(&["t", "time", "y", "x"])), 4).stack_positions(), None);
        assert_eq!(Axes::named(Some(&names(&["band", "y", "x"])), 3).stack_positions(), None);
        assert_eq!(Axes::named(None, 3).stack_positions(), None);
    }

    #[test]
    fn planes_are_numbered_in_the_arrays_own_order() {
        // (c, t, y, x): channels outside time.
        let stack = StackAxes { t: Some(1), c: Some(0), z: None };
        let shape = [2, 3, 4, 5];
        assert_eq!(stack.sizes(&shape), (3, 2, 1));
        assert_eq!(stack.plane_index(&shape, 0, 1, 0), 3);
        assert_eq!(stack.plane_index(&shape, 2, 0, 0), 2);
    }

    #[test]
    fn units_convert_within_a_quantity() {
        let um = Unit::parse("micrometer").unwrap();
        let mm = Unit::parse("mm").unwrap();
        assert_eq!(um.symbol, "µm");
        assert!((um.convert(500.0, &mm) - 0.5).abs() < 1e-12);
        assert_eq!(Unit::parse("minute").unwrap().si, 60.0);
        assert!(Unit::parse("furlong").is_none());
        let mut axes = Axes::named(Some(&names(&["z", "y", "x"])), 3);
        for a in &mut axes.0 {
            a.unit = Some(um);
            a.step = Some(2.0);
        }
        assert_eq!(axes.length_unit(), Some(um));
        assert_eq!(axes.step_in(2, &mm), Some(0.002));
        assert_eq!(axes.step_in(2, &Unit::parse("second").unwrap()), None);
    }
}
