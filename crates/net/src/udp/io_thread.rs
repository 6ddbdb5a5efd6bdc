//! One UDP io thread: read a batch, admit each frame into the engines' request rings, write
//! back the answers the engines put on this thread's answer rings, sleep on the socket and
//! the doorbell when there is nothing to do. The socket is driven one of two ways
//! (`--udp-io`): recvmmsg/sendmmsg with poll() to sleep, or io_uring (`cohort_udp::UringIo`).
//!
//! Hot path without heap allocation: a datagram is decoded in place in its receive buffer,
//! its payload copied once into a ring slot; an answer is encoded from its ring slot straight
//! into the send batch. (Error answers allocate their message.) The in-flight table is this
//! thread's own: no lock.

use crate::context::Context;
use crate::doorbell::Doorbell;
use crate::quota::{Key, Who};
use cohort_engine::{Answer, Ingress, IngressEnds, Meta, Metrics};
use cohort_proto::{ErrorCode, ErrorPayload, Frame, Header, Kind, HEADER_LEN};
use cohort_udp::{BufPool, Coalescer, MsgBatch, Received, UringIo};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const BATCH: usize = 64;

/// Who asked: the in-flight table's value for a UDP request.
#[derive(Clone, Copy)]
pub(crate) struct Client {
    pub addr: libc::sockaddr_storage,
    pub addr_len: libc::socklen_t,
    /// The request datagram's size: the answer sent to this address is never larger (no
    /// amplification toward a spoofed source; `docs/protocol.md`).
    pub request_len: u32,
    /// The quota slot it was admitted under (`crate::quota`), given back with its answer.
    pub quota: Option<Key>,
    /// Its fairness class (`Quotas::class_of`).
    pub class: u16,
}

impl cohort_engine::Requester for Client {
    fn fairness_class(&self) -> u16 {
        self.class
    }
}

impl Client {
    /// The sender of datagram `bytes`.
    fn of(bytes: &[u8], addr: libc::sockaddr_storage, addr_len: libc::socklen_t) -> Client {
        Client {
            addr,
            addr_len,
            request_len: bytes.len() as u32,
            quota: None,
            class: 0,
        }
    }

    /// The sender's IP address.
    fn ip(&self) -> Option<IpAddr> {
        match self.addr.ss_family as libc::c_int {
            libc::AF_INET => {
                // SAFETY: the family says the storage holds a sockaddr_in.
                let a: &libc::sockaddr_in = unsafe { &*(&self.addr as *const _ as *const _) };
                Some(IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()))
            }
            libc::AF_INET6 => {
                // SAFETY: the family says the storage holds a sockaddr_in6.
                let a: &libc::sockaddr_in6 = unsafe { &*(&self.addr as *const _ as *const _) };
                Some(IpAddr::from(a.sin6_addr.s6_addr))
            }
            _ => None,
        }
    }
}

pub(crate) struct UdpThreadConfig {
    pub table_capacity: usize,
    pub core: Option<usize>,
    pub drain_timeout: Duration,
    pub default_timeout: Duration,
    pub max_timeout: Duration,
    pub service_max_timeout: Vec<(u16, Duration)>,
    /// Idle polling before sleeping (`NetConfig::io_spin`).
    pub spin: Duration,
    /// Drive the socket through io_uring (the server checked that the kernel gives it).
    pub uring: bool,
    /// Coalesce answers to one address into UDP GSO trains (recvmmsg path; `cohort_udp::Coalescer`).
    pub gso: bool,
}

