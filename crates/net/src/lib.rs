//! The network side of a Cohort server.
//!
//! Listeners read frames (UDP datagrams, TCP streams, HTTP bodies), the [`forward`] step turns
//! each into an engine request and hands it to the dispatcher, and each listener's reply port
//! writes the answer back to the client that asked (found through its client table).

mod doorbell;
mod forward;
mod http;
pub use http::MetricsRender;
mod server;
mod tasks;
mod tcp;
mod udp;

pub use forward::Context;
pub use server::{NetConfig, Server};
