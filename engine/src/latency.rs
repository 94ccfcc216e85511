//! `LATENCY`: Redis's latency monitor. With `latency-monitor-threshold` N > 0 (ms; 0, the
//! default, turns it off), every event that took at least N ms is kept per event name in a
//! ring of the last 160 seconds that had one (one sample per second: the worst), with the
//! all-time maximum. Events this engine records: `command` and `fast-command` (a command,
//! by its FAST flag, measured as SLOWLOG measures it) and `expire-cycle` (one active-expiry
//! pass over the keyspace).
//!
//! `LATENCY HISTOGRAM` reads the per-command histograms kept in `cmd::CommandStats`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::frame::Frame;

/// Samples kept per event (Redis's `LATENCY_TS_LEN`).
const SAMPLES: usize = 160;

#[derive(Default)]
pub struct LatencyMonitor {
    threshold_ms: AtomicU64,
    events: Mutex<BTreeMap<&'static str, Series>>,
}

/// One event's samples, oldest first.
#[derive(Default)]
struct Series {
    samples: std::collections::VecDeque<Sample>,
    max_ms: u64,
}

#[derive(Clone, Copy)]
struct Sample {
    unix_s: i64,
    ms: u64,
}

fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

impl LatencyMonitor {
    pub fn set_threshold_ms(&self, ms: u64) {
        self.threshold_ms.store(ms, Ordering::Relaxed);
    }

    /// Records `event` taking `ms` if the monitor is on and it reached the threshold.
    pub fn add_if_needed(&self, event: &'static str, ms: u64) {
        let threshold = self.threshold_ms.load(Ordering::Relaxed);
        if threshold == 0 || ms < threshold {
            return;
        }
        self.add(event, ms, unix_now());
    }

    fn add(&self, event: &'static str, ms: u64, unix_s: i64) {
        let mut events = self.events.lock();
        let series = events.entry(event).or_default();
        series.max_ms = series.max_ms.max(ms);
        match series.samples.back_mut() {
            // One sample per second: the worst of that second.
            Some(last) if last.unix_s == unix_s => last.ms = last.ms.max(ms),
            _ => {
                if series.samples.len() == SAMPLES {
                    series.samples.pop_front();
                }
                series.samples.push_back(Sample { unix_s, ms });
            }
        }
    }

    /// `LATENCY LATEST`: per event, its latest sample's time and latency and its maximum.
    pub fn latest(&self) -> Frame {
        let events = self.events.lock();
        Frame::Array(
            events
                .iter()
                .filter_map(|(name, s)| {
                    let last = s.samples.back()?;
                    Some(Frame::Array(vec![Frame::bulk(name), Frame::Integer(last.unix_s), Frame::Integer(last.ms as i64), Frame::Integer(s.max_ms as i64)]))
                })
                .collect(),
        )
    }

    /// `LATENCY HISTORY event`: its samples as `[time, ms]`, oldest first.
    pub fn history(&self, event: &[u8]) -> Frame {
        let events = self.events.lock();
        let samples = events.iter().find(|(name, _)| name.as_bytes().eq_ignore_ascii_case(event)).map(|(_, s)| &s.samples);
        Frame::Array(samples.into_iter().flatten().map(|s| Frame::Array(vec![Frame::Integer(s.unix_s), Frame::Integer(s.ms as i64)])).collect())
    }

    /// `LATENCY RESET [event ...]`: forgets those events (all without names); how many were.
    pub fn reset(&self, names: &[&[u8]]) -> usize {
        let mut events = self.events.lock();
        let before = events.len();
        if names.is_empty() {
            events.clear();
        } else {
            events.retain(|name, _| !names.iter().any(|n| name.as_bytes().eq_ignore_ascii_case(n)));
        }
        before - events.len()
    }

