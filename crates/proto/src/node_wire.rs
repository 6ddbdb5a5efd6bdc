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
//!
//! A **sealed** message (both roles given the same cluster key) is the kind with [`SEALED`]
//! set, then session u64, seq u64, time_ms u64 (the sender's clock, ms since the Unix epoch),
//! the first 16 bytes of HMAC-SHA256 under the key over everything else (the sealed kind byte,
//! session, seq, time and the message), and the message itself (its own kind byte, records).
//! A sender numbers its messages within its session (a random id per sender); the receiver
//! refuses an altered message, an old one and one seen before (`cohort-cluster`'s guard).
//! An unsealed parser refuses a sealed message by its kind byte.
//!
//! **Rings** (one-sided writes, Lynx's design; both roles busy polling): a front end asks a
//! node for a ring ([`RING_ASK`], no records); the node registers memory of `slots` slots of
//! `slot_bytes` each and offers it ([`RING_OFFER`]: address u64, slots u32, slot_bytes u32,
//! then the packed UCX key to the end). The front end then writes a request batch (the same
//! bytes, sealed or not, as a message would carry) into slot `(n - 1) % slots` for its n-th
//! ring batch: the length at byte 8 and the batch from [`RING_DATA_AT`], then, after a fence,
//! `n` into the slot's first word, which the node polls. The node reports how many slots it
//! has read ([`RING_CREDIT`]: consumed u64); a front end never has more than `slots` batches
//! unread, and sends a batch as a message when the ring is full or the batch does not fit.
//! Once the node's offer is taken, the front end offers a ring of its own the same way
//! ([`RING_OFFER`] from the front end), and the node writes its answer batches there by the
//! same rules, the front end sending the credits. Each end has at most one ring of each
//! direction per connection, so an offer or a credit names its ring by who sends it.
//!
//! A node that refuses a connection's message (another cluster key, or none) says why before
//! it closes the connection: [`REFUSED`], never sealed (it shares no key with that end), then
//! the reason in UTF-8 (at most [`REFUSAL_MAX`] bytes).
//!
//! **Hello.** A front end routes nothing to a node it found in etcd until the node has
//! answered a hello on the new connection: [`HELLO`] (nonce u64, sealed where there is a key)
//! is answered [`HELLO_ACK`] (the same nonce, then the node's id in UTF-8, at most
//! [`ID_MAX`] bytes), sealed under the node's key. So an etcd entry pointing at something
//! that is not a node of this cluster (a silent port, another program, a node with another
//! key) never takes requests, and the id the node gives must be the entry's.

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub const REQUESTS: u8 = 1;
pub const ANSWERS: u8 = 2;
pub const RING_ASK: u8 = 3;
pub const RING_OFFER: u8 = 4;
pub const RING_CREDIT: u8 = 5;
pub const REFUSED: u8 = 6;
pub const HELLO: u8 = 7;
pub const HELLO_ACK: u8 = 8;
/// Longest node id a hello's answer carries (bytes).
pub const ID_MAX: usize = 256;
/// Longest reason a refusal carries (bytes): a log line, not a channel.
pub const REFUSAL_MAX: usize = 256;
/// Where a ring slot's batch starts (its sequence word at 0, its length at 8).
pub const RING_DATA_AT: usize = 64;
/// Largest packed key an offer may carry.
pub const RING_MAX_KEY: usize = 4096;
/// Set in the first byte of a sealed message.
pub const SEALED: u8 = 0x80;
/// Bytes before a sealed message's inner message: kind, session, seq, time, tag.
pub const SEAL_HEAD: usize = 1 + 8 + 8 + 8 + SEAL_TAG;
const SEAL_TAG: usize = 16;
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

