//! The bank service end to end on its CPU path: whole sessions of the Table 2 mix, every page
//! compared with the one the backend records give; refusals; and no input that crashes it.

use crate::besim::Besim;
use crate::client::{self, Step};
use crate::kinds::Kind;
use crate::parse::Cookie;
use crate::{Bank, BankConfig};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn bank(users: u32) -> Bank {
    Bank::new(&BankConfig {
        users,
        max_sessions: users as usize,
        secret: 7,
    })
}

/// (status, body) of a response, checking its framing: one status line, CRLF headers, and a
/// Content-Length equal to the body.
fn split(resp: &[u8]) -> (u16, &[u8]) {
    let end = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("header end");
    let head = std::str::from_utf8(&resp[..end]).expect("ascii header");
    let body = &resp[end + 4..];
    let status: u16 = head[9..12].parse().expect("status");
    assert!(head.starts_with("HTTP/1.1 "));
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length:"))
        .expect("content-length")
        .trim()
        .parse()
        .expect("length");
    assert_eq!(len, body.len(), "Content-Length of {head}");
    (status, body)
}

fn login(b: &Bank, user: u32) -> Cookie {
    let mut out = Vec::new();
    let s = client::step(Kind::Login, user, &mut SmallRng::seed_from_u64(0));
    b.serve(&s.raw(None), &mut out);
    assert_eq!(split(&out).0, 200);
    client::set_cookie(&out).expect("login sets the cookie")
}

#[test]
fn sessions_of_the_mix_get_their_pages() {
    let b = bank(1000);
    let mut rng = SmallRng::seed_from_u64(1);
    let mut out = Vec::new();
    let mut seen = [0u32; 14];
    for _ in 0..300 {
        let user = rng.gen_range(1..=1000);
        let first = client::step(Kind::Login, user, &mut rng);
        b.serve(&first.raw(None), &mut out);
        let cookie = client::set_cookie(&out).expect("cookie");
        assert_eq!(out, first.expected(user, Some(cookie)));
        loop {
            let kind = client::draw(&mut rng);
            if kind == Kind::Login {
                continue;
            }
            seen[kind as usize] += 1;
            let s = client::step(kind, user, &mut rng);
            b.serve(&s.raw(Some(cookie)), &mut out);
            let (status, body) = split(&out);
            assert_eq!(status, 200, "{kind:?}");
            assert_eq!(body.len(), kind.info().page_bytes, "{kind:?}");
            assert!(out == s.expected(user, None), "{kind:?} page differs");
            if kind == Kind::Logout {
                break;
            }
        }
        // Logged out: the cookie is dead.
        let s = client::step(Kind::Profile, user, &mut rng);
        b.serve(&s.raw(Some(cookie)), &mut out);
        assert_eq!(split(&out).0, 401);
    }
    assert!(
        seen.iter().skip(1).all(|&n| n > 0),
        "every type served: {seen:?}"
    );
    assert_eq!(b.sessions.live(), 0);
}

#[test]
fn pages_show_the_backend_records() {
    let b = bank(100);
    let user = 42;
    let cookie = login(&b, user);
    let mut out = Vec::new();
    let s = Step {
        kind: Kind::AccountSummary,
        form: String::new(),
    };
    b.serve(&s.raw(Some(cookie)), &mut out);
    let page = String::from_utf8(out.clone()).unwrap();
    let (acc, n) = Besim::accounts(user);
    for a in &acc[..n] {
        let c = a.balance_cents;
        let shown = format!(
            "{}{}.{:02}",
            if c < 0 { "-" } else { "" },
            c.abs() / 100,
            c.abs() % 100
        );
        assert!(page.contains(&shown), "balance {shown} missing");
        assert!(page.contains(&a.number.to_string()));
    }
    // The profile page shows the user's own name and email.
    let s = Step {
        kind: Kind::Profile,
        form: String::new(),
    };
    b.serve(&s.raw(Some(cookie)), &mut out);
    let page = String::from_utf8(out.clone()).unwrap();
    let p = Besim::profile(user);
    for field in [p.name, p.email] {
        let shown = String::from_utf8(field.as_bytes().to_vec()).unwrap();
        assert!(page.contains(shown.trim_end()), "{shown:?} missing");
    }
    assert!(page.contains("user42@bank.example"));
    // A transfer shows the balances before and after.
    if n >= 2 && acc[0].balance_cents > 500 {
        let s = Step {
            kind: Kind::PostTransfer,
            form: "from=0&to=1&amount=500".into(),
        };
        b.serve(&s.raw(Some(cookie)), &mut out);
        let page = String::from_utf8(out.clone()).unwrap();
        let after = acc[0].balance_cents - 500;
        assert!(page.contains("The transfer is done."));
        assert!(page.contains(&format!("{}.{:02}", after / 100, after % 100)));
    }
}

