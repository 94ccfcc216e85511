//! Counters that every command, write or merged op adds to (`INFO commandstats`, `LATENCY
//! HISTOGRAM`, `INFO stats`'s commands processed, keyspace hits and network bytes, the changes
//! since the last save, `/metrics`), kept without a locked instruction on those paths.
//!
//! Each thread adds to counters of its own (`thread_local::ThreadLocal`), which only it writes,
//! with a load and a store. A shared `AtomicU64::fetch_add` is a `lock`-prefixed add, which
//! waits until every store before it has completed: a command made five of them (its calls,
//! microseconds and histogram bucket, the commands processed, a keyspace hit), ~3% of a
//! pipelined `PFADD`'s time and ~1% of a `GET`'s (docs/benchmarks.md, "Counters per thread").
//! A read sums every thread's counters, the counters of threads that have ended included: the
//! crate hands an ended thread's counters to the next thread that starts, so nothing counted is
//! lost and no thread's counters are written by two threads at once.
//!
//! `CONFIG RESETSTAT` cannot zero counters that another thread adds to (its next add would
//! store the count it had read, plus one), so a reset notes the sums at that moment as a
//! baseline, which reads subtract.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use thread_local::ThreadLocal;

/// `N` counters, each the sum of what every thread added to it since the last `reset`.
pub struct Tally<const N: usize> {
    threads: ThreadLocal<[AtomicU64; N]>,
    /// The sums at the last `reset`.
    baseline: [AtomicU64; N],
}

impl<const N: usize> Tally<N> {
    pub const fn new() -> Tally<N> {
        Tally { threads: ThreadLocal::new(), baseline: [const { AtomicU64::new(0) }; N] }
    }

    /// This thread's counters, made at its first add.
    #[inline]
    fn mine(&self) -> &[AtomicU64; N] {
        self.threads.get_or(|| [const { AtomicU64::new(0) }; N])
    }

    /// Adds `n` to counter `i`.
    #[inline]
    pub fn add(&self, i: usize, n: u64) {
        add_own(&self.mine()[i], n);
    }

    /// Adds to several counters at once (one lookup of this thread's counters).
    #[inline]
    pub fn add_each(&self, adds: &[(usize, u64)]) {
        let mine = self.mine();
        for &(i, n) in adds {
            add_own(&mine[i], n);
        }
    }

    /// Counter `i`: what every thread added to it since the last `reset`.
    pub fn get(&self, i: usize) -> u64 {
        self.total(i).saturating_sub(self.baseline[i].load(Ordering::Relaxed))
    }

    /// Every counter starts from zero again.
    pub fn reset(&self) {
        for (i, baseline) in self.baseline.iter().enumerate() {
            baseline.store(self.total(i), Ordering::Relaxed);
        }
    }

    /// Counter `i` summed over every thread, ever.
    fn total(&self, i: usize) -> u64 {
        self.threads.iter().fold(0u64, |sum, counters| sum.wrapping_add(counters[i].load(Ordering::Relaxed)))
    }
}

impl<const N: usize> Default for Tally<N> {
    fn default() -> Tally<N> {
        Tally::new()
    }
}

impl<const N: usize> fmt::Debug for Tally<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries((0..N).map(|i| self.get(i))).finish()
    }
}

/// One counter (`Tally` of one).
pub type Counter = Tally<1>;

impl Tally<1> {
    #[inline]
    pub fn incr(&self) {
        self.add(0, 1);
    }

    #[inline]
    pub fn incr_by(&self, n: u64) {
        self.add(0, n);
    }

    pub fn value(&self) -> u64 {
        self.get(0)
    }
}

/// Adds to a counter that only this thread writes: a load and a store, no locked instruction.
/// Another thread reading it sees the old count or the new one, never a mix (an aligned
/// 64-bit load).
#[inline]
fn add_own(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Adds from many threads, some of which end before the sum is read, all count; a reset
    /// starts from zero while the counters of other threads keep their counts.
    #[test]
    fn adds_from_every_thread_count_and_a_reset_starts_from_zero() {
        let tally: Arc<Tally<2>> = Arc::new(Tally::new());
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let tally = tally.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        tally.add_each(&[(0, 1), (1, t)]);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(tally.get(0), 80_000);
        assert_eq!(tally.get(1), 10_000 * (0..8).sum::<u64>());
        tally.reset();
        assert_eq!((tally.get(0), tally.get(1)), (0, 0));
        // Threads started after the ones above reuse their counters, which keep counting.
        let tally2 = tally.clone();
        std::thread::spawn(move || tally2.add(0, 5)).join().unwrap();
        tally.add(1, 7);
        assert_eq!((tally.get(0), tally.get(1)), (5, 7));
    }

    /// Reads while threads add see every add once they are done, and never a count above
    /// what was added.
    #[test]
    fn reads_during_adds_never_overcount() {
        let counter: Arc<Counter> = Arc::new(Counter::new());
        let adders: Vec<_> = (0..4)
            .map(|_| {
                let counter = counter.clone();
                std::thread::spawn(move || (0..50_000).for_each(|_| counter.incr()))
            })
            .collect();
        let mut last = 0;
        while !adders.iter().all(|a| a.is_finished()) {
            let now = counter.value();
            assert!(now >= last && now <= 200_000, "{now} after {last}");
            last = now;
        }
        adders.into_iter().for_each(|a| a.join().unwrap());
        assert_eq!(counter.value(), 200_000);
    }
}
