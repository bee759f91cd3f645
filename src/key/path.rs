//! Request path normalisation: the one canonical spelling of a path that rule
//! matching, bucket keys and (with `server.normalize_path`) the upstream all see.
//!
//! This module owns the rules of docs/configuration.md's "Paths" and hostile-input row D1: percent-decode
//! only unreserved characters, upper-case the hex of every other escape, collapse
//! `//`, resolve `.` and `..` (RFC 3986 §5.2.4), and refuse what cannot be
//! normalised. It runs on every request, so an already-normal path is returned
//! borrowed after a single scan and costs no allocation.
//!
//! It must not fold case (RFC 3986 paths are case-sensitive), decode `%2F` into a
//! separator (that would change which resource an upstream serves), interpret `;`
//! parameters, or look at the query: callers pass the path component only.
//! What the upstream serves alike (case, a trailing slash, `;` parameters) is
//! folded afterwards, for matching and keying only ([`super::fold`]); the
//! upstream receives the path as normalised here.

use std::borrow::Cow;

/// Why a path cannot be normalised; answered with `400` and the message as the
/// problem document's `detail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// A `%` not followed by two hexadecimal digits.
    #[error(
        "the request path contains a '%' that is not followed by two hexadecimal digits; \
         encode a literal percent sign as %25"
    )]
    BadPercentEncoding,
    /// A `..` segment would climb above `/`.
    #[error("the request path uses '..' to climb above the root '/'")]
    AboveRoot,
    /// A `..` segment with `;` parameters (`/..;/admin`) would climb above
    /// `/` once they are removed, as `server.paths_alike = ["params"]` says
    /// the upstream removes them ([`super::fold`]).
    #[error(
        "the request path uses '..;' (a '..' segment with ';' parameters, which the upstream \
         reads as '..') to climb above the root '/'"
    )]
    AboveRootWithParams,
    /// The path does not start with `/` (for example `*` or a relative path).
    #[error("the request path must start with '/'")]
    NotAbsolute,
}

/// Normalises a request path (the path component only, without the query).
///
/// Returns `Cow::Borrowed` when `path` is already normal, which is the common case.
/// The empty path is treated as `/` (RFC 9112 §3.2.1 says an empty path in an
/// absolute-form target means `/`) and returned borrowed without allocating.
/// `*` (the `OPTIONS *` target) and any other path not starting with `/` give
/// [`PathError::NotAbsolute`]; the caller decides what to do with them.
///
/// The output always starts with `/`, contains no `//`, no `.` or `..` segment,
/// no `%` escape of an unreserved character and no lower-case escape hex, and
/// `normalize` returns it borrowed when given it again.
pub fn normalize(path: &str) -> Result<Cow<'_, str>, PathError> {
    if path.is_empty() {
        return Ok(Cow::Borrowed("/"));
    }
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if is_normal(path.as_bytes())? {
        return Ok(Cow::Borrowed(path));
    }
    rewrite(path).map(Cow::Owned)
}

/// The fast path: one scan deciding whether `path` (which starts with `/`) needs
/// rewriting. Reports a bad escape directly, since the slow path would only find
/// the same one again.
fn is_normal(b: &[u8]) -> Result<bool, PathError> {
    let mut normal = true;
    // Start of the current segment (just after its `/`).
    let mut seg = 1;
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'/' => {
                if is_dot_segment(&b[seg..i]) || i == seg {
                    // `//`, `/./` or `/../`.
                    normal = false;
                }
                seg = i + 1;
            }
            b'%' => {
                let (hi, lo) = escape_at(b, i)?;
                let byte = (hex_val(hi) << 4) | hex_val(lo);
                if is_unreserved(byte) || hi.is_ascii_lowercase() || lo.is_ascii_lowercase() {
                    normal = false;
                }
                i += 2;
            }
            _ => {}
        }
        i += 1;
    }
    // The last segment: empty means a trailing slash (significant, normal), but a
    // trailing `.` or `..` still has to be resolved.
    if is_dot_segment(&b[seg.min(b.len())..]) {
        normal = false;
    }
    Ok(normal)
}

