//! The messages between a cluster front end and a node (`cohort-cluster`): one UCX message
//! carries a batch of requests (front end to node) or of answers (node to front end), each
//! record an mqueue message's envelope and payload. A deadline crosses as the time left (machines' monotonic clocks
//! differ); the id is the front end's, echoed in the answer.
//!
//! Layout (little-endian): kind u8, then records until the end.
//! - request: id u64, service u16, class u16, request_id u64, deadline_left_us u32 (0: none),
//!   len u32, payload.
//! - answer: id u64, status u16 (0: a result, else an error code; the payload is then the
//!   message), len u32, payload.

pub const REQUESTS: u8 = 1;
pub const ANSWERS: u8 = 2;
const REQUEST_HEAD: usize = 8 + 2 + 2 + 8 + 4 + 4;
const ANSWER_HEAD: usize = 8 + 2 + 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    pub id: u64,
    pub service: u16,
    pub class: u16,
    pub request_id: u64,
    pub deadline_left_us: u32,
    pub payload: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer<'a> {
    pub id: u64,
    pub status: u16,
    pub payload: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("empty message")]
    Empty,
    #[error("message kind {0}, expected {1}")]
    Kind(u8, u8),
    #[error("a record cut short at byte {0}")]
    Short(usize),
}

/// A batch being built: `kind` then records appended.
pub struct Batch {
    buf: Vec<u8>,
    records: usize,
}

impl Batch {
    pub fn new(kind: u8) -> Batch {
        Batch {
            buf: vec![kind],
            records: 0,
        }
    }

    pub fn records(&self) -> usize {
        self.records
    }

    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    pub fn push_request(&mut self, r: &Request<'_>) {
        debug_assert_eq!(self.buf[0], REQUESTS);
        let b = &mut self.buf;
        b.extend_from_slice(&r.id.to_le_bytes());
        b.extend_from_slice(&r.service.to_le_bytes());
        b.extend_from_slice(&r.class.to_le_bytes());
        b.extend_from_slice(&r.request_id.to_le_bytes());
        b.extend_from_slice(&r.deadline_left_us.to_le_bytes());
        b.extend_from_slice(&(r.payload.len() as u32).to_le_bytes());
        b.extend_from_slice(r.payload);
        self.records += 1;
    }

    pub fn push_answer(&mut self, a: &Answer<'_>) {
        debug_assert_eq!(self.buf[0], ANSWERS);
        let b = &mut self.buf;
        b.extend_from_slice(&a.id.to_le_bytes());
        b.extend_from_slice(&a.status.to_le_bytes());
        b.extend_from_slice(&(a.payload.len() as u32).to_le_bytes());
        b.extend_from_slice(a.payload);
        self.records += 1;
    }

