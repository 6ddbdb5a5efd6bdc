//! Rhythm's web banking (SPECweb2009 Banking's shapes) as a library, what the bank service
//! (`cohort-service-bank`) runs per request on the CPU and checks its GPU kernels against:
//! [`parse`] (one raw HTTP/1.1 request) -> [`session`] (login creates, logout removes, the
//! rest must match) -> [`besim`] (the backend's records) -> [`page`] (real HTML from the
//! user's [`record`]s). [`kinds`] names the pages; [`client`] writes valid requests (the load
//! generator's and the tests').

pub mod besim;
pub mod client;
pub mod kinds;
pub mod page;
pub mod parse;
pub mod record;
pub mod session;
