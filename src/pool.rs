//! The worker pool: threads that decode, encode and store chunks, fed by a channel. A job that
//! panics is caught and logged; its worker lives on.

use std::num::NonZeroUsize;

use crossbeam_channel::{Receiver, Sender, unbounded};

type Job = Box<dyn FnOnce() + Send>;

pub struct WorkerPool {
    tx: Sender<Job>,
    threads: usize,
}

impl WorkerPool {
    pub fn new(threads: NonZeroUsize) -> WorkerPool {
        let (tx, rx) = unbounded::<Job>();
        for i in 0..threads.get() {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new().name(format!("zarrfs-worker-{i}")).spawn(move || {
                while let Ok(job) = rx.recv() {
                    let _ = crate::error::catch("worker job", || {
                        job();
                        Ok(())
                    });
                }
            });
            if let Err(e) = spawned {
                tracing::error!("cannot start worker thread {i}: {e}");
            }
        }
        WorkerPool { tx, threads: threads.get() }
    }

    /// How many workers the pool has.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// A pool of one worker per core.
    pub fn per_core() -> WorkerPool {
        WorkerPool::new(std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN))
    }

    /// Run `job` on a worker; if no worker can take it, run it here.
    pub fn submit(&self, job: impl FnOnce() + Send + 'static) {
        if let Err(e) = self.tx.send(Box::new(job)) {
            (e.into_inner())();
        }
    }

    /// Run every job on the workers; their results come back on the channel as they finish, in
    /// any order, and it closes once all are done. A job that panicked sends nothing, so a
    /// caller that counts its results knows.
    pub fn run_all<T: Send + 'static, J: FnOnce() -> T + Send + 'static>(&self, jobs: impl IntoIterator<Item = J>) -> Receiver<T> {
        let (tx, rx) = unbounded();
        for job in jobs {
            let tx = tx.clone();
            self.submit(move || {
                let _ = tx.send(job());
            });
        }
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_job_does_not_take_its_worker_down() {
        let pool = WorkerPool::new(NonZeroUsize::MIN);
        pool.submit(|| panic!("a bug in a job"));
        let (tx, rx) = crossbeam_channel::bounded(1);
        pool.submit(move || {
            let _ = tx.send(());
        });
        assert!(rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok(), "the only worker died");
    }

    #[test]
    fn run_all_hands_back_every_result_and_closes() {
        let pool = WorkerPool::new(NonZeroUsize::new(3).unwrap());
        let mut got: Vec<u32> = pool.run_all((0..100u32).map(|i| move || i * 2)).iter().collect();
        got.sort();
        assert_eq!(got, (0..100).map(|i| i * 2).collect::<Vec<_>>());
    }
}
