//! A listener and a client on loopback, each worker on its own thread as UCX's single-thread
//! mode asks: messages of 1 byte to 1 MiB both ways, replies on the endpoint the message
//! names. Skips (and says so) where UCX is not installed.

mod common;

use cohort_ucx::{Event, Mode, Worker};
use common::ucx_or_skip;
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn wait_for(w: &mut Worker, mut want: impl FnMut(&Event) -> bool) -> Event {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        w.progress();
        if let Some(e) = w.take_events().into_iter().find(|e| want(e)) {
            return e;
        }
        assert!(Instant::now() < until, "no such event in 20 s");
    }
}

#[test]
fn messages_go_both_ways_with_replies_on_the_named_endpoint() {
    round_trips(false);
}

/// The same with the client connecting by the server's worker address (no listener used).
#[test]
fn a_peer_reached_by_its_worker_address_replies_the_same() {
    round_trips(true);
}

fn round_trips(by_address: bool) {
    if !ucx_or_skip() {
        return;
    }
    let (addr_tx, addr_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let mut w = Worker::new(Mode::Polled).expect("worker");
        let bound = w.listen("127.0.0.1:0".parse().unwrap()).expect("listen");
        addr_tx
            .send((bound, w.address().expect("worker address")))
            .unwrap();
        // Echo every message back reversed, with sizes from one byte to past the eager
        // threshold of shared memory and TCP.
        let mut answered = 0;
        while answered < 3 {
            w.progress();
            for e in w.take_events() {
                if let Event::Message { from, mut data } = e {
                    data.reverse();
                    w.send(from.expect("a reply endpoint"), data, false)
                        .unwrap();
                    answered += 1;
                }
            }
        }
        // Stay until the client has read the answers.
        while stop_rx.try_recv().is_err() {
            w.progress();
        }
    });
    let (addr, worker_address) = addr_rx.recv().unwrap();
    let mut w = Worker::new(Mode::Polled).expect("worker");
    let ep = if by_address {
        w.connect_address(&worker_address)
            .expect("connect by address")
    } else {
        w.connect(addr).expect("connect")
    };
    for len in [1usize, 8 << 10, 1 << 20] {
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        w.send(ep, data.clone(), true).unwrap();
        let Event::Message { data: got, .. } =
            wait_for(&mut w, |e| matches!(e, Event::Message { .. }))
        else {
            unreachable!()
        };
        let mut want = data;
        want.reverse();
        assert_eq!(got, want, "{len} bytes");
    }
    stop_tx.send(()).unwrap();
    server.join().unwrap();
}
