//! The fixed 24-byte frame header and whole-frame decoding.

use thiserror::Error;

/// `b"CH"` read as a little-endian u16: the first two bytes of every frame.
pub const MAGIC: u16 = u16::from_le_bytes(*b"CH");
pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 24;
/// Largest payload a v1 frame may carry; also what fits in one UDP datagram with the header.
pub const MAX_PAYLOAD: usize = 65_507 - HEADER_LEN;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    Request = 1,
    Response = 2,
    Error = 3,
    GoAway = 4,
}

impl Kind {
    pub fn from_u8(v: u8) -> Option<Kind> {
        match v {
            1 => Some(Kind::Request),
            2 => Some(Kind::Response),
            3 => Some(Kind::Error),
            4 => Some(Kind::GoAway),
            _ => None,
        }
    }
}

/// The fixed header. `timeout_us` is the client's deadline relative to arrival (0 = the
/// server's default); it is only meaningful on requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub service: u16,
    pub flags: u16,
    pub request_id: u64,
    pub payload_len: u32,
    pub timeout_us: u32,
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum FrameError {
    #[error("need {needed} bytes, have {have}")]
    Short { needed: usize, have: usize },
    #[error("bad magic {0:#06x}")]
    BadMagic(u16),
    #[error("unsupported protocol version {0}")]
    BadVersion(u8),
    #[error("unknown frame kind {0}")]
    BadKind(u8),
    #[error("payload of {0} bytes exceeds the limit of {1}")]
    TooLarge(usize, usize),
    #[error("datagram holds {have} payload bytes but the header says {declared}")]
    LengthMismatch { declared: usize, have: usize },
}

impl FrameError {
    /// Errors that mean "this is not a Cohort v1 frame at all". A server never answers those
    /// over UDP (no reflection) and closes the TCP connection.
    pub fn is_foreign(&self) -> bool {
        matches!(self, FrameError::BadMagic(_) | FrameError::BadVersion(_))
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl Header {
    pub fn request(service: u16, request_id: u64, payload_len: usize) -> Header {
        Header {
            kind: Kind::Request,
            service,
            flags: 0,
            request_id,
            payload_len: payload_len as u32,
            timeout_us: 0,
        }
    }

    /// Decodes the header only. Checks magic and version first (foreign traffic), then kind;
    /// the payload length is checked against `max_payload`.
    pub fn decode(b: &[u8], max_payload: usize) -> Result<Header, FrameError> {
        if b.len() >= 2 && u16_at(b, 0) != MAGIC {
            return Err(FrameError::BadMagic(u16_at(b, 0)));
        }
        if b.len() >= 3 && b[2] != VERSION {
            return Err(FrameError::BadVersion(b[2]));
        }
        if b.len() < HEADER_LEN {
            return Err(FrameError::Short {
                needed: HEADER_LEN,
                have: b.len(),
            });
        }
        let kind = Kind::from_u8(b[3]).ok_or(FrameError::BadKind(b[3]))?;
        let payload_len = u32_at(b, 16);
        if payload_len as usize > max_payload {
            return Err(FrameError::TooLarge(payload_len as usize, max_payload));
        }
        Ok(Header {
            kind,
            service: u16_at(b, 4),
            flags: u16_at(b, 6),
            request_id: u64_at(b, 8),
            payload_len,
            timeout_us: u32_at(b, 20),
        })
    }

    pub fn encode(&self, out: &mut [u8; HEADER_LEN]) {
        out[0..2].copy_from_slice(&MAGIC.to_le_bytes());
        out[2] = VERSION;
        out[3] = self.kind as u8;
        out[4..6].copy_from_slice(&self.service.to_le_bytes());
        out[6..8].copy_from_slice(&self.flags.to_le_bytes());
        out[8..16].copy_from_slice(&self.request_id.to_le_bytes());
        out[16..20].copy_from_slice(&self.payload_len.to_le_bytes());
        out[20..24].copy_from_slice(&self.timeout_us.to_le_bytes());
    }
}

/// A decoded frame borrowing its payload from the input buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    pub header: Header,
    pub payload: &'a [u8],
}

impl<'a> Frame<'a> {
    /// Decodes exactly one frame that must fill `b` (a UDP datagram).
    pub fn decode_datagram(b: &'a [u8], max_payload: usize) -> Result<Frame<'a>, FrameError> {
        let header = Header::decode(b, max_payload)?;
        let have = b.len() - HEADER_LEN;
        if have != header.payload_len as usize {
            return Err(FrameError::LengthMismatch {
                declared: header.payload_len as usize,
                have,
            });
        }
        Ok(Frame {
            header,
            payload: &b[HEADER_LEN..],
        })
    }

    /// Decodes the first frame of a byte stream (TCP). `Ok(None)` means "need more bytes";
    /// on success returns the frame and the number of bytes it used.
    pub fn decode_stream(
        b: &'a [u8],
        max_payload: usize,
    ) -> Result<Option<(Frame<'a>, usize)>, FrameError> {
        let header = match Header::decode(b, max_payload) {
            Ok(h) => h,
            Err(FrameError::Short { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let total = HEADER_LEN + header.payload_len as usize;
        if b.len() < total {
            return Ok(None);
        }
        Ok(Some((
            Frame {
                header,
                payload: &b[HEADER_LEN..total],
            },
            total,
        )))
    }
}

/// Appends one frame (header + payload) to `out`. The header's `payload_len` is set from
/// `payload`.
pub fn encode_frame(mut header: Header, payload: &[u8], out: &mut Vec<u8>) {
    assert!(
        payload.len() <= u32::MAX as usize,
        "payload length must fit the u32 field"
    );
    header.payload_len = payload.len() as u32;
    let mut h = [0u8; HEADER_LEN];
    header.encode(&mut h);
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
}
