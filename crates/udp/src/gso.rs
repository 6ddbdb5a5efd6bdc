//! UDP generic segmentation offload (GSO) for a send batch: the answers of one batch that go
//! to the same address are handed to the kernel as one datagram train (one `msghdr` whose
//! iovecs are the answers, with a `UDP_SEGMENT` control message giving their size), so the
//! kernel walks its send path (socket, route, IP, device) once per train instead of once per
//! answer and cuts the train into datagrams at the end. The receiver sees ordinary datagrams.
//!
//! A train's datagrams must all have the segment size except the last, which may be shorter;
//! answers are reordered inside a batch to form trains (UDP promises no order).
//! Where the kernel refuses a train (a device without checksum offload: EIO; a path MTU
//! smaller than the segment: EINVAL), its datagrams are sent one by one instead, and after an
//! EIO the thread stops coalescing (said once in the log).

use crate::batch::MsgBatch;
use std::os::fd::RawFd;

/// The kernel's UDP_MAX_SEGMENTS on every kernel that has UDP GSO (later kernels allow 128).
const MAX_SEGMENTS: usize = 64;
/// Bytes of one train: an IPv4 UDP datagram's largest payload (65 507), with room to spare.
const MAX_TRAIN_BYTES: usize = 60_000;
/// Largest segment coalesced: a 1500-byte Ethernet MTU less the IPv6 and UDP headers, so a
/// train never exceeds the path MTU of an ordinary network (the kernel refuses one that does).
const MAX_SEGMENT: usize = 1452;
/// Slots of the destination table (a power of two, at least twice a batch).
const TABLE: usize = 256;

/// Space for one `UDP_SEGMENT` control message (CMSG_SPACE of a u16), 8-byte aligned.
type Cmsg = [u64; 4];

/// One train: the slots of a batch sent as one GSO datagram train.
#[derive(Clone, Copy)]
struct Train {
    /// Slot whose address is the destination.
    first: usize,
    /// Every datagram but the last has this size.
    segment: usize,
    count: usize,
    bytes: usize,
    /// Size of the last datagram added (a train closes once it is shorter than `segment`).
    last: usize,
    /// Where its slots start in `order`.
    start: usize,
}

/// Builds and sends the trains of a batch; allocated once per io thread.
pub struct Coalescer {
    enabled: bool,
    trains: Vec<Train>,
    /// Train of each slot.
    train_of: Vec<u16>,
    /// Slots ordered by train.
    order: Vec<u16>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    cmsgs: Vec<Cmsg>,
    /// Destination hash -> newest train to it + 1 (0: none), cleared per batch.
    table: Vec<u16>,
    used: Vec<usize>,
    /// Next free place in `order` per train, while building.
    fill: Vec<usize>,
}

// SAFETY: the raw pointers in iovs/hdrs point into this struct's own buffers or into the
// MsgBatch being sent, and live only during `send`; one thread uses the coalescer.
unsafe impl Send for Coalescer {}

impl Coalescer {
    /// A coalescer for batches of `batch` slots; `enabled` is false where the kernel lacks
    /// UDP GSO (see [`supported`]) or it was turned off.
    pub fn new(batch: usize, enabled: bool) -> Coalescer {
        assert!(batch <= u16::MAX as usize && 2 * batch <= TABLE);
        Coalescer {
            enabled,
            trains: Vec::with_capacity(batch),
            train_of: vec![0; batch],
            order: vec![0; batch],
            // SAFETY: these C structs are valid when zeroed.
            iovs: vec![unsafe { std::mem::zeroed() }; batch],
            hdrs: vec![unsafe { std::mem::zeroed() }; batch],
            cmsgs: vec![[0; 4]; batch],
            table: vec![0; TABLE],
            used: Vec::with_capacity(batch),
            fill: Vec::with_capacity(batch),
        }
    }

    /// Sends the batch's filled slots, as trains where they share a destination. Returns
    /// (datagrams refused, datagrams sent inside trains of two or more).
    pub fn send(&mut self, batch: &mut MsgBatch, fd: RawFd) -> (usize, usize) {
        if !self.enabled || batch.len < 2 {
            return (batch.send_all(fd), 0);
        }
        self.plan(batch);
        if self.trains.len() == batch.len {
            // Every answer goes somewhere else: nothing to coalesce.
            return (batch.send_all(fd), 0);
        }
        self.build(batch);
        let (refused, coalesced) = self.send_trains(batch, fd);
        batch.clear();
        (refused, coalesced)
    }

