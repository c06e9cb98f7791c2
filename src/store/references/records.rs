//! Kerchunk's parquet reference sets (`kerchunk.df.refs_to_dataframe`, fsspec's
//! `LazyReferenceMapper`): a directory with `.zmetadata` (`{"metadata": {KEY: DOCUMENT, ...},
//! "record_size": N}`) and, for each variable, record files `VAR/refs.R.parq` of N rows each
//! (columns `path`, `offset`, `size`, `raw`). The chunk at index I of a variable's grid (C order)
//! is row I % N of record I / N. Mounting reads `.zmetadata` alone; a record file is read when a
//! chunk in it is, and the last few read are kept, so a set of millions of references mounts at
//! once and in bounded memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;

use super::Ref;
use crate::error::lock;
use crate::store::Store;
use crate::{Error, Result};

/// The most rows a record may have, and the largest record file read.
const MAX_RECORD_SIZE: u64 = 1 << 24;
const MAX_RECORD_FILE: u64 = 1 << 30;
/// Records kept decoded (each some 40 bytes a row, and the inline values).
const RECORDS_KEPT: usize = 8;

pub struct Records {
    container: Arc<dyn Store>,
    record_size: u64,
    /// The documents `.zmetadata` holds, by key, as JSON text.
    documents: HashMap<String, Vec<u8>>,
    /// Each variable's number of chunks along each axis.
    grids: HashMap<String, Vec<u64>>,
    kept: Mutex<lru::LruCache<(String, u64), Rows>>,
}

/// A record's rows (`None`: no chunk there).
type Rows = Arc<Vec<Option<Ref>>>;

impl Records {
    /// The set whose `.zmetadata` is `doc`, its record files in `container`.
    pub fn open(container: Arc<dyn Store>, doc: &serde_json::Value) -> Result<Records> {
        let bad = |why: String| Error::metadata(format!("parquet reference set: {why}"));
        let record_size = doc
            .get("record_size")
            .and_then(|n| n.as_u64())
            .filter(|n| (1..=MAX_RECORD_SIZE).contains(n))
            .ok_or_else(|| bad(format!("record_size must be a whole number from 1 to {MAX_RECORD_SIZE}")))?;
        let metadata = doc.get("metadata").and_then(|m| m.as_object()).ok_or_else(|| bad("no metadata object".into()))?;
        let mut documents = HashMap::new();
        let mut grids = HashMap::new();
        for (key, value) in metadata {
            if key.is_empty() || key.split('/').any(|p| p.is_empty() || p == "." || p == "..") {
                return Err(bad(format!("key {key:?} is not a store key")));
            }
            let text = match value {
                serde_json::Value::String(s) => s.clone().into_bytes(),
                other => other.to_string().into_bytes(),
            };
            if let Some(field) = key.strip_suffix("/.zarray") {
                let array: serde_json::Value = serde_json::from_slice(&text).map_err(|e| bad(format!("{key}: {e}")))?;
                grids.insert(field.to_string(), grid_of(key, &array).map_err(bad)?);
            }
            documents.insert(key.clone(), text);
        }
        let kept = lru::LruCache::new(std::num::NonZeroUsize::new(RECORDS_KEPT).unwrap_or(std::num::NonZeroUsize::MIN));
        Ok(Records { container, record_size, documents, grids, kept: Mutex::new(kept) })
    }

    pub fn document_keys(&self) -> impl Iterator<Item = &String> {
        self.documents.keys()
    }

    /// Where `key`'s bytes are: a document, or the row of its chunk.
    pub fn lookup(&self, key: &str) -> Result<Option<Ref>> {
        if let Some(doc) = self.documents.get(key) {
            return Ok(Some(Ref::Inline(doc.clone())));
        }
        // The variable is the longest leading part that has a grid (v2 keys: `VAR/0.1`, or
        // `VAR/0/1` with the `/` separator).
        let Some((field, chunk)) =
            key.match_indices('/').rev().map(|(i, _)| (&key[..i], &key[i + 1..])).find(|(f, _)| self.grids.contains_key(*f))
        else {
            return Ok(None);
        };
        let grid = &self.grids[field];
        let indices: Option<Vec<u64>> = chunk.split(['.', '/']).map(|i| i.parse().ok()).collect();
        let Some(indices) = indices.filter(|ix| ix.len() == grid.len() && ix.iter().zip(grid).all(|(i, n)| i < n)) else { return Ok(None) };
        let index = indices.iter().zip(grid).fold(0u64, |acc, (i, n)| acc * n + i);
        let (record, row) = (index / self.record_size, (index % self.record_size) as usize);
        let rows = self.record(field, record)?;
        Ok(rows.get(row).cloned().flatten())
    }

