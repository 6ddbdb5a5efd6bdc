//! Round trips of small messages between two workers on loopback, each thread blocking on
//! UCX's event fd (`wake`) or polling (`poll`, or `poll-addr`: connected by worker address
//! instead of through the listener): `cargo run --release -p cohort-ucx --example pingpong
//! [wake|poll|poll-addr] [ROUNDS]`; prints p50/p99 in microseconds. UCX_TLS picks the
//! transports, UCX_PROTO_INFO=y prints the ones chosen.

use cohort_ucx::{Event, Mode, Worker};
use std::time::{Duration, Instant};

fn block(w: &mut Worker, wake: bool) {
    if wake && w.arm() {
        let mut fd = libc::pollfd {
            fd: w.event_fd().unwrap(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut fd, 1, 100) };
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let wake = args.get(1).is_none_or(|a| a == "wake");
    let by_address = args.get(1).is_some_and(|a| a == "poll-addr");
    let rounds: usize = args.get(2).and_then(|r| r.parse().ok()).unwrap_or(2000);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut w = Worker::new(if wake { Mode::Events } else { Mode::Polled }).unwrap();
        let bound = w.listen("127.0.0.1:0".parse().unwrap()).unwrap();
        tx.send((bound, w.address().unwrap())).unwrap();
        loop {
            w.progress();
            let evs = w.take_events();
            if evs.is_empty() {
                block(&mut w, wake);
            }
            for e in evs {
                if let Event::Message {
                    from: Some(ep),
                    data,
                } = e
                {
                    w.send(ep, data, false).unwrap();
                }
            }
        }
    });
    let (addr, worker_address) = rx.recv().unwrap();
    let mut w = Worker::new(if wake { Mode::Events } else { Mode::Polled }).unwrap();
    let ep = if by_address {
        w.connect_address(&worker_address).unwrap()
    } else {
        w.connect(addr).unwrap()
    };
    let mut lat = Vec::with_capacity(rounds);
    for i in 0..rounds + 100 {
        let t = Instant::now();
        w.send(ep, vec![1u8; 64], true).unwrap();
        'wait: loop {
            w.progress();
            for e in w.take_events() {
                if let Event::Message { .. } = e {
                    break 'wait;
                }
            }
            block(&mut w, wake);
        }
        if i >= 100 {
            lat.push(t.elapsed());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    lat.sort();
    let p = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)].as_secs_f64() * 1e6;
    println!(
        "{} rounds, {}: p50 {:.1} us, p99 {:.1} us",
        rounds,
        args.get(1).map_or("wake", String::as_str),
        p(0.5),
        p(0.99)
    );
}
