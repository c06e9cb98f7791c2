//! Directory listings as a stream the kernel reads in many requests, with no open or release
//! around it (a walk costs two requests a directory, not four: the kernel keeps no directory
//! handles). Each listing has an id, carried in the upper half of every stream offset it
//! gives, so a reader resumes in the listing it started whatever was listed since: an open
//! directory reads one listing to its end (kept until a reader reaches it). The kernel keeps
//! what it read while the directory's mtime holds; the mtime moves once the listing is older
//! than the metadata TTL, so the kernel reads it again, and with it the attributes of every
//! entry (one request where checking each entry would take one per entry).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::nodes::{DirEntry, FileKind};
use crate::error::lock;

/// Listings kept per directory: the newest, and the one before it for a reader still in it.
const KEPT: usize = 2;

/// One listing of a directory (without `.` and `..`, which are stream positions 0 and 1).
#[derive(Clone)]
pub struct Listing {
    id: u32,
    entries: Arc<Packed>,
}

/// A listing's entries in a few allocations, whatever their number: a huge directory's listing
/// costs about 20 bytes an entry, and gives its memory back whole when it goes.
#[derive(Default)]
struct Packed {
    inos: Vec<u64>,
    dirs: Vec<bool>,
    /// The names one after another; `ends[i]` is where the i-th ends.
    names: String,
    ends: Vec<u32>,
}

/// One entry of a listing.
pub struct Listed<'a> {
    pub ino: u64,
    pub kind: FileKind,
    pub name: &'a str,
}

impl Packed {
    fn new(entries: Vec<DirEntry>) -> Packed {
        let mut packed = Packed {
            inos: Vec::with_capacity(entries.len()),
            dirs: Vec::with_capacity(entries.len()),
            names: String::with_capacity(entries.iter().map(|e| e.name.len()).sum()),
            ends: Vec::with_capacity(entries.len()),
        };
        for e in entries {
            packed.inos.push(e.ino);
            packed.dirs.push(e.kind == FileKind::Directory);
            packed.names.push_str(&e.name);
            // (A listing of 4 GiB of names is not made: names are bounded, entries far fewer.)
            packed.ends.push(u32::try_from(packed.names.len()).unwrap_or(u32::MAX));
        }
        packed
    }

    fn get(&self, i: usize) -> Listed<'_> {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        let kind = if self.dirs[i] { FileKind::Directory } else { FileKind::RegularFile };
        Listed { ino: self.inos[i], kind, name: self.names.get(start..self.ends[i] as usize).unwrap_or("") }
    }
}

impl Listing {
    /// What a read past the end gets: nothing.
    pub fn ended() -> Listing {
        Listing { id: 0, entries: Arc::default() }
    }

    pub fn len(&self) -> usize {
        self.entries.inos.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its entries, in order.
    pub fn iter(&self) -> impl Iterator<Item = Listed<'_>> {
        (0..self.len()).map(|i| self.entries.get(i))
    }

    /// Its entries' inodes.
    pub fn inos(&self) -> &[u64] {
        &self.entries.inos
    }

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
        Listing::position(offset) >= self.len() + 2
    }
}

