//! An Icechunk repository's history as directories: `.zarrfs/snapshots/<id>/` holds the tree
//! of snapshot `<id>`, read-only, so that `diff -r` and `cmp` compare it with the branch.
//!
//! Each snapshot entered is served by a `ZarrFs` of its own, over the repository opened at that
//! snapshot: the core serves one store, and a snapshot is another. Their inodes are told apart
//! by their high bits: the mount's own stay below 2^48, and snapshot `k`'s (the `k`-th entered)
//! are `k << 48` and up. A snapshot's directory is a node of the mount itself (listing
//! `.zarrfs/snapshots` opens nothing); what it holds is the snapshot's root.

use std::sync::{Arc, Mutex};

use super::{Config, ZarrFs, tree};
use crate::error::lock;
use crate::store::Store;
use crate::{Error, Result};

/// The bits of an inode number within its space.
const SPACE_BITS: u32 = 48;

/// Snapshots open at once: each holds its repository's session and a runtime.
const MOST_OPEN: usize = 16;

/// Opens the repository's store at a snapshot ID.
pub type OpenSnapshot = Box<dyn Fn(&str) -> std::result::Result<Arc<dyn Store>, String> + Send + Sync>;

/// The mount's own tree and the snapshots entered.
pub struct Mounted {
    main: Arc<ZarrFs>,
    open: Option<OpenSnapshot>,
    /// How a snapshot is served (read-only, no `.zarrfs` of its own).
    config: Config,
    /// By space (the first is space 1): the snapshot's ID, its directory's inode in the mount's
    /// tree, and what serves it.
    entered: Mutex<Vec<(String, u64, Arc<ZarrFs>)>>,
}

/// Which tree an inode is in, and its number there.
pub struct Routed {
    pub fs: Arc<ZarrFs>,
    pub ino: u64,
    space: usize,
}

impl Mounted {
    /// The mount's tree; with `open`, the snapshots of its history too.
    pub fn new(main: Arc<ZarrFs>, open: Option<OpenSnapshot>) -> Mounted {
        let mut config = main.config().clone();
        config.read_only = true;
        config.control_dir = false;
        config.snapshots = false;
        config.spool_dir = None;
        // Old versions are read now and then: a smaller cache and fewer decode threads each.
        config.cache_size = (config.cache_size / 8).max(16 << 20);
        config.workers = config.workers.min(std::num::NonZeroUsize::new(8).unwrap_or(std::num::NonZeroUsize::MIN));
        Mounted { main, open, config, entered: Mutex::default() }
    }

    pub fn main(&self) -> &Arc<ZarrFs> {
        &self.main
    }

    /// The node `ino` itself (its attributes, its handles, the kernel forgetting it).
    pub fn node(&self, ino: u64) -> Result<Routed> {
        match (ino >> SPACE_BITS) as usize {
            0 => Ok(Routed { fs: self.main.clone(), ino, space: 0 }),
            space => {
                let entered = lock(&self.entered);
                let (_, _, fs) = entered.get(space - 1).ok_or(Error::NotFound)?;
                Ok(Routed { fs: fs.clone(), ino: ino & ((1 << SPACE_BITS) - 1), space })
            }
        }
    }

    /// What the directory `ino` holds (its names, its listing, what is made in it): for a
    /// snapshot's directory, the root of the snapshot.
    pub fn contents(&self, ino: u64) -> Result<Routed> {
        let routed = self.node(ino)?;
        match self.main.snapshot_id(ino) {
            Some(id) if routed.space == 0 => self.enter(&id, ino),
            _ => Ok(routed),
        }
    }

    /// The mount's inode of `ino` in `routed`'s tree: a snapshot's root is its directory.
    pub fn outer(&self, routed: &Routed, ino: u64) -> u64 {
        match routed.space {
            0 => ino,
            space if ino == tree::ROOT => lock(&self.entered).get(space - 1).map_or(ino, |(_, dir, _)| *dir),
            space => ((space as u64) << SPACE_BITS) | ino,
        }
    }

    /// The snapshot `id` (whose directory is `dir`), opened the first time it is entered.
    fn enter(&self, id: &str, dir: u64) -> Result<Routed> {
        let known = |entered: &mut Vec<(String, u64, Arc<ZarrFs>)>| {
            let i = entered.iter().position(|(known, _, _)| known == id)?;
            // (The kernel may have forgotten the directory and found it again under a new inode.)
            entered[i].1 = dir;
            Some(Routed { fs: entered[i].2.clone(), ino: tree::ROOT, space: i + 1 })
        };
        let too_many = || {
            tracing::warn!(snapshot = id, "at most {MOST_OPEN} snapshots are open at once: remount to enter others");
            Error::Io(std::io::Error::from_raw_os_error(libc::EMFILE))
        };
        {
            let mut entered = lock(&self.entered);
            if let Some(routed) = known(&mut entered) {
                return Ok(routed);
            }
            if entered.len() >= MOST_OPEN {
                return Err(too_many());
            }
        }
        // Opened without holding the others up (it reads the repository).
        let open = self.open.as_ref().ok_or(Error::NotFound)?;
        let store = open(id).map_err(|why| {
            tracing::warn!(snapshot = id, "cannot open the snapshot: {why}");
            Error::Io(std::io::Error::other(why))
        })?;
        let fs = Arc::new(ZarrFs::new(store, self.config.clone()));
        fs.load_root()?;
        let mut entered = lock(&self.entered);
        if let Some(routed) = known(&mut entered) {
            return Ok(routed);
        }
        if entered.len() >= MOST_OPEN {
            return Err(too_many());
        }
        entered.push((id.to_string(), dir, fs.clone()));
        Ok(Routed { fs, ino: tree::ROOT, space: entered.len() })
    }

    /// Whether `a` and `b` are in one tree (a rename between trees is EXDEV).
    pub fn same_tree(a: &Routed, b: &Routed) -> bool {
        a.space == b.space
    }
}
