//! The io thread's socket through io_uring (`--net-io uring`): one multishot receive fills
//! buffers the kernel takes from a provided-buffer ring, the answers of one flush go out as
//! one batch of sendmsg entries, and the thread sleeps in the same `io_uring_enter` that
//! would submit them, woken by a datagram or by its doorbell's eventfd (a multishot poll).
//!
//! What it saves against recvmmsg/sendmmsg + poll(): the receive is armed once, not issued per
//! batch, so a busy or polling io thread learns of datagrams by reading the completion ring
//! (no syscall), and an idle one pays one `io_uring_enter` per wake-up instead of poll() then
//! recvmmsg. Completions are posted when the thread enters the kernel (COOP_TASKRUN): the
//! kernel raises a flag instead of interrupting it, and `poll` enters only when that flag or
//! unsent entries say so.
//!
//! Where the kernel or its sandbox refuses io_uring, `probe` says why and the server keeps the
//! recvmmsg path (one log line).

use crate::batch::MsgBatch;
use io_uring::types::{BufRingEntry, CancelBuilder, Fd, RecvMsgOut, SubmitArgs, Timespec};
use io_uring::{cqueue, opcode, IoUring, Probe};
use std::os::fd::RawFd;
use std::time::Duration;

/// Completion tags.
const RECV: u64 = 1;
const BELL: u64 = 2;
const SEND: u64 = 3;
const CANCEL: u64 = 4;
/// The provided-buffer group of the receive.
const GROUP: u16 = 0;
/// Receive buffers the kernel fills (a power of two, at most 32768). Pages of a buffer are
/// only backed once a datagram that long lands in it.
const RX_BUFFERS: u16 = 256;
/// Submission entries: a full send batch, the receive, the doorbell poll and a cancel.
const SQ_ENTRIES: u32 = 256;
/// Source address room ahead of each payload (IPv4 or IPv6).
const NAME_LEN: usize = std::mem::size_of::<libc::sockaddr_in6>();
/// The kernel's `io_uring_recvmsg_out` ahead of each received datagram (four u32).
const RECVMSG_OUT: usize = 16;
/// How long a flush waits for the kernel to take its sends before cancelling them.
const SEND_WAIT: Duration = Duration::from_secs(1);

/// Whether this kernel and sandbox give io_uring with everything the io thread uses:
/// Ok, or the reason it is refused (the caller logs it once and takes the recvmmsg path).
pub fn probe() -> Result<(), String> {
    let ring = new_ring().map_err(|e| format!("io_uring_setup: {e}"))?;
    let mut p = Probe::new();
    ring.submitter()
        .register_probe(&mut p)
        .map_err(|e| format!("probe: {e}"))?;
    for (code, name) in [
        (opcode::RecvMsgMulti::CODE, "recvmsg"),
        (opcode::SendMsg::CODE, "sendmsg"),
        (opcode::PollAdd::CODE, "poll"),
        (opcode::AsyncCancel::CODE, "cancel"),
    ] {
        if !p.is_supported(code) {
            return Err(format!("{name} not supported"));
        }
    }
    // Multishot receive into a buffer ring: 6.0 and later. Registering the ring is the check.
    let pool = BufPool::new(&ring, 64).map_err(|e| format!("provided buffers: {e}"))?;
    drop(pool);
    Ok(())
}

fn new_ring() -> std::io::Result<IoUring> {
    IoUring::builder()
        .setup_coop_taskrun()
        .setup_taskrun_flag()
        .setup_single_issuer()
        .build(SQ_ENTRIES)
}

/// The receive's msghdr: room for the source address, no control data, no iovec (the
/// buffer comes from the pool).
fn recv_template() -> libc::msghdr {
    // SAFETY: msghdr is valid zeroed.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_namelen = NAME_LEN as libc::socklen_t;
    msg
}

