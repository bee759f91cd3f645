//! Request ids (`X-Request-Id`): the one a trusted proxy in front already
//! gave the request, or one sluice makes. The same id goes upstream, on
//! the response, in every problem document sluice writes (`request_id`)
//! and in the access log, so that a client's complaint, sluice's log and
//! the upstream's log can be tied together (docs/edge.md, "The access log
//! and request ids").
//!
//! Every request gets one, so making one must cost next to nothing: each
//! thread draws a random 64-bit prefix once (one `getrandom` per thread),
//! then counts. The id is kept as text, and the next one is the previous
//! with its hexadecimal count advanced in place, a digit or two on almost
//! every call: no lock, no atomic shared between cores, no system call and
//! no allocation per request. Ids are unique per thread by the count and
//! between threads, processes and instances by the prefix (64 random bits:
//! two threads of a fleet share a prefix among billions).

use std::cell::RefCell;

use http::header::{HeaderMap, HeaderName, HeaderValue};

/// The field the id travels in.
pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The longest id kept from a trusted proxy.
pub const MAX_KEPT: usize = 200;

/// Hex digits of a made id's per-thread random prefix.
const PREFIX_DIGITS: usize = 16;
/// Hex digits of a made id's count (2^48 ids a thread before the prefix is
/// drawn again).
const COUNT_DIGITS: usize = 12;
/// A made id's length.
pub const MADE_LEN: usize = PREFIX_DIGITS + COUNT_DIGITS;

/// An id sluice made: 28 lowercase hexadecimal digits, a per-thread random
/// prefix then the thread's count.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct MadeId([u8; MADE_LEN]);

impl MadeId {
    /// The next id of this thread.
    #[inline]
    pub fn next() -> MadeId {
        LAST.with_borrow_mut(|last| {
            if !advance(last) {
                *last = fresh();
            }
            MadeId(*last)
        })
    }

    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    #[inline]
    pub fn as_str(&self) -> &str {
        // Only hexadecimal digits are ever written.
        std::str::from_utf8(&self.0).unwrap_or("0")
    }

    /// As a header value (copied: for the paths that insert it into a map).
    pub fn header_value(&self) -> HeaderValue {
        HeaderValue::from_bytes(&self.0).expect("hexadecimal digits are a valid field value")
    }
}

impl std::fmt::Debug for MadeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

thread_local! {
    /// The thread's last id, advanced in place; all zeros before the first,
    /// which `advance` refuses, so the first call draws the prefix.
    static LAST: RefCell<[u8; MADE_LEN]> = const { RefCell::new([0; MADE_LEN]) };
}

/// Advances the count of `id` in place; false when it cannot (no prefix
/// drawn yet, or the count is spent).
#[inline]
fn advance(id: &mut [u8; MADE_LEN]) -> bool {
    let mut at = MADE_LEN;
    while at > PREFIX_DIGITS {
        at -= 1;
        match id[at] {
            b'f' => id[at] = b'0',
            b'9' => {
                id[at] = b'a';
                return true;
            }
            b'0'..=b'8' | b'a'..=b'e' => {
                id[at] += 1;
                return true;
            }
            // Nothing drawn yet.
            _ => return false,
        }
    }
    false
}

/// A new random prefix and a count of 1.
#[cold]
fn fresh() -> [u8; MADE_LEN] {
    let mut random = [0u8; 8];
    if getrandom::fill(&mut random).is_err() {
        // No randomness from the system: the thread, the time and the
        // process's hash keys still set threads and instances apart.
        use std::hash::BuildHasher;
        let state = std::collections::hash_map::RandomState::new();
        let seed = (std::thread::current().id(), std::time::SystemTime::now());
        random = state.hash_one(format!("{seed:?}")).to_le_bytes();
    }
    let mut id = [b'0'; MADE_LEN];
    for (index, byte) in random.iter().enumerate() {
        id[2 * index] = HEX[usize::from(byte >> 4)];
        id[2 * index + 1] = HEX[usize::from(byte & 15)];
    }
    id[MADE_LEN - 1] = b'1';
    id
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A request's id: kept from a trusted proxy, or made here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestId {
    Made(MadeId),
    /// The request's own `X-Request-Id`, from a trusted peer: it stays in
    /// the request as it came.
    Kept(HeaderValue),
}

