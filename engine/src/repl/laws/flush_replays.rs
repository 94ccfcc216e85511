//! Regressions found by the `mesh_message` fuzz target (engine/fuzz): effects replayed after
//! a flush that dominates them. A peer replays what it sent after a reconnect, so an effect
//! may reach a node before and again after a `FLUSHDB` newer than it; the second time it must
//! change nothing (idempotence), and the state must not depend on where the flush fell.
//! Their seeds live in engine/fuzz/corpus/mesh_message (`regression_*`).

use keymesh_proto as pb;

use super::{observe, store, v};
use crate::db::{Store, SHARDS_PER_DB};
use crate::hlc::Version;
use crate::repl::effects::{self, version};
use crate::repl::merge::{apply_op, ApplyOutcome};

/// Pending expiry registers (for keys not created yet) held, in all databases.
fn orphan_expiries(store: &Store) -> usize {
    (0..store.databases()).map(|db| (0..SHARDS_PER_DB).map(|s| store.lock_shard(db, s).orphan_expiry.len()).sum::<usize>()).sum()
}

#[test]
fn an_expiry_older_than_a_flush_stays_dead_when_replayed() {
    // The key's creating write never arrives (the flush killed it); its `EXPIRE` at v5 does,
    // then a `FLUSHDB` at v10, then the `EXPIRE` again. Before the fix the replay was kept as
    // a pending register — applied twice, and held forever — because the flush had dropped
    // the key's tombstone and the register was only compared with that.
    let expire = effects::expire(0, b"k", 4_000_000_000_000, v(5, 1));
    let flush = effects::flush_db(0, v(10, 2));
    let s = store();
    assert_eq!(apply_op(&s, &expire), ApplyOutcome::Applied, "a pending register for a key still on its way");
    assert_eq!(apply_op(&s, &flush), ApplyOutcome::Applied);
    assert_eq!(orphan_expiries(&s), 0, "the flush drops the register it dominates");
    assert_eq!(apply_op(&s, &expire), ApplyOutcome::Superseded, "a replay older than the flush is dead");
    assert_eq!(orphan_expiries(&s), 0);

    // The other order ends in the same state.
    let other = store();
    assert_eq!(apply_op(&other, &flush), ApplyOutcome::Applied);
    assert_eq!(apply_op(&other, &expire), ApplyOutcome::Superseded);
    assert_eq!(orphan_expiries(&other), 0);
    assert_eq!(observe(&s), observe(&other));

    // A register newer than the flush is still kept for the key it waits for.
    assert_eq!(apply_op(&s, &effects::expire(0, b"k", 4_000_000_000_000, v(11, 1))), ApplyOutcome::Applied);
    assert_eq!(orphan_expiries(&s), 1);
}

/// A full sync's base-only counter delta (the base register alone, `origin` 0) whose own
/// version is later than its base's, as a peer may send it.
fn base_only(base: Version, stamped: Version) -> pb::Op {
    effects::counter(0, b"c", pb::CounterDelta { origin: 0, incr_total: 0, decr_total: 0, base: version(base), version: version(stamped), base_value: 7 })
}

#[test]
fn a_base_only_counter_delta_older_than_a_flush_does_not_recreate_the_key() {
    // Base at v5, stamped v20; a flush at v10 between the delta and its replay. The delta
    // carries nothing but the base, so it is a write at v5 and the flush dominates it.
    // Before the fix it counted as a write at v20: the replay created the counter again
    // (value 0, its base dead), so the key existed or not depending on where the flush fell.
    let delta = base_only(v(5, 1), v(20, 1));
    let flush = effects::flush_db(0, v(10, 2));
    let s = store();
    assert_eq!(apply_op(&s, &delta), ApplyOutcome::Applied);
    assert!(observe(&s).values().next().is_some_and(|x| x.contains("Some(7)")), "{:?}", observe(&s));
    apply_op(&s, &flush);
    assert!(observe(&s).is_empty(), "the flush removes the counter: {:?}", observe(&s));
    assert_eq!(apply_op(&s, &delta), ApplyOutcome::Superseded, "a replay older than the flush is dead");
    assert!(observe(&s).is_empty(), "the replay recreated the key: {:?}", observe(&s));

    let other = store();
    apply_op(&other, &flush);
    assert_eq!(apply_op(&other, &delta), ApplyOutcome::Superseded);
    assert_eq!(observe(&s), observe(&other));

    // A base newer than the flush is a live write.
    assert_eq!(apply_op(&s, &base_only(v(11, 1), v(20, 1))), ApplyOutcome::Applied);
    assert!(observe(&s).values().next().is_some_and(|x| x.contains("Some(7)")), "{:?}", observe(&s));
}
