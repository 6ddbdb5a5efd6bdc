//! The engine layer: the boundary between the network and the engines, and the engines that
//! are not tied to a device.
//!
//! Data path: an ingress (`net`: a UDP io thread, the TCP/HTTP side) admits a request into its
//! [`Ingress`] (in-flight table: token -> who asked) and writes it as an mqueue message
//! {token, service, request id, deadline, arrival, payload} into a request ring of one lane of
//! the service's engine ([`wiring`]). The lane's thread (a [`CpuEngine`] worker, or the
//! [`batch`] loop of a GPU engine) reads it, runs the service, and writes the answer as a
//! message into the answer ring back to that ingress, which looks the token up and replies.
//! A service of the [`InlineEngine`] skips the rings: the ingress's own thread runs it.

pub mod batch;
mod batch_cpu;
pub mod bell;
pub mod clock;
mod cpu;
mod dispatch;
mod fair;
mod inflight;
mod ingress;
mod inline;
mod joins;
pub mod metrics;
mod reply;
pub mod rows;
mod service;
pub mod sharded;
pub mod split;
pub mod tensor;
pub mod tensor_json;
pub mod wiring;

pub use batch::{BatchBackend, BatchConfig, BatchLane, BatchSlot};
pub use batch_cpu::CpuTwinSlot;
pub use bell::{Bell, Wake};
pub use cpu::{CpuEngine, CpuEngineConfig};
pub use dispatch::DispatchPolicy;
pub use inflight::{InflightTable, LaneRef, Meta, MAX_INFLIGHT};
pub use ingress::{Answer, Ingress, Requester, INLINE_LANE};
pub use inline::{InlineEngine, INLINE};
pub use metrics::{Metrics, ServiceLabel, Shed};
pub use reply::{ReplyPort, Response, ResponseBody};
pub use service::{json_request_by_value, HttpDoc, JsonRequest, Registry, Service};
pub use wiring::{wire, wire_in, EngineSpec, IngressEnds, LaneEnds, Refusal, Wiring};
