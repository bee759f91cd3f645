//! A request head as sluice's own HTTP/1.1 server reads it, and whether it
//! is one that server answers or one for hyper.
//!
//! The server answers only the common request: a complete `GET` head of
//! HTTP/1.1 with no body, no upgrade, no `Expect` and no `TE`, which hyper
//! would accept as it is. Everything else is hyper's, with the bytes read so
//! far: a request with a body, an upgrade or HTTP/2's preface, HTTP/1.0, a
//! `Connection` other than `keep-alive`, and every head hyper would refuse
//! (it is parsed with the same `httparse`, and whatever fails here is left
//! to hyper to answer, through the same `DeadlineIo`, as before).

use std::mem::MaybeUninit;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::Uri;

use crate::proxy::ClientRequest;

/// Fields a head of ours may have. A head with more goes to hyper, which
/// enforces `max_headers` itself.
const MOST_FIELDS: usize = 64;

/// The `[server]` limits a head of ours must be within (hyper enforces them
/// on the rest).
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    pub max_headers: usize,
    pub max_header_bytes: usize,
}

/// What the buffered bytes begin with.
#[derive(Debug)]
pub enum Head {
    /// A request sluice's server answers: its head was taken from the
    /// buffer, and the request put where it was asked to be.
    Ours,
    /// The beginning of a head, within the limits: read more.
    Partial,
    /// Anything else: the connection is hyper's from here, bytes and all.
    Hyper,
}

/// A field's name and where its value lies in the head.
type Field = (HeaderName, Range<usize>);

/// What reading a head needs and a connection keeps between requests, so
/// that a request allocates nothing of its own for it (the request itself,
/// with its map, stays in the connection's slot: see
/// [`ClientRequest::refill`]).
#[derive(Debug, Default)]
pub struct Scratch {
    fields: Vec<Field>,
}

/// Reads the head at the start of `buffer`: takes it out and puts the
/// request `into` the slot if it is a request of ours (built in place: a
/// request is 224 bytes, and each move copies it); leaves the buffer as it
/// was otherwise.
pub fn parse(
    buffer: &mut BytesMut,
    limits: HeadLimits,
    scratch: &mut Scratch,
    into: &mut ClientRequest,
) -> Head {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MOST_FIELDS];
    let mut request = httparse::Request::new(&mut []);
    let length = match request.parse_with_uninit_headers(buffer, &mut slots) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) if buffer.len() <= limits.max_header_bytes => {
            return Head::Partial
        }
        _ => return Head::Hyper,
    };
    if length > limits.max_header_bytes
        || request.headers.len() > limits.max_headers
        || request.method != Some("GET")
        || request.version != Some(1)
    {
        return Head::Hyper;
    }
    let Some(target) = request.path.map(|path| span(buffer, path.as_bytes())) else {
        return Head::Hyper;
    };
    let fields = &mut scratch.fields;
    fields.clear();
    for field in request.headers.iter() {
        let Ok(name) = HeaderName::from_bytes(field.name.as_bytes()) else {
            return Head::Hyper;
        };
        if !ours(&name, field.value) {
            return Head::Hyper;
        }
        fields.push((name, span(buffer, field.value)));
    }
    let head = buffer.split_to(length).freeze();
    match build(&head, target, scratch, into) {
        Some(()) => Head::Ours,
        None => {
            // hyper refuses such a head; it gets the bytes back to say so.
            let mut whole = BytesMut::with_capacity(head.len() + buffer.len());
            whole.extend_from_slice(&head);
            whole.extend_from_slice(buffer);
            *buffer = whole;
            Head::Hyper
        }
    }
}

/// Whether a field leaves the request one of ours: no body, no upgrade, no
/// expectation, no trailers asked for, and a `Connection` that only keeps
/// the connection alive.
fn ours(name: &HeaderName, value: &[u8]) -> bool {
    if name == header::CONNECTION {
        return value.eq_ignore_ascii_case(b"keep-alive");
    }
    !(name == header::CONTENT_LENGTH
        || name == header::TRANSFER_ENCODING
        || name == header::UPGRADE
        || name == header::EXPECT
        || name == header::TE)
}

/// Where `part`, a slice of `buffer`, lies in it.
fn span(buffer: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - buffer.as_ptr() as usize;
    start..start + part.len()
}

