//! `Ctx`: what a data command sees while it runs — the shards it locked, the current
//! database, the time, and typed accessors that apply lazy expiry and Redis's type checks.
//!
//! Reads hand out shared references only. Every write goes through a method that stamps the
//! write's `Version` and records its replicated effect itself — `put`, `incr`,
//! `set_deadline` here, and the edit API in `db::edit` (`edit`, `edit_or_create`,
//! `remove_elements`, `delete`, `persist`, `flush_db`) — so a command cannot forget either.
//! `finish` is where an in-place edit ends (`settle` and `apply_settled` where the edit still
//! holds the entry it found): it keeps the expiry index and watchers in step, deletes
//! collections that became empty, and notes keys blocked clients may wait on.
//!
//! Wherever a write touches a key's watchers (Redis's `signalModifiedKey`), it also notes the
//! key in `modified` for client-side caching (`crate::tracking`), which costs one relaxed
//! load while no client tracks.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::effect::Effect;
use super::entry::{Collection, Field, ListValue, Name, Names};
use super::zset::SortedSet;
use super::{Db, Entry, EntryMut, EntryRef, Expiry, HashedKey, Key, KeyEntry, KeyHint, KeyLike, Kind, Locks, Lookup, Modified, Shard, Store, Value};
use crate::error::CmdError;
use crate::hlc::Version;
use crate::notify::{class, Event};
use crate::repl::wire::OpBuffer;

pub struct Ctx<'a> {
    pub store: &'a Store,
    pub db: usize,
    pub now_ms: u64,
    pub locks: Locks<'a>,
    /// `(db, key)` of lists and sorted sets that gained elements: blocked clients wake on them.
    pub ready_keys: Vec<(usize, Key)>,
    /// The replicated effects of this command's writes, encoded and framed for the backlog
    /// (`repl::wire::OpBuffer`; only while replicating).
    pub effects: OpBuffer,
    /// Keyspace events to publish once the locks are dropped (`crate::notify`).
    pub events: Vec<Event>,
    /// Where in `events` the `del` of a collection this command emptied is: the command's
    /// own event goes before it, as in Redis (`lpop` then `del`).
    emptied_at: Option<usize>,
    /// Keys this command's writes modified (only while a client tracks keys).
    pub modified: Modified,
    /// The client is `CLIENT NO-TOUCH` and the command is not `TOUCH`: lookups leave the
    /// access time alone.
    pub no_touch: bool,
    /// The command's first key as its lock hashed it: a lookup of those bytes takes its
    /// hashes from here (`KeyHint`). `KeyHint::NONE` where nobody hashed one ahead.
    pub key_hint: KeyHint,
}

/// What a whole-value write (`Ctx::put_with_ttl`) does to the key's expiry register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    /// The key keeps its TTL, if it has one (`SET KEEPTTL`).
    Keep,
    /// The key becomes persistent (a plain `SET`).
    Clear,
    /// The key expires at this Unix time in ms (`SET EX`, `SETEX`).
    At(u64),
}

