//! Property tests of local writes against the merge: a node's own writes — no-ops included
//! (a `DEL` of a key it does not hold, an `HDEL`/`SREM`/`ZREM` of elements it does not hold,
//! a `PERSIST` without TTL, a `FLUSHDB` of an empty database) — leave it exactly where their
//! effects leave a peer, and such a no-op write dominates an older write it never saw
//! (DESIGN.md, Merge semantics: every write command is a versioned write).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use keymesh_proto as pb;
use proptest::prelude::*;

use super::{apply_all, effect, effects, observe, v};
use crate::db::ctx::{Ctx, Ttl};
use crate::db::entry::{Collection, Field, ListValue, Name};
use crate::db::zset::SortedSet;
use crate::db::{Store, Value};
use crate::hlc::{Hlc, Version, WallClock};

/// A wall clock the test sets: local stamps interleave with the remote versions.
struct Manual(AtomicU64);

impl WallClock for Manual {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A replicating store whose clock reads `ms`.
fn store_at(ms: u64) -> Store {
    let s = Store::new(2, Hlc::new(Arc::new(Manual(AtomicU64::new(ms))), 500), 9);
    s.enable_replication();
    s
}

/// One command's worth of local writes.
#[derive(Debug, Clone)]
enum Local {
    Set(u8, u8),
    Del(u8),
    HSet(u8, u8),
    HDel(u8, u8),
    SAdd(u8, u8),
    SRem(u8, u8),
    ZAdd(u8, u8, u8),
    ZRem(u8, u8),
    Persist(u8),
    Expire(u8, u8),
    Incr(u8),
    PfAdd(u8, u8),
    LPush(u8, u8),
    LPop(u8),
    /// `SET ... KEEPTTL`: a whole write that keeps (and restamps) the key's TTL.
    SetKeepTtl(u8, u8),
    /// `SUNIONSTORE`-like: a whole set replacing whatever the key held.
    StoreSet(u8, u8),
    /// `SET ... EX` (`SETEX`): a whole write and its TTL, at one version.
    SetEx(u8, u8),
    FlushDb,
}

fn key(k: u8) -> Vec<u8> {
    vec![b'k', b'0' + k % 3]
}

fn name(x: u8) -> Bytes {
    Bytes::from(vec![b'f', b'0' + x % 4])
}

fn local_strategy() -> impl Strategy<Value = Local> {
    (0u8..18, any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(kind, k, a, b)| match kind {
        0 => Local::Set(k, a),
        1 => Local::Del(k),
        2 => Local::HSet(k, a),
        3 => Local::HDel(k, a),
        4 => Local::SAdd(k, a),
        5 => Local::SRem(k, a),
        6 => Local::ZAdd(k, a, b),
        7 => Local::ZRem(k, a),
        8 => Local::Persist(k),
        9 => Local::Expire(k, a),
        10 => Local::Incr(k),
        11 => Local::PfAdd(k, a),
        12 => Local::LPush(k, a),
        13 => Local::LPop(k),
        14 => Local::SetKeepTtl(k, a),
        15 => Local::StoreSet(k, a),
        16 => Local::SetEx(k, a),
        _ => Local::FlushDb,
    })
}

/// Runs one local command on `store` (as its handler would, through the edit API) and
/// returns the effects it emitted. Type errors write nothing, as in Redis.
fn run(store: &Store, op: &Local) -> Vec<pb::Op> {
    let locks = match op {
        Local::FlushDb => crate::db::Locks::none(),
        Local::Set(k, _)
        | Local::Del(k)
        | Local::HSet(k, _)
        | Local::HDel(k, _)
        | Local::SAdd(k, _)
        | Local::SRem(k, _)
        | Local::ZAdd(k, _, _)
        | Local::ZRem(k, _)
        | Local::Persist(k)
        | Local::Expire(k, _)
        | Local::Incr(k)
        | Local::PfAdd(k, _)
        | Local::LPush(k, _)
        | Local::LPop(k)
        | Local::SetKeepTtl(k, _)
        | Local::StoreSet(k, _)
        | Local::SetEx(k, _) => store.lock_many(vec![(0, store.shard_of(&key(*k)))]),
    };
    // The command's time, read once as `run_command` does: its writes are stamped with it.
    let mut ctx = Ctx::new(store, 0, store.hlc.wall_ms(), locks);
    match op {
        Local::Set(k, a) => {
            ctx.put(&key(*k), Value::string(&[b'v', *a]), false);
        }
        Local::Del(k) => {
            ctx.delete(&key(*k));
        }
        Local::HSet(k, a) => {
            let _ = ctx.edit_or_create(&key(*k), |h: &mut Collection<Field>, v| h.insert(name(*a), Field::new(b"x", v)));
        }
        Local::HDel(k, a) => {
            let _ = ctx.remove_elements::<Collection<Field>>(&key(*k), &[name(*a)]);
        }
        Local::SAdd(k, a) => {
            let _ = ctx.edit_or_create(&key(*k), |s: &mut Collection<Version>, v| s.insert(name(*a), v));
        }
        Local::SRem(k, a) => {
            let _ = ctx.remove_elements::<Collection<Version>>(&key(*k), &[name(*a)]);
        }
        Local::ZAdd(k, a, b) => {
            let _ = ctx.edit_or_create(&key(*k), |z: &mut SortedSet, v| z.insert(name(*a), *b as f64, v));
        }
        Local::ZRem(k, a) => {
            let _ = ctx.remove_elements::<SortedSet>(&key(*k), &[name(*a)]);
        }
        Local::Persist(k) => {
            ctx.persist(&key(*k));
        }
        Local::Expire(k, a) => {
            if ctx.exists(&key(*k)) {
                ctx.set_deadline(&key(*k), 4_000_000_000_000 + *a as u64);
            }
        }
        Local::Incr(k) => {
            let _ = ctx.incr(&key(*k), 1);
        }
        Local::PfAdd(k, a) => {
            let _ = ctx.hll_edit(&key(*k), |hll, raised| {
                let (index, count) = crate::hll::pattern(&[*a % 16]);
                if crate::hll::set_register(hll, index, count, crate::hll::DEFAULT_SPARSE_MAX_BYTES)? {
                    raised.push((index as u32) << 8 | count as u32);
                }
                Ok(())
            });
        }
        // A list replicates whole: a write to one with a TTL restamps its register, and one
        // emptied is deleted.
        Local::LPush(k, a) => {
            let _ = ctx.edit_or_create(&key(*k), |l: &mut ListValue, _| l.push_front(Name::from(&name(*a)[..])));
        }
        Local::LPop(k) => {
            let _ = ctx.edit(&key(*k), |l: &mut ListValue, _| l.pop_front());
        }
        Local::SetKeepTtl(k, a) => {
            ctx.put(&key(*k), Value::string(&[b'w', *a]), true);
        }
        Local::StoreSet(k, a) => {
            let set: Collection<Version> = [(name(*a), Version::ZERO), (name(a.wrapping_add(1)), Version::ZERO)].into_iter().collect();
            ctx.put(&key(*k), Value::Set(Box::new(set)), false);
        }
        Local::SetEx(k, a) => {
            ctx.put_with_ttl(&key(*k), Value::string(&[b'x', *a]), Ttl::At(4_000_000_000_000 + *a as u64));
        }
        Local::FlushDb => ctx.flush_db(0),
    }
    sent_by(ctx)
}

/// The ops a command's writes sent, as the backlog holds them (encoded by the writes themselves).
fn sent_by(mut ctx: Ctx<'_>) -> Vec<pb::Op> {
    std::mem::take(&mut ctx.effects)
        .into_framed()
        .into_iter()
        .map(|op| <keymesh_proto::Op as prost::Message>::decode(op).expect("a local write's op decodes"))
        .collect()
}

/// An effect from another origin: `effect`'s kind, key, origin, a, b, and an HLC seed.
type Remote = (u8, u8, u32, u8, u8, u16);

/// A step of one node's history: a local command, or an effect from another origin.
fn steps() -> impl Strategy<Value = Vec<Result<Local, Remote>>> {
    let remote = (any::<u8>(), any::<u8>(), 1u32..4, any::<u8>(), any::<u8>(), 1u16..500);
    proptest::collection::vec(prop_oneof![local_strategy().prop_map(Ok), remote.prop_map(Err)], 1..40)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// A node's own writes, no-ops included, leave it where their effects leave a peer that
    /// merges them, in any order, with everything else the node merged (local = remote).
    #[test]
    fn a_local_write_leaves_its_node_where_its_effect_leaves_a_peer(history in steps(), seed in any::<u64>()) {
        let node = store_at(0);
        let mut sent: Vec<pb::Op> = Vec::new();
        for (i, step) in history.iter().enumerate() {
            match step {
                Ok(local) => sent.extend(run(&node, local)),
                Err((kind, k, origin, a, b, hlc)) => {
                    // Unique versions: the step index in the low bits.
                    let ops = effect(*kind, *k, *hlc as u64 * 64 + i as u64, *origin, *a, *b);
                    apply_all(&node, &ops);
                    sent.extend(ops);
                }
            }
        }
        let mut rng = seed;
        for i in (1..sent.len()).rev() {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            sent.swap(i, (rng >> 33) as usize % (i + 1));
        }
        let peer = store_at(0);
        apply_all(&peer, &sent);
        prop_assert_eq!(observe(&node), observe(&peer));
    }
}

/// What an older write on another node did, and the removal that must dominate it.
struct Race {
    older: Vec<pb::Op>,
    removal: Local,
}

fn races() -> Vec<(&'static str, Race)> {
    let at = v(1000, 2);
    let field = |kind: u8| effect(kind, 0, 1000, 2, 1, 1);
    vec![
        (
            "DEL of a key never seen, after a SET",
            Race { older: vec![effects::value_effect(0, b"k0", &Value::string(b"old"), at, &[])], removal: Local::Del(0) },
        ),
        ("DEL of a key never seen, after an SADD", Race { older: field(4), removal: Local::Del(0) }),
        ("HDEL of a field never seen", Race { older: field(3), removal: Local::HDel(0, 1) }),
        ("SREM of a member never seen", Race { older: field(4), removal: Local::SRem(0, 1) }),
        ("ZREM of a member never seen", Race { older: field(5), removal: Local::ZRem(0, 1) }),
        ("FLUSHDB of an empty database", Race { older: field(3), removal: Local::FlushDb }),
        ("DEL of a counter never seen", Race { older: field(6), removal: Local::Del(0) }),
    ]
}

#[test]
fn a_removal_that_found_nothing_dominates_the_older_write_it_never_saw() {
    // The minimal case: n1 writes k; later n0, which never saw it, removes it (reply
    // 0); after the exchange every node agrees the removal won. The control (the removal made
    // before the write, by version) keeps the write.
    for (what, race) in races() {
        for (clock_ms, removal_wins) in [(1, true), (0, false)] {
            // 1 ms = HLC 65536, newer than the older write's 1000; 0 ms stamps below it.
            let (node, peer) = (store_at(clock_ms), store_at(clock_ms));
            let removal = run(&node, &race.removal);
            assert!(!removal.is_empty(), "{what}: the removal replicated nothing");
            let control = if removal_wins { "" } else { " (control: removal older)" };
            if !removal_wins {
                // Make the node's stamp older than the write: its clock is at 0 ms and its
                // HLC counter low, so it stamped below 1000.
                assert!(removal.iter().all(|op| effect_version(op) < v(1000, 2)), "{what}: stamp not older");
            }
            apply_all(&node, &race.older);
            apply_all(&peer, &race.older);
            apply_all(&peer, &removal);
            assert_eq!(observe(&node), observe(&peer), "{what}{control}: the nodes disagree");
            assert_eq!(observe(&node).is_empty(), removal_wins, "{what}{control}: {:?}", observe(&node));
        }
    }
}

#[test]
fn persist_of_a_key_without_ttl_dominates_an_older_expire() {
    // A PERSIST on a node that holds k without a TTL (or not at all) still writes the "no TTL"
    // register, so an older EXPIRE made elsewhere does not survive it.
    for holds_key in [true, false] {
        let (node, peer) = (store_at(1), store_at(1));
        let set = effects::value_effect(0, b"k0", &Value::string(b"v"), v(500, 2), &[]);
        let expire = effects::expire(0, b"k0", 4_000_000_000_000, v(1000, 2));
        if holds_key {
            apply_all(&node, std::slice::from_ref(&set));
        }
        let persist = run(&node, &Local::Persist(0));
        assert_eq!(persist.len(), 1, "PERSIST replicated nothing (key held: {holds_key})");
        apply_all(&node, &[set.clone(), expire.clone()]);
        apply_all(&peer, &[set, expire]);
        apply_all(&peer, &persist);
        assert_eq!(observe(&node), observe(&peer));
        assert!(observe(&node).values().all(|s| s.ends_with("ttl=None")), "{:?}", observe(&node));
    }
}

#[test]
fn a_write_with_its_ttl_is_one_write_at_one_version() {
    // `SET k v EX` on a missing key, on a key without a TTL and on one with another TTL: the
    // value and the register are written at one version, on the node and in the two ops it
    // sends (no `Expire` of 0 for the TTL the write replaced), and a peer ends where it is.
    let deadline = 4_000_000_000_100;
    for before in [vec![], vec![Local::Set(0, 1)], vec![Local::Set(0, 1), Local::Expire(0, 7)]] {
        let (node, peer) = (store_at(1), store_at(1));
        for local in &before {
            apply_all(&peer, &run(&node, local));
        }
        let sent = run(&node, &Local::SetEx(0, 100));
        let kinds: Vec<_> = sent.iter().map(|op| op.effect.as_ref().map(std::mem::discriminant)).collect();
        let expected = [Some(pb::op::Effect::StringSet(Default::default())), Some(pb::op::Effect::Expire(Default::default()))];
        assert_eq!(kinds, expected.iter().map(|e| e.as_ref().map(std::mem::discriminant)).collect::<Vec<_>>(), "{before:?}: {sent:?}");
        let Some(pb::op::Effect::Expire(expire)) = &sent[1].effect else { unreachable!() };
        assert_eq!(expire.deadline_ms, deadline, "{before:?}");
        assert_eq!(effect_version(&sent[0]), effect_version(&sent[1]), "{before:?}: the value and its TTL at two versions");
        let shard = node.lock_shard(0, node.shard_of(b"k0"));
        let entry = shard.raw(&b"k0"[..]).expect("the key is written");
        let register = entry.expiry().expect("the key has its register");
        assert_eq!((register.deadline_ms, register.version, entry.version()), (deadline, effect_version(&sent[0]), effect_version(&sent[0])), "{before:?}");
        // The expiry index has the key at its new deadline only (active expiry finds it there).
        assert_eq!((shard.due_keys(deadline - 1, 10).len(), shard.due_keys(deadline, 10).len()), (0, 1), "{before:?}");
        drop(shard);
        apply_all(&peer, &sent);
        assert_eq!(observe(&node), observe(&peer), "{before:?}");
    }
}

#[test]
fn emptying_a_collection_with_a_ttl_drops_the_ttl_on_peers_too() {
    // n0 removes the last element of a collection with a TTL: Redis deletes the key and its
    // TTL. An element another node added before it, which n0 had not seen, keeps the key alive
    // once it arrives, without the TTL on every node: n0 remembers the dropped TTL (its
    // register at the removal's version), and its effects tell peers so, that register first
    // and then the element's tombstone.
    let cases = [(Local::HSet(0, 0), Local::HDel(0, 0), 3u8), (Local::SAdd(0, 0), Local::SRem(0, 0), 4), (Local::ZAdd(0, 0, 5), Local::ZRem(0, 0), 5)];
    for (add, remove, kind) in cases {
        let (node, peer) = (store_at(1), store_at(1));
        let mut sent = run(&node, &add);
        sent.extend(run(&node, &Local::Expire(0, 7)));
        let removal = run(&node, &remove);
        assert!(observe(&node).is_empty(), "{remove:?}: the key is still there: {:?}", observe(&node));
        match &removal[..] {
            [pb::Op { effect: Some(pb::op::Effect::Expire(e)), .. }, elements] => {
                assert_eq!(e.deadline_ms, 0, "{remove:?}: the register says no TTL");
                assert_eq!(effects::from_pb(e.version.as_ref()), effect_version(elements), "{remove:?}: at the removal's version");
            }
            other => panic!("{remove:?}: expected the TTL's register, then the elements: {other:?}"),
        }
        // Another origin's element, older than all of n0's writes (1 ms is HLC 65536).
        let concurrent = effect(kind, 0, 1000, 3, 1, 1);
        apply_all(&node, &concurrent);
        apply_all(&peer, &sent);
        apply_all(&peer, &concurrent);
        apply_all(&peer, &removal);
        assert_eq!(observe(&node), observe(&peer), "{remove:?}: the nodes disagree");
        assert!(observe(&node).values().all(|s| s.ends_with("ttl=None")), "{remove:?}: {:?}", observe(&node));
        assert_eq!(observe(&node).len(), 1, "{remove:?}: the concurrent element keeps the key: {:?}", observe(&node));
    }
}

#[test]
fn an_edit_of_several_elements_sends_each_once_in_its_last_state() {
    // One command writes an element twice, and then one removes elements it holds and elements
    // it does not, each named twice: each effect names every element once, sorted — a live one
    // as the command left it, a removed one as a tombstone at the command's version —, and a
    // peer merging them ends where the node is. (Most edits change one element, whose names
    // are not sorted; these are the edits whose are.)
    let (node, peer) = (store_at(1), store_at(1));
    let command = |store| Ctx::new(store, 0, store.hlc.wall_ms(), store.lock_many(vec![(0, store.shard_of(b"h"))]));
    let field = |name: &[u8], value: Option<&[u8]>| (name.to_vec(), value.map(<[u8]>::to_vec));
    let fields_of = |ops: &[pb::Op]| match ops {
        [pb::Op { effect: Some(pb::op::Effect::Hash(h)), .. }] => {
            let versions: Vec<_> = h.fields.iter().map(|f| effects::from_pb(f.version.as_ref())).collect();
            assert!(versions.windows(2).all(|w| w[0] == w[1]), "one command, one version: {versions:?}");
            h.fields.iter().map(|f| (f.name.to_vec(), f.value.as_ref().map(|v| v.to_vec()))).collect::<Vec<_>>()
        }
        other => panic!("expected one hash effect: {other:?}"),
    };
    let mut ctx = command(&node);
    ctx.edit_or_create(b"h", |h: &mut Collection<Field>, v| {
        for (name, value) in [("f2", "a"), ("f0", "b"), ("f1", "c"), ("f2", "d")] {
            h.insert(Bytes::from(name), Field::new(value.as_bytes(), v));
        }
    })
    .unwrap();
    let added = sent_by(ctx);
    assert_eq!(fields_of(&added), [field(b"f0", Some(b"b")), field(b"f1", Some(b"c")), field(b"f2", Some(b"d"))]);
    let mut ctx = command(&node);
    let names = ["f2", "f9", "f0", "f2", "f9"].map(Bytes::from);
    assert_eq!(ctx.remove_elements::<Collection<Field>>(b"h", &names).unwrap(), 2);
    let removed = sent_by(ctx);
    assert_eq!(fields_of(&removed), [field(b"f0", None), field(b"f2", None), field(b"f9", None)]);
    apply_all(&peer, &added);
    apply_all(&peer, &removed);
    assert_eq!(observe(&node), observe(&peer));
    assert_eq!(observe(&node).len(), 1, "f1 is left: {:?}", observe(&node));
}

fn effect_version(op: &pb::Op) -> Version {
    use pb::op::Effect;
    let first = |v: Option<&pb::Version>| effects::from_pb(v);
    match &op.effect {
        Some(Effect::Delete(d)) => first(d.version.as_ref()),
        Some(Effect::FlushDb(f)) => first(f.version.as_ref()),
        Some(Effect::Hash(h)) => h.fields.iter().map(|f| first(f.version.as_ref())).max().unwrap_or(Version::ZERO),
        Some(Effect::Set(s)) => s.members.iter().map(|f| first(f.version.as_ref())).max().unwrap_or(Version::ZERO),
        Some(Effect::Zset(z)) => z.members.iter().map(|f| first(f.version.as_ref())).max().unwrap_or(Version::ZERO),
        Some(Effect::Expire(e)) => first(e.version.as_ref()),
        Some(Effect::StringSet(s)) => first(s.version.as_ref()),
        _ => Version::ZERO,
    }
}

#[test]
fn a_pop_that_empties_a_list_dominates_an_older_write_it_never_saw() {
    // n0 pops the last items of a list: the empty list it sends is a delete at the pop's
    // version on every peer. A write of the key made earlier on n1, of any type, that reaches
    // the nodes afterwards must stay dead on n0 too (found by the law above once it popped
    // lists: n0 buried the list without that delete's tombstone, and the late write revived
    // the key there alone).
    for kind in [0u8, 3, 4, 5, 6, 7, 9, 10] {
        let (node, peer) = (store_at(1), store_at(1));
        // Two items at 500 (`effect`'s list), popped one at a time; 1 ms is HLC 65536.
        let list = effect(7, 0, 500, 2, 1, 1);
        let older = effect(kind, 0, 1000, 2, 1, 1);
        apply_all(&node, &list);
        let mut pops = run(&node, &Local::LPop(0));
        pops.extend(run(&node, &Local::LPop(0)));
        assert!(observe(&node).is_empty(), "kind {kind}: the pops left {:?}", observe(&node));
        apply_all(&node, &older);
        apply_all(&peer, &list);
        apply_all(&peer, &pops);
        apply_all(&peer, &older);
        assert_eq!(observe(&node), observe(&peer), "kind {kind}: the nodes disagree");
        assert!(observe(&node).is_empty(), "kind {kind}: the older write survived: {:?}", observe(&node));
    }
}