/// The request, its target and field values sharing `head`'s bytes, as
/// hyper builds it, `into` the slot; `None` where hyper would refuse it
/// (the slot is then left empty).
fn build(
    head: &Bytes,
    target: Range<usize>,
    scratch: &mut Scratch,
    into: &mut ClientRequest,
) -> Option<()> {
    let Ok(uri) = Uri::from_maybe_shared(head.slice(target)) else {
        into.clear();
        return None;
    };
    let request = into.refill();
    *request.uri_mut() = uri;
    let headers = request.headers_mut();
    headers.reserve(scratch.fields.len());
    for (name, value) in scratch.fields.drain(..) {
        let Ok(value) = HeaderValue::from_maybe_shared(head.slice(value)) else {
            into.clear();
            return None;
        };
        headers.append(name, value);
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HeadLimits = HeadLimits {
        max_headers: 100,
        max_header_bytes: 16 * 1024,
    };

    fn parse_str(bytes: &str) -> (Head, BytesMut, ClientRequest) {
        let mut buffer = BytesMut::from(bytes);
        let mut request = ClientRequest::vacant();
        let head = parse(&mut buffer, LIMITS, &mut Scratch::default(), &mut request);
        (head, buffer, request)
    }

    fn parse_with(buffer: &mut BytesMut, limits: HeadLimits) -> Head {
        parse(
            buffer,
            limits,
            &mut Scratch::default(),
            &mut ClientRequest::vacant(),
        )
    }

    #[test]
    fn a_get_is_ours_and_leaves_what_follows_it() {
        let (head, rest, request) =
            parse_str("GET /a?b=1 HTTP/1.1\r\nHost: x\r\nX-Api-Key: k\r\n\r\nGET /next");
        assert!(matches!(head, Head::Ours), "{head:?}");
        let request = request.get();
        assert_eq!(request.method(), http::Method::GET);
        assert_eq!(request.version(), http::Version::HTTP_11);
        assert_eq!(request.uri(), "/a?b=1");
        assert_eq!(request.headers()["host"], "x");
        assert_eq!(request.headers()["x-api-key"], "k");
        assert_eq!(&rest[..], b"GET /next");
    }

    #[test]
    fn a_request_read_into_a_released_slot_has_only_its_own_fields() {
        let mut buffer = BytesMut::from(
            "GET /first HTTP/1.1\r\nHost: a\r\nX-Api-Key: one\r\nX-Extra: 1\r\n\r\n\
             GET /second HTTP/1.1\r\nHost: b\r\n\r\n",
        );
        let mut scratch = Scratch::default();
        let mut slot = ClientRequest::vacant();
        assert!(matches!(
            parse(&mut buffer, LIMITS, &mut scratch, &mut slot),
            Head::Ours
        ));
        slot.get_mut()
            .extensions_mut()
            .insert("left by the first exchange");
        *slot.get_mut().method_mut() = http::Method::POST;
        slot.release();
        assert!(matches!(
            parse(&mut buffer, LIMITS, &mut scratch, &mut slot),
            Head::Ours
        ));
        let request = slot.get();
        assert_eq!(request.uri(), "/second");
        assert_eq!(request.method(), http::Method::GET);
        assert_eq!(request.headers().len(), 1);
        assert_eq!(request.headers()["host"], "b");
        assert!(request.extensions().get::<&str>().is_none());
    }

    #[test]
    fn repeated_fields_are_all_kept_in_order() {
        let (head, _, request) = parse_str("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nA: 3\r\n\r\n");
        assert!(matches!(head, Head::Ours), "{head:?}");
        let values: Vec<_> = request.get().headers().get_all("a").iter().collect();
        assert_eq!(values, ["1", "3"]);
    }

    #[test]
    fn a_head_cut_short_asks_for_more() {
        assert!(matches!(
            parse_str("GET / HTTP/1.1\r\nHost: x\r\n").0,
            Head::Partial
        ));
        assert!(matches!(parse_str("GE").0, Head::Partial));
    }

    #[test]
    fn everything_else_is_hyper_s_and_keeps_its_bytes() {
        for head in [
            "POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\nx",
            "GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            "GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            "GET / HTTP/1.1\r\nConnection: close\r\n\r\n",
            "GET / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            "GET / HTTP/1.1\r\nTE: trailers\r\n\r\n",
            "GET / HTTP/1.0\r\n\r\n",
            "HEAD / HTTP/1.1\r\n\r\n",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
            "GET / HTTP/1.1\r\nFolded: a\r\n b\r\n\r\n",
            "GET /a b HTTP/1.1\r\n\r\n",
            "GET http://[::1 HTTP/1.1\r\n\r\n",
        ] {
            let (parsed, rest, _) = parse_str(head);
            assert!(matches!(parsed, Head::Hyper), "{head:?}: {parsed:?}");
            assert_eq!(&rest[..], head.as_bytes(), "{head:?}");
        }
    }

    #[test]
    fn connection_keep_alive_is_ours_in_any_case() {
        let (head, _, _) = parse_str("GET / HTTP/1.1\r\nConnection: Keep-Alive\r\n\r\n");
        assert!(matches!(head, Head::Ours), "{head:?}");
    }

    #[test]
    fn the_limits_send_a_head_to_hyper() {
        let many: String = (0..5).map(|i| format!("F{i}: v\r\n")).collect();
        let mut buffer = BytesMut::from(format!("GET / HTTP/1.1\r\n{many}\r\n").as_str());
        let few = HeadLimits {
            max_headers: 4,
            ..LIMITS
        };
        assert!(matches!(parse_with(&mut buffer, few), Head::Hyper));
        let small = HeadLimits {
            max_header_bytes: 20,
            ..LIMITS
        };
        assert!(matches!(parse_with(&mut buffer, small), Head::Hyper));
        let mut partial = BytesMut::from("GET / HTTP/1.1\r\nHost: a-long-name\r\n");
        assert!(matches!(parse_with(&mut partial, small), Head::Hyper));
        let over: String = (0..MOST_FIELDS + 1)
            .map(|i| format!("F{i}: v\r\n"))
            .collect();
        let mut buffer = BytesMut::from(format!("GET / HTTP/1.1\r\n{over}\r\n").as_str());
        assert!(matches!(parse_with(&mut buffer, LIMITS), Head::Hyper));
    }
}
