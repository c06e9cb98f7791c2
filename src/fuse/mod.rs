//! The only code that knows fuser: `adapter` turns kernel requests into core calls,
//! `session` mounts and serves them. Nothing else in the crate imports fuser.

mod adapter;
mod fusermount;
mod session;

pub use session::{Session, SessionOptions};
