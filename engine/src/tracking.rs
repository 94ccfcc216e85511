//! Client-side caching: `CLIENT TRACKING`, as Redis 7.0 does it (server-assisted
//! invalidation, <https://redis.io/docs/manual/client-side-caching/>).
//!
//! Default mode: after a read-only command, the keys it read are remembered for the client
//! (the tracking table: key → client ids); when a key changes, every client that may have
//! cached it gets one `invalidate` message naming it, and the key leaves the table (a client
//! that reads it again is tracked again). BCAST mode: nothing is remembered; a client
//! subscribes to key prefixes and hears of every change under them, batched per prefix once
//! a command (or a merge batch) is done. `OPTIN`/`OPTOUT` and `CLIENT CACHING` choose which
//! reads are remembered; `NOLOOP` leaves out the client's own writes.
//!
//! Messages: a RESP3 client gets a `invalidate [keys]` push; with `REDIRECT id` they go to
//! that client instead, a RESP3 push there too, or, to a RESP2 client in pub/sub mode, a
//! `message` on `__redis__:invalidate` (Redis's convention). A flush sends a null instead of
//! keys. A redirect target that went away makes the client `broken_redirect` and sends it a
//! `tracking-redir-broken` push (RESP3).
//!
//! What changes a key: every local write (the edit API notes it in `db::Modified`), active
//! expiry and eviction (`Store::note_removed`), and writes merged from peers (`merged`) — so a
//! client of one node is invalidated by a write made on any node of the mesh. The tracking
//! table is per node: a client hears about the keys it read on the node it is connected to.
//!
//! Cost: `Store::tracking` is on only while some client tracks or the table holds keys; until
//! then a write pays one relaxed load and nothing here runs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::client::{ClientHandle, ClientRegistry};
use crate::db::{Key, Modified, Store};
use crate::frame::Frame;

/// The pub/sub channel RESP2 clients receive redirected invalidations on.
pub const INVALIDATE_CHANNEL: &str = "__redis__:invalidate";

/// What `CLIENT TRACKING ON` asked for.
#[derive(Debug, Default, Clone)]
pub struct Options {
    /// 0: no redirection.
    pub redirect: u64,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    pub prefixes: Vec<Bytes>,
}

/// Why `CLIENT TRACKING ON` or `CLIENT CACHING` was refused (Redis's words).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TrackingError {
    #[error("You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.")]
    BcastSwitch,
    #[error("You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.")]
    OptSwitch,
    #[error("Prefix '{0}' overlaps with an existing prefix '{1}'. Prefixes for a single client must not overlap.")]
    OverlapsExisting(String, String),
    #[error("Prefix '{0}' overlaps with another provided prefix '{1}'. Prefixes for a single client must not overlap.")]
    OverlapsGiven(String, String),
    #[error("CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled")]
    CachingNotTracking,
    #[error("CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.")]
    CachingYes,
    #[error("CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.")]
    CachingNo,
}

/// A client with tracking on.
struct Tracker {
    handle: Arc<ClientHandle>,
    options: Options,
    /// `CLIENT CACHING yes|no` was given for the next command.
    caching: bool,
    /// The redirect target was gone when a message was due.
    broken: bool,
}

impl Tracker {
    /// Whether this client's current read is remembered (OPTIN needs `CACHING yes` first,
    /// OPTOUT skips it after `CACHING no`).
    fn remembers(&self) -> bool {
        let o = &self.options;
        let skipped = o.bcast || (o.optin && !self.caching) || (o.optout && self.caching);
        !skipped
    }
}

/// A BCAST prefix: its clients and the keys under it changed since the last flush, each with
/// the client that changed it (for NOLOOP; `None`: a peer, expiry or eviction).
#[derive(Default)]
struct Prefix {
    clients: HashSet<u64>,
    pending: HashMap<Key, Option<u64>>,
}

#[derive(Default)]
struct State {
    clients: HashMap<u64, Tracker>,
    /// The tracking table: key → ids of clients that may hold it. Ids stay after a client
    /// turns tracking off (as in Redis); messages only go to clients that track.
    keys: HashMap<Key, HashSet<u64>>,
    /// Sum of the table's id sets (`tracking_total_items`).
    items: usize,
    prefixes: BTreeMap<Bytes, Prefix>,
}

