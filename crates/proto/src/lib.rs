//! Cohort wire protocol v1 (see `docs/protocol.md` for the byte-level layout).
//!
//! Everything here is pure decoding/encoding over byte slices: no I/O, no allocation on the
//! decode path beyond what the caller asks for, and no panics on any input (proptest and
//! cargo-fuzz check that).

mod auth;
mod error;
mod frame;
mod goaway;
pub mod node_wire;

pub use auth::{
    encode_signed, key_id_bytes, split_signed, verify_signed, AuthTrailer, AUTH_TRAILER_LEN,
    FLAG_AUTH, KEY_ID_LEN,
};
pub use error::{ErrorCode, ErrorPayload};
pub use frame::{
    encode_frame, Frame, FrameError, Header, Kind, HEADER_LEN, MAGIC, MAX_PAYLOAD, VERSION,
};
pub use goaway::GoAway;

// A service's id (it travels in every frame header) is declared by the service itself
// (`cohort_services::<name>::ID`); the catalog checks that no two share one. Ids from 0xfe00
// are left to services only the tests serve.
