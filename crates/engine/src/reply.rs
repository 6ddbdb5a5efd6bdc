//! Replies on the TCP/HTTP side: an answer as an owned value handed to a connection's writer
//! or a waiting HTTP handler.

use cohort_proto::ErrorPayload;

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
/// Implementations must not block: the egress thread calls this in its loop.
pub trait ReplyPort: Send + Sync {
    fn deliver(&self, response: Response);
}