/// Where messages go: the running command's own client gets its messages after the
/// command's reply, in the same write (`own`), as Redis 7.0 does (never in the middle of a
/// reply, and before anything the next command says); everyone else through their push
/// channel.
struct Outbox<'a> {
    clients: &'a ClientRegistry,
    current: Option<u64>,
    own: Vec<Frame>,
}

impl Outbox<'_> {
    fn deliver(&mut self, target: &ClientHandle, frame: Frame, size: usize) {
        if self.current == Some(target.id) {
            self.own.push(frame);
        } else {
            crate::pubsub::deliver(target, frame, size);
        }
    }
}

/// The node's tracking state; `Server::tracking`.
pub struct Tracking {
    state: Mutex<State>,
    /// `tracking-table-max-keys` (0: no limit).
    max_keys: AtomicUsize,
}

impl Default for Tracking {
    fn default() -> Tracking {
        Tracking { state: Mutex::default(), max_keys: AtomicUsize::new(1_000_000) }
    }
}

/// `INFO` numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackingStats {
    pub clients: usize,
    pub keys: usize,
    pub items: usize,
    pub prefixes: usize,
}

/// `CLIENT TRACKINGINFO` for one client.
pub struct TrackingInfo {
    pub flags: Vec<&'static str>,
    pub redirect: i64,
    pub prefixes: Vec<Bytes>,
}

impl Tracking {
    pub fn set_max_keys(&self, max: usize) {
        self.max_keys.store(max, Ordering::Relaxed);
    }

    /// `CLIENT TRACKING ON`: checks the options against each other and the client's current
    /// mode, then turns tracking on (BCAST prefixes add to those it has).
    pub fn enable(&self, store: &Store, handle: &Arc<ClientHandle>, options: Options) -> Result<(), TrackingError> {
        let mut st = self.state.lock();
        let existing = st.clients.get(&handle.id).map(|t| &t.options);
        if let Some(old) = existing {
            if old.bcast != options.bcast {
                return Err(TrackingError::BcastSwitch);
            }
            if (options.optin && old.optout) || (options.optout && old.optin) {
                return Err(TrackingError::OptSwitch);
            }
        }
        let mut prefixes = existing.map(|o| o.prefixes.clone()).unwrap_or_default();
        if options.bcast {
            check_prefixes(&prefixes, &options.prefixes)?;
            let new: Vec<Bytes> = if options.prefixes.is_empty() { vec![Bytes::new()] } else { options.prefixes.clone() };
            for prefix in new {
                st.prefixes.entry(prefix.clone()).or_default().clients.insert(handle.id);
                if !prefixes.contains(&prefix) {
                    prefixes.push(prefix);
                }
            }
        }
        let options = Options { prefixes, ..options };
        st.clients.insert(handle.id, Tracker { handle: handle.clone(), options, caching: false, broken: false });
        update_flag(store, &st);
        Ok(())
    }

    /// `CLIENT TRACKING OFF` (and `RESET`, and a closing connection). The keys it read stay
    /// in the table until they change, as in Redis.
    pub fn disable(&self, store: &Store, client_id: u64) {
        if !store.tracking.load(Ordering::Relaxed) {
            return;
        }
        let mut st = self.state.lock();
        let Some(tracker) = st.clients.remove(&client_id) else { return };
        for prefix in &tracker.options.prefixes {
            if let Some(p) = st.prefixes.get_mut(prefix) {
                p.clients.remove(&client_id);
                if p.clients.is_empty() {
                    st.prefixes.remove(prefix);
                }
            }
        }
        update_flag(store, &st);
    }

    /// `CLIENT CACHING yes|no`.
    pub fn caching(&self, client_id: u64, yes: bool) -> Result<(), TrackingError> {
        let mut st = self.state.lock();
        let tracker = st.clients.get_mut(&client_id).ok_or(TrackingError::CachingNotTracking)?;
        match (yes, tracker.options.optin, tracker.options.optout) {
            (true, true, _) | (false, _, true) => {
                tracker.caching = true;
                Ok(())
            }
            (true, ..) => Err(TrackingError::CachingYes),
            (false, ..) => Err(TrackingError::CachingNo),
        }
    }

