//! The inode table: inode numbers for the nodes the kernel has seen, found lazily, and held
//! while the kernel holds them (its lookup count); forgotten nodes leave the table.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, RwLock};

use crate::headers::{GroupView, HeaderFormat};

pub const ROOT: u64 = 1;

/// The names of the files and directories the mount makes: a node of their kind is named so.
pub const DATA: &str = "data";
pub const PREPEND: &str = "prepend";
pub const ERROR: &str = "error";
pub const CONTROL_DIR: &str = ".zarrfs";
pub const STATS: &str = "stats";
pub const ERRORS: &str = "errors";
pub const SNAPSHOTS: &str = "snapshots";

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
}

impl Node {
    /// Its name in `parent`: its kind's own (`data`, a view's), else the last part of its path.
    /// (Not held apart: a walk's nodes cost what their paths do.)
    pub fn name(&self) -> &str {
        match self.kind {
            NodeKind::Data => DATA,
            NodeKind::View(format) => format.file_name(),
            NodeKind::GroupView(view) => view.file_name(),
            NodeKind::Prepend => PREPEND,
            NodeKind::ErrorFile => ERROR,
            NodeKind::ControlDir => CONTROL_DIR,
            NodeKind::StatsFile => STATS,
            NodeKind::ErrorsFile => ERRORS,
            NodeKind::SnapshotsDir => SNAPSHOTS,
            NodeKind::Dir | NodeKind::MetaFile | NodeKind::Scratch | NodeKind::SnapshotDir => {
                self.path.rsplit('/').next().unwrap_or(&self.path)
            }
        }
    }
}

/// A node and the kernel's lookup count of it (0: only listings hold it).
struct Held {
    node: Arc<Node>,
    lookups: u64,
}

/// A directory's children: their inodes, found by name through the nodes themselves (a name is
/// held once, by its node).
type Children = hashbrown::HashTable<u64>;

#[derive(Default)]
struct Maps {
    nodes: HashMap<u64, Held>,
    /// Per directory inode, its children.
    names: HashMap<u64, Children>,
    hasher: std::hash::RandomState,
    /// The next inode number: numbers are never reused while the daemon runs.
    next: u64,
}

impl Maps {
    fn hash(hasher: &std::hash::RandomState, name: &str) -> u64 {
        hasher.hash_one(name)
    }

    /// The inode of `name` under `parent`.
    fn find(&self, parent: u64, name: &str) -> Option<u64> {
        let children = self.names.get(&parent)?;
        children.find(Self::hash(&self.hasher, name), |ino| self.nodes.get(ino).is_some_and(|h| h.node.name() == name)).copied()
    }

    fn held(&self, ino: u64) -> bool {
        self.nodes.get(&ino).is_some_and(|h| h.lookups > 0)
    }

    /// `ino` is now `name` under `parent` (its node in `nodes` already says so); returns the
    /// inode the name stood for before, if another.
    fn name(&mut self, parent: u64, name: &str, ino: u64) -> Option<u64> {
        let Maps { nodes, names, hasher, .. } = self;
        let rehash = |i: &u64| nodes.get(i).map_or(0, |h| Self::hash(hasher, h.node.name()));
        let same = |i: &u64| *i != ino && nodes.get(i).is_some_and(|h| h.node.name() == name);
        let children = names.entry(parent).or_default();
        let replaced = children.find_entry(Self::hash(hasher, name), same).ok().map(|e| e.remove().0);
        children.insert_unique(Self::hash(hasher, name), ino, rehash);
        replaced
    }

    /// `name` under `parent` stands for nothing now; returns the inode it stood for.
    fn unname(&mut self, parent: u64, name: &str) -> Option<u64> {
        let Maps { nodes, names, hasher, .. } = self;
        let children = names.get_mut(&parent)?;
        let found = children.find_entry(Self::hash(hasher, name), |i| nodes.get(i).is_some_and(|h| h.node.name() == name));
        let ino = found.ok()?.remove().0;
        if children.capacity() > 4 * children.len() + 1024 {
            children.shrink_to_fit(|i| nodes.get(i).map_or(0, |h| Self::hash(hasher, h.node.name())));
        }
        Some(ino)
    }

    /// Take `ino` out of the table (and its children the kernel holds none of), adding the
    /// nodes removed to `removed`.
    fn remove(&mut self, ino: u64, removed: &mut Vec<(u64, Arc<Node>)>) {
        if ino == ROOT {
            return;
        }
        let Some(node) = self.nodes.get(&ino).map(|h| h.node.clone()) else { return };
        // Its name goes first (found through the node), when it still stands for it.
        if self.find(node.parent, node.name()) == Some(ino) {
            self.unname(node.parent, node.name());
        }
        self.nodes.remove(&ino);
        if let Some(children) = self.names.remove(&ino) {
            let unheld: Vec<u64> = children.into_iter().filter(|c| !self.held(*c)).collect();
            for child in unheld {
                self.remove(child, removed);
            }
        }
        removed.push((ino, node));
    }

