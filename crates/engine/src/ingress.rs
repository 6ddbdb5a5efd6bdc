//! The ingress side of the engine boundary: what an io thread (or the TCP/HTTP side) holds to
//! turn requests into messages and answer messages back into replies.
//!
//! [`Ingress`] owns the in-flight table (token -> who asked, kept on the host) and this
//! ingress's ring ends. Every admitted token is answered exactly once: by the engine's answer
//! message, or by the ingress itself when the lane that held it has died (INTERNAL) or when
//! shutdown gives up waiting (UNAVAILABLE). The table's generations make a late answer for a
//! token already answered harmless (counted, never delivered).

use crate::clock;
use crate::inflight::{InflightTable, LaneRef, Meta};
use crate::inline::InlineEngine;
use crate::joins::Rows;
use crate::metrics::{Metrics, Shed};
use crate::service::Service;
use crate::wiring::{answer_of, IngressEnds, Refusal};
use bytes::Bytes;
use cohort_mq::Envelope;
use cohort_proto::{ErrorCode, ErrorPayload};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Ingress<T> {
    pub ends: IngressEnds,
    table: InflightTable<Held<T>>,
    /// Requests of several rows, split into one request per row and joined (`rows.rs`).
    rows: Rows<T>,
    metrics: Arc<Metrics>,
    /// Deadline of requests that carry none.
    default_timeout: Duration,
    /// The longest deadline a request may ask for (a longer one is cut to this), and the
    /// services that set their own (a handful: a scan is cheaper than a map).
    max_timeout: Duration,
    service_max_timeout: Vec<(u16, Duration)>,
    /// Answers for tokens no longer in flight (answered by the ingress before the engine).
    pub stale_answers: u64,
    /// Services this ingress's thread runs itself (`admit`), and the buffer their answers
    /// are written into (reused: no allocation per request).
    inline: Option<Arc<InlineEngine>>,
    inline_out: Vec<u8>,
}

/// What a token in the table stands for: a whole request, or one row of a split one.
enum Held<T> {
    One(T),
    Row { join: u32, row: u32 },
}

/// An answer's outcome label in the request metrics.
fn outcome<A>(answer: &Result<A, ErrorPayload>) -> &'static str {
    match answer {
        Ok(_) => "ok",
        Err(e) => e.code.label(),
    }
}

/// Where a request answered inline says it was served (no engine lane holds it).
pub const INLINE_LANE: LaneRef = LaneRef {
    engine: u16::MAX,
    lane: 0,
};

/// What an answer is, as the ingress hands it on.
pub type Answer<'a> = Result<&'a [u8], ErrorPayload>;

/// Who asked, as the ingress's in-flight table keeps it: the client's fairness class goes
/// with each request to the engine (the cpu engine's fair queue, `fair.rs`).
pub trait Requester {
    /// A hash of the client's identity (API key, else source address), 0 where none is
    /// known; clients that share a class share a fair queue.
    fn fairness_class(&self) -> u16 {
        0
    }
}

/// Callers that name requests by a number or a time (benchmarks, tests, the selftest): one
/// client.
impl Requester for u64 {}
impl Requester for u32 {}
impl Requester for usize {}
impl Requester for Instant {}

impl<T: Requester> Ingress<T> {
    pub fn new(
        ends: IngressEnds,
        capacity: usize,
        metrics: Arc<Metrics>,
        default_timeout: Duration,
    ) -> Ingress<T> {
        Ingress {
            ends,
            table: InflightTable::new(capacity),
            rows: Rows::default(),
            metrics,
            default_timeout,
            max_timeout: Duration::MAX,
            service_max_timeout: Vec::new(),
            stale_answers: 0,
            inline: None,
            inline_out: Vec::new(),
        }
    }

    /// Cuts every request's deadline to at most `max` (a client cannot hold a worker for
    /// hours by asking for it).
    pub fn with_max_timeout(
        mut self,
        max: Duration,
        per_service: &[(u16, Duration)],
    ) -> Ingress<T> {
        assert!(
            !max.is_zero() && per_service.iter().all(|(_, d)| !d.is_zero()),
            "a zero deadline would time out every request"
        );
        self.max_timeout = max;
        self.service_max_timeout = per_service.to_vec();
        self
    }