    /// `CLIENT GETREDIR`: the redirect target, 0 for none, -1 when not tracking.
    pub fn redirect_of(&self, client_id: u64) -> i64 {
        self.state.lock().clients.get(&client_id).map_or(-1, |t| t.options.redirect as i64)
    }

    pub fn info(&self, client_id: u64) -> TrackingInfo {
        let st = self.state.lock();
        let Some(t) = st.clients.get(&client_id) else {
            return TrackingInfo { flags: vec!["off"], redirect: -1, prefixes: Vec::new() };
        };
        let o = &t.options;
        let mut flags = vec!["on"];
        for (on, name) in [
            (o.bcast, "bcast"),
            (o.optin, "optin"),
            (o.optin && t.caching, "caching-yes"),
            (o.optout, "optout"),
            (o.optout && t.caching, "caching-no"),
            (o.noloop, "noloop"),
            (t.broken, "broken_redirect"),
        ] {
            if on {
                flags.push(name);
            }
        }
        TrackingInfo { flags, redirect: o.redirect as i64, prefixes: o.prefixes.clone() }
    }

    pub fn stats(&self) -> TrackingStats {
        let st = self.state.lock();
        TrackingStats { clients: st.clients.len(), keys: st.keys.len(), items: st.items, prefixes: st.prefixes.len() }
    }

    /// After a command of `client_id`: remembers `read` (the keys of a read-only command,
    /// when the client's mode wants them), ends a `CLIENT CACHING` unless `keep_caching`,
    /// invalidates what the command modified (`NOLOOP` clients do not hear of their own
    /// writes) and what expiry or eviction removed meanwhile, then keeps the table within
    /// `tracking-table-max-keys`. Returns the messages for `client_id` itself, which go
    /// right after the command's reply. Call only while `Store::tracking` is on.
    pub fn after_command(&self, clients: &ClientRegistry, store: &Store, client_id: u64, read: &[&[u8]], keep_caching: bool, modified: Modified) -> Vec<Frame> {
        let removed = store.take_removed();
        let mut out = Outbox { clients, current: Some(client_id), own: Vec::new() };
        let mut st = self.state.lock();
        if let Some(t) = st.clients.get_mut(&client_id) {
            let remembers = t.remembers();
            if !keep_caching {
                t.caching = false;
            }
            if remembers {
                for key in read {
                    remember(&mut st, client_id, key);
                }
            }
        }
        invalidate(&mut st, &mut out, &modified, Some(client_id));
        invalidate(&mut st, &mut out, &Modified { keys: removed, flushed: false }, None);
        flush_prefixes(&mut st, &mut out);
        self.limit(&mut st, &mut out);
        update_flag(store, &st);
        out.own
    }

    /// Invalidates the keys eviction removed just now, before `client_id`'s command runs;
    /// returns the messages for that client itself, which go before the command's reply
    /// (Redis evicts before it runs a command, so they precede it).
    pub fn evicted(&self, clients: &ClientRegistry, store: &Store, client_id: u64) -> Vec<Frame> {
        let removed = store.take_removed();
        if removed.is_empty() {
            return Vec::new();
        }
        let mut out = Outbox { clients, current: Some(client_id), own: Vec::new() };
        let mut st = self.state.lock();
        invalidate(&mut st, &mut out, &Modified { keys: removed, flushed: false }, None);
        flush_prefixes(&mut st, &mut out);
        update_flag(store, &st);
        out.own
    }

    /// The mesh's hook (`mesh::Delivery::keys_changed`): the `(db, key)`s a batch of merges from
    /// a peer changed; clients that cached them are invalidated, as for a local write. A merged
    /// `FLUSHDB`/`FLUSHALL` arrives as a change of the empty key name, so a change of that name
    /// invalidates everything (more than needed when a real empty key changed, never less).
    pub fn invalidate_merged(&self, clients: &ClientRegistry, store: &Store, changed: &[(usize, Key)]) {
        if changed.is_empty() || !store.tracking.load(Ordering::Relaxed) {
            return;
        }
        let mut modified = Modified::default();
        for (_, key) in changed {
            if key.is_empty() {
                modified.flushed = true;
            } else {
                modified.keys.push(key.clone());
            }
        }
        self.merged(clients, store, modified);
    }

