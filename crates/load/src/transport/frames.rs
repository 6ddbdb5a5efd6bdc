//! UDP and TCP: binary v1 frames. Per connection, open loop uses a sender thread (on the
//! schedule) and a receiver thread; closed loop uses one thread that sends the next request
//! as each answer arrives.

use crate::config::{LoadConfig, Mode, Target};
use crate::recorder::{schedule_for, seq_of, Answer, Recorder, Shared};
use anyhow::{Context, Result};
use cohort_proto::{encode_frame, encode_signed, Frame, GoAway, Header, Kind, MAX_PAYLOAD};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(50);

enum Tx {
    Udp(UdpSocket),
    Tcp(std::io::BufWriter<Box<dyn Write + Send>>),
}

enum Rx {
    Udp(UdpSocket, Vec<u8>),
    Tcp(Box<dyn Read + Send>, Vec<u8>, usize),
}

/// One TLS connection shared by a connection's sending and receiving sides (closed loop: the
/// same thread, so the lock never waits).
#[derive(Clone)]
struct SharedTls(Arc<Mutex<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>>);

impl Read for SharedTls {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.lock().expect("tls lock").read(buf)
    }
}

impl Write for SharedTls {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("tls lock").write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.lock().expect("tls lock").flush()
    }
}

/// What the receive side got.
enum Got {
    /// A frame, and how long it waited in the socket when the kernel stamped it.
    Frame(Header, Vec<u8>, Option<u64>),
    /// Nothing within one tick.
    Idle,
    /// The connection is closed.
    Closed,
}

fn connect(target: Target, tls: Option<&Arc<rustls::ClientConfig>>) -> Result<(Tx, Rx)> {
    match target {
        Target::Udp(addr) => {
            let bind: SocketAddr = if addr.is_ipv4() {
                "0.0.0.0:0"
            } else {
                "[::]:0"
            }
            .parse()?;
            let s = socket2::Socket::new(
                socket2::Domain::for_address(addr),
                socket2::Type::DGRAM,
                Some(socket2::Protocol::UDP),
            )?;
            let _ = s.set_recv_buffer_size(8 << 20);
            let _ = s.set_send_buffer_size(8 << 20);
            s.bind(&bind.into())?;
            let s: UdpSocket = s.into();
            s.connect(addr)
                .with_context(|| format!("udp connect {addr}"))?;
            s.set_read_timeout(Some(TICK))?;
            // Answers carry the kernel's receive time: the report's read lag (a kernel that
            // refuses leaves it out).
            super::rx_stamp::enable(&s);
            Ok((Tx::Udp(s.try_clone()?), Rx::Udp(s, vec![0u8; 65_536])))
        }
        Target::Tcp(addr) => {
            let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                .with_context(|| format!("tcp connect {addr}"))?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(TICK))?;
            let (w, r): (Box<dyn Write + Send>, Box<dyn Read + Send>) = match tls {
                None => (Box::new(s.try_clone()?), Box::new(s)),
                Some(cfg) => {
                    let name = rustls::pki_types::ServerName::from(addr.ip());
                    let mut conn = rustls::ClientConnection::new(cfg.clone(), name)
                        .with_context(|| format!("tls to {addr}"))?;
                    // The handshake first, with a patient socket (reads tick every 50 ms).
                    let mut s = s;
                    s.set_read_timeout(Some(Duration::from_secs(5)))?;
                    while conn.is_handshaking() {
                        conn.complete_io(&mut s)
                            .with_context(|| format!("tls handshake with {addr}"))?;
                    }
                    s.set_read_timeout(Some(TICK))?;
                    let t = SharedTls(Arc::new(Mutex::new(rustls::StreamOwned::new(conn, s))));
                    (Box::new(t.clone()), Box::new(t))
                }
            };
            let w = std::io::BufWriter::with_capacity(64 * 1024, w);
            Ok((Tx::Tcp(w), Rx::Tcp(r, vec![0u8; 256 * 1024], 0)))
        }
        Target::Http(_) | Target::Grpc(_) => {
            unreachable!("http and grpc have their own transports")
        }
    }
}

