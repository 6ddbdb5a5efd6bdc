//! UDP listener: `--io-threads` sockets on one port (SO_REUSEPORT), each owned by one io
//! thread that batches reads (recvmmsg) and writes (sendmmsg) and keeps its own client table.

mod batch;
mod io_thread;
mod table;

pub(crate) use io_thread::{spawn_udp, UdpThreadConfig};
