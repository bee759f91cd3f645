//! Whether a message has a field, found the cheaper way for its size.
//!
//! A header-map lookup hashes the name and probes, paid whether the field
//! is there or not, and the request path asks about
//! fields most messages do not carry (`Transfer-Encoding`, `Upgrade`…) on
//! every request. Comparing a standard name with each name present costs a
//! few instructions per name, so a message with few fields (a typical API
//! request carries a handful) is scanned instead.

use http::header::{HeaderMap, HeaderName, HeaderValue};

/// Maps with at most this many distinct names are scanned rather than
/// looked up in.
const SCANNED: usize = 16;

/// Whether `headers` has a field named `name`.
#[inline]
pub fn has(headers: &HeaderMap, name: &HeaderName) -> bool {
    if headers.keys_len() <= SCANNED {
        headers.keys().any(|present| present == name)
    } else {
        headers.contains_key(name)
    }
}

/// The first value of the field named `name`, as [`HeaderMap::get`]
/// gives it.
#[inline]
pub fn get<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h HeaderValue> {
    if headers.keys_len() <= SCANNED {
        headers
            .iter()
            .find_map(|(present, value)| (present == name).then_some(value))
    } else {
        headers.get(name)
    }
}

/// Whether `Transfer-Encoding` is one field of exactly `chunked`: the only
/// coding sluice reads, from a client or an upstream.
pub fn only_chunked(headers: &HeaderMap) -> bool {
    let mut codings = headers.get_all(http::header::TRANSFER_ENCODING).iter();
    codings.next().is_some_and(|first| {
        first
            .as_bytes()
            .trim_ascii()
            .eq_ignore_ascii_case(b"chunked")
    }) && codings.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{CONTENT_LENGTH, HOST, TRANSFER_ENCODING, UPGRADE};

    #[test]
    fn small_and_large_maps_answer_alike() {
        for extra in [0, 3, SCANNED, SCANNED * 4] {
            let mut headers = HeaderMap::new();
            for index in 0..extra {
                headers.insert(
                    HeaderName::from_bytes(format!("x-field-{index}").as_bytes()).unwrap(),
                    "v".parse().unwrap(),
                );
            }
            headers.insert(HOST, "a".parse().unwrap());
            headers.append(UPGRADE, "websocket".parse().unwrap());
            headers.append(UPGRADE, "h2c".parse().unwrap());
            assert!(has(&headers, &HOST), "{extra} extra fields");
            assert_eq!(get(&headers, &HOST), headers.get(HOST));
            assert_eq!(get(&headers, &UPGRADE).unwrap(), "websocket");
            assert_eq!(get(&headers, &CONTENT_LENGTH), None);
            assert!(has(&headers, &UPGRADE), "{extra} extra fields");
            assert!(!has(&headers, &TRANSFER_ENCODING), "{extra} extra fields");
            assert!(!has(&headers, &CONTENT_LENGTH), "{extra} extra fields");
            let custom = HeaderName::from_static("x-field-0");
            assert_eq!(has(&headers, &custom), extra > 0, "{extra} extra fields");
        }
    }
}