    /// Invalidates keys changed by writes merged from peers (and expired or evicted keys, when
    /// no command runs to carry them: the expiry cycle calls this with an empty `modified`).
    pub fn merged(&self, clients: &ClientRegistry, store: &Store, modified: Modified) {
        if !store.tracking.load(Ordering::Relaxed) {
            return;
        }
        let removed = store.take_removed();
        let mut out = Outbox { clients, current: None, own: Vec::new() };
        let mut st = self.state.lock();
        invalidate(&mut st, &mut out, &modified, None);
        invalidate(&mut st, &mut out, &Modified { keys: removed, flushed: false }, None);
        flush_prefixes(&mut st, &mut out);
        update_flag(store, &st);
    }

    /// Evicts keys from the table past `tracking-table-max-keys`, invalidating each for the
    /// clients that hold it (Redis's `trackingLimitUsedSlots`, which also picks at random).
    fn limit(&self, st: &mut State, out: &mut Outbox) {
        let max = self.max_keys.load(Ordering::Relaxed);
        if max == 0 || st.keys.len() <= max {
            return;
        }
        let excess: Vec<Key> = st.keys.keys().take(st.keys.len() - max).cloned().collect();
        for key in excess {
            invalidate_key(st, out, &key, None);
        }
    }
}

/// Turns the keyspace's "note modified keys" flag on while anyone could be told.
fn update_flag(store: &Store, st: &State) {
    store.tracking.store(!st.clients.is_empty() || !st.keys.is_empty(), Ordering::Relaxed);
}

/// Refuses BCAST prefixes that overlap (one a prefix of the other) an existing or another
/// given prefix, as Redis does.
fn check_prefixes(existing: &[Bytes], given: &[Bytes]) -> Result<(), TrackingError> {
    let overlap = |a: &[u8], b: &[u8]| a.starts_with(b) || b.starts_with(a);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for (i, p) in given.iter().enumerate() {
        if let Some(e) = existing.iter().find(|e| overlap(e, p)) {
            return Err(TrackingError::OverlapsExisting(text(p), text(e)));
        }
        if let Some(q) = given[i + 1..].iter().find(|q| overlap(p, q)) {
            return Err(TrackingError::OverlapsGiven(text(p), text(q)));
        }
    }
    Ok(())
}

fn remember(st: &mut State, client_id: u64, key: &[u8]) {
    let ids = match st.keys.get_mut(key) {
        Some(ids) => ids,
        None => st.keys.entry(Key::from(key)).or_default(),
    };
    if ids.insert(client_id) {
        st.items += 1;
    }
}

fn invalidate(st: &mut State, out: &mut Outbox, modified: &Modified, writer: Option<u64>) {
    if modified.flushed {
        invalidate_all(st, out);
    }
    for key in &modified.keys {
        invalidate_key(st, out, key, writer);
    }
}

/// One changed key: the clients that hold it hear of it now; BCAST prefixes note it for
/// `flush_prefixes`.
fn invalidate_key(st: &mut State, out: &mut Outbox, key: &[u8], writer: Option<u64>) {
    for (prefix, p) in st.prefixes.iter_mut() {
        if key.starts_with(prefix) {
            p.pending.insert(Key::from(key), writer);
        }
    }
    let Some(ids) = st.keys.remove(key) else { return };
    st.items -= ids.len();
    for id in ids {
        let own_write = writer == Some(id);
        let wants = st.clients.get(&id).is_some_and(|t| !(t.options.bcast || (t.options.noloop && own_write)));
        if wants {
            let keys = Frame::Array(vec![Frame::Bulk(Bytes::copy_from_slice(key))]);
            send(st, out, id, keys, key.len());
        }
    }
}