/// Buffers the kernel picks for received datagrams, and the ring through which they are
/// handed to it (and back once read).
pub struct BufPool {
    ring: *mut BufRingEntry,
    ring_bytes: usize,
    bufs: Vec<u8>,
    buf_size: usize,
    /// Entries handed to the kernel so far (the ring's tail, published with release order).
    tail: u16,
}

// SAFETY: the mapping and the buffers belong to this pool alone, used by one thread at a time.
unsafe impl Send for BufPool {}

impl BufPool {
    fn new(ring: &IoUring, buf_size: usize) -> std::io::Result<BufPool> {
        let ring_bytes = RX_BUFFERS as usize * std::mem::size_of::<BufRingEntry>();
        // SAFETY: a fresh private anonymous mapping (page aligned, as the kernel requires).
        let mem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if mem == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let mut pool = BufPool {
            ring: mem.cast(),
            ring_bytes,
            bufs: vec![0u8; RX_BUFFERS as usize * buf_size],
            buf_size,
            tail: 0,
        };
        // SAFETY: the mapping lives as long as the pool, which unregisters it before unmapping
        // (`Drop` of `UringIo` unregisters; a pool dropped with its ring: the ring goes first).
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(pool.ring as u64, RX_BUFFERS, GROUP, 0)?
        };
        for bid in 0..RX_BUFFERS {
            pool.give(bid);
        }
        pool.publish();
        Ok(pool)
    }

    /// Queues buffer `bid` for the kernel (seen once `publish` runs).
    fn give(&mut self, bid: u16) {
        let slot = (self.tail & (RX_BUFFERS - 1)) as usize;
        // SAFETY: slot < RX_BUFFERS entries of the mapping; the kernel reads entries only up
        // to the published tail.
        let e = unsafe { &mut *self.ring.add(slot) };
        e.set_addr(self.bufs[bid as usize * self.buf_size..].as_ptr() as u64);
        e.set_len(self.buf_size as u32);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail field lives in the first entry of the mapping; the kernel reads it
        // with acquire order.
        unsafe {
            let tail = BufRingEntry::tail(self.ring) as *const std::sync::atomic::AtomicU16;
            (*tail).store(self.tail, std::sync::atomic::Ordering::Release);
        }
    }

    /// Received datagram in buffer `bid`, `len` bytes as the completion said: its payload and
    /// source address. None when the kernel's header does not parse.
    pub fn datagram(
        &self,
        r: Received,
    ) -> Option<(&[u8], libc::sockaddr_storage, libc::socklen_t)> {
        let start = r.bid as usize * self.buf_size;
        let out = RecvMsgOut::parse(&self.bufs[start..start + r.len], &recv_template()).ok()?;
        if out.is_payload_truncated() || out.is_name_data_truncated() {
            return None;
        }
        // SAFETY: sockaddr_storage is valid zeroed.
        let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let name = out.name_data();
        // SAFETY: at most NAME_LEN (< sizeof sockaddr_storage) bytes into the storage.
        unsafe {
            std::ptr::copy_nonoverlapping(
                name.as_ptr(),
                (&mut addr as *mut libc::sockaddr_storage).cast::<u8>(),
                name.len(),
            )
        };
        // The payload follows the header and the name field (no control data asked for).
        let at = start + RECVMSG_OUT + NAME_LEN;
        let payload = &self.bufs[at..at + out.payload_data().len()];
        Some((payload, addr, out.incoming_name_len()))
    }

    /// Hands buffers back to the kernel.
    pub fn recycle(&mut self, bids: impl Iterator<Item = u16>) {
        let before = self.tail;
        for bid in bids {
            self.give(bid);
        }
        if self.tail != before {
            self.publish();
        }
    }
}

impl Drop for BufPool {
    fn drop(&mut self) {
        // SAFETY: our own mapping; the ring that knew it was unregistered or destroyed first.
        unsafe { libc::munmap(self.ring.cast(), self.ring_bytes) };
    }
}

