//! Connections to a worker's listener that UCX's connection manager will never finish, closed
//! from outside it ([`Worker::sweep_stalled`](crate::Worker::sweep_stalled)).
//!
//! Why: UCX 1.22's TCP connection manager (tcp_sockcm) takes the length in a connecting
//! peer's first header unchecked. From a stranger's random bytes that length is past its
//! buffer: once the buffer is full it calls recv() for 0 bytes, which returns 0 whether or
//! not the peer has closed, and as the socket stays readable its async thread spins on it at
//! 100% of a core for good, the socket left in CLOSE-WAIT (issue 84: anyone who can reach
//! `--node-listen` could do it, no key needed). Such a connection never reaches Cohort (no
//! connection request, no message), so it cannot be refused as an unsealed message is.
//!
//! What: once a second the owner's thread looks at this process's sockets on the listener's
//! port (accepted ones: the connection manager's). One whose peer has closed (CLOSE-WAIT) or
//! with bytes UCX has left unread, in two looks a second apart, is stalled: its descriptor
//! is replaced (dup2) by a fresh unconnected socket. The old socket closes (its peer gets a
//! FIN), and its epoll registration goes with it, so the async thread is quiet again; UCX's
//! later calls on the number fail on the unconnected socket (ENOTCONN) rather than reach
//! another file. A live handshake is read at once by UCX, and a finished connection's socket
//! there carries nothing, so neither looks stalled twice.
//!
//! The same holds the other way (issue 84): a worker that connects to an address where a
//! stranger listens and answers with bytes that are not UCX's spins the same way on its own
//! socket. [`DialSweeper`] looks at the sockets connected to addresses the worker dialed
//! ([`Worker::connect`](crate::Worker::connect)), more often (its owner calls it only while
//! it waits on such a peer to prove itself), and says which peers it cut off.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// How often the sockets are looked at, and how long one must look stalled.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The listener's port and what the last look saw.
pub(crate) struct Sweeper {
    port: u16,
    last: Option<Instant>,
    /// Sockets that looked stalled at the last look: descriptor -> inode.
    suspects: HashMap<RawFd, u64>,
}

impl Sweeper {
    pub fn new(port: u16) -> Sweeper {
        Sweeper {
            port,
            last: None,
            suspects: HashMap::new(),
        }
    }

    /// Closes the connections that looked stalled twice (at most one look a second; a call
    /// between looks costs a clock read). Returns how many it closed.
    pub fn sweep(&mut self) -> usize {
        if self.last.is_some_and(|t| t.elapsed() < LOOK_EVERY) {
            return 0;
        }
        self.last = Some(Instant::now());
        let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
            return 0;
        };
        let mut now = HashMap::new();
        let mut closed = 0;
        for e in dir.flatten() {
            let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<RawFd>().ok()) else {
                continue;
            };
            let Some(inode) = socket_inode(fd) else {
                continue;
            };
            if !stalled(fd, self.port) {
                continue;
            }
            if self.suspects.get(&fd) == Some(&inode) {
                if close_behind(fd, inode) {
                    closed += 1;
                }
            } else {
                now.insert(fd, inode);
            }
        }
        self.suspects = now;
        closed
    }
}

/// How often dialed sockets are looked at (two looks stalled: closed).
const DIAL_LOOK_EVERY: Duration = Duration::from_millis(100);

/// The peers a worker dialed and what the last look saw of its sockets to them.
#[derive(Default)]
pub(crate) struct DialSweeper {
    peers: HashSet<SocketAddr>,
    last: Option<Instant>,
    suspects: HashMap<RawFd, u64>,
}

impl DialSweeper {
    pub fn dialed(&mut self, peer: SocketAddr) {
        self.peers.insert(peer);
    }

    /// Closes the sockets to dialed peers that looked stalled twice (at most one look every
    /// 100 ms). Returns the peers of those it closed.
    pub fn sweep(&mut self) -> Vec<SocketAddr> {
        if self.peers.is_empty() || self.last.is_some_and(|t| t.elapsed() < DIAL_LOOK_EVERY) {
            return Vec::new();
        }
        self.last = Some(Instant::now());
        let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
            return Vec::new();
        };
        let (mut now, mut closed) = (HashMap::new(), Vec::new());
        for e in dir.flatten() {
            let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<RawFd>().ok()) else {
                continue;
            };
            let Some(inode) = socket_inode(fd) else {
                continue;
            };
            let Some(peer) = peer_of(fd).filter(|p| self.peers.contains(p)) else {
                continue;
            };
            if !stuck(fd) {
                continue;
            }
            if self.suspects.get(&fd) == Some(&inode) {
                if close_behind(fd, inode) {
                    closed.push(peer);
                }
            } else {
                now.insert(fd, inode);
            }
        }
        self.suspects = now;
        closed
    }
}

