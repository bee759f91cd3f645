use super::*;

const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

/// A client frame: masked with [`KEY`] unless `masked` is false, its
/// length in the shortest form unless `long` asks for the 64-bit one.
fn frame(first: u8, payload: &[u8], masked: bool, long: bool) -> Vec<u8> {
    let mut out = vec![first];
    let mask_bit = if masked { MASKED } else { 0 };
    let len = payload.len();
    if long {
        out.push(mask_bit | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    } else if len < 126 {
        out.push(mask_bit | len as u8);
    } else if len <= 0xFFFF {
        out.push(mask_bit | 126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(mask_bit | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    if masked {
        out.extend_from_slice(&KEY);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ KEY[i % 4]));
    } else {
        out.extend_from_slice(payload);
    }
    out
}

fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
    frame(first, payload, true, false)
}

/// What a tunnel makes of a client's bytes arriving in `pieces`: as the
/// tunnel does, the bytes not yet decided are kept in front of the next
/// piece, and every message is admitted.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    messages: usize,
    passed: Vec<u8>,
    close: Option<Violation>,
    /// The most bytes ever kept undecided between pieces.
    kept: usize,
}

fn through(max_message: u64, rsv: u8, pieces: &[&[u8]]) -> Seen {
    let mut reader = Reader::new(max_message, rsv);
    let mut seen = Seen {
        messages: 0,
        passed: Vec::new(),
        close: None,
        kept: 0,
    };
    let mut pending: Vec<u8> = Vec::new();
    for piece in pieces {
        pending.extend_from_slice(piece);
        loop {
            match reader.step(&pending) {
                Step::Pass(n) => {
                    assert!(n > 0 && n <= pending.len());
                    seen.passed.extend(pending.drain(..n));
                }
                Step::Message(n) => {
                    seen.messages += 1;
                    seen.passed.extend(pending.drain(..n));
                }
                Step::More => break,
                Step::Close(violation) => {
                    seen.close = Some(violation);
                    return seen;
                }
            }
        }
        seen.kept = seen.kept.max(pending.len());
    }
    seen
}

fn whole(bytes: &[u8]) -> Seen {
    through(1 << 20, 0, &[bytes])
}

#[test]
fn a_masked_message_counts_once_and_passes_byte_for_byte() {
    let bytes = masked(FIN | TEXT, b"Hello");
    let mut reader = Reader::new(1 << 20, 0);
    assert_eq!(reader.step(&bytes), Step::Message(6));
    assert_eq!(reader.step(&bytes[6..]), Step::Pass(5));
    assert_eq!(reader.step(&[]), Step::More);
    let seen = whole(&bytes);
    assert_eq!((seen.messages, seen.close), (1, None));
    assert_eq!(seen.passed, bytes);
}

#[test]
fn a_fragmented_message_counts_once_with_control_frames_between_its_fragments() {
    let mut bytes = masked(BINARY, b"one");
    bytes.extend(masked(PING, b"are you there"));
    bytes.extend(masked(CONTINUATION, b"two"));
    bytes.extend(masked(FIN | PONG, b""));
    bytes.extend(masked(FIN | CONTINUATION, b"three"));
    bytes.extend(masked(FIN | TEXT, b"next"));
    bytes.extend(masked(FIN | CLOSE, &1000u16.to_be_bytes()));
    let seen = whole(&bytes);
    // The ping has no FIN: a control frame must have it.
    assert_eq!(seen.close, Some(Violation::ControlFragmented));

    let mut bytes = masked(BINARY, b"one");
    bytes.extend(masked(FIN | PING, b"are you there"));
    bytes.extend(masked(CONTINUATION, b"two"));
    bytes.extend(masked(FIN | PONG, b""));
    bytes.extend(masked(FIN | CONTINUATION, b"three"));
    bytes.extend(masked(FIN | TEXT, b"next"));
    bytes.extend(masked(FIN | CLOSE, &1000u16.to_be_bytes()));
    let seen = whole(&bytes);
    assert_eq!((seen.messages, seen.close), (2, None));
    assert_eq!(seen.passed, bytes);
}

#[test]
fn control_frames_and_empty_frames_are_never_counted() {
    let mut bytes = masked(FIN | PING, b"");
    bytes.extend(masked(FIN | PONG, &[7; 125]));
    bytes.extend(masked(FIN | CLOSE, b""));
    let seen = whole(&bytes);
    assert_eq!((seen.messages, seen.close), (0, None));
    assert_eq!(seen.passed, bytes);
    // An empty message is a message.
    let seen = whole(&masked(FIN | TEXT, b""));
    assert_eq!(seen.messages, 1);
}

