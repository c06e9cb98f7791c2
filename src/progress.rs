//! Progress lines on the terminal for long work (the last flush of `zarrfs unmount`, offline
//! prepends and normalizations): what is left and the rate, on stderr, only when it is a
//! terminal.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A progress line on the terminal for long work: bytes left and the rate. Silent when stderr
/// is not a terminal.
pub struct Progress {
    what: &'static str,
    /// What is counted: bytes (`None`), or items of this name.
    unit: Option<&'static str>,
    terminal: bool,
    started: std::time::Instant,
    first: std::cell::Cell<Option<u64>>,
    shown: std::cell::Cell<bool>,
}

impl Progress {
    pub fn new(what: &'static str) -> Progress {
        Progress::counting(what, None)
    }

    /// A progress line counting `unit`s (bytes when `None`).
    pub fn counting(what: &'static str, unit: Option<&'static str>) -> Progress {
        let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
        Progress { what, unit, terminal, started: std::time::Instant::now(), first: Default::default(), shown: Default::default() }
    }

    /// `left` bytes are left.
    pub fn left(&self, left: u64) {
        if !self.terminal {
            return;
        }
        let first = self.first.get().unwrap_or(left);
        self.first.set(Some(first));
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        let rate = first.saturating_sub(left) as f64 / secs;
        match self.unit {
            None => eprint!("\rzarrfs: {}: {} left, {}/s   ", self.what, human_bytes(left), human_bytes(rate as u64)),
            Some(unit) => eprint!("\rzarrfs: {}: {left} {unit} left, {rate:.0}/s   ", self.what),
        }
        self.shown.set(true);
    }

    /// The work is over: the line is cleared.
    pub fn done(&self) {
        if self.shown.get() {
            eprint!("\r\x1b[K");
        }
    }
}

/// A size for people: `512 B`, `1.5 KiB`, `2.0 GiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{n} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

/// Run `work` while a line shows, every second, what is left of `total` (bytes, or `unit`s)
/// as `done` counts it.
pub fn while_counting<T>(what: &'static str, unit: Option<&'static str>, total: u64, done: &AtomicU64, work: impl FnOnce() -> T) -> T {
    let finished = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let progress = Progress::counting(what, unit);
            let mut waited = Duration::ZERO;
            while !finished.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(50));
                waited += Duration::from_millis(50);
                // The first line after a second: short work shows none.
                if waited >= Duration::from_secs(1) {
                    waited = Duration::ZERO;
                    progress.left(total.saturating_sub(done.load(Ordering::Relaxed)));
                }
            }
            progress.done();
        });
        let result = work();
        finished.store(true, Ordering::Release);
        result
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_for_people() {
        assert_eq!(super::human_bytes(512), "512 B");
        assert_eq!(super::human_bytes(1536), "1.5 KiB");
        assert_eq!(super::human_bytes(3 << 30), "3.0 GiB");
    }
}
