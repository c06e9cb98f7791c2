//! Directory listings as a stream the kernel reads in many requests, with no open or release
//! around it (a walk costs two requests a directory, not four: the kernel keeps no directory
//! handles). Each listing has an id, carried in the upper half of every stream offset it
//! gives, so a reader resumes in the listing it started whatever was listed since: an open
//! directory reads one listing to its end. The kernel keeps what it read while the
//! directory's mtime holds; the mtime moves when a check after the metadata TTL finds the
//! listing changed.

use std::collections::{HashMap, VecDeque};
use std::ops::Deref;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use super::nodes::DirEntry;
use crate::error::lock;

/// Listings kept per directory: the newest, and the one before it for a reader still in it.
const KEPT: usize = 2;

/// One listing of a directory (without `.` and `..`, which are stream positions 0 and 1).
#[derive(Clone)]
pub struct Listing {
    id: u32,
    entries: Arc<[DirEntry]>,
}

impl Deref for Listing {
    type Target = [DirEntry];
    fn deref(&self) -> &[DirEntry] {
        &self.entries
    }
}

impl Listing {
    /// The stream offset that resumes after stream position `position`.
    pub fn offset_after(&self, position: usize) -> u64 {
        (u64::from(self.id) << 32) | (position as u64 + 1)
    }

    /// The stream position a read at `offset` resumes at.
    pub fn position(offset: u64) -> usize {
        (offset & u64::from(u32::MAX)) as usize
    }

    fn id_of(offset: u64) -> u32 {
        (offset >> 32) as u32
    }

    /// Whether a read at `offset` is past the last entry.
    pub fn read_to_end(&self, offset: u64) -> bool {
        Listing::position(offset) >= self.entries.len() + 2
    }

    fn same_entries(&self, entries: &[DirEntry]) -> bool {
        self.entries.len() == entries.len() && self.entries.iter().zip(entries).all(|(a, b)| a.name == b.name && a.kind == b.kind)
    }
}

struct DirListings {
    /// Oldest first.
    kept: VecDeque<Listing>,
    /// When the newest was taken, or last found unchanged.
    checked: Instant,
    /// When a listing was last found changed (the directory's mtime).
    changed: Option<SystemTime>,
}

#[derive(Default)]
pub struct Listings {
    dirs: Mutex<HashMap<u64, DirListings>>,
    next_id: AtomicU32,
}

/// What keeping a new listing let go: the entries of listings no longer kept that the newest
/// does not hold (their nodes may leave the inode table).
pub type Dropped = Vec<u64>;

impl Listings {
    /// The listing a read at `offset` (not 0) resumes: the one it started, or the newest when
    /// that one is no longer kept (the reader then sees what the newest holds from its
    /// position on, as with any directory changed during a read).
    pub fn resume(&self, dir: u64, offset: u64) -> Option<Listing> {
        let dirs = lock(&self.dirs);
        let kept = &dirs.get(&dir)?.kept;
        kept.iter().find(|l| l.id == Listing::id_of(offset)).or(kept.back()).cloned()
    }

    /// Keep `entries` as the newest listing of `dir`.
    pub fn keep(&self, dir: u64, entries: Vec<DirEntry>) -> (Listing, Dropped) {
        let listing = Listing { id: self.next_id.fetch_add(1, Ordering::Relaxed), entries: Arc::from(entries) };
        let mut dirs = lock(&self.dirs);
        let state = dirs.entry(dir).or_insert_with(|| DirListings { kept: VecDeque::new(), checked: Instant::now(), changed: None });
        if state.kept.back().is_some_and(|newest| !newest.same_entries(&listing)) {
            state.changed = Some(SystemTime::now());
        }
        state.checked = Instant::now();
        state.kept.push_back(listing.clone());
        let mut dropped = Vec::new();
        while state.kept.len() > KEPT {
            if let Some(old) = state.kept.pop_front() {
                dropped.extend(old.iter().map(|e| e.ino).filter(|ino| !listing.iter().any(|e| e.ino == *ino)));
            }
        }
        (listing, dropped)
    }

    /// Whether `dir`'s newest listing was taken (or found unchanged) longer than `ttl` ago.
    pub fn stale(&self, dir: u64, ttl: std::time::Duration) -> bool {
        lock(&self.dirs).get(&dir).is_some_and(|d| d.checked.elapsed() >= ttl)
    }

    /// A listing of `dir` taken to check the newest: whether it changed. An unchanged one
    /// counts as checked now; a changed one moves the directory's mtime (the kernel then drops
    /// its copy and reads the listing again from its start).
    pub fn check(&self, dir: u64, entries: &[DirEntry]) -> bool {
        let mut dirs = lock(&self.dirs);
        let Some(state) = dirs.get_mut(&dir) else { return false };
        let changed = state.kept.back().is_some_and(|newest| !newest.same_entries(entries));
        if changed {
            state.changed = Some(SystemTime::now());
        } else {
            state.checked = Instant::now();
        }
        changed
    }

    /// When `dir`'s listing was last seen to change, if it was.
    pub fn changed(&self, dir: u64) -> Option<SystemTime> {
        lock(&self.dirs).get(&dir)?.changed
    }

    /// `dir` left the inode table.
    pub fn remove(&self, dir: u64) {
        lock(&self.dirs).remove(&dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::FileKind;

    fn entries(names: &[&str]) -> Vec<DirEntry> {
        names.iter().enumerate().map(|(i, n)| DirEntry { ino: 10 + i as u64, kind: FileKind::Directory, name: n.to_string() }).collect()
    }

    #[test]
    fn a_reader_resumes_in_the_listing_it_started() {
        let listings = Listings::default();
        let (first, _) = listings.keep(1, entries(&["a", "b", "c"]));
        // `.`, `..`, then `a`: the reader resumes at `b`.
        let offset = first.offset_after(2);
        assert_eq!(Listing::position(offset), 3);
        let (second, dropped) = listings.keep(1, entries(&["b", "c"]));
        assert!(dropped.is_empty());
        assert!(listings.changed(1).is_some(), "a changed listing moves the mtime");
        let resumed = listings.resume(1, offset).unwrap();
        assert_eq!(resumed[Listing::position(offset) - 2].name, "b");
        assert!(resumed.read_to_end(first.offset_after(4)) && !resumed.read_to_end(offset));
        // Two listings later the first is gone: the newest serves from the same position.
        let (third, dropped) = listings.keep(1, vec![DirEntry { ino: 99, kind: FileKind::Directory, name: "z".into() }]);
        assert_eq!(dropped, [10, 11, 12], "the first listing's entries the newest does not hold");
        assert_eq!(listings.resume(1, offset).unwrap().offset_after(0), third.offset_after(0));
        assert_eq!(listings.resume(1, second.offset_after(0)).unwrap().offset_after(0), second.offset_after(0));
        assert!(listings.resume(2, offset).is_none());
    }

    #[test]
    fn an_unchanged_listing_keeps_the_mtime_and_counts_as_checked() {
        let listings = Listings::default();
        listings.keep(1, entries(&["a", "b"]));
        assert!(!listings.stale(1, std::time::Duration::from_secs(60)));
        assert!(listings.stale(1, std::time::Duration::ZERO));
        assert!(!listings.check(1, &entries(&["a", "b"])));
        assert_eq!(listings.changed(1), None);
        assert!(listings.check(1, &entries(&["a"])));
        assert!(listings.changed(1).is_some());
        assert!(!listings.check(7, &entries(&["a"])), "nothing kept, nothing to check");
    }
}
