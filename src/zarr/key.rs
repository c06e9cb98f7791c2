//! Chunk key encodings: grid coordinates to store keys.

use serde_json::Value;

use crate::{Error, Result};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChunkKeyEncoding {
    /// `c/1/2` (or `c.1.2`); 0-d: `c`.
    Default { separator: char },
    /// `1.2` (or `1/2`); 0-d: `0`.
    V2 { separator: char },
    /// The `default` key of `coords + offset` (docs/offset-encoding.md).
    Offset { offset: Vec<i64>, separator: char },
}

fn separator(config: Option<&Value>, default: char) -> Result<char> {
    match config.and_then(|c| c.get("separator")) {
        None => Ok(default),
        Some(Value::String(s)) if s == "/" => Ok('/'),
        Some(Value::String(s)) if s == "." => Ok('.'),
        Some(other) => Err(Error::metadata(format!("chunk key separator must be \"/\" or \".\", got {other}"))),
    }
}

impl ChunkKeyEncoding {
    pub fn parse_v3(v: &Value, ndim: usize) -> Result<ChunkKeyEncoding> {
        let obj = v.as_object().ok_or_else(|| Error::metadata(format!("chunk_key_encoding must be an object, got {v}")))?;
        let config = obj.get("configuration");
        match obj.get("name").and_then(Value::as_str).unwrap_or_default() {
            "default" => Ok(ChunkKeyEncoding::Default { separator: separator(config, '/')? }),
            "v2" => Ok(ChunkKeyEncoding::V2 { separator: separator(config, '.')? }),
            "offset" => {
                let raw = config
                    .and_then(|c| c.get("offset"))
                    .and_then(Value::as_array)
                    .ok_or_else(|| Error::metadata("offset chunk key encoding needs configuration.offset (one integer per dimension)"))?;
                let offset: Option<Vec<i64>> = raw.iter().map(Value::as_i64).collect();
                let offset = offset.ok_or_else(|| Error::metadata(format!("chunk key offset {raw:?} must be integers")))?;
                if offset.len() != ndim {
                    return Err(Error::metadata(format!("chunk key offset has {} entries, the array {ndim} dimensions", offset.len())));
                }
                Ok(ChunkKeyEncoding::Offset { offset, separator: separator(config, '/')? })
            }
            other => Err(Error::metadata(format!("unsupported chunk key encoding {other:?}"))),
        }
    }

    /// The key of the chunk at grid `coords`, relative to the array's prefix.
    pub fn key(&self, coords: &[u64]) -> String {
        let mut key = String::with_capacity(2 + coords.len() * 4);
        self.push_key(coords, &mut key);
        key
    }

    /// Append the key of the chunk at `coords` to `out` (no allocation per coordinate: reads of
    /// tiny chunks form thousands of keys).
    pub fn push_key(&self, coords: &[u64], out: &mut String) {
        use std::fmt::Write;
        // Writing to a String cannot fail.
        match self {
            ChunkKeyEncoding::Default { separator } => {
                out.push('c');
                for c in coords {
                    out.push(*separator);
                    let _ = write!(out, "{c}");
                }
            }
            ChunkKeyEncoding::Offset { offset, separator } => {
                out.push('c');
                for (c, o) in coords.iter().zip(offset) {
                    out.push(*separator);
                    let _ = write!(out, "{}", i128::from(*c) + i128::from(*o));
                }
            }
            ChunkKeyEncoding::V2 { separator } => {
                if coords.is_empty() {
                    out.push('0');
                }
                for (i, c) in coords.iter().enumerate() {
                    if i > 0 {
                        out.push(*separator);
                    }
                    let _ = write!(out, "{c}");
                }
            }
        }
    }

    pub fn separator(&self) -> char {
        match self {
            ChunkKeyEncoding::Default { separator } | ChunkKeyEncoding::V2 { separator } | ChunkKeyEncoding::Offset { separator, .. } => {
                *separator
            }
        }
    }

    /// The grid coordinates a key stands for, if it is a chunk key of an `ndim`-d array.
    pub fn decode(&self, key: &str, ndim: usize) -> Option<Vec<u64>> {
        let sep = self.separator();
        let parts: Vec<&str> = match self {
            ChunkKeyEncoding::V2 { .. } if ndim == 0 => return (key == "0").then(Vec::new),
            ChunkKeyEncoding::V2 { .. } => key.split(sep).collect(),
            _ if ndim == 0 => return (key == "c").then(Vec::new),
            _ => key.strip_prefix('c')?.strip_prefix(sep)?.split(sep).collect(),
        };
        if parts.len() != ndim {
            return None;
        }
        let zero = vec![0i64; ndim];
        let offset = match self {
            ChunkKeyEncoding::Offset { offset, .. } => offset,
            _ => &zero,
        };
        parts.iter().zip(offset).map(|(p, o)| u64::try_from(p.parse::<i64>().ok()?.checked_sub(*o)?).ok()).collect()
    }

    pub fn describe(&self) -> String {
        match self {
            ChunkKeyEncoding::Default { separator } => format!("default \"{separator}\""),
            ChunkKeyEncoding::V2 { separator } => format!("v2 \"{separator}\""),
            ChunkKeyEncoding::Offset { offset, separator } => {
                format!("offset {offset:?} \"{separator}\"")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys() {
        let d = ChunkKeyEncoding::parse_v3(&json!({"name": "default"}), 3).unwrap();
        assert_eq!(d.key(&[1, 23, 45]), "c/1/23/45");
        assert_eq!(d.key(&[]), "c");
        let dot = ChunkKeyEncoding::parse_v3(&json!({"name": "default", "configuration": {"separator": "."}}), 3).unwrap();
        assert_eq!(dot.key(&[1, 23, 45]), "c.1.23.45");
        let v2 = ChunkKeyEncoding::parse_v3(&json!({"name": "v2"}), 2).unwrap();
        assert_eq!(v2.key(&[1, 2]), "1.2");
        assert_eq!(v2.key(&[]), "0");
        let off = ChunkKeyEncoding::parse_v3(&json!({"name": "offset", "configuration": {"offset": [-2, 0]}}), 2).unwrap();
        assert_eq!(off.key(&[0, 0]), "c/-2/0");
        assert_eq!(off.key(&[3, 0]), "c/1/0");
        assert!(ChunkKeyEncoding::parse_v3(&json!({"name": "offset", "configuration": {"offset": [0]}}), 2).is_err());
        assert_eq!(off.decode("c/-2/0", 2), Some(vec![0, 0]));
        assert_eq!(off.decode("c/-3/0", 2), None);
        // Offsets and keys at the ends of i64 never wrap.
        let far = ChunkKeyEncoding::parse_v3(&json!({"name": "offset", "configuration": {"offset": [i64::MAX]}}), 1).unwrap();
        assert_eq!(far.decode("c/-9223372036854775808", 1), None);
        assert_eq!(far.key(&[u64::MAX]), format!("c/{}", i128::from(u64::MAX) + i128::from(i64::MAX)));
        assert_eq!(dot.decode("c.1.23.45", 3), Some(vec![1, 23, 45]));
        assert_eq!(v2.decode("1.2", 2), Some(vec![1, 2]));
        assert_eq!(d.decode("c/1/x/3", 3), None);
        assert_eq!(d.decode(".c.zarrfs-1-2.tmp", 3), None);
        assert!(ChunkKeyEncoding::parse_v3(&json!({"name": "suffix"}), 2).is_err());
        assert!(ChunkKeyEncoding::parse_v3(&json!({"name": "default", "configuration": {"separator": "-"}}), 1).is_err());
    }
}
