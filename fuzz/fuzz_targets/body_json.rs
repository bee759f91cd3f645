//! Arbitrary bytes as a request body, judged by
//! `key::unreadable_body::judge` (docs/conversation.md, "A body sluice
//! cannot read"): it never panics; a body it calls strict JSON is exactly
//! one serde_json reads as a `Value`; and a body it refuses (lenient) is
//! exactly an object or array that a lenient reader still runs, so nothing
//! a lenient server would run is left to `missing`.
//!
//! The lenient reader is built here on serde_json, apart from the judge:
//! the text decoded as Python's `json.loads(bytes)` detects it (byte-order
//! marks, UTF-16 and UTF-32 by their zero bytes), invalid UTF-8 replaced as
//! Node's `TextDecoder` and Go replace it, `NaN` and `Infinity` and numbers
//! beyond a float read as Python reads them, unpaired surrogate escapes
//! kept as Python and JavaScript keep them, any depth, and only the first
//! value read, as Go's `json.Decoder` and Jackson read it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use sluice::key::unreadable_body::{judge, JsonText};

fuzz_target!(|body: &[u8]| {
    let judged = judge(body);
    let strict = serde_json::from_slice::<Value>(body).is_ok();
    assert_eq!(judged == JsonText::Strict, strict, "{judged:?}");
    let lenient = lenient_reads_a_container(body);
    match judged {
        JsonText::Strict => {}
        JsonText::Lenient(why) => {
            assert!(lenient, "refused ({why:?}), yet no lenient reader runs it")
        }
        JsonText::NotJson => assert!(!lenient, "a lenient reader runs what is left to missing"),
    }
});

/// Whether a lenient reader reads an object or an array first in `body`.
fn lenient_reads_a_container(body: &[u8]) -> bool {
    let text = relaxed(&decoded(body));
    let mut reader = serde_json::Deserializer::from_str(&text);
    reader.disable_recursion_limit();
    let first = serde_stacker::Deserializer::new(&mut reader);
    match <Value as serde::Deserialize>::deserialize(first) {
        Ok(value) => value.is_object() || value.is_array(),
        Err(_) => false,
    }
}

/// `body` as text, decoded as Python's `json.detect_encoding` says and
/// lossily, its byte-order mark dropped.
fn decoded(body: &[u8]) -> String {
    let (width, big) = match body {
        [0, 0, 0xFE, 0xFF, ..] => (4, true),
        [0xFF, 0xFE, 0, 0, ..] => (4, false),
        [0xFE, 0xFF, ..] => (2, true),
        [0xFF, 0xFE, ..] => (2, false),
        _ if body.len() >= 4 && body[0] == 0 => (if body[1] != 0 { 2 } else { 4 }, true),
        _ if body.len() >= 4 && body[1] == 0 => {
            (if body[2] != 0 || body[3] != 0 { 2 } else { 4 }, false)
        }
        [0, _] => (2, true),
        [_, 0] => (2, false),
        _ => (1, false),
    };
    let text = match width {
        1 => String::from_utf8_lossy(body).into_owned(),
        2 => {
            let units = body.chunks_exact(2).map(|pair| {
                let pair = [pair[0], pair[1]];
                if big {
                    u16::from_be_bytes(pair)
                } else {
                    u16::from_le_bytes(pair)
                }
            });
            char::decode_utf16(units)
                .map(|c| c.unwrap_or('\u{FFFD}'))
                .collect()
        }
        _ => body
            .chunks_exact(4)
            .map(|four| {
                let four = [four[0], four[1], four[2], four[3]];
                let unit = if big {
                    u32::from_be_bytes(four)
                } else {
                    u32::from_le_bytes(four)
                };
                char::from_u32(unit).unwrap_or('\u{FFFD}')
            })
            .collect(),
    };
    text.strip_prefix('\u{FEFF}')
        .map(str::to_owned)
        .unwrap_or(text)
}

/// `text` with what a lenient reader takes and serde_json does not made
/// plain JSON: `NaN` as `null`, `Infinity` as `1`, a number beyond a float
/// as `0` (each between spaces, so nothing written beside it joins it),
/// an unpaired surrogate escape as U+FFFD; and cut after its first value's
/// end, which serde_json finds.
fn relaxed(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut in_string = false;
    while let Some(c) = rest.chars().next() {
        if in_string {
            if let Some(escape) = rest.strip_prefix("\\u") {
                let (unit, after) = hex(escape);
                match unit {
                    Some(high @ 0xD800..=0xDBFF) => {
                        let low = after.strip_prefix("\\u").map(hex);
                        match low {
                            Some((Some(low @ 0xDC00..=0xDFFF), after)) => {
                                out.push_str(&format!("\\u{high:04x}\\u{low:04x}"));
                                rest = after;
                            }
                            _ => {
                                out.push_str("\\ufffd");
                                rest = after;
                            }
                        }
                        continue;
                    }
                    Some(0xDC00..=0xDFFF) => {
                        out.push_str("\\ufffd");
                        rest = after;
                        continue;
                    }
                    _ => {}
                }
            }
            if let Some(after) = rest.strip_prefix('\\') {
                // An escape and its letter, whatever it is: serde_json judges.
                out.push('\\');
                rest = after;
                if let Some(next) = rest.chars().next() {
                    out.push(next);
                    rest = &rest[next.len_utf8()..];
                }
                continue;
            }
            in_string = c != '"';
        } else if c == '"' {
            in_string = true;
        } else if let Some(after) = rest.strip_prefix("NaN") {
            out.push_str(" null ");
            rest = after;
            continue;
        } else if let Some(after) = rest.strip_prefix("-Infinity") {
            out.push_str(" -1 ");
            rest = after;
            continue;
        } else if let Some(after) = rest.strip_prefix("Infinity") {
            out.push_str(" 1 ");
            rest = after;
            continue;
        } else if c.is_ascii_digit()
            || rest.starts_with(|c| c == '-') && rest[1..].starts_with(|c: char| c.is_ascii_digit())
        {
            let end = 1 + rest[1..]
                .find(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c)))
                .unwrap_or(rest.len() - 1);
            let written = &rest[..end];
            let is_json = serde_json::from_str::<serde::de::IgnoredAny>(written).is_ok();
            if is_json && written.parse::<f64>().is_ok_and(f64::is_infinite) {
                out.push_str(" 0 ");
            } else {
                out.push_str(written);
            }
            rest = &rest[end..];
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    first_value(out)
}

/// Four hexadecimal digits at the start of `text`, and what follows.
fn hex(text: &str) -> (Option<u16>, &str) {
    match text
        .get(..4)
        .filter(|four| four.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        Some(four) => (u16::from_str_radix(four, 16).ok(), &text[4..]),
        None => (None, text),
    }
}

/// `text` up to the end of its first JSON value, when serde_json's stream
/// reader finds one (any depth).
fn first_value(text: String) -> String {
    let mut reader = serde_json::Deserializer::from_str(&text);
    reader.disable_recursion_limit();
    let mut stream = reader.into_iter::<serde::de::IgnoredAny>();
    match stream.next() {
        Some(Ok(_)) => text[..stream.byte_offset()].to_owned(),
        _ => text,
    }
}
