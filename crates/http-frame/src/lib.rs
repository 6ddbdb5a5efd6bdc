//! HTTP/1.1 request framing checked before hyper sees a byte (RFC 9112): every request head is
//! parsed here first (httparse, the parser hyper itself uses), and one that RFC 9112 says to
//! refuse - Content-Length with Transfer-Encoding, a Content-Length that is not one number, a
//! transfer coding other than a lone `chunked`, a head over `MAX_HEAD` bytes or 100 fields, a
//! version other than 1.0/1.1, a malformed line - stops the stream at its first byte. The
//! connection then answers it with the gateway's JSON error body and closes (hyper's own
//! refusals carry no body, and hyper drops a Content-Length it sees beside Transfer-Encoding
//! before a handler could notice).
//!
//! The scanner follows each request to its end (a Content-Length body, or chunked framing to
//! its last chunk and trailers) so that it knows where the next head begins; a head that has
//! not arrived whole is held back here, so hyper only ever receives whole, checked heads.

/// Largest request head (request line and fields) accepted: 16 KiB, as a 431 says.
pub const MAX_HEAD: usize = 16 << 10;
/// Most header fields in one head (hyper's own default).
pub const MAX_FIELDS: usize = 100;
/// Longest chunk-size line (with its extensions) of a chunked body.
const MAX_CHUNK_LINE: usize = 1024;

/// Why a request head is refused: its status, the error name and message of the JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: &'static str,
    pub code: &'static str,
    pub message: String,
}

impl Refusal {
    fn bad(message: impl Into<String>) -> Refusal {
        Refusal {
            status: "400 Bad Request",
            code: "BAD_REQUEST",
            message: message.into(),
        }
    }

    fn too_large(message: impl Into<String>) -> Refusal {
        Refusal {
            status: "431 Request Header Fields Too Large",
            code: "HEADERS_TOO_LARGE",
            message: message.into(),
        }
    }

    /// The whole HTTP/1.1 response: JSON body, `connection: close`.
    pub fn response(&self) -> Vec<u8> {
        canned(self.status, self.code, &self.message, false)
    }
}

/// A complete HTTP/1.1 response with a JSON error body that closes the connection, for
/// clients hyper is not answering (refused at accept, timed out reading a request head).
pub fn canned(status: &str, code: &str, message: &str, retry: bool) -> Vec<u8> {
    let body = serde_json::json!({ "error": code, "message": message }).to_string();
    let retry = if retry { "retry-after: 1\r\n" } else { "" };
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{retry}connection: close\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// How the stream stopped being a valid request sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// At a request head: nothing of it reached hyper; it is answered with this refusal.
    Head(Refusal),
    /// Inside a chunked body whose head hyper already has: the body ends there, hyper reports
    /// the broken body to its handler (which answers it), and the connection closes.
    Body(String),
}

/// What one call of `Scanner::scan` found in the bytes it was given.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// Bytes held back by earlier calls (a head that had not arrived whole), now checked:
    /// they go to hyper before `bytes[..pass]`.
    pub released: Vec<u8>,
    /// How many of the given bytes go to hyper now; the rest are held back or refused.
    pub pass: usize,
    /// Set when the stream stops being valid at the end of what passes.
    pub stop: Option<Stop>,
}

/// Where the scanner is in the request stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Body(u64),
    ChunkSize,
    ChunkData(u64),
    /// The CRLF after a chunk's data (how many of its two bytes seen).
    ChunkEnd(u8),
    /// Trailer lines after the last chunk (bytes of trailers seen, and of the current line).
    Trailers(usize, usize),
    Stopped,
}

/// The body a checked head announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
}

/// Follows one connection's request stream (module doc).
#[derive(Debug)]
pub struct Scanner {
    state: State,
    /// A head (or a chunk-size line) that has not arrived whole yet.
    held: Vec<u8>,
    /// Requests passed whole to hyper.
    ends: u64,
    /// Bytes of the current request seen so far (head included).
    request_bytes: u64,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner::new()
    }
}