    /// Assigns each slot to a train: the newest train to its address if the slot fits it,
    /// else a new one.
    fn plan(&mut self, batch: &MsgBatch) {
        self.trains.clear();
        for i in 0..batch.len {
            let (len, addr) = batch.slot(i);
            let h = hash(addr) & (TABLE - 1);
            // Linear probing over the destinations seen in this batch.
            let mut at = h;
            let found = loop {
                match self.table[at] {
                    0 => break None,
                    t => {
                        let t = t as usize - 1;
                        if batch.slot(self.trains[t].first).1 == addr {
                            break Some((at, t));
                        }
                    }
                }
                at = (at + 1) & (TABLE - 1);
            };
            let fits = |t: &Train| {
                t.last == t.segment
                    && len <= t.segment
                    && t.count < MAX_SEGMENTS
                    && t.bytes + len <= MAX_TRAIN_BYTES
            };
            let train = match found {
                Some((_, t)) if fits(&self.trains[t]) => {
                    let tr = &mut self.trains[t];
                    tr.count += 1;
                    tr.bytes += len;
                    tr.last = len;
                    t
                }
                _ => {
                    self.trains.push(Train {
                        first: i,
                        segment: if len <= MAX_SEGMENT { len } else { 0 },
                        count: 1,
                        bytes: len,
                        last: len,
                        start: 0,
                    });
                    let t = self.trains.len() - 1;
                    // A segment of 0 closes the train: a datagram over MAX_SEGMENT goes alone.
                    if self.trains[t].segment == 0 {
                        self.trains[t].last = usize::MAX;
                    }
                    if self.table[at] == 0 {
                        self.used.push(at);
                    }
                    self.table[at] = (t + 1) as u16;
                    t
                }
            };
            self.train_of[i] = train as u16;
        }
        for &at in &self.used {
            self.table[at] = 0;
        }
        self.used.clear();
    }

    /// Orders the slots by train and fills one msghdr per train.
    fn build(&mut self, batch: &MsgBatch) {
        let mut next = 0;
        for t in self.trains.iter_mut() {
            t.start = next;
            next += t.count;
        }
        self.fill.clear();
        self.fill.extend(self.trains.iter().map(|t| t.start));
        for i in 0..batch.len {
            let t = self.train_of[i] as usize;
            let at = self.fill[t];
            self.order[at] = i as u16;
            self.iovs[at] = batch.iovec(i);
            self.fill[t] += 1;
        }
        for (k, t) in self.trains.iter().enumerate() {
            let h = &mut self.hdrs[k].msg_hdr;
            let (addr, addr_len) = batch.address(t.first);
            h.msg_name = addr as *const _ as *mut _;
            h.msg_namelen = addr_len;
            h.msg_iov = &mut self.iovs[t.start];
            h.msg_iovlen = t.count;
            h.msg_flags = 0;
            if t.count > 1 {
                let c = &mut self.cmsgs[k];
                *c = [0; 4];
                // SAFETY: `c` holds CMSG_SPACE(2) bytes, aligned for cmsghdr.
                unsafe {
                    let cm = c.as_mut_ptr() as *mut libc::cmsghdr;
                    (*cm).cmsg_level = libc::SOL_UDP;
                    (*cm).cmsg_type = libc::UDP_SEGMENT;
                    (*cm).cmsg_len = libc::CMSG_LEN(2) as _;
                    let data = libc::CMSG_DATA(cm) as *mut u16;
                    data.write_unaligned(t.segment as u16);
                    h.msg_control = cm as *mut _;
                    h.msg_controllen = libc::CMSG_SPACE(2) as _;
                }
            } else {
                h.msg_control = std::ptr::null_mut();
                h.msg_controllen = 0;
            }
        }
    }

    /// sendmmsg over the trains; a train the kernel refuses is sent datagram by datagram.
    fn send_trains(&mut self, batch: &MsgBatch, fd: RawFd) -> (usize, usize) {
        let n = self.trains.len();
        let (mut sent, mut stalls, mut refused, mut coalesced) = (0, 0, 0, 0);
        while sent < n {
            // SAFETY: hdrs[sent..n] were filled by build and point at live buffers.
            let r = unsafe {
                libc::sendmmsg(
                    fd,
                    self.hdrs[sent..n].as_mut_ptr(),
                    (n - sent) as u32,
                    libc::MSG_DONTWAIT,
                )
            };
            if r > 0 {
                for t in &self.trains[sent..sent + r as usize] {
                    if t.count > 1 {
                        coalesced += t.count;
                    }
                }
                sent += r as usize;
                continue;
            }
            let err = std::io::Error::last_os_error();
            match err.kind() {
                std::io::ErrorKind::Interrupted if r < 0 => continue,
                std::io::ErrorKind::WouldBlock => {
                    if stalls == 100 {
                        break;
                    }
                    stalls += 1;
                    crate::batch::wait_writable(fd, 10);
                    continue;
                }
                _ if r == 0 => break,
                _ => {}
            }
            // The kernel refused train `sent` outright.
            let t = self.trains[sent];
            if t.count > 1 {
                if err.raw_os_error() == Some(libc::EIO) {
                    tracing::warn!(error = %err, "UDP GSO refused by the kernel: this io thread sends datagrams one by one");
                    self.enabled = false;
                }
                for k in t.start..t.start + t.count {
                    let slot = self.order[k] as usize;
                    if !send_one(fd, batch.msghdr(slot)) {
                        refused += 1;
                    }
                }
            } else {
                refused += 1;
            }
            sent += 1;
        }
        for t in &self.trains[sent..] {
            refused += t.count;
        }
        (refused, coalesced)
    }
}

