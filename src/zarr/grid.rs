//! Chunk grids: which chunk holds an element, and where each chunk starts and ends. Regular
//! axes are a step; rectilinear axes are run-length edges whose every lookup is a binary search
//! over runs, so a grid of 2^40 chunks written as one run costs one run.

use serde_json::{Value, json};

use super::region::IndexBox;
use crate::{Error, Result};

/// One run of equal edges, with where it starts (in chunks and in elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    size: u64,
    count: u64,
    first: u64,
    start: u64,
}

/// Chunk edges along one axis as merged `(size, count)` runs with cumulative counts and offsets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunLengthEdges {
    runs: Vec<Run>,
}

impl RunLengthEdges {
    /// From `(size, count)` pairs (each ≥ 1), merging neighbours of equal size.
    pub fn new(pairs: impl IntoIterator<Item = (u64, u64)>) -> Result<RunLengthEdges> {
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (size, count) in pairs {
            match merged.last_mut() {
                Some(last) if last.0 == size => last.1 = last.1.checked_add(count).ok_or_else(too_many)?,
                _ => merged.push((size, count)),
            }
        }
        let mut runs = Vec::with_capacity(merged.len());
        let (mut first, mut start) = (0u64, 0u64);
        for (size, count) in merged {
            runs.push(Run { size, count, first, start });
            first = first.checked_add(count).ok_or_else(too_many)?;
            start = size.checked_mul(count).and_then(|n| start.checked_add(n)).ok_or_else(too_many)?;
        }
        Ok(RunLengthEdges { runs })
    }

    /// Number of chunks.
    pub fn count(&self) -> u64 {
        self.runs.last().map_or(0, |r| r.first + r.count)
    }

    /// Sum of the edges.
    pub fn total(&self) -> u64 {
        self.runs.last().map_or(0, |r| r.start + r.size * r.count)
    }

    pub fn runs(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.runs.iter().map(|r| (r.size, r.count))
    }

    /// The chunk holding element `index` and the offset in it. Past the last edge, the chunk
    /// index is `count()` and the offset counts from the end of the edges.
    pub fn chunk_of(&self, index: u64) -> (u64, u64) {
        if index >= self.total() {
            return (self.count(), index - self.total());
        }
        let r = &self.runs[self.runs.partition_point(|r| r.start + r.size * r.count <= index)];
        let within = index - r.start;
        (r.first + within / r.size, within % r.size)
    }

    fn run_of_chunk(&self, chunk: u64) -> Option<&Run> {
        self.runs.get(self.runs.partition_point(|r| r.first + r.count <= chunk))
    }

    pub fn chunk_start(&self, chunk: u64) -> u64 {
        self.run_of_chunk(chunk).map_or(self.total(), |r| r.start + (chunk - r.first) * r.size)
    }

    pub fn chunk_len(&self, chunk: u64) -> u64 {
        self.run_of_chunk(chunk).or(self.runs.last()).map_or(0, |r| r.size)
    }

    /// The edges with one more at the end (merged into the last run when it has that size).
    pub fn pushed_back(&self, size: u64) -> Result<RunLengthEdges> {
        RunLengthEdges::new(self.runs().chain([(size, 1)]))
    }

    /// The edges with one more in front.
    pub fn pushed_front(&self, size: u64) -> Result<RunLengthEdges> {
        RunLengthEdges::new([(size, 1)].into_iter().chain(self.runs()))
    }

    /// The JSON zarr-python writes: `[size, count]` runs (single edges bare) when that is
    /// shorter than the explicit list, which it is as soon as one run repeats.
    pub fn to_json(&self) -> Value {
        if self.runs.iter().any(|r| r.count > 1) {
            Value::Array(self.runs.iter().map(|r| if r.count == 1 { json!(r.size) } else { json!([r.size, r.count]) }).collect())
        } else {
            Value::Array(self.runs.iter().map(|r| json!(r.size)).collect())
        }
    }
}

fn too_many() -> Error {
    Error::metadata("rectilinear chunk edges add up to more than 2^64")
}

/// The chunks along one axis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AxisGrid {
    /// Every chunk `n` long (a regular grid, or a bare integer in a rectilinear one).
    Step(u64),
    Edges(RunLengthEdges),
}

impl AxisGrid {
    pub fn chunk_of(&self, index: u64) -> (u64, u64) {
        match self {
            AxisGrid::Step(n) => (index / n, index % n),
            AxisGrid::Edges(e) => e.chunk_of(index),
        }
    }

    pub fn chunk_start(&self, chunk: u64) -> u64 {
        match self {
            AxisGrid::Step(n) => chunk * n,
            AxisGrid::Edges(e) => e.chunk_start(chunk),
        }
    }

