//! UDP listener: `--io-threads` sockets on one port (SO_REUSEPORT), each owned by one io
//! thread that batches reads (recvmmsg) and writes (sendmmsg) and is its own ingress (its
//! in-flight table holds each request's client address).

mod batch;
mod gso;
mod io_thread;
mod uring;

pub(crate) use io_thread::{spawn_udp, UdpThreadConfig};
pub(crate) use uring::probe as probe_uring;
