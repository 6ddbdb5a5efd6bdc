//! One UDP io thread: read a batch, forward each frame, write back the answers engines
//! handed us, park in poll() on the socket and the doorbell when there is nothing to do.

use super::batch::MsgBatch;
use super::table::{Client, ClientTable};
use crate::doorbell::Doorbell;
use crate::forward::Context;
use cohort_engine::{Reply, ReplyPort, Response, ResponseBody};
use cohort_proto::{ErrorPayload, Frame, Header, Kind, HEADER_LEN};
use crossbeam_channel::{Receiver, Sender, TrySendError};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const BATCH: usize = 64;

/// Engines answer into this; the io thread drains it. Its capacity equals the client table's,
/// and every answer frees one table entry, so it can never be full.
struct UdpPort {
    tx: Sender<(u32, Response)>,
    bell: Doorbell,
}

impl ReplyPort for UdpPort {
    fn deliver(&self, token: u32, r: Response) {
        match self.tx.try_send((token, r)) {
            Ok(()) => self.bell.ring(),
            Err(TrySendError::Full(_)) => unreachable!("more answers than client-table entries"),
            Err(TrySendError::Disconnected(_)) => {} // io thread gone: shutdown timed out
        }
    }
}

pub(crate) struct UdpThreadConfig {
    pub table_capacity: usize,
    pub core: Option<usize>,
    pub drain_timeout: Duration,
}

pub(crate) fn spawn_udp(
    socket: std::net::UdpSocket,
    ctx: Arc<Context>,
    stop: Arc<AtomicBool>,
    cfg: UdpThreadConfig,
    index: usize,
) -> std::io::Result<JoinHandle<()>> {
    socket.set_nonblocking(true)?;
    let (tx, rx) = crossbeam_channel::bounded(cfg.table_capacity);
    let port = Arc::new(UdpPort {
        tx,
        bell: Doorbell::new()?,
    });
    std::thread::Builder::new()
        .name(format!("udp-io-{index}"))
        .spawn(move || {
            if let Some(c) = cfg.core {
                core_affinity::set_for_current(core_affinity::CoreId { id: c });
            }
            let mut io = IoThread {
                fd: socket.as_raw_fd(),
                table: ClientTable::new(cfg.table_capacity),
                rx_batch: MsgBatch::new(BATCH, HEADER_LEN + ctx.max_payload),
                tx_batch: MsgBatch::new(BATCH, HEADER_LEN + ctx.max_payload),
                answers: rx,
                port,
                ctx,
            };
            io.run(&stop, cfg.drain_timeout);
            drop(socket);
        })
}

struct IoThread {
    fd: RawFd,
    table: ClientTable,
    rx_batch: MsgBatch,
    tx_batch: MsgBatch,
    answers: Receiver<(u32, Response)>,
    port: Arc<UdpPort>,
    ctx: Arc<Context>,
}

impl IoThread {
    fn run(&mut self, stop: &AtomicBool, drain_timeout: Duration) {
        while !stop.load(Ordering::Acquire) {
            let got = self.read_batch();
            let answered = self.collect_answers();
            // While the socket still has a full batch waiting, keep reading and let answers
            // accumulate so each sendmmsg carries many; once it is drained, send at once.
            if got < BATCH {
                self.flush();
            }
            if got == 0 && answered == 0 {
                self.park(Some(self.fd), 50);
            }
        }
        // Shutdown: read nothing more, answer everything in flight (bounded wait).
        let until = Instant::now() + drain_timeout;
        while self.table.in_flight() > 0 && Instant::now() < until {
            let answered = self.collect_answers();
            self.flush();
            if answered == 0 {
                self.park(None, 10);
            }
        }
        if self.table.in_flight() > 0 {
            tracing::warn!(
                left = self.table.in_flight(),
                "udp io thread gave up waiting for answers"
            );
        }
    }