impl Scanner {
    pub fn new() -> Scanner {
        Scanner {
            state: State::Head,
            held: Vec::new(),
            ends: 0,
            request_bytes: 0,
        }
    }

    /// Requests passed whole (head and body) so far.
    pub fn ends(&self) -> u64 {
        self.ends
    }

    /// Whether a request has begun and not ended (its head held, or its body running).
    pub fn mid_request(&self) -> bool {
        match self.state {
            State::Head => !self.held.is_empty(),
            State::Stopped => false,
            _ => true,
        }
    }

    /// Bytes of the current request seen so far (0 between requests).
    pub fn request_bytes(&self) -> u64 {
        self.request_bytes
    }

    pub fn stopped(&self) -> bool {
        self.state == State::Stopped
    }

    /// Scans the next bytes of the stream (module doc).
    pub fn scan(&mut self, bytes: &[u8]) -> Scan {
        let mut out = Scan::default();
        let mut at = 0;
        while at < bytes.len() && self.state != State::Stopped {
            let before = at;
            // Where the head this step works on began in `bytes` (0 if it began earlier).
            let head_start = if self.held.is_empty() { before } else { 0 };
            let was_head = self.state == State::Head;
            let ends = self.ends;
            if let Err(stop) = self.step(bytes, &mut at, &mut out) {
                out.pass = if was_head { head_start } else { before };
                out.released.clear();
                self.state = State::Stopped;
                self.held = Vec::new();
                out.stop = Some(stop);
                return out;
            }
            if self.ends != ends {
                self.request_bytes = 0;
            } else {
                self.request_bytes += (at - before) as u64;
            }
            if self.state == State::Head && !self.held.is_empty() {
                // A head held back whole (it took every byte left): what passes ends before it.
                debug_assert_eq!(at, bytes.len());
                out.pass = head_start;
                return out;
            }
            out.pass = at;
        }
        out
    }

