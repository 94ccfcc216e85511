//! Regressions found by the `mesh_message` fuzz target (engine/fuzz): effects replayed after a
//! newer write that dominates them. A peer replays what it sent after a reconnect, so an effect
//! may reach a node before and again after a `FLUSHDB` or a write of its key newer than it; the
//! second time it must change nothing (idempotence: no state, no watcher touched), and the
//! state must not depend on where the newer write fell. Their seeds live in
//! engine/fuzz/corpus/mesh_message (`regression_*`).

use keymesh_proto as pb;

use super::{apply_op, effects};
use super::{observe, store, v};
use crate::db::{Store, SHARDS_PER_DB};
use crate::hlc::Version;
use crate::repl::merge::ApplyOutcome;
use crate::repl::wire::version;

/// Pending expiry registers (for keys not created yet) held, in all databases.
fn orphan_expiries(store: &Store) -> usize {
    (0..store.databases()).map(|db| (0..SHARDS_PER_DB).map(|s| store.lock_shard(db, s).orphan_expiry.len()).sum::<usize>()).sum()
}

/// A list written whole at `at`.
fn list(key: &[u8], at: Version) -> pb::Op {
    pb::Op { db: 0, key: key.to_vec().into(), effect: Some(pb::op::Effect::List(pb::ListValue { items: vec![b"a".to_vec().into()], version: version(at) })) }
}

/// Field `f` of hash `key` set at `at`.
fn field(key: &[u8], at: Version) -> pb::Op {
    pb::Op {
        db: 0,
        key: key.to_vec().into(),
        effect: Some(pb::op::Effect::Hash(pb::HashFields {
            fields: vec![pb::FieldState { name: b"f".to_vec().into(), value: Some(b"x".to_vec().into()), version: version(at) }],
        })),
    }
}