struct DirListings {
    /// Oldest first.
    kept: VecDeque<Listing>,
    /// When the newest was taken.
    taken: Instant,
    /// The directory's mtime, once it moved (before, the mount's time).
    mtime: Option<SystemTime>,
    /// Whether it moved since the newest listing was taken.
    moved: bool,
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
        let listing = Listing { id: self.next_id.fetch_add(1, Ordering::Relaxed), entries: Arc::new(Packed::new(entries)) };
        let mut dirs = lock(&self.dirs);
        let state =
            dirs.entry(dir).or_insert_with(|| DirListings { kept: VecDeque::new(), taken: Instant::now(), mtime: None, moved: false });
        state.taken = Instant::now();
        state.moved = false;
        state.kept.push_back(listing.clone());
        let mut dropped = Vec::new();
        if state.kept.len() > KEPT {
            // A set, not a scan of the listing per entry: listings may hold millions.
            let newest: HashSet<u64> = listing.inos().iter().copied().collect();
            while state.kept.len() > KEPT {
                if let Some(old) = state.kept.pop_front() {
                    dropped.extend(old.inos().iter().copied().filter(|ino| !newest.contains(ino)));
                }
            }
        }
        (listing, dropped)
    }

    /// `dir`'s mtime, once it moved: it moves when asked for after the newest listing is
    /// older than `ttl`, once until the next listing (its stream then starts at 0 again).
    pub fn mtime(&self, dir: u64, ttl: Duration) -> Option<SystemTime> {
        let mut dirs = lock(&self.dirs);
        let state = dirs.get_mut(&dir)?;
        if !state.moved && state.taken.elapsed() >= ttl {
            let now = SystemTime::now();
            // Never the same mtime twice, however coarse the clock.
            state.mtime = Some(state.mtime.map_or(now, |m| now.max(m + Duration::from_micros(1))));
            state.moved = true;
        }
        state.mtime
    }

    /// A reader read `listing` to its end: no one resumes in it any more (a reader still in it
    /// meanwhile resumes in the newest, or in a new listing).
    pub fn finish(&self, dir: u64, listing: &Listing) {
        if let Some(state) = lock(&self.dirs).get_mut(&dir) {
            state.kept.retain(|l| l.id != listing.id);
        }
    }

    /// `dir` left the inode table.
    pub fn remove(&self, dir: u64) {
        lock(&self.dirs).remove(&dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let resumed = listings.resume(1, offset).unwrap();
        assert_eq!(resumed.iter().nth(Listing::position(offset) - 2).unwrap().name, "b");
        assert!(resumed.read_to_end(first.offset_after(4)) && !resumed.read_to_end(offset));
        // Two listings later the first is gone: the newest serves from the same position.
        let (third, dropped) = listings.keep(1, vec![DirEntry { ino: 99, kind: FileKind::Directory, name: "z".into() }]);
        assert_eq!(dropped, [10, 11, 12], "the first listing's entries the newest does not hold");
        assert_eq!(listings.resume(1, offset).unwrap().offset_after(0), third.offset_after(0));
        assert_eq!(listings.resume(1, second.offset_after(0)).unwrap().offset_after(0), second.offset_after(0));
        assert!(listings.resume(2, offset).is_none());
        // Read to its end, a listing goes; its directory keeps its mtime.
        listings.finish(1, &third);
        listings.finish(1, &second);
        assert!(listings.resume(1, offset).is_none());
        assert!(listings.mtime(1, Duration::ZERO).is_some());
    }

    #[test]
    fn the_mtime_moves_once_a_listing_is_older_than_the_ttl() {
        let listings = Listings::default();
        let long = Duration::from_secs(60);
        assert_eq!(listings.mtime(1, long), None, "nothing listed: the mount's time");
        listings.keep(1, entries(&["a", "b"]));
        assert_eq!(listings.mtime(1, long), None, "a fresh listing keeps it");
        let moved = listings.mtime(1, Duration::ZERO).unwrap();
        assert_eq!(listings.mtime(1, Duration::ZERO), Some(moved), "once until the next listing");
        listings.keep(1, entries(&["a", "b"]));
        assert_eq!(listings.mtime(1, long), Some(moved), "the next listing keeps what the kernel was told");
        assert!(listings.mtime(1, Duration::ZERO).unwrap() > moved);
    }

    #[test]
    fn keeping_listings_of_a_huge_directory_costs_what_they_hold() {
        // Three listings of 200 000 entries (readers that stopped early keep them): the one
        // let go is told apart from the newest by a set, not entry by entry (4·10^10 steps).
        let listings = Listings::default();
        let huge = |from: u64| -> Vec<DirEntry> {
            (from..from + 200_000).map(|i| DirEntry { ino: i, kind: FileKind::Directory, name: format!("g{i}") }).collect()
        };
        listings.keep(1, huge(0));
        listings.keep(1, huge(0));
        let (newest, dropped) = listings.keep(1, huge(100_000));
        assert_eq!(dropped, (0..100_000).collect::<Vec<u64>>());
        assert_eq!((newest.len(), newest.iter().nth(5).map(|e| e.name)), (200_000, Some("g100005")));
    }
}
