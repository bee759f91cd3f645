//! A request head as sluice's HTTP/1.1 server reads it: any method, HTTP/1.0
//! or 1.1, with whatever body its fields frame. It is read as hyper's
//! server reads it — hyper is the oracle of `server/differential.rs` — with
//! the same `httparse`: the same framing rules (RFC 9112 §6.3), the same
//! heads refused and with the same statuses, but each refusal answered
//! with a problem document rather than hyper's empty one.

use std::mem::MaybeUninit;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, StatusCode, Uri, Version};

use crate::http1::framing::{ends_in_chunked, lists_option, parse_length};
use crate::http1::names::Names;
use crate::proxy::ClientRequest;

/// Header slots kept on the stack; a `max_headers` above it reads into slots
/// on the heap.
const STACK_FIELDS: usize = 100;

/// The HTTP/2 connection preface's first line: after a request, a request
/// line with a version sluice does not speak (RFC 9113 §3.3).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";

/// The `[server]` limits a head must be within.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    pub max_headers: usize,
    pub max_header_bytes: usize,
    pub max_uri_bytes: usize,
}

/// What the buffered bytes begin with.
#[derive(Debug)]
pub enum Head {
    /// A request: its head was taken from the buffer and the request put
    /// where it was asked to be.
    Request(RequestHead),
    /// The beginning of a head, within the limits: read more.
    Partial,
    /// A head that is refused: the connection answers and closes.
    Refused(Refused),
}

/// Why a head is refused, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not valid HTTP/1.1 (RFC 9112): 400.
    BadRequest,
    /// Over `max_headers` or `max_header_bytes`: 431.
    TooLarge,
    /// A target over `max_uri_bytes`: 414.
    UriTooLong,
    /// The HTTP/2 preface after a request: closed without an answer, as
    /// hyper's server does.
    Silently,
}

impl Refused {
    /// The answer's status and detail (`None`: no answer).
    pub fn answer(self, limits: HeadLimits) -> Option<(StatusCode, String)> {
        Some(match self {
            Refused::BadRequest => (
                StatusCode::BAD_REQUEST,
                "the request is not valid HTTP/1.1 (RFC 9112)".to_owned(),
            ),
            Refused::TooLarge => (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                format!(
                    "the request head has more than {} header lines or more than {} bytes",
                    limits.max_headers, limits.max_header_bytes
                ),
            ),
            Refused::UriTooLong => (
                StatusCode::URI_TOO_LONG,
                format!(
                    "the request target is longer than {} bytes",
                    limits.max_uri_bytes
                ),
            ),
            Refused::Silently => return None,
        })
    }
}

/// How a request's body is framed (RFC 9112 §6.3, as hyper reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// Exactly this many bytes (zero: no body).
    Length(u64),
    /// The chunked coding.
    Chunked,
}

/// What the connection needs to know of a request it read.
#[derive(Debug, Clone, Copy)]
pub struct RequestHead {
    pub version: Version,
    pub body: BodyFraming,
    /// The connection may carry another request after this one's answer
    /// (HTTP/1.1 without `Connection: close`, HTTP/1.0 with `keep-alive`).
    pub keep_alive: bool,
    /// `Expect: 100-continue`: the client waits before it sends the body.
    pub expect_continue: bool,
    /// The body was framed by both `Transfer-Encoding` and `Content-Length`
    /// (read as chunked; RFC 9112 §6.1): it goes upstream chunked, never
    /// with a length, and the connection closes after it.
    pub ambiguous: bool,
    /// The answer to a `HEAD` has no body.
    pub head_method: bool,
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
    /// The names this connection's last head had.
    names: Names,
}