/// A node's ring, as it offers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingOffer<'a> {
    pub address: u64,
    pub slots: u32,
    pub slot_bytes: u32,
    pub key: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("empty message")]
    Empty,
    #[error("message kind {0}, expected {1}")]
    Kind(u8, u8),
    #[error("a record cut short at byte {0}")]
    Short(usize),
    #[error("a sealed message of {0} bytes, shorter than its seal")]
    SealShort(usize),
    #[error("the seal does not match (altered, or sealed under another cluster key)")]
    BadSeal,
    #[error("a ring message of {0} bytes is malformed")]
    Ring(usize),
    #[error("a hello of {0} bytes is malformed")]
    Hello(usize),
}

/// A sealed message's sender, numbering and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seal {
    pub session: u64,
    pub seq: u64,
    pub time_ms: u64,
}

fn seal_mac(key: &[u8], head: &[u8], inner: &[u8]) -> Hmac<Sha256> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(head);
    m.update(inner);
    m
}

/// Whether a message is sealed (by its first byte).
pub fn is_sealed(msg: &[u8]) -> bool {
    msg.first().is_some_and(|k| k & SEALED != 0)
}

/// Checks a sealed message under `key`: its seal and the inner message (a plain message for
/// [`requests`] / [`answers`]). Whether the seal is fresh and new is the caller's to judge.
pub fn open<'a>(msg: &'a [u8], key: &[u8]) -> Result<(Seal, &'a [u8]), WireError> {
    if msg.len() < SEAL_HEAD + 1 {
        return Err(WireError::SealShort(msg.len()));
    }
    if !is_sealed(msg) {
        return Err(WireError::BadSeal);
    }
    let tag_at = SEAL_HEAD - SEAL_TAG;
    let (head, inner) = msg.split_at(SEAL_HEAD);
    seal_mac(key, &head[..tag_at], inner)
        .verify_truncated_left(&head[tag_at..])
        .map_err(|_| WireError::BadSeal)?;
    let seal = Seal {
        session: u64_at(msg, 1),
        seq: u64_at(msg, 9),
        time_ms: u64_at(msg, 17),
    };
    Ok((seal, inner))
}

/// A batch being built: `kind` then records appended (after room for a seal, where it may be
/// sealed: no copy to put the seal in front).
pub struct Batch {
    buf: Vec<u8>,
    records: usize,
    /// Where the message's kind byte is: 0, or SEAL_HEAD in a batch with room for a seal.
    start: usize,
}

impl Batch {
    pub fn new(kind: u8) -> Batch {
        Batch {
            buf: vec![kind],
            records: 0,
            start: 0,
        }
    }

    /// A batch that [`Batch::take_sealed`] seals.
    pub fn with_seal_room(kind: u8) -> Batch {
        let mut buf = vec![0u8; SEAL_HEAD];
        buf.push(kind);
        Batch {
            buf,
            records: 0,
            start: SEAL_HEAD,
        }
    }

    /// The message sealed under `key` as `seal`, and a fresh batch in its place.
    pub fn take_sealed(&mut self, key: &[u8], seal: Seal) -> Vec<u8> {
        assert_eq!(self.start, SEAL_HEAD, "a batch made with_seal_room");
        let kind = self.buf[SEAL_HEAD];
        let mut out = std::mem::replace(self, Batch::with_seal_room(kind)).buf;
        out[0] = kind | SEALED;
        out[1..9].copy_from_slice(&seal.session.to_le_bytes());
        out[9..17].copy_from_slice(&seal.seq.to_le_bytes());
        out[17..25].copy_from_slice(&seal.time_ms.to_le_bytes());
        let tag_at = SEAL_HEAD - SEAL_TAG;
        let (head, inner) = out.split_at(SEAL_HEAD);
        let tag = seal_mac(key, &head[..tag_at], inner)
            .finalize()
            .into_bytes();
        out[tag_at..SEAL_HEAD].copy_from_slice(&tag[..SEAL_TAG]);
        out
    }

