//! Chunk grids: which chunk holds an element, and where each chunk starts and ends.

use serde_json::Value;

use crate::{Error, Result};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChunkGrid {
    /// Every chunk has the same declared shape; edge chunks are stored at full size.
    Regular { chunk_shape: Vec<u64> },
}

impl ChunkGrid {
    pub fn parse_v3(v: &Value, ndim: usize) -> Result<ChunkGrid> {
        let obj = v.as_object().ok_or_else(|| Error::metadata(format!("chunk_grid must be an object, got {v}")))?;
        let name = obj.get("name").and_then(Value::as_str).unwrap_or_default();
        match name {
            "regular" => {
                let shape = obj
                    .get("configuration")
                    .and_then(|c| c.get("chunk_shape"))
                    .ok_or_else(|| Error::metadata("regular chunk_grid without configuration.chunk_shape"))?;
                ChunkGrid::regular(parse_shape(shape, "chunk_shape")?, ndim)
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
        Ok(ChunkGrid::Regular { chunk_shape })
    }

    pub fn ndim(&self) -> usize {
        match self {
            ChunkGrid::Regular { chunk_shape } => chunk_shape.len(),
        }
    }

    /// Number of chunks along each axis for an array of `shape`.
    pub fn grid_shape(&self, shape: &[u64]) -> Vec<u64> {
        (0..shape.len()).map(|axis| self.chunk_of(axis, shape[axis]).0 + u64::from(!self.starts_chunk(axis, shape[axis]))).collect()
    }

    /// The chunk along `axis` holding element `index`, and the element's position inside it.
    pub fn chunk_of(&self, axis: usize, index: u64) -> (u64, u64) {
        match self {
            ChunkGrid::Regular { chunk_shape } => (index / chunk_shape[axis], index % chunk_shape[axis]),
        }
    }

    fn starts_chunk(&self, axis: usize, index: u64) -> bool {
        self.chunk_of(axis, index).1 == 0
    }

    /// The first element of chunk `chunk` along `axis`.
    pub fn chunk_start(&self, axis: usize, chunk: u64) -> u64 {
        match self {
            ChunkGrid::Regular { chunk_shape } => chunk * chunk_shape[axis],
        }
    }

    /// The declared (encoded) length of chunk `chunk` along `axis`.
    pub fn chunk_len(&self, axis: usize, _chunk: u64) -> u64 {
        match self {
            ChunkGrid::Regular { chunk_shape } => chunk_shape[axis],
        }
    }

    /// The declared shape of the chunk at `coords`.
    pub fn chunk_shape(&self, coords: &[u64]) -> Vec<u64> {
        coords.iter().enumerate().map(|(axis, &c)| self.chunk_len(axis, c)).collect()
    }

    /// For JSON and `info`.
    pub fn describe(&self) -> String {
        match self {
            ChunkGrid::Regular { chunk_shape } => format!("regular {chunk_shape:?}"),
        }
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
}