impl Tx {
    fn send(&mut self, frame: &[u8]) -> std::io::Result<()> {
        match self {
            Tx::Udp(s) => loop {
                match s.send(frame) {
                    Ok(_) => return Ok(()),
                    // The socket buffer is full: the kernel will take it a moment later.
                    Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::yield_now(),
                    // An ICMP error from an earlier datagram surfaces here: not this one's.
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Ok(()),
                    Err(e) => return Err(e),
                }
            },
            Tx::Tcp(w) => w.write_all(frame),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Tx::Udp(_) => Ok(()),
            Tx::Tcp(w) => w.flush(),
        }
    }
}

impl Rx {
    fn recv(&mut self) -> Got {
        match self {
            Rx::Udp(s, buf) => match super::rx_stamp::recv(s, buf) {
                Ok((n, stamp)) => match Frame::decode_datagram(&buf[..n], MAX_PAYLOAD) {
                    Ok(f) => Got::Frame(
                        f.header,
                        f.payload.to_vec(),
                        stamp.map(super::rx_stamp::waited_ns),
                    ),
                    Err(_) => Got::Idle, // not ours; ignore
                },
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    Got::Idle
                }
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => Got::Idle,
                Err(_) => Got::Closed,
            },
            Rx::Tcp(s, buf, filled) => loop {
                match Frame::decode_stream(&buf[..*filled], MAX_PAYLOAD) {
                    Ok(Some((f, used))) => {
                        let out = Got::Frame(f.header, f.payload.to_vec(), None);
                        buf.copy_within(used..*filled, 0);
                        *filled -= used;
                        return out;
                    }
                    Ok(None) => {}
                    Err(_) => return Got::Closed, // the server broke framing: give up
                }
                if *filled == buf.len() {
                    buf.resize(buf.len() * 2, 0);
                }
                match s.read(&mut buf[*filled..]) {
                    Ok(0) => return Got::Closed,
                    Ok(n) => *filled += n,
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                        return Got::Idle
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return Got::Closed,
                }
            },
        }
    }
}

fn frame_for(sh: &Shared, seq: u64, out: &mut Vec<u8>, payload: &mut Vec<u8>) {
    out.clear();
    payload.clear();
    sh.workload.payload(seq, payload);
    let mut h = Header::request(sh.workload.service(), seq, payload.len());
    h.timeout_us = sh.request_timeout_us;
    match &sh.key {
        Some(k) => {
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let nonce = sh.nonce_base.wrapping_add(seq);
            encode_signed(h, payload, &k.id, k.secret.as_bytes(), now_ms, nonce, out);
        }
        None => encode_frame(h, payload, out),
    }
}

/// Handles one received frame. Returns false when the connection must stop sending.
fn on_frame(sh: &Shared, rec: &mut Recorder, c: usize, h: Header, p: &[u8]) -> bool {
    if h.kind == Kind::GoAway {
        let pending = GoAway::decode(p).map(|g| g.pending).unwrap_or_default();
        sh.record_goaway(c, pending);
        return false;
    }
    rec.on_answer(sh, h.request_id, Answer::Frame(h.kind, p));
    true
}

