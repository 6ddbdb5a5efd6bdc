//! The kernel's receive time of each UDP answer (`SO_TIMESTAMPNS`), so the generator can say
//! how long an answer waited in its socket before one of its threads read it: the part of a
//! measured latency that is the client's own lateness (a thread held off its core), which
//! the send lag cannot see.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;

/// Asks the kernel to stamp every datagram `sock` receives; false where it refuses.
pub fn enable(sock: &UdpSocket) -> bool {
    let on: libc::c_int = 1;
    // SAFETY: a valid socket and a c_int option value of the size given.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// The wall clock (CLOCK_REALTIME, the clock of the kernel's stamps) in nanoseconds.
pub fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One datagram into `buf`: its length and, where the kernel stamped it, its receive time
/// (CLOCK_REALTIME nanoseconds). Errors as `UdpSocket::recv`'s.
pub fn recv(sock: &UdpSocket, buf: &mut [u8]) -> std::io::Result<(usize, Option<u64>)> {
    // Room for one SCM_TIMESTAMPNS control message (a timespec), aligned for cmsghdr.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: zeroed msghdr is valid; the fields set point at live buffers of the lengths given.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: msg describes buffers that live across the call.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut stamp = None;
    // SAFETY: walking the control messages the kernel wrote into `control` with the libc
    // macros, reading a timespec only from an SCM_TIMESTAMPNS message.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                stamp = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, stamp))
}

/// How long a datagram stamped at `stamp` waited before this read (0 when the clocks disagree).
pub fn waited_ns(stamp: u64) -> u64 {
    realtime_ns().saturating_sub(stamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_datagram_carries_its_receive_time() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(enable(&rx), "SO_TIMESTAMPNS refused");
        // The kernel turns stamping on a moment after the first socket asks (a deferred
        // switch); until then a datagram is stamped when it is read. So a few tries: one
        // must show the time it sat in the socket.
        let mut buf = [0u8; 64];
        let mut seen = Vec::new();
        for _ in 0..5 {
            tx.send_to(b"hello", rx.local_addr().unwrap()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
            let (n, stamp) = recv(&rx, &mut buf).unwrap();
            assert_eq!(&buf[..n], b"hello");
            let waited = waited_ns(stamp.expect("a stamped datagram"));
            assert!(waited < 1_000_000_000, "waited {waited} ns");
            seen.push(waited);
            if waited >= 15_000_000 {
                break;
            }
        }
        assert!(
            seen.iter().any(|&w| w >= 15_000_000),
            "no datagram showed the 20 ms it sat in the socket: {seen:?}"
        );
        // Without stamps asked for, none comes.
        let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"x", plain.local_addr().unwrap()).unwrap();
        assert_eq!(recv(&plain, &mut buf).unwrap(), (1, None));
    }
}
