//! The engine layer: what a request is once the network has read it, how it is answered
//! exactly once, which engine lane runs it (the dispatcher), and the `cpu` engine.
//!
//! Data path: `net` decodes a frame into a [`Request`] -> [`Dispatcher`] picks a [`Lane`] ->
//! the engine runs the [`Service`] -> the [`Reply`] hands the [`Response`] back to `net`.

mod cpu;
mod dispatch;
pub mod metrics;
mod request;
mod service;

pub use cpu::{CpuEngine, CpuEngineConfig};
pub use dispatch::{ChannelLane, DispatchPolicy, Dispatcher, Lane, Submit};
pub use metrics::Metrics;
pub use request::{Reply, ReplyPort, Request, Response, ResponseBody};
pub use service::{Registry, Service};