/// One datagram the kernel received: its buffer and the bytes it wrote there.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    pub bid: u16,
    pub len: usize,
}

/// The ring of one io thread (its socket and its doorbell).
pub struct UringIo {
    ring: IoUring,
    fd: RawFd,
    bell_fd: RawFd,
    /// The receive's template: the kernel reads only the name and control lengths.
    msg: Box<libc::msghdr>,
    recv_armed: bool,
    bell_armed: bool,
    sends_in_flight: usize,
    sends_failed: usize,
    /// Datagrams received and not yet taken (`take_received`).
    received: Vec<Received>,
    /// Receive completions that failed (not "no buffer left"), for the log.
    recv_errors: u64,
}

impl UringIo {
    /// The ring and its buffers for socket `fd` (datagrams up to `max_datagram` bytes) and
    /// doorbell `bell_fd`. Must be called on the thread that uses it (single issuer).
    pub fn new(
        fd: RawFd,
        bell_fd: RawFd,
        max_datagram: usize,
    ) -> std::io::Result<(UringIo, BufPool)> {
        let ring = new_ring()?;
        let pool = BufPool::new(&ring, RECVMSG_OUT + NAME_LEN + max_datagram)?;
        let msg = Box::new(recv_template());
        let mut io = UringIo {
            ring,
            fd,
            bell_fd,
            msg,
            recv_armed: false,
            bell_armed: false,
            sends_in_flight: 0,
            sends_failed: 0,
            received: Vec::with_capacity(RX_BUFFERS as usize),
            recv_errors: 0,
        };
        io.arm();
        io.ring.submit()?;
        // A kernel without multishot receive fails it at once: say so now, not at the first
        // datagram.
        io.reap();
        if !io.recv_armed {
            return Err(std::io::Error::other("multishot recvmsg refused"));
        }
        Ok((io, pool))
    }

    /// (Re)arms the multishot receive and the doorbell poll where the kernel ended them.
    fn arm(&mut self) {
        if !self.recv_armed {
            let e = opcode::RecvMsgMulti::new(Fd(self.fd), &*self.msg, GROUP)
                .build()
                .user_data(RECV);
            self.recv_armed = self.push(e);
        }
        if !self.bell_armed {
            let e = opcode::PollAdd::new(Fd(self.bell_fd), libc::POLLIN as u32)
                .multi(true)
                .build()
                .user_data(BELL);
            self.bell_armed = self.push(e);
        }
    }

    /// Queues one entry, submitting first when the queue is full.
    fn push(&mut self, e: io_uring::squeue::Entry) -> bool {
        // SAFETY: every entry's pointers (msghdrs of this struct or of the caller's send
        // batch) stay valid until its completion is reaped.
        if unsafe { self.ring.submission().push(&e) }.is_ok() {
            return true;
        }
        let _ = self.ring.submit();
        unsafe { self.ring.submission().push(&e) }.is_ok()
    }

    /// Reads the completion ring (no syscall): received datagrams are queued for
    /// `take_received`, finished sends counted.
    fn reap(&mut self) {
        let mut cq = self.ring.completion();
        cq.sync();
        for c in &mut cq {
            let (res, flags) = (c.result(), c.flags());
            match c.user_data() {
                RECV => {
                    if res >= 0 {
                        if let Some(bid) = cqueue::buffer_select(flags) {
                            self.received.push(Received {
                                bid,
                                len: res as usize,
                            });
                        }
                    } else if res != -libc::ENOBUFS {
                        self.recv_errors += 1;
                        if self.recv_errors.is_power_of_two() {
                            tracing::warn!(
                                error = %std::io::Error::from_raw_os_error(-res),
                                count = self.recv_errors,
                                "io_uring receive failed"
                            );
                        }
                    }
                    // Out of buffers, or ended: armed again once buffers are back.
                    if !cqueue::more(flags) {
                        self.recv_armed = false;
                    }
                }
                BELL if !cqueue::more(flags) => self.bell_armed = false,
                SEND => {
                    self.sends_in_flight -= 1;
                    if res < 0 {
                        self.sends_failed += 1;
                    }
                }
                _ => {}
            }
        }
    }