pub(crate) fn spawn_udp(
    socket: std::net::UdpSocket,
    ctx: Arc<Context>,
    ends: IngressEnds,
    stop: Arc<AtomicBool>,
    cfg: UdpThreadConfig,
    index: usize,
) -> std::io::Result<JoinHandle<()>> {
    socket.set_nonblocking(true)?;
    let bell = Arc::new(Doorbell::new()?);
    ends.set_wake(bell.clone());
    std::thread::Builder::new()
        .name(format!("udp-io-{index}"))
        .spawn(move || {
            if let Some(c) = cfg.core {
                core_affinity::set_for_current(core_affinity::CoreId { id: c });
            }
            let fd = socket.as_raw_fd();
            let datagram = HEADER_LEN + ctx.max_payload;
            let batched = || {
                let gso = cfg.gso && cohort_udp::gso_supported(fd);
                if cfg.gso && !gso {
                    tracing::warn!(thread = index, "the kernel has no UDP GSO: answers are sent one datagram each");
                }
                SocketPath::Batched {
                    rx: MsgBatch::new(BATCH, datagram),
                    gso: Box::new(Coalescer::new(BATCH, gso)),
                }
            };
            let path = if cfg.uring {
                match UringIo::new(fd, bell.raw_fd(), datagram) {
                    Ok((io, pool)) => SocketPath::Uring {
                        io: Box::new(io),
                        pool,
                        taken: Vec::new(),
                    },
                    Err(e) => {
                        tracing::warn!(thread = index, error = %e, "io_uring refused: this UDP io thread uses recvmmsg");
                        batched()
                    }
                }
            } else {
                batched()
            };
            ctx.metrics.udp_io_thread(path.label());
            let mut io = IoThread {
                fd,
                ingress: Ingress::new(
                    ends,
                    cfg.table_capacity,
                    ctx.metrics.clone(),
                    cfg.default_timeout,
                )
                .with_max_timeout(cfg.max_timeout, &cfg.service_max_timeout)
                .with_inline(ctx.inline.clone())
                .with_rows(ctx.registry.all().cloned()),
                path,
                tx_batch: MsgBatch::new(BATCH, datagram),
                bell,
                name: format!("udp-{index}"),
                ctx,
            };
            io.run(&stop, cfg.drain_timeout, cfg.spin);
            drop(socket);
        })
}

/// How the io thread reads its socket and sends its answers.
enum SocketPath {
    /// recvmmsg into `rx`, sendmmsg (answers to one address as GSO trains), poll() to sleep.
    Batched { rx: MsgBatch, gso: Box<Coalescer> },
    /// io_uring: a multishot receive into `pool`'s buffers; `taken` holds the datagrams of
    /// the batch being admitted. (`io` is declared first: it ends the receive before the
    /// pool's buffers are freed.)
    Uring {
        io: Box<UringIo>,
        pool: BufPool,
        taken: Vec<Received>,
    },
}

impl SocketPath {
    fn label(&self) -> &'static str {
        match self {
            SocketPath::Batched { .. } => "recvmmsg",
            SocketPath::Uring { .. } => "io_uring",
        }
    }

    fn sender(&mut self, fd: RawFd) -> Sender<'_> {
        match self {
            SocketPath::Batched { gso, .. } => Sender::Syscall(fd, gso),
            SocketPath::Uring { io, .. } => Sender::Uring(io),
        }
    }
}