    pub fn records(&self) -> usize {
        self.records
    }

    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    pub fn push_request(&mut self, r: &Request<'_>) {
        debug_assert_eq!(self.buf[self.start], REQUESTS);
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
        debug_assert_eq!(self.buf[self.start], ANSWERS);
        let b = &mut self.buf;
        b.extend_from_slice(&a.id.to_le_bytes());
        b.extend_from_slice(&a.status.to_le_bytes());
        b.extend_from_slice(&(a.payload.len() as u32).to_le_bytes());
        b.extend_from_slice(a.payload);
        self.records += 1;
    }

    /// A ring offer's record (the batch holds one).
    pub fn push_ring_offer(&mut self, o: &RingOffer<'_>) {
        debug_assert_eq!(self.buf[self.start], RING_OFFER);
        let b = &mut self.buf;
        b.extend_from_slice(&o.address.to_le_bytes());
        b.extend_from_slice(&o.slots.to_le_bytes());
        b.extend_from_slice(&o.slot_bytes.to_le_bytes());
        b.extend_from_slice(o.key);
        self.records += 1;
    }

    /// A ring credit's record: the slots read so far.
    pub fn push_ring_credit(&mut self, consumed: u64) {
        debug_assert_eq!(self.buf[self.start], RING_CREDIT);
        self.buf.extend_from_slice(&consumed.to_le_bytes());
        self.records += 1;
    }

    /// A hello's record (the batch holds one): its nonce.
    pub fn push_hello(&mut self, nonce: u64) {
        debug_assert_eq!(self.buf[self.start], HELLO);
        self.buf.extend_from_slice(&nonce.to_le_bytes());
        self.records += 1;
    }

    /// A hello's answer: the nonce it answers and the node's id (cut to [`ID_MAX`] bytes at
    /// a character boundary).
    pub fn push_hello_ack(&mut self, nonce: u64, id: &str) {
        debug_assert_eq!(self.buf[self.start], HELLO_ACK);
        let mut end = id.len().min(ID_MAX);
        while !id.is_char_boundary(end) {
            end -= 1;
        }
        self.buf.extend_from_slice(&nonce.to_le_bytes());
        self.buf.extend_from_slice(&id.as_bytes()[..end]);
        self.records += 1;
    }

