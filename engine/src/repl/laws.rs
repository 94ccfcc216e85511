//! Property tests of the merge lattice: for random effects from three origins, applying them
//! in any order, with duplicates and with any grouping, leaves every replica in the same
//! state — i.e. `apply_op` is commutative, idempotent and associative on the keyspace.
//! `local_writes` checks a node's own writes, no-ops included, against the same merge;
//! `replays` holds the cases the `mesh_message` fuzz target found; `restore` checks nodes
//! restored from a snapshot or an RDB file against the same laws.
//!
//! The effects here are in their wire form (`pb::Op`), as a peer sends them, and merge
//! through `apply_op` below, which decodes each (`repl::wire`) first: the laws hold for what
//! arrives on the wire, the decoder included.

mod local_writes;
mod replays;
mod restore;

use std::collections::BTreeMap;
use std::sync::Arc;

use keymesh_proto as pb;
use proptest::prelude::*;

use super::merge::{ApplyOutcome, Recorder};
use super::wire::version;
use super::wire::Decoded;
use crate::db::effect::Effect;
use crate::db::{Store, Value, SHARDS_PER_DB};
use crate::hlc::{Hlc, SystemClock, Version};

/// The effect builders (`db::effect`), giving the wire form a peer sends.
mod effects {
    use keymesh_proto as pb;

    use crate::db::effect::Effect;
    use crate::db::Value;
    use crate::hlc::Version;
    pub use crate::repl::wire::from_pb;

    pub fn value_effect(db: usize, key: &[u8], value: &Value, v: Version, names: &[crate::db::entry::Name]) -> pb::Op {
        Effect::of_value(db, key, value, v, names).into()
    }

    pub fn delete(db: usize, key: &[u8], v: Version) -> pb::Op {
        Effect::delete(db, key, v).into()
    }

    pub fn expire(db: usize, key: &[u8], deadline_ms: u64, v: Version) -> pb::Op {
        Effect::expire(db, key, deadline_ms, v).into()
    }

    pub fn flush_db(db: usize, v: Version) -> pb::Op {
        Effect::flush_db(db, v).into()
    }

    pub fn hll_registers(db: usize, key: &[u8], v: Version, raised: &[u32]) -> pb::Op {
        Effect::hll_registers(db, key, v, raised).into()
    }

    pub fn counter(db: usize, key: &[u8], delta: pb::CounterDelta) -> pb::Op {
        pb::Op { db: db as u32, key: key.to_vec().into(), effect: Some(pb::op::Effect::Counter(delta)) }
    }
}

/// Merges an op as a peer's link does: read where it lies in a received batch
/// (`wire::decode_in`: a string's write or a collection's elements borrowed, any other an
/// `Effect`), then merged
/// (`merge::apply_decoded`); one that is no effect is superseded.
fn apply_op(store: &Store, op: &pb::Op) -> ApplyOutcome {
    use prost::Message;
    let batch = pb::FramedOps::from_ops([&op.encode_to_vec()[..]]);
    let span = batch.spans().next().expect("one op");
    let outcome = match super::wire::decode_in(batch.as_bytes(), span) {
        Ok(op) => super::merge::apply_decoded(store, &op, op.key()),
        Err(_) => ApplyOutcome::Superseded,
    };
    outcome
}

/// The wire form of effects a node made (a snapshot, a local write).
fn wire(effects: Vec<Effect>) -> Vec<pb::Op> {
    effects.into_iter().map(pb::Op::from).collect()
}

fn store() -> Store {
    let s = Store::new(2, Hlc::new(Arc::new(SystemClock), 500), 9);
    s.enable_replication();
    s
}

