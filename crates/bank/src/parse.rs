//! The HTTP/1.1 request parser, one request per call - the CPU twin of the GPU parser, which
//! runs it with one thread per request over a cohort's request slots. It walks the bytes once
//! with no allocation and fixed-size outputs: the request line (method, path -> type, query),
//! the headers it needs (Content-Length, Cookie; others skipped), the body (form parameters),
//! and the parameters the type takes. Anything else is a clear error with its HTTP status.

use super::besim::NAME;
use super::kinds::{Kind, Method};

/// Largest request accepted (request line + headers + body): one request slot.
pub const MAX_REQUEST: usize = 2048;
/// Largest form body accepted.
pub const MAX_BODY: usize = 512;
/// Numeric parameters a request may carry.
pub const NUMS: usize = 3;
/// Text parameters a request may carry (each at most NAME bytes after decoding).
pub const TEXTS: usize = 2;

/// Why a request is refused: the status and page the client gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Refusal {
    /// 400: not HTTP/1.1 as this server reads it, or a bad or missing parameter.
    Malformed = 1,
    /// 404: no such page.
    NotFound,
    /// 405: the page exists, not for this method.
    WrongMethod,
    /// 413: the request or its body is over the limit.
    TooLarge,
    /// 401: no session cookie, a forged one, or one logged out (checked after parsing).
    NoSession,
    /// 401: a login with an unknown user or a wrong password.
    BadLogin,
    /// 503: the session table is full.
    Full,
    /// 503: the user's records could not be fetched from the backend (memcached down, or
    /// the record missing or damaged).
    Unavailable,
}

impl Refusal {
    pub fn status(self) -> u16 {
        match self {
            Refusal::Malformed => 400,
            Refusal::NotFound => 404,
            Refusal::WrongMethod => 405,
            Refusal::TooLarge => 413,
            Refusal::NoSession | Refusal::BadLogin => 401,
            Refusal::Full | Refusal::Unavailable => 503,
        }
    }
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Malformed => "Bad Request",
            Refusal::NotFound => "Not Found",
            Refusal::WrongMethod => "Method Not Allowed",
            Refusal::TooLarge => "Content Too Large",
            Refusal::NoSession | Refusal::BadLogin => "Unauthorized",
            Refusal::Full | Refusal::Unavailable => "Service Unavailable",
        }
    }
    /// The sentence on its page.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::Malformed => "The request could not be read.",
            Refusal::NotFound => "There is no such page.",
            Refusal::WrongMethod => "This page does not take that method.",
            Refusal::TooLarge => "The request is too large.",
            Refusal::NoSession => "Please log in.",
            Refusal::BadLogin => "Unknown user or wrong password.",
            Refusal::Full => "Too many sessions; try again later.",
            Refusal::Unavailable => "Your records are unavailable; try again later.",
        }
    }
    pub const ALL: [Refusal; 8] = [
        Refusal::Malformed,
        Refusal::NotFound,
        Refusal::WrongMethod,
        Refusal::TooLarge,
        Refusal::NoSession,
        Refusal::BadLogin,
        Refusal::Full,
        Refusal::Unavailable,
    ];
}

/// A session cookie: `SID=<user>-<16 hex digits>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cookie {
    pub user: u32,
    pub token: u64,
}

/// A parsed request: fixed size (the GPU's parsed-request slot holds the same fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed {
    pub kind: Kind,
    pub cookie: Option<Cookie>,
    /// The type's numeric parameters, in the order [`params`] lists them.
    pub nums: [u64; NUMS],
    /// The type's text parameters (space padded), in that order.
    pub texts: [[u8; NAME]; TEXTS],
}

/// What parameters a type takes: (numeric names, text names). Every one is required.
pub fn params(kind: Kind) -> (&'static [&'static str], &'static [&'static str]) {
    match kind {
        Kind::Login => (&["userid", "password"], &[]),
        Kind::BillPayStatus => (&["start", "end"], &[]),
        Kind::ChangeProfile => (&["phone"], &["street", "city"]),
        Kind::CheckDetail => (&["check"], &[]),
        Kind::PlaceCheckOrder => (&["account", "design", "boxes"], &[]),
        Kind::PostPayee => (&["account"], &["name"]),
        // amount in cents
        Kind::PostTransfer => (&["from", "to", "amount"], &[]),
        _ => (&[], &[]),
    }
}

