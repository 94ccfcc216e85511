//! Merging a peer's effect (`db::effect::Effect`) into the keyspace: the key-level layer.
//! This file owns the dispatch (`apply_op`, `merge_locked`: which part of the key an effect
//! writes) and the few steps every part shares (the key's tombstone, burying an emptied
//! key, killing what is older than a write); the parts are
//! - `whole`: whole-value writes (strings, lists, HLLs) and deletes;
//! - `fields`: hash fields, set and sorted-set members;
//! - `counter`: PN-counter contributions;
//! - `flush`: `FLUSHDB`/`FLUSHALL`, the database's flush point.
//!
//! `FUNCTION` libraries are no keys: `apply_op` hands their effects to the registers beside
//! the keyspace (`db::functions`: an LWW register per library name, `FUNCTION FLUSH` a flush
//! point over them).
//!
//! Each replicated state's own rule lives with its type under `db::lattice::Merge`, with its
//! laws and property test there (docs/merge.md has the table): the whole-value register
//! (`db::entry::Register`, whose `beats` is the one definition of which whole value wins,
//! types at one version included), the field map of hashes and sets and the sorted set's
//! members (`ElementMap::merge_element`), the PN-counter, the expiry register and pending
//! registers (`db::pending`), the key tombstone of a deleted key (`db::ghost::Ghost`, and
//! how a ghost meets a write), the flush point (`Version`), the HyperLogLog registers. This
//! layer does what only a key knows — which type and incarnation it holds, the floor a key
//! tombstone or flush puts under every part — and delegates the rest to those rules. The
//! value and version of a whole write live apart in the `Entry`; the layer compares them as
//! registers (`held`) without storing one.
//!
//! Every key is a lattice: a key tombstone (`cleared`: everything older is dead), plus the
//! register or per-field/per-member registers of its type, each ordered by `Version`. Merging
//! an effect takes the newer of each register, so `apply_op` is commutative, associative and
//! idempotent: peers that receive the same effects in any order, with duplicates, converge
//! (property-tested in `repl::laws`). The rules, from DESIGN.md's merge table:
//! - a whole-key write (string, list, whole collection, delete, flush) at version v kills every
//!   older field, member, counter contribution and value of any type;
//! - when two types meet, the newer key write wins whole; at one version, the type that
//!   ranks higher (`TieRank`: string < list < hash < set < sorted set) wins whole (below);
//! - fields and members merge one by one, tombstones included;
//! - counters merge per-origin totals by maximum over the same base;
//! - expiry is its own LWW register (deadline, version);
//! - a HyperLogLog is a string whose version is its incarnation (`db::hll`): registers raised
//!   in the same incarnation merge by maximum, and two string values at the same version
//!   that are both HLLs (a snapshot of an HLL meeting its registers) merge the same way; a
//!   string write or delete at another version competes as any string write.
//!
//! Every write command is a versioned write, whether or not it changed anything on the node
//! that ran it: a `DEL` of a key it did not hold, an `HDEL`/`SREM`/`ZREM` of elements it did
//! not hold, a `PERSIST` of a key without a TTL, a `FLUSHDB` of an empty database all reach
//! this merge as a tombstone or register at their version, and so dominate every older write
//! they conflict with, wherever it was made — a delete that raced an older write not yet
//! received still wins (the cache-invalidation race). `db::edit` enforces this on the local
//! side and applies such writes to its own keyspace through `merge_locked`, so the node that
//! made them ends exactly where its peers do.
//!
//! Ties between types. A version names one write, and a write has one type, so no correct
//! peer sends two typed effects of different types for one key at one version. The merge
//! still defines the outcome, so that it is a lattice on every input, a faulty or hostile
//! peer's included (the `mesh_message` fuzz target checks every batch): key writes compare
//! by `(version, type rank)` (`Register::beats`), a total order, in every place two types
//! meet — a live key, a buried key (`Ghost::beats`) and an incoming write alike — and the
//! loser still kills what is older than it (`Register::kills_below`), as any losing write
//! does. Counters are strings: they lose every tie to
//! another type. Two writes of the same type at one version keep the rules above (fields
//! merge; an HLL's registers merge; otherwise the one held stays).

mod counter;
mod fields;
mod flush;
mod whole;

use bytes::Bytes;

pub use self::flush::flush_shard;
use crate::db::effect::{Effect, EffectKind};
use crate::db::entry::{Kind, ListValue, Name, Register};
use crate::db::lattice::ElementMap;
use crate::db::{Entry, Expiry, KeyLike, Shard, Store, TableKey, Value};
use crate::hlc::Version;
use crate::repl::wire::{Decoded, ExpireRef, StringSetRef};

