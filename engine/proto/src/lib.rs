//! KeyMesh's gRPC contract, generated from `proto/keymesh.proto`: the `Mesh` stream between
//! engines and the `Admin` API the operator calls. The operator depends on this crate, not on
//! the engine.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

pub mod v1 {
    tonic::include_proto!("keymesh.v1");
}

pub use v1::*;
