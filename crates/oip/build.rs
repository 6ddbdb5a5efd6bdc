//! Generates the gRPC messages and service from proto/inference.proto with the protoc that
//! protoc-bin-vendored carries (no protoc on the build machine needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: the build script is single-threaded; prost-build reads PROTOC.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto/inference.proto");
    tonic_prost_build::configure().compile_protos(&["proto/inference.proto"], &["proto"])?;
    Ok(())
}
