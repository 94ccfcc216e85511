//! Compiles `proto/keymesh.proto` with protox (a pure-Rust protobuf compiler), so building
//! needs no `protoc` on the machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/keymesh.proto");
    let descriptors = protox::compile(["keymesh.proto"], ["proto"])?;
    // `bytes` fields as `bytes::Bytes`: an effect's key and value go into every subscriber's
    // message without a copy, and decoding takes them out of the received frame.
    // Both services use `codec::FlatCodec`: prost's, decoding each message from one `Bytes`.
    // A mesh batch's ops stay framed as on the wire (`batch::EncodedBatch`, written by hand).
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .bytes(".")
        .codec_path("crate::codec::FlatCodec")
        .extern_path(".keymesh.v1.EncodedBatch", "crate::batch::EncodedBatch")
        .compile_fds(descriptors)?;
    Ok(())
}