/// Sends one plain datagram, waiting (bounded) for socket space. False if it was refused.
fn send_one(fd: RawFd, hdr: *const libc::msghdr) -> bool {
    for _ in 0..100 {
        // SAFETY: hdr is a filled slot of a live batch.
        let r = unsafe { libc::sendmsg(fd, hdr, libc::MSG_DONTWAIT) };
        if r >= 0 {
            return true;
        }
        match std::io::Error::last_os_error().kind() {
            std::io::ErrorKind::Interrupted => {}
            std::io::ErrorKind::WouldBlock => crate::batch::wait_writable(fd, 10),
            _ => return false,
        }
    }
    false
}

/// FNV-1a of an address's bytes (the table is rebuilt per batch; no attacker can grow it).
fn hash(addr: &[u8]) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in addr {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h ^ (h >> 32)) as usize
}

/// Whether the kernel has UDP GSO (Linux 4.18+): it knows the UDP_SEGMENT socket option.
pub fn supported(fd: RawFd) -> bool {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v and len are valid for the call.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            &mut v as *mut _ as *mut _,
            &mut len,
        )
    };
    r == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    fn storage(a: std::net::SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
        let std::net::SocketAddr::V4(v4) = a else {
            panic!("the test binds IPv4")
        };
        // SAFETY: zeroed sockaddr_storage is valid; we write a sockaddr_in into it.
        let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as _,
            sin_port: v4.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*v4.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: sockaddr_in fits in sockaddr_storage.
        unsafe { std::ptr::write(&mut s as *mut _ as *mut libc::sockaddr_in, sin) };
        (s, std::mem::size_of::<libc::sockaddr_in>() as _)
    }

    /// Every datagram of a batch reaches its own receiver whole and once, whatever mix of
    /// destinations, sizes (equal runs, a shorter tail, one over the segment cap) the batch
    /// holds, with GSO on or off; with GSO on, same-size answers to one address coalesce.
    #[test]
    fn every_datagram_arrives_whole_and_once() {
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = sender.as_raw_fd();
        if !supported(fd) {
            eprintln!("SKIP: this kernel has no UDP GSO");
            return;
        }
        let receivers: Vec<UdpSocket> = (0..3)
            .map(|_| {
                let r = UdpSocket::bind("127.0.0.1:0").unwrap();
                r.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                r
            })
            .collect();
        for gso in [true, false] {
            let mut batch = MsgBatch::new(64, 2048);
            let mut co = Coalescer::new(64, gso);
            // (receiver, length): runs of one size, a short tail, interleaved destinations,
            // and one datagram above MAX_SEGMENT.
            let mut plan = Vec::new();
            for k in 0..40 {
                plan.push((k % 2, 64));
            }
            plan.push((0, 30));
            plan.push((0, 64));
            plan.push((2, 1600));
            plan.push((2, 1600));
            plan.push((1, 10));
            for k in 0..10 {
                plan.push((2, 100 + k));
            }
            for (seq, &(r, len)) in plan.iter().enumerate() {
                let (addr, alen) = storage(receivers[r].local_addr().unwrap());
                batch.push(&addr, alen, |buf| {
                    buf[..len].fill((seq % 251) as u8);
                    buf[0] = seq as u8;
                    len
                });
            }
            let (refused, coalesced) = co.send(&mut batch, fd);
            assert_eq!(refused, 0);
            if gso {
                assert!(coalesced >= 40, "coalesced {coalesced}");
            } else {
                assert_eq!(coalesced, 0);
            }
            let mut want: HashMap<usize, Vec<(u8, usize)>> = HashMap::new();
            for (seq, &(r, len)) in plan.iter().enumerate() {
                want.entry(r).or_default().push((seq as u8, len));
            }
            for (r, sock) in receivers.iter().enumerate() {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                for _ in 0..want[&r].len() {
                    let n = sock.recv(&mut buf).expect("a datagram");
                    let seq = buf[0];
                    let fill = (seq as usize % 251) as u8;
                    assert!(
                        buf[1..n].iter().all(|&b| b == fill),
                        "datagram {seq} intact"
                    );
                    got.push((seq, n));
                }
                sock.set_nonblocking(true).unwrap();
                assert!(sock.recv(&mut buf).is_err(), "no extra datagram");
                sock.set_nonblocking(false).unwrap();
                got.sort();
                let mut w = want[&r].clone();
                w.sort();
                assert_eq!(got, w, "receiver {r}, gso {gso}");
            }
        }
    }
}
