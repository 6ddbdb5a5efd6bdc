//! Generates the gRPC messages and service from proto/collections.proto with the protoc that
//! protoc-bin-vendored carries (no protoc on the build machine needed), as cohort-oip does.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: the build script is single-threaded; prost-build reads PROTOC.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto/collections.proto");
    // Malformed messages are INVALID_ARGUMENT, not prost's INTERNAL (src/codec.rs).
    // The descriptor set too: the Python client builds its messages from a copy of it
    // (clients/python/src/cohort_client/collections.desc; a test keeps the two equal).
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .codec_path("crate::codec::RequestCodec")
        .file_descriptor_set_path(out.join("collections.desc"))
        .compile_protos(&["proto/collections.proto"], &["proto"])?;
    Ok(())
}