#[test]
fn refusals_get_their_pages() {
    let b = bank(100);
    let mut out = Vec::new();
    let mut status = |req: &[u8]| {
        b.serve(req, &mut out);
        split(&out).0
    };
    assert_eq!(status(b"GET /bank/profile HTTP/1.1\r\n\r\n"), 401);
    assert_eq!(
        status(b"GET /bank/profile HTTP/1.1\r\nCookie: SID=5-0123456789abcdef\r\n\r\n"),
        401
    );
    assert_eq!(
        status(b"POST /bank/login HTTP/1.1\r\nContent-Length: 23\r\n\r\nuserid=5&password=0000"),
        400
    );
    let wrong = format!(
        "userid=5&password={}",
        (Besim::password(5) + 1) % 100_000_000
    );
    let req = format!(
        "POST /bank/login HTTP/1.1\r\nContent-Length: {}\r\n\r\n{wrong}",
        wrong.len()
    );
    assert_eq!(status(req.as_bytes()), 401);
    let unknown = format!("userid=101&password={}", Besim::password(101));
    let req = format!(
        "POST /bank/login HTTP/1.1\r\nContent-Length: {}\r\n\r\n{unknown}",
        unknown.len()
    );
    assert_eq!(status(req.as_bytes()), 401);
    assert_eq!(status(b"GET /bank/vault HTTP/1.1\r\n\r\n"), 404);
    assert_eq!(status(b"PUT /bank/profile HTTP/1.1\r\n\r\n"), 405);
    assert_eq!(status(b"garbage"), 400);
    assert_eq!(status(&[b'x'; 5000]), 413);
    // A forged token for a live session is refused; the real one still works.
    let c = login(&b, 9);
    let forged = Cookie {
        user: 9,
        token: c.token.wrapping_add(1),
    };
    let s = Step {
        kind: Kind::Profile,
        form: String::new(),
    };
    assert_eq!(status(&s.raw(Some(forged))), 401);
    assert_eq!(status(&s.raw(Some(c))), 200);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any bytes: a framed answer, never a panic.
    #[test]
    fn any_bytes_get_an_answer(req in proptest::collection::vec(any::<u8>(), 0..3000)) {
        let b = bank(10);
        let mut out = Vec::new();
        b.serve(&req, &mut out);
        let (status, _) = split(&out);
        prop_assert!(status == 200 || (400..600).contains(&status));
    }

    /// A real request with bytes flipped, cut or inserted: still an answer.
    #[test]
    fn mutated_requests_get_an_answer(
        kind in 0usize..14, seed in any::<u64>(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let b = bank(10);
        let c = login(&b, 3);
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut req = client::step(Kind::from_index(kind).unwrap(), 3, &mut rng).raw(Some(c));
        for (at, byte, op) in edits {
            let i = at % (req.len() + 1);
            match op {
                0 if i < req.len() => req[i] = byte,
                1 if i < req.len() => { req.remove(i); }
                _ => req.insert(i, byte),
            }
        }
        let mut out = Vec::new();
        b.serve(&req, &mut out);
        split(&out);
    }
}