/// Everything a client could observe, plus the expiry register: the state replicas must agree on.
fn observe(store: &Store) -> BTreeMap<(usize, Vec<u8>), String> {
    let mut out = BTreeMap::new();
    for db in 0..store.databases() {
        for s in 0..SHARDS_PER_DB {
            let shard = store.lock_shard(db, s);
            for (key, entry) in shard.iter() {
                let value = match &entry.value {
                    // An HLL's registers are what replicas must agree on; its encoding (sparse
                    // or dense) and cached count are each node's own.
                    Value::Str(v) if crate::hll::check(v).is_ok() => match crate::hll::registers(v) {
                        Ok(r) => format!("hll {:?}", r.iter().enumerate().filter(|(_, &x)| x > 0).collect::<Vec<_>>()),
                        Err(e) => format!("corrupt hll {e}"),
                    },
                    Value::Str(v) => format!("str {}", String::from_utf8_lossy(v)),
                    Value::Int(n) => format!("str {n}"),
                    Value::Counter(c) => format!("str {:?}", c.value()),
                    Value::Hash(h) => format!("hash {:?}", h.iter().map(|(k, f)| (k.clone(), f.value.clone())).collect::<BTreeMap<_, _>>()),
                    Value::Set(st) => format!("set {:?}", st.keys().cloned().collect::<std::collections::BTreeSet<_>>()),
                    Value::ZSet(z) => format!("zset {:?}", z.iter().map(|(m, sc)| (m.clone(), sc.to_bits())).collect::<BTreeMap<_, _>>()),
                    Value::List(l) => format!("list {:?}", l.iter().map(|i| String::from_utf8_lossy(i).into_owned()).collect::<Vec<_>>()),
                };
                out.insert((db, key.to_vec()), format!("{value} ttl={:?}", entry.deadline()));
            }
        }
    }
    out
}

fn v(hlc: u64, node: u32) -> Version {
    Version { hlc, node }
}

/// One random effect at version `(hlc, node)`. `ops_strategy` gives each op its own version
/// (a version is one write), except the ties it makes on purpose (`tie_kind`).
fn effect(kind: u8, key: u8, hlc: u64, node: u32, a: u8, b: u8) -> Vec<pb::Op> {
    let key = [b'k', b'0' + key % 3];
    let ver = v(hlc, node);
    let name = |x: u8| bytes::Bytes::from(vec![b'f', b'0' + x % 4]);
    match kind % 12 {
        // A SET, and now and then a SET … EX (its register at its version, right after it) or a
        // SET that dropped the key's TTL (a register of no deadline).
        0 => {
            let set = effects::value_effect(0, &key, &Value::string(&[b'v', a]), ver, &[]);
            match b % 4 {
                1 => vec![set, effects::expire(0, &key, 4_000_000_000_000 + a as u64, ver)],
                2 => vec![set, effects::expire(0, &key, 0, ver)],
                _ => vec![set],
            }
        }
        1 => vec![effects::delete(0, &key, ver)],
        2 => vec![effects::expire(0, &key, if a.is_multiple_of(2) { 0 } else { 4_000_000_000_000 + a as u64 }, ver)],
        3 => vec![pb::Op {
            db: 0,
            key: key.to_vec().into(),
            effect: Some(pb::op::Effect::Hash(pb::HashFields {
                fields: vec![pb::FieldState { name: name(a), value: (!b.is_multiple_of(3)).then(|| vec![b].into()), version: version(ver) }],
            })),
        }],
        4 => vec![pb::Op {
            db: 0,
            key: key.to_vec().into(),
            effect: Some(pb::op::Effect::Set(pb::SetMembers {
                members: vec![pb::FieldState { name: name(a), value: (!b.is_multiple_of(3)).then(bytes::Bytes::new), version: version(ver) }],
            })),
        }],
        5 => vec![pb::Op {
            db: 0,
            key: key.to_vec().into(),
            effect: Some(pb::op::Effect::Zset(pb::ZSetMembers {
                members: vec![pb::ZSetMember { name: name(a), score: (!b.is_multiple_of(3)).then_some(b as f64), version: version(ver) }],
            })),
        }],
        6 => vec![effects::counter(
            0,
            &key,
            pb::CounterDelta {
                origin: node,
                // An origin's totals only grow with its versions, as a real origin's do.
                incr_total: hlc as i64 / 3,
                decr_total: hlc as i64 / 5,
                base: version(Version::ZERO),
                version: version(ver),
                base_value: 0,
            },
        )],
        7 => vec![pb::Op {
            db: 0,
            key: key.to_vec().into(),
            effect: Some(pb::op::Effect::List(pb::ListValue { items: vec![vec![a].into(), vec![b].into()], version: version(ver) })),
        }],
        // FLUSHDB: a database-wide tombstone.
        8 => vec![effects::flush_db(0, ver)],
        // PFADD/PFMERGE: registers raised in one of four incarnations (as created from four
        // different pasts), so that several origins' adds meet in the same HLL; now and then
        // a value above 32 that makes the HLL dense.
        9 => vec![effects::hll_registers(0, &key, hll_incarnation(a), &hll_registers(a, b))],
        // A string write of HLL bytes: at a shared incarnation (what a snapshot of a
        // PFADD-created HLL sends), or a SET at its own version followed by PFADDs on it.
        10 if b.is_multiple_of(2) => vec![hll_value(&key, hll_incarnation(a), a, b)],
        10 => vec![hll_value(&key, ver, a, b), effects::hll_registers(0, &key, ver, &hll_registers(b, a))],
        // A whole-collection write: a delete and members at the same version.
        _ => vec![
            effects::delete(0, &key, ver),
            pb::Op {
                db: 0,
                key: key.to_vec().into(),
                effect: Some(pb::op::Effect::Set(pb::SetMembers {
                    members: vec![pb::FieldState { name: name(a), value: Some(Default::default()), version: version(ver) }],
                })),
            },
        ],
    }
}

