//! The answer rings from a lane to every ingress ([`AnswerRings`]): writing answers (in place,
//! spilled, or as errors) and waking the ingress that gets them, once per batch when wakes
//! are deferred; and the helpers that make and read an answer envelope.

use super::WakeCell;
use bytes::Bytes;
use cohort_mq::{Envelope, Message, Producer, SendError};
use cohort_proto::{ErrorCode, ErrorPayload};

pub struct AnswerRings {
    pub(super) rings: Vec<Producer>,
    pub(super) wakes: Vec<WakeCell>,
    /// Between `defer_wakes` and `wake_deferred`: answers written to each ring since its
    /// ingress was last woken.
    pub(super) unwoken: Vec<u32>,
    pub(super) deferring: bool,
}

/// Answers a deferred batch leaves in one ring before it wakes that ingress anyway: the first
/// answer of a long batch waits for at most this many more writes, not the whole batch.
pub(super) const WAKE_EVERY: u32 = 32;

impl AnswerRings {
    pub(super) fn new(rings: Vec<Producer>, wakes: Vec<WakeCell>) -> AnswerRings {
        let unwoken = vec![0; rings.len()];
        AnswerRings {
            rings,
            wakes,
            unwoken,
            deferring: false,
        }
    }

    /// Until `wake_deferred`, a written answer wakes its ingress only every `WAKE_EVERY`
    /// answers (and whenever its ring is full). A thread that answers a batch at a time (the
    /// persistent egress, a finished cohort) otherwise pays a full fence, and for a sleeping
    /// ingress a wake-up, per answer: at 8 ingresses that made the persistent egress thread,
    /// the one core every answer crosses, the limit of the engine.
    pub fn defer_wakes(&mut self) {
        self.deferring = true;
    }

    /// Wakes every ingress with an answer written since `defer_wakes` and ends deferring.
    pub fn wake_deferred(&mut self) {
        self.deferring = false;
        for to in 0..self.unwoken.len() {
            if self.unwoken[to] > 0 {
                self.unwoken[to] = 0;
                self.wake(to);
            }
        }
    }

    /// Writes an answer for a request that came from ingress `to` (its envelope, with
    /// `status` 0 for a result or an error code) and wakes that ingress. Waits while the ring
    /// is full (the ingress drains it continuously); drops the answer if the ingress is gone
    /// (it answered everything itself before leaving).
    pub fn send(&mut self, to: usize, env: Envelope, payload: &[u8]) {
        self.send_with(to, |ring| ring.try_send(env, payload));
    }

    /// `send` for an answer that is a shared buffer already (a page in the device's pinned
    /// results): a large one crosses the ring as a reference, with no copy.
    pub fn send_bytes(&mut self, to: usize, env: Envelope, payload: &Bytes) {
        self.send_with(to, |ring| ring.try_send_bytes(env, payload));
    }

    /// `send` for an answer built in `buf`: one larger than a slot moves into the ring with
    /// its buffer (no copy; the ingress hands that buffer on) and `buf` is left empty, to be
    /// refilled by the caller; a smaller one is copied and `buf` kept.
    pub fn send_vec(&mut self, to: usize, env: Envelope, buf: &mut Vec<u8>) {
        self.send_with(to, |ring| ring.try_send_vec(env, buf));
    }

    /// Retries `try_send` on ingress `to`'s ring while it is full (waking the ingress, then
    /// yielding after a short spin), wakes it once written; gives up if the ingress is gone.
    fn send_with(
        &mut self,
        to: usize,
        mut try_send: impl FnMut(&mut Producer) -> Result<(), SendError>,
    ) {
        let mut spins = 0u32;
        loop {
            match try_send(&mut self.rings[to]) {
                Ok(()) => break,
                Err(SendError::Full) => {
                    self.wake(to);
                    spins += 1;
                    if spins > 64 {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
                Err(SendError::Closed) => return,
                Err(SendError::TooLarge) => unreachable!("answer rings spill"),
            }
        }
        if self.deferring {
            self.unwoken[to] += 1;
            if self.unwoken[to] < WAKE_EVERY {
                return;
            }
            self.unwoken[to] = 0;
        }
        self.wake(to);
    }

    /// An error answer: the code in `status`, the message as payload.
    pub fn send_error(&mut self, to: usize, env: Envelope, e: &ErrorPayload) {
        let env = Envelope {
            status: e.code as u16,
            ..env
        };
        self.send(to, env, e.message.as_bytes());
    }

    /// Moves the rings into `parts` sets for as many threads: set k holds ingress i's ring,
    /// at index i / parts, for every i with i % parts == k. Every wake stays here as well, so
    /// `wake_all` (a lane's restart) still reaches every ingress; this set sends nothing
    /// afterwards (it holds no ring: `len` is 0).
    pub fn split(&mut self, parts: usize) -> Vec<AnswerRings> {
        assert!(
            (1..=self.rings.len()).contains(&parts),
            "1..={} parts",
            self.rings.len()
        );
        let mut sets: Vec<(Vec<Producer>, Vec<WakeCell>)> =
            (0..parts).map(|_| (Vec::new(), Vec::new())).collect();
        for (i, ring) in std::mem::take(&mut self.rings).into_iter().enumerate() {
            sets[i % parts].0.push(ring);
            sets[i % parts].1.push(self.wakes[i].clone());
        }
        self.unwoken.clear();
        sets.into_iter()
            .map(|(rings, wakes)| AnswerRings::new(rings, wakes))
            .collect()
    }

    /// Ingresses (one ring each).
    pub fn len(&self) -> usize {
        self.rings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rings.is_empty()
    }

    /// Wakes every ingress (something changed that they must look at).
    pub fn wake_all(&self) {
        (0..self.wakes.len()).for_each(|i| self.wake(i));
    }

    pub(super) fn wake(&self, to: usize) {
        if let Some(w) = self.wakes[to].get() {
            w.wake();
        }
    }
}

/// The answer envelope of a request (status 0: a result).
pub fn ok(env: Envelope) -> Envelope {
    Envelope { status: 0, ..env }
}

/// Turns an answer message back into a result or an error.
pub fn answer_of(m: &Message<'_>) -> Result<(), ErrorPayload> {
    if m.env.status == 0 {
        return Ok(());
    }
    let code = ErrorCode::from_u16(m.env.status).unwrap_or(ErrorCode::Internal);
    Err(ErrorPayload::new(
        code,
        String::from_utf8_lossy(m.payload).into_owned(),
    ))
}
