//! Batched UDP socket I/O, the syscall layer under the server's io threads (the role
//! quinn-udp plays for quinn): nothing here knows of requests, rings or engines.
//!
//! - [`MsgBatch`]: recvmmsg/sendmmsg batches whose buffers, iovecs, addresses and headers are
//!   allocated once per thread (nothing allocates on the hot path);
//! - [`Coalescer`]: a send batch handed to the kernel as GSO datagram trains, one per
//!   destination, with a per-datagram fallback where the kernel refuses them;
//! - [`spread_evenly`]: datagrams dealt to a port's sockets at random, not by client;
//! - [`UringIo`]: the same socket through io_uring (one multishot receive over a
//!   provided-buffer ring, sends batched into one submit, the sleep in the same enter).

mod batch;
mod gso;
mod spread;
mod uring;

pub use batch::{wait_writable, MsgBatch};
pub use gso::{supported as gso_supported, Coalescer};
pub use spread::spread_evenly;
pub use uring::{probe as probe_uring, BufPool, Received, UringIo};
