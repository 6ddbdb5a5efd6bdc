//! How requests reach the server: binary frames over UDP/TCP, JSON over HTTP, or the Open
//! Inference Protocol's tensors over gRPC.

pub(crate) mod frames;
pub(crate) mod grpc;
pub(crate) mod http;
pub(crate) mod pages;
pub(crate) mod rx_stamp;
