//! The mesh stream's messages as a peer could send them: arbitrary bytes decoded as the
//! protobuf messages of both directions, and every effect an origin's batch carries merged
//! into a replicating keyspace. Decoding may fail; nothing may panic, and merging the same
//! batch a second time changes nothing (the merge is idempotent).
//!
//! One precondition: a version names one write, and a write has one type, so no correct peer
//! sends two typed effects of different types for one key at one version (a whole-collection
//! write's delete and fields share its version, but a delete has no type). The merge does not
//! define a tie between two types at one version — the newcomer replaces a buried key of the
//! other type, a live key keeps it — so such a batch flips the key on every replay (found by
//! this target; seed `regression_two_types_at_one_version`). Batches like that are not
//! checked for idempotence; they must still merge without a panic.
#![no_main]

use std::collections::HashMap;

use std::sync::{Arc, OnceLock};

use keymesh_engine::db::Store;
use keymesh_engine::hlc::{Hlc, SystemClock};
use keymesh_engine::repl::merge::{apply_op, ApplyOutcome};
use keymesh_proto as pb;
use libfuzzer_sys::fuzz_target;
use prost::Message;

fn store() -> &'static Store {
    static STORE: OnceLock<Store> = OnceLock::new();
    STORE.get_or_init(|| {
        let store = Store::new(2, Hlc::new(Arc::new(SystemClock), 500), 7);
        store.enable_replication();
        store
    })
}

fuzz_target!(|data: &[u8]| {
    let _ = pb::SubscriberMessage::decode(data);
    let Ok(message) = pb::OriginMessage::decode(data) else { return };
    let Some(pb::origin_message::Body::Batch(batch)) = message.body else { return };
    let store = store();
    store.wipe();
    for op in &batch.ops {
        apply_op(store, op);
    }
    if two_types_at_one_version(&batch.ops) {
        return;
    }
    for op in &batch.ops {
        let again = apply_op(store, op);
        assert!(!matches!(again, ApplyOutcome::Applied), "applying {op:?} twice changed the keyspace twice");
    }
});

/// Whether two typed effects of different types name the same key and version (see the
/// module docs). Field effects count at each of their fields' versions.
fn two_types_at_one_version(ops: &[pb::Op]) -> bool {
    use pb::op::Effect;
    let mut seen: HashMap<(u32, &[u8], u64, u32), u8> = HashMap::new();
    for op in ops {
        let (kind, versions): (u8, Vec<Option<&pb::Version>>) = match &op.effect {
            Some(Effect::StringSet(e)) => (0, vec![e.version.as_ref()]),
            Some(Effect::Counter(e)) => (0, vec![e.version.as_ref()]),
            Some(Effect::Hll(e)) => (0, vec![e.version.as_ref()]),
            Some(Effect::KeyState(e)) => match &e.value {
                Some(pb::key_state::Value::String(_) | pb::key_state::Value::Counter(_)) => (0, vec![e.version.as_ref()]),
                Some(pb::key_state::Value::List(_)) => (1, vec![e.version.as_ref()]),
                Some(pb::key_state::Value::Hash(h)) => (2, h.fields.iter().map(|f| f.version.as_ref()).chain([e.version.as_ref()]).collect()),
                Some(pb::key_state::Value::Set(s)) => (3, s.members.iter().map(|f| f.version.as_ref()).chain([e.version.as_ref()]).collect()),
                Some(pb::key_state::Value::Zset(z)) => (4, z.members.iter().map(|f| f.version.as_ref()).chain([e.version.as_ref()]).collect()),
                None => continue,
            },
            Some(Effect::List(e)) => (1, vec![e.version.as_ref()]),
            Some(Effect::Hash(e)) => (2, e.fields.iter().map(|f| f.version.as_ref()).collect()),
            Some(Effect::Set(e)) => (3, e.members.iter().map(|f| f.version.as_ref()).collect()),
            Some(Effect::Zset(e)) => (4, e.members.iter().map(|f| f.version.as_ref()).collect()),
            _ => continue,
        };
        for v in versions {
            let (hlc, node) = v.map_or((0, 0), |v| (v.hlc, v.node));
            if *seen.entry((op.db, &op.key[..], hlc, node)).or_insert(kind) != kind {
                return true;
            }
        }
    }
    false
}