#[test]
fn each_protocol_violation_closes_with_1002_and_passes_nothing_of_its_frame() {
    let ok = masked(FIN | TEXT, b"fine");
    let cases: Vec<(Vec<u8>, Violation)> = vec![
        (
            frame(FIN | TEXT, b"plain", false, false),
            Violation::Unmasked,
        ),
        (masked(FIN | 0x3, b""), Violation::ReservedOpcode),
        (masked(FIN | 0xB, b""), Violation::ReservedOpcode),
        (masked(FIN | 0x40 | TEXT, b"z"), Violation::ReservedBits),
        (masked(FIN | 0x10 | BINARY, b"z"), Violation::ReservedBits),
        (masked(FIN | PING, &[0; 126]), Violation::ControlTooLong),
        (masked(CLOSE, b""), Violation::ControlFragmented),
        (
            masked(FIN | CONTINUATION, b"x"),
            Violation::StrayContinuation,
        ),
        (
            [masked(TEXT, b"a"), masked(FIN | BINARY, b"b")].concat(),
            Violation::Interleaved,
        ),
        (
            {
                let mut long = vec![FIN | BINARY, MASKED | 127, 0x80, 0, 0, 0, 0, 0, 0, 1];
                long.extend_from_slice(&KEY);
                long
            },
            Violation::LengthTooLarge,
        ),
    ];
    for (bad, violation) in cases {
        assert_eq!(violation.code(), 1002);
        let input = [ok.clone(), bad.clone()].concat();
        let seen = whole(&input);
        assert_eq!(seen.close, Some(violation), "{bad:02x?}");
        // What came before passed; the bad frame's header did not (an
        // interleaved pair passes its first, valid, frame).
        assert!(seen.passed.len() < input.len(), "{bad:02x?}");
        assert!(input.starts_with(&seen.passed));
        assert!(seen.passed.len() >= ok.len());
    }
}

#[test]
fn reserved_bits_pass_when_an_extension_defines_them() {
    let compressed = masked(FIN | 0x40 | TEXT, b"deflated");
    assert_eq!(whole(&compressed).close, Some(Violation::ReservedBits));
    let seen = through(1 << 20, 0x40, &[&compressed]);
    assert_eq!((seen.messages, seen.close), (1, None));
    // RSV2 is not permessage-deflate's.
    let seen = through(1 << 20, 0x40, &[&masked(FIN | 0x20 | TEXT, b"x")]);
    assert_eq!(seen.close, Some(Violation::ReservedBits));

    assert_eq!(rsv_for_extensions([]), 0);
    assert_eq!(
        rsv_for_extensions([&b"permessage-deflate; client_max_window_bits"[..]]),
        0x40
    );
    assert_eq!(rsv_for_extensions([&b"Permessage-Deflate"[..]]), 0x40);
    assert_eq!(rsv_for_extensions([&b"x-webkit-mux"[..]]), RSV);
    assert_eq!(rsv_for_extensions([&b" , "[..]]), 0);
}

#[test]
fn a_message_over_the_limit_closes_with_1009_from_its_header() {
    let limit = 10;
    // Exactly the limit passes, in one frame or across fragments.
    let seen = through(limit, 0, &[&masked(FIN | BINARY, &[1; 10])]);
    assert_eq!((seen.messages, seen.close), (1, None));
    let split = [masked(BINARY, &[1; 4]), masked(FIN | CONTINUATION, &[2; 6])].concat();
    let seen = through(limit, 0, &[&split]);
    assert_eq!((seen.messages, seen.close), (1, None));

    // One byte more: closed before the frame passes, before its payload
    // even arrived.
    let header_only = &masked(FIN | BINARY, &[1; 11])[..6];
    let seen = through(limit, 0, &[header_only]);
    assert_eq!(seen.close, Some(Violation::TooBig));
    assert_eq!(Violation::TooBig.code(), 1009);
    assert!(seen.passed.is_empty());

    // Across fragments: the first passes, the one that goes over does not.
    let first = masked(TEXT, &[1; 6]);
    let over = [first.clone(), masked(FIN | CONTINUATION, &[2; 5])].concat();
    let seen = through(limit, 0, &[&over]);
    assert_eq!((seen.messages, seen.close), (1, Some(Violation::TooBig)));
    assert_eq!(seen.passed, first);

    // A 1 GiB message is refused from its 14 bytes of header.
    let mut huge = vec![FIN | BINARY, MASKED | 127];
    huge.extend_from_slice(&(1u64 << 30).to_be_bytes());
    huge.extend_from_slice(&KEY);
    let seen = through(1 << 20, 0, &[&huge]);
    assert_eq!(seen.close, Some(Violation::TooBig));
}