    fn max_timeout_of(&self, service: u16) -> Duration {
        self.service_max_timeout
            .iter()
            .find(|(s, _)| *s == service)
            .map_or(self.max_timeout, |(_, d)| *d)
    }

    /// Splits the requests of the `services` that declare rows ([`Service::row_split`]) into
    /// one request per row, and joins their answers (`rows.rs`).
    pub fn with_rows(mut self, services: impl IntoIterator<Item = Arc<dyn Service>>) -> Self {
        self.rows = Rows::new(services);
        self
    }

    /// Runs the inline engine's services on this ingress's thread (see [`Ingress::admit`]).
    pub fn with_inline(mut self, inline: Option<Arc<InlineEngine>>) -> Ingress<T> {
        self.inline = inline.filter(|i| !i.is_empty());
        if self.inline.is_some() {
            self.inline_out = Vec::with_capacity(64 << 10);
        }
        self
    }

    /// Admits one request: a service of the inline engine runs now, on this thread, and its
    /// answer goes to `now` before `admit` returns; any other is [`Ingress::submit`]ted
    /// (answered later through `drain`). Refusals come back as from `submit`.
    pub fn admit(
        &mut self,
        who: T,
        service: u16,
        request_id: u64,
        timeout_us: u32,
        payload: &[u8],
        now: impl FnOnce(T, &Meta, Answer<'_>),
    ) -> Result<(), (T, ErrorPayload)> {
        let Some((inline, s)) = self
            .inline
            .as_ref()
            .and_then(|i| Some((i, i.service(service)?)))
        else {
            return self.submit(who, service, request_id, timeout_us, payload);
        };
        let meta = Meta {
            service,
            request_id,
            arrived: Instant::now(),
            lane: INLINE_LANE,
        };
        let rows = match self.rows.splitter_of(service) {
            None => None,
            Some(i) => match self.rows.split(i).rows(payload) {
                Ok(n) => n.map(|n| (i, n)),
                Err(e) => {
                    self.metrics
                        .answered(service, e.code.label(), Duration::ZERO);
                    return Err((who, e));
                }
            },
        };
        let result = match rows {
            None => inline
                .execute(&**s, payload, &mut self.inline_out, &self.metrics)
                .map(|()| &self.inline_out[..]),
            // Every row runs here and now, in order; the first error is the answer.
            Some((i, n)) => {
                let rows = &mut self.rows;
                rows.inline.reset(n);
                let mut failed = None;
                for r in 0..n {
                    rows.build_row(i, payload, r);
                    match inline.execute(&**s, &rows.row_buf, &mut self.inline_out, &self.metrics) {
                        Ok(()) => rows.inline.put(r, &self.inline_out),
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                match failed {
                    Some(e) => Err(e),
                    None => Ok(rows.join_inline(i)),
                }
            }
        };
        self.metrics
            .answered(service, outcome(&result), meta.arrived.elapsed());
        now(who, &meta, result);
        Ok(())
    }

    /// Admits one request: its message goes into a lane's request ring and `who` waits in the
    /// table for the answer. On refusal `who` comes back with the error to answer at once (it
    /// is already counted in the metrics).
    pub fn submit(
        &mut self,
        who: T,
        service: u16,
        request_id: u64,
        timeout_us: u32,
        payload: &[u8],
    ) -> Result<(), (T, ErrorPayload)> {
        if let Some(i) = self.rows.splitter_of(service) {
            match self.rows.split(i).rows(payload) {
                Ok(None) => {}
                Ok(Some(n)) => {
                    return self.submit_rows(who, service, request_id, timeout_us, payload, (i, n))
                }
                Err(e) => {
                    self.metrics
                        .answered(service, e.code.label(), Duration::ZERO);
                    return Err((who, e));
                }
            }
        }
        let arrived = Instant::now();
        let now = clock::now_ns();
        let deadline = self.deadline_of(service, timeout_us, now);
        let meta = Meta {
            service,
            request_id,
            arrived,
            lane: LaneRef { engine: 0, lane: 0 },
        };
        if !self.has_room_for(1) {
            return Err(self.full(who, service));
        }
        let class = who.fairness_class();
        let token = self
            .table
            .insert(Held::One(who), meta)
            .expect("room checked");
        let env = Envelope {
            token,
            service,
            // A request's status is its client's class (answers put their code there).
            status: class,
            request_id,
            deadline,
            arrived: now,
        };
        match self.ends.send(env, payload) {
            Ok(lane) => {
                self.table.set_lane(token, lane);
                Ok(())
            }
            Err(r) => match self.table.take(token).expect("just inserted") {
                (Held::One(who), _) => Err(self.refused(who, service, r)),
                (Held::Row { .. }, _) => unreachable!("inserted whole"),
            },
        }
    }

    fn deadline_of(&self, service: u16, timeout_us: u32, now: u64) -> u64 {
        let timeout = match timeout_us {
            0 => self.default_timeout,
            us => Duration::from_micros(us as u64),
        }
        .min(self.max_timeout_of(service));
        now.saturating_add(timeout.as_nanos() as u64)
    }

    /// [`Ingress::submit`] of a request of `n` rows (`splitter`'s service): one request per
    /// row, each its own place in the table and the engine's queue, all with the request's
    /// deadline. Refused whole when the table cannot take every row; when an engine refuses
    /// a row after others were sent, the request answers that refusal once the sent rows'
    /// answers are in (never twice, never a partial answer).
    fn submit_rows(
        &mut self,
        who: T,
        service: u16,
        request_id: u64,
        timeout_us: u32,
        payload: &[u8],
        (splitter, n): (usize, usize),
    ) -> Result<(), (T, ErrorPayload)> {
        let arrived = Instant::now();
        let now = clock::now_ns();
        let deadline = self.deadline_of(service, timeout_us, now);
        if !self.has_room_for(n) {
            return Err(self.full(who, service));
        }
        let meta = Meta {
            service,
            request_id,
            arrived,
            lane: LaneRef { engine: 0, lane: 0 },
        };
        let class = who.fairness_class();
        let join = self.rows.start(who, meta, n, splitter);
        for row in 0..n {
            self.rows.build_row(splitter, payload, row);
            let held = Held::Row {
                join,
                row: row as u32,
            };
            let token = self.table.insert(held, meta).expect("room checked");
            let env = Envelope {
                token,
                service,
                status: class,
                request_id,
                deadline,
                arrived: now,
            };
            match self.ends.send(env, &self.rows.row_buf) {
                Ok(lane) => {
                    self.table.set_lane(token, lane);
                    self.rows.sent(join);
                }
                Err(r) => {
                    self.table.take(token).expect("just inserted");
                    if row == 0 {
                        let who = self.rows.cancel(join);
                        return Err(self.refused(who, service, r));
                    }
                    if let Some(why) = r.shed() {
                        self.metrics.refused(service, why);
                    }
                    self.rows.fail(join, r.error(service));
                    break;
                }
            }
        }
        Ok(())
    }

    /// Requests split into rows still waiting for some of their rows' answers.
    pub fn split_pending(&self) -> usize {
        self.rows.pending()
    }

    /// True when the table has room for another request.
    pub fn has_room(&self) -> bool {
        self.has_room_for(1)
    }

    /// True when the table has room for `n` more requests (a request's rows).
    fn has_room_for(&self, n: usize) -> bool {
        self.table_capacity().saturating_sub(self.table.in_flight()) >= n
    }

    /// The refusal of a request the table has no room for, counted.
    fn full(&self, who: T, service: u16) -> (T, ErrorPayload) {
        let e = self.metrics.shed(
            service,
            Shed::Ingress,
            "too many requests in flight on this ingress",
        );
        (who, e)
    }

    fn table_capacity(&self) -> usize {
        self.table.capacity()
    }

    fn refused(&self, who: T, service: u16, r: Refusal) -> (T, ErrorPayload) {
        if let Some(why) = r.shed() {
            self.metrics.refused(service, why);
        }
        let e = r.error(service);
        self.metrics
            .answered(service, e.code.label(), Duration::ZERO);
        (who, e)
    }

    /// Hands up to `max` answers to `f` (who asked, its meta, the answer). Returns how many
    /// messages were read.
    pub fn drain(&mut self, max: usize, mut f: impl FnMut(T, &Meta, Answer<'_>)) -> usize {
        self.drain_shared(max, |who, meta, answer, _| f(who, meta, answer))
    }

    /// `drain`, also handing over the answer's own buffer when it crossed the ring as one (an
    /// answer larger than a slot, such as a page): a port that keeps the answer clones that
    /// buffer (a reference count) instead of copying the bytes.
    pub fn drain_shared(
        &mut self,
        max: usize,
        mut f: impl FnMut(T, &Meta, Answer<'_>, Option<&Bytes>),
    ) -> usize {
        let (table, metrics, stale) = (&mut self.table, &self.metrics, &mut self.stale_answers);
        let rows = &mut self.rows;
        self.ends
            .drain_answers(max, |m| match table.take(m.env.token) {
                Some((Held::One(who), meta)) => {
                    let answer = answer_of(&m).map(|()| m.payload);
                    metrics.answered(meta.service, outcome(&answer), meta.arrived.elapsed());
                    let shared = if answer.is_ok() { m.spilled } else { None };
                    f(who, &meta, answer, shared)
                }
                Some((Held::Row { join, row }, _)) => {
                    let answer = answer_of(&m).map(|()| m.payload);
                    rows.answered(join, row, answer, metrics, &mut |who, meta, a| {
                        f(who, meta, a, None)
                    })
                }
                None => *stale += 1,
            })
    }

    /// Checks for lanes that died (a panicked engine thread) or restarted (a GPU watchdog):
    /// takes what they answered, then answers INTERNAL for every request they still held.
    /// Returns how many were failed.
    pub fn reap_dead_lanes(&mut self, mut f: impl FnMut(T, &Meta, Answer<'_>)) -> usize {
        let lanes = self.ends.lanes_to_reap();
        if lanes.is_empty() {
            return 0;
        }
        while self.drain(usize::MAX, &mut f) > 0 {}
        let mut failed = 0;
        for (lane, dead) in lanes {
            let tokens = self.table.tokens_where(|m| m.lane == lane);
            let engine = self.ends.engine_name(lane.engine);
            let message = if dead {
                tracing::error!(%engine, lane = lane.lane, failed = tokens.len(), "an engine lane stopped; failing its requests");
                "the engine lane running this request stopped"
            } else {
                tracing::error!(%engine, lane = lane.lane, failed = tokens.len(), "an engine lane restarted; failing the requests it held");
                "the engine lane running this request was restarted"
            };
            for &t in &tokens {
                let e = ErrorPayload::new(ErrorCode::Internal, message);
                self.fail_token(t, e, &mut f);
            }
            failed += tokens.len();
        }
        failed
    }

    /// Shutdown gave up waiting: answers every request still in flight with `code`.
    pub fn abandon_all(
        &mut self,
        code: ErrorCode,
        message: &str,
        mut f: impl FnMut(T, &Meta, Answer<'_>),
    ) -> usize {
        let tokens = self.table.tokens_where(|_| true);
        for &t in &tokens {
            self.fail_token(t, ErrorPayload::new(code, message), &mut f);
        }
        tokens.len()
    }

    /// Answers the token in flight `t` with `e` (a row: its request, once all its rows are in).
    fn fail_token(&mut self, t: u32, e: ErrorPayload, f: &mut impl FnMut(T, &Meta, Answer<'_>)) {
        match self.table.take(t).expect("listed in flight") {
            (Held::One(who), meta) => {
                self.metrics
                    .answered(meta.service, e.code.label(), meta.arrived.elapsed());
                f(who, &meta, Err(e));
            }
            (Held::Row { join, row }, _) => {
                self.rows
                    .answered(join, row, Err(e), &self.metrics, &mut |w, m, a| f(w, m, a))
            }
        }
    }

    pub fn in_flight(&self) -> usize {
        self.table.in_flight()
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
}
