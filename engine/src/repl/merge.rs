//! Merging a peer's effect (`db::effect::Effect`) into the keyspace: the key-level layer.
//!
//! Each replicated state's own rule lives with its type under `db::lattice::Merge`, with its
//! laws and property test there (docs/merge.md has the table): the field map of hashes and
//! sets and the sorted set's members (`ElementMap::merge_element`), the PN-counter, the
//! expiry register, the key tombstone and flush point (`Version`), the HyperLogLog
//! registers. This module does what only a key knows — which type and incarnation it holds
//! (ghosts, kind conflicts and ties), the floor a key tombstone or flush puts under every
//! part, orphan expiry registers — and delegates the rest to those rules. The whole-key
//! write's LWW register (`db::entry::Register`) is applied here, ordered by `(version, type
//! rank)` (`beats`), since its value and version live apart in the `Entry`.
//!
//! Every key is a lattice: a key tombstone (`cleared`: everything older is dead), plus the
//! register or per-field/per-member registers of its type, each ordered by `Version`. Merging
//! an effect takes the newer of each register, so `apply_op` is commutative, associative and
//! idempotent: peers that receive the same effects in any order, with duplicates, converge
//! (property-tested in `tests`). The rules, from DESIGN.md's merge table:
//! - a whole-key write (string, list, whole collection, delete, flush) at version v kills every
//!   older field, member, counter contribution and value of any type;
//! - when two types meet, the newer key write wins whole; at one version, the type that
//!   ranks higher (`tie_rank`: string < list < hash < set < sorted set) wins whole (below);
//! - fields and members merge one by one, tombstones included;
//! - counters merge per-origin totals by maximum over the same base;
//! - expiry is its own LWW register (deadline, version);
//! - a `FUNCTION` library is an LWW register per library name and `FUNCTION FLUSH` a flush
//!   point over them (`db::functions`), beside the keyspace;
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
//! by `(version, tie_rank(type))`, a total order, in every place two types meet — a live
//! key, a buried key (ghost) and an incoming write alike — and the loser still kills what is
//! older than it, as any losing write does. Counters are strings: they lose every tie to
//! another type. Two writes of the same type at one version keep the rules above (fields
//! merge; an HLL's registers merge; otherwise the one held stays).

use std::sync::atomic::Ordering;

use bytes::Bytes;

use crate::db::counter::{Counter, CounterDelta, BASE_ONLY};
use crate::db::effect::{Effect, EffectKind, FieldState, MemberState, ZSetMemberState};
use crate::db::entry::{Collection, Field, ListValue};
use crate::db::hll::Hll;
use crate::db::lattice::{ElementMap, Merge};
use crate::db::zset::SortedSet;
use crate::db::{Entry, Expiry, Ghost, Kind, Shard, Store, Value, SHARDS_PER_DB};
use crate::hlc::Version;
use crate::hll;

/// The order of types for writes of different types at one version (module docs): an
/// arbitrary but fixed order, so every replica keeps the same one.
fn tie_rank(kind: Kind) -> u8 {
    match kind {
        Kind::String => 0,
        Kind::List => 1,
        Kind::Hash => 2,
        Kind::Set => 3,
        Kind::ZSet => 4,
    }
}

/// Whether a key write of `kind` at `v` beats what the key holds, of `held_kind` and newest
/// at `held`: newer wins; at one version, the higher `tie_rank` (the same type: the held).
fn beats(v: Version, kind: Kind, held: Version, held_kind: Kind) -> bool {
    (v, tie_rank(kind)) > (held, tie_rank(held_kind))
}

/// The version just after `v`: clearing "older than `just_after(v)`" kills what is at `v`.
fn just_after(v: Version) -> Version {
    match v.node.checked_add(1) {
        Some(node) => Version { hlc: v.hlc, node },
        None => Version { hlc: v.hlc.saturating_add(1), node: 0 },
    }
}

/// What a write of `kind` at `v` kills of a key of the `held` type: everything older than
/// `v`, and what is at `v` too when `kind` outranks `held` (the tie rule). Pass the result
/// to `clear_older` or a collection's `cleared`.
fn clear_point(v: Version, kind: Kind, held: Kind) -> Version {
    if kind != held && tie_rank(kind) > tie_rank(held) {
        just_after(v)
    } else {
        v
    }
}

