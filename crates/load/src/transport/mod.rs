//! How requests reach the server: binary frames over UDP/TCP, or JSON over HTTP.

pub(crate) mod frames;
pub(crate) mod http;
pub(crate) mod pages;
pub(crate) mod rx_stamp;