    /// The message, and a fresh batch of the same kind in its place.
    pub fn take(&mut self) -> Vec<u8> {
        let kind = self.buf[0];
        self.records = 0;
        std::mem::replace(&mut self.buf, vec![kind])
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn kind_of(msg: &[u8], want: u8) -> Result<(), WireError> {
    match msg.first() {
        None => Err(WireError::Empty),
        Some(&k) if k == want => Ok(()),
        Some(&k) => Err(WireError::Kind(k, want)),
    }
}

/// The kind byte of a message.
pub fn kind(msg: &[u8]) -> Result<u8, WireError> {
    msg.first().copied().ok_or(WireError::Empty)
}

/// Every request of a batch, in order; the first malformed record ends it with an error
/// (those before it are handed to `f` already).
pub fn requests(msg: &[u8], mut f: impl FnMut(Request<'_>)) -> Result<usize, WireError> {
    kind_of(msg, REQUESTS)?;
    let mut at = 1;
    let mut n = 0;
    while at < msg.len() {
        if msg.len() - at < REQUEST_HEAD {
            return Err(WireError::Short(at));
        }
        let len = u32_at(msg, at + 24) as usize;
        let body = at + REQUEST_HEAD;
        if msg.len() - body < len {
            return Err(WireError::Short(at));
        }
        f(Request {
            id: u64_at(msg, at),
            service: u16_at(msg, at + 8),
            class: u16_at(msg, at + 10),
            request_id: u64_at(msg, at + 12),
            deadline_left_us: u32_at(msg, at + 20),
            payload: &msg[body..body + len],
        });
        at = body + len;
        n += 1;
    }
    Ok(n)
}

/// Every answer of a batch (as [`requests`]).
pub fn answers(msg: &[u8], mut f: impl FnMut(Answer<'_>)) -> Result<usize, WireError> {
    kind_of(msg, ANSWERS)?;
    let mut at = 1;
    let mut n = 0;
    while at < msg.len() {
        if msg.len() - at < ANSWER_HEAD {
            return Err(WireError::Short(at));
        }
        let len = u32_at(msg, at + 10) as usize;
        let body = at + ANSWER_HEAD;
        if msg.len() - body < len {
            return Err(WireError::Short(at));
        }
        f(Answer {
            id: u64_at(msg, at),
            status: u16_at(msg, at + 8),
            payload: &msg[body..body + len],
        });
        at = body + len;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn requests_round_trip(rs in proptest::collection::vec(
            (any::<u64>(), any::<u16>(), any::<u16>(), any::<u64>(), any::<u32>(),
             proptest::collection::vec(any::<u8>(), 0..300)), 0..20)) {
            let mut b = Batch::new(REQUESTS);
            for (id, service, class, request_id, left, p) in &rs {
                b.push_request(&Request { id: *id, service: *service, class: *class,
                    request_id: *request_id, deadline_left_us: *left, payload: p });
            }
            prop_assert_eq!(b.records(), rs.len());
            let msg = b.take();
            let mut got = Vec::new();
            let n = requests(&msg, |r| got.push((r.id, r.service, r.class, r.request_id,
                r.deadline_left_us, r.payload.to_vec()))).unwrap();
            prop_assert_eq!(n, rs.len());
            prop_assert_eq!(got, rs);
        }

        #[test]
        fn answers_round_trip(rs in proptest::collection::vec(
            (any::<u64>(), any::<u16>(), proptest::collection::vec(any::<u8>(), 0..300)), 0..20)) {
            let mut b = Batch::new(ANSWERS);
            for (id, status, p) in &rs {
                b.push_answer(&Answer { id: *id, status: *status, payload: p });
            }
            let msg = b.take();
            let mut got = Vec::new();
            answers(&msg, |a| got.push((a.id, a.status, a.payload.to_vec()))).unwrap();
            prop_assert_eq!(got, rs);
        }

        /// Any bytes: an error or records, never a panic, and never a record past the end.
        #[test]
        fn any_bytes_decode_without_panic(msg in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = requests(&msg, |r| assert!(r.payload.len() <= msg.len()));
            let _ = answers(&msg, |a| assert!(a.payload.len() <= msg.len()));
        }

        /// A batch cut anywhere inside a record is refused at that record.
        #[test]
        fn a_cut_batch_is_refused(p in proptest::collection::vec(any::<u8>(), 1..100), cut in 1usize..100) {
            let mut b = Batch::new(ANSWERS);
            b.push_answer(&Answer { id: 7, status: 0, payload: &p });
            let msg = b.take();
            let cut = 2 + cut % (msg.len() - 2);
            prop_assert_eq!(answers(&msg[..cut], |_| ()), Err(WireError::Short(1)));
        }
    }

    #[test]
    fn the_kind_is_checked() {
        assert_eq!(requests(&[], |_| ()), Err(WireError::Empty));
        assert_eq!(
            requests(&[ANSWERS], |_| ()),
            Err(WireError::Kind(ANSWERS, REQUESTS))
        );
        assert_eq!(answers(&[ANSWERS], |_| ()), Ok(0));
    }
}
