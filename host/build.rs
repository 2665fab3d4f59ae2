//! Compiles the gRPC edge's protocol definition (`proto/grpc_service.proto`) with protox,
//! a protobuf compiler in pure Rust, so that no machine needs `protoc`. Writes the Rust
//! code (messages, the server and the client) and the encoded file descriptor set that
//! the reflection service serves.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read at run time: the compiled build script may be reused for a checkout elsewhere.
    let proto_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../proto");
    let proto = proto_dir.join("grpc_service.proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    let descriptors = protox::compile([&proto], [&proto_dir])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("inference_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Inference requests are checked on their wire bytes before prost decodes them.
        .codec_path("crate::grpc::codec::CheckedCodec")
        .compile_fds(descriptors)?;
    Ok(())
}