    /// The rows of record `record` of `field`, read at the first need.
    fn record(&self, field: &str, record: u64) -> Result<Rows> {
        let id = (field.to_string(), record);
        if let Some(rows) = lock(&self.kept).get(&id) {
            return Ok(rows.clone());
        }
        let key = format!("{field}/refs.{record}.parq");
        let rows = match self.container.get_value(&key, MAX_RECORD_FILE)? {
            // A record file not written holds no chunk.
            None => Arc::new(Vec::new()),
            Some(value) => Arc::new(read_rows(&key, value.bytes, self.record_size).map_err(|why| Error::corrupt(&key, why))?),
        };
        lock(&self.kept).put(id, rows.clone());
        Ok(rows)
    }
}

/// The number of chunks along each axis of the array `.zarray` describes (`[1]` for a scalar).
fn grid_of(key: &str, array: &serde_json::Value) -> std::result::Result<Vec<u64>, String> {
    let numbers = |name: &str| -> std::result::Result<Vec<u64>, String> {
        array
            .get(name)
            .and_then(|v| v.as_array())
            .and_then(|a| a.iter().map(|n| n.as_u64()).collect())
            .ok_or_else(|| format!("{key}: no {name}"))
    };
    let (shape, chunks) = (numbers("shape")?, numbers("chunks")?);
    if shape.len() != chunks.len() || chunks.contains(&0) {
        return Err(format!("{key}: shape and chunks do not match"));
    }
    let grid: Vec<u64> = shape.iter().zip(&chunks).map(|(s, c)| s.div_ceil(*c)).collect();
    Ok(if grid.is_empty() { vec![1] } else { grid })
}

/// The references a record file holds, row by row (`None`: no chunk there).
fn read_rows(key: &str, bytes: Vec<u8>, record_size: u64) -> std::result::Result<Vec<Option<Ref>>, String> {
    let reader = SerializedFileReader::new(bytes::Bytes::from(bytes)).map_err(|e| format!("not a parquet file: {e}"))?;
    let rows = reader.metadata().file_metadata().num_rows();
    if rows < 0 || rows as u64 > record_size {
        return Err(format!("{rows} rows, more than the record size {record_size}"));
    }
    let mut out = Vec::with_capacity(rows as usize);
    let mut targets: HashMap<String, Arc<str>> = HashMap::new();
    for row in reader.get_row_iter(None).map_err(|e| e.to_string())? {
        let row = row.map_err(|e| e.to_string())?;
        let (mut path, mut offset, mut size, mut raw) = (None, 0i64, 0i64, None);
        for (name, field) in row.get_column_iter() {
            match (name.as_str(), field) {
                ("path", Field::Str(s)) => path = Some(s.clone()),
                ("path", Field::Bytes(b)) => {
                    path = Some(String::from_utf8(b.data().to_vec()).map_err(|_| format!("{key}: a path that is not UTF-8"))?)
                }
                ("offset", Field::Long(n)) => offset = *n,
                ("offset", Field::Int(n)) => offset = i64::from(*n),
                ("size", Field::Long(n)) => size = *n,
                ("size", Field::Int(n)) => size = i64::from(*n),
                ("raw", Field::Bytes(b)) => raw = Some(b.data().to_vec()),
                ("raw", Field::Str(s)) => raw = Some(s.clone().into_bytes()),
                (_, Field::Null) => {}
                (name, other) => return Err(format!("column {name} holds {other}, not a reference's part")),
            }
        }
        out.push(match (raw, path) {
            (Some(raw), _) => Some(Ref::Inline(raw)),
            (None, None) => None,
            (None, Some(path)) => {
                let (offset, size) = (
                    u64::try_from(offset).map_err(|_| format!("offset {offset}"))?,
                    u64::try_from(size).map_err(|_| format!("size {size}"))?,
                );
                let target = targets.entry(path.clone()).or_insert_with(|| Arc::from(path.as_str())).clone();
                // [url] alone is written with offset and size 0: the whole file.
                let len = (offset != 0 || size != 0).then_some(size);
                Some(Ref::Range { target, offset, len })
            }
        });
    }
    Ok(out)
}
