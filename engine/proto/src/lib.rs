//! KeyMesh's gRPC contract, generated from `proto/keymesh.proto`: the `Mesh` stream between
//! engines and the `Admin` API the operator calls, plus the syntax of the engine settings the
//! operator writes and checks (`size`). The operator depends on this crate, not on the engine.

pub mod batch;
pub mod codec;
pub mod deframe;
pub mod reader;
pub mod size;

/// Generated code: clippy's opinions apply to `keymesh.proto`, not to its Rust rendering.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    tonic::include_proto!("keymesh.v1");
}

pub use batch::{EncodedBatch, FramedOps};
pub use v1::*;