fn hll_incarnation(a: u8) -> Version {
    crate::db::hll::incarnation_after(v((a % 4) as u64 * 150, 1))
}

/// One to three registers (`index << 8 | value`) among a few shared indexes.
fn hll_registers(a: u8, b: u8) -> Vec<u32> {
    let value = |x: u8| if x.is_multiple_of(13) { 40 } else { (x % 6 + 1) as u32 };
    (0..(b % 3 + 1) as u32).map(|i| ((a as u32 + i * 5) % 9) << 8 | value(b.wrapping_add(i as u8 * 7))).collect()
}

/// A string write of an HLL holding a few registers, at `ver`.
fn hll_value(key: &[u8], ver: Version, a: u8, b: u8) -> pb::Op {
    let mut bytes = crate::hll::new_empty();
    for r in hll_registers(a, b) {
        let _ = crate::hll::set_register(&mut bytes, (r >> 8) as usize, (r & 0xff) as u8, crate::hll::DEFAULT_SPARSE_MAX_BYTES);
    }
    effects::value_effect(0, key, &Value::Str(bytes.into()), ver, &[])
}

/// The type a generated typed write has (`effect`'s kinds), for ties: `None` for effects
/// without a type of their own (delete, expiry, flush) and for HLLs (whose versions are
/// their incarnations, not the op's).
fn type_of(kind: u8) -> Option<crate::db::Kind> {
    use crate::db::Kind;
    match kind % 12 {
        0 | 6 => Some(Kind::String),
        3 => Some(Kind::Hash),
        4 | 11 => Some(Kind::Set),
        5 => Some(Kind::ZSet),
        7 => Some(Kind::List),
        _ => None,
    }
}

/// A typed effect kind of another type than `previous`, chosen by `pick`: what a faulty
/// peer could send for the same key at the same version (`repl::merge`, "Ties between types").
fn tie_kind(previous: u8, pick: u8) -> Option<u8> {
    let held = type_of(previous)?;
    let others: Vec<u8> = [0, 3, 4, 5, 6, 7, 11].into_iter().filter(|&k| type_of(k) != Some(held)).collect();
    Some(others[pick as usize % others.len()])
}

