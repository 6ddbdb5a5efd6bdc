#!/bin/sh
# Writes src/cohort_client/collections.desc, the descriptor set of Cohort's gRPC service for
# collections (crates/collections-grpc/proto/collections.proto), from which the Python
# client builds its messages at run time (no generated code, so any protobuf runtime from
# 4.21 on works). Uses the protoc the Rust build vendors, with the flags prost-build uses,
# so that the file equals the build's (cohort-collections-grpc's test checks it).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
protoc=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/protoc-bin-vendored-linux-x86_64-*/bin/protoc | tail -1)
cd "$root/crates/collections-grpc"
"$protoc" --include_imports --include_source_info \
    -o "$here/src/cohort_client/collections.desc" -I proto proto/collections.proto