/// Where a full send batch goes.
enum Sender<'a> {
    Syscall(RawFd, &'a mut Coalescer),
    Uring(&'a mut UringIo),
}

struct IoThread {
    fd: RawFd,
    ingress: Ingress<Client>,
    path: SocketPath,
    tx_batch: MsgBatch,
    bell: Arc<Doorbell>,
    name: String,
    ctx: Arc<Context>,
}

impl IoThread {
    fn run(&mut self, stop: &AtomicBool, drain_timeout: Duration, spin: Duration) {
        let mut loops = 0u32;
        // When the thread last found nothing to do, while it polls before sleeping.
        let mut idle_since: Option<Instant> = None;
        while !stop.load(Ordering::Acquire) {
            let got = self.read_batch();
            let answered = self.collect_answers();
            // While the socket still has a full batch waiting, keep reading and let answers
            // accumulate so each sendmmsg carries many; once it is drained, send at once.
            if got < BATCH {
                self.flush();
            }
            if got == 0 && answered == 0 {
                let now = Instant::now();
                if now.duration_since(*idle_since.get_or_insert(now)) < spin {
                    // Polling: the next recvmmsg is the poll. Yield so that a thread sharing
                    // the core (a worker, the GPU egress) runs meanwhile.
                    std::thread::yield_now();
                } else {
                    idle_since = None;
                    self.publish_in_flight();
                    self.park(Some(self.fd), 50);
                }
            } else {
                idle_since = None;
            }
            loops = loops.wrapping_add(1);
            if loops.is_multiple_of(4096) {
                self.publish_in_flight();
            }
        }
        // Shutdown: read nothing more, answer everything in flight (bounded wait), and what
        // the engines did not answer in time gets UNAVAILABLE before the socket closes.
        let until = Instant::now() + drain_timeout;
        while self.ingress.in_flight() > 0 && Instant::now() < until {
            // What still arrives is answered UNAVAILABLE (the ingress is shutting down).
            let got = self.read_batch();
            let answered = self.collect_answers();
            self.flush();
            if got == 0 && answered == 0 {
                self.park(Some(self.fd), 10);
            }
        }
        let left = self.ingress.in_flight();
        if left > 0 {
            tracing::warn!(
                left,
                "udp io thread stopped waiting for answers: UNAVAILABLE"
            );
            let (tx, ctx) = (&mut self.tx_batch, &*self.ctx);
            let mut out = self.path.sender(self.fd);
            self.ingress.abandon_all(
                ErrorCode::Unavailable,
                "server shut down before the engine answered",
                |c, meta, a| push_answer(tx, &mut out, ctx, &c, meta, a),
            );
            flush(tx, &mut out, &ctx.metrics);
        }
        self.publish_in_flight();
    }

    fn publish_in_flight(&self) {
        self.ctx
            .metrics
            .set_in_flight(&self.name, self.ingress.in_flight());
    }

    fn flush(&mut self) {
        let mut out = self.path.sender(self.fd);
        flush(&mut self.tx_batch, &mut out, &self.ctx.metrics);
    }

    /// Sleeps until the socket is readable (`sock`: None while draining, when datagrams
    /// are no longer read), an answer arrives, or `ms` pass.
    fn park(&mut self, sock: Option<RawFd>, ms: i32) {
        self.bell.prepare_sleep();
        if self.ingress.ends.answers_waiting() {
        } else if let SocketPath::Uring { io, .. } = &mut self.path {
            io.park(Duration::from_millis(ms as u64));
        } else {
            let mut fds = [
                libc::pollfd {
                    fd: self.bell.raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: sock.unwrap_or(-1),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfd entries (fd -1 is ignored by poll).
            unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        }
        self.bell.woke();
    }

    /// Reads what the socket has (a batch at most) and admits it. Returns the datagrams read.
    fn read_batch(&mut self) -> usize {
        let shutting_down = self.ctx.is_shutting_down();
        let (ingress, tx, ctx, fd) = (&mut self.ingress, &mut self.tx_batch, &*self.ctx, self.fd);
        let n = match &mut self.path {
            SocketPath::Batched { rx, gso } => {
                let n = match rx.recv(fd) {
                    Ok(n) => n,
                    Err(e) => {
                        tracing::warn!(error = %e, "recvmmsg failed");
                        return 0;
                    }
                };
                let mut out = Sender::Syscall(fd, gso);
                for i in 0..n {
                    let (bytes, addr, addr_len) = rx.received(i);
                    let client = Client::of(bytes, *addr, addr_len);
                    admit(ingress, tx, &mut out, ctx, shutting_down, bytes, client);
                }
                n
            }
            SocketPath::Uring { io, pool, taken } => {
                if io.poll() == 0 {
                    return 0;
                }
                io.take_received(taken);
                let mut out = Sender::Uring(io);
                for &r in taken.iter() {
                    match pool.datagram(r) {
                        Some((bytes, addr, addr_len)) => {
                            let client = Client::of(bytes, addr, addr_len);
                            admit(ingress, tx, &mut out, ctx, shutting_down, bytes, client);
                        }
                        None => ctx.metrics.dropped("truncated_request"),
                    }
                }
                pool.recycle(taken.iter().map(|r| r.bid));
                taken.len()
            }
        };
        if n > 0 {
            self.ctx.metrics.datagrams("rx", n as u64);
        }
        n
    }

    /// Moves every answer the engines have written so far into the send batch (sending only
    /// when the batch fills). Returns how many there were.
    fn collect_answers(&mut self) -> usize {
        let (tx, ctx) = (&mut self.tx_batch, &*self.ctx);
        let mut out = self.path.sender(self.fd);
        let mut push =
            |c: Client, meta: &Meta, a: Answer<'_>| push_answer(tx, &mut out, ctx, &c, meta, a);
        self.ingress.drain(4 * BATCH, &mut push) + self.ingress.reap_dead_lanes(&mut push)
    }
}

/// Decodes one datagram and admits its request (or answers why not, or drops what is not
/// Cohort's).
fn admit(
    ingress: &mut Ingress<Client>,
    tx: &mut MsgBatch,
    out: &mut Sender<'_>,
    ctx: &Context,
    shutting_down: bool,
    bytes: &[u8],
    client: Client,
) {
    // Refusals made here are counted here; the ingress counts its own (a full ring, an
    // unknown service, a stopped engine) inside `admit`.
    let metrics = &ctx.metrics;
    let refuse = |h: Header, code: ErrorCode, msg: String| {
        metrics.answered(h.service, code.label(), Duration::ZERO);
        Some((h, ErrorPayload::new(code, msg)))
    };
    let refusal = match Frame::decode_datagram(bytes, ctx.max_payload) {
        Ok(f) if f.header.kind != Kind::Request => refuse(
            f.header,
            ErrorCode::BadRequest,
            "clients may only send requests".into(),
        ),
        Ok(f) if shutting_down => refuse(
            f.header,
            ErrorCode::Unavailable,
            "server is shutting down".into(),
        ),
        // A handler's frames (the collections: a write waits for an fsync) are not run on
        // the UDP io thread: the client is told to use TCP, nothing is executed.
        Ok(f) if ctx.frame_routes(f.header.service).is_some() => refuse(
            f.header,
            ErrorCode::BadRequest,
            format!(
                "service {} is served over TCP only: send this request over TCP",
                f.header.service
            ),
        ),
        Ok(f) => match ctx.unsigned(&f.header, f.payload) {
            Err(e) => refuse(f.header, e.code, e.message),
            Ok((payload, key)) => {
                let h = f.header;
                let who = Who::of(key, client.ip());
                match who.map_or(Ok(None), |w| ctx.quotas.admit(w)) {
                    Err(over) => Some((h, ctx.over_quota(h.service, &over))),
                    Ok(quota) => ingress
                        .admit(
                            Client {
                                quota,
                                class: ctx.quotas.class_of(who),
                                ..client
                            },
                            h.service,
                            h.request_id,
                            h.timeout_us,
                            payload,
                            |c, meta, a| push_answer(tx, out, ctx, &c, meta, a),
                        )
                        .err()
                        .map(|(c, e)| {
                            ctx.quotas.done(c.quota);
                            (h, e)
                        }),
                }
            }
        },
        Err(e) if e.is_foreign() || bytes.len() < HEADER_LEN => {
            metrics.dropped("not_cohort");
            None
        }
        Err(e) => {
            // A Cohort header we can read but a frame we cannot accept: answer it.
            let code = match e {
                cohort_proto::FrameError::TooLarge(..) => ErrorCode::TooLarge,
                _ => ErrorCode::BadRequest,
            };
            refuse(header_for_error(bytes), code, e.to_string())
        }
    };
    if let Some((h, e)) = refusal {
        let meta = Meta {
            service: h.service,
            request_id: h.request_id,
            arrived: Instant::now(),
            lane: cohort_engine::LaneRef { engine: 0, lane: 0 },
        };
        push_answer(tx, out, ctx, &client, &meta, Err(e));
    }
}

fn push_answer(
    tx: &mut MsgBatch,
    out: &mut Sender<'_>,
    ctx: &Context,
    c: &Client,
    meta: &Meta,
    a: Answer<'_>,
) {
    ctx.quotas.done(c.quota);
    let m = &*ctx.metrics;
    let limit = c.request_len as usize;
    // Not even a bare error frame fits in what the client sent: nothing is sent (counted).
    if limit < HEADER_LEN + ERROR_HEAD && !matches!(a, Ok(p) if HEADER_LEN + p.len() <= limit) {
        m.dropped("amplification");
        return;
    }
    if tx.is_full() {
        flush(tx, out, m);
    }
    let mut truncated = false;
    tx.push(&c.addr, c.addr_len, |buf| {
        let limit = limit.min(buf.len());
        let (n, t) = encode_answer(meta.request_id, meta.service, a, &mut buf[..limit]);
        truncated = t;
        n
    });
    if truncated {
        m.dropped("truncated_answer");
    }
}

fn flush(tx: &mut MsgBatch, out: &mut Sender<'_>, m: &Metrics) {
    let n = tx.len;
    if n == 0 {
        return;
    }
    let refused = match out {
        Sender::Syscall(fd, gso) => {
            let (refused, coalesced) = gso.send(tx, *fd);
            if coalesced > 0 {
                // A share of "tx": the datagrams that left in GSO trains.
                m.datagrams("tx_coalesced", coalesced as u64);
            }
            refused
        }
        Sender::Uring(io) => io.send(tx),
    };
    m.datagrams("tx", (n - refused) as u64);
    if refused > 0 {
        let reason = cohort_engine::metrics::ReasonLabels {
            reason: "send_failed".into(),
        };
        m.dropped_datagrams
            .get_or_create(&reason)
            .inc_by(refused as u64);
    }
}

/// Request id and service from a header we could read, for an error answer.
fn header_for_error(b: &[u8]) -> Header {
    let id = u64::from_le_bytes(b[8..16].try_into().expect("HEADER_LEN checked"));
    let service = u16::from_le_bytes([b[4], b[5]]);
    Header::request(service, id, 0)
}

/// Code and message length of an error payload.
const ERROR_HEAD: usize = 4;

/// Encodes a response or error frame into `buf`, whose length is the most this answer may
/// take (the request datagram's size, at most a datagram): an answer larger than that becomes
/// TRUNCATED (retry over TCP), an error's message is cut to fit. `buf` holds at least a bare
/// error frame. Returns the frame's length and whether the answer was truncated.
fn encode_answer(
    request_id: u64,
    service: u16,
    answer: Answer<'_>,
    buf: &mut [u8],
) -> (usize, bool) {
    let mut scratch = Vec::new();
    let mut truncated = false;
    let (kind, payload): (Kind, &[u8]) = match answer {
        Ok(p) if HEADER_LEN + p.len() <= buf.len() => (Kind::Response, p),
        Ok(p) => {
            truncated = true;
            let e = ErrorPayload::new(
                ErrorCode::Truncated,
                format!(
                    "the {}-byte answer is larger than the {}-byte request datagram: ask over TCP",
                    HEADER_LEN + p.len(),
                    buf.len()
                ),
            );
            encode_fitting(&e, buf.len() - HEADER_LEN, &mut scratch);
            (Kind::Error, &scratch)
        }
        Err(e) => {
            encode_fitting(&e, buf.len() - HEADER_LEN, &mut scratch);
            (Kind::Error, &scratch)
        }
    };
    let h = Header {
        kind,
        service,
        flags: 0,
        request_id,
        payload_len: payload.len() as u32,
        timeout_us: 0,
    };
    let mut hb = [0u8; HEADER_LEN];
    h.encode(&mut hb);
    buf[..HEADER_LEN].copy_from_slice(&hb);
    buf[HEADER_LEN..HEADER_LEN + payload.len()].copy_from_slice(payload);
    (HEADER_LEN + payload.len(), truncated)
}

/// An error payload of at most `room` bytes (at least `ERROR_HEAD`): its message cut at a
/// character boundary where it does not fit.
fn encode_fitting(e: &ErrorPayload, room: usize, out: &mut Vec<u8>) {
    debug_assert!(room >= ERROR_HEAD);
    let mut cut = e.message.len().min(room - ERROR_HEAD);
    while !e.message.is_char_boundary(cut) {
        cut -= 1;
    }
    ErrorPayload {
        code: e.code,
        message: e.message[..cut].to_string(),
    }
    .encode(out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_proto::{Frame, MAX_PAYLOAD};

    fn decode(b: &[u8]) -> (Kind, Option<ErrorPayload>) {
        let f = Frame::decode_datagram(b, MAX_PAYLOAD).expect("a whole frame");
        let e = (f.header.kind == Kind::Error).then(|| ErrorPayload::decode(f.payload).unwrap());
        (f.header.kind, e)
    }

    /// An answer never outgrows the room it is given (the request datagram's size): a larger
    /// result becomes TRUNCATED, an error's message is cut, a result that fits is sent whole.
    #[test]
    fn answers_never_outgrow_their_request() {
        let mut buf = vec![0u8; 9000];
        for room in [HEADER_LEN + ERROR_HEAD, 40, 68, 200, 9000] {
            for len in [0usize, 10, 44, 100, 8220] {
                let body = vec![7u8; len];
                let (n, truncated) = encode_answer(5, 3, Ok(&body), &mut buf[..room]);
                assert!(n <= room, "{n} bytes in a room of {room}");
                let (kind, e) = decode(&buf[..n]);
                let fits = HEADER_LEN + len <= room;
                assert_eq!(truncated, !fits);
                if fits {
                    assert_eq!(kind, Kind::Response);
                } else {
                    assert_eq!(e.unwrap().code, ErrorCode::Truncated);
                }
            }
            let long = ErrorPayload::new(ErrorCode::UnknownService, "é".repeat(300));
            let (n, truncated) = encode_answer(5, 3, Err(long), &mut buf[..room]);
            assert!(n <= room && !truncated);
            assert_eq!(decode(&buf[..n]).1.unwrap().code, ErrorCode::UnknownService);
        }
    }
}