/// A flush: every tracking client hears a null, and the table empties.
fn invalidate_all(st: &mut State, out: &mut Outbox) {
    let ids: Vec<u64> = st.clients.keys().copied().collect();
    for id in ids {
        send(st, out, id, Frame::Null, 0);
    }
    st.keys.clear();
    st.items = 0;
}

/// Sends each BCAST client the keys changed under each of its prefixes, one message per
/// prefix (leaving out its own writes under NOLOOP).
fn flush_prefixes(st: &mut State, out: &mut Outbox) {
    let mut due = Vec::new();
    for p in st.prefixes.values_mut() {
        if p.pending.is_empty() {
            continue;
        }
        let pending = std::mem::take(&mut p.pending);
        for &id in &p.clients {
            let noloop = st.clients.get(&id).is_some_and(|t| t.options.noloop);
            let keys: Vec<&Key> = pending.iter().filter(|(_, w)| !(noloop && **w == Some(id))).map(|(k, _)| k).collect();
            if !keys.is_empty() {
                let size = keys.iter().map(|k| k.len()).sum();
                due.push((id, Frame::Array(keys.into_iter().map(|k| Frame::Bulk(Bytes::copy_from_slice(k))).collect()), size));
            }
        }
    }
    for (id, keys, size) in due {
        send(st, out, id, keys, size);
    }
}

/// Delivers an invalidation (`keys`: an array of keys, or null for a flush) for tracking
/// client `id`, to it or to its redirect target.
fn send(st: &mut State, out: &mut Outbox, id: u64, keys: Frame, size: usize) {
    let Some(tracker) = st.clients.get_mut(&id) else { return };
    let redirect = tracker.options.redirect;
    let (target, redirected) = if redirect == 0 {
        (tracker.handle.clone(), false)
    } else {
        match out.clients.get(redirect) {
            Some(target) => (target, true),
            None => {
                tracker.broken = true;
                if tracker.handle.resp.load(Ordering::Relaxed) >= 3 {
                    let frame = Frame::Push(vec![Frame::bulk("tracking-redir-broken"), Frame::Integer(redirect as i64)]);
                    let handle = tracker.handle.clone();
                    out.deliver(&handle, frame, 32);
                }
                return;
            }
        }
    };
    let frame = if target.resp.load(Ordering::Relaxed) >= 3 {
        Frame::Push(vec![Frame::bulk("invalidate"), keys])
    } else if redirected && target.subscriptions.load(Ordering::Relaxed) > 0 {
        Frame::Push(vec![Frame::bulk("message"), Frame::bulk(INVALIDATE_CHANNEL), keys])
    } else {
        // A RESP2 connection cannot take a push between replies.
        return;
    };
    out.deliver(&target, frame, size + 48);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn prefixes_must_not_overlap() {
        assert_eq!(check_prefixes(&[], &[b("FOO"), b("BAR")]), Ok(()));
        assert_eq!(check_prefixes(&[], &[b("FOOBAR"), b("FOO")]), Err(TrackingError::OverlapsGiven("FOOBAR".into(), "FOO".into())));
        assert_eq!(check_prefixes(&[b("FOO"), b("BAR")], &[b("FO")]), Err(TrackingError::OverlapsExisting("FO".into(), "FOO".into())));
        assert_eq!(check_prefixes(&[b("BAR")], &[b("BARB")]), Err(TrackingError::OverlapsExisting("BARB".into(), "BAR".into())));
    }

    #[test]
    fn table_counts_keys_and_items() {
        let mut st = State::default();
        remember(&mut st, 1, b"a");
        remember(&mut st, 2, b"a");
        remember(&mut st, 1, b"a");
        remember(&mut st, 1, b"b");
        assert_eq!((st.keys.len(), st.items), (2, 3));
        let clients = ClientRegistry::default();
        let mut out = Outbox { clients: &clients, current: None, own: Vec::new() };
        invalidate_key(&mut st, &mut out, b"a", None);
        assert_eq!((st.keys.len(), st.items), (1, 1));
        invalidate_all(&mut st, &mut out);
        assert_eq!((st.keys.len(), st.items), (0, 0));
    }
}