/// What a buried key's writes kill of a new incarnation of `kind`: everything older than its
/// newest write, and what is at that version too when a removed field of a higher-ranked
/// type is there (its `cleared` alone is a delete's or a losing write's, which have no type).
fn ghost_clear_point(ghost: &Ghost, kind: Kind) -> Version {
    let newest = ghost.newest();
    match ghost.kind {
        Some(held) if ghost.removed().any(|(_, removed)| *removed == newest) => clear_point(newest, held, kind),
        _ => newest,
    }
}

/// Whether a buried key's writes beat a key write of `kind` at `v`: anything newer than it,
/// or a removed field at its version of a type that ranks higher. The ghost's `cleared` at
/// `v` does not count in a tie: it is a delete's (a whole-collection write is a delete and
/// fields at one version) or a losing write's, and neither has a type.
fn ghost_wins(ghost: &Ghost, v: Version, kind: Kind) -> bool {
    if ghost.newest() > v {
        return true;
    }
    match ghost.kind {
        Some(held) if held != kind => tie_rank(held) > tie_rank(kind) && ghost.removed().any(|(_, removed)| *removed == v),
        _ => false,
    }
}

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
    let db = op.db;
    if db >= store.databases() {
        return ApplyOutcome::Superseded;
    }
    match &op.kind {
        EffectKind::Publish { channel, message } => return ApplyOutcome::Publish { channel: channel.clone(), message: message.clone() },
        EffectKind::FlushDb { version } => return flush_db(store, db, *version),
        // The function libraries' registers (`db::functions`), not the keyspace.
        EffectKind::Library { .. } | EffectKind::FunctionFlush { .. } => {
            return if store.merge_function_effect(op) { ApplyOutcome::Functions } else { ApplyOutcome::Superseded };
        }
        _ => {}
    }
    let flushed = *store.db(db).flushed.lock();
    let mut shard = store.lock_shard(db, store.shard_of(&op.key));
    if merge_locked(store, db, &mut shard, op, flushed) {
        ApplyOutcome::Applied
    } else {
        ApplyOutcome::Superseded
    }
}

/// Merges one key's effect into its shard, which the caller holds locked; `flushed` is the
/// database's flush version. Returns whether the keyspace changed (watchers are touched).
/// Also how a node applies its own write that has no local state to edit (`db::edit`).
pub fn merge_locked(store: &Store, db: usize, shard: &mut Shard, op: &Effect, flushed: Version) -> bool {
    let key = &op.key[..];
    let changed = match &op.kind {
        EffectKind::StringSet { value, version } => whole_write(store, db, shard, key, Value::string(value), *version, flushed),
        // Popping a list's last item deletes the key, as in Redis: an empty list at `v` is a
        // delete at `v` (both dominate everything older), never an empty key.
        EffectKind::List { items, version } if items.is_empty() => delete(store, db, shard, key, *version, flushed),
        EffectKind::List { items, version } => {
            let list = ListValue::new(items.iter().cloned().collect());
            whole_write(store, db, shard, key, Value::List(Box::new(list)), *version, flushed)
        }
        EffectKind::Delete { version } => delete(store, db, shard, key, *version, flushed),
        EffectKind::Expire { deadline_ms, version } => expire(store, db, shard, key, *deadline_ms, *version, flushed),
        EffectKind::Hash(fields) => merge_fields(store, db, shard, key, flushed, FieldsOp::Hash(fields)),
        EffectKind::Set(members) => merge_fields(store, db, shard, key, flushed, FieldsOp::Set(members)),
        EffectKind::ZSet(members) => merge_fields(store, db, shard, key, flushed, FieldsOp::ZSet(members)),
        EffectKind::Counter(c) => merge_counter(store, db, shard, key, c, flushed),
        EffectKind::Hll { version, registers } => merge_hll(store, db, shard, key, *version, registers, flushed),
        EffectKind::Publish { .. } | EffectKind::FlushDb { .. } | EffectKind::Library { .. } | EffectKind::FunctionFlush { .. } => false,
    };
    if changed {
        shard.touch(key);
        store.stats.dirty.fetch_add(1, Ordering::Relaxed);
    }
    changed
}

/// The version of the key's last whole-key write or delete: expiry registers older than it
/// are dead (a `SET` without `KEEPTTL` clears a TTL; keeping one re-stamps it).
fn whole_version(entry: &Entry) -> Version {
    match &entry.value {
        Value::Hash(h) => h.cleared,
        Value::Set(s) => s.cleared,
        Value::ZSet(z) => z.cleared,
        Value::Counter(c) => c.base_version,
        _ => entry.version(),
    }
}

