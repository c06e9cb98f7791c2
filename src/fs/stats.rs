//! Counters for `.zarrfs/stats`: requests and errors by kind (the cache counts its own).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

/// The requests counted, by name.
pub const REQUESTS: [&str; 11] =
    ["lookup", "getattr", "setattr", "readdir", "open", "read", "write", "flush", "fsync", "release", "statfs"];

#[derive(Default)]
pub struct Stats {
    requests: [AtomicU64; REQUESTS.len()],
    errors: Mutex<BTreeMap<&'static str, u64>>,
}

fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::EINVAL => "EINVAL",
        libc::EROFS => "EROFS",
        libc::EPERM => "EPERM",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENOSPC => "ENOSPC",
        libc::EACCES => "EACCES",
        libc::EISDIR => "EISDIR",
        libc::ENOTDIR => "ENOTDIR",
        _ => "other",
    }
}

impl Stats {
    /// Count one request of kind `name` (one of `REQUESTS`), and its error if it failed.
    pub fn record(&self, name: &str, errno: Option<i32>) {
        if let Some(i) = REQUESTS.iter().position(|r| *r == name) {
            self.requests[i].fetch_add(1, Ordering::Relaxed);
        }
        if let Some(e) = errno {
            *self.errors.lock().unwrap_or_else(|p| p.into_inner()).entry(errno_name(e)).or_default() += 1;
        }
    }

    pub fn requests(&self) -> Value {
        Value::Object(REQUESTS.iter().zip(&self.requests).map(|(n, c)| (n.to_string(), json!(c.load(Ordering::Relaxed)))).collect())
    }

    pub fn errors(&self) -> Value {
        json!(*self.errors.lock().unwrap_or_else(|p| p.into_inner()))
    }
}
