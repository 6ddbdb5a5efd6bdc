//! Replies on the TCP/HTTP side: an answer as an owned value handed to a connection's writer
//! or a waiting HTTP handler.

use crate::ingress::Requester;
use bytes::Bytes;
use cohort_proto::ErrorPayload;
use std::sync::Arc;

use crate::Answer;

/// What comes back for a request: a service result or an error frame.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseBody {
    Ok(Vec<u8>),
    Err(ErrorPayload),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub request_id: u64,
    pub service: u16,
    pub body: ResponseBody,
}

/// Where an answer goes on the TCP/HTTP side: a connection's writer, a waiting HTTP handler.
/// Implementations must not block: the shard's answer pump calls this in its loop.
pub trait ReplyPort: Send + Sync {
    fn deliver(&self, response: Response);
    /// The answer as the ingress reads it, borrowed from its ring slot. A port that encodes
    /// its answer anyway (a TCP frame, a JSON body) overrides this to encode straight from
    /// the slot instead of from an owned copy.
    fn deliver_answer(&self, request_id: u64, service: u16, answer: Answer<'_>) {
        let body = match answer {
            Ok(p) => ResponseBody::Ok(p.to_vec()),
            Err(e) => ResponseBody::Err(e),
        };
        self.deliver(Response {
            request_id,
            service,
            body,
        });
    }

    /// A result that crossed the ring in its own buffer (a large answer): a port that keeps
    /// the answer as it is (a page) overrides this to keep the buffer instead of a copy.
    fn deliver_shared(&self, request_id: u64, service: u16, body: &Bytes) {
        self.deliver_answer(request_id, service, Ok(body));
    }

    /// The asking client's fairness class (`Requester`); 0: not known.
    fn fairness_class(&self) -> u16 {
        0
    }
}

impl Requester for Arc<dyn ReplyPort> {
    fn fairness_class(&self) -> u16 {
        ReplyPort::fairness_class(&**self)
    }
}