/// What merging one effect did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyOutcome {
    /// It changed the keyspace.
    Applied,
    /// Everything in it was older than what the node holds.
    Superseded,
    /// A published message: the caller delivers it to this node's subscribers.
    Publish { channel: Bytes, message: Bytes },
    /// It changed the function libraries (no key changed); the node compiles the winning
    /// code on its next `FCALL` or `FUNCTION` command (`Scripts::sync_functions`).
    Functions,
}

/// Merges one effect from a peer.
pub fn apply_op(store: &Store, op: &Effect) -> ApplyOutcome {
    apply_keyed(store, op, &op.key[..])
}

/// `apply_op` with the op's key given as a `KeyLike`: a caller that hashed it already (a
/// link's chunk, for its prefetch) passes the `HashedKey`, and neither the shard nor the table
/// probes hash it again.
pub fn apply_keyed<K: KeyLike + ?Sized>(store: &Store, op: &Effect, key: &K) -> ApplyOutcome {
    let db = op.db;
    if db >= store.databases() {
        return ApplyOutcome::Superseded;
    }
    match &op.kind {
        EffectKind::Publish { channel, message } => return ApplyOutcome::Publish { channel: channel.clone(), message: message.clone() },
        // The function libraries' registers (`db::functions`), not the keyspace.
        EffectKind::Library { .. } | EffectKind::FunctionFlush { .. } => {
            return if store.merge_function_effect(op) { ApplyOutcome::Functions } else { ApplyOutcome::Superseded };
        }
        EffectKind::FlushDb { version } => return flush::flush_db(store, db, *version),
        _ => {}
    }
    let (mut shard, flushed) = lock_for_merge(store, db, key);
    outcome(merge_locked(store, db, &mut shard, op, key, flushed))
}

/// Merges an op read where it lies in a received batch (`wire::decode_in`), as a link does;
/// `key` is the op's key, hashed or not (`apply_keyed`). A string's write, a collection's
/// element states, a counter's contribution, a list's value, a key's tombstone and its expiry
/// register are merged borrowed from the batch, with no `Effect` built: each name, value and
/// item copied from the frame straight into the keyspace.
pub fn apply_decoded<K: KeyLike + ?Sized>(store: &Store, op: &Decoded<'_>, key: &K) -> ApplyOutcome {
    debug_assert_eq!(key.key_bytes(), op.key(), "the key given is the op's");
    match op {
        Decoded::StringSet(set) => apply_borrowed(store, set.db, key, |shard, flushed| {
            whole::whole_write(store, set.db, shard, key.table_key(), Value::string(set.value), set.version, flushed)
        }),
        Decoded::Elements(op) => apply_borrowed(store, op.db, key, |shard, flushed| fields::merge_fields(store, op.db, shard, key, flushed, &op.elements)),
        Decoded::Counter(op) => {
            apply_borrowed(store, op.db, key, |shard, flushed| counter::merge_counter(store, op.db, shard, key.table_key(), &op.delta, flushed))
        }
        // An empty list is a delete, as `merge_locked` merges it.
        Decoded::List(op) if op.is_empty() => {
            apply_borrowed(store, op.db, key, |shard, flushed| whole::delete(store, op.db, shard, key.table_key(), op.version, flushed))
        }
        Decoded::List(op) => apply_borrowed(store, op.db, key, |shard, flushed| {
            let list = ListValue::new(op.items().map(Name::from).collect());
            whole::whole_write(store, op.db, shard, key.table_key(), Value::List(Box::new(list)), op.version, flushed)
        }),
        Decoded::Delete(op) => apply_borrowed(store, op.db, key, |shard, flushed| whole::delete(store, op.db, shard, key.table_key(), op.version, flushed)),
        Decoded::Expire(op) => apply_borrowed(store, op.db, key, |shard, flushed| {
            shard.merge_expiry(store.db(op.db), key, Expiry { deadline_ms: op.deadline_ms, version: op.version }, flushed)
        }),
        Decoded::Effect(e) => apply_keyed(store, e, key),
    }
}

