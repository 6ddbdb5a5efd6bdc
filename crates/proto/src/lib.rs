//! Cohort wire protocol v1 (see `docs/protocol.md` for the byte-level layout).
//!
//! Everything here is pure decoding/encoding over byte slices: no I/O, no allocation on the
//! decode path beyond what the caller asks for, and no panics on any input (proptest and
//! cargo-fuzz check that).

mod auth;
mod error;
mod frame;
mod goaway;

pub use auth::{
    encode_signed, key_id_bytes, split_signed, verify_signed, AuthTrailer, AUTH_TRAILER_LEN,
    FLAG_AUTH, KEY_ID_LEN,
};
pub use error::{ErrorCode, ErrorPayload};
pub use frame::{
    encode_frame, Frame, FrameError, Header, Kind, HEADER_LEN, MAGIC, MAX_PAYLOAD, VERSION,
};
pub use goaway::GoAway;

/// Well-known service ids. The id travels in every frame header.
pub mod service_id {
    pub const ECHO: u16 = 1;
    pub const SPIN: u16 = 2;
    pub const KNN: u16 = 3;
    pub const BANK: u16 = 4;
}
