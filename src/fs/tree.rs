//! The inode table: inode numbers for the nodes the kernel has seen, found lazily, and held
//! while the kernel holds them (its lookup count); forgotten nodes leave the table.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::headers::{GroupView, HeaderFormat};

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
    /// A view of a group made from its attributes and arrays (`image.ome.tif`).
    GroupView(GroupView),
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
    /// `.zarrfs/errors`: the daemon's recent warnings and errors, as text.
    ErrorsFile,
    /// `.zarrfs/snapshots` of an Icechunk mount: a directory for each snapshot in its history.
    SnapshotsDir,
    /// `.zarrfs/snapshots/<id>` (its path is the ID): the node itself; what it holds is the tree
    /// of that snapshot, served apart (`crate::fs::snapshots`).
    SnapshotDir,
}

#[derive(Debug)]
pub struct Node {
    pub kind: NodeKind,
    /// The node's store path: the directory's prefix, or the directory a file belongs to
    /// (for `MetaFile` and `Scratch`, the store key itself).
    pub path: String,
    pub parent: u64,
    /// Its name in `parent`.
    pub name: Box<str>,
}

#[derive(Default)]
struct Maps {
    nodes: HashMap<u64, Arc<Node>>,
    /// Per directory inode, its children by name.
    names: HashMap<u64, HashMap<Box<str>, u64>>,
    /// The kernel's lookup count of each inode that has one.
    lookups: HashMap<u64, u64>,
    /// The next inode number: numbers are never reused while the daemon runs.
    next: u64,
}

impl Maps {
    /// Take `ino` out of the table (and its children the kernel holds none of), adding the
    /// nodes removed to `removed`.
    fn remove(&mut self, ino: u64, removed: &mut Vec<(u64, Arc<Node>)>) {
        if ino == ROOT {
            return;
        }
        self.lookups.remove(&ino);
        let Some(node) = self.nodes.remove(&ino) else { return };
        if let Some(siblings) = self.names.get_mut(&node.parent)
            && siblings.get(&node.name) == Some(&ino)
        {
            siblings.remove(&node.name);
            shrink_if_sparse(siblings);
        }
        if let Some(children) = self.names.remove(&ino) {
            let unheld: Vec<u64> = children.into_values().filter(|c| !self.lookups.contains_key(c)).collect();
            for child in unheld {
                self.remove(child, removed);
            }
        }
        removed.push((ino, node));
    }

    /// After many nodes left: tables far larger than what they hold give their room back.
    fn shrink(&mut self) {
        shrink_if_sparse(&mut self.nodes);
        shrink_if_sparse(&mut self.lookups);
    }
}

/// A map that held many more entries than it does now gives back its room (a walk's worth of
/// nodes the kernel has forgotten).
fn shrink_if_sparse<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 4 * map.len() + 1024 {
        map.shrink_to_fit();
    }
}

pub struct Tree {
    maps: RwLock<Maps>,
}

