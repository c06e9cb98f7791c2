//! The reference model for writes: a flat `Vec<u8>` and the rules of docs/design.md §2, plus the
//! arrays the model tests run on.
#![allow(dead_code)]

use proptest::prelude::*;

/// An operation on `data`.
#[derive(Clone, Debug)]
pub enum Op {
    Write {
        offset: u64,
        len: usize,
        seed: u64,
    },
    Truncate {
        rows: u64,
    },
    Read {
        offset: u64,
        len: usize,
    },
    Fsync,
    Reopen,
    /// New rows in front (`prepend`), a whole number of chunk rows: `chunks` of them.
    Prepend {
        chunks: u64,
        seed: u64,
    },
}

pub fn ops(max_bytes: u64) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (0..max_bytes, 1usize..300, any::<u64>()).prop_map(|(offset, len, seed)| Op::Write { offset, len, seed }),
        1 => (0u64..24).prop_map(|rows| Op::Truncate { rows }),
        2 => (0..max_bytes, 1usize..400).prop_map(|(offset, len)| Op::Read { offset, len }),
        1 => Just(Op::Fsync),
        1 => Just(Op::Reopen),
        1 => (1u64..3, any::<u64>()).prop_map(|(chunks, seed)| Op::Prepend { chunks, seed }),
    ];
    proptest::collection::vec(op, 1..24)
}

/// An array the model runs on: its metadata document (name, text) and one element of fill.
pub struct Fixture {
    pub name: &'static str,
    pub doc_name: &'static str,
    pub doc: String,
    pub fill: Vec<u8>,
    /// Bytes per row.
    pub row: u64,
    /// Float arrays: keep written bytes clear of NaN patterns (an all-NaN chunk is "fill" and
    /// reads back as the canonical NaN).
    pub float_item: Option<usize>,
    /// Rows per chunk of arrays with the offset chunk key encoding, which take prepends.
    pub prepend_rows: Option<u64>,
}

pub fn fixtures() -> Vec<Fixture> {
    vec![
        Fixture {
            name: "plain",
            doc_name: "zarr.json",
            doc: r#"{"zarr_format":3,"node_type":"array","shape":[7,5],"data_type":"int16",
                "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[3,2]}},
                "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},"fill_value":-1,
                "codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1,"checksum":false}}]}"#
                .into(),
            fill: (-1i16).to_le_bytes().to_vec(),
            row: 10,
            float_item: None,
            prepend_rows: None,
        },
        Fixture {
            name: "sharded",
            doc_name: "zarr.json",
            doc: r#"{"zarr_format":3,"node_type":"array","shape":[9,6],"data_type":"uint8",
                "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[4,6]}},
                "chunk_key_encoding":{"name":"default","configuration":{"separator":"."}},"fill_value":0,
                "codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[2,3],
                  "codecs":[{"name":"bytes"},{"name":"gzip","configuration":{"level":1}}],
                  "index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],"index_location":"start"}}]}"#
                .into(),
            fill: vec![0],
            row: 6,
            float_item: None,
            prepend_rows: None,
        },
        Fixture {
            name: "transposed_big_endian",
            doc_name: "zarr.json",
            doc: r#"{"zarr_format":3,"node_type":"array","shape":[5,3,4],"data_type":"float32",
                "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[2,2,3]}},
                "chunk_key_encoding":{"name":"default"},"fill_value":"NaN",
                "codecs":[{"name":"transpose","configuration":{"order":[2,0,1]}},{"name":"bytes","configuration":{"endian":"big"}},
                  {"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":4,"blocksize":0}},{"name":"crc32c"}]}"#
                .into(),
            fill: f32::NAN.to_le_bytes().to_vec(),
            row: 48,
            float_item: Some(4),
            prepend_rows: None,
        },
        Fixture {
            name: "v2_fortran_delta",
            doc_name: ".zarray",
            doc: r#"{"zarr_format":2,"shape":[6,4],"chunks":[4,3],"dtype":"<i4","fill_value":7,"order":"F",
                "filters":[{"id":"delta","dtype":"<i4"}],"compressor":{"id":"zlib","level":1},"dimension_separator":"/"}"#
                .into(),
            fill: 7i32.to_le_bytes().to_vec(),
            row: 16,
            float_item: None,
            prepend_rows: None,
        },
        // Chunks narrower than a row and cut at both edges: a prepend reads each chunk's rows
        // from the staged bytes with strided reads.
        Fixture {
            name: "offset",
            doc_name: "zarr.json",
            doc: r#"{"zarr_format":3,"node_type":"array","shape":[5,7],"data_type":"uint16",
                "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[2,3]}},
                "chunk_key_encoding":{"name":"offset","configuration":{"offset":[0,0]}},"fill_value":3,
                "codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}]}"#
                .into(),
            fill: 3u16.to_le_bytes().to_vec(),
            row: 14,
            float_item: None,
            prepend_rows: Some(2),
        },
    ]
}

impl Fixture {
    /// Float arrays are written in whole elements: a partly written element keeps fill bytes
    /// and could become a NaN with a payload, which compares equal to a NaN fill.
    pub fn align(&self, offset: u64, len: usize) -> (u64, usize) {
        match self.float_item {
            Some(item) => (offset / item as u64 * item as u64, len.div_ceil(item) * item),
            None => (offset, len),
        }
    }
}

/// The bytes a write puts at `offset`, from its seed.
pub fn payload(f: &Fixture, offset: u64, len: usize, seed: u64) -> Vec<u8> {
    // One write in four is of fill, each byte in its place in the element: such writes store
    // nothing where there is only fill, and must still overwrite values.
    if seed.is_multiple_of(4) {
        return (offset..offset + len as u64).map(|i| f.fill[(i % f.fill.len() as u64) as usize]).collect();
    }
    let mut x = seed | 1;
    (0..len as u64)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = (x >> 24) as u8;
            match f.float_item {
                Some(item) if (offset + i) % item as u64 == item as u64 - 1 => b & 0x3f,
                _ => b,
            }
        })
        .collect()
}

/// The file as docs/design.md §2 says it must be.
pub struct Model {
    pub bytes: Vec<u8>,
    pub row: u64,
    pub fill: Vec<u8>,
}

impl Model {
    fn resize(&mut self, len: u64) {
        self.bytes.truncate(len as usize);
        while self.bytes.len() < len as usize {
            let i = self.bytes.len() % self.fill.len();
            self.bytes.push(self.fill[i]);
        }
    }

    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let end = offset + data.len() as u64;
        if end > self.bytes.len() as u64 {
            self.resize(end.div_ceil(self.row) * self.row);
        }
        self.bytes[offset as usize..end as usize].copy_from_slice(data);
    }

    pub fn truncate(&mut self, rows: u64) {
        self.resize(rows * self.row);
    }

    pub fn prepend(&mut self, rows: &[u8]) {
        self.bytes.splice(0..0, rows.iter().copied());
    }

    pub fn read(&self, offset: u64, len: usize) -> &[u8] {
        let n = self.bytes.len();
        let start = (offset as usize).min(n);
        &self.bytes[start..(start + len).min(n)]
    }
}
