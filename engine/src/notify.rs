//! Keyspace notifications (`notify-keyspace-events`), as Redis 7.0's notify.c: a write, an
//! expiry or an eviction publishes its event on `__keyspace@<db>__:<key>` (message: the
//! event) and `__keyevent@<db>__:<event>` (message: the key), for the classes switched on.
//!
//! Commands collect their events in their `Ctx` while they hold shard locks; the events are
//! published once the locks are dropped (`Notifier::publish`), before the command's reply is
//! written, so a subscriber sees them in the order Redis gives. Background work (active
//! expiry, eviction, writes merged from peers) publishes through the same `Notifier`.
//! With notifications off, every call site costs one relaxed atomic load.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use bytes::{BufMut, Bytes, BytesMut};

use crate::db::effect::{Effect, EffectKind, ElementKind, Elements, Held};

/// Redis's class bits (server.h `NOTIFY_*`), so `CONFIG GET` prints what Redis prints.
pub mod class {
    pub const KEYSPACE: u32 = 1 << 0;
    pub const KEYEVENT: u32 = 1 << 1;
    pub const GENERIC: u32 = 1 << 2;
    pub const STRING: u32 = 1 << 3;
    pub const LIST: u32 = 1 << 4;
    pub const SET: u32 = 1 << 5;
    pub const HASH: u32 = 1 << 6;
    pub const ZSET: u32 = 1 << 7;
    pub const EXPIRED: u32 = 1 << 8;
    pub const EVICTED: u32 = 1 << 9;
    pub const STREAM: u32 = 1 << 10;
    pub const KEY_MISS: u32 = 1 << 11;
    pub const MODULE: u32 = 1 << 13;
    pub const NEW: u32 = 1 << 14;
    /// `A`: every class but `m` and `n`, as Redis.
    pub const ALL: u32 = GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;
}

/// The error for a class character Redis does not know, in Redis's words.
pub const INVALID_CLASSES: &str = "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.";

/// Parses a `notify-keyspace-events` value (`KEA`, `Kx`, `""`).
pub fn parse_classes(text: &str) -> Result<u32, &'static str> {
    let mut flags = 0;
    for c in text.chars() {
        flags |= match c {
            'A' => class::ALL,
            'g' => class::GENERIC,
            '$' => class::STRING,
            'l' => class::LIST,
            's' => class::SET,
            'h' => class::HASH,
            'z' => class::ZSET,
            'x' => class::EXPIRED,
            'e' => class::EVICTED,
            'K' => class::KEYSPACE,
            'E' => class::KEYEVENT,
            't' => class::STREAM,
            'm' => class::KEY_MISS,
            'd' => class::MODULE,
            'n' => class::NEW,
            _ => return Err(INVALID_CLASSES),
        };
    }
    Ok(flags)
}

/// The canonical text of a class set, as Redis's `keyspaceEventsFlagsToString`.
pub fn format_classes(flags: u32) -> String {
    let mut out = String::new();
    if flags & class::ALL == class::ALL {
        out.push('A');
    } else {
        let types = [
            (class::GENERIC, 'g'),
            (class::STRING, '$'),
            (class::LIST, 'l'),
            (class::SET, 's'),
            (class::HASH, 'h'),
            (class::ZSET, 'z'),
            (class::EXPIRED, 'x'),
            (class::EVICTED, 'e'),
            (class::STREAM, 't'),
            (class::MODULE, 'd'),
        ];
        out.extend(types.iter().filter(|(bit, _)| flags & bit != 0).map(|(_, c)| c));
    }
    // `n` is outside `A`; Redis prints it after the type classes (and before `K`/`E`).
    if flags & class::NEW != 0 {
        out.push('n');
    }
    for (bit, c) in [(class::KEYSPACE, 'K'), (class::KEYEVENT, 'E'), (class::KEY_MISS, 'm')] {
        if flags & bit != 0 {
            out.push(c);
        }
    }
    out
}

/// One keyspace event waiting to be published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub class: u32,
    pub name: &'static str,
    pub db: usize,
    pub key: Bytes,
}

/// Where events go: the server's pub/sub, installed at start-up (the keyspace does not know
/// the server).
pub type Sink = Box<dyn Fn(Bytes, Bytes) + Send + Sync>;

/// The switch and the sink. Lives in the `Store`, so every writer can reach it.
#[derive(Default)]
pub struct Notifier {
    flags: AtomicU32,
    sink: OnceLock<Sink>,
}

impl Notifier {
    pub fn set_classes(&self, flags: u32) {
        self.flags.store(flags, Ordering::Relaxed);
    }

    /// Whether an event of `class` is published (one relaxed load: the hot-path check).
    #[inline]
    pub fn wants(&self, class: u32) -> bool {
        let flags = self.flags.load(Ordering::Relaxed);
        flags & class != 0 && flags & (class::KEYSPACE | class::KEYEVENT) != 0
    }

