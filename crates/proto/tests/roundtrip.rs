use cohort_proto::*;
use proptest::prelude::*;

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Request),
        Just(Kind::Response),
        Just(Kind::Error),
        Just(Kind::GoAway)
    ]
}

proptest! {
    #[test]
    fn frame_roundtrips(kind in kind(), service: u16, flags: u16, id: u64, timeout: u32,
                        payload in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let h = Header { kind, service, flags, request_id: id, payload_len: 0, timeout_us: timeout };
        let mut buf = Vec::new();
        encode_frame(h, &payload, &mut buf);
        let f = Frame::decode_datagram(&buf, MAX_PAYLOAD).unwrap();
        prop_assert_eq!(f.header, Header { payload_len: payload.len() as u32, ..h });
        prop_assert_eq!(f.payload, &payload[..]);
        // A stream holding the frame twice yields the first frame and its exact length.
        let mut two = buf.clone();
        two.extend_from_slice(&buf);
        let (f2, used) = Frame::decode_stream(&two, MAX_PAYLOAD).unwrap().unwrap();
        prop_assert_eq!(used, buf.len());
        prop_assert_eq!(f2.payload, &payload[..]);
        // Every strict prefix asks for more bytes instead of failing or panicking.
        for cut in 0..buf.len() {
            prop_assert_eq!(Frame::decode_stream(&buf[..cut], MAX_PAYLOAD).unwrap(), None);
            prop_assert!(Frame::decode_datagram(&buf[..cut], MAX_PAYLOAD).is_err());
        }
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = Frame::decode_datagram(&bytes, MAX_PAYLOAD);
        let _ = Frame::decode_stream(&bytes, MAX_PAYLOAD);
        let _ = ErrorPayload::decode(&bytes);
        let _ = GoAway::decode(&bytes);
    }

    #[test]
    fn garbage_after_valid_magic_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut b = MAGIC.to_le_bytes().to_vec();
        b.push(VERSION);
        b.extend_from_slice(&bytes);
        let _ = Frame::decode_datagram(&b, 1000);
        let _ = Frame::decode_stream(&b, 1000);
    }

    #[test]
    fn error_roundtrips(code in 1u16..=7, msg in ".{0,200}") {
        let e = ErrorPayload::new(ErrorCode::from_u16(code).unwrap(), msg);
        let mut buf = Vec::new();
        e.encode(&mut buf);
        prop_assert_eq!(ErrorPayload::decode(&buf).unwrap(), e);
    }

    #[test]
    fn goaway_roundtrips(ids in proptest::collection::vec(any::<u64>(), 0..300)) {
        let g = GoAway { pending: ids };
        let mut buf = Vec::new();
        g.encode(&mut buf);
        prop_assert_eq!(GoAway::decode(&buf).unwrap(), g);
    }
}

#[test]
fn foreign_traffic_is_classified() {
    let e = Frame::decode_datagram(b"GET / HTTP/1.1\r\n\r\n", MAX_PAYLOAD).unwrap_err();
    assert!(e.is_foreign());
    let mut b = vec![0u8; 24];
    b[0..2].copy_from_slice(&MAGIC.to_le_bytes());
    b[2] = 9;
    assert_eq!(
        Frame::decode_datagram(&b, MAX_PAYLOAD).unwrap_err(),
        FrameError::BadVersion(9)
    );
}

#[test]
fn oversized_and_truncated_are_distinct_errors() {
    let mut buf = Vec::new();
    encode_frame(Header::request(1, 7, 0), &[0u8; 100], &mut buf);
    assert_eq!(
        Frame::decode_datagram(&buf, 50).unwrap_err(),
        FrameError::TooLarge(100, 50)
    );
    assert!(matches!(
        Frame::decode_datagram(&buf[..buf.len() - 1], MAX_PAYLOAD).unwrap_err(),
        FrameError::LengthMismatch {
            declared: 100,
            have: 99
        }
    ));
}

#[test]
fn long_error_messages_are_cut_on_char_boundary() {
    let e = ErrorPayload::new(ErrorCode::Internal, "é".repeat(2000));
    assert!(e.message.len() <= 1024 && e.message.is_char_boundary(e.message.len()));
}