    /// After many nodes left: tables far larger than what they hold give their room back.
    fn shrink(&mut self) {
        shrink_if_sparse(&mut self.nodes);
        shrink_if_sparse(&mut self.names);
    }
}

/// A map that held many more entries than it does now gives back its room (a walk's worth of
/// nodes the kernel has forgotten).
pub fn shrink_if_sparse<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>) {
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
        maps.nodes.insert(ROOT, Held { node: Arc::new(Node { kind: NodeKind::Dir, path: String::new(), parent: ROOT }), lookups: 0 });
        Tree { maps: RwLock::new(maps) }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Maps> {
        self.maps.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Maps> {
        self.maps.write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, ino: u64) -> Option<Arc<Node>> {
        self.read().nodes.get(&ino).map(|h| h.node.clone())
    }

    /// How many inodes the table holds.
    pub fn inodes(&self) -> usize {
        self.read().nodes.len()
    }

    /// The inode of `name` under `parent`, if the kernel has seen it.
    pub fn find(&self, parent: u64, name: &str) -> Option<u64> {
        self.read().find(parent, name)
    }

    /// The inode of the directory at store path `path`, if the kernel has seen it.
    pub fn find_dir(&self, path: &str) -> Option<u64> {
        if path.is_empty() {
            return Some(ROOT);
        }
        let maps = self.read();
        let mut ino = ROOT;
        for part in path.split('/') {
            ino = maps.find(ino, part)?;
        }
        Some(ino)
    }

    /// The inode of `name` under `parent`, created on first sight. A name that now stands
    /// for something else (a document replaced by a scratch file, a node moved here) gets a
    /// new inode.
    pub fn child(&self, parent: u64, name: &str, kind: NodeKind, path: String) -> u64 {
        let same = |maps: &Maps| {
            let ino = maps.find(parent, name)?;
            maps.nodes.get(&ino).is_some_and(|h| h.node.kind == kind && h.node.path == path).then_some(ino)
        };
        if let Some(ino) = same(&self.read()) {
            return ino;
        }
        let mut maps = self.write();
        if let Some(ino) = same(&maps) {
            return ino;
        }
        let node = Node { kind, path, parent };
        if node.name() != name {
            // Every caller names a node as its kind and path do: one that did not would be
            // found under another name.
            tracing::error!(name, shown = node.name(), "a node named against its kind and path");
            debug_assert!(false, "{name} named {}", node.name());
        }
        let ino = maps.next;
        maps.next += 1;
        maps.nodes.insert(ino, Held { node: Arc::new(node), lookups: 0 });
        // What the name stood for before stays while the kernel holds it.
        if let Some(replaced) = maps.name(parent, name, ino)
            && !maps.held(replaced)
        {
            maps.remove(replaced, &mut Vec::new());
        }
        ino
    }

    /// The kernel was given `ino` (a lookup, a create): it holds it until it forgets it.
    /// `false` when the node left the table meanwhile (the caller looks it up again).
    pub fn remember(&self, ino: u64) -> bool {
        let mut maps = self.write();
        let Some(held) = maps.nodes.get_mut(&ino) else { return false };
        held.lookups += 1;
        true
    }

    /// The kernel forgot `n` lookups of `ino`: once it holds none, the node leaves the table.
    /// Returns the nodes removed.
    pub fn forget(&self, ino: u64, n: u64) -> Vec<(u64, Arc<Node>)> {
        let mut maps = self.write();
        let mut removed = Vec::new();
        let Some(held) = maps.nodes.get_mut(&ino) else { return removed };
        held.lookups = held.lookups.saturating_sub(n);
        if held.lookups == 0 {
            maps.remove(ino, &mut removed);
            maps.shrink();
        }
        removed
    }

    /// The listings of the directory `dir` are done with `inos`: those the kernel holds none
    /// of leave the table, unless they are no longer `dir`'s (a node moved out since is
    /// another directory's listing's to let go).
    pub fn release_unheld(&self, dir: u64, inos: impl IntoIterator<Item = u64>) -> Vec<(u64, Arc<Node>)> {
        let mut maps = self.write();
        let mut removed = Vec::new();
        for ino in inos {
            if !maps.held(ino) && maps.nodes.get(&ino).is_some_and(|h| h.node.parent == dir) {
                maps.remove(ino, &mut removed);
            }
        }
        maps.shrink();
        removed
    }

    /// `name` under `parent` is gone (its inode stays while the kernel holds it).
    pub fn unlink(&self, parent: u64, name: &str) {
        let mut maps = self.write();
        if let Some(ino) = maps.unname(parent, name)
            && !maps.held(ino)
        {
            maps.remove(ino, &mut Vec::new());
        }
    }

    /// The inode at `parent`/`name` now stands at `new_parent`/`new_name` as `kind` at `path`
    /// (the kernel keeps the inode of a renamed file). A directory's files and subdirectories
    /// follow it: their store paths move with it.
    pub fn rename(&self, (parent, name): (u64, &str), (new_parent, new_name): (u64, &str), kind: NodeKind, path: String) {
        let mut maps = self.write();
        let Some(ino) = maps.unname(parent, name) else { return };
        let Some(old) = maps.nodes.get(&ino).map(|h| h.node.clone()) else { return };
        if old.kind == NodeKind::Dir {
            let lead = format!("{}/", old.path);
            let moved = |p: &str| match p.strip_prefix(&lead) {
                Some(rest) => Some(format!("{path}/{rest}")),
                None if p == old.path => Some(path.clone()),
                None => None,
            };
            // (Names stay: a node beneath keeps the last part of its path.)
            for held in maps.nodes.iter_mut().filter(|(i, _)| **i != ino).map(|(_, h)| h) {
                if let Some(p) = moved(&held.node.path) {
                    held.node = Arc::new(Node { kind: held.node.kind, path: p, parent: held.node.parent });
                }
            }
        }
        if let Some(held) = maps.nodes.get_mut(&ino) {
            held.node = Arc::new(Node { kind, path, parent: new_parent });
            debug_assert_eq!(held.node.name(), new_name);
        }
        // A node the name stood for before is replaced (its inode stays while held).
        if let Some(replaced) = maps.name(new_parent, new_name, ino)
            && !maps.held(replaced)
        {
            maps.remove(replaced, &mut Vec::new());
        }
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
        assert_eq!(tree.release_unheld(ROOT, [listed]).len(), 1);
        assert!(!tree.remember(listed), "a node that left the table is looked up again");
    }

    #[test]
    fn a_node_is_found_by_its_kinds_name_or_the_last_part_of_its_path() {
        let tree = Tree::new();
        let dir = tree.child(ROOT, "a", NodeKind::Dir, "a".into());
        let data = tree.child(dir, DATA, NodeKind::Data, "a".into());
        let npy = tree.child(dir, "data.npy", NodeKind::View(HeaderFormat::Npy), "a".into());
        let doc = tree.child(dir, "zarr.json", NodeKind::MetaFile, "a/zarr.json".into());
        assert!(tree.remember(dir) && tree.remember(data));
        assert_eq!((tree.get(data).unwrap().name(), tree.get(npy).unwrap().name()), ("data", "data.npy"));
        assert_eq!([tree.find(dir, "data"), tree.find(dir, "data.npy"), tree.find(dir, "zarr.json")], [Some(data), Some(npy), Some(doc)]);
        // Moved, the directory's files keep their names and follow its path.
        tree.rename((ROOT, "a"), (ROOT, "b"), NodeKind::Dir, "b".into());
        assert_eq!((tree.find(ROOT, "a"), tree.find_dir("b")), (None, Some(dir)));
        assert_eq!((tree.find(dir, "data"), tree.get(doc).unwrap().path.as_str()), (Some(data), "b/zarr.json"));
        // A name that stands for another node now: the one no one holds leaves.
        let scratch = tree.child(dir, "zarr.json", NodeKind::Scratch, "b/zarr.json".into());
        assert!(scratch != doc && tree.get(doc).is_none() && tree.find(dir, "zarr.json") == Some(scratch));
        // Many names (the table grows and shrinks again), each found.
        let many: Vec<u64> = (0..5000).map(|i| tree.child(dir, &format!("c{i}"), NodeKind::Dir, format!("b/c{i}"))).collect();
        assert!(many.iter().enumerate().all(|(i, ino)| tree.find(dir, &format!("c{i}")) == Some(*ino)));
        assert_eq!(tree.release_unheld(dir, many[..4990].iter().copied()).len(), 4990);
        assert_eq!((tree.find(dir, "c4995"), tree.find(dir, "c0")), (Some(many[4995]), None));
        tree.unlink(dir, "c4995");
        assert_eq!((tree.find(dir, "c4995"), tree.find(dir, "data")), (None, Some(data)));
        // A node moved out of a directory is not let go by that directory's old listing.
        tree.rename((dir, "c4996"), (ROOT, "d"), NodeKind::Dir, "d".into());
        assert!(tree.release_unheld(dir, [many[4996]]).is_empty());
        assert_eq!(tree.find(ROOT, "d"), Some(many[4996]));
    }
}