    /// `LATENCY GRAPH event`: the samples as a text chart, one column per sample, the most
    /// recent on the right, with how long ago each was.
    pub fn graph(&self, event: &[u8]) -> Option<String> {
        let events = self.events.lock();
        let (name, series) = events.iter().find(|(name, _)| name.as_bytes().eq_ignore_ascii_case(event))?;
        let samples: Vec<Sample> = series.samples.iter().rev().take(80).rev().copied().collect();
        let (low, high) = samples.iter().fold((u64::MAX, 0), |(lo, hi), s| (lo.min(s.ms), hi.max(s.ms)));
        let mut out = format!("{name} - high {high} ms, low {low} ms (all time high {} ms)\n", series.max_ms);
        out.push_str(&"-".repeat(80));
        out.push('\n');
        const ROWS: u64 = 8;
        for row in (1..=ROWS).rev() {
            for s in &samples {
                // Each column is as tall as its latency relative to the highest sample.
                let height = if high == 0 { 0 } else { (s.ms * ROWS).div_ceil(high) };
                out.push(if height >= row { '#' } else { ' ' });
            }
            out.push('\n');
        }
        let now = unix_now();
        let ago: Vec<String> = samples.iter().map(|s| age((now - s.unix_s).max(0))).collect();
        // Ages written vertically under their columns, as Redis does.
        let depth = ago.iter().map(String::len).max().unwrap_or(0);
        for line in 0..depth {
            for a in &ago {
                out.push(a.as_bytes().get(line).map_or(' ', |&c| c as char));
            }
            out.push('\n');
        }
        Some(out)
    }

    /// `LATENCY DOCTOR`: what was seen, in words.
    pub fn doctor(&self) -> String {
        let events = self.events.lock();
        let threshold = self.threshold_ms.load(Ordering::Relaxed);
        let mut out = String::new();
        if events.is_empty() {
            if threshold == 0 {
                out.push_str(
                    "The latency monitor is off: set latency-monitor-threshold (milliseconds) with CONFIG SET to record events that take at least that long.\n",
                );
            } else {
                let _ = writeln!(out, "No latency event of {threshold} ms or more was recorded since the monitor was started or reset.");
            }
            return out;
        }
        let _ = writeln!(out, "Latency events of at least {threshold} ms (latency-monitor-threshold) observed on this node:\n");
        for (i, (name, s)) in events.iter().enumerate() {
            let n = s.samples.len() as u64;
            let avg = s.samples.iter().map(|x| x.ms).sum::<u64>() / n.max(1);
            let first = s.samples.front().map_or(0, |x| x.unix_s);
            let _ = writeln!(
                out,
                "{}. {name}: {n} latency spikes (average {avg} ms, worst {} ms), the first {} ago.",
                i + 1,
                s.max_ms,
                age((unix_now() - first).max(0))
            );
        }
        out.push_str("\nAdvice:\n");
        if events.keys().any(|e| *e == "command" || *e == "fast-command") {
            out.push_str("- Slow commands: SLOWLOG GET shows which (with slowlog-log-slower-than set below the threshold). Commands that are O(N) on large keys (KEYS, SMEMBERS, HGETALL, ZRANGE of whole sets, SORT, DEL of big collections) take time in proportion to the key; scan them with SCAN/SSCAN/HSCAN/ZSCAN instead.\n");
        }
        if events.contains_key("fast-command") {
            out.push_str("- Even O(1) commands were slow: the node itself is starved (CPU limits or throttling of the pod, a busy neighbour, swapping, or transparent huge pages: INFO kernel and the KernelSettings condition say).\n");
        }
        if events.contains_key("expire-cycle") {
            out.push_str("- Active expiry was slow: many keys expiring at the same moment. Spread the TTLs (add jitter) so they do not fall due together.\n");
        }
        out
    }
}

