use cohort_mq::*;
use std::collections::HashMap;

/// The C header and the Rust layout must agree byte for byte.
#[test]
fn header_matches_rust_layout() {
    let h = include_str!("../include/cohort_mqueue.h");
    let defs: HashMap<&str, usize> = h
        .lines()
        .filter_map(|l| l.strip_prefix("#define COHORT_MQ_"))
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?, it.next()?.parse().ok()?))
        })
        .collect();
    assert_eq!(defs["CONTROL_BYTES"], CONTROL_BYTES);
    assert_eq!(defs["SLOT_HEADER_BYTES"], SLOT_HEADER_BYTES);
    assert_eq!(defs["SLOT_HEADER_BYTES"], std::mem::size_of::<SlotHeader>());
    assert_eq!(defs["SLOT_ALIGN"], SLOT_ALIGN);
    assert_eq!(defs["TAIL_OFFSET"], 0);
    assert_eq!(defs["SEQ_OFFSET"], std::mem::offset_of!(SlotHeader, seq));
    assert_eq!(defs["LEN_OFFSET"], std::mem::offset_of!(SlotHeader, len));
    assert_eq!(
        defs["TOKEN_OFFSET"],
        std::mem::offset_of!(SlotHeader, token)
    );
    assert_eq!(
        defs["SERVICE_OFFSET"],
        std::mem::offset_of!(SlotHeader, service)
    );
    assert_eq!(
        defs["STATUS_OFFSET"],
        std::mem::offset_of!(SlotHeader, status)
    );
    assert_eq!(
        defs["REQUEST_ID_OFFSET"],
        std::mem::offset_of!(SlotHeader, request_id)
    );
    assert_eq!(
        defs["DEADLINE_OFFSET"],
        std::mem::offset_of!(SlotHeader, deadline)
    );
    assert_eq!(
        defs["ARRIVED_OFFSET"],
        std::mem::offset_of!(SlotHeader, arrived)
    );
    assert_eq!(
        defs["ROUTE_OFFSET"],
        std::mem::offset_of!(SlotHeader, route)
    );
    let spilled = h
        .lines()
        .find_map(|l| l.strip_prefix("#define COHORT_MQ_SPILLED "))
        .expect("SPILLED defined");
    assert_eq!(
        spilled.trim_end_matches('u').parse::<u32>().unwrap(),
        SPILLED
    );
}

fn env(token: u32) -> Envelope {
    Envelope {
        token,
        service: 1,
        status: 0,
        request_id: token as u64 * 3,
        deadline: 7,
        arrived: 5,
    }
}

#[test]
fn full_ring_refuses_then_accepts_after_publish() {
    let (mut p, mut c) = channel(Layout::new(4, 8), 2);
    for i in 0..4 {
        p.try_send(env(i), &[i as u8]).unwrap();
    }
    assert_eq!(p.try_send(env(9), b"x"), Err(SendError::Full));
    assert_eq!(c.try_recv(|m| m.env.token), Some(0));
    // Not yet published (publish_every = 2): the producer still sees a full ring.
    assert_eq!(p.try_send(env(9), b"x"), Err(SendError::Full));
    assert_eq!(c.try_recv(|m| m.payload.to_vec()), Some(vec![1]));
    p.try_send(env(4), b"four").unwrap();
    c.publish();
    assert_eq!(p.free_slots(), 1);
    drop(c);
    assert_eq!(p.try_send(env(5), b"x"), Err(SendError::Closed));
}

#[test]
fn empty_ring_yields_nothing() {
    let (_p, mut c) = channel(Layout::new(8, 8), 1);
    assert!(c.try_recv(|_| ()).is_none());
}

#[test]
fn slot_stride_is_aligned() {
    assert_eq!(Layout::new(2, 0).slot_stride(), 48);
    assert_eq!(Layout::new(2, 1).slot_stride(), 64);
    assert_eq!(Layout::new(2, 16).slot_stride(), 64);
    assert_eq!(Layout::with_stride(2, 1024).slot_stride(), 1024);
}