/// Up to 40 effects with distinct versions, except that about one in four is a write of
/// another type at the version and key of the typed write before it.
fn ops_strategy() -> impl Strategy<Value = Vec<pb::Op>> {
    proptest::collection::vec((any::<u8>(), any::<u8>(), 1u32..4, any::<u8>(), any::<u8>(), any::<u8>()), 1..40).prop_map(|raw| {
        let mut ops = Vec::new();
        // The last op another may tie with: (kind, key, hlc, node); never a tie itself, so
        // no version carries two writes of one type.
        let mut tie_with: Option<(u8, u8, u64, u32)> = None;
        for (i, (kind, key, node, a, b, tie)) in raw.into_iter().enumerate() {
            let tied = tie_with.filter(|_| tie.is_multiple_of(4)).and_then(|(held, key, hlc, node)| Some((tie_kind(held, kind)?, key, hlc, node)));
            match tied {
                // No register at a tied version, on either side (`SET … EX` writes its string
                // and its register at one version): a node stamps each write with a version of
                // its own, so only a faulty peer's write of another type meets a register at its
                // version, and what that does to the register across a snapshot is not settled
                // (issue 16, forty-first pass's note).
                Some((kind, key, hlc, node)) => {
                    ops.extend(effect(kind, key, hlc, node, a, b).into_iter().filter(|op| !sets_register(op)));
                    tie_with = None;
                }
                None => {
                    let hlc = 100 + i as u64 * 7 % 97 * 3 + (i as u64 / 97) * 1000;
                    let written = effect(kind, key, hlc, node, a, b);
                    tie_with = (!written.iter().any(sets_register)).then_some((kind, key, hlc, node));
                    ops.extend(written);
                }
            }
        }
        ops
    })
}

fn sets_register(op: &pb::Op) -> bool {
    matches!(op.effect, Some(pb::op::Effect::Expire(_)))
}

/// Merges ops as a peer's link merges a received batch of them: each read where it lies
/// (`wire::decode_in`), then all merged in order by `merge::apply_chunk`, which merges a
/// string's write and the expiry register written with it (`SET … EX`) as one write. Where the
/// ops arrive one by one (`apply_op`) or shuffled, the laws compare the two.
fn apply_all(store: &Store, ops: &[pb::Op]) {
    apply_batch(store, ops);
}