/// What a caller of `apply_chunk` does with each op's outcome (a link counts it and fires its
/// keyspace event). A trait, not a closure: its `record` can be inlined by attribute, which
/// the two calls below kept a closure from (~35 instructions a merged op, callgrind).
pub trait Recorder {
    fn record(&mut self, op: &Decoded<'_>, outcome: ApplyOutcome);
}

/// Merges a received chunk's ops in order, each with its key (hashed or not), as a link does,
/// and hands `recorder` each op's outcome. A string's write and the expiry register written
/// with it (`register_written_with`: `SET … EX` sends them back to back) are merged as one
/// (`apply_string_with_register`); every other op alone (`apply_decoded`).
#[inline(always)]
pub fn apply_chunk<K: KeyLike>(store: &Store, ops: &[(&Decoded<'_>, K)], recorder: &mut impl Recorder) {
    let mut ops = ops.iter().peekable();
    while let Some((op, key)) = ops.next() {
        let with_register = match op {
            Decoded::StringSet(set) => ops.peek().and_then(|&(next, _)| Some((set, *next, register_written_with(set, next)?))),
            _ => None,
        };
        match with_register {
            Some((set, next, register)) => {
                ops.next();
                let [string, registered] = apply_string_with_register(store, set, register, key);
                recorder.record(op, string);
                recorder.record(next, registered);
            }
            None => recorder.record(op, apply_decoded(store, op, key)),
        }
    }
}

/// The expiry register its origin wrote with a string's write (`SET … EX` sends the string's op
/// and then this one at the same version, `Ctx::put_with_ttl`), if `next` is it.
#[inline]
pub fn register_written_with<'o, 'a>(set: &StringSetRef<'_>, next: &'o Decoded<'a>) -> Option<&'o ExpireRef<'a>> {
    match next {
        Decoded::Expire(register) if register.version == set.version && register.db == set.db && register.key == set.key => Some(register),
        _ => None,
    }
}

/// Merges a string's write and the expiry register written with it
/// (`register_written_with`), leaving the node where merging one and then the other
/// (`apply_decoded`) leaves it, and returns both ops' outcomes: a key the write creates is made
/// with its register at once (`whole::whole_write_expiring`), where one by one its node was
/// made, then the shard locked and the key looked up again, and the node moved to a larger
/// allocation for the register (~430 instructions of a peer's merged `SET … EX`, callgrind).
pub fn apply_string_with_register<K: KeyLike + ?Sized>(store: &Store, set: &StringSetRef<'_>, register: &ExpireRef<'_>, key: &K) -> [ApplyOutcome; 2] {
    debug_assert!(register.db == set.db && register.key == set.key && register.version == set.version, "the string's own register");
    if set.db >= store.databases() {
        return [ApplyOutcome::Superseded, ApplyOutcome::Superseded];
    }
    let expiry = Expiry { deadline_ms: register.deadline_ms, version: register.version };
    let (mut shard, flushed) = lock_for_merge(store, set.db, key);
    let written = whole::whole_write_expiring(store, set.db, &mut shard, key.table_key(), Value::string(set.value), set.version, flushed, Some(expiry));
    let string = note_change(store, &mut shard, key.key_bytes(), written.changed);
    // Not placed (the key was there, or the write lost, or a register is pending): merged as
    // its own op would be.
    let registered = written.register_placed || shard.merge_expiry(store.db(set.db), key, expiry, flushed);
    let registered = note_change(store, &mut shard, key.key_bytes(), registered);
    [outcome(string), outcome(registered)]
}

/// `apply_keyed` of an op borrowed from a received batch, in database `db`: `merge` merges it
/// into its locked shard, given the database's flush point, and says whether the key changed.
#[inline]
fn apply_borrowed<K: KeyLike + ?Sized>(store: &Store, db: usize, key: &K, merge: impl FnOnce(&mut Shard, Version) -> bool) -> ApplyOutcome {
    if db >= store.databases() {
        return ApplyOutcome::Superseded;
    }
    let (mut shard, flushed) = lock_for_merge(store, db, key);
    let changed = merge(&mut shard, flushed);
    outcome(note_change(store, &mut shard, key.key_bytes(), changed))
}

/// Locks `key`'s shard and reads the database's flush point under that lock. A flush (a
/// peer's, `flush::flush_db`, or a local FLUSHDB) raises the point before it locks any shard,
/// so a flush that has already cleared this shard is seen here. Read before the lock, a write
/// older than that flush could land after it and outlive it on this node alone. Always
/// inline: as a call (which `#[inline]` left it once the tombstones' map changed) it cost every
/// merged write ~20 instructions (callgrind).
#[inline(always)]
fn lock_for_merge<'s, K: KeyLike + ?Sized>(store: &'s Store, db: usize, key: &K) -> (parking_lot::MutexGuard<'s, Shard>, Version) {
    let shard = store.lock_shard(db, key.shard());
    let flushed = store.db(db).flushed.get();
    (shard, flushed)
}

#[inline]
fn outcome(changed: bool) -> ApplyOutcome {
    if changed {
        ApplyOutcome::Applied
    } else {
        ApplyOutcome::Superseded
    }
}

/// A merge that changed the key touches its watchers and counts a change (`dirty`).
#[inline]
fn note_change(store: &Store, shard: &mut Shard, key: &[u8], changed: bool) -> bool {
    if changed {
        shard.touch(key);
        store.stats.dirty.incr();
    }
    changed
}

/// Merges one key's effect into its shard, which the caller holds locked; `flushed` is the
/// database's flush version; `key` is the op's key, hashed or not (`apply_keyed`). Returns
/// whether the keyspace changed (watchers are touched). Also how a node applies its own write
/// that has no local state to edit (`db::edit`).
pub fn merge_locked<K: KeyLike + ?Sized>(store: &Store, db: usize, shard: &mut Shard, op: &Effect, hashed: &K, flushed: Version) -> bool {
    let key = &op.key[..];
    debug_assert_eq!(hashed.key_bytes(), key, "the key given is the op's");
    let changed = match &op.kind {
        EffectKind::StringSet { value, version } => whole::whole_write(store, db, shard, hashed.table_key(), Value::string(value), *version, flushed),
        // Popping a list's last item deletes the key, as in Redis: an empty list at `v` is a
        // delete at `v` (both dominate everything older), never an empty key.
        EffectKind::List { items, version } if items.is_empty() => whole::delete(store, db, shard, hashed.table_key(), *version, flushed),
        EffectKind::List { items, version } => {
            let list = ListValue::new(items.iter().map(|item| Name::from(&item[..])).collect());
            whole::whole_write(store, db, shard, hashed.table_key(), Value::List(Box::new(list)), *version, flushed)
        }
        // The one delete path, which a local `DEL` of a key this node does not hold calls too.
        EffectKind::Delete { version } => return delete_locked(store, db, shard, hashed.table_key(), *version, flushed),
        EffectKind::Expire { deadline_ms, version } => {
            shard.merge_expiry(store.db(db), hashed, Expiry { deadline_ms: *deadline_ms, version: *version }, flushed)
        }
        EffectKind::Hash(_) | EffectKind::Set(_) | EffectKind::ZSet(_) => {
            let elements = op.elements().expect("a collection's effect has element states");
            fields::merge_fields(store, db, shard, hashed, flushed, &elements)
        }
        EffectKind::Counter(c) => counter::merge_counter(store, db, shard, hashed.table_key(), c, flushed),
        EffectKind::Hll { version, registers } => whole::merge_hll(store, db, shard, key, *version, registers, flushed),
        EffectKind::Publish { .. } | EffectKind::FlushDb { .. } | EffectKind::Library { .. } | EffectKind::FunctionFlush { .. } => false,
    };
    note_change(store, shard, key, changed)
}

/// A key's tombstone at `version`, given by its parts: `merge_locked` of a `Delete` effect,
/// and how a node deletes a key it holds no value for (`db::edit`) with no `Effect` built.
pub fn delete_locked(store: &Store, db: usize, shard: &mut Shard, key: TableKey<'_>, version: Version, flushed: Version) -> bool {
    let changed = whole::delete(store, db, shard, key, version, flushed);
    note_change(store, shard, key.key(), changed)
}

/// The key tombstone of the key's ghost (`Version::ZERO` without one).
fn tombstone<K: KeyLike + ?Sized>(shard: &Shard, key: &K) -> Version {
    shard.tombstones.get(key).map_or(Version::ZERO, |g| g.cleared)
}

/// Removes an emptied key, leaving its ghost (`Shard::bury`).
fn bury<K: KeyLike + ?Sized>(store: &Store, db: usize, shard: &mut Shard, key: &K) {
    shard.bury(store.db(db), key);
}

/// Kills everything in `entry` older than `v`. Returns true if nothing remains.
fn clear_older(entry: &mut Entry, v: Version) -> bool {
    match &mut entry.value {
        Value::Hash(h) => {
            h.clear_older(v);
            h.is_empty()
        }
        Value::Set(s) => {
            s.clear_older(v);
            s.is_empty()
        }
        Value::ZSet(z) => {
            ElementMap::clear_older(&mut **z, v);
            z.is_empty()
        }
        Value::Counter(c) => c.clear_older(v),
        _ => entry.version() < v,
    }
}

/// What the key holds, as a register of its type at its newest write (`Entry::newest`): what
/// a key write of another type, or a whole write, competes with (`Register::beats`).
fn held(entry: &Entry) -> Register<Kind> {
    Register { value: entry.value.kind(), version: entry.newest() }
}

/// A key write of `kind` at `v`, as the register it competes as.
fn write(kind: Kind, v: Version) -> Register<Kind> {
    Register { value: kind, version: v }
}
