//! TCP listener: a stream of frames per connection; clients pipeline, answers may come back
//! out of order. Per connection at most `max_inflight` frames are being answered at once:
//! past that the reader stops reading (TCP backpressure), so memory stays bounded.
//!
//! Limits (`crate::limits`): the connection counts against `--max-connections`, its bytes
//! against the byte budget; a started frame must complete within the read timeout (TIMEOUT
//! error frame, close), a connection with nothing to do is closed after the idle timeout
//! (GOAWAY), a client that does not take its answers within the read timeout is closed.
//!
//! Shutdown: the reader stops reading, answers frames it had already buffered with
//! UNAVAILABLE, sends GOAWAY listing the request ids still being worked on, and the writer
//! closes the connection once the last of them is written.

use crate::accept::{accept_loop, Dealer, Refusal};
use crate::context::Context;
use crate::limits::{Budget, Connections, Limits, Slot};
use crate::quota::{Key, Quotas, Who};
use crate::shard::Shard;
use crate::tasks::Tracker;
use bytes::{Buf, BufMut, BytesMut};
use cohort_engine::{ReplyPort, Response, ResponseBody};
use cohort_proto::{
    encode_frame, ErrorCode, ErrorPayload, Frame, FrameError, GoAway, Header, Kind, HEADER_LEN,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Notify, Semaphore};

/// What a connection reserves of its read buffer at a time.
const READ_CHUNK: usize = 16 << 10;

