//! Compiles the gRPC protocol definition (`proto/grpc_service.proto`, the one the server
//! serves) with protox, a protobuf compiler in pure Rust, into the messages and the
//! client of `GRPCInferenceService` (no server, no `protoc`).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read at run time: the compiled build script may be reused for a checkout elsewhere.
    let proto_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let proto = proto_dir.join("grpc_service.proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    let descriptors = protox::compile([&proto], [&proto_dir])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