#[test]
fn a_long_length_form_for_a_short_payload_is_accepted() {
    // RFC 6455 asks for the shortest form; sluice only counts, and leaves
    // that to the server.
    let bytes = frame(FIN | TEXT, b"hi", true, true);
    let seen = whole(&bytes);
    assert_eq!((seen.messages, seen.close), (1, None));
    assert_eq!(seen.passed, bytes);
}

#[test]
fn once_closed_every_step_repeats_the_violation() {
    let mut reader = Reader::new(100, 0);
    let bad = frame(FIN | TEXT, b"x", false, false);
    assert_eq!(reader.step(&bad), Step::Close(Violation::Unmasked));
    assert_eq!(
        reader.step(&masked(FIN | TEXT, b"x")),
        Step::Close(Violation::Unmasked)
    );
}

/// A conversation with every kind of frame, long payloads among them.
fn conversation() -> Vec<u8> {
    let mut bytes = masked(FIN | TEXT, b"hello");
    bytes.extend(masked(BINARY, &[9; 300]));
    bytes.extend(masked(FIN | PING, b"p"));
    bytes.extend(frame(CONTINUATION, &[8; 70_000], true, false));
    bytes.extend(frame(FIN | CONTINUATION, b"end", true, true));
    bytes.extend(masked(FIN | PONG, b""));
    bytes.extend(masked(FIN | BINARY, b""));
    bytes.extend(masked(FIN | CLOSE, &1000u16.to_be_bytes()));
    bytes
}

#[test]
fn pieces_cut_anywhere_give_what_the_whole_gives() {
    let bytes = conversation();
    let expected = whole(&bytes);
    assert_eq!((expected.messages, expected.close), (3, None));
    assert!(expected.passed == bytes);
    // Every cut through the headers and around them, and some through the
    // long payload; every pair of cuts among the first frames.
    let long = 5 + 6 + 300 + 6 + 6 + 1;
    let cuts = (0..long + 64)
        .chain((long + 64..bytes.len() - 64).step_by(997))
        .chain(bytes.len() - 64..=bytes.len());
    for cut in cuts {
        let seen = through(1 << 20, 0, &[&bytes[..cut], &bytes[cut..]]);
        assert_eq!(seen.messages, expected.messages, "cut at {cut}");
        assert!(seen.passed == expected.passed, "cut at {cut}");
        assert_eq!(seen.close, None);
        assert!(seen.kept < MAX_HEADER, "cut at {cut}: kept {}", seen.kept);
    }
    for a in 0..40 {
        for b in a..40 {
            let seen = through(1 << 20, 0, &[&bytes[..a], &bytes[a..b], &bytes[b..]]);
            assert_eq!(seen.messages, expected.messages, "cuts at {a}, {b}");
            assert!(seen.passed == expected.passed, "cuts at {a}, {b}");
            assert_eq!(seen.close, None, "cuts at {a}, {b}");
        }
    }
    // One byte at a time.
    let bytes_one_by_one: Vec<&[u8]> = bytes.chunks(1).collect();
    let seen = through(1 << 20, 0, &bytes_one_by_one);
    assert_eq!(seen.messages, expected.messages);
    assert!(seen.passed == expected.passed);
    assert!(seen.kept < MAX_HEADER);

    // A violation is found wherever the cuts fall.
    let mut bad = conversation();
    bad.extend(frame(FIN | TEXT, b"naked", false, false));
    let expected = whole(&bad);
    assert_eq!(expected.close, Some(Violation::Unmasked));
    for cut in (0..bad.len() - 64)
        .step_by(101)
        .chain(bad.len() - 64..=bad.len())
    {
        let seen = through(1 << 20, 0, &[&bad[..cut], &bad[cut..]]);
        assert_eq!(seen.close, expected.close, "cut at {cut}");
        assert!(seen.passed == expected.passed, "cut at {cut}");
    }
}