/// The address a connected TCP socket's peer has (None: not one).
fn peer_of(fd: RawFd) -> Option<SocketAddr> {
    if int_opt(fd, libc::SOL_SOCKET, libc::SO_TYPE) != Some(libc::SOCK_STREAM) {
        return None;
    }
    // SAFETY: sockaddr_storage is valid zeroed; the kernel writes at most `len` bytes.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    if unsafe { libc::getpeername(fd, &mut ss as *mut _ as *mut libc::sockaddr, &mut len) } != 0 {
        return None;
    }
    // SAFETY: the kernel wrote a sockaddr of `len` bytes.
    let a = unsafe { socket2::SockAddr::new(ss, len) };
    a.as_socket()
}

/// The inode of socket `fd` (None: not a socket, or gone).
fn socket_inode(fd: RawFd) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    let s = link.to_str()?;
    s.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

fn int_opt(fd: RawFd, level: libc::c_int, name: libc::c_int) -> Option<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v and len are valid for the kernel to write one int.
    let r = unsafe { libc::getsockopt(fd, level, name, &mut v as *mut _ as *mut _, &mut len) };
    (r == 0).then_some(v)
}

/// An accepted TCP socket on `port` whose peer has closed or whose bytes lie unread.
fn stalled(fd: RawFd, port: u16) -> bool {
    // SAFETY: sockaddr_storage is valid zeroed; the kernel writes at most `len` bytes.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    if unsafe { libc::getsockname(fd, &mut ss as *mut _ as *mut libc::sockaddr, &mut len) } != 0 {
        return false;
    }
    let local = match ss.ss_family as libc::c_int {
        // SAFETY: the family says which sockaddr the kernel wrote.
        libc::AF_INET => unsafe { *(&ss as *const _ as *const libc::sockaddr_in) }.sin_port,
        libc::AF_INET6 => unsafe { *(&ss as *const _ as *const libc::sockaddr_in6) }.sin6_port,
        _ => return false,
    };
    if u16::from_be(local) != port
        || int_opt(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN) != Some(0)
        || int_opt(fd, libc::SOL_SOCKET, libc::SO_TYPE) != Some(libc::SOCK_STREAM)
    {
        return false; // another socket, or the listener itself
    }
    stuck(fd)
}

/// A TCP socket whose peer has closed (CLOSE-WAIT) or whose bytes lie unread.
fn stuck(fd: RawFd) -> bool {
    // struct tcp_info's first byte is the state; 8 is CLOSE-WAIT.
    let mut info = [0u8; 8];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: info has room for the `len` bytes the kernel may write.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr() as *mut _,
            &mut len,
        )
    };
    if r == 0 && info[0] == 8 {
        return true;
    }
    let mut unread: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut unread) };
    r == 0 && unread > 0
}

/// Replaces `fd` by a fresh unconnected socket if it is still socket `inode` (module doc).
fn close_behind(fd: RawFd, inode: u64) -> bool {
    // SAFETY: plain socket(2); the descriptor is ours until dup2 copies it and it is closed.
    let fresh = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fresh < 0 {
        return false;
    }
    // The number must still be that socket (checked as late as can be: only this thread
    // and UCX's async thread, which is stuck on it, use the connection manager's sockets).
    let same = socket_inode(fd) == Some(inode);
    // SAFETY: dup2 onto a descriptor this process holds, which stays open (now the fresh
    // socket); `fresh` is then closed, its copy lives on at `fd`.
    let ok = same && unsafe { libc::dup2(fresh, fd) } == fd;
    unsafe { libc::close(fresh) };
    if ok {
        tracing::warn!(
            fd,
            "UCX: closed a connection whose handshake cannot finish \
             (its peer closed, or sent bytes that are not UCX's)"
        );
    }
    ok
}
