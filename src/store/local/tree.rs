//! Walks of a store's directory tree beneath a descriptor, bounded in depth: removing a subtree,
//! counting what it holds, removing the directories a removal left empty.

use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::io;
use crate::store::Usage;
use crate::{Error, Result};

/// How deep `remove_tree` goes: far past any chunk key (an axis per level), and short of what
/// a hostile store's nesting would do to the stack and the open descriptors.
const MAX_REMOVE_DEPTH: usize = 256;

/// Remove `name` in `dir` and, when it is a directory, everything beneath it. Links are
/// removed, not followed. Returns how many non-directories were removed.
pub(super) fn remove_tree(dir: &OwnedFd, name: &std::ffi::OsStr) -> Result<u64> {
    remove_tree_within(dir, name, 0)
}

pub(super) fn remove_tree_within(dir: &OwnedFd, name: &std::ffi::OsStr, depth: usize) -> Result<u64> {
    if depth > MAX_REMOVE_DEPTH {
        return Err(Error::Invalid(format!("directories nested deeper than {MAX_REMOVE_DEPTH} levels are not removed")));
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let child = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(0),
        // Not a directory (or a link): one value.
        Err(Errno::NOTDIR | Errno::LOOP) => {
            return match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
                Ok(()) => Ok(1),
                Err(Errno::NOENT) => Ok(0),
                Err(e) => Err(Error::Io(io(e))),
            };
        }
        Err(e) => return Err(Error::Io(io(e))),
    };
    let mut names = Vec::new();
    for entry in Dir::read_from(&child).map_err(|e| Error::Io(io(e)))? {
        let entry = entry.map_err(|e| Error::Io(io(e)))?;
        let n = entry.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(std::ffi::OsStr::from_bytes(n).to_os_string());
        }
    }
    let mut removed = 0;
    for n in names {
        removed += remove_tree_within(&child, &n, depth + 1)?;
    }
    match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(removed),
        Err(e) => Err(Error::Io(io(e))),
    }
}

/// Remove `name` in `dir` if it is a directory holding only empty directories. Links are not
/// followed; files are left.
/// Count the regular files beneath `dir` and their bytes into `usage`, at most `most` of them;
/// links are not followed.
pub(super) fn count_within(dir: &OwnedFd, usage: &mut Usage, most: u64, depth: usize) -> Result<()> {
    let mut subdirs = Vec::new();
    for entry in Dir::read_from(dir).map_err(|e| Error::Io(io(e)))? {
        let entry = entry.map_err(|e| Error::Io(io(e)))?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        let Ok(stat) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else { continue };
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory if depth < MAX_REMOVE_DEPTH => subdirs.push(name.to_owned()),
            FileType::RegularFile => {
                if usage.values >= most {
                    usage.complete = false;
                    return Ok(());
                }
                usage.values += 1;
                usage.bytes += stat.st_size as u64;
            }
            _ => {}
        }
    }
    for sub in subdirs {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let Ok(child) = rustix::fs::openat(dir, sub.as_c_str(), flags, Mode::empty()) else { continue };
        count_within(&child, usage, most, depth + 1)?;
        if !usage.complete {
            return Ok(());
        }
    }
    Ok(())
}

pub(super) fn remove_empty_within(dir: &OwnedFd, name: &std::ffi::OsStr, depth: usize) -> Result<()> {
    if depth > MAX_REMOVE_DEPTH {
        return Ok(());
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let child = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => return Ok(()),
        Err(e) => return Err(Error::Io(io(e))),
    };
    let mut subdirs = Vec::new();
    for entry in Dir::read_from(&child).map_err(|e| Error::Io(io(e)))? {
        let entry = entry.map_err(|e| Error::Io(io(e)))?;
        let n = entry.file_name().to_bytes();
        if n != b"." && n != b".." && entry.file_type() == FileType::Directory {
            subdirs.push(std::ffi::OsStr::from_bytes(n).to_os_string());
        }
    }
    for sub in subdirs {
        remove_empty_within(&child, &sub, depth + 1)?;
    }
    match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT | Errno::NOTEMPTY | Errno::EXIST) => Ok(()),
        Err(e) => Err(Error::Io(io(e))),
    }
}
