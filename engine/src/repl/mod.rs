//! Replication: what a node originates, and how it merges what its peers originated.
//!
//! - `log`: the origin side. Every local write appends its *effect* (the resulting state of what
//!   it touched, with versions; `db::effect::Effect`) to a bounded backlog with a sequence
//!   number. Subscribers read from a sequence (partial resync) or take a full snapshot.
//! - `merge`: the lattice merges (LWW registers, PN-counters, per-field and per-member LWW with
//!   tombstones, key and database tombstones). `apply_op` merges one remote effect into the
//!   keyspace; applying is commutative, associative and idempotent.
//! - `snapshot`: a fuzzy, fork-free scan of the keyspace as effects, for full sync.
//! - `wire`: the protobuf form of effects, for the mesh stream and the snapshot file (the
//!   only module here that knows protobuf).
//!
//! The transport (gRPC streams, peer links, the admin API) lives in `crate::mesh`.

pub mod log;
pub mod merge;
pub mod snapshot;
pub mod wire;

#[cfg(test)]
mod laws;
