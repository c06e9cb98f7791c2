//! What is checked before the daemon forks, so that errors reach the caller's terminal: the
//! store is one, the mount point is free, empty and outside the store, the spool directory is
//! outside the mount, FUSE is there; and whether a local store can be written at all.

use std::path::{Path, PathBuf};

use super::MountPlan;
use super::mountinfo::*;
use crate::store::{Location, Store};

/// Check what can be checked before forking, so that errors reach the caller's terminal.
/// An object store is checked by the daemon before it reports that the mount is live (`open_store`):
/// its client starts threads, which must not exist when the daemon forks.
pub(super) fn preflight(plan: &MountPlan) -> Result<(), String> {
    if let Location::Local(path) = &plan.store {
        crate::store::check_dir("store", path)?;
    }
    if !plan.store.is_remote() {
        check_is_store(&plan.store, plan.store.open(&plan.remote)?.as_ref())?;
    }
    crate::store::check_dir("mount point", &plan.mountpoint)?;
    if let Some(store) = plan.store.local_path() {
        refuse_within("mount point", &plan.mountpoint, ("the store", &store), true)?;
    }
    if let Some(spool) = &plan.spool_dir {
        // Spooled bytes would be written through the mount they are spooled for.
        refuse_within("spool directory", spool, ("the mount point", &plan.mountpoint), false)?;
    }
    if is_mount_point(&plan.mountpoint) {
        return Err(format!("mount point {} is busy: something is mounted there", plan.mountpoint.display()));
    }
    if !plan.nonempty && std::fs::read_dir(&plan.mountpoint).is_ok_and(|mut d| d.next().is_some()) {
        return Err(format!(
            "mount point {} is not empty: its files would be hidden while mounted (-o nonempty mounts over them)",
            plan.mountpoint.display()
        ));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("no FUSE device (/dev/fuse): load the fuse module or run where FUSE is available".into());
    }
    Ok(())
}

/// Why a read-write mount of a local store could not store anything: the user may not write
/// its directory (or its file system is read-only). Said at mount time, rather than as a
/// failure at the first close.
pub(super) fn unwritable(plan: &MountPlan) -> Option<String> {
    let Location::Local(path) = &plan.store else { return None };
    if plan.read_only {
        return None;
    }
    rustix::fs::access(path, rustix::fs::Access::WRITE_OK)
        .err()
        .map(|e| format!("{} is not writable by this user ({})", path.display(), std::io::Error::from(e)))
}

/// Refuse `path` (`what`) inside `outer` (or at it, unless `at_ok`). A mount point inside its
/// store would show the mount within itself, and every walk through it would ask the daemon
/// for its own directory until all its threads wait on each other. Compared as canonical
/// paths, so no link hides it.
pub(super) fn refuse_within(what: &str, path: &Path, (name, outer): (&str, &Path), at_ok: bool) -> Result<(), String> {
    let (Some(inner), Ok(canonical)) = (canonical_so_far(path), outer.canonicalize()) else { return Ok(()) };
    if inner.starts_with(&canonical) && !(at_ok && inner == canonical) {
        return Err(format!("{what} {} is inside {name} {}: choose one outside it", path.display(), outer.display()));
    }
    Ok(())
}

/// `path` made canonical as far as it exists, the rest (not made yet) joined on.
pub(super) fn canonical_so_far(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    let mut rest = Vec::new();
    let mut at = absolute.as_path();
    loop {
        if let Ok(canonical) = at.canonicalize() {
            return Some(rest.iter().rev().fold(canonical, |p, name| p.join(name)));
        }
        rest.push(at.file_name()?);
        at = at.parent()?;
    }
}

pub(super) fn check_is_store(location: &Location, store: &dyn Store) -> Result<(), String> {
    match crate::zarr::node::is_node(store, "") {
        Ok(true) => Ok(()),
        Ok(false) => Err(not_a_store(location)),
        Err(e) => Err(format!("{location}: {e}")),
    }
}

pub(super) fn not_a_store(location: &Location) -> String {
    format!("{location} is not a Zarr store: no zarr.json, .zgroup or .zarray at its root")
}
