//! recvmmsg/sendmmsg batches with buffers allocated once per io thread (nothing allocates on
//! the hot path).

use std::os::fd::RawFd;

/// `BATCH` receive or send slots with their buffers, iovecs, addresses and mmsghdrs.
pub struct MsgBatch {
    bufs: Vec<u8>,
    buf_size: usize,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_storage>,
    hdrs: Vec<libc::mmsghdr>,
    /// Slots filled (send side) or received (receive side).
    pub len: usize,
}

// SAFETY: the raw pointers inside iovecs/mmsghdrs point into this struct's own heap buffers,
// which move with it; the batch is used by one thread at a time.
unsafe impl Send for MsgBatch {}

impl MsgBatch {
    pub fn new(batch: usize, buf_size: usize) -> MsgBatch {
        let mut b = MsgBatch {
            bufs: vec![0u8; batch * buf_size],
            buf_size,
            // SAFETY: these C structs are valid when zeroed.
            iovs: vec![unsafe { std::mem::zeroed() }; batch],
            addrs: vec![unsafe { std::mem::zeroed() }; batch],
            hdrs: vec![unsafe { std::mem::zeroed() }; batch],
            len: 0,
        };
        for i in 0..batch {
            b.iovs[i].iov_base = b.bufs[i * buf_size..].as_mut_ptr() as *mut _;
            b.iovs[i].iov_len = buf_size;
            b.hdrs[i].msg_hdr.msg_iov = &mut b.iovs[i];
            b.hdrs[i].msg_hdr.msg_iovlen = 1;
            b.hdrs[i].msg_hdr.msg_name = &mut b.addrs[i] as *mut _ as *mut _;
        }
        b
    }

    pub fn capacity(&self) -> usize {
        self.hdrs.len()
    }

    pub fn is_full(&self) -> bool {
        self.len == self.capacity()
    }

    /// Received datagram `i`: its bytes and its source address.
    pub fn received(&self, i: usize) -> (&[u8], &libc::sockaddr_storage, libc::socklen_t) {
        let n = self.hdrs[i].msg_len as usize;
        let start = i * self.buf_size;
        (
            &self.bufs[start..start + n],
            &self.addrs[i],
            self.hdrs[i].msg_hdr.msg_namelen,
        )
    }

    /// Reads up to a batch without blocking. Returns the number of datagrams (0 = none ready).
    pub fn recv(&mut self, fd: RawFd) -> std::io::Result<usize> {
        for i in 0..self.capacity() {
            self.iovs[i].iov_len = self.buf_size;
            self.hdrs[i].msg_hdr.msg_namelen =
                std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            self.hdrs[i].msg_hdr.msg_flags = 0;
        }
        // SAFETY: hdrs/iovs/addrs/bufs are valid for `capacity` entries.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                self.capacity() as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            self.len = 0;
            return match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        self.len = n as usize;
        Ok(self.len)
    }

    /// Appends one outgoing datagram; `fill` writes it into the slot buffer and returns its
    /// length.
    pub fn push(
        &mut self,
        addr: &libc::sockaddr_storage,
        addr_len: libc::socklen_t,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) {
        assert!(!self.is_full(), "push on a full batch");
        let i = self.len;
        let start = i * self.buf_size;
        let n = fill(&mut self.bufs[start..start + self.buf_size]);
        assert!(n <= self.buf_size);
        self.iovs[i].iov_len = n;
        self.addrs[i] = *addr;
        self.hdrs[i].msg_hdr.msg_namelen = addr_len;
        self.len += 1;
    }

    /// Filled send slot `i` as the `msghdr` a sendmsg takes (valid while the batch lives and
    /// the slot is not refilled).
    pub fn msghdr(&self, i: usize) -> *const libc::msghdr {
        assert!(i < self.len);
        &self.hdrs[i].msg_hdr
    }

    /// Filled send slot `i`: its length and its destination's bytes.
    pub fn slot(&self, i: usize) -> (usize, &[u8]) {
        let (addr, len) = self.address(i);
        // SAFETY: `len` bytes of the storage were written by push (len <= its size).
        let bytes =
            unsafe { std::slice::from_raw_parts(addr as *const _ as *const u8, len as usize) };
        (self.iovs[i].iov_len, bytes)
    }

    /// Filled send slot `i`'s data as an iovec (valid while the batch lives).
    pub fn iovec(&self, i: usize) -> libc::iovec {
        self.iovs[i]
    }

    /// Filled send slot `i`'s destination.
    pub fn address(&self, i: usize) -> (&libc::sockaddr_storage, libc::socklen_t) {
        (&self.addrs[i], self.hdrs[i].msg_hdr.msg_namelen)
    }

    /// Forgets the filled slots (their datagrams were sent another way).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Sends the filled slots; waits for socket space (bounded) when the kernel pushes back.
    /// Returns the number of datagrams the kernel refused in the end.
    pub fn send_all(&mut self, fd: RawFd) -> usize {
        let mut sent = 0;
        let mut stalls = 0;
        let mut refused_hard = 0;
        while sent < self.len {
            // SAFETY: entries sent..len are filled by push.
            let n = unsafe {
                libc::sendmmsg(
                    fd,
                    self.hdrs[sent..].as_mut_ptr(),
                    (self.len - sent) as u32,
                    libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                sent += n as usize;
                continue;
            }
            let kind = std::io::Error::last_os_error().kind();
            if n < 0 && kind == std::io::ErrorKind::Interrupted {
                continue;
            }
            if n == 0 || kind == std::io::ErrorKind::WouldBlock {
                if stalls == 100 {
                    break;
                }
                stalls += 1;
                wait_writable(fd, 10);
                continue;
            }
            // The kernel rejects the first remaining datagram outright (e.g. an unreachable
            // address): skip it, count it as refused, go on with the rest.
            sent += 1;
            refused_hard += 1;
        }
        let refused = self.len - sent + refused_hard;
        self.len = 0;
        refused
    }
}

pub fn wait_writable(fd: RawFd, timeout_ms: i32) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, timeout_ms) };
}