/// Parses one whole request (`req` is exactly its bytes: the framing layer cut it).
pub fn parse(req: &[u8]) -> Result<Parsed, Refusal> {
    if req.len() > MAX_REQUEST {
        return Err(Refusal::TooLarge);
    }
    let (line, mut rest) = split_line(req).ok_or(Refusal::Malformed)?;
    // Request line: METHOD SP TARGET SP HTTP/1.1
    let sp1 = find(line, b' ').ok_or(Refusal::Malformed)?;
    let (method, after) = (&line[..sp1], &line[sp1 + 1..]);
    let sp2 = find(after, b' ').ok_or(Refusal::Malformed)?;
    let (target, version) = (&after[..sp2], &after[sp2 + 1..]);
    if version != b"HTTP/1.1" && version != b"HTTP/1.0" {
        return Err(Refusal::Malformed);
    }
    let method = match method {
        b"GET" => Method::Get,
        b"POST" => Method::Post,
        m if !m.is_empty() && m.iter().all(u8::is_ascii_uppercase) => {
            return Err(Refusal::WrongMethod)
        }
        _ => return Err(Refusal::Malformed),
    };
    let (path, query) = match find(target, b'?') {
        Some(q) => (&target[..q], &target[q + 1..]),
        None => (target, &b""[..]),
    };
    if !path.starts_with(b"/") {
        return Err(Refusal::Malformed);
    }
    let kind = Kind::from_path(path).ok_or(Refusal::NotFound)?;
    if kind.info().method != method {
        return Err(Refusal::WrongMethod);
    }
    // Headers, up to the empty line.
    let mut content_length: Option<usize> = None;
    let mut cookie = None;
    loop {
        let (h, r) = split_line(rest).ok_or(Refusal::Malformed)?;
        rest = r;
        if h.is_empty() {
            break;
        }
        let colon = find(h, b':').ok_or(Refusal::Malformed)?;
        let (name, value) = (&h[..colon], trim(&h[colon + 1..]));
        if name.is_empty() || name.iter().any(|&c| c == b' ' || c == b'\t') {
            return Err(Refusal::Malformed);
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            if content_length.is_some() {
                return Err(Refusal::Malformed);
            }
            let n = digits(value).ok_or(Refusal::Malformed)?;
            if n > MAX_BODY as u64 {
                return Err(Refusal::TooLarge);
            }
            content_length = Some(n as usize);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // Chunked bodies are not taken (forms are small; clients send a length).
            return Err(Refusal::Malformed);
        } else if name.eq_ignore_ascii_case(b"cookie") {
            cookie = cookie.or(session_cookie(value));
        }
    }
    let body = rest;
    if body.len() != content_length.unwrap_or(0) {
        return Err(Refusal::Malformed);
    }
    let form = match method {
        Method::Get => query,
        Method::Post => body,
    };
    let mut parsed = Parsed {
        kind,
        cookie,
        nums: [0; NUMS],
        texts: [[b' '; NAME]; TEXTS],
    };
    let (nums, texts) = params(kind);
    let mut seen = 0u32;
    for pair in form.split(|&c| c == b'&').filter(|p| !p.is_empty()) {
        let eq = find(pair, b'=').ok_or(Refusal::Malformed)?;
        let (key, value) = (&pair[..eq], &pair[eq + 1..]);
        if let Some(i) = nums.iter().position(|n| n.as_bytes() == key) {
            parsed.nums[i] = digits(value).ok_or(Refusal::Malformed)?;
            seen |= 1 << i;
        } else if let Some(i) = texts.iter().position(|n| n.as_bytes() == key) {
            parsed.texts[i] = decode_text(value).ok_or(Refusal::Malformed)?;
            seen |= 1 << (NUMS + i);
        }
        // Other keys are ignored, as forms carry buttons and the like.
    }
    let want = ((1u32 << nums.len()) - 1) | (((1u32 << texts.len()) - 1) << NUMS);
    if seen != want {
        return Err(Refusal::Malformed);
    }
    Ok(parsed)
}

fn find(s: &[u8], c: u8) -> Option<usize> {
    s.iter().position(|&x| x == c)
}

/// The line before the first CRLF, and what follows it.
fn split_line(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = s.windows(2).position(|w| w == b"\r\n")?;
    Some((&s[..i], &s[i + 2..]))
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', r @ ..] = s {
        s = r;
    }
    while let [r @ .., b' ' | b'\t'] = s {
        s = r;
    }
    s
}

