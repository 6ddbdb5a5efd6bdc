//! One-sided writes on loopback: a peer writes batches into a ring in the owner's registered
//! memory (data, then a fence, then the word that publishes the slot), the owner polls the
//! ring and acknowledges each slot by message, and the writer reuses a slot only once it is
//! acknowledged. Every byte is checked. Skips (and says so) where UCX is not installed.

mod common;

use cohort_ucx::{Event, Mode, Worker};
use common::ucx_or_skip;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const SLOTS: usize = 16;
const SLOT_BYTES: usize = 64 * 1024;
/// A slot: its sequence number (the publishing word), the length, then the data.
const DATA_AT: usize = 64;
const MESSAGES: u64 = 200;

/// Message `i`'s bytes: a length from 1 byte to the slot's room, a pattern of `i`.
fn message(i: u64) -> Vec<u8> {
    let room = SLOT_BYTES - DATA_AT;
    let len = 1 + (i as usize * 7919) % room;
    (0..len).map(|b| (b as u64 * 31 + i) as u8).collect()
}

#[test]
fn a_peer_writes_a_ring_into_registered_memory_by_worker_address() {
    ring(true);
}

#[test]
fn a_peer_writes_a_ring_into_registered_memory_through_the_listener() {
    ring(false);
}

fn ring(by_address: bool) {
    if !ucx_or_skip() {
        return;
    }
    let (tx, rx) = mpsc::channel();
    let owner = std::thread::spawn(move || {
        let mut w = Worker::with_rma(Mode::Polled).expect("worker");
        let bound = w.listen("127.0.0.1:0".parse().unwrap()).expect("listen");
        let region = w.register(SLOTS * SLOT_BYTES).expect("register");
        let key = w.region_key(region).unwrap().to_vec();
        let address = w.region(region).unwrap().address();
        tx.send((bound, w.address().unwrap())).unwrap();
        // The writer says hello by message first: its reply endpoint carries the acks.
        let mut peer = None;
        let until = Instant::now() + Duration::from_secs(30);
        let mut next = 1u64;
        let mut buf = vec![0u8; SLOT_BYTES];
        while next <= MESSAGES {
            assert!(Instant::now() < until, "message {next} never came");
            w.progress();
            for e in w.take_events() {
                if let Event::Message { from: Some(ep), .. } = e {
                    // The key goes in the reply, as a node's does: the writer's endpoint is
                    // connected once a message has come on it.
                    let mut reply = address.to_le_bytes().to_vec();
                    reply.extend_from_slice(&key);
                    w.send(ep, reply, true).expect("the key");
                    peer = Some(ep);
                }
            }
            let Some(ep) = peer else { continue };
            let slot = ((next - 1) as usize % SLOTS) * SLOT_BYTES;
            let mem = w.region(region).unwrap();
            if mem.load_u64(slot) != next {
                continue;
            }
            let len = mem.load_u64(slot + 8) as usize;
            assert!(len <= SLOT_BYTES - DATA_AT, "length {len}");
            mem.read(slot + DATA_AT, &mut buf[..len]);
            assert_eq!(&buf[..len], message(next).as_slice(), "message {next}");
            w.send(ep, next.to_le_bytes().to_vec(), false).expect("ack");
            next += 1;
        }
        // Let the last acks go out.
        let until = Instant::now() + Duration::from_secs(2);
        while w.sends_in_flight() > 0 && Instant::now() < until {
            w.progress();
        }
        std::thread::sleep(Duration::from_millis(200));
    });
    let (bound, worker_address) = rx.recv().unwrap();
    let mut w = Worker::with_rma(Mode::Polled).expect("worker");
    let ep = if by_address {
        w.connect_address(&worker_address).expect("connect")
    } else {
        w.connect(bound).expect("connect")
    };
    w.send(ep, b"hello".to_vec(), true).expect("hello");
    // Before the owner's first message the endpoint may still be connecting.
    let e = w.remote_key(ep, &[1, 2, 3]).unwrap_err().to_string();
    assert!(e.contains("no message has come"), "{e}");
    let until = Instant::now() + Duration::from_secs(20);
    let (address, key) = loop {
        assert!(Instant::now() < until, "no key in 20 s");
        w.progress();
        let got = w.take_events().into_iter().find_map(|e| match e {
            Event::Message { data, .. } => Some(data),
            _ => None,
        });
        if let Some(d) = got {
            break (
                u64::from_le_bytes(d[..8].try_into().unwrap()),
                d[8..].to_vec(),
            );
        }
    };
    let rkey = w.remote_key(ep, &key).expect("unpack the owner's key");
    let mut acked = 0u64;
    let mut sent = 0u64;
    let until = Instant::now() + Duration::from_secs(30);
    while acked < MESSAGES {
        assert!(
            Instant::now() < until,
            "{acked} of {MESSAGES} acknowledged in 30 s"
        );
        w.progress();
        for e in w.take_events() {
            match e {
                Event::Message { data, .. } => {
                    let n = u64::from_le_bytes(data[..8].try_into().unwrap());
                    assert_eq!(n, acked + 1, "acks in order");
                    acked = n;
                }
                Event::Failed { why, .. } => panic!("the connection failed: {why}"),
                Event::Accepted(_) => {}
            }
        }
        // At most SLOTS unacknowledged: a slot is rewritten only after its ack.
        while sent < MESSAGES && sent - acked < SLOTS as u64 {
            sent += 1;
            let slot = address + ((sent - 1) as usize % SLOTS * SLOT_BYTES) as u64;
            let m = message(sent);
            let mut head = (m.len() as u64).to_le_bytes().to_vec();
            head.resize(DATA_AT - 8, 0);
            head.extend_from_slice(&m);
            w.put(rkey, slot + 8, head).expect("put the data");
            w.fence().expect("fence");
            w.put(rkey, slot, sent.to_le_bytes().to_vec())
                .expect("put the word");
        }
    }
    owner.join().expect("the owner's checks");
}

