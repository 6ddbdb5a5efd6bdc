//! UDP listener: `--io-threads` sockets on one port (SO_REUSEPORT), each owned by one io
//! thread that batches reads (recvmmsg) and writes (sendmmsg) and is its own ingress (its
//! in-flight table holds each request's client address).

//! The socket calls themselves (batches, GSO trains, io_uring) are `cohort_udp`'s.

mod io_thread;

pub(crate) use cohort_udp::probe_uring;
pub(crate) use io_thread::{spawn_udp, UdpThreadConfig};
