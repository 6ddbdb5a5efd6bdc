//! TCP listener: a stream of frames per connection; clients pipeline, answers may come back
//! out of order. Per connection at most `max_inflight` frames are being answered at once:
//! past that the reader stops reading (TCP backpressure), so memory stays bounded.
//!
//! Shutdown: the reader stops reading, answers frames it had already buffered with
//! UNAVAILABLE, sends GOAWAY listing the request ids still being worked on, and the writer
//! closes the connection once the last of them is written.

use crate::context::Context;
use crate::shard::Shard;
use crate::tasks::Tracker;
use bytes::{Buf, BytesMut};
use cohort_engine::{ReplyPort, Response, ResponseBody};
use cohort_proto::{
    encode_frame, ErrorCode, ErrorPayload, Frame, FrameError, GoAway, Header, Kind, HEADER_LEN,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};

pub(crate) async fn serve_tcp(
    listener: TcpListener,
    ctx: Arc<Context>,
    shard: Arc<Shard>,
    max_inflight: usize,
    mut shutdown: watch::Receiver<bool>,
    tasks: Tracker,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    ctx.metrics.tcp_connections.inc();
                    let _ = stream.set_nodelay(true);
                    let (ctx, shard, sd) = (ctx.clone(), shard.clone(), shutdown.clone());
                    tasks.spawn(serve_connection(stream, ctx, shard, max_inflight, sd));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "tcp accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            },
            _ = shutdown.changed() => return,
        }
    }
}

/// The reply port of one connection: encodes answers and queues them for its writer.
struct Conn {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    /// Request ids being worked on (id -> count, clients may reuse ids), for GOAWAY.
    inflight: Mutex<HashMap<u64, u32>>,
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
        let _ = self.tx.send(out); // writer gone = connection dead; nothing left to tell
    }

    fn send_error(&self, service: u16, request_id: u64, code: ErrorCode, msg: &str) {
        let mut p = Vec::new();
        ErrorPayload::new(code, msg).encode(&mut p);
        self.send_frame(Kind::Error, service, request_id, &p);
    }
}

impl Conn {
    fn answered(&self, request_id: u64) {
        let mut inflight = self.inflight.lock().expect("inflight lock");
        if let Some(n) = inflight.get_mut(&request_id) {
            *n -= 1;
            if *n == 0 {
                inflight.remove(&request_id);
            }
        }
    }
}

impl ReplyPort for Conn {
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

async fn serve_connection(
    stream: TcpStream,
    ctx: Arc<Context>,
    shard: Arc<Shard>,
    max_inflight: usize,
    mut shutdown: watch::Receiver<bool>,
) {
    let (mut rd, wr) = stream.into_split();
    let (tx, rx) = mpsc::unbounded_channel();
    let permits = Arc::new(Semaphore::new(max_inflight));
    let writer = tokio::spawn(write_loop(wr, rx, permits.clone()));
    let conn = Arc::new(Conn {
        tx,
        inflight: Mutex::new(HashMap::new()),
    });
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut closing = false;
    'read: loop {
        // Handle every complete frame already buffered.
        loop {
            let (header, used) = match Frame::decode_stream(&buf, ctx.max_payload) {
                Ok(Some((f, used))) => (f.header, used),
                Ok(None) => break,
                Err(e) => {
                    protocol_error(&conn, &ctx, &buf, &e);
                    break 'read;
                }
            };
            match permits.clone().acquire_owned().await {
                Ok(p) => p.forget(), // returned by the writer once the answer is written
                Err(_) => break 'read,
            }
            let payload = &buf[HEADER_LEN..used];
            if closing {
                conn.send_error(
                    header.service,
                    header.request_id,
                    ErrorCode::Unavailable,
                    "server is shutting down",
                );
            } else {
                *conn
                    .inflight
                    .lock()
                    .expect("inflight lock")
                    .entry(header.request_id)
                    .or_insert(0) += 1;
                ctx.submit(&shard, &header, payload, conn.clone());
            }
            buf.advance(used);
        }
        if closing {
            break;
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(64 * 1024);
        }
        tokio::select! {
            n = rd.read_buf(&mut buf) => match n {
                Ok(0) if !buf.is_empty() => {
                    // The client closed in the middle of a frame: say so before closing.
                    let e = FrameError::Short { needed: frame_len(&buf), have: buf.len() };
                    protocol_error(&conn, &ctx, &buf, &e);
                    break;
                }
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            },
            _ = shutdown.changed() => {
                // Answer what is already buffered with UNAVAILABLE, then say GOAWAY.
                closing = true;
            }
        }
    }
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
    let _ = writer.await;
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

async fn write_loop(
    wr: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    permits: Arc<Semaphore>,
) {
    let mut w = BufWriter::with_capacity(64 * 1024, wr);
    while let Some(frame) = rx.recv().await {
        let mut n = 1;
        if w.write_all(&frame).await.is_err() {
            break;
        }
        while let Ok(frame) = rx.try_recv() {
            n += 1;
            if w.write_all(&frame).await.is_err() {
                permits.close();
                return;
            }
        }
        if w.flush().await.is_err() {
            break;
        }
        permits.add_permits(n);
    }
    // Wake a reader waiting for permits that will never come back.
    permits.close();
    let _ = w.shutdown().await;
}
