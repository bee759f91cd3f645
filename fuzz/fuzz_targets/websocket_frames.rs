//! Arbitrary bytes as what a WebSocket client sends, read by
//! `websocket::frames::Reader` in pieces the input chooses, as the tunnel
//! feeds it (the bytes not yet decided kept in front of the next piece):
//! it never panics, keeps less than a header between pieces, and agrees
//! with a reference reader written here that parses the whole buffer at
//! once — the same messages counted, the same close code, the same bytes
//! passed on. The same bytes as a server's, followed by
//! `websocket::frames::FrameEnds`, end their frames where the reference
//! says, and it never lets a read go past one.
//!
//! Input layout (seeds are frames behind three bytes): byte 0: the
//! largest message (`1 << (b % 24)`, or 125 when b is 255); byte 1: the
//! reserved bits the extensions allow (`b & 0x70`); byte 2: the seed of
//! the cuts; the rest: the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::websocket::frames::{FrameEnds, Reader, Step, MAX_HEADER};

/// What reading the bytes came to.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    messages: usize,
    /// How many bytes, from the start, were passed on.
    passed: usize,
    close: Option<u16>,
}

/// One header, whole: its length, the payload's, and the first two bytes.
fn header(bytes: &[u8]) -> Option<(usize, u64, u8, u8)> {
    let (first, second) = (*bytes.first()?, *bytes.get(1)?);
    let (extended, short) = match second & 0x7F {
        126 => (2, None),
        127 => (8, None),
        n => (0, Some(u64::from(n))),
    };
    let len = 2 + extended + if second & 0x80 != 0 { 4 } else { 0 };
    let head = bytes.get(..len)?;
    let payload = short.unwrap_or_else(|| {
        head[2..2 + extended]
            .iter()
            .fold(0, |n, &b| (n << 8) | u64::from(b))
    });
    Some((len, payload, first, second))
}

/// RFC 6455 §5 read whole: a protocol error (1002) wins over a message
/// too big (1009); a header cut off ends the reading quietly.
fn reference(bytes: &[u8], max_message: u64, rsv_allowed: u8) -> Outcome {
    let mut outcome = Outcome {
        messages: 0,
        passed: 0,
        close: None,
    };
    let mut at = 0usize;
    let mut message: Option<u64> = None;
    while let Some((len, payload, first, second)) = header(&bytes[at..]) {
        let fin = first & 0x80 != 0;
        let opcode = first & 0x0F;
        let control = opcode >= 8;
        let broken = first & 0x70 & !rsv_allowed != 0
            || !matches!(opcode, 0 | 1 | 2 | 8 | 9 | 10)
            || second & 0x80 == 0
            || payload >> 63 != 0
            || (control && (!fin || payload > 125))
            || (opcode == 0 && message.is_none())
            || (matches!(opcode, 1 | 2) && message.is_some());
        if broken {
            outcome.close = Some(1002);
            return outcome;
        }
        if !control {
            let total = message.unwrap_or(0).saturating_add(payload);
            if total > max_message {
                outcome.close = Some(1009);
                return outcome;
            }
            if opcode != 0 {
                outcome.messages += 1;
            }
            message = (!fin).then_some(total);
        }
        // The header passes, and as much of the payload as came.
        let end = (at + len).saturating_add(usize::try_from(payload).unwrap_or(usize::MAX));
        outcome.passed = end.min(bytes.len());
        if end >= bytes.len() {
            return outcome;
        }
        at = end;
    }
    outcome
}

/// The piece lengths `seed` cuts `len` bytes into.
fn cuts(seed: u8, len: usize) -> Vec<usize> {
    let mut state = u32::from(seed) | 1;
    let mut pieces = Vec::new();
    let mut left = len;
    while left > 0 {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let piece = match (state >> 16) % 4 {
            0 => 1,
            1 => 1 + (state as usize >> 8) % 3,
            2 => 1 + (state as usize >> 8) % 17,
            _ => 1 + (state as usize >> 8) % 4096,
        }
        .min(left);
        pieces.push(piece);
        left -= piece;
    }
    pieces
}

fuzz_target!(|data: &[u8]| {
    let Some((head, bytes)) = data.split_first_chunk::<3>() else {
        return;
    };
    let max_message = match head[0] {
        255 => 125,
        b => 1u64 << (b % 24),
    };
    let rsv_allowed = head[1] & 0x70;
    let expected = reference(bytes, max_message, rsv_allowed);

    // As the tunnel reads: pieces, the undecided rest kept in front.
    let mut reader = Reader::new(max_message, rsv_allowed);
    let mut seen = Outcome {
        messages: 0,
        passed: 0,
        close: None,
    };
    let mut kept: Vec<u8> = Vec::new();
    let mut at = 0;
    'pieces: for piece in cuts(head[2], bytes.len()) {
        kept.extend_from_slice(&bytes[at..at + piece]);
        at += piece;
        loop {
            match reader.step(&kept) {
                Step::Pass(n) => {
                    assert!(n > 0 && n <= kept.len());
                    seen.passed += n;
                    kept.drain(..n);
                }
                Step::Message(n) => {
                    assert!(n <= kept.len());
                    seen.messages += 1;
                    seen.passed += n;
                    kept.drain(..n);
                }
                Step::More => break,
                Step::Close(violation) => {
                    seen.close = Some(violation.code());
                    break 'pieces;
                }
            }
        }
        assert!(kept.len() < MAX_HEADER, "kept {} bytes", kept.len());
    }
    assert_eq!(seen, expected);

    // The same bytes as a server's: where its frames end.
    let mut boundaries = vec![0usize];
    let mut at = 0usize;
    while let Some((len, payload, _, _)) = header(&bytes[at..]) {
        let Some(end) = usize::try_from(payload)
            .ok()
            .and_then(|payload| (at + len).checked_add(payload))
        else {
            break;
        };
        if end > bytes.len() {
            break;
        }
        boundaries.push(end);
        at = end;
        if end == bytes.len() {
            break;
        }
    }
    let last = *boundaries.last().unwrap_or(&0);
    let mut ends = FrameEnds::default();
    let mut fed = 0;
    for piece in cuts(head[2].wrapping_add(1), bytes.len()) {
        if fed < last {
            let next = boundaries
                .iter()
                .find(|&&b| b > fed)
                .copied()
                .unwrap_or(last);
            assert_eq!(ends.at_boundary(), boundaries.contains(&fed));
            if !ends.at_boundary() {
                assert!(ends.to_boundary() > 0 && ends.to_boundary() <= next - fed);
            }
        }
        ends.saw(&bytes[fed..fed + piece]);
        fed += piece;
    }
});
