//! Arbitrary bytes as a client's first bytes on a connection: sluice's
//! HTTP/1.1 server's head reader (`server/http1/head.rs`) never panics. A
//! head it takes is exactly what `httparse` reads there: the same method,
//! version and fields (in the map's order, a repeated `Content-Length`
//! once), it takes exactly that head's bytes from the buffer, and the body
//! it frames is what the head's `Transfer-Encoding` or `Content-Length`
//! says (RFC 9112 §6.3). A head it waits to read more of leaves the bytes
//! as they were.
#![no_main]

use bytes::BytesMut;
use http::Version;
use libfuzzer_sys::fuzz_target;
use sluice::proxy::ClientRequest;
use sluice::server::http1::head::{parse, BodyFraming, Head, HeadLimits, Scratch};

const LIMITS: HeadLimits = HeadLimits {
    max_headers: 100,
    max_header_bytes: 8192,
    max_uri_bytes: 8192,
};

fuzz_target!(|data: &[u8]| {
    let mut buffer = BytesMut::from(data);
    let mut request = ClientRequest::vacant();
    let mut scratch = Scratch::default();
    match parse(&mut buffer, LIMITS, &mut scratch, &mut request) {
        Head::Request(head) => {
            let mut fields = [httparse::EMPTY_HEADER; 100];
            let mut expected = httparse::Request::new(&mut fields);
            let Ok(httparse::Status::Complete(length)) = expected.parse(data) else {
                panic!("taken, but httparse does not read a complete head");
            };
            assert!(length <= LIMITS.max_header_bytes);
            assert_eq!(
                &buffer[..],
                &data[length..],
                "took more or less than the head"
            );
            let request = request.get();
            assert_eq!(Some(request.method().as_str()), expected.method);
            let version = match expected.version {
                Some(1) => Version::HTTP_11,
                _ => Version::HTTP_10,
            };
            assert_eq!(request.version(), version);
            assert_eq!(head.version, version);
            assert_eq!(head.head_method, expected.method == Some("HEAD"));
            assert!(!head.expect_continue || version == Version::HTTP_11);

            let named = |name| values(expected.headers, name);
            let chunked = named("transfer-encoding").next().is_some();
            match head.body {
                BodyFraming::Chunked => assert!(chunked),
                BodyFraming::Length(length) => {
                    assert!(!chunked);
                    let said = named("content-length").next().map(|value| {
                        std::str::from_utf8(value)
                            .expect("a length sluice read is text")
                            .trim()
                            .parse::<u64>()
                            .expect("a length sluice read is a number")
                    });
                    assert_eq!(length, said.unwrap_or(0));
                }
            }
            if head.ambiguous {
                assert!(chunked && named("content-length").next().is_some());
                assert!(!head.keep_alive, "a body framed twice closes after");
            }

            let got: Vec<(&str, &[u8])> = request
                .headers()
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_bytes()))
                .collect();
            let mut by_name: Vec<(String, &[u8])> = Vec::new();
            for field in expected.headers.iter() {
                let name = field.name.to_ascii_lowercase();
                // A length repeated with the same value is kept once, and
                // none beside `Transfer-Encoding`, which frames the body.
                if name == "content-length" && (chunked || by_name.iter().any(|(n, _)| *n == name))
                {
                    continue;
                }
                by_name.push((name, field.value));
            }
            // A map lists a name's values together, in the order they came.
            by_name.sort_by(|a, b| {
                let first = |name: &str| by_name_position(expected.headers, name);
                first(&a.0).cmp(&first(&b.0))
            });
            let by_name: Vec<(&str, &[u8])> =
                by_name.iter().map(|(n, v)| (n.as_str(), *v)).collect();
            assert_eq!(got, by_name);
        }
        Head::Partial => assert_eq!(&buffer[..], data, "the bytes changed"),
        Head::Refused(_) => {}
    }
});

/// The values of the fields named `name`, in order.
fn values<'a>(
    fields: &'a [httparse::Header<'a>],
    name: &'static str,
) -> impl Iterator<Item = &'a [u8]> + 'a {
    fields
        .iter()
        .filter(move |f| f.name.eq_ignore_ascii_case(name))
        .map(|f| f.value)
}

/// Where `name` first appears among `fields`, case-insensitively.
fn by_name_position(fields: &[httparse::Header<'_>], name: &str) -> usize {
    fields
        .iter()
        .position(|f| f.name.eq_ignore_ascii_case(name))
        .unwrap_or(usize::MAX)
}
