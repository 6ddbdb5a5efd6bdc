//! Cohort's own gRPC service for the live vector collections,
//! `cohort.collections.v1.Collections` (`proto/collections.proto`): the messages, the tonic
//! server and client, and [`Calls`], the blocking handler a server's front door hands each
//! decoded call to. Wire types only: `cohort-collections` answers the calls (its `grpc`
//! module) and `cohort-net` serves them on the `--grpc` listener, so the network crate learns
//! the messages and nothing of the collections' internals.

#![allow(clippy::doc_lazy_continuation)]

tonic::include_proto!("cohort.collections.v1");

pub mod codec;

pub use tonic::{Code, Status};

/// The path every call of the service starts with (`/cohort.collections.v1.Collections/Upsert`):
/// how a server that serves several services on one listener routes them.
pub const PATH_PREFIX: &str = "/cohort.collections.v1.Collections/";

/// A status whose message starts with Cohort's code name (`"NOT_FOUND: no collection ..."`),
/// as every gRPC error of Cohort's does (docs/protocol.md).
pub fn status(code: Code, name: &str, message: impl std::fmt::Display) -> Status {
    Status::new(code, format!("{name}: {message}"))
}

/// The service's calls, answered one at a time on a thread that may block (a write waits
/// for its fsync). The front door (`cohort-net`) checks the key, the deadline, the quotas
/// and the byte budget first, and runs these on its blocking pool; errors are statuses made
/// with [`status`].
pub trait Calls: Send + Sync + 'static {
    fn create_collection(&self, r: CreateCollectionRequest) -> Result<CollectionInfo, Status>;
    fn list_collections(
        &self,
        r: ListCollectionsRequest,
    ) -> Result<ListCollectionsResponse, Status>;
    fn describe_collection(&self, r: DescribeCollectionRequest) -> Result<CollectionInfo, Status>;
    fn drop_collection(&self, r: DropCollectionRequest) -> Result<DropCollectionResponse, Status>;
    fn upsert(&self, r: UpsertRequest) -> Result<UpsertResponse, Status>;
    fn delete(&self, r: DeleteRequest) -> Result<DeleteResponse, Status>;
    fn get(&self, r: GetRequest) -> Result<GetResponse, Status>;
    fn count(&self, r: CountRequest) -> Result<CountResponse, Status>;
    fn search(&self, r: SearchRequest) -> Result<SearchResponse, Status>;
}

#[cfg(test)]
mod tests {
    /// The Python client's copy of the descriptor set is this build's (regenerate it with
    /// clients/python/gen_collections_desc.sh after changing the proto).
    #[test]
    fn the_python_clients_descriptor_is_current() {
        let built = include_bytes!(concat!(env!("OUT_DIR"), "/collections.desc"));
        let python = include_bytes!("../../../clients/python/src/cohort_client/collections.desc");
        assert!(
            built[..] == python[..],
            "clients/python/src/cohort_client/collections.desc is stale: run \
             clients/python/gen_collections_desc.sh"
        );
    }
}
