//! `SLOWLOG`: the commands that ran at least `slowlog-log-slower-than` microseconds (0: every
//! command; negative: none), newest first, at most `slowlog-max-len` of them, as Redis keeps
//! them: id, Unix time, duration in µs, the arguments (at most 32, each cut at 128 bytes, the
//! secrets of AUTH, HELLO, CONFIG SET and ACL SETUSER redacted), the client's address and name.
//!
//! As in Redis 7: a command served after blocking is logged when it is served (not when it
//! blocked), a transaction as its commands (not the `EXEC`), a script as its `EVAL`/`FCALL`
//! and as each slow command it called.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::frame::Frame;

/// At most this many arguments are kept; the last slot then says how many were left out.
const MAX_ARGS: usize = 32;
/// Arguments longer than this are cut, with how many bytes were left out.
const MAX_ARG_BYTES: usize = 128;
/// Directives whose values `CONFIG SET` must not leave in the log (Redis's sensitive configs).
const SENSITIVE_CONFIGS: &[&str] = &["requirepass", "masterauth", "masteruser"];

pub struct SlowLog {
    /// µs; negative turns the log off.
    threshold_us: AtomicI64,
    max_len: AtomicUsize,
    log: Mutex<Log>,
}

#[derive(Default)]
struct Log {
    next_id: u64,
    /// Newest first.
    entries: VecDeque<Entry>,
}

struct Entry {
    id: u64,
    unix_s: i64,
    duration_us: u64,
    args: Vec<Bytes>,
    peer: String,
    name: Bytes,
}

impl Default for SlowLog {
    fn default() -> Self {
        SlowLog { threshold_us: AtomicI64::new(10_000), max_len: AtomicUsize::new(128), log: Mutex::new(Log::default()) }
    }
}

impl SlowLog {
    /// Applies `slowlog-log-slower-than` and `slowlog-max-len` (trimming the log to it).
    pub fn configure(&self, threshold_us: i64, max_len: usize) {
        self.threshold_us.store(threshold_us, Ordering::Relaxed);
        self.max_len.store(max_len, Ordering::Relaxed);
        self.log.lock().entries.truncate(max_len);
    }

    /// Whether a command that ran `duration_us` belongs in the log (cheap: no lock).
    pub fn wants(&self, duration_us: u64) -> bool {
        let threshold = self.threshold_us.load(Ordering::Relaxed);
        threshold >= 0 && duration_us >= threshold as u64
    }

    /// Logs `argv` (redacted and trimmed) if it ran long enough.
    pub fn record(&self, argv: &[Bytes], duration_us: u64, peer: &str, name: Option<Bytes>) {
        if !self.wants(duration_us) {
            return;
        }
        let max_len = self.max_len.load(Ordering::Relaxed);
        let args = trimmed(&redacted(argv));
        let unix_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let mut log = self.log.lock();
        let id = log.next_id;
        log.next_id += 1;
        log.entries.push_front(Entry { id, unix_s, duration_us, args, peer: peer.to_string(), name: name.unwrap_or_default() });
        log.entries.truncate(max_len);
    }

    /// `SLOWLOG GET [count]`: the newest `count` entries (all with `None`).
    pub fn get(&self, count: Option<usize>) -> Frame {
        let log = self.log.lock();
        let take = count.unwrap_or(usize::MAX);
        Frame::Array(
            log.entries
                .iter()
                .take(take)
                .map(|e| {
                    Frame::Array(vec![
                        Frame::Integer(e.id as i64),
                        Frame::Integer(e.unix_s),
                        Frame::Integer(e.duration_us as i64),
                        Frame::Array(e.args.iter().cloned().map(Frame::Bulk).collect()),
                        Frame::bulk(e.peer.clone()),
                        Frame::Bulk(e.name.clone()),
                    ])
                })
                .collect(),
        )
    }