impl RequestId {
    /// The id of a request with `headers`, from a peer that is `trusted`
    /// (in `trusted_proxies`) or not: the request's `X-Request-Id` when
    /// the peer is trusted and it sent exactly one that [`is_valid`];
    /// otherwise a new one. An untrusted peer's header is not even looked
    /// at.
    #[inline]
    pub fn for_request(headers: &HeaderMap, trusted: bool) -> RequestId {
        if trusted {
            if let Some(kept) = kept(headers) {
                return RequestId::Kept(kept);
            }
        }
        RequestId::Made(MadeId::next())
    }

    /// The id as text (visible ASCII).
    #[inline]
    pub fn as_str(&self) -> &str {
        match self {
            RequestId::Made(made) => made.as_str(),
            // `is_valid` let only visible ASCII in.
            RequestId::Kept(value) => value.to_str().unwrap_or(""),
        }
    }

    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            RequestId::Made(made) => made.as_bytes(),
            RequestId::Kept(value) => value.as_bytes(),
        }
    }

    /// Appends the id as a JSON string. A made one is hexadecimal; a kept
    /// one is visible ASCII, of which only `"` and `\` need escaping
    /// (looked for apart, so that a made one's three copies inline).
    #[inline]
    pub fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            RequestId::Made(made) => {
                out.push(b'"');
                out.extend_from_slice(made.as_bytes());
                out.push(b'"');
            }
            RequestId::Kept(value) => write_kept_json(value.as_bytes(), out),
        }
    }

    /// The length of [`RequestId::write_json`]'s string.
    pub fn json_len(&self) -> usize {
        match self {
            RequestId::Made(made) => made.as_bytes().len() + 2,
            RequestId::Kept(value) => {
                let escaped = value
                    .as_bytes()
                    .iter()
                    .filter(|&&byte| byte == b'"' || byte == b'\\')
                    .count();
                value.len() + escaped + 2
            }
        }
    }

    /// The id made here, `None` when the request's own was kept.
    #[inline]
    pub fn made(&self) -> Option<MadeId> {
        match self {
            RequestId::Made(made) => Some(*made),
            RequestId::Kept(_) => None,
        }
    }
}

fn write_kept_json(id: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &byte in id {
        if byte == b'"' || byte == b'\\' {
            out.push(b'\\');
        }
        out.push(byte);
    }
    out.push(b'"');
}

fn kept(headers: &HeaderMap) -> Option<HeaderValue> {
    let mut values = headers.get_all(HEADER).iter();
    let value = values.next()?;
    (values.next().is_none() && is_valid(value.as_bytes())).then(|| value.clone())
}