impl Tree {
    pub fn new() -> Tree {
        let mut maps = Maps { next: ROOT + 1, ..Maps::default() };
        maps.nodes.insert(ROOT, Arc::new(Node { kind: NodeKind::Dir, path: String::new(), parent: ROOT, name: "".into() }));
        Tree { maps: RwLock::new(maps) }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Maps> {
        self.maps.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Maps> {
        self.maps.write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, ino: u64) -> Option<Arc<Node>> {
        self.read().nodes.get(&ino).cloned()
    }

    /// How many inodes the table holds.
    pub fn inodes(&self) -> usize {
        self.read().nodes.len()
    }

    /// The inode of `name` under `parent`, if the kernel has seen it.
    pub fn find(&self, parent: u64, name: &str) -> Option<u64> {
        self.read().names.get(&parent)?.get(name).copied()
    }

    /// The inode of the directory at store path `path`, if the kernel has seen it.
    pub fn find_dir(&self, path: &str) -> Option<u64> {
        if path.is_empty() {
            return Some(ROOT);
        }
        let maps = self.read();
        let mut ino = ROOT;
        for part in path.split('/') {
            ino = *maps.names.get(&ino)?.get(part)?;
        }
        Some(ino)
    }

    /// The inode of `name` under `parent`, created on first sight. A name that now stands
    /// for something else (a document replaced by a scratch file, a node moved here) gets a
    /// new inode.
    pub fn child(&self, parent: u64, name: &str, kind: NodeKind, path: String) -> u64 {
        let same = |maps: &Maps| {
            let ino = *maps.names.get(&parent)?.get(name)?;
            maps.nodes.get(&ino).is_some_and(|n| n.kind == kind && n.path == path).then_some(ino)
        };
        if let Some(ino) = same(&self.read()) {
            return ino;
        }
        let mut maps = self.write();
        if let Some(ino) = same(&maps) {
            return ino;
        }
        let ino = maps.next;
        maps.next += 1;
        maps.nodes.insert(ino, Arc::new(Node { kind, path, parent, name: name.into() }));
        maps.names.entry(parent).or_default().insert(name.into(), ino);
        ino
    }

    /// The kernel was given `ino` (a lookup, a create): it holds it until it forgets it.
    /// `false` when the node left the table meanwhile (the caller looks it up again).
    pub fn remember(&self, ino: u64) -> bool {
        let mut maps = self.write();
        if !maps.nodes.contains_key(&ino) {
            return false;
        }
        *maps.lookups.entry(ino).or_default() += 1;
        true
    }

    /// The kernel forgot `n` lookups of `ino`: once it holds none, the node leaves the table.
    /// Returns the nodes removed.
    pub fn forget(&self, ino: u64, n: u64) -> Vec<(u64, Arc<Node>)> {
        let mut maps = self.write();
        let mut removed = Vec::new();
        let left = maps.lookups.get(&ino).map_or(0, |c| c.saturating_sub(n));
        if left > 0 {
            maps.lookups.insert(ino, left);
        } else {
            maps.remove(ino, &mut removed);
            maps.shrink();
        }
        removed
    }

    /// Listings are done with `inos`: those the kernel holds none of leave the table.
    pub fn release_unheld(&self, inos: impl IntoIterator<Item = u64>) -> Vec<(u64, Arc<Node>)> {
        let mut maps = self.write();
        let mut removed = Vec::new();
        for ino in inos {
            if !maps.lookups.contains_key(&ino) {
                maps.remove(ino, &mut removed);
            }
        }
        maps.shrink();
        removed
    }

    /// `name` under `parent` is gone (its inode stays while the kernel holds it).
    pub fn unlink(&self, parent: u64, name: &str) {
        let mut maps = self.write();
        let unheld = maps.names.get_mut(&parent).and_then(|names| names.remove(name)).filter(|ino| !maps.lookups.contains_key(ino));
        if let Some(ino) = unheld {
            maps.remove(ino, &mut Vec::new());
        }
    }

    /// The inode at `parent`/`name` now stands at `new_parent`/`new_name` as `kind` at `path`
    /// (the kernel keeps the inode of a renamed file). A directory's files and subdirectories
    /// follow it: their store paths move with it.
    pub fn rename(&self, (parent, name): (u64, &str), (new_parent, new_name): (u64, &str), kind: NodeKind, path: String) {
        let mut maps = self.write();
        let Some(ino) = maps.names.get_mut(&parent).and_then(|names| names.remove(name)) else { return };
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
                .filter_map(|(i, n)| {
                    moved(&n.path).map(|p| (*i, Arc::new(Node { kind: n.kind, path: p, parent: n.parent, name: n.name.clone() })))
                })
                .collect();
            maps.nodes.extend(repathed);
        }
        // A node the name stood for before is replaced (its inode stays while held).
        if let Some(replaced) = maps.names.entry(new_parent).or_default().insert(new_name.into(), ino)
            && replaced != ino
            && !maps.lookups.contains_key(&replaced)
        {
            maps.remove(replaced, &mut Vec::new());
        }
        maps.nodes.insert(ino, Arc::new(Node { kind, path, parent: new_parent, name: new_name.into() }));
    }
}

impl Default for Tree {
    fn default() -> Self {
        Tree::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_the_kernel_forgets_leave_the_table_with_their_unheld_children() {
        let tree = Tree::new();
        let dir = tree.child(ROOT, "g", NodeKind::Dir, "g".into());
        assert!(tree.remember(dir));
        let file = tree.child(dir, "zarr.json", NodeKind::MetaFile, "g/zarr.json".into());
        let held = tree.child(dir, "a", NodeKind::Dir, "g/a".into());
        assert!(tree.remember(held) && tree.remember(held));
        assert_eq!(tree.inodes(), 4);
        assert!(tree.forget(held, 1).is_empty(), "still held once");
        assert_eq!(tree.forget(held, 1).len(), 1);
        assert_eq!(tree.find(dir, "a"), None);
        // The directory goes with the child the kernel never held.
        assert_eq!(tree.forget(dir, 1).len(), 2);
        assert!(tree.get(file).is_none() && tree.inodes() == 1);
        // A listing's unheld entries go when it is done; numbers are not reused.
        let listed = tree.child(ROOT, "x", NodeKind::Dir, "x".into());
        assert!(listed > held);
        assert_eq!(tree.release_unheld([listed]).len(), 1);
        assert!(!tree.remember(listed), "a node that left the table is looked up again");
    }
}