#[test]
fn frame_ends_follow_a_servers_frames_in_any_pieces() {
    let mut server = frame(FIN | TEXT, b"welcome", false, false);
    server.extend(frame(FIN | BINARY, &[1; 200], false, false));
    server.extend(frame(FIN | BINARY, &[2; 70_000], false, false));
    server.extend(frame(FIN | PING, b"", false, false));
    // The boundaries, found by reading whole.
    let mut boundaries = vec![0];
    let mut at = 0;
    while at < server.len() {
        let header = Header::read(&server[at..]).unwrap();
        at += header.len + header.payload as usize;
        boundaries.push(at);
    }
    for step in [1, 2, 3, 7, 13, 100, 4096] {
        let mut ends = FrameEnds::default();
        let mut fed = 0;
        for piece in server.chunks(step) {
            // Never past the frame's end when told how much to read.
            if !ends.at_boundary() {
                let next = boundaries.iter().find(|&&b| b > fed).unwrap();
                assert!(ends.to_boundary() <= next - fed, "step {step} at {fed}");
                assert!(ends.to_boundary() > 0);
            } else {
                assert_eq!(ends.to_boundary(), 0);
            }
            ends.saw(piece);
            fed += piece.len();
            assert_eq!(
                ends.at_boundary(),
                boundaries.contains(&fed),
                "step {step} at {fed}"
            );
        }
    }
}

#[test]
fn close_frames_fit_a_control_frame_and_mask_towards_the_server() {
    let frame = close_frame(1008, "rate limited: chat", None);
    assert_eq!(&frame[..4], &[0x88, 20, 0x03, 0xF0]);
    assert_eq!(&frame[4..], b"rate limited: chat");

    let masked = close_frame(1009, "message too big", Some(KEY));
    assert_eq!(masked[0], 0x88);
    assert_eq!(masked[1], MASKED | 17);
    assert_eq!(&masked[2..6], &KEY);
    let unmasked: Vec<u8> = masked[6..]
        .iter()
        .enumerate()
        .map(|(i, b)| b ^ KEY[i % 4])
        .collect();
    assert_eq!(&unmasked[..2], &1009u16.to_be_bytes());
    assert_eq!(&unmasked[2..], b"message too big");
    // Masked, the server's reader sees a valid client frame.
    let seen = whole(&masked);
    assert_eq!((seen.messages, seen.close), (0, None));

    // A long reason is cut to 123 bytes, at a character boundary.
    let long = "é".repeat(100);
    let frame = close_frame(1008, &long, None);
    assert_eq!(frame[1] as usize, frame.len() - 2);
    assert!(frame.len() - 2 <= 125);
    assert!(std::str::from_utf8(&frame[4..]).is_ok());
    assert_eq!(frame.len() - 4, 122);
}

#[test]
fn a_close_frame_is_seen_once_its_last_byte_went_by_from_either_side() {
    let close_payload = [0x03, 0xE8, b'b', b'y', b'e'];
    for masked_frames in [true, false] {
        let before = frame(FIN | TEXT, b"hello", masked_frames, false);
        let close = frame(FIN | CLOSE, &close_payload, masked_frames, false);
        let after = frame(FIN | TEXT, b"late", masked_frames, false);
        let all = [before.clone(), close.clone(), after].concat();
        let close_end = before.len() + close.len();
        for step in [1, 2, 5, 64] {
            let mut ends = FrameEnds::default();
            let mut reader = Reader::new(1 << 20, 0);
            let mut kept = Vec::new();
            let mut fed = 0;
            for piece in all.chunks(step) {
                ends.saw(piece);
                fed += piece.len();
                assert_eq!(ends.saw_close(), fed >= close_end, "step {step} at {fed}");
                if masked_frames {
                    // The reader is shown what is undecided, as a tunnel does.
                    kept.extend_from_slice(piece);
                    let mut decided = 0;
                    loop {
                        match reader.step(&kept[decided..]) {
                            Step::Pass(n) | Step::Message(n) => decided += n,
                            Step::More => break,
                            Step::Close(violation) => panic!("{violation:?}"),
                        }
                    }
                    kept.drain(..decided);
                    let whole_at = fed - kept.len();
                    assert_eq!(reader.saw_close(), whole_at >= close_end, "step {step}");
                }
            }
        }
    }
    // An empty Close frame is whole with its header.
    let mut ends = FrameEnds::default();
    ends.saw(&frame(FIN | CLOSE, b"", false, false));
    assert!(ends.saw_close());
    // Ping and pong are not Close frames.
    let mut ends = FrameEnds::default();
    ends.saw(&frame(FIN | PING, b"x", false, false));
    ends.saw(&frame(FIN | PONG, b"", false, false));
    assert!(!ends.saw_close());
}