    /// Sleeps until the socket is readable, an answer arrives, or `ms` pass.
    fn park(&self, sock: Option<RawFd>, ms: i32) {
        self.port.bell.prepare_sleep();
        if self.answers.is_empty() {
            let mut fds = [
                libc::pollfd {
                    fd: self.port.bell.raw_fd(),
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
        self.port.bell.woke();
    }

    fn read_batch(&mut self) -> usize {
        let n = match self.rx_batch.recv(self.fd) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "recvmmsg failed");
                return 0;
            }
        };
        if n > 0 {
            self.ctx.metrics.datagrams("rx", n as u64);
        }
        for i in 0..n {
            let (bytes, addr, addr_len) = self.rx_batch.received(i);
            let client = Client {
                addr: *addr,
                addr_len,
            };
            match Frame::decode_datagram(bytes, self.ctx.max_payload) {
                Ok(f) => match self.table.insert(client) {
                    Some(token) => {
                        let reply = Reply {
                            port: self.port.clone(),
                            token,
                        };
                        self.ctx.forward(&f.header, f.payload, reply);
                    }
                    None => {
                        self.ctx
                            .metrics
                            .answered(f.header.service, "overloaded", Duration::ZERO);
                        let e = ErrorPayload::new(
                            cohort_proto::ErrorCode::Overloaded,
                            "too many requests in flight on this io thread",
                        );
                        self.push_error(&client, &f.header, &e);
                    }
                },
                Err(e) if e.is_foreign() || bytes.len() < HEADER_LEN => {
                    self.ctx.metrics.dropped("not_cohort");
                }
                Err(e) => {
                    // A Cohort header we can read but a frame we cannot accept: answer it.
                    let h = header_for_error(bytes);
                    let code = match e {
                        cohort_proto::FrameError::TooLarge(..) => cohort_proto::ErrorCode::TooLarge,
                        _ => cohort_proto::ErrorCode::BadRequest,
                    };
                    self.push_error(&client, &h, &ErrorPayload::new(code, e.to_string()));
                }
            }
        }
        n
    }

    fn push_error(&mut self, c: &Client, h: &Header, e: &ErrorPayload) {
        if self.tx_batch.is_full() {
            self.flush();
        }
        let body = ResponseBody::Err(e.clone());
        self.tx_batch.push(&c.addr, c.addr_len, |buf| {
            encode_answer(h.request_id, h.service, &body, buf)
        });
    }

    /// Moves every answer the engines have handed back so far into the send batch (sending
    /// only when the batch fills). Returns how many there were.
    fn collect_answers(&mut self) -> usize {
        let mut total = 0;
        while let Ok((token, r)) = self.answers.try_recv() {
            let c = self.table.remove(token);
            if self.tx_batch.is_full() {
                self.flush();
            }
            self.tx_batch.push(&c.addr, c.addr_len, |buf| {
                encode_answer(r.request_id, r.service, &r.body, buf)
            });
            total += 1;
        }
        total
    }

    fn flush(&mut self) {
        let n = self.tx_batch.len;
        if n == 0 {
            return;
        }
        let refused = self.tx_batch.send_all(self.fd);
        self.ctx.metrics.datagrams("tx", (n - refused) as u64);
        if refused > 0 {
            let reason = cohort_engine::metrics::ReasonLabels {
                reason: "send_failed".into(),
            };
            self.ctx
                .metrics
                .dropped_datagrams
                .get_or_create(&reason)
                .inc_by(refused as u64);
        }
    }
}

/// Request id and service from a header we could read, for an error answer.
fn header_for_error(b: &[u8]) -> Header {
    let id = u64::from_le_bytes(b[8..16].try_into().expect("HEADER_LEN checked"));
    let service = u16::from_le_bytes([b[4], b[5]]);
    Header::request(service, id, 0)
}

/// Encodes a response or error frame into `buf`; answers too large for a datagram become
/// INTERNAL errors.
fn encode_answer(request_id: u64, service: u16, body: &ResponseBody, buf: &mut [u8]) -> usize {
    let mut scratch = Vec::new();
    let (kind, payload): (Kind, &[u8]) = match body {
        ResponseBody::Ok(p) if HEADER_LEN + p.len() <= buf.len() => (Kind::Response, p),
        ResponseBody::Ok(_) => {
            ErrorPayload::new(
                cohort_proto::ErrorCode::Internal,
                "answer too large for UDP",
            )
            .encode(&mut scratch);
            (Kind::Error, &scratch)
        }
        ResponseBody::Err(e) => {
            e.encode(&mut scratch);
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
    HEADER_LEN + payload.len()
}
