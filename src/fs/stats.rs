//! Counters for `.zarrfs/stats`: requests, the time the core spent on them, and errors, by kind
//! (the cache counts its own).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

/// The requests counted, by name.
pub const REQUESTS: [&str; 13] =
    ["lookup", "forget", "getattr", "setattr", "readdir", "readdirplus", "open", "read", "write", "flush", "fsync", "release", "statfs"];

#[derive(Default)]
pub struct Stats {
    requests: [AtomicU64; REQUESTS.len()],
    /// Nanoseconds spent in the core, per kind: with the request count, what a request costs
    /// the mount itself, apart from the kernel's share (the copies through FUSE).
    busy_ns: [AtomicU64; REQUESTS.len()],
    errors: Mutex<BTreeMap<&'static str, u64>>,
    /// Bytes answered to reads and taken from writes (of any file).
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
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

/// `{kind: count / unit}` of per-kind counters.
fn by_kind(counters: &[AtomicU64; REQUESTS.len()], unit: u64) -> Value {
    Value::Object(REQUESTS.iter().zip(counters).map(|(n, c)| (n.to_string(), json!(c.load(Ordering::Relaxed) / unit))).collect())
}

impl Stats {
    /// Count one request of kind `name` (one of `REQUESTS`) that took the core `took`, and its
    /// error if it failed.
    pub fn record(&self, name: &str, took: Duration, errno: Option<i32>) {
        if let Some(i) = REQUESTS.iter().position(|r| *r == name) {
            self.requests[i].fetch_add(1, Ordering::Relaxed);
            self.busy_ns[i].fetch_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
        if let Some(e) = errno {
            *self.errors.lock().unwrap_or_else(|p| p.into_inner()).entry(errno_name(e)).or_default() += 1;
        }
    }

    pub fn requests(&self) -> Value {
        by_kind(&self.requests, 1)
    }

    /// Microseconds spent in the core, by kind.
    pub fn busy_us(&self) -> Value {
        by_kind(&self.busy_ns, 1000)
    }

    pub fn errors(&self) -> Value {
        json!(*self.errors.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// `(kind, count)` of every request kind, and `(kind, seconds)` spent on them in the core.
    pub fn by_kind(&self) -> impl Iterator<Item = (&'static str, u64, f64)> + '_ {
        REQUESTS
            .iter()
            .enumerate()
            .map(|(i, n)| (*n, self.requests[i].load(Ordering::Relaxed), self.busy_ns[i].load(Ordering::Relaxed) as f64 / 1e9))
    }

    /// `(errno name, count)` of the errors answered.
    pub fn errors_by_name(&self) -> Vec<(&'static str, u64)> {
        self.errors.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(k, v)| (*k, *v)).collect()
    }
}

/// `doc` as pretty JSON whose numbers are right-aligned in 20 columns (any u64 fits): counters
/// move with every request, the stat of `.zarrfs/stats` among them, but its size does not, so
/// that the size a stat reports is the size the next read finds (`tar` and `cp` trust it).
pub fn fixed_width_json(doc: &serde_json::Value) -> Vec<u8> {
    use serde::Serialize;
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, FixedWidth(serde_json::ser::PrettyFormatter::new()));
    // Serializing a Value into memory cannot fail.
    let _ = doc.serialize(&mut ser);
    out
}

/// Pretty JSON with numbers padded to a fixed width.
struct FixedWidth<'a>(serde_json::ser::PrettyFormatter<'a>);

/// Padding a number to 20 columns.
fn padded<W: ?Sized + std::io::Write>(writer: &mut W, number: impl std::fmt::Display) -> std::io::Result<()> {
    write!(writer, "{number:>20}")
}

impl serde_json::ser::Formatter for FixedWidth<'_> {
    fn write_u64<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, value: u64) -> std::io::Result<()> {
        padded(writer, value)
    }
    fn write_i64<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, value: i64) -> std::io::Result<()> {
        padded(writer, value)
    }
    fn write_f64<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, value: f64) -> std::io::Result<()> {
        // Fixed decimals, so the width holds as the value moves.
        padded(writer, format_args!("{value:.3}"))
    }
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.begin_array(writer)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.end_array(writer)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, first: bool) -> std::io::Result<()> {
        self.0.begin_array_value(writer, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(writer)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.begin_object(writer)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.end_object(writer)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, first: bool) -> std::io::Result<()> {
        self.0.begin_object_key(writer, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(writer)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(writer)
    }
}
