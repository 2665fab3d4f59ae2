//! Compiles the Open Inference Protocol's gRPC definition (`proto/grpc_service.proto`)
//! once, with protox, a protobuf compiler in pure Rust, so that no machine needs `protoc`.
//! From the one compile it writes:
//!
//! - the messages and the client (`inference.rs`), for [`crate::protocol::grpc`]: the
//!   wire format every side shares;
//! - the server (`server/inference.rs`), for the gRPC edge: it names the messages above
//!   and decodes inference requests with the edge's checked codec;
//! - the encoded file descriptor set that the reflection service serves.

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
        .build_server(false)
        .build_client(true)
        .compile_fds(descriptors.clone())?;
    let server_dir = out_dir.join("server");
    std::fs::create_dir_all(&server_dir)?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(false)
        .out_dir(&server_dir)
        .extern_path(".inference", "crate::protocol::grpc::proto")
        // Inference requests are checked on their wire bytes before prost decodes them.
        .codec_path("crate::grpc::codec::CheckedCodec")
        .compile_fds(descriptors)?;
    Ok(())
}
