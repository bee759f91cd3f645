//! Arbitrary bytes as a client's first bytes on a connection: sluice's own
//! HTTP/1.1 server's head reader (`server/http1/head.rs`) never panics. A
//! head it takes as its own is exactly what `httparse` reads there — a `GET`
//! of HTTP/1.1, every field in order with its value's bytes — and it takes
//! exactly that head's bytes from the buffer; anything it leaves to hyper,
//! or waits to read more of, leaves the buffer as it was, so hyper reads the
//! same bytes.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use sluice::proxy::ClientRequest;
use sluice::server::http1::head::{parse, Head, HeadLimits, Scratch};

const LIMITS: HeadLimits = HeadLimits {
    max_headers: 100,
    max_header_bytes: 8192,
};

fuzz_target!(|data: &[u8]| {
    let mut buffer = BytesMut::from(data);
    let mut request = ClientRequest::vacant();
    let mut scratch = Scratch::default();
    match parse(&mut buffer, LIMITS, &mut scratch, &mut request) {
        Head::Ours => {
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
            assert_eq!(expected.method, Some("GET"));
            assert_eq!(expected.version, Some(1));
            let request = request.get();
            assert_eq!(request.method(), http::Method::GET);
            assert_eq!(request.version(), http::Version::HTTP_11);
            let got: Vec<(&str, &[u8])> = request
                .headers()
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_bytes()))
                .collect();
            let mut by_name: Vec<(String, &[u8])> = expected
                .headers
                .iter()
                .map(|f| (f.name.to_ascii_lowercase(), f.value))
                .collect();
            // A map lists a name's values together, in the order they came.
            by_name.sort_by(|a, b| {
                let first = |name: &str| by_name_position(expected.headers, name);
                first(&a.0).cmp(&first(&b.0))
            });
            let by_name: Vec<(&str, &[u8])> =
                by_name.iter().map(|(n, v)| (n.as_str(), *v)).collect();
            assert_eq!(got, by_name);
        }
        Head::Partial | Head::Hyper => assert_eq!(&buffer[..], data, "the bytes changed"),
    }
});

/// Where `name` first appears among `fields`, case-insensitively.
fn by_name_position(fields: &[httparse::Header<'_>], name: &str) -> usize {
    fields
        .iter()
        .position(|f| f.name.eq_ignore_ascii_case(name))
        .unwrap_or(usize::MAX)
}
