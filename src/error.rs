//! The one error type of the core; it knows the errno each case becomes at the FUSE boundary.

use std::fmt;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug)]
pub enum Error {
    /// No such node or file.
    NotFound,
    /// A file operation on a directory.
    IsADirectory,
    /// A directory operation on a file.
    NotADirectory,
    /// The mount is read-only.
    ReadOnly,
    /// This file cannot be changed through the mount.
    NotPermitted(String),
    /// A request this mount cannot serve (an operation, not the data, is the problem).
    Unsupported(String),
    /// A name that is already taken.
    Exists,
    /// A directory that still holds something.
    NotEmpty,
    /// A rename the store cannot make in one step (an object store): `mv` copies instead.
    CrossDevice(String),
    /// A file in use that the change would pull from under its users.
    Busy(String),
    /// Another writer changed a value since this mount read it (a conditional write lost):
    /// nothing was written over their change.
    Conflict { key: String, why: String },
    /// A bad argument: a size, an offset, an option.
    Invalid(String),
    /// Metadata that cannot be parsed or uses something this build does not support.
    Metadata(String),
    /// A chunk that cannot be decoded: corrupt, truncated, failed checksum.
    Corrupt { key: String, cause: String },
    /// A store object refused without being read whole: a link that leads out of the store,
    /// something that is not a regular file, or more bytes than the object can hold.
    Refused { key: String, why: String },
    /// A file whose node was removed or replaced while it was open.
    Stale(String),
    /// A bug met while serving a request (a panic, caught): the request fails, the mount lives.
    Internal(String),
    /// A store or system error.
    Io(std::io::Error),
}

impl Error {
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound => libc::ENOENT,
            Error::IsADirectory => libc::EISDIR,
            Error::NotADirectory => libc::ENOTDIR,
            Error::ReadOnly => libc::EROFS,
            Error::NotPermitted(_) => libc::EPERM,
            Error::Unsupported(_) => libc::EOPNOTSUPP,
            Error::Invalid(_) => libc::EINVAL,
            Error::Exists => libc::EEXIST,
            Error::NotEmpty => libc::ENOTEMPTY,
            Error::CrossDevice(_) => libc::EXDEV,
            Error::Busy(_) | Error::Conflict { .. } => libc::EBUSY,
            Error::Stale(_) => libc::ESTALE,
            Error::Metadata(_) | Error::Corrupt { .. } | Error::Refused { .. } | Error::Internal(_) => libc::EIO,
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    pub fn metadata(msg: impl Into<String>) -> Error {
        Error::Metadata(msg.into())
    }

    pub fn corrupt(key: impl Into<String>, cause: impl fmt::Display) -> Error {
        Error::Corrupt { key: key.into(), cause: cause.to_string() }
    }

    pub fn refused(key: impl Into<String>, why: impl fmt::Display) -> Error {
        Error::Refused { key: key.into(), why: why.to_string() }
    }

    pub fn conflict(key: impl Into<String>, why: impl fmt::Display) -> Error {
        Error::Conflict { key: key.into(), why: why.to_string() }
    }

    /// Attach the chunk key to a decoding failure that did not know it.
    pub fn in_key(self, key: &str) -> Error {
        match self {
            Error::Corrupt { key: k, cause } if k.is_empty() => Error::Corrupt { key: key.to_string(), cause },
            other => other,
        }
    }
}

/// `text` safe to show on a terminal or in a line-based log: control characters (newlines,
/// escapes, C1 controls) and the bidirectional overrides that reorder what follows are written
/// as `\u{..}`. Names in a store are anyone's bytes; what prints them must not let them forge
/// lines or drive the terminal.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotFound => write!(f, "not found"),
            Error::IsADirectory => write!(f, "is a directory"),
            Error::NotADirectory => write!(f, "not a directory"),
            Error::ReadOnly => write!(f, "read-only"),
            Error::NotPermitted(m) => write!(f, "not permitted: {m}"),
            Error::Unsupported(m) => write!(f, "unsupported: {m}"),
            Error::Invalid(m) => write!(f, "invalid: {m}"),
            Error::Exists => write!(f, "already exists"),
            Error::NotEmpty => write!(f, "directory not empty"),
            Error::CrossDevice(m) => write!(f, "cannot rename in place: {m}"),
            Error::Busy(m) => write!(f, "busy: {m}"),
            Error::Conflict { key, why } => write!(f, "{}: another writer won: {why}", printable(key)),
            Error::Stale(m) => write!(f, "stale: {m}"),
            Error::Metadata(m) => write!(f, "{m}"),
            Error::Corrupt { key, cause } => write!(f, "chunk {}: {cause}", printable(key)),
            Error::Refused { key, why } => write!(f, "{}: {why}", printable(key)),
            Error::Internal(m) => write!(f, "internal error: {m}"),
            Error::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

/// Run `f`, turning a panic into `Error::Internal` (logged): no panic may take a request
/// thread, a worker or the mount down with it. Locks are taken poison-tolerant everywhere.
pub fn catch<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        tracing::error!("{what}: internal error, answered with EIO: {msg}");
        Err(Error::Internal(msg))
    })
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

/// Take a lock even when a thread panicked holding it: panics are caught and answered with EIO
/// (`catch`), and every guarded state is left consistent between statements, so a poisoned lock
/// must not take the mount down with it.
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