    /// One step from `bytes[*at..]`: a whole head checked, a piece of body passed, or bytes
    /// held back.
    fn step(&mut self, bytes: &[u8], at: &mut usize, out: &mut Scan) -> Result<(), Stop> {
        let rest = &bytes[*at..];
        match self.state {
            State::Head => self.head(bytes, at, out),
            State::Body(left) => {
                let n = (rest.len() as u64).min(left);
                *at += n as usize;
                self.state = if n == left {
                    self.end_request();
                    State::Head
                } else {
                    State::Body(left - n)
                };
                Ok(())
            }
            State::ChunkSize => {
                let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                    self.held.extend_from_slice(rest);
                    *at = bytes.len();
                    if self.held.len() > MAX_CHUNK_LINE {
                        return Err(Stop::Body("chunk-size line too long".into()));
                    }
                    return Ok(());
                };
                self.held.extend_from_slice(&rest[..=nl]);
                *at += nl + 1;
                let line = std::mem::take(&mut self.held);
                let size = match httparse::parse_chunk_size(&line) {
                    Ok(httparse::Status::Complete((_, size))) => size,
                    _ => return Err(Stop::Body("invalid chunk size line".into())),
                };
                self.state = if size == 0 {
                    State::Trailers(0, 0)
                } else {
                    State::ChunkData(size)
                };
                Ok(())
            }
            State::ChunkData(left) => {
                let n = (rest.len() as u64).min(left);
                *at += n as usize;
                self.state = if n == left {
                    State::ChunkEnd(0)
                } else {
                    State::ChunkData(left - n)
                };
                Ok(())
            }
            State::ChunkEnd(seen) => {
                let want = b"\r\n"[seen as usize];
                if rest[0] != want {
                    return Err(Stop::Body("chunk data not followed by CRLF".into()));
                }
                *at += 1;
                self.state = if seen == 1 {
                    State::ChunkSize
                } else {
                    State::ChunkEnd(1)
                };
                Ok(())
            }
            State::Trailers(total, line) => {
                let b = rest[0];
                *at += 1;
                let (total, line) = (total + 1, line + 1);
                if total > MAX_HEAD {
                    return Err(Stop::Body("chunked trailers too large".into()));
                }
                self.state = match b {
                    // An empty line (CRLF or a lone LF) ends the trailers and the request.
                    b'\n' if line <= 2 => {
                        self.end_request();
                        State::Head
                    }
                    b'\n' => State::Trailers(total, 0),
                    _ => State::Trailers(total, line),
                };
                Ok(())
            }
            State::Stopped => unreachable!("no step after a stop"),
        }
    }

    fn end_request(&mut self) {
        self.ends += 1;
        self.request_bytes = 0;
    }

    /// A request head from `bytes[*at..]` (after what `held` already has).
    fn head(&mut self, bytes: &[u8], at: &mut usize, out: &mut Scan) -> Result<(), Stop> {
        let rest = &bytes[*at..];
        let had = self.held.len();
        // Parse in place when nothing is held (the usual case: a whole head in one read).
        let parsed = if had == 0 {
            parse_head(rest)?
        } else {
            let take = rest.len().min(MAX_HEAD + 1 - had.min(MAX_HEAD));
            self.held.extend_from_slice(&rest[..take]);
            let p = parse_head(&self.held)?;
            self.held.truncate(had);
            p
        };
        match parsed {
            None => {
                let total = had + rest.len();
                if total > MAX_HEAD {
                    return Err(Stop::Head(Refusal::too_large(format!(
                        "request head over {MAX_HEAD} bytes"
                    ))));
                }
                self.held.extend_from_slice(rest);
                *at = bytes.len();
                Ok(())
            }
            Some((len, framing)) => {
                let from_rest = len - had;
                if had > 0 {
                    // Only the first head of a scan can have been held (it began earlier).
                    out.released = std::mem::take(&mut self.held);
                }
                *at += from_rest;
                self.state = match framing {
                    Framing::None | Framing::Length(0) => {
                        self.end_request();
                        State::Head
                    }
                    Framing::Length(n) => State::Body(n),
                    Framing::Chunked => State::ChunkSize,
                };
                Ok(())
            }
        }
    }
}

/// A whole head at the start of `buf` and its body's framing, None while it is incomplete,
/// or the refusal of a head RFC 9112 says to refuse.
fn parse_head(buf: &[u8]) -> Result<Option<(usize, Framing)>, Stop> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut fields);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(Stop::Head(parse_refusal(e))),
    };
    if len > MAX_HEAD {
        return Err(Stop::Head(Refusal::too_large(format!(
            "request head over {MAX_HEAD} bytes"
        ))));
    }
    check_head(&req).map(|f| Some((len, f))).map_err(Stop::Head)
}

fn parse_refusal(e: httparse::Error) -> Refusal {
    match e {
        httparse::Error::TooManyHeaders => {
            Refusal::too_large(format!("more than {MAX_FIELDS} header fields"))
        }
        httparse::Error::Version => {
            Refusal::bad("unsupported HTTP version (HTTP/1.0 and HTTP/1.1 only)")
        }
        httparse::Error::Token => Refusal::bad("invalid request line: the method is not a token"),
        httparse::Error::HeaderName => Refusal::bad("invalid header field name"),
        httparse::Error::HeaderValue => Refusal::bad("invalid header field value"),
        httparse::Error::NewLine => Refusal::bad("invalid line ending in the request head"),
        other => Refusal::bad(format!("malformed request head: {other}")),
    }
}

