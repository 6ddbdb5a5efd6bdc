//! Authenticated frames: a request whose header has [`FLAG_AUTH`] ends its payload with a
//! 48-byte trailer - the key's id (16 bytes, zero-padded ASCII), the client's clock in
//! milliseconds since the Unix epoch (u64 LE), a nonce (u64 LE), and the first 16 bytes of
//! HMAC-SHA256 under the key's secret over everything before the tag: the 24 header bytes as
//! sent (their payload length counts the trailer), the service payload, the key id, the time
//! and the nonce. The secret never travels; a captured frame cannot be altered, and a server
//! refuses it again (same key and nonce) or once its time is out of the server's window.

use crate::frame::{Header, HEADER_LEN};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Header flag: the payload ends with an [`AuthTrailer`].
pub const FLAG_AUTH: u16 = 0x0001;
pub const KEY_ID_LEN: usize = 16;
pub const TAG_LEN: usize = 16;
pub const AUTH_TRAILER_LEN: usize = KEY_ID_LEN + 8 + 8 + TAG_LEN;

/// The trailer of an authenticated frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthTrailer {
    pub key_id: [u8; KEY_ID_LEN],
    pub time_ms: u64,
    pub nonce: u64,
    pub tag: [u8; TAG_LEN],
}

/// A key id as it travels: ASCII, at most 16 bytes, zero-padded.
pub fn key_id_bytes(id: &str) -> Option<[u8; KEY_ID_LEN]> {
    if id.is_empty() || id.len() > KEY_ID_LEN || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    let mut out = [0u8; KEY_ID_LEN];
    out[..id.len()].copy_from_slice(id.as_bytes());
    Some(out)
}

fn mac(secret: &[u8], header: &[u8; HEADER_LEN], body: &[u8]) -> [u8; TAG_LEN] {
    let mut m = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(header);
    m.update(body);
    let full = m.finalize().into_bytes();
    let mut tag = [0u8; TAG_LEN];
    tag.copy_from_slice(&full[..TAG_LEN]);
    tag
}

/// Encodes an authenticated request frame into `out`: `header` (its flags get
/// [`FLAG_AUTH`], its length the trailer), `payload`, then the trailer.
pub fn encode_signed(
    mut header: Header,
    payload: &[u8],
    key_id: &[u8; KEY_ID_LEN],
    secret: &[u8],
    time_ms: u64,
    nonce: u64,
    out: &mut Vec<u8>,
) {
    header.flags |= FLAG_AUTH;
    header.payload_len = (payload.len() + AUTH_TRAILER_LEN) as u32;
    let mut h = [0u8; HEADER_LEN];
    header.encode(&mut h);
    let start = out.len();
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
    out.extend_from_slice(key_id);
    out.extend_from_slice(&time_ms.to_le_bytes());
    out.extend_from_slice(&nonce.to_le_bytes());
    let tag = {
        let (head, body) = out[start..].split_at(HEADER_LEN);
        mac(secret, head.try_into().expect("header"), body)
    };
    out.extend_from_slice(&tag);
}

/// Splits an authenticated frame's payload into the service payload and the trailer (None
/// when the flag is off or the payload is shorter than a trailer).
pub fn split_signed<'a>(header: &Header, payload: &'a [u8]) -> Option<(&'a [u8], AuthTrailer)> {
    if header.flags & FLAG_AUTH == 0 || payload.len() < AUTH_TRAILER_LEN {
        return None;
    }
    let (app, t) = payload.split_at(payload.len() - AUTH_TRAILER_LEN);
    let u64_at = |at: usize| u64::from_le_bytes(t[at..at + 8].try_into().expect("8 bytes"));
    Some((
        app,
        AuthTrailer {
            key_id: t[..KEY_ID_LEN].try_into().expect("id"),
            time_ms: u64_at(KEY_ID_LEN),
            nonce: u64_at(KEY_ID_LEN + 8),
            tag: t[KEY_ID_LEN + 16..].try_into().expect("tag"),
        },
    ))
}

/// Whether `payload` (service payload and trailer, as received under `header`) carries a
/// tag made with `secret`. Compared in constant time.
pub fn verify_signed(header: &Header, payload: &[u8], secret: &[u8]) -> bool {
    if payload.len() < AUTH_TRAILER_LEN {
        return false;
    }
    let mut h = [0u8; HEADER_LEN];
    header.encode(&mut h);
    let (body, tag) = payload.split_at(payload.len() - TAG_LEN);
    let mut m = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(&h);
    m.update(body);
    m.verify_truncated_left(tag).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Frame;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_signed_frame_verifies_and_any_changed_byte_does_not(
            payload in proptest::collection::vec(any::<u8>(), 0..200),
            flip in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let id = key_id_bytes("alice").unwrap();
            let mut f = Vec::new();
            encode_signed(Header::request(3, 42, 0), &payload, &id, b"s3cret-s3cret-16", 1_700_000_000_000, 7, &mut f);
            let d = Frame::decode_datagram(&f, 65_000).unwrap();
            let (app, t) = split_signed(&d.header, d.payload).unwrap();
            prop_assert_eq!(app, &payload[..]);
            prop_assert_eq!((t.key_id, t.time_ms, t.nonce), (id, 1_700_000_000_000, 7));
            prop_assert!(verify_signed(&d.header, d.payload, b"s3cret-s3cret-16"));
            prop_assert!(!verify_signed(&d.header, d.payload, b"another-secret!!"));
            let i = flip.index(f.len());
            f[i] ^= 1 << bit;
            if let Ok(d) = Frame::decode_datagram(&f, 65_000) {
                prop_assert!(!verify_signed(&d.header, d.payload, b"s3cret-s3cret-16"));
            }
        }
    }

    #[test]
    fn key_ids_are_short_printable_ascii() {
        assert!(key_id_bytes("alice").is_some());
        assert!(key_id_bytes("").is_none());
        assert!(key_id_bytes("seventeen-chars!!").is_none());
        assert!(key_id_bytes("a b").is_none());
    }
}
