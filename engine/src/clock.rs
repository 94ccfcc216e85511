//! Clock reads on the per-command path, as plain integers. `Instant::elapsed` and
//! `SystemTime::duration_since(UNIX_EPOCH)` each add ~70–100 instructions of checked
//! `Timespec` arithmetic to the vDSO's clock read; a command made three such reads, ~300 of a
//! GET's 3,290 instructions at -P 16 (docs/benchmarks.md, "Clock reads per command").

use nix::time::{clock_gettime, ClockId};

/// Reads `clock` as (seconds, nanoseconds); (0, 0) if it cannot be read, which Linux's
/// vDSO clocks never fail to.
fn read(clock: ClockId) -> (u64, u64) {
    clock_gettime(clock).map_or((0, 0), |t| (t.tv_sec() as u64, t.tv_nsec() as u64))
}

/// Unix time in microseconds (`Stopwatch`).
pub fn realtime_us() -> u64 {
    let (s, ns) = read(ClockId::CLOCK_REALTIME);
    s * 1_000_000 + ns / 1_000
}

/// Milliseconds on the kernel's coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`: a few
/// milliseconds' resolution, no TSC read): enough for a client's idle seconds.
pub fn coarse_monotonic_ms() -> u64 {
    let (s, ns) = read(ClockId::CLOCK_MONOTONIC_COARSE);
    s * 1_000 + ns / 1_000_000
}

/// Unix time in milliseconds (`hlc::SystemClock`).
pub fn realtime_ms() -> u64 {
    let (s, ns) = read(ClockId::CLOCK_REALTIME);
    s * 1_000 + ns / 1_000_000
}

/// Times one command, for its statistics, SLOWLOG and the latency monitor, on the real-time
/// clock, as Redis 7.0's `call()` does with `ustime()`: the same read gives the command its
/// wall time (`started_ms`, for expiry checks and the HLC stamps of its writes), so a command
/// reads the clock twice, not three times (one read is ~3% of a GET at -P 16;
/// docs/benchmarks.md, "Clock reads per command"). A step of the system clock while a command
/// runs makes one duration wrong (zero if backwards), as in Redis 7.0.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(u64);

impl Stopwatch {
    pub fn start() -> Stopwatch {
        Stopwatch(realtime_us())
    }

    /// Unix time in milliseconds when the watch started.
    pub fn started_ms(self) -> u64 {
        self.0 / 1_000
    }

    /// Microseconds since `start`.
    pub fn elapsed_us(self) -> u64 {
        realtime_us().saturating_sub(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each of our reads lies between two of std's on the same clock (bracketed, so a busy
    /// machine preempting the test cannot make it fail).
    #[test]
    fn clocks_agree_with_std() {
        let wall_ms = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
        let before = wall_ms();
        let ours = realtime_ms();
        assert!((before..=wall_ms()).contains(&ours), "{ours} not between {before} and now");
        let before = wall_ms();
        let watch = Stopwatch::start();
        assert!((before..=wall_ms()).contains(&watch.started_ms()), "{} not between {before} and now", watch.started_ms());
        let std_watch = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let theirs = std_watch.elapsed().as_micros() as u64;
        let ours = watch.elapsed_us();
        // Started before and read after std's, less up to 1 µs lost to truncation.
        assert!(ours + 1 >= theirs && theirs >= 20_000, "{ours} against {theirs} µs");
        let coarse = coarse_monotonic_ms();
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert!(coarse_monotonic_ms() - coarse >= 20);
    }
}