/// The checks hyper makes of a head, and the framing rules of RFC 9112 section 6.
fn check_head(req: &httparse::Request<'_, '_>) -> Result<Framing, Refusal> {
    let path = req.path.unwrap_or("");
    if http::Uri::try_from(path).is_err() {
        return Err(Refusal::bad(format!(
            "invalid request target {:?}",
            truncated(path)
        )));
    }
    let mut length: Option<u64> = None;
    let mut codings: Vec<String> = Vec::new();
    let mut te = false;
    for f in req.headers.iter() {
        if f.name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(f.value).unwrap_or("").trim();
            let n = (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .then(|| v.parse::<u64>().ok())
                .flatten()
                .filter(|&n| n < u64::MAX - 1)
                .ok_or_else(|| {
                    Refusal::bad(format!("invalid Content-Length {:?}", truncated(v)))
                })?;
            if length.is_some_and(|l| l != n) {
                return Err(Refusal::bad("two different Content-Length values"));
            }
            length = Some(n);
        } else if f.name.eq_ignore_ascii_case("transfer-encoding") {
            te = true;
            let v = String::from_utf8_lossy(f.value);
            codings.extend(
                v.split(',')
                    .map(|c| c.trim().to_ascii_lowercase())
                    .filter(|c| !c.is_empty()),
            );
        }
    }
    if !te {
        return Ok(length.map_or(Framing::None, Framing::Length));
    }
    if length.is_some() {
        return Err(Refusal::bad(
            "Content-Length together with Transfer-Encoding: the body's length is ambiguous",
        ));
    }
    if req.version != Some(1) {
        return Err(Refusal::bad("Transfer-Encoding in an HTTP/1.0 request"));
    }
    if codings != ["chunked"] {
        return Err(Refusal {
            status: "501 Not Implemented",
            code: "NOT_IMPLEMENTED",
            message: format!(
                "transfer coding {:?} is not supported (only a lone chunked)",
                codings.join(", ")
            ),
        });
    }
    Ok(Framing::Chunked)
}

