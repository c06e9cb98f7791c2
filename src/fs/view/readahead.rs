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

impl ReadPattern {
    /// Note a read of `size` bytes at `offset`; for a sequential reader, the byte range to
    /// start decoding ahead of it (at most `window` bytes past this read), in steps of a quarter
    /// window rather than on every request.
    pub fn ahead_of(&self, offset: u64, size: u32, window: u64) -> Option<(u64, u64)> {
        let end = offset + u64::from(size);
        let furthest = self.furthest.fetch_max(end, Ordering::Relaxed);
        let sequential =
            offset > 0 && offset <= furthest.saturating_add(SEQUENTIAL_SLACK) && offset.saturating_add(SEQUENTIAL_SLACK) >= furthest;
        if !sequential {
            self.streak.store(0, Ordering::Relaxed);
            return None;
        }
        if self.streak.fetch_add(u64::from(size), Ordering::Relaxed) + u64::from(size) < MIN_STREAK || window == 0 {
            return None;
        }
        let from = self.ahead.load(Ordering::Relaxed).max(end);
        let to = end + window;
        (to >= from + window / 4 && self.ahead.fetch_max(to, Ordering::Relaxed) < to).then_some((from, to - from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_sequential_streak_reads_ahead() {
        let p = ReadPattern::default();
        let window = 16 << 20;
        // The first MiB is read without read-ahead, then the window starts after the read.
        let mut started = None;
        for i in 0..9u64 {
            if let Some(r) = p.ahead_of(i * (128 << 10), 128 << 10, window) {
                started.get_or_insert((i, r));
            }
        }
        assert_eq!(started, Some((8, (9 << 17, window))));
        // A jump far away breaks the streak.
        assert_eq!(p.ahead_of(1 << 40, 4096, window), None);
        assert_eq!(p.ahead_of((1 << 40) + 4096, 4096, window), None);
    }
}