#[test]
fn a_delete_replayed_after_its_key_was_written_again_changes_nothing() {
    // `DEL l` at v2, then the list written whole at v8, then the `DEL` again. Before the fix
    // the replay recorded a tombstone for the live key and reported a change (touching its
    // watchers), though the list's write at v8 already killed everything the delete would.
    let delete = effects::delete(0, b"l", v(2, 2));
    let rewrite = list(b"l", v(8, 1));
    let s = store();
    assert_eq!(apply_op(&s, &delete), ApplyOutcome::Applied);
    assert_eq!(apply_op(&s, &rewrite), ApplyOutcome::Applied);
    assert_eq!(s.tombstones_held(), 0, "the key's new incarnation replaced its tombstone");
    assert_eq!(apply_op(&s, &delete), ApplyOutcome::Superseded, "a replayed delete older than the key's rewrite");
    assert_eq!(s.tombstones_held(), 0);
    // Delivered the other way round: the same state.
    let other = store();
    apply_op(&other, &rewrite);
    assert_eq!(apply_op(&other, &delete), ApplyOutcome::Superseded);
    assert_eq!(observe(&s), observe(&other));
    assert_eq!(observe(&s).len(), 1, "{:?}", observe(&s));
    assert_eq!(other.tombstones_held(), 0);

    // A hash re-created after its delete starts cleared at the delete: the replay is dead too.
    let s = store();
    apply_op(&s, &effects::delete(0, b"h", v(2, 2)));
    apply_op(&s, &field(b"h", v(8, 1)));
    assert_eq!(apply_op(&s, &effects::delete(0, b"h", v(2, 2))), ApplyOutcome::Superseded);
    // A delete older than a field but newer than the hash's creation still acts: it raises the
    // hash's cleared register (the field at v8 survives it), and a newer one removes the key.
    let s = store();
    apply_op(&s, &field(b"h", v(8, 1)));
    assert_eq!(apply_op(&s, &effects::delete(0, b"h", v(5, 2))), ApplyOutcome::Applied);
    assert_eq!(observe(&s).len(), 1, "the field at v8 survives a delete at v5");
    assert_eq!(apply_op(&s, &effects::delete(0, b"h", v(5, 2))), ApplyOutcome::Superseded);
    assert_eq!(apply_op(&s, &effects::delete(0, b"h", v(9, 2))), ApplyOutcome::Applied);
    assert!(observe(&s).is_empty());
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

#[test]
fn an_expiry_at_the_flush_is_dead_before_and_after_its_key_appears() {
    // Found by the mesh_message fuzz target (seed regression_expiry_at_the_flush): an expiry
    // register at the database's flush version (here the initial one) was dropped while its
    // key did not exist yet, but taken once a counter based at that version had created the
    // key, so replaying the batch changed the keyspace again.
    let expire = pb::Op {
        db: 0,
        key: b"k".to_vec().into(),
        effect: Some(pb::op::Effect::Expire(pb::Expire { deadline_ms: 4_000_000_000_000, version: version(Version::ZERO) })),
    };
    let counter = pb::Op {
        db: 0,
        key: b"k".to_vec().into(),
        effect: Some(pb::op::Effect::Counter(pb::CounterDelta {
            origin: 5,
            incr_total: 10,
            decr_total: 3,
            base: version(Version::ZERO),
            version: version(v(7, 5)),
            base_value: 0,
        })),
    };
    let s = store();
    assert_ne!(apply_op(&s, &expire), ApplyOutcome::Applied);
    assert_eq!(apply_op(&s, &counter), ApplyOutcome::Applied);
    assert_ne!(apply_op(&s, &expire), ApplyOutcome::Applied, "the same register, now that the key exists");
    let other = store();
    apply_op(&other, &counter);
    apply_op(&other, &expire);
    assert_eq!(observe(&s), observe(&other));
    assert!(observe(&s).values().all(|e| e.contains("ttl=None")), "{:?}", observe(&s));
}

#[test]
fn an_hll_register_raised_to_zero_changes_nothing() {
    // Found by the mesh_message fuzz target (seed regression_hll_register_zero): a peer's HLL
    // effect raising register 0 to 0 overflowed building the sparse opcode (a panic with
    // overflow checks, a corrupt HLL without). A register raised to 0 is no change.
    let s = store();
    let hll = |registers: Vec<u32>| pb::Op {
        db: 0,
        key: b"l".to_vec().into(),
        effect: Some(pb::op::Effect::Hll(pb::HllRegisters { version: version(v(3, 1)), registers })),
    };
    assert_eq!(apply_op(&s, &hll(vec![5 << 8 | 2])), ApplyOutcome::Applied);
    assert_ne!(apply_op(&s, &hll(vec![0, 7 << 8])), ApplyOutcome::Applied, "registers raised to 0");
    let mut bytes = crate::hll::new_empty();
    assert_eq!(crate::hll::set_register(&mut bytes, 0, 0, 3000).ok(), Some(false));
}

#[test]
fn two_types_at_one_version_replayed_change_nothing_and_end_alike_in_any_order() {
    // Found by the mesh_message fuzz target (seed regression_two_types_at_one_version): a
    // batch with typed effects of two types for one key at one version flipped the key on
    // every replay (the newcomer replaced a buried key, a live key kept its type). The merge
    // now orders such writes by type (`repl::merge`, "Ties between types"): replaying the batch
    // changes nothing, and the batch reversed ends in the same state.
    use prost::Message;
    let seed = include_bytes!("../../../fuzz/corpus/mesh_message/regression_two_types_at_one_version");
    let Some(pb::origin_message::Body::Batch(batch)) = pb::OriginMessage::decode(&seed[..]).expect("the seed decodes").body else {
        panic!("the seed is a batch");
    };
    let ops: Vec<pb::Op> = batch.ops.into_iter().map(|op| pb::Op::decode(op).expect("the seed's ops decode")).collect();
    let s = store();
    for op in &ops {
        apply_op(&s, op);
    }
    for op in &ops {
        assert_ne!(apply_op(&s, op), ApplyOutcome::Applied, "replaying {op:?} changed the keyspace");
    }
    let reversed = store();
    for op in ops.iter().rev() {
        apply_op(&reversed, op);
    }
    assert_eq!(observe(&s), observe(&reversed));
}

#[test]
fn a_member_removed_at_the_flush_version_stays_removed_through_replays() {
    // Found by the mesh_message fuzz target (seed regression_member_tombstone_at_the_flush): a
    // sorted set's member removed at the version a `FLUSHDB` then carried left a ghost holding
    // that member's tombstone, which the flush dropped; the removal replayed made the ghost
    // again. An element at the flush's own version survives it (only strictly older ones
    // die), so the ghost stays. No correct peer stamps two writes with one version; a merge
    // must stay idempotent all the same.
    let at = v(10, 2);
    let removal = |key: &[u8]| pb::Op {
        db: 0,
        key: key.to_vec().into(),
        effect: Some(pb::op::Effect::Zset(pb::ZSetMembers { members: vec![pb::ZSetMember { name: b"m".to_vec().into(), score: None, version: version(at) }] })),
    };
    let hash_removal = pb::Op {
        db: 0,
        key: b"h".to_vec().into(),
        effect: Some(pb::op::Effect::Hash(pb::HashFields { fields: vec![pb::FieldState { name: b"f".to_vec().into(), value: None, version: version(at) }] })),
    };
    let flush = effects::flush_db(0, at);
    let s = store();
    assert_eq!(apply_op(&s, &removal(b"z")), ApplyOutcome::Applied);
    assert_eq!(apply_op(&s, &hash_removal), ApplyOutcome::Applied);
    assert_eq!(apply_op(&s, &flush), ApplyOutcome::Applied);
    let after_flush = observe(&s);
    for op in [removal(b"z"), hash_removal.clone(), flush.clone()] {
        assert_ne!(apply_op(&s, &op), ApplyOutcome::Applied, "replaying {op:?} changed the keyspace");
    }
    assert_eq!(observe(&s), after_flush);
    // The flush first ends alike.
    let other = store();
    for op in [flush, removal(b"z"), hash_removal] {
        apply_op(&other, &op);
    }
    assert_eq!(observe(&other), after_flush);
    // The seed itself: replaying its batch changes nothing.
    use prost::Message;
    let seed = include_bytes!("../../../fuzz/corpus/mesh_message/regression_member_tombstone_at_the_flush");
    let Some(pb::origin_message::Body::Batch(batch)) = pb::OriginMessage::decode(&seed[..]).expect("the seed decodes").body else {
        panic!("the seed is a batch");
    };
    let ops: Vec<pb::Op> = batch.ops.into_iter().filter_map(|op| pb::Op::decode(op).ok()).collect();
    let s = store();
    for op in &ops {
        apply_op(&s, op);
    }
    for op in &ops {
        assert_ne!(apply_op(&s, op), ApplyOutcome::Applied, "replaying {op:?} changed the keyspace");
    }
}

#[test]
fn an_effect_without_elements_changes_nothing() {
    // Found by the mesh_message fuzz target (seed regression_effect_without_elements): a set's
    // member removed at version zero left a ghost of a set; a sorted set's effect naming no
    // member replaced it with a ghost of a sorted set, reported as no change, and each replay
    // of the removal brought the set's ghost back.
    let removal = pb::Op {
        db: 0,
        key: b"s".to_vec().into(),
        effect: Some(pb::op::Effect::Set(pb::SetMembers {
            members: vec![pb::FieldState { name: b"m".to_vec().into(), value: None, version: version(Version::ZERO) }],
        })),
    };
    let empty = |effect: pb::op::Effect| pb::Op { db: 0, key: b"s".to_vec().into(), effect: Some(effect) };
    let s = store();
    assert_eq!(apply_op(&s, &removal), ApplyOutcome::Applied);
    let before = observe(&s);
    for op in [
        empty(pb::op::Effect::Zset(pb::ZSetMembers { members: vec![] })),
        empty(pb::op::Effect::Hash(pb::HashFields { fields: vec![] })),
        empty(pb::op::Effect::Set(pb::SetMembers { members: vec![] })),
    ] {
        assert_ne!(apply_op(&s, &op), ApplyOutcome::Applied, "{op:?}");
        assert_eq!(observe(&s), before, "{op:?} changed the keyspace");
        assert_ne!(apply_op(&s, &removal), ApplyOutcome::Applied, "the removal replayed after {op:?}");
    }
}