#[test]
fn rma_refuses_what_it_cannot_do_with_errors_not_crashes() {
    if !ucx_or_skip() {
        return;
    }
    // A worker made without RMA.
    let mut plain = Worker::new(Mode::Polled).expect("worker");
    let e = plain.register(4096).unwrap_err().to_string();
    assert!(e.contains("without RMA"), "{e}");
    let mut w = Worker::with_rma(Mode::Polled).expect("worker");
    for bad in [0, cohort_ucx::MAX_REGION_BYTES + 1] {
        let e = w.register(bad).unwrap_err().to_string();
        assert!(e.contains("region of"), "{e}");
    }
    let region = w.register(4096).expect("register");
    assert_eq!(w.region(region).unwrap().len(), 4096);
    assert_eq!(w.region(region).unwrap().load_u64(4088), 0, "zeroed");
    // A key for an endpoint of another worker, an empty key, an oversized one.
    let mut other = Worker::with_rma(Mode::Polled).expect("worker");
    let ep = other.connect_address(&w.address().unwrap()).unwrap();
    let key = w.region_key(region).unwrap().to_vec();
    let e = w.remote_key(ep, &key).unwrap_err().to_string();
    assert!(e.contains("none of this worker's"), "{e}");
    for bad in [vec![], vec![0u8; cohort_ucx::MAX_KEY_BYTES + 1]] {
        let e = other.remote_key(ep, &bad).unwrap_err().to_string();
        assert!(e.contains("a key of"), "{e}");
    }
    // A key whose endpoint closed (unpacked once the peer's first message came).
    let e = other.remote_key(ep, &key).unwrap_err().to_string();
    assert!(e.contains("no message has come"), "{e}");
    other.send(ep, b"hello".to_vec(), true).unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < until, "no hello in 20 s");
        w.progress();
        other.progress();
        let hello = w.take_events().into_iter().find_map(|e| match e {
            Event::Message {
                from: Some(back), ..
            } => Some(back),
            _ => None,
        });
        if let Some(back) = hello {
            w.send(back, b"hi".to_vec(), true).unwrap();
        }
        if other
            .take_events()
            .iter()
            .any(|e| matches!(e, Event::Message { .. }))
        {
            break;
        }
    }
    let rkey = other.remote_key(ep, &key).expect("unpack");
    other.close(ep);
    let e = other.put(rkey, 0, vec![1]).unwrap_err().to_string();
    assert!(e.contains("endpoint closed"), "{e}");
    w.unregister(region);
    assert!(w.region(region).is_none());
    w.unregister(region); // twice: nothing
}

/// The other way: a peer that connected by worker address offers its region in its first
/// message, and the worker it reached writes there on the reply endpoint UCX made (what a
/// node does with a front end's answer ring). Then the reply endpoint is closed: its key goes
/// with it.
#[test]
fn the_reached_worker_writes_into_the_connecting_peers_region_on_the_reply_endpoint() {
    if !ucx_or_skip() {
        return;
    }
    let mut reached = Worker::with_rma(Mode::Polled).expect("worker");
    let mut peer = Worker::with_rma(Mode::Polled).expect("worker");
    let region = peer.register(4096).expect("register");
    let address = peer.region(region).unwrap().address();
    let mut offer = address.to_le_bytes().to_vec();
    offer.extend_from_slice(peer.region_key(region).unwrap());
    let ep = peer.connect_address(&reached.address().unwrap()).unwrap();
    peer.send(ep, offer, true).unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    let mut back = None;
    while peer.region(region).unwrap().load_u64(0) != 7 {
        assert!(Instant::now() < until, "nothing written in 20 s");
        reached.progress();
        peer.progress();
        for e in reached.take_events() {
            if let Event::Message {
                from: Some(ep),
                data,
            } = e
            {
                let at = u64::from_le_bytes(data[..8].try_into().unwrap());
                let rkey = reached.remote_key(ep, &data[8..]).expect("unpack");
                reached.put(rkey, at + 8, vec![42; 8]).expect("data");
                reached.fence().expect("fence");
                reached
                    .put(rkey, at, 7u64.to_le_bytes().to_vec())
                    .expect("word");
                back = Some((ep, rkey));
            }
        }
    }
    assert_eq!(
        peer.region(region).unwrap().load_u64(8),
        u64::from_le_bytes([42; 8])
    );
    let (ep, rkey) = back.expect("a reply endpoint");
    reached.close(ep);
    let e = reached.put(rkey, address, vec![1]).unwrap_err().to_string();
    assert!(e.contains("endpoint closed"), "{e}");
}
