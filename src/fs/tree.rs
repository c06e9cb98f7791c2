//! The inode table: inode numbers for the nodes the kernel has seen, found lazily.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::headers::HeaderFormat;

pub const ROOT: u64 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// A group or array directory.
    Dir,
    /// A metadata document shown as the store has it.
    MetaFile,
    /// An array's elements as one flat file.
    Data,
    /// A header view of `data` for legacy tools (`data.npy`, `data.hdr`, ...).
    View(HeaderFormat),
    /// Write-only: bytes written here go in front of the array.
    Prepend,
    /// Why a node cannot be served.
    ErrorFile,
    /// `.zarrfs` at the mount root.
    ControlDir,
    /// `.zarrfs/stats`: what the daemon is doing, as JSON.
    StatsFile,
}

#[derive(Debug)]
pub struct Node {
    pub kind: NodeKind,
    /// The node's store path: the directory's prefix, or the directory a file belongs to
    /// (for `MetaFile`, the store key itself).
    pub path: String,
    pub parent: u64,
}

#[derive(Default)]
struct Maps {
    nodes: HashMap<u64, Arc<Node>>,
    by_name: HashMap<(u64, String), u64>,
}

pub struct Tree {
    maps: RwLock<Maps>,
}

impl Tree {
    pub fn new() -> Tree {
        let mut maps = Maps::default();
        maps.nodes.insert(ROOT, Arc::new(Node { kind: NodeKind::Dir, path: String::new(), parent: ROOT }));
        Tree { maps: RwLock::new(maps) }
    }

    pub fn get(&self, ino: u64) -> Option<Arc<Node>> {
        self.maps.read().unwrap_or_else(|p| p.into_inner()).nodes.get(&ino).cloned()
    }

    /// The inode of `name` under `parent`, if the kernel has seen it.
    pub fn find(&self, parent: u64, name: &str) -> Option<u64> {
        self.maps.read().unwrap_or_else(|p| p.into_inner()).by_name.get(&(parent, name.to_string())).copied()
    }

    /// The inode of the directory at store path `path`, if the kernel has seen it.
    pub fn find_dir(&self, path: &str) -> Option<u64> {
        if path.is_empty() {
            return Some(ROOT);
        }
        let mut ino = ROOT;
        for part in path.split('/') {
            ino = self.find(ino, part)?;
        }
        Some(ino)
    }

    /// The inode of `name` under `parent`, created on first sight.
    pub fn child(&self, parent: u64, name: &str, kind: NodeKind, path: String) -> u64 {
        let key = (parent, name.to_string());
        if let Some(&ino) = self.maps.read().unwrap_or_else(|p| p.into_inner()).by_name.get(&key) {
            return ino;
        }
        let mut maps = self.maps.write().unwrap_or_else(|p| p.into_inner());
        if let Some(&ino) = maps.by_name.get(&key) {
            return ino;
        }
        let ino = maps.nodes.len() as u64 + 1;
        maps.nodes.insert(ino, Arc::new(Node { kind, path, parent }));
        maps.by_name.insert(key, ino);
        ino
    }
}

impl Default for Tree {
    fn default() -> Self {
        Tree::new()
    }
}
