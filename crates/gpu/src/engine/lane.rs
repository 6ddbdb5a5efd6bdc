//! The GPU engines' lane: requests are decoded and validated by the thread that submits them
//! (an io thread), so the control thread receives ready vectors. Invalid requests are
//! answered right there; a full queue gives the request back (the dispatcher answers
//! OVERLOADED).

use crate::knn::{check_shape, GpuIvf};
use cohort_engine::{Lane, Request, ResponseBody};
use cohort_proto::{service_id, ErrorCode, ErrorPayload};
use cohort_services::knn::decode_request;
use crossbeam_channel::{Sender, TrySendError};

/// A decoded request waiting for a launch.
pub(super) struct Ready {
    pub req: Request,
    pub k: usize,
    pub nprobe: usize,
    pub vector: Vec<f32>,
}

pub(super) struct GpuLane {
    tx: Sender<Ready>,
    dim: usize,
    nlist: usize,
    n: usize,
    default_nprobe: usize,
}

impl GpuLane {
    pub fn new(tx: Sender<Ready>, ix: &GpuIvf) -> GpuLane {
        GpuLane::with_shape(tx, ix.dim, ix.nlist, ix.n, ix.default_nprobe)
    }

    fn with_shape(
        tx: Sender<Ready>,
        dim: usize,
        nlist: usize,
        n: usize,
        default_nprobe: usize,
    ) -> GpuLane {
        GpuLane {
            tx,
            dim,
            nlist,
            n,
            default_nprobe,
        }
    }

    fn decode(&self, req: &Request) -> Result<(usize, usize, Vec<f32>), ResponseBody> {
        if req.service != service_id::KNN {
            return Err(ResponseBody::Err(ErrorPayload::new(
                ErrorCode::UnknownService,
                "the gpu engines serve knn only",
            )));
        }
        let r = decode_request(&req.payload, self.dim, self.nlist, self.n)
            .map_err(ResponseBody::Err)?;
        let nprobe = if r.nprobe == 0 {
            self.default_nprobe
        } else {
            r.nprobe
        };
        check_shape(self.nlist, r.k, nprobe)
            .map_err(|m| ResponseBody::Err(ErrorPayload::new(ErrorCode::BadRequest, m)))?;
        Ok((r.k, nprobe, r.vector))
    }
}

impl Lane for GpuLane {
    fn try_submit(&self, req: Request) -> Result<(), Request> {
        match self.decode(&req) {
            Err(body) => {
                req.respond(body);
                Ok(())
            }
            Ok((k, nprobe, vector)) => self
                .tx
                .try_send(Ready {
                    req,
                    k,
                    nprobe,
                    vector,
                })
                .map_err(|e| match e {
                    TrySendError::Full(r) | TrySendError::Disconnected(r) => r.req,
                }),
        }
    }

    fn depth(&self) -> usize {
        self.tx.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_engine::{Reply, ReplyPort, Response};
    use cohort_services::knn::{encode_request, Elems};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    #[derive(Default)]
    struct Answers(Mutex<Vec<Response>>);
    impl ReplyPort for Answers {
        fn deliver(&self, _token: u32, r: Response) {
            self.0.lock().unwrap().push(r);
        }
    }

    fn request(service: u16, id: u64, payload: Vec<u8>, port: &Arc<Answers>) -> Request {
        let now = Instant::now();
        Request::new(
            service,
            id,
            payload,
            now,
            now + Duration::from_secs(1),
            Reply {
                port: port.clone(),
                token: 0,
            },
        )
    }

    fn knn(k: u16, nprobe: u16, v: &[f32]) -> Vec<u8> {
        let mut p = Vec::new();
        encode_request(k, nprobe, Elems::F32(v), &mut p);
        p
    }

    fn code(r: &Response) -> Option<ErrorCode> {
        match &r.body {
            ResponseBody::Err(e) => Some(e.code),
            ResponseBody::Ok(_) => None,
        }
    }

    #[test]
    fn decodes_in_the_submitter_and_answers_bad_requests_at_once() {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let lane = GpuLane::with_shape(tx, 4, 8, 100, 3);
        let port = Arc::new(Answers::default());
        let v = [1.0, 2.0, 3.0, 4.0];
        // Wrong service, wrong dimension, nprobe over nlist, k over the GPU limit: answered
        // right away (Ok: the dispatcher must not answer them again), nothing queued.
        let bad = [
            request(service_id::KNN + 100, 1, knn(10, 2, &v), &port),
            request(service_id::KNN, 2, knn(10, 2, &v[..3]), &port),
            request(service_id::KNN, 3, knn(10, 9, &v), &port),
            request(service_id::KNN, 4, knn(1000, 2, &v), &port),
        ];
        for r in bad {
            assert!(lane.try_submit(r).is_ok());
        }
        let got = port.0.lock().unwrap().clone();
        assert_eq!(got.len(), 4);
        assert_eq!(code(&got[0]), Some(ErrorCode::UnknownService));
        assert!(got[1..]
            .iter()
            .all(|r| code(r) == Some(ErrorCode::BadRequest)));
        assert!(rx.is_empty());
        // A good one arrives decoded; nprobe 0 takes the index default.
        assert!(lane
            .try_submit(request(service_id::KNN, 5, knn(7, 0, &v), &port))
            .is_ok());
        // The queue (capacity 1) is full: the request comes back unanswered.
        let back = lane
            .try_submit(request(service_id::KNN, 6, knn(7, 2, &v), &port))
            .expect_err("full queue gives the request back");
        assert_eq!(back.request_id, 6);
        drop(back); // answered UNAVAILABLE by its drop
        let ready = rx.try_recv().unwrap();
        assert_eq!((ready.k, ready.nprobe, ready.vector), (7, 3, v.to_vec()));
        assert_eq!(lane.depth(), 0);
    }
}