/// The slow path: builds the normal form segment by segment.
///
/// Percent-decoding never produces a `/` (it is reserved), so segments can be
/// split on the raw input; each segment is decoded straight into `out` and then
/// checked for `.`/`..`, so that `%2e%2e` is resolved like `..`.
fn rewrite(path: &str) -> Result<String, PathError> {
    // The one allocation of a non-normal path; the output is never longer than
    // the input (decoding shrinks, re-casing keeps the length).
    let mut out = String::with_capacity(path.len());
    // `out` holds `/seg1/seg2…` without a trailing slash; the last input segment
    // decides whether one is appended.
    let mut trailing_slash = false;
    let mut segments = path[1..].split('/').peekable();
    while let Some(raw) = segments.next() {
        let last = segments.peek().is_none();
        let mark = out.len();
        out.push('/');
        decode_segment(raw, &mut out)?;
        let seg = &out[mark + 1..];
        if seg.is_empty() || seg == "." {
            out.truncate(mark);
            trailing_slash = last;
        } else if seg == ".." {
            out.truncate(mark);
            match out.rfind('/') {
                Some(parent) => out.truncate(parent),
                None => return Err(PathError::AboveRoot),
            }
            trailing_slash = last;
        } else {
            trailing_slash = false;
        }
    }
    if out.is_empty() || trailing_slash {
        out.push('/');
    }
    Ok(out)
}

/// Appends `raw` to `out`, decoding escapes of unreserved characters and
/// upper-casing the hex of all others.
fn decode_segment(raw: &str, out: &mut String) -> Result<(), PathError> {
    let b = raw.as_bytes();
    // Copy runs without `%` as whole `&str` slices, which keeps any non-ASCII
    // text intact without re-validating UTF-8.
    let mut run = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            i += 1;
            continue;
        }
        out.push_str(&raw[run..i]);
        let (hi, lo) = escape_at(b, i)?;
        let byte = (hex_val(hi) << 4) | hex_val(lo);
        if is_unreserved(byte) {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(hi.to_ascii_uppercase()));
            out.push(char::from(lo.to_ascii_uppercase()));
        }
        i += 3;
        run = i;
    }
    out.push_str(&raw[run..]);
    Ok(())
}

/// The two hex digits after the `%` at `b[i]`.
fn escape_at(b: &[u8], i: usize) -> Result<(u8, u8), PathError> {
    match (b.get(i + 1), b.get(i + 2)) {
        (Some(&hi), Some(&lo)) if hi.is_ascii_hexdigit() && lo.is_ascii_hexdigit() => Ok((hi, lo)),
        _ => Err(PathError::BadPercentEncoding),
    }
}

fn hex_val(d: u8) -> u8 {
    match d {
        b'0'..=b'9' => d - b'0',
        b'a'..=b'f' => d - b'a' + 10,
        b'A'..=b'F' => d - b'A' + 10,
        _ => 0,
    }
}

/// RFC 3986 §2.3 unreserved characters: the only ones whose escapes are decoded.
fn is_unreserved(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~')
}