/// A decimal of 1..=18 digits.
fn digits(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 18 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0, |n, &c| n * 10 + (c - b'0') as u64))
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// A form value: `+` is a space, `%XX` a byte; printable ASCII only (the pages are HTML and
/// show it), at most NAME bytes; `<`, `>`, `&`, `"` refused so no value can inject markup.
fn decode_text(s: &[u8]) -> Option<[u8; NAME]> {
    let mut out = [b' '; NAME];
    let (mut i, mut n) = (0, 0);
    while i < s.len() {
        let c = match s[i] {
            b'+' => b' ',
            b'%' => {
                let c = hex(*s.get(i + 1)?)? << 4 | hex(*s.get(i + 2)?)?;
                i += 2;
                c
            }
            c => c,
        };
        i += 1;
        if !(b' '..=b'~').contains(&c) || matches!(c, b'<' | b'>' | b'&' | b'"') || n == NAME {
            return None;
        }
        out[n] = c;
        n += 1;
    }
    (n > 0).then_some(out)
}

/// `SID=<user>-<16 hex>` among the cookie pairs (`a=b; c=d`).
fn session_cookie(v: &[u8]) -> Option<Cookie> {
    for pair in v.split(|&c| c == b';') {
        let Some(value) = trim(pair).strip_prefix(b"SID=") else {
            continue;
        };
        let dash = find(value, b'-')?;
        let user = digits(&value[..dash]).filter(|&u| u <= u32::MAX as u64)? as u32;
        let t = &value[dash + 1..];
        if t.len() != 16 {
            return None;
        }
        let mut token = 0u64;
        for &c in t {
            token = token << 4 | hex(c)? as u64;
        }
        return Some(Cookie { user, token });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str, cookie: &str) -> Vec<u8> {
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\n\r\n").into_bytes()
    }
    fn post(path: &str, body: &str) -> Vec<u8> {
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    #[test]
    fn parses_each_shape() {
        let p = parse(&post("/bank/login", "userid=42&password=1234")).unwrap();
        assert_eq!(
            (p.kind, p.nums[0], p.nums[1], p.cookie),
            (Kind::Login, 42, 1234, None)
        );
        let p = parse(&get(
            "/bank/bill_pay_status_output?start=20260101&end=20260301",
            "a=b; SID=7-00000000000000ff",
        ))
        .unwrap();
        assert_eq!(p.kind, Kind::BillPayStatus);
        assert_eq!(&p.nums[..2], &[20260101, 20260301]);
        assert_eq!(
            p.cookie,
            Some(Cookie {
                user: 7,
                token: 255
            })
        );
        let p = parse(&post(
            "/bank/change_profile",
            "phone=5551234567&street=1+Main%20St&city=Oz&go=Save",
        ))
        .unwrap();
        assert_eq!(&p.texts[0][..9], b"1 Main St");
        assert_eq!(&p.texts[1][..3], b"Oz ");
    }

    #[test]
    fn refuses_what_it_should() {
        use Refusal::*;
        let cases: Vec<(Vec<u8>, Refusal)> = vec![
            (b"GET /bank/profile HTTP/1.1\r\n".to_vec(), Malformed),
            (b"GET /bank/profile\r\n\r\n".to_vec(), Malformed),
            (b"GET /bank/profile HTTP/2\r\n\r\n".to_vec(), Malformed),
            (get("/bank/nope", ""), NotFound),
            (get("/index.html", ""), NotFound),
            (get("/bank/login", ""), WrongMethod),
            (
                b"DELETE /bank/profile HTTP/1.1\r\n\r\n".to_vec(),
                WrongMethod,
            ),
            (post("/bank/login", "userid=42"), Malformed),
            (post("/bank/login", "userid=4x2&password=1"), Malformed),
            (
                post("/bank/post_payee", "account=1&name=%3Cscript%3E"),
                Malformed,
            ),
            (
                post(
                    "/bank/post_payee",
                    &format!("account=1&name={}", "a".repeat(25)),
                ),
                Malformed,
            ),
            (post("/bank/login", &"x".repeat(600)), TooLarge),
            (
                b"POST /bank/login HTTP/1.1\r\nContent-Length: 5\r\n\r\nab".to_vec(),
                Malformed,
            ),
            (
                b"GET /bank/profile HTTP/1.1\r\nNoColon\r\n\r\n".to_vec(),
                Malformed,
            ),
            (vec![b'a'; MAX_REQUEST + 1], TooLarge),
        ];
        for (req, want) in cases {
            assert_eq!(
                parse(&req),
                Err(want),
                "{:?}",
                String::from_utf8_lossy(&req)
            );
        }
        // A malformed cookie is no cookie (the session check then refuses it).
        assert_eq!(
            parse(&get("/bank/profile", "SID=7-xyz")).unwrap().cookie,
            None
        );
    }
}
