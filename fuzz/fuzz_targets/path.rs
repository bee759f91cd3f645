//! Arbitrary text as a request path: `key::path::normalize` never panics,
//! agrees with a slow reference implementation of its documented contract,
//! and keeps the promises of its doc comment (the output starts with `/`,
//! has no `//`, no `.`/`..` segment, no escaped unreserved character, no
//! lower-case escape hex, and comes back borrowed when normalised again).
#![no_main]

use std::borrow::Cow;

use libfuzzer_sys::fuzz_target;
use sluice::key::path::{normalize, PathError};

fuzz_target!(|data: &[u8]| {
    // Paths reach `normalize` as `&str` (from `http::Uri`); non-UTF-8 cannot.
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    let result = normalize(input);
    assert_eq!(
        result.as_deref().map_err(|e| *e),
        reference(input).as_deref().map_err(|e| *e),
        "normalize({input:?}) disagrees with the reference"
    );
    let Ok(out) = result else { return };
    assert!(out.starts_with('/'), "{input:?} -> {out:?}");
    assert!(!out.contains("//"), "{input:?} -> {out:?}");
    assert!(
        !out.split('/').any(|s| s == "." || s == ".."),
        "{input:?} -> {out:?}"
    );
    assert_no_unnormal_escape(input, &out);
    match &out {
        Cow::Borrowed(same) => assert!(
            *same == input || (input.is_empty() && *same == "/"),
            "{input:?} borrowed as {same:?}"
        ),
        Cow::Owned(new) => {
            assert_ne!(new, input, "allocated for an already-normal path");
            // Decoding shrinks and re-casing keeps the length.
            assert!(new.len() <= input.len(), "{input:?} grew into {new:?}");
        }
    }
    match normalize(&out) {
        Ok(Cow::Borrowed(again)) => assert_eq!(again, &*out),
        other => panic!("{input:?} -> {out:?} is not a fixed point: {other:?}"),
    }
});

fn assert_no_unnormal_escape(input: &str, out: &str) {
    let b = out.as_bytes();
    for (i, _) in out.match_indices('%') {
        let (hi, lo) = (b[i + 1], b[i + 2]);
        assert!(
            hi.is_ascii_hexdigit() && lo.is_ascii_hexdigit(),
            "{input:?} -> {out:?}: bad escape at {i}"
        );
        assert!(
            !hi.is_ascii_lowercase() && !lo.is_ascii_lowercase(),
            "{input:?} -> {out:?}: lower-case escape at {i}"
        );
        let byte = u8::from_str_radix(&out[i + 1..i + 3], 16).unwrap();
        assert!(
            !is_unreserved(byte),
            "{input:?} -> {out:?}: escaped unreserved character at {i}"
        );
    }
}

/// The contract written out the slow way: validate every escape, decode the
/// unreserved ones, split on `/`, resolve `.`/`..` on a stack, keep a
/// trailing slash when the last segment was empty or a dot segment.
fn reference(input: &str) -> Result<String, PathError> {
    if input.is_empty() {
        return Ok("/".to_owned());
    }
    let Some(rest) = input.strip_prefix('/') else {
        return Err(PathError::NotAbsolute);
    };
    let b = input.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let ok =
                b.len() > i + 2 && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit();
            if !ok {
                return Err(PathError::BadPercentEncoding);
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    let mut stack: Vec<String> = Vec::new();
    let mut trailing = false;
    let segments: Vec<&str> = rest.split('/').collect();
    for (n, raw) in segments.iter().enumerate() {
        let seg = decode_unreserved(raw);
        let last = n + 1 == segments.len();
        match seg.as_str() {
            "" | "." => trailing = last,
            ".." => {
                if stack.pop().is_none() {
                    return Err(PathError::AboveRoot);
                }
                trailing = last;
            }
            _ => {
                stack.push(seg);
                trailing = false;
            }
        }
    }
    let mut out = String::new();
    for seg in &stack {
        out.push('/');
        out.push_str(seg);
    }
    if out.is_empty() || trailing {
        out.push('/');
    }
    Ok(out)
}

fn decode_unreserved(raw: &str) -> String {
    let mut out = String::new();
    let mut rest = raw;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let hex = &rest[at + 1..at + 3];
        let byte = u8::from_str_radix(hex, 16).unwrap();
        if is_unreserved(byte) {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push_str(&hex.to_ascii_uppercase());
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    out
}

fn is_unreserved(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~')
}
