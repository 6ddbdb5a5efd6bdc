//! Error frames: a code and a short UTF-8 message.

use crate::frame::FrameError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u16)]
pub enum ErrorCode {
    BadRequest = 1,
    UnknownService = 2,
    TooLarge = 3,
    Overloaded = 4,
    Timeout = 5,
    Unavailable = 6,
    Internal = 7,
    /// UDP only: the answer would be larger than the request datagram; ask over TCP.
    Truncated = 8,
    /// Authentication is on and the request carries no valid key (or a replayed one).
    Unauthorized = 9,
    /// The request's key is valid but not for this service.
    Forbidden = 10,
    /// The request names something the server's data does not hold (facever: a person with
    /// no reference in the database).
    NotFound = 11,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 11] = [
        ErrorCode::BadRequest,
        ErrorCode::UnknownService,
        ErrorCode::TooLarge,
        ErrorCode::Overloaded,
        ErrorCode::Timeout,
        ErrorCode::Unavailable,
        ErrorCode::Internal,
        ErrorCode::Truncated,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
    ];

    pub fn from_u16(v: u16) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| *c as u16 == v)
    }

    /// The stable name used in logs, metrics labels and load-generator JSON.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "BAD_REQUEST",
            ErrorCode::UnknownService => "UNKNOWN_SERVICE",
            ErrorCode::TooLarge => "TOO_LARGE",
            ErrorCode::Overloaded => "OVERLOADED",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::Unavailable => "UNAVAILABLE",
            ErrorCode::Internal => "INTERNAL",
            ErrorCode::Truncated => "TRUNCATED",
            ErrorCode::Unauthorized => "UNAUTHORIZED",
            ErrorCode::Forbidden => "FORBIDDEN",
            ErrorCode::NotFound => "NOT_FOUND",
        }
    }

    /// `name` in lower case: the `outcome` label of the request counters.
    pub fn label(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::UnknownService => "unknown_service",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
            ErrorCode::Truncated => "truncated",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
        }
    }

    /// HTTP status the gateway maps this code to.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::BadRequest => 400,
            ErrorCode::UnknownService => 404,
            ErrorCode::TooLarge => 413,
            ErrorCode::Overloaded => 503,
            ErrorCode::Timeout => 504,
            ErrorCode::Unavailable => 503,
            ErrorCode::Internal => 500,
            // Never sent over HTTP (its answers have no size bound but the server's).
            ErrorCode::Truncated => 500,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
        }
    }
}

/// Longest message carried in an error frame; longer messages are cut at a char boundary.
pub const MAX_ERROR_MESSAGE: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorPayload {
    pub code: ErrorCode,
    pub message: String,
}

impl ErrorPayload {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ErrorPayload {
        let mut message = message.into();
        if message.len() > MAX_ERROR_MESSAGE {
            let mut cut = MAX_ERROR_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        ErrorPayload { code, message }
    }

    /// Layout: code u16 LE, message length u16 LE, message bytes (UTF-8).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.code as u16).to_le_bytes());
        out.extend_from_slice(&(self.message.len() as u16).to_le_bytes());
        out.extend_from_slice(self.message.as_bytes());
    }

    pub fn decode(b: &[u8]) -> Result<ErrorPayload, FrameError> {
        if b.len() < 4 {
            return Err(FrameError::Short {
                needed: 4,
                have: b.len(),
            });
        }
        let raw = u16::from_le_bytes([b[0], b[1]]);
        let code = ErrorCode::from_u16(raw).ok_or(FrameError::BadKind(raw as u8))?;
        let len = u16::from_le_bytes([b[2], b[3]]) as usize;
        if b.len() != 4 + len {
            return Err(FrameError::LengthMismatch {
                declared: len,
                have: b.len() - 4,
            });
        }
        let message = String::from_utf8_lossy(&b[4..]).into_owned();
        Ok(ErrorPayload { code, message })
    }
}