/// `12s`, `3m`, `2h`, `1d`.
fn age(seconds: i64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// Histogram buckets of command durations, as `LATENCY HISTOGRAM` reports them: bucket `i`
/// holds durations up to 2^i µs (bucket 0: up to 1 µs); the last one (2^31 µs, 36 minutes)
/// everything longer.
pub const BUCKETS: usize = 32;

/// The bucket of a duration of `us` microseconds.
pub fn bucket_of(us: u64) -> usize {
    if us <= 1 {
        0
    } else {
        (64 - (us - 1).leading_zeros() as usize).min(BUCKETS - 1)
    }
}

/// A command's histogram as Redis 7 replies it: `{calls, histogram_usec: {upper bound µs:
/// cumulative count}}`, listing only the buckets where the count grows (the calls are the
/// last cumulative count: each call is counted in one bucket).
pub fn histogram_reply(buckets: &[u64; BUCKETS]) -> Frame {
    let mut cumulative = 0;
    let mut cdf = Vec::new();
    for (i, &count) in buckets.iter().enumerate() {
        if count > 0 {
            cumulative += count;
            cdf.push((Frame::Integer(1i64 << i), Frame::Integer(cumulative as i64)));
        }
    }
    Frame::Map(vec![(Frame::bulk("calls"), Frame::Integer(cumulative as i64)), (Frame::bulk("histogram_usec"), Frame::Map(cdf))])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_worst_sample_per_second_and_the_all_time_max() {
        let monitor = LatencyMonitor::default();
        monitor.add_if_needed("command", 500);
        assert_eq!(monitor.latest(), Frame::Array(vec![]), "off by default");
        monitor.set_threshold_ms(100);
        monitor.add_if_needed("command", 99);
        assert_eq!(monitor.latest(), Frame::Array(vec![]), "under the threshold");
        monitor.add("command", 120, 1000);
        monitor.add("command", 300, 1000);
        monitor.add("command", 110, 1000);
        monitor.add("command", 150, 1001);
        monitor.add("fast-command", 200, 1001);
        assert_eq!(
            monitor.history(b"COMMAND"),
            Frame::Array(vec![Frame::Array(vec![Frame::Integer(1000), Frame::Integer(300)]), Frame::Array(vec![Frame::Integer(1001), Frame::Integer(150)])])
        );
        assert_eq!(
            monitor.latest(),
            Frame::Array(vec![
                Frame::Array(vec![Frame::bulk("command"), Frame::Integer(1001), Frame::Integer(150), Frame::Integer(300)]),
                Frame::Array(vec![Frame::bulk("fast-command"), Frame::Integer(1001), Frame::Integer(200), Frame::Integer(200)]),
            ])
        );
        for t in 0..200 {
            monitor.add("command", 100, 2000 + t);
        }
        let Frame::Array(history) = monitor.history(b"command") else { panic!() };
        assert_eq!(history.len(), SAMPLES, "the ring keeps the last 160 seconds with events");
        let graph = monitor.graph(b"command").unwrap_or_default();
        assert!(graph.starts_with("command - high 100 ms, low 100 ms (all time high 300 ms)"), "{graph}");
        assert!(monitor.doctor().contains("command: 160 latency spikes"), "{}", monitor.doctor());
        assert_eq!(monitor.reset(&[b"nope"]), 0);
        assert_eq!(monitor.reset(&[b"FAST-COMMAND"]), 1);
        assert_eq!(monitor.reset(&[]), 1);
        assert_eq!(monitor.history(b"command"), Frame::Array(vec![]));
    }

    #[test]
    fn histogram_buckets_are_powers_of_two_microseconds() {
        assert_eq!([0, 1, 2, 3, 4, 5, 1024, 1025].map(bucket_of), [0, 0, 1, 2, 2, 3, 10, 11]);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        let mut buckets = [0u64; BUCKETS];
        for us in [1, 3, 3, 1000] {
            buckets[bucket_of(us)] += 1;
        }
        let Frame::Map(reply) = histogram_reply(&buckets) else { panic!() };
        assert_eq!(reply[0], (Frame::bulk("calls"), Frame::Integer(4)));
        assert_eq!(
            reply[1].1,
            Frame::Map(vec![(Frame::Integer(1), Frame::Integer(1)), (Frame::Integer(4), Frame::Integer(3)), (Frame::Integer(1024), Frame::Integer(4))])
        );
    }
}
