//! Property tests of restoring: a node restored from its snapshot file (`persist::format`)
//! or from a Redis RDB file (`persist::rdb`) and then rejoining the mesh converges with its
//! peers by the same laws as live writes.
//!
//! - Snapshot: a node that saved after seeing some of the writes, was restored from the file
//!   and then exchanged full syncs with a peer that saw the rest, ends where a node that saw
//!   every write ends: no write, delete or tombstone is lost or resurrected by the round trip.
//! - RDB: an import is writes stamped by the importing node; after the importer and a peer
//!   exchange full syncs, in either order, both hold the same state, and every imported key
//!   holds exactly the file's value and expiry (newer than the peer's writes to it).

use keymesh_proto as pb;
use proptest::prelude::*;

use super::{apply_all, bump, observe, ops_strategy, store, wire};
use crate::db::Store;
use crate::persist::format::{FrameReader, FrameWriter};
use crate::persist::rdb;
use crate::repl::snapshot::snapshot;

/// `observe`, with a counter shown as its value: an RDB file holds a counter as the string
/// `GET` returns, so it comes back a plain integer string.
fn as_values(store: &Store) -> std::collections::BTreeMap<(usize, Vec<u8>), String> {
    let mut out = observe(store);
    for value in out.values_mut() {
        if let Some(rest) = value.strip_prefix("str Some(") {
            if let Some((n, ttl)) = rest.split_once(") ") {
                *value = format!("str {n} {ttl}");
            }
        }
    }
    out
}

/// The full sync a peer would send: every key's state, tombstones and all.
fn full_sync(store: &Store) -> Vec<pb::Op> {
    let mut ops = Vec::new();
    snapshot(store, &mut |batch| ops.extend(wire(batch)));
    ops
}

/// Saves `store` the way `SAVE` does (header, one batch per shard, end) into bytes.
fn save(store: &Store) -> Vec<u8> {
    let frame = |body| pb::SnapshotFrame { body: Some(body) };
    let mut out = FrameWriter::new(Vec::new()).unwrap();
    let header = pb::SnapshotHeader { format_version: crate::persist::format::FORMAT_VERSION, hlc: store.hlc.now(), databases: 2, ..Default::default() };
    out.write(&frame(pb::snapshot_frame::Body::Header(header))).unwrap();
    let mut batches = Vec::new();
    let (keys, ops) = snapshot(store, &mut |ops| batches.push(pb::Batch { first_seq: 0, ops: wire(ops), hlc: store.hlc.now() }));
    let count = batches.len() as u64;
    for batch in batches {
        out.write(&frame(pb::snapshot_frame::Body::Batch(batch))).unwrap();
    }
    out.write(&frame(pb::snapshot_frame::Body::End(pb::SnapshotEnd { keys, ops, batches: count, finished_unix_ms: 0 }))).unwrap();
    out.into_inner()
}

/// Loads a saved file into a fresh node, as `persist::load` does.
fn restore(file: &[u8]) -> Store {
    let restored = store();
    let (mut reader, header) = FrameReader::open(file).unwrap();
    restored.hlc.receive(header.hlc);
    while let Some(batch) = reader.next_batch().unwrap() {
        apply_all(&restored, &batch.ops);
    }
    restored
}

fn shifted(ops: Vec<pb::Op>, by: u64) -> Vec<pb::Op> {
    ops.into_iter()
        .map(|mut op| {
            bump(&mut op, by);
            op
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Saved after `a` and part of `b`, restored, then merged with a peer that saw `b` and
    /// `c` (both directions): both end where a node that saw all three ends.
    #[test]
    fn a_node_restored_from_its_snapshot_converges_with_its_peers(a in ops_strategy(), b in ops_strategy(), c in ops_strategy(), cut in any::<prop::sample::Index>()) {
        let (a, b, c) = (shifted(a, 0), shifted(b, 100_000), shifted(c, 200_000));
        let saved = store();
        apply_all(&saved, &a);
        apply_all(&saved, &b[..cut.index(b.len() + 1)]);
        let restored = restore(&save(&saved));
        prop_assert_eq!(observe(&restored), observe(&saved), "the round trip changes nothing");

        let peer = store();
        apply_all(&peer, &b);
        apply_all(&peer, &c);
        let from_peer = full_sync(&peer);
        apply_all(&peer, &full_sync(&restored));
        apply_all(&restored, &from_peer);

        let everything = store();
        apply_all(&everything, &a);
        apply_all(&everything, &b);
        apply_all(&everything, &c);
        prop_assert_eq!(observe(&restored), observe(&everything));
        prop_assert_eq!(observe(&peer), observe(&everything));
    }

    /// A node's keyspace exported as RDB and imported by another node is that node's writes:
    /// it and a peer converge whichever way the full syncs go, to the imported values.
    #[test]
    fn a_node_restored_from_an_rdb_file_converges_with_its_peers(a in ops_strategy(), b in ops_strategy()) {
        let (a, b) = (shifted(a, 0), shifted(b, 100_000));
        let source = store();
        apply_all(&source, &a);
        let mut file = Vec::new();
        rdb::export(&source, "test", &mut file);
        let importer = store();
        rdb::import(&importer, &file).unwrap();
        let imported = observe(&importer);
        prop_assert_eq!(&imported, &as_values(&source), "the RDB round trip keeps every value and expiry");

        let peer = store();
        apply_all(&peer, &b);
        let (to_peer, from_peer) = (full_sync(&importer), full_sync(&peer));
        // One order on the peer, the other on the importer.
        apply_all(&peer, &to_peer);
        apply_all(&importer, &from_peer);
        let merged = observe(&importer);
        prop_assert_eq!(&merged, &observe(&peer));
        for (key, value) in &imported {
            prop_assert_eq!(merged.get(key), Some(value), "imported key {:?}", key);
        }
    }
}