/// Reads the head at the start of `buffer`: takes it out and puts the
/// request `into` the slot (built in place: a request is 224 bytes, and
/// each move copies it).
pub fn parse(
    buffer: &mut BytesMut,
    limits: HeadLimits,
    scratch: &mut Scratch,
    into: &mut ClientRequest,
) -> Head {
    let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_FIELDS];
    let mut heap = Vec::new();
    let slots = if limits.max_headers <= STACK_FIELDS {
        &mut stack[..limits.max_headers]
    } else {
        heap.resize_with(limits.max_headers, MaybeUninit::uninit);
        &mut heap[..]
    };
    let mut request = httparse::Request::new(&mut []);
    let length = match request.parse_with_uninit_headers(buffer, slots) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return partial(buffer, limits),
        Err(httparse::Error::TooManyHeaders) => return Head::Refused(Refused::TooLarge),
        Err(httparse::Error::Version) if buffer.starts_with(H2_PREFACE) => {
            return Head::Refused(Refused::Silently)
        }
        Err(_) => return BAD_REQUEST,
    };
    if length > limits.max_header_bytes {
        return Head::Refused(Refused::TooLarge);
    }
    let (Some(method), Some(path), Some(version)) = (request.method, request.path, request.version)
    else {
        return BAD_REQUEST;
    };
    if path.len() > limits.max_uri_bytes {
        return Head::Refused(Refused::UriTooLong);
    }
    // The method nearly every request has, without a lookup.
    let method = match method {
        "GET" => Method::GET,
        other => match Method::from_bytes(other.as_bytes()) {
            Ok(method) => method,
            Err(_) => return BAD_REQUEST,
        },
    };
    let target = span(buffer, path.as_bytes());
    let fields = &mut scratch.fields;
    fields.clear();
    for (index, field) in request.headers.iter().enumerate() {
        let Ok(name) = scratch.names.find(index, field.name.as_bytes()) else {
            return BAD_REQUEST;
        };
        fields.push((name, span(buffer, field.value)));
    }
    let version = if version == 1 {
        Version::HTTP_11
    } else {
        Version::HTTP_10
    };
    let head = buffer.split_to(length).freeze();
    match build(&head, method, target, version, scratch, into) {
        Some(request) => Head::Request(request),
        None => BAD_REQUEST,
    }
}

/// A head not complete yet: read more, unless it is already beyond the
/// limits (its target too, before the rest of it arrives: a 414 comes as
/// soon as the target has been read past `max_uri_bytes`).
fn partial(buffer: &[u8], limits: HeadLimits) -> Head {
    if target_so_far(buffer) > limits.max_uri_bytes {
        return Head::Refused(Refused::UriTooLong);
    }
    if buffer.len() > limits.max_header_bytes {
        return Head::Refused(Refused::TooLarge);
    }
    Head::Partial
}

/// The length of the request target read so far: the bytes after the
/// request line's first space, up to the next space or line end.
fn target_so_far(buffer: &[u8]) -> usize {
    let Some(start) = memchr::memchr(b' ', buffer) else {
        return 0;
    };
    let rest = &buffer[start + 1..];
    memchr::memchr3(b' ', b'\r', b'\n', rest).unwrap_or(rest.len())
}

const BAD_REQUEST: Head = Head::Refused(Refused::BadRequest);

/// Where `part`, a slice of `buffer`, lies in it.
fn span(buffer: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - buffer.as_ptr() as usize;
    start..start + part.len()
}

/// The request, its target and field values sharing `head`'s bytes, as
/// hyper builds it, `into` the slot, and what frames its body; `None` where
/// hyper would refuse it (a 400; the slot is then left empty).
fn build(
    head: &Bytes,
    method: Method,
    target: Range<usize>,
    version: Version,
    scratch: &mut Scratch,
    into: &mut ClientRequest,
) -> Option<RequestHead> {
    let Ok(uri) = Uri::from_maybe_shared(head.slice(target)) else {
        return None;
    };
    let http11 = version == Version::HTTP_11;
    let head_method = method == Method::HEAD;
    let mut framing = Framing::new(http11);
    let request = into.refill(method, version);
    *request.uri_mut() = uri;
    let headers = request.headers_mut();
    headers.reserve(scratch.fields.len());
    for (name, value) in scratch.fields.drain(..) {
        let Ok(value) = HeaderValue::from_maybe_shared(head.slice(value)) else {
            into.clear();
            return None;
        };
        match framing.note(&name, &value, http11, headers) {
            Ok(true) => {
                headers.append(name, value);
            }
            Ok(false) => {}
            Err(()) => {
                into.clear();
                return None;
            }
        }
    }
    let head = framing.head(version, head_method);
    if head.is_none() {
        into.clear();
    }
    head
}

/// The fields that frame a request, noted as the head is read (hyper's
/// `Server::parse`, field for field).
#[derive(Debug, Default)]
struct Framing {
    te: bool,
    te_chunked: bool,
    cl: bool,
    length: Option<u64>,
    keep_alive: bool,
    saw_close: bool,
    expect_continue: bool,
}

impl Default for RequestHead {
    fn default() -> RequestHead {
        RequestHead {
            version: Version::HTTP_11,
            body: BodyFraming::Length(0),
            keep_alive: true,
            expect_continue: false,
            ambiguous: false,
            head_method: false,
        }
    }
}

impl Framing {
    fn new(http11: bool) -> Framing {
        Framing {
            keep_alive: http11,
            ..Framing::default()
        }
    }