impl<'a> Ctx<'a> {
    pub fn new(store: &'a Store, db: usize, now_ms: u64, locks: Locks<'a>) -> Ctx<'a> {
        Ctx {
            store,
            db,
            now_ms,
            locks,
            ready_keys: Vec::new(),
            effects: OpBuffer::default(),
            events: Vec::new(),
            emptied_at: None,
            modified: Modified::default(),
            no_touch: false,
            key_hint: KeyHint::NONE,
        }
    }

    /// Records the keyspace event `name` of `class` for `key` in the current database.
    #[inline]
    pub fn notify(&mut self, class: u32, name: &'static str, key: &[u8]) {
        self.notify_in(self.db, class, name, key);
    }

    /// `notify` in database `db` (one relaxed load when notifications are off).
    #[inline]
    pub fn notify_in(&mut self, db: usize, class: u32, name: &'static str, key: &[u8]) {
        if self.store.notify.wants(class) {
            self.record_event(Event { class, name, db, key: Bytes::copy_from_slice(key) });
        }
    }

    fn record_event(&mut self, event: Event) {
        record_event(&mut self.events, &mut self.emptied_at, event);
    }

    /// The events recorded so far, for publishing (`Notifier::publish`).
    pub fn take_events(&mut self) -> Vec<Event> {
        self.emptied_at = None;
        std::mem::take(&mut self.events)
    }

    pub(super) fn emit(&mut self, op: impl FnOnce() -> Effect) {
        if self.store.replicating() {
            self.push_effect(op());
        }
    }

    /// Records a write's effect for the peers, encoded once, here.
    pub(super) fn push_effect(&mut self, op: Effect) {
        self.effects.push(op);
    }

    /// A local `FUNCTION LOAD` (`code`) or `FUNCTION DELETE` (`None`) of library `name`: the
    /// library's register is stamped, written and emitted in one step (`db::functions`), like
    /// every other write. Returns the version it was written at.
    pub fn write_library(&mut self, name: &str, code: Option<Bytes>) -> Version {
        let (version, effect) = self.store.write_library(name, code);
        self.emit(|| effect);
        version
    }

    /// A local `FUNCTION FLUSH`: a flush point over the libraries, stamped and emitted even when
    /// the node holds none (it still dominates older loads on their way).
    pub fn flush_libraries(&mut self) {
        let effect = self.store.flush_libraries();
        self.emit(|| effect);
    }

    /// Emits a published message for every node's subscribers.
    pub fn emit_publish(&mut self, channel: &[u8], message: &[u8]) {
        self.emit(|| Effect::publish(channel, message));
    }

    /// `key` with its hashes: the command's first key takes them from `key_hint` (hashed
    /// before the command ran), any other is hashed here. Every lookup of a key by its bytes
    /// goes through this (or `parts`, for the shard alone).
    #[inline]
    pub(super) fn hashed<'k, K: KeyLike + ?Sized>(&self, key: &'k K) -> HashedKey<'k> {
        key.hashed_with(self.key_hint)
    }

    /// The database and the locked shard of `key`. Pass a `HashedKey` where the key is used
    /// more than once: a byte string is hashed on each call.
    pub(super) fn parts<K: KeyLike + ?Sized>(&mut self, db: usize, key: &K) -> (&'a Db, &mut Shard) {
        let shard = key.shard_with(self.key_hint);
        (self.store.db(db), self.locks.get(db, shard))
    }

    /// Runs `f` on one shard: the held lock inside a transaction, else a lock taken just for
    /// this call (whole-database commands walk shards one at a time).
    pub fn with_shard<R>(&mut self, db: usize, shard: usize, f: impl FnOnce(&Db, &mut Shard) -> R) -> R {
        let dbref = self.store.db(db);
        if self.locks.holds(db, shard) {
            f(dbref, self.locks.get(db, shard))
        } else {
            f(dbref, &mut self.store.lock_shard(db, shard))
        }
    }

    /// The locked shard that holds `key` in database `db` (for watch registration).
    pub fn shard_mut(&mut self, db: usize, key: &[u8]) -> &mut Shard {
        self.parts(db, key).1
    }

    /// The live entry in database `db`; an expired one is deleted on the way (lazy expiry).
    pub(super) fn entry_mut_in<K: KeyLike + ?Sized>(&mut self, db: usize, key: &K) -> Option<EntryMut<'_>> {
        self.live_entry_in(db, self.hashed(key), true)
    }

    /// `entry_mut_in`, updating the key's access time (LRU clock or LFU counter) only if
    /// `touch`.
    fn live_entry_in(&mut self, db: usize, hashed: HashedKey<'_>, touch: bool) -> Option<EntryMut<'_>> {
        self.live_entry_and_effects(db, hashed, touch).0
    }

    /// The live entry to edit in database `db` (`entry_mut_in`), with where the edit's effect
    /// goes while replicating (`None` standalone): `settle` writes it with the entry in hand.
    pub(super) fn entry_to_edit(&mut self, db: usize, hashed: HashedKey<'_>) -> (Option<EntryMut<'_>>, Option<&mut OpBuffer>) {
        let replicating = self.store.replicating();
        let (entry, effects) = self.live_entry_and_effects(db, hashed, true);
        (entry, replicating.then_some(effects))
    }

    /// The locked shard of `hashed` in database `db`, with where a write's effect goes while
    /// replicating (`None` standalone), for a write that holds the shard to write its effect.
    fn shard_and_effects(&mut self, db: usize, hashed: &HashedKey<'_>) -> (&mut Shard, Option<&mut OpBuffer>) {
        let replicating = self.store.replicating();
        // Field by field: the shard borrows `locks`, the effect goes to `effects`.
        let Ctx { locks, effects, .. } = self;
        (locks.get(db, hashed.shard()), replicating.then_some(effects))
    }

    /// `live_entry_in`, and the command's effects beside it.
    fn live_entry_and_effects(&mut self, db: usize, hashed: HashedKey<'_>, touch: bool) -> (Option<EntryMut<'_>>, &mut OpBuffer) {
        // Field by field: the entry found borrows `locks` only, so a lazy expiry can still
        // note the key in `modified` and record its event, and an edit write its effect.
        let Ctx { store, locks, modified, events, emptied_at, now_ms, no_touch, effects, .. } = self;
        let (store, now, key) = (*store, *now_ms, hashed.key());
        let entry = match locks.get(db, hashed.shard()).live_mut(store.db(db), &hashed, now) {
            Lookup::Live(mut entry) => {
                if touch && !*no_touch {
                    super::evict::on_access(&mut entry, now, store.lfu_access.load(Ordering::Relaxed));
                }
                Some(entry)
            }
            Lookup::Missing => None,
            Lookup::Expired => {
                modified.note(store, key);
                store.stats.expired_keys.fetch_add(1, Ordering::Relaxed);
                if store.notify.wants(class::EXPIRED) {
                    let event = Event { class: class::EXPIRED, name: "expired", db, key: Bytes::copy_from_slice(key) };
                    record_event(events, emptied_at, event);
                }
                None
            }
        };
        (entry, effects)
    }

    /// Like `get`, leaving the key's access time alone (Redis's `LOOKUP_NOTOUCH`: `TYPE`,
    /// `EXISTS`, the `TTL` family and `OBJECT` look at a key without using it).
    pub fn peek<K: KeyLike + ?Sized>(&mut self, key: &K) -> Option<&Entry> {
        self.peek_ref(key).map(EntryRef::entry)
    }

    /// `peek` with the key's expiry register (`deadline`, `last_write`).
    pub fn peek_ref<K: KeyLike + ?Sized>(&mut self, key: &K) -> Option<EntryRef<'_>> {
        self.live_entry_in(self.db, self.hashed(key), false).map(EntryMut::into_ref)
    }

    /// `peek`, counting a keyspace hit or miss (and firing `keymiss`, see `lookup_read`).
    pub fn peek_read<K: KeyLike + ?Sized>(&mut self, key: &K) -> Option<EntryRef<'_>> {
        self.counted_lookup(self.hashed(key), false)
    }

    pub fn get_in<K: KeyLike + ?Sized>(&mut self, db: usize, key: &K) -> Option<&Entry> {
        self.get_ref_in(db, key).map(EntryRef::entry)
    }

    /// `get_in` with the key's expiry register (`deadline`, `last_write`).
    pub fn get_ref_in<K: KeyLike + ?Sized>(&mut self, db: usize, key: &K) -> Option<EntryRef<'_>> {
        self.entry_mut_in(db, key).map(EntryMut::into_ref)
    }

    pub fn get<K: KeyLike + ?Sized>(&mut self, key: &K) -> Option<&Entry> {
        self.get_in(self.db, key)
    }

    /// Like `get`, counting a keyspace hit or miss: Redis's `lookupKeyRead`, which read
    /// commands use, and write commands for the keys they only read (`SUNIONSTORE`'s
    /// sources, `SET ... GET`'s old value). A miss fires the `keymiss` event (class `m`),
    /// as Redis 7.0's; with that class off, the check is one relaxed load.
    pub fn lookup_read<K: KeyLike + ?Sized>(&mut self, key: &K) -> Option<&Entry> {
        self.counted_lookup(self.hashed(key), true).map(EntryRef::entry)
    }

    /// A read lookup that counts a keyspace hit or miss and fires `keymiss` on a miss,
    /// touching the key's access time only if `touch`. With `keymiss` wanted, a miss is found
    /// first by a lookup that leaves the access time alone (the event needs `self`, which the
    /// found entry would still borrow); otherwise one lookup.
    fn counted_lookup(&mut self, key: HashedKey<'_>, touch: bool) -> Option<EntryRef<'_>> {
        if self.store.notify.wants(class::KEY_MISS) && self.peek(&key).is_none() {
            self.store.stats.keyspace_misses.incr();
            self.notify(class::KEY_MISS, "keymiss", key.key());
            return None;
        }
        let stats = &self.store.stats;
        // A read moves a step of a collection's growth, as a write does (`Value::step_growth`).
        let found = self.live_entry_in(self.db, key, touch).map(|mut entry| {
            entry.value.step_growth();
            entry.into_ref()
        });
        let counter = if found.is_some() { &stats.keyspace_hits } else { &stats.keyspace_misses };
        counter.incr();
        found
    }

    /// Whether `key` is live, without touching it.
    pub fn exists<K: KeyLike + ?Sized>(&mut self, key: &K) -> bool {
        self.peek(key).is_some()
    }

    /// The type of `key`, without touching it.
    pub fn kind<K: KeyLike + ?Sized>(&mut self, key: &K) -> Option<Kind> {
        self.peek(key).map(|e| e.value.kind())
    }

    /// A version for a write to `key` that supersedes what is stored.
    pub(super) fn next_version<K: KeyLike + ?Sized>(&mut self, key: &K) -> Version {
        let stored = self.get_ref_in(self.db, key).map(EntryRef::last_write);
        self.store.stamp_at(self.now_ms, stored)
    }

    /// Replaces the key's value. `keep_ttl` keeps its expiry (SET KEEPTTL, in-place edits);
    /// otherwise the key becomes persistent, as a Redis `SET` does.
    pub fn put<K: KeyLike + ?Sized>(&mut self, key: &K, value: Value, keep_ttl: bool) -> Version {
        self.put_in(self.db, key, value, keep_ttl)
    }

    pub fn put_in<K: KeyLike + ?Sized>(&mut self, db: usize, key: &K, value: Value, keep_ttl: bool) -> Version {
        self.put_hashed(db, self.hashed(key), value, if keep_ttl { Ttl::Keep } else { Ttl::Clear })
    }

    /// Replaces the key's value and does `ttl` to its expiry (`SET` with `EX`, `KEEPTTL` or
    /// neither, `SETEX`): one write, at one version, for the value and the register.
    pub fn put_with_ttl<K: KeyLike + ?Sized>(&mut self, key: &K, value: Value, ttl: Ttl) -> Version {
        self.put_hashed(self.db, self.hashed(key), value, ttl)
    }

    fn put_hashed(&mut self, db: usize, hashed: HashedKey<'_>, value: Value, ttl: Ttl) -> Version {
        let key = hashed.key();
        /// What the single lookup found. `register`: the deadline the key's expiry register
        /// takes at the write's version, if the write sets it (0 for a dropped TTL).
        enum Found {
            Live { version: Version, register: Option<u64> },
            Expired(Version),
            Missing { version: Version, register: Option<u64> },
        }
        let (keep_ttl, deadline) = match ttl {
            Ttl::Keep => (true, None),
            Ttl::Clear => (false, None),
            Ttl::At(deadline_ms) => (false, Some(deadline_ms)),
        };
        // A counter copied or renamed starts a new base: it travels as its value.
        let value = match value {
            Value::Counter(c) => Value::Int(c.value().unwrap_or(0)),
            other => other,
        };
        let is_collection = matches!(value, Value::Hash(_) | Value::Set(_) | Value::ZSet(_));
        self.note_ready(db, key, &value);
        let (store, now) = (self.store, self.now_ms);
        let replicating = store.replicating();
        // A string's op (most writes) is encoded in the lookup that writes it; a collection's
        // after its members are restamped, and an expired key's once it is rewritten, below.
        let encode_early = replicating && !is_collection;
        let (dbref, shard, effects) = (store.db(db), self.locks.get(db, hashed.shard()), &mut self.effects);
        // One probe: a live key (the common case) is overwritten in place, a missing one
        // inserted where the probe found room.
        let found = match shard.entry(&hashed) {
            KeyEntry::Found(mut entry) if !entry.is_expired(now) => {
                let version = store.stamp_at(now, Some(entry.last_write()));
                entry.value = value;
                entry.set_version(version);
                if encode_early {
                    effects.push_value(db, key, &entry.value, version, &[]);
                }
                // A write without a TTL drops the one the key has.
                let drops_ttl = entry.expiry().is_some() && !keep_ttl;
                Found::Live { version, register: deadline.or(drops_ttl.then_some(0)) }
            }
            KeyEntry::Found(mut entry) => {
                let old = entry.last_write();
                entry.value = value;
                Found::Expired(old)
            }
            KeyEntry::Missing(missing) => {
                // Stamped after what the shard remembers of the key and the last flush, so
                // the write supersedes them here as on every peer.
                let version = store.stamp_at(now, Some(missing.remembered().max(dbref.flushed.get())));
                if encode_early {
                    effects.push_value(db, key, &value, version, &[]);
                }
                missing.orphan_expiry.remove(key);
                missing.tombstones.remove(key);
                match deadline {
                    // Created with its register: one allocation.
                    Some(deadline_ms) => missing.insert_expiring(dbref, Entry::new(value, version), Expiry { deadline_ms, version }),
                    None => missing.insert(Entry::new(value, version)),
                }
                Found::Missing { version, register: deadline }
            }
        };
        let (version, register) = match found {
            Found::Live { version, register } => {
                if let Some(deadline_ms) = register {
                    // Setting or dropping a TTL is itself a write to the expiry register.
                    shard.set_expiry(dbref, &hashed, Some(Expiry { deadline_ms, version }));
                }
                (version, register)
            }
            Found::Expired(old) => {
                // The stale entry expired before this write: count it, then start afresh.
                store.stats.expired_keys.fetch_add(1, Ordering::Relaxed);
                let version = store.stamp_at(now, Some(old));
                let value = shard.remove(dbref, &hashed).map(|e| e.entry.value);
                if let Some(value) = value {
                    shard.insert(dbref, &hashed, Entry::new(value, version));
                    shard.orphan_expiry.remove(key);
                    if let Some(deadline_ms) = deadline {
                        shard.set_expiry(dbref, &hashed, Some(Expiry { deadline_ms, version }));
                    }
                }
                (version, deadline)
            }
            Found::Missing { version, register } => (version, register),
        };
        if !matches!(found, Found::Live { .. }) {
            if matches!(found, Found::Expired(_)) {
                self.notify_in(db, class::EXPIRED, "expired", key);
            }
            self.notify_in(db, class::NEW, "new", key);
        }
        let (_, shard) = self.parts(db, &hashed);
        if is_collection {
            if let Some(mut entry) = shard.raw_mut(&hashed) {
                // A whole-value write: every field and member is as new as the key.
                restamp(&mut entry.value, version);
            }
        }
        self.note_write(db, hashed);
        if replicating {
            if !encode_early || matches!(found, Found::Expired(_)) {
                // Encoded from the stored value, straight into this command's ops.
                let (shard, effects) = (self.locks.get(db, hashed.shard()), &mut self.effects);
                if let Some(entry) = shard.raw(&hashed) {
                    // A whole-value write replaces whatever the key held: an implicit delete.
                    if is_collection {
                        effects.push_delete(db, key, version);
                    }
                    effects.push_value(db, key, &entry.value, version, &all_names(&entry.value));
                }
            }
            if let Some(deadline_ms) = register {
                self.effects.push_expire(db, key, deadline_ms, version);
            }
            // A kept TTL travels re-stamped: peers drop registers older than a whole write.
            if keep_ttl {
                self.restamp_ttl(db, hashed, version);
            }
        }
        version
    }

    /// Ends an in-place edit of a live key at `version`. If the edit changed the value, it
    /// deletes the key if it became an empty collection, touches watchers, wakes blocked
    /// clients and counts a change. While replicating, `tombstones` names elements the edit
    /// removed although this node did not hold them: they get tombstones too, so the write
    /// still dominates older adds of them made elsewhere (DESIGN.md, Merge semantics). The
    /// effect carries every changed and tombstoned name. An edit that did neither writes
    /// nothing.
    pub(super) fn finish<K: KeyLike + ?Sized>(&mut self, db: usize, key: &K, version: Version, tombstones: &[Bytes]) {
        self.finish_hashed(db, self.hashed(key), version, tombstones)
    }

    fn finish_hashed(&mut self, db: usize, hashed: HashedKey<'_>, version: Version, tombstones: &[Bytes]) {
        let (shard, effects) = self.shard_and_effects(db, &hashed);
        let Some(mut entry) = shard.raw_mut(&hashed) else {
            return;
        };
        if let Some(settled) = settle(&mut entry, db, hashed.key(), version, tombstones, effects) {
            self.apply_settled(db, hashed, settled);
        }
    }

    /// The rest of `finish`, once the edited entry is let go: what needs the shard (an emptied
    /// collection's removal) or the command's context (its effects, events, blocked clients).
    pub(super) fn apply_settled(&mut self, db: usize, hashed: HashedKey<'_>, settled: Settled) {
        let key = hashed.key();
        let Settled { version, changed, emptied, whole, ready, restamp_ttl } = settled;
        if changed {
            if let Some(had_ttl) = emptied {
                // Redis deletes an emptied collection. Replication keeps its field tombstones (a
                // ghost), so a concurrent field added on another node survives, as per-field LWW
                // says.
                let replicating = self.store.replicating();
                let (dbref, shard) = self.parts(db, &hashed);
                if replicating {
                    shard.bury(dbref, &hashed);
                    if whole {
                        // An emptied list travels as an empty list, which peers merge as a
                        // delete at `version` (`merge::merge_locked`): this node keeps that
                        // delete's tombstone too, or an older write of the key arriving later
                        // would bring it back here and nowhere else.
                        shard.tombstones.get_or_default(key).clear(version);
                    }
                    if had_ttl {
                        // Redis drops an emptied key's TTL: say so with a newer register, so a
                        // member added concurrently elsewhere does not revive the old one
                        // (`settle` wrote its effect).
                        shard.orphan_expiry.insert(key, Expiry { deadline_ms: 0, version });
                    }
                } else {
                    shard.remove(dbref, &hashed);
                }
                if self.store.notify.wants(class::GENERIC) {
                    self.events.push(Event { class: class::GENERIC, name: "del", db, key: Bytes::copy_from_slice(key) });
                    self.emptied_at = Some(self.events.len() - 1);
                }
            } else if ready {
                self.ready_keys.push((db, key.into()));
            }
            self.note_write(db, hashed);
        }
        if let Some(deadline_ms) = restamp_ttl {
            self.restamp_deadline(db, hashed, deadline_ms, version);
        }
    }

    /// After a whole-value write that keeps the key's TTL: the register takes the write's
    /// version, locally and on peers.
    fn restamp_ttl(&mut self, db: usize, hashed: HashedKey<'_>, version: Version) {
        let deadline = self.parts(db, &hashed).1.raw(&hashed).and_then(EntryRef::expiry).map(|e| e.deadline_ms);
        if let Some(deadline_ms) = deadline {
            self.restamp_deadline(db, hashed, deadline_ms, version);
        }
    }

    /// `restamp_ttl` of a key whose deadline the caller read.
    fn restamp_deadline(&mut self, db: usize, hashed: HashedKey<'_>, deadline_ms: u64, version: Version) {
        let (dbref, shard) = self.parts(db, &hashed);
        shard.set_expiry(dbref, &hashed, Some(Expiry { deadline_ms, version }));
        self.effects.push_expire(db, hashed.key(), deadline_ms, version);
    }

    /// Increments the counter at `key` by `delta`, creating it or converting an integer
    /// string as `INCR` does. Returns the new value. Changes nothing on an error (WRONGTYPE,
    /// not an integer, overflow).
    pub fn incr<K: KeyLike + ?Sized>(&mut self, key: &K, delta: i64) -> Result<i64, CmdError> {
        self.incr_hashed(self.hashed(key), delta)
    }

    fn incr_hashed(&mut self, hashed: HashedKey<'_>, delta: i64) -> Result<i64, CmdError> {
        let now = self.now_ms;
        let db = self.db;
        let key = hashed.key();
        let (store, origin) = (self.store, self.store.counter_origin);
        // The common case, a key that is a counter already: stamped, added and its effect
        // taken with one lookup (what `finish` does for a counter, without its second probe).
        let existing = match self.entry_to_edit(db, hashed) {
            (Some(mut entry), effects) => {
                let last_write = entry.last_write();
                match &mut entry.value {
                    Value::Counter(c) => {
                        let version = store.stamp_at(now, Some(last_write));
                        let next = c.add(origin, delta, version).ok_or(CmdError::Overflow)?;
                        entry.set_version(version);
                        if let Some(effects) = effects {
                            effects.push_value(db, key, &entry.value, version, &[]);
                        }
                        self.note_write(db, hashed);
                        return Ok(next);
                    }
                    // Not a counter yet: an integer string becomes one.
                    Value::Int(n) => Some((*n, entry.version())),
                    Value::Str(s) => Some((crate::parse::parse_i64(s).ok_or(CmdError::NotInteger)?, entry.version())),
                    _ => return Err(CmdError::WrongType),
                }
            }
            (None, _) => None,
        };
        let Some((n, v)) = existing else {
            // A missing key starts a counter after everything the key's ghost remembers, as
            // on replicas; it is made with its first increment, then stored (one probe).
            let dbref = store.db(db);
            let flushed = dbref.flushed.get();
            let (shard, effects) = self.shard_and_effects(db, &hashed);
            let ghost = shard.tombstones.remove(key);
            let cleared = ghost.map_or(Version::ZERO, |g| g.newest()).max(flushed);
            let version = store.stamp_at(now, Some(cleared));
            let mut counter = Box::new(super::counter::Counter::new(0, cleared));
            let next = counter.add(origin, delta, version).ok_or(CmdError::Overflow)?;
            let value = Value::Counter(counter);
            if let Some(effects) = effects {
                effects.push_value(db, key, &value, version, &[]);
            }
            shard.insert(dbref, &hashed, Entry::new(value, version));
            shard.adopt_orphan_expiry(dbref, key, cleared);
            self.notify_in(db, class::NEW, "new", key);
            self.note_write(db, hashed);
            return Ok(next);
        };
        // An integer string becomes the counter's base (its SET is the base version), unless
        // the increment overflows: then it stays as it is.
        n.checked_add(delta).ok_or(CmdError::Overflow)?;
        let version = self.next_version(&hashed);
        if let Some(mut e) = self.entry_mut_in(db, &hashed) {
            e.value = Value::Counter(Box::new(super::counter::Counter::new(n, v)));
        }
        let Some(Value::Counter(c)) = self.entry_mut_in(db, &hashed).map(|e| &mut e.into_entry().value) else {
            return Err(CmdError::WrongType);
        };
        let next = c.add(origin, delta, version).ok_or(CmdError::Overflow)?;
        self.finish_hashed(db, hashed, version, &[]);
        Ok(next)
    }

    /// A write to a key that stays: its watchers are touched, client-side caching hears of
    /// it, and it counts as a change (`dirty`).
    fn note_write(&mut self, db: usize, hashed: HashedKey<'_>) {
        let key = hashed.key();
        let (_, shard) = self.parts(db, &hashed);
        shard.touch(key);
        self.modified.note(self.store, key);
        self.store.stats.dirty.incr();
    }

    fn note_ready(&mut self, db: usize, key: &[u8], value: &Value) {
        if matches!(value, Value::List(_) | Value::ZSet(_)) {
            self.ready_keys.push((db, key.into()));
        }
    }

    /// Sets the expiry register of a live key to `deadline_ms` (0 = persist).
    pub fn set_deadline<K: KeyLike + ?Sized>(&mut self, key: &K, deadline_ms: u64) {
        self.set_deadline_in(self.db, key, deadline_ms)
    }

    pub fn set_deadline_in<K: KeyLike + ?Sized>(&mut self, db: usize, key: &K, deadline_ms: u64) {
        let hashed = self.hashed(key);
        let key = hashed.key();
        let stored = self.get_ref_in(db, &hashed).map(EntryRef::last_write);
        let version = self.store.stamp_at(self.now_ms, stored);
        let (dbref, shard) = self.parts(db, &hashed);
        shard.set_expiry(dbref, &hashed, Some(Expiry { deadline_ms, version }));
        self.note_write(db, hashed);
        if self.store.replicating() {
            self.effects.push_expire(db, key, deadline_ms, version);
        }
    }

    /// Sets a live key's eviction clock (`RESTORE`'s IDLETIME and FREQ, `evict::restore_access`).
    /// Not a write: access times are each node's own and never replicated.
    pub fn set_access<K: KeyLike + ?Sized>(&mut self, key: &K, hint: super::evict::AccessHint, lfu: bool) {
        let now = self.now_ms;
        if let Some(mut entry) = self.live_entry_in(self.db, self.hashed(key), false) {
            super::evict::restore_access(&mut entry, hint, now, lfu);
        }
    }

    pub fn deadline<K: KeyLike + ?Sized>(&mut self, key: &K) -> Option<u64> {
        self.get_ref_in(self.db, key).and_then(EntryRef::deadline)
    }

    /// Reads a string value (`None` if missing; WRONGTYPE for other types).
    pub fn string<K: KeyLike + ?Sized>(&mut self, key: &K) -> Result<Option<Bytes>, CmdError> {
        let found = self.lookup_read(key);
        Self::string_of(found)
    }

    /// `string` for a write command about to change the key (`APPEND`, `SETBIT`): Redis's
    /// `lookupKeyWrite`, which counts no hit or miss and fires no `keymiss`.
    pub fn string_for_write<K: KeyLike + ?Sized>(&mut self, key: &K) -> Result<Option<Bytes>, CmdError> {
        let found = self.get(key);
        Self::string_of(found)
    }

    fn string_of(found: Option<&Entry>) -> Result<Option<Bytes>, CmdError> {
        match found.map(|e| &e.value) {
            None => Ok(None),
            Some(Value::Str(s)) => Ok(Some(Bytes::copy_from_slice(s))),
            Some(Value::Int(n)) => Ok(Some(Bytes::copy_from_slice(itoa::Buffer::new().format(*n).as_bytes()))),
            Some(Value::Counter(c)) => Ok(Some(Bytes::from(c.value().unwrap_or(0).to_string()))),
            Some(_) => Err(CmdError::WrongType),
        }
    }
}

