//! Datagrams spread evenly over the sockets of one SO_REUSEPORT port.
//!
//! The kernel picks a port's socket for each datagram by hashing its flow (the sender's
//! address and port). A server with one socket per io thread then gives each thread whole
//! clients: with 16 clients over 4 threads one thread often gets 6 or 7 of them. That thread
//! saturates while the others idle, its socket buffer fills, and from then on every datagram
//! of its clients waits the whole buffer (tens of milliseconds) or is dropped. Measured on an
//! H200 (issue 80): k-NN at 800-900 K datagrams/s over 4 io threads, one thread at 100% of
//! its core and the others at 55-85%, 140 K datagrams/s dropped by that socket; which rate
//! broke moved from run to run with the clients' random ports (the "stall" at 300-400 K).
//!
//! A classic BPF program attached to the group (SO_ATTACH_REUSEPORT_CBPF, Linux 4.5) picks
//! the socket instead: a random number modulo the sockets, so each thread gets its share of
//! every client's datagrams, however few the clients. UDP requests carry their own ids and
//! every answer leaves from the same address and port, so no client can tell which thread
//! served it.

use std::io;
use std::os::fd::RawFd;

/// `SO_ATTACH_REUSEPORT_CBPF` (asm-generic/socket.h: x86-64 and aarch64; libc has it only
/// for Android).
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// One classic BPF instruction.
const fn insn(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

/// Makes the kernel hand each datagram arriving at `fd`'s SO_REUSEPORT group to one of its
/// first `sockets` sockets (in the order they were bound) at random. Call once every socket
/// of the group is bound; one socket needs nothing.
pub fn spread_evenly(fd: RawFd, sockets: usize) -> io::Result<()> {
    if sockets < 2 {
        return Ok(());
    }
    let n = u32::try_from(sockets).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // A = random; A = A % n; return A (the index of the socket in the group).
    let mut prog = [
        insn(
            libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
            (libc::SKF_AD_OFF + libc::SKF_AD_RANDOM) as u32,
        ),
        insn(libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K, n),
        insn(libc::BPF_RET | libc::BPF_A, 0),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: `fprog` points at `prog`, both alive for the call; the kernel copies the
    // program.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            &fprog as *const libc::sock_fprog as *const libc::c_void,
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::spread_evenly;
    use socket2::{Domain, Protocol, Socket, Type};
    use std::net::{SocketAddr, UdpSocket};
    use std::os::fd::AsRawFd;

    fn member(addr: SocketAddr) -> UdpSocket {
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        s.set_reuse_port(true).unwrap();
        let _ = s.set_recv_buffer_size(4 << 20);
        s.bind(&addr.into()).unwrap();
        let s: UdpSocket = s.into();
        s.set_nonblocking(true).unwrap();
        s
    }

    /// Datagrams each socket of the group received.
    fn counts(group: &[UdpSocket]) -> Vec<usize> {
        let mut buf = [0u8; 64];
        group
            .iter()
            .map(|s| std::iter::from_fn(|| s.recv(&mut buf).ok()).count())
            .collect()
    }

    #[test]
    fn one_client_s_datagrams_reach_every_socket_of_the_group() {
        let first = member("127.0.0.1:0".parse().unwrap());
        let addr = first.local_addr().unwrap();
        let mut group = vec![first];
        group.extend((1..4).map(|_| member(addr)));
        spread_evenly(group[0].as_raw_fd(), group.len()).unwrap();
        // One client: one flow, which the kernel's hash alone would give one socket.
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        // Sent in rounds, each drained before the next: the test must not depend on how
        // much a socket's buffer may hold here (net.core.rmem_max).
        let (rounds, per_round) = (20, 200);
        let sent = rounds * per_round;
        let mut got = vec![0; group.len()];
        for r in 0..rounds {
            for i in 0..per_round {
                client
                    .send_to(&((r * per_round + i) as u32).to_le_bytes(), addr)
                    .unwrap();
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            got.iter_mut()
                .zip(counts(&group))
                .for_each(|(g, c)| *g += c);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        got.iter_mut()
            .zip(counts(&group))
            .for_each(|(g, c)| *g += c);
        assert_eq!(got.iter().sum::<usize>(), sent, "{got:?}");
        // 1 000 expected each; the binomial's standard deviation is about 27.
        assert!(got.iter().all(|&c| c > 800), "uneven: {got:?}");
    }

    #[test]
    fn a_lone_socket_needs_no_program() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        spread_evenly(s.as_raw_fd(), 1).unwrap();
    }
}