/// Whether `id` may be kept: 1 to [`MAX_KEPT`] visible ASCII characters
/// (`!` to `~`: no space, no control, nothing beyond ASCII).
pub fn is_valid(id: &[u8]) -> bool {
    (1..=MAX_KEPT).contains(&id.len()) && id.iter().all(|b| (0x21..=0x7e).contains(b))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn valid_ids_are_one_to_two_hundred_visible_ascii_characters() {
        assert!(is_valid(b"a"));
        assert!(is_valid(b"req-1234_ABC.~!\"#$%&'()*+,/:;<=>?@[\\]^`{|}"));
        assert!(is_valid(&[b'x'; 200]));
        assert!(!is_valid(&[b'x'; 201]));
        assert!(!is_valid(b""));
        assert!(!is_valid(b"has space"));
        assert!(!is_valid(b"tab\there"));
        assert!(!is_valid(b"del\x7f"));
        assert!(!is_valid("caf\u{e9}".as_bytes()));
        assert!(!is_valid(b"\x80obs-text"));
    }

    #[test]
    fn made_ids_are_hexadecimal_distinct_and_share_the_thread_s_prefix() {
        let ids: Vec<MadeId> = (0..5000).map(|_| MadeId::next()).collect();
        let distinct: HashSet<&[u8]> = ids.iter().map(MadeId::as_bytes).collect();
        assert_eq!(distinct.len(), ids.len());
        for id in &ids {
            assert_eq!(id.as_str().len(), MADE_LEN);
            assert!(id.as_str().bytes().all(|b| HEX.contains(&b)), "{id:?}");
            assert_eq!(
                id.as_bytes()[..PREFIX_DIGITS],
                ids[0].as_bytes()[..PREFIX_DIGITS]
            );
        }
        // Counted: each is the previous plus one.
        let count = |id: &MadeId| u64::from_str_radix(&id.as_str()[PREFIX_DIGITS..], 16).unwrap();
        for pair in ids.windows(2) {
            assert_eq!(count(&pair[1]), count(&pair[0]) + 1);
        }
        // Another thread draws another prefix.
        let other = std::thread::spawn(MadeId::next).join().unwrap();
        assert_ne!(
            other.as_bytes()[..PREFIX_DIGITS],
            ids[0].as_bytes()[..PREFIX_DIGITS]
        );
        assert!(other.as_str().ends_with("000000000001"), "{other:?}");
    }

    #[test]
    fn the_count_carries_and_a_spent_count_draws_a_new_prefix() {
        let mut id = *b"0123456789abcdef00000000000f";
        assert!(advance(&mut id));
        assert_eq!(&id, b"0123456789abcdef000000000010");
        let mut id = *b"0123456789abcdef0000000009ff";
        assert!(advance(&mut id));
        assert_eq!(&id, b"0123456789abcdef000000000a00");
        let mut spent = *b"0123456789abcdefffffffffffff";
        assert!(!advance(&mut spent));
        assert!(!advance(&mut [0; MADE_LEN]));
        let new = fresh();
        assert!(advance(&mut new.clone()));
        assert!(new.ends_with(b"000000000001"));
    }

    fn headers(values: &[&[u8]]) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert("host", HeaderValue::from_static("a"));
        for value in values {
            map.append(HEADER, HeaderValue::from_bytes(value).unwrap());
        }
        map
    }

    #[test]
    fn an_id_is_written_as_json() {
        for text in ["abc-123", r#"q"uote\back"#, "{}[]:,~!"] {
            let id = RequestId::Kept(HeaderValue::from_str(text).unwrap());
            let mut out = Vec::new();
            id.write_json(&mut out);
            assert_eq!(out, serde_json::to_vec(text).unwrap(), "{text}");
        }
        let made = RequestId::Made(MadeId::next());
        let mut out = Vec::new();
        made.write_json(&mut out);
        assert_eq!(out, serde_json::to_vec(made.as_str()).unwrap());
    }

    #[test]
    fn a_trusted_peer_s_valid_id_is_kept_and_anything_else_replaced() {
        let kept = RequestId::for_request(&headers(&[b"abc-123"]), true);
        assert_eq!(kept, RequestId::Kept(HeaderValue::from_static("abc-123")));
        assert_eq!(kept.as_str(), "abc-123");
        assert_eq!(kept.made(), None);
        let long = [b'a'; 201];
        let replaced: [&[&[u8]]; 6] = [
            &[],
            &[b"has space"],
            &[&long],
            &["caf\u{e9}".as_bytes()],
            &[b""],
            &[b"one", b"two"],
        ];
        for values in replaced {
            let id = RequestId::for_request(&headers(values), true);
            assert!(id.made().is_some(), "{values:?}");
            assert_eq!(id.as_str().len(), MADE_LEN);
        }
        // An untrusted peer's is never kept.
        let untrusted = RequestId::for_request(&headers(&[b"abc-123"]), false);
        assert!(untrusted.made().is_some());
        assert_ne!(untrusted.as_str(), "abc-123");
    }
}
