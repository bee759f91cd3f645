//! Arbitrary bytes as a response body, read by `body_scan::BodyScanner` as
//! JSON or as an event stream, at a few pointers, fed whole and cut into
//! pieces the input chooses: it never panics, every cut reads what the
//! whole does, and where the body is UTF-8 the readings are serde_json's
//! (the value parsed whole and `Value::pointer`; for a stream, each event
//! the WHATWG rules split parsed on its own, the last one carrying a
//! pointer winning), but for the edges `src/body_scan/json.rs` lists.
//!
//! Input layout (so seeds are plain bodies behind four bytes):
//! byte 0: bit 0 set for an event stream; byte 1–2: which of `POINTERS`
//! to read (a bit each, little-endian; none means the first); byte 3: the
//! seed of the cuts; the rest: the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use sluice::body_scan::{BodyKind, BodyScanner, Pointer, Reading, READ_LIMIT};

const POINTERS: [&str; 16] = [
    "/usage/prompt_tokens",
    "/usage/completion_tokens",
    "/message/usage/input_tokens",
    "/usage/output_tokens",
    "/a",
    "/a/b",
    "/0",
    "/a/0",
    "/0/a",
    "/1",
    "/",
    "/a~1b",
    "/~0",
    "/é",
    "/usage",
    "/a/b/c",
];

fuzz_target!(|data: &[u8]| {
    let Some((head, body)) = data.split_first_chunk::<4>() else {
        return;
    };
    let kind = if head[0] & 1 == 1 {
        BodyKind::EventStream
    } else {
        BodyKind::Json
    };
    let mask = match u16::from_le_bytes([head[1], head[2]]) {
        0 => 1,
        mask => mask,
    };
    let texts: Vec<&str> = (0..16)
        .filter(|bit| mask & (1 << bit) != 0)
        .map(|bit| POINTERS[bit])
        .collect();
    let pointers: Vec<Pointer> = texts
        .iter()
        .map(|text| Pointer::parse(text).unwrap())
        .collect();
    let refs: Vec<&Pointer> = pointers.iter().collect();

    let whole = scan(kind, &refs, &[body]);
    let pieces = cut(body, head[3]);
    assert_eq!(scan(kind, &refs, &pieces), whole, "cut into {pieces:?}");
    if body.len() <= 512 {
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(scan(kind, &refs, &bytes), whole, "a byte at a time");
    }

    if std::str::from_utf8(body).is_err() {
        return;
    }
    let reference = match kind {
        BodyKind::EventStream => reference_stream(body, &texts),
        BodyKind::Json => match serde_json::from_slice::<Value>(body) {
            Ok(value) => Some(
                texts
                    .iter()
                    .map(|text| reference_value(&value, text))
                    .collect(),
            ),
            // Not JSON: the scanner counts what it scanned before the
            // break, which serde_json has no word on.
            Err(_) => None,
        },
    };
    if let Some(reference) = reference {
        for (p, text) in texts.iter().enumerate() {
            assert!(
                agrees(whole[p], reference[p]),
                "{text}: {:?}, serde_json {:?}, in {:?}",
                whole[p],
                reference[p],
                String::from_utf8_lossy(body)
            );
        }
    }
});

fn scan(kind: BodyKind, pointers: &[&Pointer], pieces: &[&[u8]]) -> Vec<Reading> {
    let mut scanner = BodyScanner::new(kind, pointers);
    for piece in pieces {
        scanner.feed(piece);
    }
    (0..pointers.len()).map(|p| scanner.reading(p)).collect()
}

/// `body` cut at up to 8 places a xorshift seeded with `seed` picks.
fn cut(body: &[u8], seed: u8) -> Vec<&[u8]> {
    let mut x = u32::from(seed).wrapping_mul(0x9E37_79B9) | 1;
    let mut cuts: Vec<usize> = (0..seed % 9)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as usize % (body.len() + 1)
        })
        .collect();
    cuts.sort_unstable();
    let mut pieces = Vec::new();
    let mut from = 0;
    for at in cuts {
        pieces.push(&body[from..at]);
        from = at;
    }
    pieces.push(&body[from..]);
    pieces
}

/// What serde_json reads at `pointer` in `value`, as a charge; `-0.0` for
/// a negative number that rounds to zero (the scanner calls it malformed).
fn reference_value(value: &Value, pointer: &str) -> Reading {
    match value.pointer(pointer) {
        None => Reading::Missing,
        Some(Value::Number(number)) => match number.as_f64() {
            Some(n) if n.is_finite() && n >= 0.0 => Reading::Number(n),
            _ => Reading::Malformed,
        },
        Some(_) => Reading::Malformed,
    }
}

/// The scanner's reading against serde_json's: numbers within a few units
/// in the last place (serde_json is not always correctly rounded), and a
/// negative number rounding to zero is malformed or 0 (`-0` is 0).
fn agrees(ours: Reading, reference: Reading) -> bool {
    match (ours, reference) {
        (Reading::Number(a), Reading::Number(b)) => {
            a == b || (a - b).abs() <= a.abs().max(b.abs()) * 4.0 * f64::EPSILON
        }
        (Reading::Malformed, Reading::Number(b)) => b == 0.0 && b.is_sign_negative(),
        (a, b) => a == b,
    }
}

/// Each event's data as the WHATWG rules split `stream`.
fn reference_events(stream: &[u8]) -> Vec<Vec<u8>> {
    let mut rest = stream.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(stream);
    let mut events = Vec::new();
    let mut data = Vec::new();
    let mut has_data = false;
    // An unterminated last line is never read (nor its event dispatched).
    while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
        let line = &rest[..end];
        let crlf = rest[end] == b'\r' && rest.get(end + 1) == Some(&b'\n');
        rest = &rest[end + 1 + usize::from(crlf)..];
        if line.is_empty() {
            if has_data {
                events.push(std::mem::take(&mut data));
            }
            has_data = false;
            continue;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if name == b"data" {
            if has_data {
                data.push(b'\n');
            }
            data.extend_from_slice(value);
            has_data = true;
        }
    }
    events
}

/// The readings of an event stream by the reference; `None` when
/// serde_json cannot say (an event with a number beyond `f64`, which it
/// refuses and the scanner reads).
fn reference_stream(stream: &[u8], pointers: &[&str]) -> Option<Vec<Reading>> {
    let mut readings = vec![Reading::Missing; pointers.len()];
    for data in reference_events(stream) {
        if data.len() > READ_LIMIT {
            continue;
        }
        match serde_json::from_slice::<Value>(&data) {
            Ok(value) => {
                for (reading, pointer) in readings.iter_mut().zip(pointers) {
                    match reference_value(&value, pointer) {
                        Reading::Missing => {}
                        found => *reading = found,
                    }
                }
            }
            Err(error) if error.to_string().contains("number out of range") => return None,
            Err(_) => {}
        }
    }
    Some(readings)
}