#[test]
fn large_payloads_spill_on_host_rings_and_are_refused_on_device_rings() {
    let (mut p, mut c) = channel(Layout::new(4, 8), 1);
    let big: Vec<u8> = (0..100).collect();
    p.try_send(env(1), &big).unwrap();
    p.try_send(env(2), b"small").unwrap();
    assert_eq!(
        c.try_recv(|m| (m.env, m.payload.to_vec())),
        Some((env(1), big))
    );
    assert_eq!(c.try_recv(|m| m.payload.to_vec()), Some(b"small".to_vec()));
    let mem = Box::new(HostMemory::zeroed(Layout::new(4, 8).bytes()));
    let (mut p, _c) = channel_in(mem, Layout::new(4, 8), 1, false);
    assert_eq!(p.try_send(env(1), &[0; 9]), Err(SendError::TooLarge));
}

/// A buffer larger than a slot moves into the ring and comes out as the same allocation
/// (the consumer clones it instead of copying); one that fits is copied and the buffer kept.
#[test]
fn a_large_buffer_crosses_the_ring_without_a_copy() {
    let (mut p, mut c) = channel(Layout::new(2, 8), 1);
    let mut big: Vec<u8> = (0..100).collect();
    let at = big.as_ptr();
    p.try_send_vec(env(1), &mut big).unwrap();
    assert!(big.is_empty(), "the buffer moved into the ring");
    let mut small = b"tiny".to_vec();
    p.try_send_vec(env(2), &mut small).unwrap();
    assert_eq!(small, b"tiny", "a payload that fits is copied");
    let mut third = vec![7u8; 50];
    assert_eq!(p.try_send_vec(env(3), &mut third), Err(SendError::Full));
    assert_eq!(third.len(), 50, "a refused buffer stays with the caller");
    let kept = c
        .try_recv(|m| {
            assert_eq!(m.payload, &(0..100).collect::<Vec<u8>>()[..]);
            m.spilled.cloned()
        })
        .unwrap()
        .expect("a spilled payload comes with its buffer");
    assert_eq!(kept.as_ptr(), at, "same allocation: not copied");
    assert_eq!(c.try_recv(|m| m.spilled.is_none()), Some(true));
    let mem = Box::new(HostMemory::zeroed(Layout::new(4, 8).bytes()));
    let (mut p, _c) = channel_in(mem, Layout::new(4, 8), 1, false);
    assert_eq!(
        p.try_send_vec(env(1), &mut vec![0; 9]),
        Err(SendError::TooLarge)
    );
}

#[test]
fn a_message_left_unreleased_is_shown_again() {
    let (mut p, mut c) = channel(Layout::new(4, 8), 1);
    p.try_send(env(1), b"a").unwrap();
    assert_eq!(c.try_recv_if(|_| None::<()>), None);
    assert!(c.is_ready());
    assert_eq!(c.try_recv(|m| m.env.token), Some(1));
    assert!(!c.is_ready());
}

/// Two threads, a small ring (so it wraps and fills constantly), variable-length messages:
/// every message arrives exactly once, in order, intact.
#[test]
fn two_thread_stress_exactly_once_in_order() {
    const N: u32 = 2_000_000;
    let (mut p, mut c) = channel(Layout::new(64, 32), 8);
    let producer = std::thread::spawn(move || {
        let mut i = 0u32;
        while i < N {
            let len = (i % 33) as usize;
            let e = Envelope {
                token: i,
                service: (i % 7) as u16,
                status: (i % 3) as u16,
                request_id: i as u64 + (1 << 40),
                deadline: 0,
                arrived: 0,
            };
            let ok = p.try_send_with(e, |buf| {
                for (j, b) in buf[..len].iter_mut().enumerate() {
                    *b = (i as usize + j) as u8;
                }
                len
            });
            if ok.is_ok() {
                i += 1;
            } else {
                std::hint::spin_loop();
            }
        }
    });
    let mut next = 0u32;
    while next < N {
        let got = c.try_recv(|m| {
            assert_eq!(m.env.token, next, "out of order or duplicated");
            assert_eq!(m.env.service, (next % 7) as u16);
            assert_eq!(m.env.status, (next % 3) as u16);
            assert_eq!(m.env.request_id, next as u64 + (1 << 40));
            assert_eq!(m.payload.len(), (next % 33) as usize);
            for (j, b) in m.payload.iter().enumerate() {
                assert_eq!(*b, (next as usize + j) as u8, "payload corrupted");
            }
        });
        if got.is_some() {
            next += 1;
        } else {
            c.publish();
            std::hint::spin_loop();
        }
    }
    producer.join().unwrap();
    assert!(c.try_recv(|_| ()).is_none(), "a message arrived twice");
}
