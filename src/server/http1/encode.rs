//! A response head as sluice's HTTP/1.1 server writes it, framed as hyper
//! frames it (`hyper::proto::h1::role::Server::encode`): the fields in the
//! map's order, then `content-length` or `transfer-encoding: chunked` when
//! the map has neither, then `connection` when the connection closes (or
//! is kept for an HTTP/1.0 client that asked), then `date` when the map has
//! none. Always as HTTP/1.1, the version this server speaks (RFC 9110 §2.5,
//! §6.2), whatever the response says: an upstream's HTTP/1.0 answer is
//! relayed as HTTP/1.1 (`proxy/forward.rs`), its close-delimited body
//! chunked; an HTTP/1.0 client gets a length or a close, never chunks
//! (RFC 9112 §6.3, and nginx's answer to such a client).

use http::header;
use http::{Response, StatusCode, Version};
use hyper::body::SizeHint;

use super::head::RequestHead;
use crate::http1::date;
pub use crate::http1::framing::Framing;
use crate::http1::framing::{lists_option, parse_length};
use crate::proxy::respond::OwnFields;

/// The head written, and what the connection does after the body.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    pub framing: Framing,
    /// The connection closes after this response.
    pub close: bool,
}

/// Writes the head of `response` to the request `request` describes into
/// `out`: the map's fields but those `own` replaces, then `own`'s.
/// `empty`: the body has already ended; `hint`: its size hint; `kept`: the
/// connection may go on after it as far as the request's body goes (a
/// `HEAD`'s answer says what a `GET`'s would, and no body follows).
pub fn head<B>(
    out: &mut Vec<u8>,
    response: &Response<B>,
    own: &OwnFields,
    empty: bool,
    hint: SizeHint,
    request: &RequestHead,
    kept: bool,
) -> Written {
    let status = response.status();
    let switched = status == StatusCode::SWITCHING_PROTOCOLS;
    status_line(out, status);
    let has_body = !(status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED);
    let mut close = !(request.keep_alive && kept);
    let (mut declared, mut dated) = (None, false);
    for (name, value) in response.headers() {
        // Framing is decided below, from the body.
        if name == header::TRANSFER_ENCODING || own.replaces(name) {
            continue;
        }
        if name == header::CONTENT_LENGTH {
            // An ended body's length is 0, whatever the map says (a 204's
            // or 304's upstream length is not passed on), but for a
            // `HEAD`'s, which says the `GET`'s; one line only.
            if !has_body || (empty && !request.head_method) || declared.is_some() {
                continue;
            }
            declared = Some(parse_length(value.as_bytes()));
        } else if name == header::CONNECTION && !switched {
            // Sluice's own (`close` while draining): written below. A
            // `101`'s (`upgrade`) is the tunnel's, and goes as it is.
            close |= lists_option(value, b"close");
            continue;
        } else if name == header::DATE {
            dated = true;
        }
        field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    own.write_to(out);
    // Only the close can frame a body of unknown length to an HTTP/1.0
    // client (no chunks), or one whose declared length is not a number.
    let sized = hint.exact().is_some();
    let until_close = has_body
        && !request.head_method
        && !empty
        && match declared {
            Some(length) => length.is_none(),
            None => !sized && request.version == Version::HTTP_10,
        };
    close |= until_close;
    // `connection` before the length, as hyper writes it (it puts its own
    // into the map, whose fields precede the length it adds).
    if switched {
        // The connection goes on as a tunnel.
    } else if close {
        out.extend_from_slice(b"connection: close\r\n");
    } else if request.version == Version::HTTP_10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    let framing = if !has_body || request.head_method || empty || until_close {
        unstreamed_framing(out, request, has_body, empty, until_close, hint, declared)
    } else if let Some(Some(length)) = declared {
        Framing::of_length(length)
    } else if let Some(length) = hint.exact() {
        length_field(out, length);
        Framing::of_length(length)
    } else {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        Framing::Chunked
    };
    if !dated {
        date::write_field(out);
    }
    out.extend_from_slice(b"\r\n");
    Written { framing, close }
}

/// The framing of an answer whose body does not follow as it comes: none
/// at all (1xx, 204, 304), a `HEAD`'s (the `GET`'s length when known, no
/// body), one that already ended (`content-length: 0`), or one the close
/// ends. Out of [`head`]'s line: the usual answer streams a body.
#[inline(never)]
fn unstreamed_framing(
    out: &mut Vec<u8>,
    request: &RequestHead,
    has_body: bool,
    empty: bool,
    until_close: bool,
    hint: SizeHint,
    declared: Option<Option<u64>>,
) -> Framing {
    if !has_body {
        Framing::Empty
    } else if request.head_method {
        if let (Some(length), false, None) = (hint.exact(), empty, declared) {
            length_field(out, length);
        }
        Framing::Empty
    } else if empty {
        out.extend_from_slice(b"content-length: 0\r\n");
        Framing::Empty
    } else {
        debug_assert!(until_close);
        Framing::UntilClose
    }
}

#[inline(always)]
fn length_field(out: &mut Vec<u8>, length: u64) {
    out.extend_from_slice(b"content-length: ");
    out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The status line, with the status's canonical reason.
fn status_line(out: &mut Vec<u8>, status: StatusCode) {
    // The two sluice answers most: in one piece.
    if status == StatusCode::OK {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        return;
    }
    if status == StatusCode::TOO_MANY_REQUESTS {
        out.extend_from_slice(b"HTTP/1.1 429 Too Many Requests\r\n");
        return;
    }
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderValue, Response};

    /// A kept-alive HTTP/1.1 `GET`'s head.
    fn kept_1_1() -> RequestHead {
        RequestHead::default()
    }

    fn encoded(response: Response<()>, empty: bool, hint: SizeHint) -> (String, Written) {
        encoded_for(response, empty, hint, kept_1_1())
    }

    fn encoded_for(
        response: Response<()>,
        empty: bool,
        hint: SizeHint,
        request: RequestHead,
    ) -> (String, Written) {
        let mut out = Vec::new();
        let written = head(
            &mut out,
            &response,
            &OwnFields::default(),
            empty,
            hint,
            &request,
            true,
        );
        (String::from_utf8(out).unwrap(), written)
    }

    fn without_date(head: &str) -> String {
        head.lines()
            .filter(|line| !line.starts_with("date: "))
            .map(|line| format!("{line}\r\n"))
            .collect()
    }

    #[test]
    fn every_status_line_carries_the_canonical_reason() {
        for code in [200, 201, 204, 404, 429, 502, 599] {
            let status = StatusCode::from_u16(code).unwrap();
            let mut out = Vec::new();
            status_line(&mut out, status);
            let reason = status.canonical_reason().unwrap_or("<none>");
            assert_eq!(out, format!("HTTP/1.1 {code} {reason}\r\n").as_bytes());
        }
    }

    #[test]
    fn a_known_length_is_declared_and_the_date_added() {
        let response = Response::builder()
            .status(429)
            .header("content-type", "application/problem+json")
            .header("x-ratelimit-limit", "10")
            .body(())
            .unwrap();
        let (text, written) = encoded(response, false, SizeHint::with_exact(17));
        assert_eq!(
            without_date(&text),
            "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/problem+json\r\n\
             x-ratelimit-limit: 10\r\ncontent-length: 17\r\n\r\n"
        );
        let date = text.lines().find_map(|l| l.strip_prefix("date: ")).unwrap();
        assert!(httpdate::parse_http_date(date).is_ok(), "{date}");
        assert_eq!(written.framing, Framing::Length(17));
        assert!(!written.close);
    }

    #[test]
    fn an_unknown_length_is_chunked_and_an_empty_body_says_zero() {
        let (text, written) = encoded(Response::new(()), false, SizeHint::new());
        assert!(
            text.starts_with("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n"),
            "{text}"
        );
        assert_eq!(written.framing, Framing::Chunked);
        let (text, written) = encoded(Response::new(()), true, SizeHint::with_exact(0));
        assert!(
            text.starts_with("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n"),
            "{text}"
        );
        assert_eq!(written.framing, Framing::Empty);
    }

    #[test]
    fn the_map_s_own_length_and_date_are_kept() {
        let mut response = Response::new(());
        let headers = response.headers_mut();
        headers.insert("content-length", HeaderValue::from_static("5"));
        headers.insert(
            "date",
            HeaderValue::from_static("Mon, 23 Nov 2026 10:00:00 GMT"),
        );
        headers.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        let (text, written) = encoded(response, false, SizeHint::new());
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ndate: Mon, 23 Nov 2026 10:00:00 GMT\r\n\r\n"
        );
        assert_eq!(written.framing, Framing::Length(5));
    }

    #[test]
    fn own_fields_follow_the_map_s_and_replace_theirs() {
        let mut response = Response::new(());
        let headers = response.headers_mut();
        headers.insert("x-ratelimit-remaining", HeaderValue::from_static("999"));
        headers.insert("server", HeaderValue::from_static("up"));
        let mut own = OwnFields::default();
        own.push_number(crate::proxy::respond::OwnName::XRateLimitRemaining, 7);
        let mut out = Vec::new();
        head(
            &mut out,
            &response,
            &own,
            true,
            SizeHint::with_exact(0),
            &kept_1_1(),
            true,
        );
        assert_eq!(
            without_date(&String::from_utf8(out).unwrap()),
            "HTTP/1.1 200 OK\r\nserver: up\r\nx-ratelimit-remaining: 7\r\ncontent-length: 0\r\n\r\n"
        );
    }

    #[test]
    fn statuses_without_a_body_get_no_framing() {
        for status in [204, 304] {
            let response = Response::builder().status(status).body(()).unwrap();
            let (text, written) = encoded(response, false, SizeHint::new());
            assert!(
                !text.contains("content-length") && !text.contains("chunked"),
                "{text}"
            );
            assert_eq!(written.framing, Framing::Empty);
        }
    }

    #[test]
    fn an_ended_body_is_declared_empty_whatever_the_map_says() {
        // As hyper: an upstream's 204 with a length keeps no length, and an
        // ended 200 says 0.
        for (status, expected) in [(204, None), (200, Some("0"))] {
            let response = Response::builder()
                .status(status)
                .header("content-length", "7")
                .header("content-length", "7")
                .body(())
                .unwrap();
            let (text, written) = encoded(response, true, SizeHint::with_exact(0));
            let lengths: Vec<&str> = text
                .lines()
                .filter_map(|line| line.strip_prefix("content-length: "))
                .collect();
            assert_eq!(lengths, expected.into_iter().collect::<Vec<_>>(), "{text}");
            assert_eq!(written.framing, Framing::Empty);
        }
    }

    #[test]
    fn connection_close_closes_and_an_http_1_0_response_is_written_as_http_1_1() {
        let response = Response::builder()
            .header("connection", "Keep-Alive, Close")
            .body(())
            .unwrap();
        let (text, written) = encoded(response, true, SizeHint::with_exact(0));
        assert!(written.close);
        assert_eq!(text.matches("connection: ").count(), 1, "{text}");
        assert!(text.contains("connection: close\r\n"), "{text}");
        // This server speaks HTTP/1.1: a body of unknown length is chunked.
        let response = Response::builder()
            .version(http::Version::HTTP_10)
            .body(())
            .unwrap();
        let (text, written) = encoded(response, false, SizeHint::new());
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
        assert_eq!(written.framing, Framing::Chunked);
        assert!(!written.close);
    }

    /// RFC 9112 §6.3 and §9.3: an HTTP/1.0 client gets a length or the
    /// close, never chunks, and hears which (nginx answers so).
    #[test]
    fn an_http_1_0_client_gets_a_length_or_a_close_in_an_http_1_1_status_line() {
        let kept = RequestHead {
            version: Version::HTTP_10,
            ..kept_1_1()
        };
        let (text, written) = encoded_for(Response::new(()), false, SizeHint::new(), kept);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(!text.contains("chunked"), "{text}");
        assert!(text.contains("connection: close\r\n"), "{text}");
        assert_eq!(written.framing, Framing::UntilClose);
        assert!(written.close);
        let (text, written) = encoded_for(Response::new(()), false, SizeHint::with_exact(2), kept);
        assert!(
            text.contains("connection: keep-alive\r\ncontent-length: 2\r\n"),
            "{text}"
        );
        assert!(!written.close);
        let once = RequestHead {
            keep_alive: false,
            ..kept
        };
        let (text, written) = encoded_for(Response::new(()), false, SizeHint::with_exact(2), once);
        assert!(text.contains("connection: close\r\n"), "{text}");
        assert!(written.close);
    }

    #[test]
    fn a_head_answer_keeps_the_get_s_length_and_has_no_body() {
        let head_request = RequestHead {
            head_method: true,
            ..kept_1_1()
        };
        let response = Response::builder()
            .header("content-length", "1000")
            .body(())
            .unwrap();
        let (text, written) = encoded_for(response, true, SizeHint::with_exact(0), head_request);
        assert!(text.contains("content-length: 1000\r\n"), "{text}");
        assert_eq!(written.framing, Framing::Empty);
        // A body sluice wrote: its length, not the body.
        let (text, written) = encoded_for(
            Response::new(()),
            false,
            SizeHint::with_exact(17),
            head_request,
        );
        assert!(text.contains("content-length: 17\r\n"), "{text}");
        assert_eq!(written.framing, Framing::Empty);
    }
}
