//! A listener on a port whose last connections are still in TIME_WAIT (issue 84, item 5: a
//! node restarted on its port within about 60 s failed "Address already in use"). UCX's
//! listeners bind with SO_REUSEADDR (not SO_REUSEPORT): the port is taken at once, and a
//! second listener on a port that is listened on is still refused.

mod common;

use cohort_ucx::{Mode, Worker};
use common::ucx_or_skip;
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Sockets on `port` in TIME_WAIT (state 06 in /proc/net/tcp).
fn time_wait(port: u16) -> usize {
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap();
    tcp.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f[1].ends_with(&format!(":{port:04X}")) && f[3] == "06"
        })
        .count()
}

/// A port whose server side closed a connection first, so that it sits in TIME_WAIT, with
/// its listener gone (as a node's port is right after the node stopped).
fn port_in_time_wait() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let mut client = TcpStream::connect(addr).unwrap();
    let (server, _) = l.accept().unwrap();
    drop(l);
    drop(server); // the server closes first: its end goes to TIME_WAIT once the client closes
    let mut b = [0u8; 1];
    client
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    assert_eq!(client.read(&mut b).unwrap(), 0, "the server's FIN");
    drop(client);
    let until = Instant::now() + Duration::from_secs(2);
    while time_wait(addr.port()) == 0 {
        assert!(Instant::now() < until, "no TIME_WAIT on {addr}");
        std::thread::sleep(Duration::from_millis(10));
    }
    addr
}

#[test]
fn a_listener_takes_a_port_in_time_wait_but_not_one_listened_on() {
    if !ucx_or_skip() {
        return;
    }
    let addr = port_in_time_wait();
    let mut w = Worker::new(Mode::Events).expect("worker");
    let bound = w
        .listen(addr)
        .unwrap_or_else(|e| panic!("listening on {addr} with a connection in TIME_WAIT: {e}"));
    assert_eq!(bound, addr);
    // It serves there: a peer connects and its message arrives.
    let mut peer = Worker::new(Mode::Events).expect("worker");
    let ep = peer.connect(addr).expect("connect");
    peer.send(ep, b"hello".to_vec(), true).expect("send");
    let until = Instant::now() + Duration::from_secs(10);
    let mut got = false;
    while !got {
        assert!(Instant::now() < until, "no message at the listener");
        peer.progress();
        w.progress();
        got = w.take_events().into_iter().any(
            |e| matches!(e, cohort_ucx::Event::Message { data, .. } if data.as_slice() == b"hello"),
        );
    }
    // A second listener on the same port is refused: SO_REUSEADDR, not SO_REUSEPORT.
    let mut other = Worker::new(Mode::Events).expect("worker");
    assert!(other.listen(addr).is_err(), "two listeners on {addr}");
    // And a plain socket cannot take it either.
    assert!(TcpListener::bind(addr).is_err());
}
