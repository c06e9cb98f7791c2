//! The one error type of the core; it knows the errno each case becomes at the FUSE boundary.

use std::fmt;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug)]
pub enum Error {
    /// No such node or file.
    NotFound,
    /// The mount is read-only.
    ReadOnly,
    /// This file cannot be changed through the mount.
    NotPermitted(String),
    /// A request this mount cannot serve (an operation, not the data, is the problem).
    Unsupported(String),
    /// A bad argument: a size, an offset, an option.
    Invalid(String),
    /// Metadata that cannot be parsed or uses something this build does not support.
    Metadata(String),
    /// A chunk that cannot be decoded: corrupt, truncated, failed checksum.
    Corrupt { key: String, cause: String },
    /// A store or system error.
    Io(std::io::Error),
}

impl Error {
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound => libc::ENOENT,
            Error::ReadOnly => libc::EROFS,
            Error::NotPermitted(_) => libc::EPERM,
            Error::Unsupported(_) => libc::EOPNOTSUPP,
            Error::Invalid(_) => libc::EINVAL,
            Error::Metadata(_) | Error::Corrupt { .. } => libc::EIO,
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    pub fn metadata(msg: impl Into<String>) -> Error {
        Error::Metadata(msg.into())
    }

    pub fn corrupt(key: impl Into<String>, cause: impl fmt::Display) -> Error {
        Error::Corrupt { key: key.into(), cause: cause.to_string() }
    }

    /// Attach the chunk key to a decoding failure that did not know it.
    pub fn in_key(self, key: &str) -> Error {
        match self {
            Error::Corrupt { key: k, cause } if k.is_empty() => Error::Corrupt { key: key.to_string(), cause },
            other => other,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotFound => write!(f, "not found"),
            Error::ReadOnly => write!(f, "read-only"),
            Error::NotPermitted(m) => write!(f, "not permitted: {m}"),
            Error::Unsupported(m) => write!(f, "unsupported: {m}"),
            Error::Invalid(m) => write!(f, "invalid: {m}"),
            Error::Metadata(m) => write!(f, "{m}"),
            Error::Corrupt { key, cause } => write!(f, "chunk {key}: {cause}"),
            Error::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}