    pub fn len(&self) -> usize {
        self.log.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn reset(&self) {
        self.log.lock().entries.clear();
    }
}

/// `argv` with the secrets Redis redacts replaced by `(redacted)` (SLOWLOG and MONITOR).
pub fn redacted(argv: &[Bytes]) -> Vec<Bytes> {
    let secret = Bytes::from_static(b"(redacted)");
    let mut args = argv.to_vec();
    let is = |i: usize, word: &str| args.get(i).is_some_and(|a: &Bytes| a.eq_ignore_ascii_case(word.as_bytes()));
    let mut hide = Vec::new();
    if is(0, "auth") {
        hide.extend(1..args.len());
    } else if is(0, "hello") {
        if let Some(at) = (2..args.len()).find(|&i| is(i, "auth")) {
            hide.extend([at + 1, at + 2]);
        }
    } else if is(0, "config") && is(1, "set") {
        for pair in (2..args.len()).step_by(2) {
            if SENSITIVE_CONFIGS.iter().any(|c| is(pair, c)) {
                hide.push(pair + 1);
            }
        }
    } else if is(0, "acl") && is(1, "setuser") {
        hide.extend(2..args.len());
    } else if is(0, "migrate") {
        for i in 6..args.len() {
            if is(i, "auth") {
                hide.push(i + 1);
            } else if is(i, "auth2") {
                hide.extend([i + 1, i + 2]);
            }
        }
    }
    for i in hide {
        if let Some(arg) = args.get_mut(i) {
            *arg = secret.clone();
        }
    }
    args
}

/// At most `MAX_ARGS` arguments of at most `MAX_ARG_BYTES` each, saying what was left out.
fn trimmed(argv: &[Bytes]) -> Vec<Bytes> {
    let keep = if argv.len() > MAX_ARGS { MAX_ARGS - 1 } else { argv.len() };
    let mut args: Vec<Bytes> = argv[..keep]
        .iter()
        .map(|a| {
            if a.len() > MAX_ARG_BYTES {
                let mut cut = a[..MAX_ARG_BYTES].to_vec();
                cut.extend_from_slice(format!("... ({} more bytes)", a.len() - MAX_ARG_BYTES).as_bytes());
                Bytes::from(cut)
            } else {
                a.clone()
            }
        })
        .collect();
    if argv.len() > MAX_ARGS {
        args.push(Bytes::from(format!("... ({} more arguments)", argv.len() - keep)));
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &str) -> Vec<Bytes> {
        words.split(' ').map(|w| Bytes::copy_from_slice(w.as_bytes())).collect()
    }

    fn shown(entry: &Frame) -> String {
        let Frame::Array(fields) = entry else { panic!("{entry:?}") };
        let Frame::Array(argv) = &fields[3] else { panic!("{fields:?}") };
        argv.iter().map(|a| if let Frame::Bulk(b) = a { String::from_utf8_lossy(b).into_owned() } else { panic!("{a:?}") }).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn keeps_the_newest_entries_up_to_the_limit_and_only_slow_ones() {
        let log = SlowLog::default();
        log.configure(100, 3);
        log.record(&args("get fast"), 99, "127.0.0.1:1", None);
        assert!(log.is_empty(), "faster than the threshold");
        for i in 0..5 {
            log.record(&args(&format!("set k{i} v")), 100, "127.0.0.1:1", Some(Bytes::from_static(b"app")));
        }
        assert_eq!(log.len(), 3);
        let Frame::Array(entries) = log.get(None) else { panic!() };
        assert_eq!(entries.iter().map(shown).collect::<Vec<_>>(), ["set k4 v", "set k3 v", "set k2 v"]);
        let Frame::Array(first) = &entries[0] else { panic!() };
        assert_eq!(first[0], Frame::Integer(4), "ids count every logged command");
        assert_eq!(first[2], Frame::Integer(100));
        assert_eq!(first[4], Frame::bulk("127.0.0.1:1"));
        assert_eq!(first[5], Frame::Bulk(Bytes::from_static(b"app")));
        let Frame::Array(two) = log.get(Some(2)) else { panic!() };
        assert_eq!(two.len(), 2);
        log.configure(-1, 3);
        log.record(&args("set slow v"), 1_000_000, "127.0.0.1:1", None);
        assert_eq!(log.len(), 3, "a negative threshold logs nothing");
        log.configure(0, 1);
        assert_eq!(log.len(), 1, "a smaller limit trims at once");
        log.reset();
        assert!(log.is_empty());
    }

    #[test]
    fn secrets_are_redacted() {
        let cases = [
            ("auth secret", "auth (redacted)"),
            ("auth user secret", "auth (redacted) (redacted)"),
            ("hello 3 AUTH user secret SETNAME x", "hello 3 AUTH (redacted) (redacted) SETNAME x"),
            ("config set masterauth x maxmemory 1", "config set masterauth (redacted) maxmemory 1"),
            ("acl setuser u on >pw", "acl setuser (redacted) (redacted) (redacted)"),
            ("migrate h 1 key 9 5000 AUTH pw", "migrate h 1 key 9 5000 AUTH (redacted)"),
            ("migrate h 1 key 9 5000 AUTH2 user pw", "migrate h 1 key 9 5000 AUTH2 (redacted) (redacted)"),
            ("set auth x", "set auth x"),
        ];
        for (sent, logged) in cases {
            let log = SlowLog::default();
            log.configure(0, 10);
            log.record(&args(sent), 1, "a", None);
            let Frame::Array(entries) = log.get(None) else { panic!() };
            assert_eq!(shown(&entries[0]), logged, "{sent}");
        }
    }

    #[test]
    fn long_commands_are_trimmed_as_redis_does() {
        let many: Vec<Bytes> = (0..35).map(|i| Bytes::from(i.to_string())).collect();
        let kept = trimmed(&many);
        assert_eq!(kept.len(), 32);
        assert_eq!(kept[31], Bytes::from_static(b"... (4 more arguments)"));
        let long = trimmed(&[Bytes::from(vec![b'A'; 129])]);
        assert_eq!(long[0], Bytes::from(format!("{}... (1 more bytes)", "A".repeat(128))));
    }
}