pub(crate) fn run(cfg: &LoadConfig, sh: &Arc<Shared>) -> Result<Recorder> {
    anyhow::ensure!(
        cfg.tls.is_none() || matches!(cfg.mode, Mode::Closed { .. }),
        "TLS over TCP frames is driven in closed loop only (give --concurrency)"
    );
    let mut conns = Vec::new();
    for _ in 0..cfg.connections {
        conns.push(connect(cfg.target, cfg.tls.as_ref())?);
    }
    let mut handles = Vec::new();
    let mut senders = Vec::new();
    for (c, (tx, rx)) in conns.into_iter().enumerate() {
        let sh = sh.clone();
        match cfg.mode {
            Mode::Open { .. } if matches!(rx, Rx::Udp(..)) => {
                let sched = schedule_for(cfg, c).expect("open loop");
                let Rx::Udp(sock, _) = rx else { unreachable!() };
                drop(tx);
                handles.push(std::thread::spawn(move || open_udp(&sh, c, sock, sched)));
            }
            Mode::Open { .. } => {
                let sched = schedule_for(cfg, c).expect("open loop");
                let sh2 = sh.clone();
                senders.push(std::thread::spawn(move || open_sender(&sh2, c, tx, sched)));
                handles.push(std::thread::spawn(move || receiver(&sh, c, rx)));
            }
            Mode::Closed { concurrency } => {
                let n =
                    concurrency / cfg.connections + usize::from(c < concurrency % cfg.connections);
                handles.push(std::thread::spawn(move || closed_loop(&sh, c, tx, rx, n)));
            }
        }
    }
    let mut total = Recorder::new();
    for s in senders {
        total.merge(s.join().expect("sender thread"));
    }
    // Open loop: wait until the schedule has ended, then until every request is answered or
    // the answer timeout passes.
    sh.wait_until(sh.end_ns);
    let until = Instant::now() + cfg.answer_timeout;
    while sh.settled.load(Ordering::Acquire) < sh.sent.load(Ordering::Acquire)
        && Instant::now() < until
        && !all_goaway(sh)
    {
        std::thread::sleep(Duration::from_millis(2));
    }
    if sh.goaway_seen.load(Ordering::Acquire) {
        // Give the server its promised answers (bounded by the answer timeout).
        while sh.settled.load(Ordering::Acquire) < sh.sent.load(Ordering::Acquire)
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    sh.stop.store(true, Ordering::Release);
    for h in handles {
        total.merge(h.join().expect("receiver thread"));
    }
    Ok(total)
}

fn all_goaway(sh: &Shared) -> bool {
    sh.goaway_seen.load(Ordering::Acquire) && (0..sh.connections).all(|c| sh.conn_has_goaway(c))
}

fn open_sender(
    sh: &Shared,
    c: usize,
    mut tx: Tx,
    mut sched: crate::schedule::Schedule,
) -> Recorder {
    let mut rec = Recorder::new();
    let (mut frame, mut payload) = (Vec::new(), Vec::new());
    for k in 0u64.. {
        let intended = sched.next();
        if intended >= sh.end_ns || sh.conn_has_goaway(c) {
            break;
        }
        if sh.now_ns() < intended {
            if tx.flush().is_err() {
                break;
            }
            sh.wait_until(intended);
        }
        let seq = seq_of(c, k, sh.connections);
        frame_for(sh, seq, &mut frame, &mut payload);
        rec.on_send(sh, seq, intended, sh.now_ns());
        if tx.send(&frame).is_err() {
            rec.give_up(sh, seq);
            break;
        }
    }
    let _ = tx.flush();
    rec
}

/// UDP open loop on one thread: between scheduled sends it reads every answer that has
/// arrived (non-blocking), and sleeps in poll() only until the next send is due. Half the
/// threads of a sender/receiver pair and no wake-up per answer.
fn open_udp(
    sh: &Shared,
    c: usize,
    sock: UdpSocket,
    mut sched: crate::schedule::Schedule,
) -> Recorder {
    let mut rec = Recorder::new();
    let (mut frame, mut payload) = (Vec::new(), Vec::new());
    let mut buf = vec![0u8; 65_536];
    if sock.set_nonblocking(true).is_err() {
        return rec;
    }
    let mut next = sched.next();
    let mut k = 0u64;
    let mut sending = true;
    while !sh.stop.load(Ordering::Acquire) {
        // Everything that has arrived.
        loop {
            match super::rx_stamp::recv(&sock, &mut buf) {
                Ok((n, stamp)) => {
                    if let Ok(f) = Frame::decode_datagram(&buf[..n], MAX_PAYLOAD) {
                        if let Some(stamp) = stamp {
                            let waited = super::rx_stamp::waited_ns(stamp);
                            rec.on_read(sh, waited);
                        }
                        if !on_frame(sh, &mut rec, c, f.header, f.payload) {
                            sending = false;
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
                Err(_) => break,
            }
        }
        let now = sh.now_ns();
        if sending && next >= sh.end_ns {
            sending = false;
        }
        if sending && next <= now {
            // Everything due now (a burst when we fell behind).
            while next <= now && next < sh.end_ns {
                let seq = seq_of(c, k, sh.connections);
                k += 1;
                frame_for(sh, seq, &mut frame, &mut payload);
                rec.on_send(sh, seq, next, sh.now_ns());
                loop {
                    match sock.send(&frame) {
                        Ok(_) => break,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::yield_now(),
                        Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
                        Err(_) => {
                            rec.give_up(sh, seq);
                            break;
                        }
                    }
                }
                next = sched.next();
            }
            continue;
        }
        // Wait for an answer or the next send, whichever comes first.
        let wait_ns = if sending {
            next.saturating_sub(now)
        } else {
            TICK.as_nanos() as u64
        };
        if wait_ns > 30_000 {
            let mut p = libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&sock),
                events: libc::POLLIN,
                revents: 0,
            };
            let ns = (wait_ns - 20_000).min(TICK.as_nanos() as u64);
            let ts = libc::timespec {
                tv_sec: (ns / 1_000_000_000) as _,
                tv_nsec: (ns % 1_000_000_000) as _,
            };
            // SAFETY: one valid pollfd and a valid timespec; no signal mask change.
            unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
        } else {
            std::hint::spin_loop();
        }
    }
    rec
}

fn receiver(sh: &Shared, c: usize, mut rx: Rx) -> Recorder {
    let mut rec = Recorder::new();
    while !sh.stop.load(Ordering::Acquire) {
        match rx.recv() {
            Got::Frame(h, p, waited) => {
                if let Some(w) = waited {
                    rec.on_read(sh, w);
                }
                on_frame(sh, &mut rec, c, h, &p);
            }
            Got::Idle => {}
            Got::Closed => break,
        }
    }
    rec
}

/// One closed-loop connection: keeps `depth` requests outstanding.
struct Closed<'a> {
    sh: &'a Shared,
    c: usize,
    tx: Tx,
    frame: Vec<u8>,
    payload: Vec<u8>,
    next_k: u64,
    outstanding: HashMap<u64, Instant>,
}

impl Closed<'_> {
    /// Sends the next request unless the run is over or the connection failed.
    fn send_one(&mut self, rec: &mut Recorder) -> bool {
        let now = self.sh.now_ns();
        if now >= self.sh.end_ns {
            return false;
        }
        let seq = seq_of(self.c, self.next_k, self.sh.connections);
        self.next_k += 1;
        frame_for(self.sh, seq, &mut self.frame, &mut self.payload);
        rec.on_send(self.sh, seq, now, now);
        self.outstanding.insert(seq, Instant::now());
        self.tx.send(&self.frame).is_ok()
    }
}

