//! Cohort's own gRPC service for the collections of `--data-dir`,
//! `cohort.collections.v1.Collections` (`cohort-collections-grpc`), served on the `--grpc`
//! listener beside the Open Inference Protocol. Every call goes through what an OIP call
//! goes through (`crate::v2_grpc`): the bearer key (any valid key, as on the REST routes:
//! collections are not an engine service), the io thread's admission and the call's
//! `grpc-timeout` less what it waited (`v2_grpc::admit`), the client's quota, the byte budget
//! (the request from decoding until answered, then the answer until written), and the
//! connection's timeouts (`crate::grpc`). The decoded message is then answered by the
//! handler's [`Calls`] on the blocking pool (a write waits for its fsync), at most
//! `MAX_FRAMES_IN_FLIGHT` collection calls (frames and gRPC) at once server-wide.
//! The network crate sees the messages only; `cohort-collections` answers them.

use crate::context::Context;
use crate::grpc_body::HeldAnswer;
use crate::grpc_flow::Ledger;
use crate::quota::Who;
use crate::v2::refused;
use crate::v2_grpc::{admit, GrpcShared};
use cohort_collections_grpc::{self as pb, Calls};
use cohort_oip::tensors::status;
use cohort_proto::{ErrorCode, ErrorPayload};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::{Request, Response, Status};

/// The service one connection talks to.
pub(crate) struct CollectionsService {
    pub shared: Arc<GrpcShared>,
    pub peer: Option<IpAddr>,
    pub ledger: Arc<Ledger>,
    pub calls: Arc<dyn Calls>,
    /// The id the collections' answers are counted under (their frame service, 7).
    pub sid: u16,
}

/// The answer to a call for a collection on a server without `--data-dir`.
pub(crate) fn not_served() -> Status {
    Status::unimplemented(
        "UNIMPLEMENTED: collections are served only by `cohort serve --data-dir DIR` \
         (this server has none)",
    )
}

/// The metrics' outcome label of a status (its Cohort code name, lower case).
fn outcome(s: &Status) -> String {
    let name = s.message().split(':').next().unwrap_or("");
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') {
        return "internal".into();
    }
    name.to_ascii_lowercase()
}

impl CollectionsService {
    /// With keys on, the call's bearer key (any valid key); else the refusal, counted.
    fn key<T>(&self, req: &Request<T>) -> Result<Option<[u8; cohort_proto::KEY_ID_LEN]>, Status> {
        let ctx = &self.shared.ctx;
        let Some(auth) = ctx.auth.as_ref() else {
            return Ok(None);
        };
        let value = req.metadata().get("authorization").map(|v| v.as_bytes());
        auth.bearer(value, None)
            .map(Some)
            .map_err(|e| status(refused(ctx, self.sid, e)))
    }