    pub fn chunk_len(&self, chunk: u64) -> u64 {
        match self {
            AxisGrid::Step(n) => *n,
            AxisGrid::Edges(e) => e.chunk_len(chunk),
        }
    }

    /// The longest chunk along the axis.
    pub fn largest_chunk(&self) -> u64 {
        match self {
            AxisGrid::Step(n) => *n,
            AxisGrid::Edges(e) => e.runs().map(|(size, _)| size).max().unwrap_or(0),
        }
    }

    /// Chunks needed to cover `extent` elements.
    pub fn chunks_for(&self, extent: u64) -> u64 {
        let (chunk, offset) = self.chunk_of(extent);
        chunk + u64::from(offset != 0)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkGrid {
    /// Written as `rectilinear` (else `regular`).
    pub rectilinear: bool,
    pub axes: Vec<AxisGrid>,
}

fn parse_edge(v: &Value, axis: usize, item: usize) -> Result<(u64, u64)> {
    let bad = |what: &str| Error::metadata(format!("rectilinear chunk_shapes axis {axis}, run {item}: {what}, got {v}"));
    match v {
        Value::Number(_) => Ok((v.as_u64().filter(|&n| n >= 1).ok_or_else(|| bad("an edge must be an integer >= 1"))?, 1)),
        Value::Array(pair) if pair.len() == 2 => {
            let size = pair[0].as_u64().filter(|&n| n >= 1).ok_or_else(|| bad("a run's edge must be an integer >= 1"))?;
            let count = pair[1].as_u64().filter(|&n| n >= 1).ok_or_else(|| bad("a run's count must be an integer >= 1"))?;
            Ok((size, count))
        }
        _ => Err(bad("an edge is an integer or a [size, count] run")),
    }
}

impl ChunkGrid {
    pub fn parse_v3(v: &Value, shape: &[u64]) -> Result<ChunkGrid> {
        let ndim = shape.len();
        let obj = v.as_object().ok_or_else(|| Error::metadata(format!("chunk_grid must be an object, got {v}")))?;
        let config = obj.get("configuration");
        match obj.get("name").and_then(Value::as_str).unwrap_or_default() {
            "regular" => {
                let shape = config
                    .and_then(|c| c.get("chunk_shape"))
                    .ok_or_else(|| Error::metadata("regular chunk_grid without configuration.chunk_shape"))?;
                ChunkGrid::regular(parse_shape(shape, "chunk_shape")?, ndim)
            }
            "rectilinear" => {
                let config = config.ok_or_else(|| Error::metadata("rectilinear chunk_grid without a configuration"))?;
                match config.get("kind").and_then(Value::as_str) {
                    Some("inline") => {}
                    other => return Err(Error::metadata(format!("rectilinear chunk_grid kind must be \"inline\", got {other:?}"))),
                }
                let per_axis = config
                    .get("chunk_shapes")
                    .and_then(Value::as_array)
                    .ok_or_else(|| Error::metadata("rectilinear chunk_grid needs configuration.chunk_shapes, one entry per dimension"))?;
                if per_axis.len() != ndim {
                    return Err(Error::metadata(format!(
                        "rectilinear chunk_shapes has {} entries, the array {ndim} dimensions",
                        per_axis.len()
                    )));
                }
                let mut axes = Vec::with_capacity(ndim);
                for (axis, spec) in per_axis.iter().enumerate() {
                    let grid = match spec {
                        Value::Number(_) => AxisGrid::Step(spec.as_u64().filter(|&n| n >= 1).ok_or_else(|| {
                            Error::metadata(format!(
                                "rectilinear chunk_shapes axis {axis}: a regular step must be an integer >= 1, got {spec}"
                            ))
                        })?),
                        Value::Array(items) => {
                            let pairs: Result<Vec<(u64, u64)>> = items.iter().enumerate().map(|(i, v)| parse_edge(v, axis, i)).collect();
                            let edges = RunLengthEdges::new(pairs?)?;
                            if edges.total() < shape[axis] {
                                return Err(Error::metadata(format!(
                                    "rectilinear chunk_shapes axis {axis}: the edges add up to {}, less than the extent {}",
                                    edges.total(),
                                    shape[axis]
                                )));
                            }
                            AxisGrid::Edges(edges)
                        }
                        other => {
                            return Err(Error::metadata(format!(
                                "rectilinear chunk_shapes axis {axis}: expected an integer or a list, got {other}"
                            )));
                        }
                    };
                    axes.push(grid);
                }
                Ok(ChunkGrid { rectilinear: true, axes })
            }
            other => Err(Error::metadata(format!("unsupported chunk grid {other:?}"))),
        }
    }

    pub fn regular(chunk_shape: Vec<u64>, ndim: usize) -> Result<ChunkGrid> {
        if chunk_shape.len() != ndim {
            return Err(Error::metadata(format!("chunk_shape {chunk_shape:?} has {} dimensions, the array {ndim}", chunk_shape.len())));
        }
        if chunk_shape.contains(&0) {
            return Err(Error::metadata(format!("chunk_shape {chunk_shape:?} has a zero edge")));
        }
        Ok(ChunkGrid { rectilinear: false, axes: chunk_shape.into_iter().map(AxisGrid::Step).collect() })
    }

    /// The `chunk_grid` JSON of this grid.
    pub fn to_json(&self) -> Value {
        if !self.rectilinear {
            let shape: Vec<u64> = self.axes.iter().map(|a| a.chunk_len(0)).collect();
            return json!({"name": "regular", "configuration": {"chunk_shape": shape}});
        }
        let shapes: Vec<Value> = self
            .axes
            .iter()
            .map(|a| match a {
                AxisGrid::Step(n) => json!(n),
                AxisGrid::Edges(e) => e.to_json(),
            })
            .collect();
        json!({"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": shapes}})
    }

    /// Number of chunks along each axis for an array of `shape`.
    pub fn grid_shape(&self, shape: &[u64]) -> Vec<u64> {
        self.axes.iter().zip(shape).map(|(a, &n)| a.chunks_for(n)).collect()
    }

    /// The chunk along `axis` holding element `index`, and the element's position inside it.
    pub fn chunk_of(&self, axis: usize, index: u64) -> (u64, u64) {
        self.axes[axis].chunk_of(index)
    }

    /// The first element of chunk `chunk` along `axis`.
    pub fn chunk_start(&self, axis: usize, chunk: u64) -> u64 {
        self.axes[axis].chunk_start(chunk)
    }

    /// The declared (encoded) length of chunk `chunk` along `axis`.
    pub fn chunk_len(&self, axis: usize, chunk: u64) -> u64 {
        self.axes[axis].chunk_len(chunk)
    }

    /// The declared shape of the chunk at `coords`.
    /// The cells a non-empty box of elements touches.
    pub fn cells_touching(&self, region: &[(u64, u64)]) -> IndexBox {
        let (start, end) = region.iter().enumerate().map(|(a, r)| (self.chunk_of(a, r.0).0, self.chunk_of(a, r.1 - 1).0 + 1)).unzip();
        IndexBox { start, end }
    }

    /// The elements of the cell at `coords`, as a region.
    pub fn cell_region(&self, coords: &[u64]) -> Vec<(u64, u64)> {
        coords.iter().enumerate().map(|(a, &c)| (self.chunk_start(a, c), self.chunk_start(a, c) + self.chunk_len(a, c))).collect()
    }

    pub fn chunk_shape(&self, coords: &[u64]) -> Vec<u64> {
        coords.iter().enumerate().map(|(axis, &c)| self.chunk_len(axis, c)).collect()
    }

    /// The grid of `inner`-sized chunks inside this grid's chunks (sharding), which every edge
    /// must be a multiple of.
    pub fn subdivided(&self, inner: &[u64]) -> Result<ChunkGrid> {
        let axes = self
            .axes
            .iter()
            .zip(inner)
            .enumerate()
            .map(|(axis, (a, &i))| {
                let misfit =
                    |n: u64| Error::metadata(format!("sharding chunk_shape {inner:?} does not divide the shard edge {n} on axis {axis}"));
                match a {
                    AxisGrid::Step(n) if n % i == 0 => Ok(AxisGrid::Step(i)),
                    AxisGrid::Step(n) => Err(misfit(*n)),
                    AxisGrid::Edges(e) => {
                        if let Some((n, _)) = e.runs().find(|(n, _)| n % i != 0) {
                            return Err(misfit(n));
                        }
                        Ok(AxisGrid::Edges(RunLengthEdges::new(e.runs().map(|(n, c)| (i, n / i * c)))?))
                    }
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ChunkGrid { rectilinear: self.rectilinear, axes })
    }

    /// For `info`: regular shapes, or the runs of each axis.
    pub fn describe(&self) -> String {
        if !self.rectilinear {
            let shape: Vec<u64> = self.axes.iter().map(|a| a.chunk_len(0)).collect();
            return format!("regular {shape:?}");
        }
        let axes: Vec<String> = self
            .axes
            .iter()
            .map(|a| match a {
                AxisGrid::Step(n) => format!("{n}"),
                AxisGrid::Edges(e) => format!("{}", e.to_json()),
            })
            .collect();
        format!("rectilinear [{}]", axes.join(", "))
    }
}

pub fn parse_shape(v: &Value, what: &str) -> Result<Vec<u64>> {
    let a = v.as_array().ok_or_else(|| Error::metadata(format!("{what} must be a list of integers, got {v}")))?;
    a.iter()
        .map(|x| x.as_u64().ok_or_else(|| Error::metadata(format!("{what} must be a list of non-negative integers, got {v}"))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn regular_grid() {
        let g = ChunkGrid::regular(vec![2, 3], 2).unwrap();
        assert_eq!(g.grid_shape(&[5, 6]), vec![3, 2]);
        assert_eq!(g.grid_shape(&[0, 6]), vec![0, 2]);
        assert_eq!(g.chunk_of(0, 3), (1, 1));
        assert_eq!(g.chunk_start(1, 1), 3);
        assert_eq!(g.chunk_shape(&[2, 1]), vec![2, 3]);
        assert!(ChunkGrid::regular(vec![0, 1], 2).is_err());
        assert!(ChunkGrid::regular(vec![1], 2).is_err());
        assert_eq!(ChunkGrid::regular(vec![], 0).unwrap().grid_shape(&[]), Vec::<u64>::new());
    }

    #[test]
    fn every_rectilinear_form() {
        let v = json!({"name": "rectilinear", "configuration": {"kind": "inline",
            "chunk_shapes": [4, [1, 2, 3], [[4, 2]], [[1, 3], 3], [4, 4, 4]]}});
        let g = ChunkGrid::parse_v3(&v, &[10, 6, 8, 6, 6]).unwrap();
        assert_eq!(g.axes[0], AxisGrid::Step(4));
        assert_eq!(g.grid_shape(&[10, 6, 8, 6, 6]), vec![3, 3, 2, 4, 2]);
        assert_eq!(g.chunk_of(3, 4), (3, 1));
        assert_eq!(g.chunk_start(1, 2), 3);
        assert_eq!(g.chunk_len(1, 2), 3);
        // Serialised the way zarr-python writes them: runs only where shorter.
        assert_eq!(g.to_json()["configuration"]["chunk_shapes"], json!([4, [1, 2, 3], [[4, 2]], [[1, 3], 3], [[4, 3]]]));
        let bad = |shapes: Value, shape: &[u64]| {
            ChunkGrid::parse_v3(&json!({"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": shapes}}), shape)
                .unwrap_err()
                .to_string()
        };
        assert!(bad(json!([[2, 0]]), &[2]).contains("axis 0, run 1"));
        assert!(bad(json!([[[2, 0]]]), &[2]).contains("count"));
        assert!(bad(json!([[1, 1]]), &[3]).contains("less than the extent"));
        assert!(bad(json!([[1], [1]]), &[1]).contains("2 entries"));
        let no_kind = ChunkGrid::parse_v3(&json!({"name": "rectilinear", "configuration": {"chunk_shapes": [[1]]}}), &[1]);
        assert!(no_kind.unwrap_err().to_string().contains("inline"));
    }

    #[test]
    fn a_trillion_chunks_cost_one_run() {
        let e = RunLengthEdges::new([(1, 1u64 << 40)]).unwrap();
        assert_eq!((e.count(), e.total()), (1 << 40, 1 << 40));
        assert_eq!(e.chunk_of((1 << 40) - 1), ((1 << 40) - 1, 0));
        let grown = e.pushed_back(1).unwrap();
        assert_eq!(grown.runs().collect::<Vec<_>>(), vec![(1, (1 << 40) + 1)]);
        let front = e.pushed_front(5).unwrap();
        assert_eq!(front.chunk_of(5), (1, 0));
        assert_eq!(front.to_json(), json!([5, [1, 1u64 << 40]]));
    }

    proptest! {
        #[test]
        fn lookups_match_the_expanded_edges(pairs in proptest::collection::vec((1u64..6, 1u64..5), 1..8)) {
            let e = RunLengthEdges::new(pairs.clone()).unwrap();
            let edges: Vec<u64> = pairs.iter().flat_map(|&(s, c)| std::iter::repeat_n(s, c as usize)).collect();
            prop_assert_eq!(e.count(), edges.len() as u64);
            prop_assert_eq!(e.total(), edges.iter().sum::<u64>());
            let mut start = 0;
            for (i, &size) in edges.iter().enumerate() {
                prop_assert_eq!(e.chunk_start(i as u64), start);
                prop_assert_eq!(e.chunk_len(i as u64), size);
                for off in 0..size {
                    prop_assert_eq!(e.chunk_of(start + off), (i as u64, off));
                }
                start += size;
            }
            prop_assert_eq!(e.chunk_of(start), (edges.len() as u64, 0));
            prop_assert!(e.runs().zip(e.runs().skip(1)).all(|(a, b)| a.0 != b.0), "runs are merged");
        }
    }
}
