//! The mesh stream's messages as a peer could send them: arbitrary bytes decoded as the
//! protobuf messages of both directions (a batch also by `keymesh_proto::codec::decode_batch`
//! and, cut in two pieces, by `decode_origin_message`, which must agree with prost), and every
//! effect an origin's batch carries decoded where it lies (`repl::wire::decode_in`, which must
//! agree with decoding the op alone), encoded again by the node's own encoder
//! (`repl::wire::OpBuffer`, which must write prost's bytes: a string's op is written by hand)
//! and merged into a replicating keyspace, as a peer link does. Decoding may fail; nothing may
//! panic, and merging the same batch a second time changes nothing (the merge is idempotent).
//!
//! Two typed effects of different types for one key at one version (which no correct peer
//! sends) are checked like any other batch: the merge orders them by type (`repl::merge`,
//! "Ties between types"; seed `regression_two_types_at_one_version`).
#![no_main]

use std::sync::{Arc, OnceLock};

use keymesh_engine::db::Store;
use keymesh_engine::hlc::{Hlc, SystemClock};
use keymesh_engine::repl::merge::{apply_chunk, apply_decoded, ApplyOutcome, Recorder};
use keymesh_engine::repl::wire::{self, Decoded, WireError};
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
    let decoded = pb::OriginMessage::decode(data);
    // The hand-written batch decoder a link's codec uses reads what prost reads, or declines.
    if let Some(fast) = pb::codec::decode_batch(&prost::bytes::Bytes::copy_from_slice(data)) {
        let fast = pb::OriginMessage { body: Some(pb::origin_message::Body::Batch(fast)) };
        assert_eq!(decoded.as_ref().ok(), Some(&fast), "decode_batch and prost disagree");
    }
    // A link receives a message in the pieces HTTP/2 delivers (`deframe::Deframer`; a large
    // batch as its head and its ops): cut in two where a batch's ops start when they end it (as
    // an origin cuts one), after its first byte and in its middle, the link's decoder reads what
    // prost reads, or fails as prost does. (Every cut in the first 32 bytes cost two thirds of
    // the target's inputs per second; the proptests in keymesh_proto::codec cut anywhere.)
    let whole = prost::bytes::Bytes::copy_from_slice(data);
    let ops_start = match &decoded {
        Ok(pb::OriginMessage { body: Some(pb::origin_message::Body::Batch(batch)) }) => data.len().checked_sub(batch.ops.as_bytes().len()),
        _ => None,
    };
    for cut in [Some(1), Some(data.len() / 2), ops_start].into_iter().flatten().filter(|&cut| cut > 0 && cut < data.len()) {
        let pieces = vec![whole.slice(..cut), whole.slice(cut..)];
        assert_eq!(pb::codec::decode_origin_message(pieces).ok().as_ref(), decoded.as_ref().ok(), "decode_origin_message and prost disagree (cut at {cut})");
    }
    let Ok(message) = decoded else { return };
    let Some(pb::origin_message::Body::Batch(batch)) = message.body else { return };
    let store = store();
    store.wipe();
    // An op that is no effect (none, or a full-sync KeyState) is skipped, as a link skips it;
    // bytes that are no op end the stream (the ops before them are merged). Each op read where
    // it lies (`wire::decode_in`, what a link does) reads as it does alone.
    let mut ops: Vec<Decoded<'_>> = Vec::new();
    for span in batch.ops.spans() {
        let alone = wire::decode(batch.ops.as_bytes().slice(span.clone()));
        let in_place = wire::decode_in(batch.ops.as_bytes(), span);
        let as_effect = in_place.as_ref().map(Decoded::to_effect);
        assert_eq!(format!("{as_effect:?}"), format!("{alone:?}"), "decode_in and decode disagree");
        if let Ok(effect) = as_effect {
            let mut encoded = wire::OpBuffer::default();
            encoded.push(effect.clone());
            let by_prost = pb::Op::from(effect).encode_to_vec();
            assert_eq!(encoded.into_framed().iter().next().as_deref(), Some(&by_prost[..]), "OpBuffer and prost encode an effect differently");
        }
        match in_place {
            Ok(op) => ops.push(op),
            Err(WireError::Malformed(_)) => break,
            Err(_) => {}
        }
    }
    // Merged as a link merges them (a string and the register written with it as one write),
    // then again one by one: nothing merged twice changes the keyspace.
    struct Ignore;
    impl Recorder for Ignore {
        fn record(&mut self, _: &Decoded<'_>, _: ApplyOutcome) {}
    }
    let keyed: Vec<(&Decoded<'_>, &[u8])> = ops.iter().map(|op| (op, op.key())).collect();
    apply_chunk(store, &keyed, &mut Ignore);
    for op in &ops {
        let again = apply_decoded(store, op, op.key());
        assert!(!matches!(again, ApplyOutcome::Applied), "applying {op:?} twice changed the keyspace twice");
    }
});