fn truncated(s: &str) -> String {
    s.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn refused(input: &[u8]) -> Refusal {
        match Scanner::new().scan(input).stop {
            Some(Stop::Head(r)) => r,
            other => panic!(
                "{:?}: not refused at the head: {other:?}",
                String::from_utf8_lossy(input)
            ),
        }
    }

    #[test]
    fn ambiguous_and_malformed_framing_is_refused() {
        for (head, status) in [
            (
                "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
                "400",
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
                "400",
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\nContent-Length: 3\r\n\r\n",
                "400",
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\nContent-Length: 3\r\n\r\n",
                "400",
            ),
            ("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "400"),
            (
                "POST / HTTP/1.1\r\nContent-Length: 18446744073709551617\r\n\r\n",
                "400",
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                "400",
            ),
            ("POST / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n", "400"),
            ("GET / HTTP/2.0\r\n\r\n", "400"),
            ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "400"),
            ("G\0T / HTTP/1.1\r\n\r\n", "400"),
            ("garbage\r\n\r\n", "400"),
            (
                "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
                "400",
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                "501",
            ),
        ] {
            let r = refused(head.as_bytes());
            assert!(r.status.starts_with(status), "{head:?}: {r:?}");
        }
    }

    #[test]
    fn oversized_heads_are_431() {
        let many: String = (0..10_000).map(|i| format!("x-{i}: y\r\n")).collect();
        let big_field = format!("GET / HTTP/1.1\r\nx: {}\r\n\r\n", "a".repeat(1 << 20));
        let big_url = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(1 << 20));
        for head in [format!("GET / HTTP/1.1\r\n{many}\r\n"), big_field, big_url] {
            assert!(refused(head.as_bytes()).status.starts_with("431"));
        }
        // Fed a byte at a time, the held head is refused as soon as it passes the limit.
        let mut s = Scanner::new();
        let slow = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_HEAD));
        let stop = slow
            .as_bytes()
            .chunks(1000)
            .find_map(|c| s.scan(c).stop)
            .expect("refused");
        assert!(matches!(stop, Stop::Head(r) if r.status.starts_with("431")));
    }

    #[test]
    fn pipelined_requests_pass_and_the_bad_one_stops_at_its_first_byte() {
        let good = "POST /v1/echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello";
        let chunked = "POST /v1/echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\n";
        let bad = "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        let stream = format!("{good}{chunked}GET /healthz HTTP/1.1\r\n\r\n{bad}");
        let mut s = Scanner::new();
        let r = s.scan(stream.as_bytes());
        assert_eq!(r.pass, stream.len() - bad.len());
        assert!(matches!(r.stop, Some(Stop::Head(_))));
        assert_eq!(s.ends(), 3);
    }

    #[test]
    fn a_head_split_anywhere_is_released_whole() {
        let stream =
            b"POST /v1/echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\n\r\n";
        for cut in 1..stream.len() {
            let mut s = Scanner::new();
            let mut passed = Vec::new();
            for part in [&stream[..cut], &stream[cut..]] {
                let r = s.scan(part);
                assert_eq!(r.stop, None);
                passed.extend_from_slice(&r.released);
                passed.extend_from_slice(&part[..r.pass]);
            }
            assert_eq!(passed, stream, "cut at {cut}");
            assert_eq!(s.ends(), 2);
            assert!(!s.mid_request());
        }
    }

    #[test]
    fn broken_chunked_bodies_stop_inside_the_body() {
        let head = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        for body in ["zz\r\n", "3\r\nabcX", "1\r\na\r\n0\r\n"] {
            let mut s = Scanner::new();
            let r = s.scan(format!("{head}{body}").as_bytes());
            if body == "1\r\na\r\n0\r\n" {
                assert_eq!(r.stop, None, "trailers still to come");
                assert!(s.mid_request());
            } else {
                assert!(matches!(r.stop, Some(Stop::Body(_))), "{body:?}: {r:?}");
            }
        }
    }

    proptest! {
        /// Whatever the bytes and however they are cut, what passes is a prefix of the input
        /// (held bytes released in order), and a stop is final.
        #[test]
        fn passes_a_prefix_in_order(
            data in proptest::collection::vec(any::<u8>(), 0..400),
            cuts in proptest::collection::vec(1usize..64, 1..10),
        ) {
            let mut s = Scanner::new();
            let mut passed = Vec::new();
            let mut at = 0;
            let mut stopped = false;
            for c in cuts.iter().cycle().take(64) {
                if at >= data.len() { break; }
                let end = (at + c).min(data.len());
                let r = s.scan(&data[at..end]);
                prop_assert!(!stopped || (r.pass == 0 && r.released.is_empty()));
                passed.extend_from_slice(&r.released);
                passed.extend_from_slice(&data[at..at + r.pass]);
                stopped |= r.stop.is_some();
                at = end;
            }
            prop_assert_eq!(&data[..passed.len()], &passed[..]);
        }

        /// Valid requests with random bodies, pipelined and cut at random, all pass.
        #[test]
        fn valid_streams_pass_whole(
            bodies in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..6),
            chunked in any::<bool>(),
            cut in 1usize..97,
        ) {
            let mut stream = Vec::new();
            for b in &bodies {
                if chunked {
                    stream.extend_from_slice(b"POST /v1/echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
                    for piece in b.chunks(37) {
                        stream.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                        stream.extend_from_slice(piece);
                        stream.extend_from_slice(b"\r\n");
                    }
                    stream.extend_from_slice(b"0\r\n\r\n");
                } else {
                    stream.extend_from_slice(format!("POST /v1/echo HTTP/1.1\r\nContent-Length: {}\r\n\r\n", b.len()).as_bytes());
                    stream.extend_from_slice(b);
                }
            }
            let mut s = Scanner::new();
            let mut passed = Vec::new();
            for part in stream.chunks(cut) {
                let r = s.scan(part);
                prop_assert_eq!(r.stop, None);
                passed.extend_from_slice(&r.released);
                passed.extend_from_slice(&part[..r.pass]);
            }
            prop_assert_eq!(passed, stream);
            prop_assert_eq!(s.ends(), bodies.len() as u64);
        }
    }
}