/// Typed read accessors, one per collection type: the live value if present, WRONGTYPE on a
/// key of another type. Writes go through `Ctx::edit` and friends (`db::edit`).
macro_rules! collection_accessor {
    ($get:ident, $variant:ident, $ty:ty) => {
        impl<'a> Ctx<'a> {
            pub fn $get<K: KeyLike + ?Sized>(&mut self, key: &K) -> Result<Option<&$ty>, CmdError> {
                match self.get(key).map(|e| &e.value) {
                    None => Ok(None),
                    Some(Value::$variant(v)) => Ok(Some(v)),
                    Some(_) => Err(CmdError::WrongType),
                }
            }
        }
    };
}

collection_accessor!(hash, Hash, Collection<Field>);
collection_accessor!(set, Set, Collection<Version>);
collection_accessor!(zset, ZSet, SortedSet);
collection_accessor!(list, List, ListValue);

/// Every field or member name of a collection (for a whole-value effect).
fn all_names(value: &Value) -> Vec<Name> {
    match value {
        Value::Hash(h) => h.keys().cloned().collect(),
        Value::Set(s) => s.keys().cloned().collect(),
        Value::ZSet(z) => z.iter().map(|(m, _)| m.clone()).collect(),
        _ => Vec::new(),
    }
}

/// Stamps every field or member of a freshly written collection with the write's version.
fn restamp(value: &mut Value, version: Version) {
    match value {
        Value::Hash(h) => {
            h.live_mut().values_mut().for_each(|f| f.version = version);
            h.cleared = version;
            h.take_touched();
        }
        Value::Set(s) => {
            s.live_mut().values_mut().for_each(|v| *v = version);
            s.cleared = version;
            s.take_touched();
        }
        Value::ZSet(z) => z.restamp(version),
        _ => {}
    }
}

