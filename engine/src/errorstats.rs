//! `INFO errorstats` and `total_error_replies`, as Redis 7.0 counts them: every error reply
//! sent to a client counts once under its code, the first word of the message (`ERR`,
//! `WRONGTYPE`, `NOAUTH`, a script's own `MY_ERR_CODE`), including each error inside an `EXEC`
//! reply. Like Redis, at most `MAX_CODES` distinct codes are tracked (a client can invent
//! codes through scripts); later new codes count only in the total.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::frame::Frame;

/// Redis's `ERRORSTATS_LIMIT`.
pub const MAX_CODES: usize = 128;

#[derive(Default)]
pub struct ErrorStats {
    total: AtomicU64,
    by_code: Mutex<BTreeMap<String, u64>>,
}

impl ErrorStats {
    /// Counts the error replies in `reply` (the reply itself, or the replies of a
    /// transaction). A reply without errors costs one match.
    pub fn count_reply(&self, reply: &Frame) {
        match reply {
            Frame::Error(message) => self.count(message),
            Frame::Array(items) => {
                for item in items {
                    if let Frame::Error(message) = item {
                        self.count(message);
                    }
                }
            }
            _ => {}
        }
    }

    /// Counts one error reply with `message` (without the leading `-`).
    pub fn count(&self, message: &str) {
        self.total.fetch_add(1, Ordering::Relaxed);
        let code = message.split(' ').next().unwrap_or(message);
        let mut by_code = self.by_code.lock();
        if let Some(n) = by_code.get_mut(code) {
            *n += 1;
        } else if by_code.len() < MAX_CODES {
            by_code.insert(code.to_string(), 1);
        }
    }

    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// `CONFIG RESETSTAT`.
    pub fn reset(&self) {
        self.total.store(0, Ordering::Relaxed);
        self.by_code.lock().clear();
    }

    /// The `# Errorstats` section of INFO.
    pub fn info(&self) -> String {
        let mut out = String::from("# Errorstats\r\n");
        for (code, count) in self.by_code.lock().iter() {
            let _ = write!(out, "errorstat_{code}:count={count}\r\n");
        }
        out.push_str("\r\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_count_by_their_first_word_and_in_transactions() {
        let stats = ErrorStats::default();
        stats.count_reply(&Frame::error("ERR unknown command"));
        stats.count_reply(&Frame::error("WRONGTYPE Operation against a key"));
        stats.count_reply(&Frame::Array(vec![Frame::Integer(1), Frame::error("ERR value is not an integer")]));
        stats.count_reply(&Frame::error("MY_ERR"));
        stats.count_reply(&Frame::Integer(3));
        assert_eq!(stats.total(), 4);
        assert_eq!(stats.info(), "# Errorstats\r\nerrorstat_ERR:count=2\r\nerrorstat_MY_ERR:count=1\r\nerrorstat_WRONGTYPE:count=1\r\n\r\n");
        stats.reset();
        assert_eq!((stats.total(), stats.info().as_str()), (0, "# Errorstats\r\n\r\n"));
    }

    #[test]
    fn at_most_max_codes_are_tracked() {
        let stats = ErrorStats::default();
        for i in 0..MAX_CODES + 10 {
            stats.count(&format!("CODE{i} x"));
        }
        assert_eq!(stats.total(), (MAX_CODES + 10) as u64);
        assert_eq!(stats.info().matches("errorstat_").count(), MAX_CODES);
    }
}