    /// Installs the function that publishes a message on a channel (once, at start-up).
    pub fn set_sink(&self, sink: Sink) {
        let _ = self.sink.set(sink);
    }

    /// Publishes events on Redis's two channels; call it with no lock held.
    pub fn publish(&self, events: impl IntoIterator<Item = Event>) {
        let Some(sink) = self.sink.get() else {
            return;
        };
        let flags = self.flags.load(Ordering::Relaxed);
        for event in events {
            if flags & event.class == 0 {
                continue;
            }
            if flags & class::KEYSPACE != 0 {
                sink(channel("__keyspace@", event.db, &event.key), Bytes::from_static(event.name.as_bytes()));
            }
            if flags & class::KEYEVENT != 0 {
                sink(channel("__keyevent@", event.db, event.name.as_bytes()), event.key.clone());
            }
        }
    }

    /// Publishes one event at once (background work that holds no lock). Inline, the
    /// publishing apart: a link fires one per merged write, and with notifications off (the
    /// default) the call cost ~20 instructions of a merge's ~1,900 (callgrind).
    #[inline]
    pub fn fire(&self, class: u32, name: &'static str, db: usize, key: &[u8]) {
        if self.wants(class) {
            self.fire_wanted(class, name, db, key);
        }
    }

    /// `fire`'s publishing, out of line: taken only with notifications on.
    #[cold]
    #[inline(never)]
    fn fire_wanted(&self, class: u32, name: &'static str, db: usize, key: &[u8]) {
        self.publish([Event { class, name, db, key: Bytes::copy_from_slice(key) }]);
    }

    /// Publishes what a write merged from a peer did here (`mesh::link::apply_all`): the
    /// event of the effect's kind, see `merged_events`.
    pub fn merged_write(&self, op: &Effect) {
        self.publish_merged(|| merged_events(op));
    }

    /// `merged_write` of a collection's element states read where they lie in a batch
    /// (`repl::wire::ElementsRef`).
    #[inline]
    pub fn merged_elements(&self, db: usize, key: &[u8], elements: &Elements<'_>) {
        self.publish_merged(|| element_events(db, key, elements));
    }

    /// Publishes a merged write's events if notifications are on and one is wanted.
    #[inline]
    fn publish_merged(&self, events: impl FnOnce() -> Vec<Event>) {
        if self.flags.load(Ordering::Relaxed) & (class::KEYSPACE | class::KEYEVENT) == 0 {
            return;
        }
        let events = events();
        if events.iter().any(|e| self.wants(e.class)) {
            self.publish(events);
        }
    }

    /// `merged_write` of a string's write read where it lies in a batch
    /// (`repl::wire::StringSetRef`): the `set` event `merged_events` gives a `StringSet`.
    #[inline]
    pub fn merged_string_set(&self, db: usize, key: &[u8]) {
        self.fire(class::STRING, MERGED_STRING_SET, db, key);
    }

    /// `merged_write` of a counter's contribution read where it lies in a batch
    /// (`repl::wire::CounterRef`): the `incrby` event `merged_events` gives a `Counter`.
    #[inline]
    pub fn merged_counter(&self, db: usize, key: &[u8]) {
        self.fire(class::STRING, MERGED_COUNTER, db, key);
    }

    /// `merged_write` of a key's tombstone read where it lies in a batch
    /// (`repl::wire::DeleteRef`): `del`.
    #[inline]
    pub fn merged_delete(&self, db: usize, key: &[u8]) {
        self.fire(class::GENERIC, MERGED_DELETE, db, key);
    }

    /// `merged_write` of a key's expiry register read where it lies in a batch
    /// (`repl::wire::ExpireRef`): `expire`, or `persist` when it clears the TTL.
    #[inline]
    pub fn merged_expire(&self, db: usize, key: &[u8], deadline_ms: u64) {
        self.fire(class::GENERIC, merged_expire_event(deadline_ms), db, key);
    }

    /// `merged_write` of a list's value read where it lies in a batch (`repl::wire::ListRef`):
    /// the event `merged_events` gives a `List`.
    #[inline]
    pub fn merged_list(&self, db: usize, key: &[u8], empty: bool) {
        let (class, name) = merged_list_event(empty);
        self.fire(class, name, db, key);
    }
}

fn channel(prefix: &str, db: usize, suffix: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(prefix.len() + 8 + suffix.len());
    out.put_slice(prefix.as_bytes());
    out.put_slice(db.to_string().as_bytes());
    out.put_slice(b"__:");
    out.put_slice(suffix);
    out.freeze()
}

/// The event a merged string write fires (`merged_events`, `Notifier::merged_string_set`).
const MERGED_STRING_SET: &str = "set";