/// What ending an in-place edit leaves to do once its entry is let go (`Ctx::apply_settled`):
/// `settle` works it out with the entry in hand, so an edit that found its key probes the
/// table once (its `finish` looked the key up again: ~100 instructions a collection write).
pub(super) struct Settled {
    version: Version,
    /// The value changed (not only tombstones named).
    changed: bool,
    /// It became an empty collection, to be deleted: whether it had a TTL.
    emptied: Option<bool>,
    /// It replicates whole (a list).
    whole: bool,
    /// A list or sorted set changed: blocked clients may be served.
    ready: bool,
    /// A list's whole-value effect keeps its TTL: the register is restamped (its deadline).
    restamp_ttl: Option<u64>,
}

/// Ends an in-place edit of `entry` (`key` in `db`) at `version` as far as the entry goes: takes
/// what the edit changed, adds the tombstones `tombstones` names (while replicating), stamps
/// the entry and writes the effect into `effects` (the command's, while replicating: `None`
/// standalone). The op is written here, from the entry in hand, into the command's buffer: an
/// op of its own, appended once the entry was let go, cost a collection write ~230
/// instructions (its buffer taken and recycled, its bytes copied again). `None` when the edit
/// changed and named nothing (nothing is written). `Ctx::apply_settled` does the rest.
pub(super) fn settle(
    entry: &mut EntryMut<'_>,
    db: usize,
    key: &[u8],
    version: Version,
    tombstones: &[Bytes],
    effects: Option<&mut OpBuffer>,
) -> Option<Settled> {
    let replicating = effects.is_some();
    let changes = take_changes(&mut entry.value);
    let changed = changes.is_some();
    let mut names = changes.unwrap_or_default();
    // The names taken are sorted and distinct already (`Changes::take`).
    if replicating && !tombstones.is_empty() {
        names.extend(tombstones.iter().filter(|n| add_tombstone(&mut entry.value, n, version)).map(|n| Name::from(&n[..])));
        names.sort_unstable();
        names.dedup();
    }
    let whole = matches!(entry.value, Value::List(_));
    if !changed && (names.is_empty() || whole) {
        return None;
    }
    entry.set_version(version);
    let emptied = (changed && entry.value.is_empty_collection()).then(|| entry.expiry().is_some());
    if let Some(effects) = effects {
        // An emptied collection loses its TTL (`Ctx::apply_settled`): the register's newer
        // version goes out first.
        if emptied == Some(true) {
            effects.push_expire(db, key, 0, version);
        }
        // A collection's effect names the states of what the edit changed; those it removed
        // get their tombstones there (`Collection::settled`). Standalone nothing is kept of a
        // removed element (a tombstone there would never be collected).
        match &mut entry.value {
            Value::Hash(h) => effects.push_elements(db, key, &h.settled(&names, version)),
            Value::Set(s) => effects.push_elements(db, key, &s.settled(&names, version)),
            Value::ZSet(z) => effects.push_elements(db, key, &z.settled(&names, version)),
            value => effects.push_value(db, key, value, version, &names),
        }
    }
    let ready = matches!(entry.value, Value::List(_) | Value::ZSet(_));
    // An emptied list is deleted: no register left to restamp.
    let restamp_ttl = (whole && replicating && emptied.is_none()).then(|| entry.expiry().map(|e| e.deadline_ms)).flatten();
    Some(Settled { version, changed, emptied, whole, ready, restamp_ttl })
}

