//! Errors of the collections, each with the HTTP status and the code name the gateway's JSON
//! errors use (`{"error": CODE, "message": ...}`), so a caller maps them without a table.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The request is wrong (bad JSON, wrong dimension, NaN, unknown attribute, ...): 400.
    BadRequest,
    /// No such collection: 404.
    NotFound,
    /// The collection exists already: 409.
    Conflict,
    /// A batch or list over its documented limit: 413.
    TooLarge,
    /// The write queue of a collection is full: 503 (retry later).
    Overloaded,
    /// Writes refused because the log cannot be written (full disk, I/O error): 507.
    Storage,
    /// A collection that cannot be served (its log failed in a way that leaves its state on
    /// disk unknown): 503 until restart.
    Unavailable,
    /// A bug or an unexpected I/O failure: 500.
    Internal,
}

impl Kind {
    pub fn http_status(self) -> u16 {
        match self {
            Kind::BadRequest => 400,
            Kind::NotFound => 404,
            Kind::Conflict => 409,
            Kind::TooLarge => 413,
            Kind::Overloaded | Kind::Unavailable => 503,
            Kind::Storage => 507,
            Kind::Internal => 500,
        }
    }

    /// The gateway's error code names (cohort_proto::ErrorCode::name where one exists).
    pub fn name(self) -> &'static str {
        match self {
            Kind::BadRequest => "BAD_REQUEST",
            Kind::NotFound => "NOT_FOUND",
            Kind::Conflict => "CONFLICT",
            Kind::TooLarge => "TOO_LARGE",
            Kind::Overloaded => "OVERLOADED",
            Kind::Storage => "INSUFFICIENT_STORAGE",
            Kind::Unavailable => "UNAVAILABLE",
            Kind::Internal => "INTERNAL",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: Kind,
    pub message: String,
}

impl Error {
    pub fn new(kind: Kind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }
    pub fn bad(message: impl Into<String>) -> Error {
        Error::new(Kind::BadRequest, message)
    }
    pub fn not_found(name: &str) -> Error {
        Error::new(Kind::NotFound, format!("no collection {name:?}"))
    }
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(Kind::Internal, message)
    }
    /// An I/O failure while writing (a full disk, a quota, a failing device): 507, the
    /// operating system's words in the message.
    pub fn io(what: &str, e: &std::io::Error) -> Error {
        Error::new(Kind::Storage, format!("{what}: {e}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.name(), self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