/// Drops expiry registers (the key's, or an orphan) older than a whole write at `v`.
fn drop_older_expiry(store: &Store, db: usize, shard: &mut Shard, key: &[u8], v: Version) {
    if shard.raw(key).and_then(|e| e.expiry.as_ref()).is_some_and(|e| e.version < v) {
        shard.set_expiry(store.db(db), key, None);
    }
    if shard.orphan_expiry.get(key).is_some_and(|e| e.version < v) {
        shard.orphan_expiry.remove(key);
    }
}

fn tombstone(shard: &Shard, key: &[u8]) -> Version {
    shard.tombstones.get(key).map_or(Version::ZERO, |g| g.cleared)
}

fn bury(store: &Store, db: usize, shard: &mut Shard, key: &[u8]) {
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

/// Applies a pending expiry register to a newly created key, unless the key's creating
/// write is newer (and so cleared it).
fn adopt_orphan_expiry(store: &Store, db: usize, shard: &mut Shard, key: &[u8]) {
    if let Some(e) = shard.orphan_expiry.remove(key) {
        if shard.raw(key).is_some_and(|entry| e.version >= whole_version(entry)) {
            shard.set_expiry(store.db(db), key, Some(e));
        }
    }
}

/// A string or list write at `v`: replaces an older key of any type, and kills older fields
/// of a newer collection.
fn whole_write(store: &Store, db: usize, shard: &mut Shard, key: &[u8], value: Value, v: Version, flushed: Version) -> bool {
    if v <= flushed || v <= tombstone(shard, key) {
        return false;
    }
    let dbref = store.db(db);
    if let Some(ghost) = shard.tombstones.get_mut(key) {
        if ghost_wins(ghost, v, value.kind()) {
            // A removed field is newer: the write loses, but still clears what is older.
            ghost.clear(ghost.kind.map_or(v, |held| clear_point(v, value.kind(), held)));
            drop_older_expiry(store, db, shard, key, v);
            return false;
        }
    }
    let sparse_max = store.hll_sparse_max_bytes.load(Ordering::Relaxed);
    match shard.raw_mut(key) {
        // The same incarnation of an HLL: the registers merge.
        Some(entry) if entry.version() == v && is_hll(&entry.value) && is_hll(&value) => {
            let (Value::Str(stored), Value::Str(incoming)) = (&mut entry.value, &value) else {
                return false;
            };
            let incoming = Hll { bytes: incoming.to_vec(), sparse_max };
            with_hll(stored, sparse_max, |h| h.merge(&incoming))
        }
        Some(entry) if !beats(v, value.kind(), entry.newest(), entry.value.kind()) => {
            // The key holds newer data; the write still clears what is older than it (and an
            // integer SET becomes the base of a counter with newer increments).
            let int = match &value {
                Value::Int(n) => Some(*n),
                _ => None,
            };
            if let (Value::Counter(c), Some(n)) = (&mut entry.value, int) {
                c.rebase(n, v);
            }
            let emptied = clear_older(entry, clear_point(v, value.kind(), entry.value.kind()));
            if emptied {
                bury(store, db, shard, key);
            }
            drop_older_expiry(store, db, shard, key, v);
            false
        }
        Some(entry) => {
            entry.value = value;
            entry.set_version(v);
            drop_older_expiry(store, db, shard, key, v);
            true
        }
        None => {
            shard.tombstones.remove(key);
            shard.insert(dbref, key, Entry::new(value, v));
            adopt_orphan_expiry(store, db, shard, key);
            true
        }
    }
}

fn is_hll(value: &Value) -> bool {
    matches!(value, Value::Str(s) if hll::check(s).is_ok())
}

/// Runs `f` on the stored HLL bytes as an `Hll` (its registers' `Merge`).
fn with_hll(stored: &mut Box<[u8]>, sparse_max: usize, f: impl FnOnce(&mut Hll) -> bool) -> bool {
    let mut h = Hll { bytes: std::mem::take(stored).into_vec(), sparse_max };
    let grew = f(&mut h);
    *stored = h.bytes.into_boxed_slice();
    grew
}

/// HLL registers raised in the incarnation at `v`: merged by maximum into that incarnation
/// if the key holds it; otherwise an HLL of these registers competes as a string write at
/// `v` (it creates the key, or replaces an older incarnation, or loses to a newer write).
fn merge_hll(store: &Store, db: usize, shard: &mut Shard, key: &[u8], v: Version, registers: &[u32], flushed: Version) -> bool {
    let sparse_max = store.hll_sparse_max_bytes.load(Ordering::Relaxed);
    if let Some(entry) = shard.raw_mut(key).filter(|e| e.version() == v) {
        return match &mut entry.value {
            Value::Str(stored) if hll::check(stored).is_ok() => with_hll(stored, sparse_max, |h| h.raise(registers)),
            _ => false,
        };
    }
    let mut fresh = Hll { bytes: hll::new_empty(), sparse_max };
    fresh.raise(registers);
    whole_write(store, db, shard, key, Value::Str(fresh.bytes.into_boxed_slice()), v, flushed)
}

fn delete(store: &Store, db: usize, shard: &mut Shard, key: &[u8], v: Version, flushed: Version) -> bool {
    if v <= flushed || v <= tombstone(shard, key) {
        return false;
    }
    if let Some(entry) = shard.raw_mut(key) {
        // The key's last whole write (or delete) is at least as new: it killed all this delete
        // would, so the delete changes nothing. A replayed delete meets this once the key was
        // written again after it (found by the mesh_message fuzz target: the replay recorded a
        // second tombstone for the live key and reported a change).
        if v <= whole_version(entry) {
            return false;
        }
        if clear_older(entry, v) {
            bury(store, db, shard, key);
        }
    }
    shard.tombstones.entry(key.into()).or_default().clear(v);
    drop_older_expiry(store, db, shard, key, v);
    true
}

fn expire(store: &Store, db: usize, shard: &mut Shard, key: &[u8], deadline_ms: u64, v: Version, flushed: Version) -> bool {
    let register = Expiry { deadline_ms, version: v };
    match shard.raw(key) {
        Some(entry) => {
            // Not newer than the database's flush: dead with it, as for a key not created yet
            // (found by the mesh_message fuzz target: a counter whose base is at the flush
            // took a register at the flush's version, which the key-less path had dropped).
            if v <= flushed || v < whole_version(entry) {
                return false;
            }
            // The register's own rule (`Merge for Expiry`; a key without one holds `None`).
            let mut held = entry.expiry.as_deref().copied();
            if !held.merge(&Some(register)) {
                return false;
            }
            shard.set_expiry(store.db(db), key, held);
            true
        }
        None => {
            // The write that created the key is still on its way from another origin.
            // Kept if newer than the key's delete; whether the next incarnation adopts it is
            // decided when it is created (a different type starts after the ghost's writes).
            // A register older than the key's delete, or the database's flush, died with it.
            let newer = v >= tombstone(shard, key) && v > flushed && shard.orphan_expiry.get(key).is_none_or(|e| e.version < v);
            if newer {
                shard.orphan_expiry.insert(key.into(), register);
            }
            newer
        }
    }
}

enum FieldsOp<'a> {
    Hash(&'a [FieldState]),
    Set(&'a [MemberState]),
    ZSet(&'a [ZSetMemberState]),
}

impl FieldsOp<'_> {
    fn newest(&self) -> Version {
        let versions: Vec<Version> = match self {
            FieldsOp::Hash(h) => h.iter().map(|f| f.version).collect(),
            FieldsOp::Set(s) => s.iter().map(|f| f.version).collect(),
            FieldsOp::ZSet(z) => z.iter().map(|f| f.version).collect(),
        };
        versions.into_iter().max().unwrap_or(Version::ZERO)
    }

    fn empty_value(&self, cleared: Version) -> Value {
        match self {
            FieldsOp::Hash(_) => {
                let mut h = Collection::<Field>::default();
                h.cleared = cleared;
                Value::Hash(Box::new(h))
            }
            FieldsOp::Set(_) => {
                let mut s = Collection::<Version>::default();
                s.cleared = cleared;
                Value::Set(Box::new(s))
            }
            FieldsOp::ZSet(_) => {
                let mut z = SortedSet::default();
                z.cleared = cleared;
                Value::ZSet(Box::new(z))
            }
        }
    }

    fn kind(&self) -> Kind {
        match self {
            FieldsOp::Hash(_) => Kind::Hash,
            FieldsOp::Set(_) => Kind::Set,
            FieldsOp::ZSet(_) => Kind::ZSet,
        }
    }

    fn same_kind(&self, value: &Value) -> bool {
        self.kind() == value.kind()
    }
}

fn restore_removed(value: &mut Value, removed: crate::db::entry::FieldMap<Version>) {
    match value {
        Value::Hash(h) => h.removed = removed,
        Value::Set(s) => s.removed = removed,
        Value::ZSet(z) => z.removed = removed,
        _ => {}
    }
}

/// Per-field (or per-member) LWW with tombstones.
fn merge_fields(store: &Store, db: usize, shard: &mut Shard, key: &[u8], flushed: Version, op: FieldsOp) -> bool {
    let dbref = store.db(db);
    let floor = flushed.max(tombstone(shard, key));
    let op_newest = op.newest();
    // Strictly older: a whole-collection write replicates as a delete and fields at the same
    // version, and those fields survive it.
    if op_newest < floor {
        return false;
    }
    let created = match shard.raw_mut(key) {
        Some(entry) if op.same_kind(&entry.value) => false,
        Some(entry) => {
            // Another type: the newer key write wins whole (at one version, by `tie_rank`); the
            // older one still ends the incarnation before it (what the winner held from before
            // it dies).
            let held = entry.value.kind();
            if !beats(op_newest, op.kind(), entry.newest(), held) {
                if clear_older(entry, clear_point(op_newest, op.kind(), held)) {
                    bury(store, db, shard, key);
                }
                drop_older_expiry(store, db, shard, key, op_newest);
                return false;
            }
            let replaced = entry.newest();
            entry.value = op.empty_value(clear_point(replaced, held, op.kind()));
            entry.set_version(op_newest);
            // A new incarnation: expiry registers older than it died with the old one.
            drop_older_expiry(store, db, shard, key, replaced);
            false
        }
        None => {
            let mut value = op.empty_value(floor);
            match shard.tombstones.remove(key) {
                // The key died as another type: that type's newest write competes whole.
                Some(ghost) if ghost.kind.is_some_and(|k| k != value.kind()) => {
                    if ghost_wins(&ghost, op_newest, op.kind()) {
                        let mut ghost = ghost;
                        ghost.clear(ghost.kind.map_or(op_newest, |held| clear_point(op_newest, op.kind(), held)));
                        shard.tombstones.insert(key.into(), ghost);
                        return false;
                    }
                    value = op.empty_value(floor.max(ghost_clear_point(&ghost, op.kind())));
                }
                // Re-created as the same type: its removed fields keep their tombstones.
                Some(ghost) => restore_removed(&mut value, ghost.into_removed()),
                None => {}
            }
            shard.insert(dbref, key, Entry::new(value, op_newest));
            true
        }
    };
    let Some(entry) = shard.raw_mut(key) else {
        return false;
    };
    let mut changed = false;
    match (&op, &mut entry.value) {
        // Each element by its type's rule (`ElementMap::merge_element`), in the effect's order.
        (FieldsOp::Hash(h), Value::Hash(map)) => {
            for f in h.iter() {
                changed |= map.merge_element(&f.name, f.value.clone(), f.version, floor);
            }
        }
        (FieldsOp::Set(s), Value::Set(set)) => {
            for m in s.iter() {
                changed |= set.merge_element(&m.name, m.present.then_some(()), m.version, floor);
            }
        }
        (FieldsOp::ZSet(z), Value::ZSet(zset)) => {
            for m in z.iter() {
                changed |= zset.merge_element(&m.name, m.score, m.version, floor);
            }
        }
        _ => {}
    }
    if changed && op_newest > entry.version() {
        entry.set_version(op_newest);
    }
    if entry.value.is_empty_collection() {
        bury(store, db, shard, key);
    } else if created {
        adopt_orphan_expiry(store, db, shard, key);
    }
    changed
}

fn merge_counter(store: &Store, db: usize, shard: &mut Shard, key: &[u8], d: &CounterDelta, flushed: Version) -> bool {
    let dbref = store.db(db);
    // A base-only delta (full sync) writes the base register alone: its version is the
    // base's, whatever else it carries (found by the mesh_message fuzz target: a base-only
    // delta stamped later than its base created a counter a flush between it and its replay
    // removed, so replaying it created the key again).
    let v = if d.origin == BASE_ONLY { d.base } else { d.version };
    let floor = flushed.max(tombstone(shard, key));
    let ghost_newest = shard.tombstones.get(key).map_or(Version::ZERO, |g| g.newest());
    // A counter is a string, which loses every tie to another type: what a ghost of another
    // type holds at its newest version kills the counter's contributions there too.
    let ghost_floor = shard.tombstones.get(key).map_or(Version::ZERO, |g| ghost_clear_point(g, Kind::String));
    if v <= floor.max(ghost_newest) {
        // A losing counter write still ends the incarnation before it.
        if let Some(ghost) = shard.tombstones.get_mut(key) {
            if ghost.kind != Some(crate::db::Kind::String) {
                ghost.clear(v);
            }
        }
        return false;
    }
    let fresh = |base: i64, base_version: Version| {
        let mut c = Counter::new(base, base_version);
        c.merge_delta(d);
        c.clear_older(floor);
        Value::Counter(Box::new(c))
    };
    match shard.raw_mut(key) {
        None => {
            // A counter after a ghost starts a new incarnation after everything the ghost holds.
            shard.tombstones.remove(key);
            shard.insert(dbref, key, Entry::new(fresh(0, floor.max(ghost_floor)), v));
            adopt_orphan_expiry(store, db, shard, key);
            true
        }
        Some(entry) => {
            let (entry_newest, entry_version) = (entry.newest(), entry.version());
            let changed = match &mut entry.value {
                Value::Counter(c) => {
                    let base_before = c.base_version;
                    let changed = c.merge_delta(d);
                    if c.base_version > base_before {
                        // A newer base (a SET, or a restart after a delete) ends older registers.
                        let base = c.base_version;
                        drop_older_expiry(store, db, shard, key, base);
                        return true;
                    }
                    changed
                }
                // An integer string: the counter continues from it (it is the base register);
                // any other older value is replaced by a counter that starts after it.
                _ if entry_newest < v => {
                    let counter = match &entry.value {
                        Value::Int(n) => fresh(*n, entry_version),
                        Value::Str(s) => fresh(crate::parse::parse_i64(s).unwrap_or(0), entry_version),
                        // Another type's parts at its newest version outrank the counter's.
                        _ => fresh(0, just_after(entry_newest)),
                    };
                    let base = match &counter {
                        Value::Counter(c) => c.base_version,
                        _ => entry_newest,
                    };
                    entry.value = counter;
                    // A new incarnation: registers older than its base died with the old one.
                    drop_older_expiry(store, db, shard, key, base);
                    return true;
                }
                // Another type, newer or at one version (a counter is a string, which loses every
                // tie to another type): the counter loses whole but still ends what is older.
                _ => {
                    if clear_older(entry, v) {
                        bury(store, db, shard, key);
                    }
                    drop_older_expiry(store, db, shard, key, v);
                    return false;
                }
            };
            if changed && v > entry.version() {
                entry.set_version(v);
            }
            changed
        }
    }
}

/// `FLUSHDB`/`FLUSHALL` from a peer: everything older than `v` in the database dies.
fn flush_db(store: &Store, db: usize, v: Version) -> ApplyOutcome {
    {
        // The database's flush point is a key tombstone for every key (`Merge for Version`).
        if !store.db(db).flushed.lock().merge(&v) {
            return ApplyOutcome::Superseded;
        }
    }
    for s in 0..SHARDS_PER_DB {
        flush_shard(store, db, &mut store.lock_shard(db, s), v);
    }
    ApplyOutcome::Applied
}

/// Kills everything in one shard older than a flush at `v` (the database's `flushed`, set
/// by the caller, dominates it from now on), touching the watchers of what changed. Ghosts
/// and pending expiry registers the flush dominates are dropped: `flushed` stands for them.
pub fn flush_shard(store: &Store, db: usize, shard: &mut Shard, v: Version) {
    let dbref = store.db(db);
    if shard.iter().all(|(_, e)| e.newest() < v && e.expiry.as_ref().is_none_or(|x| x.version < v)) {
        // The common case: nothing survives, so drop the whole table at once.
        shard.touch_existing();
        shard.clear(dbref);
    } else {
        let keys: Vec<Bytes> = shard.iter().map(|(k, _)| Bytes::copy_from_slice(k)).collect();
        for key in keys {
            let emptied = shard.raw_mut(&key).is_some_and(|e| clear_older(e, v));
            if emptied {
                bury(store, db, shard, &key);
                shard.touch(&key);
            } else if shard.raw(&key).and_then(|e| e.expiry.as_ref()).is_some_and(|e| e.version < v) {
                shard.set_expiry(dbref, &key, None);
                shard.touch(&key);
            }
        }
    }
    shard.tombstones.retain(|_, g| {
        g.clear(v);
        g.newest() > v
    });
    shard.orphan_expiry.retain(|_, e| e.version > v);
}