/// What an in-place edit changed: `None` if nothing, else the names it changed (empty for
/// values that replicate whole, and standalone, where edits do not name them: `Changes`).
fn take_changes(value: &mut Value) -> Option<Names> {
    let (changed, names) = match value {
        Value::Hash(h) => (h.changed(), h.take_touched()),
        Value::Set(s) => (s.changed(), s.take_touched()),
        Value::ZSet(z) => (z.changed(), z.take_touched()),
        Value::List(l) => (l.take_changed(), Names::new()),
        // Strings and counters are edited in place only by `incr`, which always changes them.
        Value::Str(_) | Value::Int(_) | Value::Counter(_) => (true, Names::new()),
    };
    changed.then_some(names)
}

/// Records a tombstone at `version` for an element the collection does not hold. Returns
/// whether it did (false for a live name, or a value without elements).
fn add_tombstone(value: &mut Value, name: &[u8], version: Version) -> bool {
    let removed = match value {
        Value::Hash(h) if !h.contains_key(name) => &mut h.removed,
        Value::Set(s) if !s.contains_key(name) => &mut s.removed,
        Value::ZSet(z) if z.score(name).is_none() => &mut z.removed,
        _ => return false,
    };
    removed.insert(name, version);
    true
}

/// Appends `event`, but before the `del` of a collection the command emptied (`emptied_at`):
/// the command's own event goes first, as in Redis (`lpop` then `del`).
fn record_event(events: &mut Vec<Event>, emptied_at: &mut Option<usize>, event: Event) {
    match *emptied_at {
        Some(i) if i + 1 == events.len() && events[i].db == event.db && events[i].key == event.key => {
            events.insert(i, event);
            *emptied_at = Some(i + 1);
        }
        _ => events.push(event),
    }
}