/// The event a merged counter contribution fires (`merged_events`, `Notifier::merged_counter`).
const MERGED_COUNTER: &str = "incrby";

/// The events a merged effect fires (docs/compatibility.md, "Keyspace notifications"): a
/// peer's write is not a command here, so it fires the event of what it did to the key — a
/// string register `set`, a counter contribution `incrby`, a HyperLogLog's registers
/// `pfadd`, a tombstone `del`, an expiry register `expire` (or `persist` when it clears the
/// TTL), hash fields `hset`/`hdel`, set members `sadd`/`srem`, sorted-set members
/// `zadd`/`zrem`, a list's value `lset` (a list replicates whole). `FLUSHDB`/`FLUSHALL`
/// fire nothing, as in Redis; published messages are delivered as messages, not events.
pub fn merged_events(op: &Effect) -> Vec<Event> {
    // A copy: a merged effect's key is a slice of the frame it arrived in (`repl::wire`), and
    // the event may wait in a slow subscriber's queue.
    let event = |class, name| Event { class, name, db: op.db, key: Bytes::copy_from_slice(&op.key) };
    let mut events = Vec::new();
    match &op.kind {
        EffectKind::StringSet { .. } => events.push(event(class::STRING, MERGED_STRING_SET)),
        EffectKind::Counter(_) => events.push(event(class::STRING, MERGED_COUNTER)),
        EffectKind::Hll { .. } => events.push(event(class::STRING, "pfadd")),
        EffectKind::Delete { .. } => events.push(event(class::GENERIC, MERGED_DELETE)),
        EffectKind::Expire { deadline_ms, .. } => events.push(event(class::GENERIC, merged_expire_event(*deadline_ms))),
        EffectKind::Hash(_) | EffectKind::Set(_) | EffectKind::ZSet(_) => events = op.elements().map_or_else(Vec::new, |e| element_events(op.db, &op.key, &e)),
        EffectKind::List { items, .. } => {
            let (class, name) = merged_list_event(items.is_empty());
            events.push(event(class, name));
        }
        // Libraries are no keys: Redis fires no keyspace event for FUNCTION commands.
        EffectKind::FlushDb { .. } | EffectKind::Publish { .. } | EffectKind::Library { .. } | EffectKind::FunctionFlush { .. } => {}
    }
    events
}

/// The event a merged tombstone fires (`merged_events`, `Notifier::merged_delete`).
const MERGED_DELETE: &str = "del";

/// The event a merged expiry register fires (`merged_events`, `Notifier::merged_expire`).
fn merged_expire_event(deadline_ms: u64) -> &'static str {
    if deadline_ms == 0 {
        "persist"
    } else {
        "expire"
    }
}

/// The event a merged list value fires (`merged_events`, `Notifier::merged_list`): an empty
/// one deletes the key.
fn merged_list_event(empty: bool) -> (u32, &'static str) {
    if empty {
        (class::GENERIC, "del")
    } else {
        (class::LIST, "lset")
    }
}

/// The events merged element states fire (`merged_events`): one for added elements (`hset`,
/// `sadd`, `zadd`) and one for removed ones (`hdel`, `srem`, `zrem`), if they had any of each.
fn element_events(db: usize, key: &[u8], elements: &Elements<'_>) -> Vec<Event> {
    let (class, added, removed) = match elements.kind {
        ElementKind::Hash => (class::HASH, "hset", "hdel"),
        ElementKind::Set => (class::SET, "sadd", "srem"),
        ElementKind::ZSet => (class::ZSET, "zadd", "zrem"),
    };
    // A copy: the key may be a slice of the frame it arrived in (`repl::wire`), and the event
    // may wait in a slow subscriber's queue.
    let event = |name| Event { class, name, db, key: Bytes::copy_from_slice(key) };
    let mut events = Vec::new();
    if elements.states.iter().any(|e| e.held != Held::Removed) {
        events.push(event(added));
    }
    if elements.states.iter().any(|e| e.held == Held::Removed) {
        events.push(event(removed));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_print_as_redis_prints_them() {
        for (input, shown) in [("gKE", "gKE"), ("$lshzxeKE", "$lshzxeKE"), ("KA", "AK"), ("EA", "AE"), ("", ""), ("En", "nE"), ("AKEm", "AKEm")] {
            assert_eq!(format_classes(parse_classes(input).unwrap()), shown, "{input}");
        }
        assert_eq!(parse_classes("KEw"), Err(INVALID_CLASSES));
    }

    #[test]
    fn classes_without_k_or_e_publish_nothing() {
        let notifier = Notifier::default();
        notifier.set_classes(class::ALL);
        assert!(!notifier.wants(class::STRING));
        notifier.set_classes(class::ALL | class::KEYEVENT);
        assert!(notifier.wants(class::STRING));
        assert!(!notifier.wants(class::NEW));
    }
}