/// `apply_all`, returning each op's outcome.
fn apply_batch(store: &Store, ops: &[pb::Op]) -> Vec<ApplyOutcome> {
    use prost::Message;
    struct Outcomes(Vec<ApplyOutcome>);
    impl Recorder for Outcomes {
        fn record(&mut self, _: &Decoded<'_>, outcome: ApplyOutcome) {
            self.0.push(outcome);
        }
    }
    let encoded: Vec<Vec<u8>> = ops.iter().map(|op| op.encode_to_vec()).collect();
    let batch = pb::FramedOps::from_ops(encoded.iter().map(|op| &op[..]));
    let decoded: Vec<Decoded<'_>> = batch.spans().filter_map(|span| super::wire::decode_in(batch.as_bytes(), span).ok()).collect();
    let merging: Vec<(&Decoded<'_>, &[u8])> = decoded.iter().map(|op| (op, op.key())).collect();
    let mut outcomes = Outcomes(Vec::new());
    super::merge::apply_chunk(store, &merging, &mut outcomes);
    outcomes.0
}

/// Every key's version and expiry register, which `observe` leaves out (a register's version
/// decides what a later register or write does to it).
fn registers(store: &Store) -> BTreeMap<Vec<u8>, (Version, Option<crate::db::Expiry>)> {
    let mut out = BTreeMap::new();
    for s in 0..SHARDS_PER_DB {
        let shard = store.lock_shard(0, s);
        for (key, entry) in shard.iter() {
            out.insert(key.to_vec(), (entry.version(), entry.expiry().copied()));
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// Any order, with duplicates, converges to the same state (commutative and idempotent).
    #[test]
    fn replicas_converge_under_reordering_and_duplicates(ops in ops_strategy(), seed in any::<u64>()) {
        let reference = store();
        apply_all(&reference, &ops);
        let mut shuffled = ops.clone();
        let mut rng = seed;
        for i in (1..shuffled.len()).rev() {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            shuffled.swap(i, (rng >> 33) as usize % (i + 1));
        }
        // Duplicate a prefix: replays after a reconnect.
        let dupes: Vec<pb::Op> = shuffled.iter().take(shuffled.len() / 2).cloned().collect();
        shuffled.extend(dupes);
        let replica = store();
        apply_all(&replica, &shuffled);
        prop_assert_eq!(observe(&reference), observe(&replica));
    }

    /// A string's write and the register written with it (`SET … EX`: back to back, at one
    /// version), merged as one write (`merge::apply_string_with_register`, as a batch's pair
    /// is) leave a node where merging one and then the other leaves it, with the same outcomes,
    /// whatever the node held before and whatever it merges after.
    #[test]
    fn a_string_and_its_register_merged_as_one_leave_a_node_where_one_by_one_does(
        before in ops_strategy(),
        after in ops_strategy(),
        key in any::<u8>(),
        hlc in 1u64..1500,
        node in 1u32..4,
        deadline_ms in prop_oneof![Just(0u64), 4_000_000_000_000u64..4_000_000_000_100],
    ) {
        let key = [b'k', b'0' + key % 3];
        let pair = [effects::value_effect(0, &key, &Value::string(b"ex"), v(hlc, node), &[]), effects::expire(0, &key, deadline_ms, v(hlc, node))];
        let (paired, single) = (store(), store());
        for op in &before {
            apply_op(&paired, op);
            apply_op(&single, op);
        }
        let outcomes = apply_batch(&paired, &pair);
        let one_by_one: Vec<ApplyOutcome> = pair.iter().map(|op| apply_op(&single, op)).collect();
        prop_assert_eq!(outcomes, one_by_one);
        prop_assert_eq!(observe(&paired), observe(&single));
        prop_assert_eq!(registers(&paired), registers(&single));
        for op in &after {
            apply_op(&paired, op);
            apply_op(&single, op);
        }
        prop_assert_eq!(observe(&paired), observe(&single));
        prop_assert_eq!(registers(&paired), registers(&single));
    }

    /// Three origins' streams interleaved differently, and merged via an intermediate replica
    /// (grouping), still converge (associativity in practice: A+(B+C) = (A+B)+C).
    #[test]
    fn grouping_does_not_matter(a in ops_strategy(), b in ops_strategy(), c in ops_strategy()) {
        // Give each origin its own version space so versions stay unique.
        let shift = |ops: Vec<pb::Op>, by: u64| -> Vec<pb::Op> {
            ops.into_iter().map(|mut op| { bump(&mut op, by); op }).collect()
        };
        let (a, b, c) = (shift(a, 0), shift(b, 100_000), shift(c, 200_000));
        let left = store();
        apply_all(&left, &a);
        let bc = store();
        apply_all(&bc, &b);
        apply_all(&bc, &c);
        let mut snap = Vec::new();
        super::snapshot::snapshot(&bc, &mut |batch| snap.extend(wire(batch)));
        apply_all(&left, &snap);
        let right = store();
        apply_all(&right, &c);
        apply_all(&right, &a);
        apply_all(&right, &b);
        prop_assert_eq!(observe(&left), observe(&right));
    }
}

fn bump(op: &mut pb::Op, by: u64) {
    use pb::op::Effect;
    let shift = |v: &mut Option<pb::Version>| {
        if let Some(v) = v {
            v.hlc += by;
        }
    };
    match &mut op.effect {
        Some(Effect::Delete(d)) => shift(&mut d.version),
        Some(Effect::Expire(e)) => shift(&mut e.version),
        Some(Effect::Hash(h)) => h.fields.iter_mut().for_each(|f| shift(&mut f.version)),
        Some(Effect::Set(s)) => s.members.iter_mut().for_each(|f| shift(&mut f.version)),
        Some(Effect::Zset(z)) => z.members.iter_mut().for_each(|f| shift(&mut f.version)),
        Some(Effect::Counter(c)) => {
            shift(&mut c.version);
            // Keep each origin's totals growing with its versions, as the generator does.
            let hlc = c.version.as_ref().map_or(0, |v| v.hlc) as i64;
            c.incr_total = hlc / 3;
            c.decr_total = hlc / 5;
        }
        Some(Effect::List(l)) => shift(&mut l.version),
        Some(Effect::FlushDb(f)) => shift(&mut f.version),
        // HLL incarnations created by PFADD are shared by every origin by design (the same
        // past gives the same version); a SET's own version is shifted as any write's.
        Some(Effect::Hll(h)) if h.version.as_ref().is_some_and(|v| v.node != crate::db::hll::HLL_NODE) => shift(&mut h.version),
        Some(Effect::StringSet(s)) if s.version.as_ref().is_some_and(|v| v.node != crate::db::hll::HLL_NODE) => shift(&mut s.version),
        _ => {}
    }
}

#[test]
fn two_types_at_one_version_end_as_the_higher_ranked_in_any_order() {
    // No correct peer sends them, but the merge defines them (`repl::merge`, "Ties between
    // types"): for every pair of typed writes of different types at one version, both orders,
    // with the pair replayed, leave the same state, and it is the higher-ranked type's.
    use crate::db::Kind;
    let typed = [0u8, 3, 4, 5, 6, 7, 11];
    let rank = [Kind::String, Kind::List, Kind::Hash, Kind::Set, Kind::ZSet];
    for &x in &typed {
        for &y in typed.iter().filter(|&&y| type_of(y) != type_of(x)) {
            let (first, second) = (effect(x, 0, 100, 1, 1, 2), effect(y, 0, 100, 1, 3, 4));
            let (a, b) = (store(), store());
            apply_all(&a, &[first.clone(), second.clone(), first.clone()].concat());
            apply_all(&b, &[second.clone(), first.clone(), second.clone()].concat());
            assert_eq!(observe(&a), observe(&b), "kinds {x} and {y}");
            let winner = [type_of(x), type_of(y)].into_iter().flatten().max_by_key(|k| rank.iter().position(|r| r == k)).expect("typed");
            let shard = a.lock_shard(0, a.shard_of(b"k0"));
            assert_eq!(shard.raw(b"k0").map(|e| e.value.kind()), Some(winner), "kinds {x} and {y}: {:?}", observe(&a));
        }
    }
}

#[test]
fn keydb_366_newer_write_wins_on_both_sides() {
    // KeyDB #366: after a partition, the older write on B and the newer on A must leave both
    // nodes with A's value, whichever order the effects arrive in.
    let (a, b) = (store(), store());
    let older = effects::value_effect(0, b"k", &Value::string(b"from-b"), v(10, 2), &[]);
    let newer = effects::value_effect(0, b"k", &Value::string(b"from-a"), v(20, 1), &[]);
    apply_all(&a, &[newer.clone(), older.clone()]);
    apply_all(&b, &[older, newer]);
    assert_eq!(observe(&a), observe(&b));
    assert!(observe(&a).values().next().is_some_and(|s| s.contains("from-a")));
}

#[test]
fn deletes_do_not_resurrect_and_later_writes_survive() {
    // A delete dominates every older write of the key, in any order; a newer write survives it.
    let s = store();
    let field = |hlc| pb::Op {
        db: 0,
        key: b"h".to_vec().into(),
        effect: Some(pb::op::Effect::Hash(pb::HashFields {
            fields: vec![pb::FieldState { name: b"f".to_vec().into(), value: Some(b"x".to_vec().into()), version: version(v(hlc, 1)) }],
        })),
    };
    apply_all(&s, &[effects::delete(0, b"h", v(20, 2)), field(10)]);
    assert!(observe(&s).is_empty(), "an older field resurrected a deleted key");
    apply_all(&s, &[field(30)]);
    assert_eq!(observe(&s).len(), 1);
}

#[test]
fn concurrent_increments_from_three_origins_all_count() {
    // Each origin's running totals merge by maximum, so every acknowledged increment counts.
    let s = store();
    let delta = |origin, incr, hlc| {
        effects::counter(
            0,
            b"c",
            pb::CounterDelta { origin, incr_total: incr, decr_total: 0, base: version(Version::ZERO), version: version(v(hlc, origin)), base_value: 0 },
        )
    };
    apply_all(&s, &[delta(1, 2, 5), delta(2, 3, 6), delta(1, 1, 4), delta(3, 4, 7), delta(2, 3, 6)]);
    assert!(observe(&s).values().next().is_some_and(|x| x.contains("Some(9)")), "{:?}", observe(&s));
}

#[test]
fn concurrent_pfadds_on_three_nodes_all_count_and_a_newer_delete_wins() {
    // Three nodes create the same HLL from nothing (the same incarnation) and add different
    // elements; in any order every replica counts all of them. A DEL stamped later ends the
    // incarnation everywhere, and a PFADD after it starts a new one that survives.
    let incarnation = crate::db::hll::incarnation_after(Version::ZERO);
    let adds: Vec<pb::Op> = (0..3u32)
        .map(|node| {
            let mut hll = crate::hll::new_empty();
            let mut raised = Vec::new();
            for i in 0..50 {
                let (index, count) = crate::hll::pattern(format!("n{node}-{i}").as_bytes());
                if crate::hll::set_register(&mut hll, index, count, crate::hll::DEFAULT_SPARSE_MAX_BYTES).expect("valid") {
                    raised.push((index as u32) << 8 | count as u32);
                }
            }
            effects::hll_registers(0, b"h", incarnation, &raised)
        })
        .collect();
    let (a, b) = (store(), store());
    apply_all(&a, &adds);
    apply_all(&b, &[adds[2].clone(), adds[0].clone(), adds[1].clone(), adds[0].clone()]);
    assert_eq!(observe(&a), observe(&b));
    let count = |s: &Store| {
        let shard = s.lock_shard(0, s.shard_of(b"h"));
        match shard.raw(b"h").map(|e| &e.entry().value) {
            Some(Value::Str(bytes)) => crate::hll::count(bytes).expect("valid"),
            _ => 0,
        }
    };
    // Every node's adds count: the estimate is the one HLL holding all 150 elements gives.
    let mut all = crate::hll::new_empty();
    for node in 0..3 {
        for i in 0..50 {
            crate::hll::add(&mut all, format!("n{node}-{i}").as_bytes(), crate::hll::DEFAULT_SPARSE_MAX_BYTES).expect("valid");
        }
    }
    assert_eq!(count(&a), crate::hll::count(&all).expect("valid"));
    assert!(count(&a).abs_diff(150) <= 3, "{}", count(&a));
    let del = effects::delete(0, b"h", v(500, 2));
    let after = effects::hll_registers(0, b"h", crate::db::hll::incarnation_after(v(500, 2)), &[7 << 8 | 3]);
    apply_all(&a, &[del.clone(), after.clone()]);
    apply_all(&b, &[after, del]);
    assert_eq!(observe(&a), observe(&b));
    assert_eq!(count(&a), 1, "{:?}", observe(&a));
}

/// A member's tombstone inside a live set is kept while a peer may not have seen it, and
/// collected by the pass that walks its shard once every peer is past it: the collector walks
/// collections only while one in the process holds a tombstone (`db::field_tombstones`), so
/// this fails if a merged removal were not counted.
#[test]
fn a_members_tombstone_inside_a_live_set_is_collected_once_every_peer_is_past_it() {
    let s = store();
    let members =
        |states: Vec<pb::FieldState>| pb::Op { db: 0, key: b"s".to_vec().into(), effect: Some(pb::op::Effect::Set(pb::SetMembers { members: states })) };
    // A member with a value is present; without one, removed.
    let member =
        |name: &[u8], present: bool, at: Version| pb::FieldState { name: name.to_vec().into(), value: present.then(bytes::Bytes::new), version: version(at) };
    // Versions of now: the one-day cap (`tombstone-gc-seconds`) keeps them, so only the
    // horizon (what every peer has merged) decides.
    let removed_at = s.hlc.now();
    assert_eq!(apply_op(&s, &members(vec![member(b"kept", true, v(removed_at - 1, 1)), member(b"gone", false, v(removed_at, 1))])), ApplyOutcome::Applied);
    let tombstones = |s: &Store| {
        let shard = s.lock_shard(0, s.shard_of(b"s"));
        match shard.raw(b"s").map(|e| &e.entry().value) {
            Some(Value::Set(set)) => set.removed.len(),
            other => panic!("not a set: {}", other.is_some()),
        }
    };
    assert_eq!(tombstones(&s), 1);
    assert!(crate::db::field_tombstones::any_held());
    let now = s.hlc.wall_ms();
    let passes = crate::db::expire::FIELD_TOMBSTONE_PASSES;
    let collected_below = |horizon: u64| (0..passes).map(|pass| crate::db::expire::collect_tombstones(&s, now, horizon, pass)).sum::<usize>();
    assert_eq!(collected_below(removed_at - 1), 0, "a peer may not have seen the removal");
    assert_eq!(tombstones(&s), 1);
    assert_eq!(collected_below(removed_at), 1, "every peer is past it");
    assert_eq!(tombstones(&s), 0);
    assert!(observe(&s)[&(0, b"s".to_vec())].contains("kept"));
}
