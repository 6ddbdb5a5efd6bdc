//! Page services on the HTTP port: a request under `/{service}/...` whose service takes raw
//! HTTP (`Service::serves_http_pages`) is handed over whole - request line, the headers a page needs, body -
//! as the service's payload, and the service's raw HTTP response is sent back as it wrote
//! it (status, headers, body). hyper frames the connection (keep-alive, header timeouts,
//! chunked or oversized bodies); everything inside the request is the service's to parse,
//! on whichever engine runs it.

use crate::context::Context;
use crate::http_limits::{read_body, BodyError};
use crate::http_reply::HttpEnv;
use bytes::Bytes;
use cohort_proto::{ErrorCode, Header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};

type HttpResponse = hyper::Response<Full<Bytes>>;

/// The largest body handed to a page service (it applies its own, smaller limits and
/// answers 413 itself; beyond this the gateway refuses without reading more).
const MAX_PAGE_BODY: usize = 64 << 10;
/// Headers passed through to the service (the rest are the connection's business).
const PASSED: &[&str] = &["cookie", "content-type"];

/// The page service a path belongs to (`/{name}/...`), if the server hosts one by that name.
pub(crate) fn page_service(ctx: &Context, path: &str) -> Option<u16> {
    let (name, _) = path.strip_prefix('/')?.split_once('/')?;
    let s = ctx.registry.by_name(name)?;
    s.serves_http_pages().then(|| s.id())
}

fn plain(status: StatusCode, msg: String) -> HttpResponse {
    hyper::Response::builder()
        .status(status)
        .header("content-type", "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(msg)))
        .expect("static response parts")
}

/// Rebuilds the request as HTTP/1.1 bytes: the line, the passed headers, Content-Length.
fn raw_request(req: &hyper::http::request::Parts, body: &[u8]) -> Vec<u8> {
    let target = req.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut out = format!("{} {target} HTTP/1.1\r\n", req.method).into_bytes();
    for name in PASSED {
        for v in req.headers.get_all(*name) {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    if !body.is_empty() || req.method == hyper::Method::POST {
        out.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// The service's raw response as a hyper response (its Content-Length is hyper's to send).
/// The body is the answer's own buffer, sliced past the head: not copied again.
fn parse_response(raw: Bytes) -> Option<HttpResponse> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?;
    let code: u16 = status_line
        .strip_prefix("HTTP/1.1 ")?
        .get(..3)?
        .parse()
        .ok()?;
    let mut b = hyper::Response::builder().status(StatusCode::from_u16(code).ok()?);
    for l in lines {
        let (name, value) = l.split_once(':')?;
        if !name.eq_ignore_ascii_case("content-length") {
            b = b.header(name, value.trim());
        }
    }
    let b = b.body(()).ok()?;
    Some(b.map(|()| Full::new(raw.slice(end + 4..))))
}

pub(crate) async fn page(
    req: Request<Incoming>,
    sid: u16,
    env: &HttpEnv,
    id: u64,
    peer: Option<std::net::IpAddr>,
) -> HttpResponse {
    let ctx = &env.ctx;
    let key = match crate::http_reply::authorized(ctx, &req, Some(sid)) {
        Ok(key) => key,
        Err(r) => return *r,
    };
    let (parts, body) = req.into_parts();
    let read = read_body(
        body,
        MAX_PAGE_BODY,
        crate::limits::spread(env.limits.read_timeout, id),
        &env.budget,
    );
    let (body, _held) = match read.await {
        Ok(b) => b,
        Err(BodyError::TooLarge(max)) => {
            ctx.metrics.answered(
                sid,
                ErrorCode::BadRequest.label(),
                std::time::Duration::ZERO,
            );
            return plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body refused: over {max} bytes\n"),
            );
        }
        Err(e) => return crate::http_reply::body_refused(ctx, sid, e),
    };
    let payload = raw_request(&parts, &body);
    let header = Header::request(sid, id, payload.len());
    let _ticket = match ctx.quotas.ticket(crate::quota::Who::of(key, peer)) {
        Ok(t) => t,
        Err(over) => return crate::http_reply::over_quota(ctx, sid, &over),
    };
    let class = ctx.quotas.class_of(crate::quota::Who::of(key, peer));
    let (port, rx) = crate::http_reply::OneShot::new(None, class);
    ctx.submit(&env.shard, &header, &payload, port);
    match rx.await {
        Ok(Ok(raw)) => parse_response(raw).unwrap_or_else(|| {
            plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the service's response is not HTTP\n".into(),
            )
        }),
        Ok(Err(e)) => {
            let mut r = plain(
                StatusCode::from_u16(e.code.http_status())
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                format!("{}: {}\n", e.code.name(), e.message),
            );
            crate::http_reply::retry_after(&mut r);
            r
        }
        Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "request lost\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn response_round_trip() {
        let raw = b"HTTP/1.1 401 Unauthorized\r\nContent-Type: text/html\r\nSet-Cookie: SID=; Max-Age=0\r\nContent-Length:     4\r\n\r\nabcd";
        let r = parse_response(Bytes::from_static(raw)).unwrap();
        assert_eq!(r.status(), 401);
        assert_eq!(r.headers()["set-cookie"], "SID=; Max-Age=0");
        assert!(r.headers().get("content-length").is_none());
        let body = futures_body(r.into_body());
        assert_eq!(&body[..], b"abcd");
        assert!(parse_response(Bytes::from_static(b"HTTP/1.1 2x0 OK\r\n\r\n")).is_none());
        assert!(parse_response(Bytes::from_static(b"nothing")).is_none());
    }

    fn futures_body(b: Full<Bytes>) -> Bytes {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(b.collect())
            .unwrap()
            .to_bytes()
    }

    #[test]
    fn request_is_rebuilt() {
        let req = hyper::Request::post("/shop/login?x=1")
            .header("cookie", "SID=1-2")
            .header("user-agent", "t")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let raw = raw_request(&parts, b"a=b");
        assert_eq!(
            raw,
            b"POST /shop/login?x=1 HTTP/1.1\r\ncookie: SID=1-2\r\ncontent-length: 3\r\n\r\na=b"
        );
    }
}