fn is_dot_segment(seg: &[u8]) -> bool {
    seg == b"." || seg == b".."
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::XorShift;

    fn norm(p: &str) -> Result<String, PathError> {
        normalize(p).map(Cow::into_owned)
    }

    fn assert_borrowed(p: &str) {
        match normalize(p) {
            Ok(Cow::Borrowed(s)) => assert_eq!(s, p),
            other => panic!("{p:?} should come back borrowed, got {other:?}"),
        }
    }

    #[test]
    fn already_normal_paths_are_borrowed() {
        for p in [
            "/",
            "/a",
            "/a/",
            "/api/login",
            "/api/login;x",
            "/api%2Flogin",
            "/a%20b",
            "/.well-known/x",
            "/a/..b/c.",
            "/a/...",
            "/API/Login",
            "/é",
        ] {
            assert_borrowed(p);
        }
    }

    #[test]
    fn spec_examples_all_give_slash_b() {
        for p in ["/a/../b", "//b", "/%62"] {
            assert_eq!(norm(p).unwrap(), "/b", "{p}");
        }
    }

    #[test]
    fn d1_variants_collapse_to_the_login_path() {
        for p in [
            "//api/login",
            "/api/./login",
            "/api/x/../login",
            "/api/%6Cogin",
            "/api/%6cogin",
            "/api//login",
            "/api/x/%2e%2e/login",
            "/api/x/%2E./login",
            "/%61pi/login",
        ] {
            assert_eq!(norm(p).unwrap(), "/api/login", "{p}");
        }
    }

    #[test]
    fn d1_variants_that_stay_distinct() {
        assert_eq!(norm("/api%2Flogin").unwrap(), "/api%2Flogin");
        assert_eq!(norm("/api%2flogin").unwrap(), "/api%2Flogin");
        assert_eq!(norm("/api/login/").unwrap(), "/api/login/");
        assert_eq!(norm("/api/login;x").unwrap(), "/api/login;x");
        assert_eq!(norm("/API/login").unwrap(), "/API/login");
    }

    #[test]
    fn trailing_slash_is_kept_and_produced_by_dot_segments() {
        assert_eq!(norm("/a/").unwrap(), "/a/");
        assert_eq!(norm("/a/.").unwrap(), "/a/");
        assert_eq!(norm("/a/./").unwrap(), "/a/");
        assert_eq!(norm("/a/b/..").unwrap(), "/a/");
        assert_eq!(norm("/a/b/../").unwrap(), "/a/");
        assert_eq!(norm("/a//").unwrap(), "/a/");
        assert_eq!(norm("/a/..").unwrap(), "/");
        assert_eq!(norm("/.").unwrap(), "/");
        assert_eq!(norm("//").unwrap(), "/");
        assert_eq!(norm("/./.").unwrap(), "/");
    }

    #[test]
    fn other_escapes_stay_encoded_with_upper_case_hex() {
        assert_eq!(norm("/%2f").unwrap(), "/%2F");
        assert_eq!(norm("/a%3fb").unwrap(), "/a%3Fb");
        assert_eq!(norm("/%c3%a9").unwrap(), "/%C3%A9");
        assert_eq!(norm("/%7E%2D%5F%2E").unwrap(), "/~-_.");
        assert_eq!(norm("/%25").unwrap(), "/%25");
        assert_borrowed("/%25");
    }

    #[test]
    fn encoded_slash_is_not_a_separator_for_dot_segments() {
        // `%2F..` is one segment spelled `%2F..`, not `/..`.
        assert_eq!(norm("/a%2F..").unwrap(), "/a%2F..");
        assert_eq!(norm("/a/%2e%2e%2fb").unwrap(), "/a/..%2Fb");
    }

    #[test]
    fn bad_percent_encoding_is_rejected() {
        for p in ["/%zz", "/%", "/%4", "/a%g1", "/%2e%2", "//%zz", "/%1%41"] {
            assert_eq!(normalize(p), Err(PathError::BadPercentEncoding), "{p}");
        }
    }

    #[test]
    fn climbing_above_the_root_is_rejected() {
        for p in [
            "/..",
            "/../",
            "/a/../..",
            "/%2e%2e",
            "/%2E%2e/a",
            "//..",
            "/./..",
        ] {
            assert_eq!(normalize(p), Err(PathError::AboveRoot), "{p}");
        }
    }

    #[test]
    fn relative_and_asterisk_targets_are_not_absolute() {
        for p in ["*", "a/b", "%2Fa", ".", "../a"] {
            assert_eq!(normalize(p), Err(PathError::NotAbsolute), "{p}");
        }
    }

    #[test]
    fn empty_path_means_root_without_allocating() {
        assert!(matches!(normalize(""), Ok(Cow::Borrowed("/"))));
    }

    #[test]
    fn errors_read_as_sentences() {
        for e in [
            PathError::BadPercentEncoding,
            PathError::AboveRoot,
            PathError::AboveRootWithParams,
            PathError::NotAbsolute,
        ] {
            let s = e.to_string();
            assert!(s.starts_with("the request path"), "{s}");
        }
    }

    #[test]
    fn never_panics_and_output_is_a_fixed_point() {
        const ALPHABET: [&str; 20] = [
            "/", "/", ".", ".", "%", "2", "e", "E", "f", "F", "6", "a", "b", ";", "~", "é", "%2e",
            "%2F", "..", "z",
        ];
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        let mut input = String::new();
        for _ in 0..50_000 {
            input.clear();
            let len = (rng.next() % 16) as usize;
            for _ in 0..len {
                input.push_str(ALPHABET[(rng.next() % ALPHABET.len() as u64) as usize]);
            }
            let Ok(out) = normalize(&input) else { continue };
            let owned = matches!(out, Cow::Owned(_));
            assert!(out.starts_with('/'), "{input:?} -> {out:?}");
            assert!(!out.contains("//"), "{input:?} -> {out:?}");
            assert!(
                !out.split('/').any(|s| s == "." || s == ".."),
                "{input:?} -> {out:?}"
            );
            if owned {
                assert_ne!(&*out, input, "allocated for an already-normal path");
            }
            match normalize(&out) {
                Ok(Cow::Borrowed(again)) => assert_eq!(again, &*out),
                other => panic!("{input:?} -> {out:?} is not a fixed point: {other:?}"),
            }
        }
    }
}