/// A connection's read side: a plain socket is read only once readable, so that the budget
/// check and the read run with no yield between them; a TLS stream is read through rustls.
enum Reader {
    Plain(tokio::net::tcp::OwnedReadHalf),
    Tls(tokio::io::ReadHalf<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl Reader {
    /// Reads into `buf` once the budget lets this connection read (`may_read`: how much,
    /// None = not now). Returns the bytes read (0: the client closed).
    async fn read(
        &mut self,
        buf: &mut BytesMut,
        may_read: impl Fn(&BytesMut) -> Option<usize>,
    ) -> std::io::Result<usize> {
        match self {
            Reader::Plain(rd) => loop {
                rd.readable().await?;
                let Some(room) = may_read(buf) else {
                    return Err(std::io::ErrorKind::WouldBlock.into());
                };
                match rd.try_read_buf(&mut buf.limit(room)) {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    r => return r,
                }
            },
            Reader::Tls(rd) => {
                let Some(room) = may_read(buf) else {
                    return Err(std::io::ErrorKind::WouldBlock.into());
                };
                tokio::io::AsyncReadExt::read_buf(rd, &mut buf.limit(room)).await
            }
        }
    }
}

/// What every TCP connection of a shard shares.
pub(crate) struct TcpEnv {
    pub ctx: Arc<Context>,
    pub shard: Arc<Shard>,
    pub max_inflight: usize,
    pub limits: Limits,
    pub budget: Arc<Budget>,
    pub conns: Arc<Connections>,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

/// The error frame a client refused at accept gets (request id 0: it sent nothing yet).
fn refusal() -> Refusal {
    static FRAME: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    FRAME.get_or_init(|| {
        let mut p = Vec::new();
        ErrorPayload::new(
            ErrorCode::Overloaded,
            "too many connections; try again later",
        )
        .encode(&mut p);
        let mut out = Vec::new();
        let h = Header {
            kind: Kind::Error,
            service: 0,
            flags: 0,
            request_id: 0,
            payload_len: 0,
            timeout_us: 0,
        };
        encode_frame(h, &p, &mut out);
        out
    })
}

pub(crate) async fn serve_tcp(
    listener: TcpListener,
    dealer: Dealer,
    env: Arc<TcpEnv>,
    shutdown: watch::Receiver<bool>,
    tasks: Tracker,
) {
    let mut stop = shutdown.clone();
    let metrics = env.ctx.metrics.clone();
    let conns = env.conns.clone();
    let stop = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    accept_loop(
        listener,
        dealer,
        "tcp",
        conns,
        metrics,
        refusal(),
        stop,
        |stream, slot| {
            env.ctx.metrics.tcp_connections.inc();
            let _ = stream.set_nodelay(true);
            tasks.spawn(open_connection(stream, slot, env.clone(), shutdown.clone()));
        },
    )
    .await
}

/// The reply port of one connection: encodes answers and queues them for its writer.
struct Conn {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    /// Answer bytes queued for the writer and not yet written (shared with the writer).
    queue: Arc<Queued>,
    /// Request ids being worked on (id -> how many, clients may reuse ids, and the bytes of
    /// those requests still charged to the budget), for GOAWAY and the budget.
    inflight: Mutex<HashMap<u64, InFlight>>,
    budget: Arc<Budget>,
    /// Per-client quotas (`crate::quota`): every request in `inflight` holds a place.
    quotas: Arc<Quotas>,
    /// The fairness class of the request being submitted (its key's or the peer's; set by
    /// the reader just before it submits, read by the ingress during the submit).
    class: std::sync::atomic::AtomicU16,
}

/// Answer bytes between `send_frame` and the socket; the writer says when it reaches zero.
#[derive(Default)]
struct Queued {
    bytes: AtomicUsize,
    emptied: Notify,
}

#[derive(Default)]
struct InFlight {
    count: u32,
    bytes: usize,
    /// The quota slots these requests hold (empty while quotas are off).
    slots: Vec<Key>,
}

impl Conn {
    fn send_frame(&self, kind: Kind, service: u16, request_id: u64, payload: &[u8]) {
        let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
        let h = Header {
            kind,
            service,
            flags: 0,
            request_id,
            payload_len: 0,
            timeout_us: 0,
        };
        encode_frame(h, payload, &mut out);
        self.budget.charge(out.len());
        self.queue.bytes.fetch_add(out.len(), Ordering::AcqRel);
        if let Err(gone) = self.tx.send(out) {
            // The writer is gone (the connection died): nobody left to tell.
            self.budget.release(gone.0.len());
            self.queue.bytes.fetch_sub(gone.0.len(), Ordering::AcqRel);
        }
    }

    fn send_error(&self, service: u16, request_id: u64, code: ErrorCode, msg: &str) {
        let mut p = Vec::new();
        ErrorPayload::new(code, msg).encode(&mut p);
        self.send_frame(Kind::Error, service, request_id, &p);
    }
}

impl Conn {
    /// A request of `bytes` (already charged when read), holding quota slot `slot`, goes to
    /// the engines.
    fn admitted(&self, request_id: u64, bytes: usize, slot: Option<Key>) {
        let mut inflight = self.inflight.lock().expect("inflight lock");
        let e = inflight.entry(request_id).or_default();
        e.count += 1;
        e.bytes += bytes;
        e.slots.extend(slot);
    }

    /// A request's answer came: its bytes leave the budget (the answer's enter it).
    fn answered(&self, request_id: u64) {
        let mut inflight = self.inflight.lock().expect("inflight lock");
        let Some(e) = inflight.get_mut(&request_id) else {
            return;
        };
        // Requests sharing an id share its bytes evenly; the last releases what is left.
        let share = e.bytes / e.count as usize;
        e.count -= 1;
        let share = if e.count == 0 { e.bytes } else { share };
        e.bytes -= share;
        let slot = e.slots.pop();
        if e.count == 0 {
            inflight.remove(&request_id);
        }
        drop(inflight);
        self.budget.release(share);
        self.quotas.done(slot);
    }

    fn idle(&self) -> bool {
        self.inflight.lock().expect("inflight lock").is_empty()
    }

    /// Nothing in flight and no answer waiting to be written: such a connection with nothing
    /// buffered may read one chunk even while the byte budget is over, so a client that waits for its answers is
    /// never starved by clients that do not (the overshoot is one read per connection).
    fn settled(&self) -> bool {
        self.queue.bytes.load(Ordering::Acquire) == 0 && self.idle()
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let held: usize = self
            .inflight
            .get_mut()
            .map(|m| m.values().map(|e| e.bytes).sum())
            .unwrap_or(0);
        self.budget.release(held);
    }
}

impl ReplyPort for Conn {
    fn fairness_class(&self) -> u16 {
        self.class.load(Ordering::Relaxed)
    }

    fn deliver(&self, r: Response) {
        let answer = match &r.body {
            ResponseBody::Ok(p) => Ok(&p[..]),
            ResponseBody::Err(e) => Err(e.clone()),
        };
        self.deliver_answer(r.request_id, r.service, answer)
    }

    /// Encodes the frame straight from the answer's ring slot (one copy).
    fn deliver_answer(&self, request_id: u64, service: u16, answer: cohort_engine::Answer<'_>) {
        self.answered(request_id);
        match answer {
            Ok(p) => self.send_frame(Kind::Response, service, request_id, p),
            Err(e) => {
                let mut p = Vec::new();
                e.encode(&mut p);
                self.send_frame(Kind::Error, service, request_id, &p)
            }
        }
    }
}

/// Splits an accepted connection into its read and write sides, after the TLS handshake
/// where TLS is on (a handshake that does not finish within the read timeout is dropped).
async fn open_connection(
    stream: TcpStream,
    slot: Slot,
    env: Arc<TcpEnv>,
    shutdown: watch::Receiver<bool>,
) {
    let peer = stream.peer_addr().ok().map(|a| a.ip());
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    match &env.tls {
        None => {
            let (rd, wr) = stream.into_split();
            serve_connection(Reader::Plain(rd), wr, fd, peer, slot, env, shutdown).await
        }
        Some(tls) => {
            let timeout = env.limits.read_timeout;
            if let Some(s) = crate::tls::handshake(tls, stream, timeout, &env.ctx.metrics).await {
                let (rd, wr) = tokio::io::split(s);
                serve_connection(Reader::Tls(rd), wr, fd, peer, slot, env, shutdown).await
            }
        }
    }
}

async fn serve_connection<W: AsyncWrite + Unpin + Send + 'static>(
    mut rd: Reader,
    wr: W,
    fd: std::os::fd::RawFd,
    peer: Option<std::net::IpAddr>,
    slot: Slot,
    env: Arc<TcpEnv>,
    mut shutdown: watch::Receiver<bool>,
) {
    let _slot = slot;
    let ctx = &env.ctx;
    let limits = env.limits;
    // This connection's own read timeout (spread so that a crowd does not expire at once).
    let read_timeout = crate::limits::spread(limits.read_timeout, fd as u64);
    let budget = &env.budget;
    let (tx, rx) = mpsc::unbounded_channel();
    let permits = Arc::new(Semaphore::new(env.max_inflight));
    let queue = Arc::new(Queued::default());
    let give_up = Arc::new(Notify::new());
    let mut writer = tokio::spawn(write_loop(
        wr,
        rx,
        queue.clone(),
        permits.clone(),
        budget.clone(),
        Stall {
            limit: read_timeout,
            fd,
            metrics: ctx.metrics.clone(),
            give_up: give_up.clone(),
        },
    ));
    let conn = Arc::new(Conn {
        tx,
        queue,
        inflight: Mutex::new(HashMap::new()),
        budget: budget.clone(),
        quotas: ctx.quotas.clone(),
        class: 0.into(),
    });
    // Grown as frames need it (READ_CHUNK at a time), not held at 64 KB per idle connection.
    let mut buf = BytesMut::new();
    let mut closing = false;
    // The server closes the connection (one of its timeouts, or a protocol error): its last
    // frame gets the goodbye grace, not a stall limit of its own.
    let mut goodbye = false;
    let mut writer_ended = false;
    // When the frame now partly in `buf` began, and when the client last sent anything.
    let mut frame_started: Option<Instant> = None;
    let mut last_read = Instant::now();
    let timer = tokio::time::sleep(limits.idle_timeout);
    tokio::pin!(timer);
    'read: loop {
        // Handle every complete frame already buffered.
        let mut consumed = false;
        loop {
            let (header, used) = match Frame::decode_stream(&buf, ctx.max_payload) {
                Ok(Some((f, used))) => (f.header, used),
                Ok(None) => break,
                Err(e) => {
                    protocol_error(&conn, ctx, &buf, &e);
                    goodbye = true;
                    break 'read;
                }
            };
            match permits.clone().acquire_owned().await {
                Ok(p) => p.forget(), // returned by the writer once the answer is written
                Err(_) => break 'read,
            }
            let payload = &buf[HEADER_LEN..used];
            if closing {
                budget.release(used);
                conn.send_error(
                    header.service,
                    header.request_id,
                    ErrorCode::Unavailable,
                    "server is shutting down",
                );
            } else {
                admit(&env, &conn, peer, &header, payload, used);
            }
            buf.advance(used);
            consumed = true;
        }
        if closing {
            break;
        }
        if buf.is_empty() && buf.capacity() > READ_CHUNK {
            buf = BytesMut::new(); // a large frame's room is not kept while the client idles
        }
        if consumed || buf.is_empty() {
            frame_started = (!buf.is_empty()).then(Instant::now);
        }
        // A started frame must complete within the read timeout; a connection with nothing
        // started and nothing in flight is closed after the idle timeout (one waiting for
        // answers looks again then).
        let (deadline, why) = match frame_started {
            Some(t) => (t + read_timeout, "partial_frame"),
            None => (last_read + limits.idle_timeout, "idle"),
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        if timer.deadline() != deadline {
            timer.as_mut().reset(deadline);
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(READ_CHUNK);
        }
        tokio::select! {
            got = async {
                // Read only while under the budget, or while settled (`Conn::settled`) and
                // holding less than the settled share of one frame.
                let settled_room = |buf: &BytesMut| {
                    let share = budget.settled_share();
                    (conn.settled() && buf.len() < share).then(|| share - buf.len())
                };
                if settled_room(&buf).is_none() {
                    tokio::select! {
                        _ = budget.under() => {}
                        _ = conn.queue.emptied.notified() => {}
                    }
                }
                rd.read(&mut buf, |buf| {
                    if budget.over() {
                        settled_room(buf)
                    } else {
                        Some(usize::MAX)
                    }
                })
                .await
            } => {
                match got {
                    Ok(0) if !buf.is_empty() => {
                        // The client closed in the middle of a frame: say so before closing.
                        let e = FrameError::Short { needed: frame_len(&buf), have: buf.len() };
                        protocol_error(&conn, ctx, &buf, &e);
                        goodbye = true;
                        break;
                    }
                    Ok(0) => break,
                    Ok(n) => {
                        budget.charge(n);
                        last_read = Instant::now();
                        if frame_started.is_none() {
                            frame_started = Some(last_read);
                        }
                    }
                    // The budget went over between the wait and the read: wait again.
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => break,
                }
            },
            _ = timer.as_mut() => {
                if why == "idle" && !conn.idle() {
                    last_read = Instant::now(); // waiting for answers is not idle
                    continue;
                }
                ctx.metrics.timed_out_connection(why);
                goodbye = true;
                if why == "partial_frame" {
                    let id = if buf.len() >= HEADER_LEN {
                        u64::from_le_bytes(buf[8..16].try_into().expect("len"))
                    } else {
                        0
                    };
                    let msg = format!(
                        "frame incomplete after {} ms ({} of {} bytes); closing connection",
                        read_timeout.as_millis(),
                        buf.len(),
                        frame_len(&buf)
                    );
                    let service = if buf.len() >= 6 { u16::from_le_bytes([buf[4], buf[5]]) } else { 0 };
                    conn.send_error(service, id, ErrorCode::Timeout, &msg);
                    break;
                }
                // Idle: GOAWAY with nothing pending, then close.
                closing = true;
            },
            // The writer gave up on the client (it took no answer bytes): nothing more is
            // read from it either.
            _ = &mut writer, if !writer_ended => {
                writer_ended = true;
                break;
            },
            _ = shutdown.changed() => {
                // Answer what is already buffered with UNAVAILABLE, then say GOAWAY.
                closing = true;
            }
        }
    }
    budget.release(buf.len());
    if closing || *shutdown.borrow() {
        let pending: Vec<u64> = conn
            .inflight
            .lock()
            .expect("inflight lock")
            .keys()
            .copied()
            .collect();
        let mut p = Vec::new();
        GoAway { pending }.encode(&mut p);
        permits.add_permits(1); // GOAWAY is not an answer; balance the writer's release
        conn.send_frame(Kind::GoAway, 0, 0, &p);
    }
    // The writer ends when every holder of `conn` (this reader and in-flight requests) is gone.
    drop(conn);
    if writer_ended {
        return;
    }
    if goodbye {
        // The goodbye (TIMEOUT or protocol error, GOAWAY) is not given a stall limit of its
        // own: the answers before it may have filled the socket's buffer without reaching
        // the client, and a client that stalled is gone within the read timeout.
        let grace = crate::limits::goodbye_grace(limits.read_timeout);
        if tokio::time::timeout(grace, &mut writer).await.is_ok() {
            return;
        }
        give_up.notify_one();
    }
    let _ = writer.await;
}

/// One whole request frame (already charged to the budget): its key checked, its client's
/// quota taken, then into the engines; or its refusal answered at once.
fn admit(
    env: &TcpEnv,
    conn: &Arc<Conn>,
    peer: Option<std::net::IpAddr>,
    header: &Header,
    payload: &[u8],
    used: usize,
) {
    let ctx = &env.ctx;
    let refused = match ctx.unsigned(header, payload) {
        Err(e) => {
            ctx.metrics
                .answered(header.service, e.code.label(), Duration::ZERO);
            e
        }
        Ok((payload, key)) => match Who::of(key, peer).map_or(Ok(None), |w| ctx.quotas.admit(w)) {
            Ok(slot) => {
                conn.admitted(header.request_id, used, slot);
                let class = ctx.quotas.class_of(Who::of(key, peer));
                conn.class.store(class, Ordering::Relaxed);
                ctx.submit(&env.shard, header, payload, conn.clone());
                return;
            }
            Err(over) => ctx.over_quota(header.service, &over),
        },
    };
    env.budget.release(used);
    conn.send_error(
        header.service,
        header.request_id,
        refused.code,
        &refused.message,
    );
}

/// Bytes a frame starting at `buf[0]` needs (the header's length where it is complete).
fn frame_len(buf: &[u8]) -> usize {
    if buf.len() >= HEADER_LEN {
        HEADER_LEN + u32::from_le_bytes(buf[16..20].try_into().expect("len")) as usize
    } else {
        HEADER_LEN
    }
}

/// A byte stream that is not a valid frame sequence: answer once if we can name the request,
/// then close (the stream cannot be resynchronised).
fn protocol_error(conn: &Conn, ctx: &Context, buf: &[u8], e: &FrameError) {
    ctx.metrics.tcp_protocol_errors.inc();
    let (service, id) = if buf.len() >= HEADER_LEN {
        (
            u16::from_le_bytes([buf[4], buf[5]]),
            u64::from_le_bytes(buf[8..16].try_into().expect("len")),
        )
    } else {
        (0, 0)
    };
    let code = match e {
        FrameError::TooLarge(..) => ErrorCode::TooLarge,
        _ => ErrorCode::BadRequest,
    };
    conn.send_error(service, id, code, &format!("{e}; closing connection"));
}

/// How a connection's writer treats a client that takes no bytes: the limit, the socket to
/// reset, where to count it.
struct Stall {
    limit: Duration,
    fd: std::os::fd::RawFd,
    metrics: Arc<cohort_engine::Metrics>,
    /// Told when the reader closed the connection (a timeout or a protocol error) and its
    /// goodbye was not taken within the grace: the writer stops and the connection is reset.
    give_up: Arc<Notify>,
}

/// Most answer frames written in one vectored write.
const WRITE_BATCH: usize = 64;

/// Writes answers as they come, a run of queued frames in one vectored write (no copy into
/// a buffer of the connection's own: an idle connection keeps no write buffer). A client that
/// does not take a write within the stall limit is closed: its answers would otherwise hold the byte
/// budget for ever.
async fn write_loop<W: AsyncWrite + Unpin>(
    mut w: W,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    queue: Arc<Queued>,
    permits: Arc<Semaphore>,
    budget: Arc<Budget>,
    stall: Stall,
) {
    let Stall {
        limit,
        fd,
        metrics,
        give_up,
    } = stall;
    let mut run: Vec<Vec<u8>> = Vec::with_capacity(WRITE_BATCH);
    // Closed without an orderly end: the client took nothing for a stall limit, or did not
    // take its goodbye within the grace (`limits::goodbye_grace`).
    let mut cut = false;
    loop {
        let next = tokio::select! {
            biased;
            f = rx.recv() => f,
            _ = give_up.notified() => {
                cut = true;
                None
            }
        };
        let Some(frame) = next else { break };
        run.push(frame);
        while run.len() < WRITE_BATCH {
            let Ok(frame) = rx.try_recv() else { break };
            run.push(frame);
        }
        let (n, bytes) = (run.len(), run.iter().map(Vec::len).sum::<usize>());
        let ok = tokio::select! {
            biased;
            r = tokio::time::timeout(limit, write_run(&mut w, &run)) => match r {
                Ok(r) => r.is_ok(),
                Err(_) => {
                    metrics.timed_out_connection("write_stalled");
                    cut = true;
                    false
                }
            },
            _ = give_up.notified() => {
                cut = true;
                false
            }
        };
        run.clear();
        budget.release(bytes);
        if queue.bytes.fetch_sub(bytes, Ordering::AcqRel) == bytes {
            queue.emptied.notify_one();
        }
        if !ok {
            break;
        }
        permits.add_permits(n);
    }
    // Wake a reader waiting for permits that will never come back, and let go of the
    // answers nobody will write.
    permits.close();
    rx.close();
    while let Ok(frame) = rx.try_recv() {
        budget.release(frame.len());
        queue.bytes.fetch_sub(frame.len(), Ordering::AcqRel);
    }
    if cut {
        // No orderly end for a client that takes nothing: waiting to flush would take
        // another stall, and the FIN would queue behind bytes it never takes.
        crate::limits::reset_on_close(fd);
        return;
    }
    let _ = tokio::time::timeout(limit, w.shutdown()).await;
}

/// Writes every byte of `frames`, in order, in as few vectored writes as the socket takes.
async fn write_run<W: AsyncWrite + Unpin>(w: &mut W, frames: &[Vec<u8>]) -> std::io::Result<()> {
    let mut slices: Vec<std::io::IoSlice<'_>> =
        frames.iter().map(|f| std::io::IoSlice::new(f)).collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = w.write_vectored(rest).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        std::io::IoSlice::advance_slices(&mut rest, n);
    }
    w.flush().await
}
