//! `MONITOR`: clients that asked to see every command the server runs, as Redis 7 shows them:
//! `+<unix seconds>.<µs> [<db> <client address>] "arg" "arg" ...`, arguments quoted and escaped
//! like Redis's `sdscatrepr`, secrets redacted as in SLOWLOG. A command is shown once it ran
//! (a transaction's commands as `EXEC` runs them, then the `EXEC`); a script's `EVAL`/`FCALL`
//! before it runs, then each command it calls as `[<db> lua]`. Admin commands (CONFIG, SLOWLOG,
//! MONITOR, ...) are not shown. Only this node's commands are shown, not writes merged from
//! peers (a peer's client shows on that peer's monitors).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use parking_lot::Mutex;

use crate::client::ClientHandle;
use crate::frame::Frame;

/// Where a shown command came from.
pub enum Source<'a> {
    /// A client, by its address.
    Client(&'a str),
    /// A script's `redis.call`.
    Script,
}

#[derive(Default)]
pub struct Monitors {
    /// How many clients monitor: the fast path for every command is one load of this.
    count: AtomicUsize,
    clients: Mutex<Vec<Arc<ClientHandle>>>,
}

impl Monitors {
    /// Starts sending every command to `client` (its push channel, like pub/sub messages).
    pub fn add(&self, client: Arc<ClientHandle>) {
        let mut clients = self.clients.lock();
        if !clients.iter().any(|c| c.id == client.id) {
            clients.push(client);
            self.count.store(clients.len(), Ordering::Release);
        }
    }

    /// Stops monitoring for client `id` (RESET, disconnect).
    pub fn remove(&self, id: u64) {
        let mut clients = self.clients.lock();
        clients.retain(|c| c.id != id);
        self.count.store(clients.len(), Ordering::Release);
    }

    pub fn active(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// Shows `argv`, run in database `db`, to every monitoring client.
    pub fn feed(&self, db: usize, source: Source<'_>, argv: &[Bytes]) {
        if !self.active() {
            return;
        }
        let line = Frame::Status(line(db, &source, argv));
        let mut clients = self.clients.lock();
        // A client whose connection ended has dropped its receiver: forget it.
        clients.retain(|c| c.push(line.clone()));
        self.count.store(clients.len(), Ordering::Release);
    }
}

/// One MONITOR line, without the leading `+` and the CRLF (the frame adds them).
fn line(db: usize, source: &Source<'_>, argv: &[Bytes]) -> Bytes {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut out = BytesMut::with_capacity(64 + argv.iter().map(|a| a.len() + 3).sum::<usize>());
    out.put_slice(format!("{}.{:06} ", now.as_secs(), now.subsec_micros()).as_bytes());
    match source {
        Source::Client(addr) => out.put_slice(format!("[{db} {addr}]").as_bytes()),
        Source::Script => out.put_slice(format!("[{db} lua]").as_bytes()),
    }
    for arg in crate::slowlog::redacted(argv) {
        out.put_u8(b' ');
        quote(&mut out, &arg);
    }
    out.freeze()
}

/// `arg` in double quotes with Redis's `sdscatrepr` escapes.
fn quote(out: &mut BytesMut, arg: &[u8]) {
    out.put_u8(b'"');
    for &c in arg {
        match c {
            b'\\' => out.put_slice(b"\\\\"),
            b'"' => out.put_slice(b"\\\""),
            b'\n' => out.put_slice(b"\\n"),
            b'\r' => out.put_slice(b"\\r"),
            b'\t' => out.put_slice(b"\\t"),
            0x07 => out.put_slice(b"\\a"),
            0x08 => out.put_slice(b"\\b"),
            c if c.is_ascii_graphic() || c == b' ' => out.put_u8(c),
            c => out.put_slice(format!("\\x{c:02x}").as_bytes()),
        }
    }
    out.put_u8(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_look_like_redis_monitor_output() {
        let argv: Vec<Bytes> = ["set", "k y", "a\"b\\c\n\x01"].iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect();
        let shown = line(9, &Source::Client("127.0.0.1:5000"), &argv);
        let text = String::from_utf8_lossy(&shown);
        let (time, rest) = text.split_once(' ').unwrap_or_default();
        let (secs, micros) = time.split_once('.').unwrap_or_default();
        assert!(secs.parse::<u64>().is_ok() && micros.len() == 6, "{text}");
        assert_eq!(rest, r#"[9 127.0.0.1:5000] "set" "k y" "a\"b\\c\n\x01""#);
        let auth: Vec<Bytes> = ["auth", "secret"].iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect();
        assert!(String::from_utf8_lossy(&line(0, &Source::Script, &auth)).ends_with(r#"[0 lua] "auth" "(redacted)""#));
    }
}
