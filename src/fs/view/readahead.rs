//! Spotting sequential readers, so that decoding runs ahead of them: a handle's read pattern
//! and the window to decode next. Scattered small reads decode only what they touch.

use std::sync::atomic::{AtomicU64, Ordering};

/// Read-ahead starts once a reader has read this much sequentially.
const MIN_STREAK: u64 = 1 << 20;

/// The kernel splits a sequential read into requests that several threads serve out of order:
/// a read this close to the furthest one so far still counts as sequential.
const SEQUENTIAL_SLACK: u64 = 8 << 20;

/// How far one handle's reads have gone.
#[derive(Debug, Default)]
pub struct ReadPattern {
    /// The furthest end of a read.
    furthest: AtomicU64,
    /// Where read-ahead has been started up to.
    ahead: AtomicU64,
    /// Bytes read in a row near the furthest point.
    streak: AtomicU64,
}

/// What a read is, as its handle's reads so far tell.
#[derive(Debug, PartialEq)]
pub enum ReadKind {
    Scattered,
    /// Part of a sequential streak: with the byte range to start decoding ahead of it, when due,
    /// and the offset before which the reader has read everything (short of the requests still
    /// under way out of order).
    Sequential {
        ahead: Option<(u64, u64)>,
        read_before: u64,
    },
}

impl ReadPattern {
    /// Note a read of `size` bytes at `offset`. For a sequential reader, the range to decode
    /// ahead of it reaches at most `window` bytes past this read and moves in steps of a quarter
    /// window rather than on every request; `eager` where a request is a round trip.
    pub fn note(&self, offset: u64, size: u32, window: u64, eager: bool) -> ReadKind {
        let end = offset + u64::from(size);
        let furthest = self.furthest.fetch_max(end, Ordering::Relaxed);
        // Where a request is a round trip (`eager`), a handle's first read at 0 starts a streak
        // (a 1 MiB `dd` block is one by itself), so that the window's requests go out at once.
        // On a local disk it waits for a second read: readers started side by side would each
        // queue a window of decoding before any of them is served. Reads at 0 after the first,
        // a header read again and again, never add to a streak.
        let sequential = (offset > 0 || (eager && furthest == 0))
            && offset <= furthest.saturating_add(SEQUENTIAL_SLACK)
            && offset.saturating_add(SEQUENTIAL_SLACK) >= furthest;
        if !sequential {
            self.streak.store(0, Ordering::Relaxed);
            return ReadKind::Scattered;
        }
        if self.streak.fetch_add(u64::from(size), Ordering::Relaxed) + u64::from(size) < MIN_STREAK {
            return ReadKind::Scattered;
        }
        let from = self.ahead.load(Ordering::Relaxed).max(end);
        let to = end + window;
        let due = window > 0 && to >= from + window / 4 && self.ahead.fetch_max(to, Ordering::Relaxed) < to;
        ReadKind::Sequential { ahead: due.then_some((from, to - from)), read_before: offset.saturating_sub(SEQUENTIAL_SLACK) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_sequential_streak_reads_ahead() {
        let p = ReadPattern::default();
        let window = 16 << 20;
        // Read-ahead starts with the read that ends the first MiB, after that read.
        let mut started = None;
        for i in 0..9u64 {
            match p.note(i * (128 << 10), 128 << 10, window, true) {
                ReadKind::Sequential { ahead: Some(r), .. } => drop(started.get_or_insert((i, r))),
                ReadKind::Sequential { ahead: None, .. } if started.is_some() => {}
                kind => assert_eq!(kind, ReadKind::Scattered, "read {i}"),
            }
        }
        assert_eq!(started, Some((7, (1 << 20, window))));
        // The next read is sequential; the window has not moved a quarter yet.
        assert_eq!(p.note(9 << 17, 128 << 10, window, true), ReadKind::Sequential { ahead: None, read_before: 0 });
        // Further on (within the slack of out-of-order requests): the window moves on, and all
        // before 8 MiB behind this read counts as read.
        let ahead = (1 << 20) + window;
        assert_eq!(
            p.note(9 << 20, 128 << 10, window, true),
            ReadKind::Sequential { ahead: Some((ahead, (9 << 20) + (128 << 10) + window - ahead)), read_before: 1 << 20 }
        );
        // A jump far away breaks the streak.
        assert_eq!(p.note(1 << 40, 4096, window, true), ReadKind::Scattered);
        assert_eq!(p.note((1 << 40) + 4096, 4096, window, true), ReadKind::Scattered);
    }

    #[test]
    fn a_first_read_of_a_mib_at_0_reads_ahead_where_requests_are_round_trips_and_reads_at_0_again_do_not() {
        let window = 64 << 20;
        let p = ReadPattern::default();
        assert_eq!(p.note(0, 1 << 20, window, true), ReadKind::Sequential { ahead: Some((1 << 20, window)), read_before: 0 });
        // Not eager (a local disk): the second read starts it.
        let p = ReadPattern::default();
        assert_eq!(p.note(0, 1 << 20, window, false), ReadKind::Scattered);
        assert!(matches!(p.note(1 << 20, 1 << 20, window, false), ReadKind::Sequential { ahead: Some(_), .. }));
        // A header read again and again: no streak.
        let p = ReadPattern::default();
        for _ in 0..1024 {
            assert_eq!(p.note(0, 4096, window, true), ReadKind::Scattered);
        }
    }
}
