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
}

#[test]
fn full_ring_refuses_then_accepts_after_publish() {
    let (mut p, mut c) = channel(Layout::new(4, 8), 2);
    for i in 0..4 {
        p.try_send(i, 1, 0, &[i as u8]).unwrap();
    }
    assert_eq!(p.try_send(9, 1, 0, b"x"), Err(Full));
    assert_eq!(c.try_recv(|m| m.token), Some(0));
    // Not yet published (publish_every = 2): the producer still sees a full ring.
    assert_eq!(p.try_send(9, 1, 0, b"x"), Err(Full));
    assert_eq!(c.try_recv(|m| m.payload.to_vec()), Some(vec![1]));
    p.try_send(4, 1, 0, b"four").unwrap();
    c.publish();
    assert_eq!(p.free_slots(), 1);
}

#[test]
fn empty_ring_yields_nothing() {
    let (_p, mut c) = channel(Layout::new(8, 8), 1);
    assert!(c.try_recv(|_| ()).is_none());
}

#[test]
fn slot_stride_is_aligned() {
    assert_eq!(Layout::new(2, 0).slot_stride(), 16);
    assert_eq!(Layout::new(2, 1).slot_stride(), 32);
    assert_eq!(Layout::new(2, 16).slot_stride(), 32);
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
            let ok = p.try_send_with(i, (i % 7) as u16, (i % 3) as u16, |buf| {
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
            assert_eq!(m.token, next, "out of order or duplicated");
            assert_eq!(m.service, (next % 7) as u16);
            assert_eq!(m.status, (next % 3) as u16);
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