    /// What the fields noted say of a request of `version`; `None` for a
    /// `Transfer-Encoding` that does not end in `chunked`.
    fn head(&self, version: Version, head_method: bool) -> Option<RequestHead> {
        if self.te && !self.te_chunked {
            return None;
        }
        let http11 = version == Version::HTTP_11;
        let ambiguous = self.te && self.cl;
        Some(RequestHead {
            version,
            body: if self.te {
                BodyFraming::Chunked
            } else {
                BodyFraming::Length(self.length.unwrap_or(0))
            },
            // RFC 9112 §6.1: after a body framed by both, the connection
            // closes (hyper's, HAProxy's and Pingora's reading).
            keep_alive: self.keep_alive && !ambiguous,
            // HTTP/1.0 has no `100 Continue` (hyper ignores the field there).
            expect_continue: self.expect_continue && http11,
            ambiguous,
            head_method,
        })
    }

    /// Notes a field; whether it goes into the map (a repeated length does
    /// not), or `Err` for a head hyper refuses.
    #[inline]
    fn note(
        &mut self,
        name: &HeaderName,
        value: &HeaderValue,
        http11: bool,
        headers: &mut http::HeaderMap,
    ) -> Result<bool, ()> {
        // Most fields are none of these four: their names' lengths (6, 10,
        // 14, 17) tell at once.
        if !matches!(name.as_str().len(), 6 | 10 | 14 | 17) {
            return Ok(true);
        }
        if *name == header::TRANSFER_ENCODING {
            if !http11 {
                return Err(());
            }
            self.te = true;
            if self.cl && self.length.take().is_some() {
                headers.remove(header::CONTENT_LENGTH);
            }
            self.te_chunked = ends_in_chunked(value);
        } else if *name == header::CONTENT_LENGTH {
            self.cl = true;
            if self.te {
                return Ok(false);
            }
            let length = parse_length(value.as_bytes()).ok_or(())?;
            match self.length {
                Some(seen) if seen != length => return Err(()),
                Some(_) => return Ok(false),
                None => self.length = Some(length),
            }
        } else if *name == header::CONNECTION {
            // Once any line asks to close, a later `keep-alive` does not undo it.
            if self.saw_close || lists_option(value, b"close") {
                self.saw_close = true;
                self.keep_alive = false;
            } else if !self.keep_alive {
                self.keep_alive = lists_option(value, b"keep-alive");
            }
        } else if *name == header::EXPECT {
            self.expect_continue = value.as_bytes().eq_ignore_ascii_case(b"100-continue");
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HeadLimits = HeadLimits {
        max_headers: 100,
        max_header_bytes: 16 * 1024,
        max_uri_bytes: 8 * 1024,
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

    fn status(head: &Head) -> Option<u16> {
        match head {
            Head::Refused(refused) => Some(refused.answer(LIMITS)?.0.as_u16()),
            _ => None,
        }
    }

    #[test]
    fn a_get_is_read_and_leaves_what_follows_it() {
        let (head, rest, request) =
            parse_str("GET /a?b=1 HTTP/1.1\r\nHost: x\r\nX-Api-Key: k\r\n\r\nGET /next");
        let Head::Request(head) = head else {
            panic!("{head:?}")
        };
        assert_eq!(head.body, BodyFraming::Length(0));
        assert!(head.keep_alive);
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
             POST /second HTTP/1.0\r\nHost: b\r\n\r\n",
        );
        let mut scratch = Scratch::default();
        let mut slot = ClientRequest::vacant();
        assert!(matches!(
            parse(&mut buffer, LIMITS, &mut scratch, &mut slot),
            Head::Request(_)
        ));
        slot.get_mut()
            .extensions_mut()
            .insert("left by the first exchange");
        slot.release();
        assert!(matches!(
            parse(&mut buffer, LIMITS, &mut scratch, &mut slot),
            Head::Request(_)
        ));
        let request = slot.get();
        assert_eq!(request.uri(), "/second");
        assert_eq!(request.method(), http::Method::POST);
        assert_eq!(request.version(), http::Version::HTTP_10);
        assert_eq!(request.headers().len(), 1);
        assert_eq!(request.headers()["host"], "b");
        assert!(request.extensions().get::<&str>().is_none());
    }

    #[test]
    fn repeated_fields_are_all_kept_in_order() {
        let (head, _, request) = parse_str("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nA: 3\r\n\r\n");
        assert!(matches!(head, Head::Request(_)), "{head:?}");
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
    fn bodies_are_framed_as_hyper_frames_them() {
        let cases: [(&str, Option<BodyFraming>, bool); 9] = [
            (
                "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
                Some(BodyFraming::Length(5)),
                true,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
                Some(BodyFraming::Length(5)),
                true,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                Some(BodyFraming::Chunked),
                true,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                Some(BodyFraming::Chunked),
                true,
            ),
            // Both: chunked, and the connection closes after the answer.
            (
                "POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
                Some(BodyFraming::Chunked),
                false,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n",
                Some(BodyFraming::Chunked),
                false,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
                None,
                false,
            ),
            (
                "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
                None,
                false,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
                None,
                false,
            ),
        ];
        for (text, framing, keep_alive) in cases {
            let (head, _, request) = parse_str(text);
            match (head, framing) {
                (Head::Request(head), Some(framing)) => {
                    assert_eq!(head.body, framing, "{text:?}");
                    assert_eq!(head.keep_alive, keep_alive, "{text:?}");
                    // A length that TE overrides is not in the map.
                    if framing == BodyFraming::Chunked {
                        assert!(!request.get().headers().contains_key("content-length"));
                    } else {
                        assert_eq!(
                            request
                                .get()
                                .headers()
                                .get_all("content-length")
                                .iter()
                                .count(),
                            1
                        );
                    }
                }
                (head, None) => assert_eq!(status(&head), Some(400), "{text:?}"),
                (head, framing) => panic!("{text:?}: {head:?}, wanted {framing:?}"),
            }
        }
        for bad in ["+5", "0x5", "-1", "5, 6", "", "99999999999999999999", "5 5"] {
            let text = format!("POST / HTTP/1.1\r\nContent-Length: {bad}\r\n\r\n");
            assert_eq!(status(&parse_str(&text).0), Some(400), "{bad:?}");
        }
    }

    #[test]
    fn persistence_expectation_and_head_are_noted() {
        let cases = [
            ("GET / HTTP/1.1\r\nConnection: close\r\n\r\n", false),
            (
                "GET / HTTP/1.1\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n",
                false,
            ),
            ("GET / HTTP/1.0\r\n\r\n", false),
            ("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true),
            (
                "GET / HTTP/1.1\r\nConnection: keep-alive, Upgrade\r\n\r\n",
                true,
            ),
        ];
        for (text, keep_alive) in cases {
            let Head::Request(head) = parse_str(text).0 else {
                panic!("{text:?}")
            };
            assert_eq!(head.keep_alive, keep_alive, "{text:?}");
        }
        let Head::Request(head) =
            parse_str("HEAD / HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n").0
        else {
            panic!()
        };
        assert!(head.expect_continue && head.head_method);
    }

    #[test]
    fn what_hyper_refuses_is_refused_with_its_status() {
        for (text, expected) in [
            ("GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", Some(400)),
            ("GET / HTTP/1.1\r\nFolded: a\r\n b\r\n\r\n", Some(400)),
            ("GET /a b HTTP/1.1\r\n\r\n", Some(400)),
            ("GET http://[::1 HTTP/1.1\r\n\r\n", Some(400)),
            ("G\x01T / HTTP/1.1\r\n\r\n", Some(400)),
            ("GET / HTTP/2.0\r\n\r\n", Some(400)),
            ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", None),
        ] {
            let (head, _, _) = parse_str(text);
            assert!(matches!(head, Head::Refused(_)), "{text:?}: {head:?}");
            assert_eq!(status(&head), expected, "{text:?}");
        }
    }

    #[test]
    fn the_limits_refuse_a_head_as_soon_as_it_is_past_them() {
        let many: String = (0..5).map(|i| format!("F{i}: v\r\n")).collect();
        let mut buffer = BytesMut::from(format!("GET / HTTP/1.1\r\n{many}\r\n").as_str());
        let few = HeadLimits {
            max_headers: 4,
            ..LIMITS
        };
        assert_eq!(status(&parse_with(&mut buffer.clone(), few)), Some(431));
        let small = HeadLimits {
            max_header_bytes: 20,
            ..LIMITS
        };
        assert_eq!(status(&parse_with(&mut buffer, small)), Some(431));
        let mut partial = BytesMut::from("GET / HTTP/1.1\r\nHost: a-long-name\r\n");
        assert_eq!(status(&parse_with(&mut partial, small)), Some(431));
        // A target past its limit, before the head is whole.
        let short = HeadLimits {
            max_uri_bytes: 8,
            ..LIMITS
        };
        let mut long = BytesMut::from("GET /0123456789");
        assert_eq!(status(&parse_with(&mut long, short)), Some(414));
        let mut whole = BytesMut::from("GET /0123456789 HTTP/1.1\r\n\r\n");
        assert_eq!(status(&parse_with(&mut whole, short)), Some(414));
        let mut fits = BytesMut::from("GET /0123 HTTP/1.1\r\nHost: a");
        assert!(matches!(parse_with(&mut fits, short), Head::Partial));
        // More fields than the stack holds, when the limit allows them.
        let over: String = (0..STACK_FIELDS + 1)
            .map(|i| format!("F{i}: v\r\n"))
            .collect();
        let mut buffer = BytesMut::from(format!("GET / HTTP/1.1\r\n{over}\r\n").as_str());
        let roomy = HeadLimits {
            max_headers: 200,
            ..LIMITS
        };
        assert!(matches!(parse_with(&mut buffer, roomy), Head::Request(_)));
    }
}