fn closed_loop(sh: &Shared, c: usize, tx: Tx, mut rx: Rx, depth: usize) -> Recorder {
    let mut rec = Recorder::new();
    let mut conn = Closed {
        sh,
        c,
        tx,
        frame: Vec::new(),
        payload: Vec::new(),
        next_k: 0,
        outstanding: HashMap::with_capacity(depth * 2),
    };
    sh.wait_until(0);
    let mut sending = true;
    for _ in 0..depth {
        sending = conn.send_one(&mut rec);
        if !sending {
            break;
        }
    }
    let _ = conn.tx.flush();
    let drain_end = sh.end_ns + sh.answer_timeout.as_nanos() as u64;
    while (!conn.outstanding.is_empty() || sending) && sh.now_ns() < drain_end {
        match rx.recv() {
            Got::Frame(h, p, waited) => {
                if let Some(w) = waited {
                    rec.on_read(sh, w);
                }
                conn.outstanding.remove(&h.request_id);
                if !on_frame(sh, &mut rec, c, h, &p) {
                    sending = false;
                } else if sending {
                    sending = conn.send_one(&mut rec);
                    let _ = conn.tx.flush();
                }
            }
            Got::Idle => {
                // Answers lost (UDP) or stuck: give up after the timeout, keep the depth.
                let expired: Vec<u64> = conn
                    .outstanding
                    .iter()
                    .filter(|(_, t)| t.elapsed() > sh.answer_timeout)
                    .map(|(s, _)| *s)
                    .collect();
                for seq in expired {
                    conn.outstanding.remove(&seq);
                    rec.give_up(sh, seq);
                    if sending {
                        sending = conn.send_one(&mut rec);
                    }
                }
                let _ = conn.tx.flush();
            }
            Got::Closed => break,
        }
        if sh.now_ns() >= sh.end_ns {
            sending = false;
        }
    }
    rec
}
