//! The network side of a Cohort server.
//!
//! Listeners read frames (UDP datagrams, TCP streams, HTTP bodies) and admit each request into
//! their ingress (`cohort_engine::Ingress`: the in-flight table and the request rings into the
//! engines); the answers come back as messages on the answer rings, and the ingress that
//! admitted a request writes its answer to the client (UDP: the io thread itself; TCP/HTTP:
//! the shard's answer pump on the same thread, through the connection's task). Each io thread
//! is one UDP ingress and one TCP/HTTP shard, never sharing a lock with another io thread.

mod accept;
mod admin;
mod behind;
mod collections_grpc;
pub use cohort_auth::Auth;
mod context;
mod doorbell;
mod grpc;
mod grpc_activity;
mod grpc_body;
mod grpc_flow;
mod handler;
mod http;
mod http_io;
mod http_limits;
mod http_pages;
mod http_reply;
mod limits;
mod openapi;
mod quota;
mod routes;
pub use handler::{HttpRoutes, RouteAnswer};
pub use http_reply::MetricsRender;
pub use limits::{default_buffered_bytes, raise_fd_limit, Limits, DEFAULT_SOCKET_BUFFER};
pub use quota::ClientQuota;
mod server;
mod shard;
mod tasks;
mod tcp;
mod tls;
mod trim;
pub use tls::check_tls;
mod udp;
mod v2;
mod v2_grpc;
pub use cohort_engine::tensor_json::parse_infer;

pub use context::{Context, MAX_FRAMES_IN_FLIGHT};
pub use server::{check_ports, NetConfig, Server, Shared, UdpIo};