    /// Moves the datagrams received so far into `into` (emptied first); they stay in their
    /// buffers until the caller recycles them.
    pub fn take_received(&mut self, into: &mut Vec<Received>) {
        into.clear();
        std::mem::swap(into, &mut self.received);
    }

    /// Picks up what the kernel finished, entering it only when it has deferred work for
    /// this thread or entries wait to be submitted. Returns datagrams waiting to be taken.
    pub fn poll(&mut self) -> usize {
        self.arm();
        if self.ring.submission().taskrun() || !self.ring.submission().is_empty() {
            let _ = self.ring.submit();
        }
        self.reap();
        self.received.len()
    }

    /// Sends the batch's datagrams and waits until the kernel has taken every one (their
    /// buffers are then free again). Returns how many it refused.
    pub fn send(&mut self, tx: &mut MsgBatch) -> usize {
        let n = tx.len;
        for i in 0..n {
            let e = opcode::SendMsg::new(Fd(self.fd), tx.msghdr(i))
                .build()
                .user_data(SEND);
            if self.push(e) {
                self.sends_in_flight += 1;
            } else {
                self.sends_failed += 1;
            }
        }
        let until = std::time::Instant::now() + SEND_WAIT;
        let mut cancelled = false;
        loop {
            let want = usize::from(self.sends_in_flight > 0);
            if let Err(e) = self.ring.submit_and_wait(want) {
                if e.raw_os_error() != Some(libc::EINTR) && e.raw_os_error() != Some(libc::EBUSY) {
                    tracing::warn!(error = %e, "io_uring submit failed");
                }
            }
            self.reap();
            if self.sends_in_flight == 0 {
                break;
            }
            // A socket that takes nothing for a second: give up those datagrams (counted), as
            // the recvmmsg path does, so their buffers can be reused.
            if !cancelled && std::time::Instant::now() > until {
                let all_sends = CancelBuilder::user_data(SEND).all();
                let e = opcode::AsyncCancel2::new(all_sends)
                    .build()
                    .user_data(CANCEL);
                self.push(e);
                cancelled = true;
            }
        }
        tx.clear();
        std::mem::take(&mut self.sends_failed)
    }

    /// Sleeps until a datagram or a doorbell ring completes, or `timeout` passes. The caller
    /// announced the sleep to its doorbell and found no answer waiting.
    pub fn park(&mut self, timeout: Duration) {
        self.arm();
        self.reap();
        if !self.received.is_empty() {
            return;
        }
        let ts = Timespec::from(timeout);
        let args = SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                ) => {}
            Err(e) => tracing::warn!(error = %e, "io_uring wait failed"),
        }
        self.reap();
    }
}

impl Drop for UringIo {
    /// Ends the receive and the doorbell poll and waits (bounded) for their last
    /// completions, so the kernel no longer writes into the pool when it is freed after this.
    fn drop(&mut self) {
        if self.recv_armed || self.bell_armed {
            let e = opcode::AsyncCancel2::new(CancelBuilder::user_data(RECV).all())
                .build()
                .user_data(CANCEL);
            self.push(e);
            let e = opcode::AsyncCancel2::new(CancelBuilder::user_data(BELL).all())
                .build()
                .user_data(CANCEL);
            self.push(e);
            let until = std::time::Instant::now() + SEND_WAIT;
            while (self.recv_armed || self.bell_armed) && std::time::Instant::now() < until {
                let ts = Timespec::from(Duration::from_millis(10));
                let args = SubmitArgs::new().timespec(&ts);
                let _ = self.ring.submitter().submit_with_args(1, &args);
                self.reap();
            }
        }
        let _ = self.ring.submitter().unregister_buf_ring(GROUP);
    }
}
