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
    /// A file a program made in a node's directory (an editor's temporary or backup): held in
    /// memory, never stored.
    Scratch,
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

    /// The inode of `name` under `parent`, created on first sight. A name that now stands
    /// for something else (a document replaced by a scratch file, a node moved here) gets a
    /// new inode.
    pub fn child(&self, parent: u64, name: &str, kind: NodeKind, path: String) -> u64 {
        let key = (parent, name.to_string());
        let same = |maps: &Maps| {
            maps.by_name.get(&key).copied().filter(|ino| maps.nodes.get(ino).is_some_and(|n| n.kind == kind && n.path == path))
        };
        if let Some(ino) = same(&self.maps.read().unwrap_or_else(|p| p.into_inner())) {
            return ino;
        }
        let mut maps = self.maps.write().unwrap_or_else(|p| p.into_inner());
        if let Some(ino) = same(&maps) {
            return ino;
        }
        let ino = maps.nodes.len() as u64 + 1;
        maps.nodes.insert(ino, Arc::new(Node { kind, path, parent }));
        maps.by_name.insert(key, ino);
        ino
    }

    /// `name` under `parent` is gone.
    pub fn forget(&self, parent: u64, name: &str) {
        self.maps.write().unwrap_or_else(|p| p.into_inner()).by_name.remove(&(parent, name.to_string()));
    }

    /// The inode at `parent`/`name` now stands at `new_parent`/`new_name` as `kind` at `path`
    /// (the kernel keeps the inode of a renamed file). A directory's files and subdirectories
    /// follow it: their store paths move with it.
    pub fn rename(&self, (parent, name): (u64, &str), (new_parent, new_name): (u64, &str), kind: NodeKind, path: String) {
        let mut maps = self.maps.write().unwrap_or_else(|p| p.into_inner());
        let Some(ino) = maps.by_name.remove(&(parent, name.to_string())) else { return };
        let Some(old) = maps.nodes.get(&ino).cloned() else { return };
        if old.kind == NodeKind::Dir {
            let lead = format!("{}/", old.path);
            let moved = |p: &str| match p.strip_prefix(&lead) {
                Some(rest) => Some(format!("{path}/{rest}")),
                None if p == old.path => Some(path.clone()),
                None => None,
            };
            let repathed: Vec<(u64, Arc<Node>)> = maps
                .nodes
                .iter()
                .filter(|(i, _)| **i != ino)
                .filter_map(|(i, n)| moved(&n.path).map(|p| (*i, Arc::new(Node { kind: n.kind, path: p, parent: n.parent }))))
                .collect();
            maps.nodes.extend(repathed);
        }
        maps.nodes.insert(ino, Arc::new(Node { kind, path, parent: new_parent }));
        maps.by_name.insert((new_parent, new_name.to_string()), ino);
    }
}

impl Default for Tree {
    fn default() -> Self {
        Tree::new()
    }
}