    /// The message, and a fresh batch of the same kind in its place (a batch with room for
    /// a seal hands over its message alone: one copy).
    pub fn take(&mut self) -> Vec<u8> {
        let kind = self.buf[self.start];
        self.records = 0;
        let mut fresh = vec![0u8; self.start];
        fresh.push(kind);
        let mut out = std::mem::replace(&mut self.buf, fresh);
        if self.start > 0 {
            out.drain(..self.start);
        }
        out
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

/// A refusal saying `why` (cut to [`REFUSAL_MAX`] bytes at a character boundary).
pub fn refusal(why: &str) -> Vec<u8> {
    let mut end = why.len().min(REFUSAL_MAX);
    while !why.is_char_boundary(end) {
        end -= 1;
    }
    let mut m = Vec::with_capacity(1 + end);
    m.push(REFUSED);
    m.extend_from_slice(&why.as_bytes()[..end]);
    m
}

/// The reason a refusal gives (control characters left out: it is logged), or None when
/// `msg` is not a refusal. It is not sealed: anyone on the path could send one, so it may only
/// be logged and end the connection it came on.
pub fn refusal_reason(msg: &[u8]) -> Option<String> {
    if msg.first() != Some(&REFUSED) || msg.len() > 1 + REFUSAL_MAX {
        return None;
    }
    Some(
        String::from_utf8_lossy(&msg[1..])
            .chars()
            .filter(|c| !c.is_control())
            .collect(),
    )
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

/// A ring offer: a slot must hold more than its head, the key be 1 to [`RING_MAX_KEY`] bytes.
pub fn ring_offer(msg: &[u8]) -> Result<RingOffer<'_>, WireError> {
    kind_of(msg, RING_OFFER)?;
    const HEAD: usize = 1 + 8 + 4 + 4;
    if msg.len() <= HEAD || msg.len() - HEAD > RING_MAX_KEY {
        return Err(WireError::Ring(msg.len()));
    }
    let o = RingOffer {
        address: u64_at(msg, 1),
        slots: u32_at(msg, 9),
        slot_bytes: u32_at(msg, 13),
        key: &msg[HEAD..],
    };
    if o.slots == 0 || (o.slot_bytes as usize) <= RING_DATA_AT || !o.slot_bytes.is_multiple_of(8) {
        return Err(WireError::Ring(msg.len()));
    }
    Ok(o)
}

/// A hello's nonce.
pub fn hello(msg: &[u8]) -> Result<u64, WireError> {
    kind_of(msg, HELLO)?;
    if msg.len() != 9 {
        return Err(WireError::Hello(msg.len()));
    }
    Ok(u64_at(msg, 1))
}

/// A hello's answer: the nonce it answers and the node's id (UTF-8, at most [`ID_MAX`]).
pub fn hello_ack(msg: &[u8]) -> Result<(u64, &str), WireError> {
    kind_of(msg, HELLO_ACK)?;
    if msg.len() < 9 || msg.len() - 9 > ID_MAX {
        return Err(WireError::Hello(msg.len()));
    }
    let id = std::str::from_utf8(&msg[9..]).map_err(|_| WireError::Hello(msg.len()))?;
    Ok((u64_at(msg, 1), id))
}

/// A ring credit: the slots the node has read.
pub fn ring_credit(msg: &[u8]) -> Result<u64, WireError> {
    kind_of(msg, RING_CREDIT)?;
    if msg.len() != 9 {
        return Err(WireError::Ring(msg.len()));
    }
    Ok(u64_at(msg, 1))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_hello_and_its_answer_round_trip_and_malformed_ones_are_refused() {
        let mut b = Batch::new(HELLO);
        b.push_hello(0x1122_3344_5566_7788);
        assert_eq!(hello(&b.take()).unwrap(), 0x1122_3344_5566_7788);
        let mut b = Batch::new(HELLO_ACK);
        b.push_hello_ack(7, "node-a");
        assert_eq!(hello_ack(&b.take()).unwrap(), (7, "node-a"));
        let mut b = Batch::new(HELLO_ACK);
        b.push_hello_ack(7, &"é".repeat(ID_MAX));
        let (_, id) = hello_ack(&b.take())
            .map(|(n, id)| (n, id.to_string()))
            .unwrap();
        assert!(id.len() <= ID_MAX && id.chars().all(|c| c == 'é'));
        assert!(hello(&[HELLO, 1, 2]).is_err());
        assert!(hello(&[ANSWERS; 9]).is_err());
        assert!(hello_ack(&[HELLO_ACK, 1]).is_err());
        let mut bad = vec![HELLO_ACK];
        bad.extend_from_slice(&[0; 8]);
        bad.push(0xff);
        assert!(hello_ack(&bad).is_err());
    }

    #[test]
    fn a_refusal_carries_its_reason_cut_and_cleaned() {
        let m = refusal("another key");
        assert!(!is_sealed(&m));
        assert_eq!(kind(&m).unwrap(), REFUSED);
        assert_eq!(refusal_reason(&m).as_deref(), Some("another key"));
        let long = "é".repeat(REFUSAL_MAX);
        let m = refusal(&long);
        assert!(m.len() <= 1 + REFUSAL_MAX);
        assert!(refusal_reason(&m).unwrap().chars().all(|c| c == 'é'));
        assert_eq!(refusal_reason(b"\x06a\nb\x1b[0m").as_deref(), Some("ab[0m"));
        assert_eq!(refusal_reason(&[ANSWERS, b'x']), None);
        assert_eq!(refusal_reason(&[]), None);
        assert_eq!(refusal_reason(&[REFUSED; 2 + REFUSAL_MAX]), None);
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ring_messages_round_trip_and_refuse_what_is_malformed() {
        let o = RingOffer {
            address: 0x7f00_1234_5000,
            slots: 64,
            slot_bytes: 65536,
            key: &[9; 150],
        };
        let mut b = Batch::new(RING_OFFER);
        b.push_ring_offer(&o);
        let msg = b.take();
        assert_eq!(ring_offer(&msg).unwrap(), o);
        let mut b = Batch::new(RING_CREDIT);
        b.push_ring_credit(77);
        assert_eq!(ring_credit(&b.take()).unwrap(), 77);
        // No key, a key too long, no slots, slots no bigger than their head, a cut credit.
        for (slots, slot_bytes, key) in [
            (64, 65536, 0),
            (64, 65536, RING_MAX_KEY + 1),
            (0, 65536, 8),
            (64, RING_DATA_AT as u32, 8),
            (64, 65537, 8),
        ] {
            let mut m = vec![RING_OFFER];
            m.extend_from_slice(&1u64.to_le_bytes());
            m.extend_from_slice(&(slots as u32).to_le_bytes());
            m.extend_from_slice(&slot_bytes.to_le_bytes());
            m.extend(std::iter::repeat_n(1u8, key));
            assert!(ring_offer(&m).is_err(), "{slots} {slot_bytes} {key}");
        }
        assert!(ring_credit(&[RING_CREDIT, 1, 2]).is_err());
        assert!(ring_credit(&msg).is_err(), "an offer is not a credit");
        assert!(ring_offer(&[]).is_err());
    }

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

    proptest! {
        /// A sealed batch opens under its key to the batch and the seal it was given; a flip
        /// of any bit, or another key, is refused; a plain parser refuses it by its kind.
        #[test]
        fn sealed_batches_open_only_unaltered_under_their_key(
            p in proptest::collection::vec(any::<u8>(), 0..200),
            session in any::<u64>(), seq in any::<u64>(), time_ms in any::<u64>(),
            flip in any::<usize>(), bit in 0u8..8,
        ) {
            let key = b"sixteen or more bytes of key";
            let mut b = Batch::with_seal_room(ANSWERS);
            b.push_answer(&Answer { id: 3, status: 0, payload: &p });
            let seal = Seal { session, seq, time_ms };
            let msg = b.take_sealed(key, seal);
            prop_assert!(is_sealed(&msg));
            let (got, inner) = open(&msg, key).unwrap();
            prop_assert_eq!(got, seal);
            let mut n = 0;
            answers(inner, |a| { n += 1; assert_eq!(a.payload, &p[..]); }).unwrap();
            prop_assert_eq!(n, 1);
            prop_assert_eq!(open(&msg, b"another key of sixteen bytes"), Err(WireError::BadSeal));
            let mut bad = msg.clone();
            let at = flip % bad.len();
            bad[at] ^= 1 << bit;
            prop_assert!(open(&bad, key).is_err(), "byte {} bit {} flipped", at, bit);
            prop_assert_eq!(answers(&msg, |_| ()), Err(WireError::Kind(ANSWERS | SEALED, ANSWERS)));
            // The batch is reusable after a sealed take.
            b.push_answer(&Answer { id: 4, status: 0, payload: b"x" });
            prop_assert!(open(&b.take_sealed(key, seal), key).is_ok());
        }

        /// Any bytes opened: an error or a seal, never a panic.
        #[test]
        fn any_bytes_open_without_panic(msg in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = open(&msg, b"k");
        }
    }

    #[test]
    fn a_batch_with_seal_room_taken_plain_is_the_plain_message() {
        let mut a = Batch::with_seal_room(REQUESTS);
        let mut b = Batch::new(REQUESTS);
        let r = Request {
            id: 1,
            service: 2,
            class: 3,
            request_id: 4,
            deadline_left_us: 5,
            payload: b"p",
        };
        a.push_request(&r);
        b.push_request(&r);
        assert_eq!(a.take(), b.take());
        assert_eq!(
            open(&[REQUESTS | SEALED; SEAL_HEAD], b"k"),
            Err(WireError::SealShort(SEAL_HEAD))
        );
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