    /// One call: admitted as an OIP call is, then `f` on the blocking pool.
    async fn run<Q, A>(
        &self,
        req: Request<Q>,
        f: fn(&dyn Calls, Q) -> Result<A, Status>,
    ) -> Result<Response<A>, Status>
    where
        Q: prost::Message + Send + 'static,
        A: prost::Message + Send + 'static,
    {
        let ctx: &Context = &self.shared.ctx;
        let sid = self.sid;
        let key = self.key(&req)?;
        let deadline_us = admit(&self.shared, &req, sid)?;
        let arrived = Instant::now();
        let _ticket = ctx.quotas.ticket(Who::of(key, self.peer)).map_err(|over| {
            Status::resource_exhausted(status(ctx.over_quota(sid, &over)).message())
        })?;
        let Some(place) = ctx.take_frame_place() else {
            let e = ctx.metrics.shed(
                sid,
                cohort_engine::Shed::Queue,
                &format!(
                    "collections calls in flight at the server's bound of {}",
                    crate::context::MAX_FRAMES_IN_FLIGHT
                ),
            );
            return Err(status(e));
        };
        // The request counts in the budget until its answer is made (then the answer does).
        let request = self
            .ledger
            .budget()
            .hold(prost::Message::encoded_len(req.get_ref()));
        let (calls, r) = (self.calls.clone(), req.into_inner());
        let job = move || {
            let start = Instant::now();
            let waited = start.duration_since(arrived);
            if let Some(d) = deadline_us.filter(|&d| waited > Duration::from_micros(d)) {
                let e = ErrorPayload::new(
                    ErrorCode::Timeout,
                    format!(
                        "the call waited {} us for a thread, past its grpc-timeout's {d} us \
                         left; not run",
                        waited.as_micros()
                    ),
                );
                return (Err(status(e)), start);
            }
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&*calls, r)));
            let a = ran.unwrap_or_else(|_| {
                Err(status(ErrorPayload::new(
                    ErrorCode::Internal,
                    "the collections handler panicked",
                )))
            });
            (a, start)
        };
        let (answer, start) = match tokio::task::spawn_blocking(job).await {
            Ok(done) => done,
            Err(e) => (
                Err(status(ErrorPayload::new(
                    ErrorCode::Internal,
                    format!("the collections handler failed: {e}"),
                ))),
                Instant::now(),
            ),
        };
        drop(place);
        drop(request);
        let label = match &answer {
            Ok(_) => "ok".to_string(),
            Err(s) => outcome(s),
        };
        ctx.metrics.answered(sid, &label, start.elapsed());
        let a = answer?;
        // The answer counts in the budget from now until its bytes are written.
        let held = self.ledger.charge(prost::Message::encoded_len(&a));
        let mut answer = Response::new(a);
        answer.extensions_mut().insert(HeldAnswer::new(held));
        Ok(answer)
    }
}

#[tonic::async_trait]
impl pb::collections_server::Collections for CollectionsService {
    async fn create_collection(
        &self,
        req: Request<pb::CreateCollectionRequest>,
    ) -> Result<Response<pb::CollectionInfo>, Status> {
        self.run(req, |c, r| c.create_collection(r)).await
    }

    async fn list_collections(
        &self,
        req: Request<pb::ListCollectionsRequest>,
    ) -> Result<Response<pb::ListCollectionsResponse>, Status> {
        self.run(req, |c, r| c.list_collections(r)).await
    }

    async fn describe_collection(
        &self,
        req: Request<pb::DescribeCollectionRequest>,
    ) -> Result<Response<pb::CollectionInfo>, Status> {
        self.run(req, |c, r| c.describe_collection(r)).await
    }

    async fn drop_collection(
        &self,
        req: Request<pb::DropCollectionRequest>,
    ) -> Result<Response<pb::DropCollectionResponse>, Status> {
        self.run(req, |c, r| c.drop_collection(r)).await
    }

    async fn upsert(
        &self,
        req: Request<pb::UpsertRequest>,
    ) -> Result<Response<pb::UpsertResponse>, Status> {
        self.run(req, |c, r| c.upsert(r)).await
    }

    async fn delete(
        &self,
        req: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        self.run(req, |c, r| c.delete(r)).await
    }

    async fn get(&self, req: Request<pb::GetRequest>) -> Result<Response<pb::GetResponse>, Status> {
        self.run(req, |c, r| c.get(r)).await
    }

    async fn count(
        &self,
        req: Request<pb::CountRequest>,
    ) -> Result<Response<pb::CountResponse>, Status> {
        self.run(req, |c, r| c.count(r)).await
    }

    async fn search(
        &self,
        req: Request<pb::SearchRequest>,
    ) -> Result<Response<pb::SearchResponse>, Status> {
        self.run(req, |c, r| c.search(r)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_the_code_names() {
        assert_eq!(
            outcome(&Status::invalid_argument("BAD_REQUEST: no")),
            "bad_request"
        );
        assert_eq!(outcome(&Status::not_found("NOT_FOUND: x")), "not_found");
        assert_eq!(outcome(&Status::internal("boom")), "internal");
    }
}
