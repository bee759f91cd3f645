//! A response head as sluice's own HTTP/1.1 server writes it, framed as
//! hyper frames it (`hyper::proto::h1::role::Server::encode`): the fields in
//! the map's order, then `content-length` or `transfer-encoding: chunked`
//! when the map has neither, then `date` when it has none. Always as
//! HTTP/1.1, the version this server speaks (RFC 9110 §6.2), whatever the
//! response says: an upstream's HTTP/1.0 answer is relayed as HTTP/1.1
//! (`proxy/forward.rs`), its close-delimited body chunked.

use std::cell::RefCell;
use std::time::{Duration, SystemTime};

use http::header;
use http::{Response, StatusCode};
use hyper::body::SizeHint;

pub use crate::proxy::pool::Framing;
use crate::proxy::pool::{connection_options, parse_length};
use crate::proxy::respond::OwnFields;

/// The head written, and what the connection does after the body.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    pub framing: Framing,
    /// The connection closes after this response.
    pub close: bool,
}

/// Writes the head of `response` (to a `GET`) into `out`: the map's fields
/// but those `own` replaces, then `own`'s. `empty`: the body has already
/// ended; `hint`: its size hint.
pub fn head<B>(
    out: &mut Vec<u8>,
    response: &Response<B>,
    own: &OwnFields,
    empty: bool,
    hint: SizeHint,
) -> Written {
    let status = response.status();
    status_line(out, status);
    let has_body = !(status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED);
    let headers = response.headers();
    let mut close = false;
    let mut declared = None;
    let mut dated = false;
    for (name, value) in headers {
        // Framing is decided below, from the body.
        if name == header::TRANSFER_ENCODING || own.replaces(name) {
            continue;
        }
        if name == header::CONTENT_LENGTH {
            // An ended body's length is 0, whatever the map says (a 204's
            // or 304's upstream length is not passed on); one line only.
            if empty || declared.is_some() {
                continue;
            }
            declared = Some(parse_length(value.as_bytes()));
        } else if name == header::CONNECTION {
            close |= connection_options(value).any(|option| option.eq_ignore_ascii_case(b"close"));
        } else if name == header::DATE {
            dated = true;
        }
        field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    own.write_to(out);
    let framing = if !has_body {
        Framing::Empty
    } else if empty {
        out.extend_from_slice(b"content-length: 0\r\n");
        Framing::Empty
    } else {
        match declared {
            Some(Some(0)) => Framing::Empty,
            Some(Some(length)) => Framing::Length(length),
            // A length that is not one: no way to frame the body.
            Some(None) => Framing::UntilClose,
            None => match hint.exact() {
                Some(length) => {
                    out.extend_from_slice(b"content-length: ");
                    out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
                    out.extend_from_slice(b"\r\n");
                    if length == 0 {
                        Framing::Empty
                    } else {
                        Framing::Length(length)
                    }
                }
                None => {
                    out.extend_from_slice(b"transfer-encoding: chunked\r\n");
                    Framing::Chunked
                }
            },
        }
    };
    if !dated {
        out.extend_from_slice(b"date: ");
        date(out);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Written {
        framing,
        close: close || framing == Framing::UntilClose,
    }
}

/// The status line, with the status's canonical reason.
fn status_line(out: &mut Vec<u8>, status: StatusCode) {
    if status == StatusCode::OK {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
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

/// The chunk-size line of a chunk of `length` bytes.
pub fn chunk_size(out: &mut Vec<u8>, length: usize) {
    let digits = format_hex(length);
    out.extend_from_slice(&digits.0[digits.1..]);
    out.extend_from_slice(b"\r\n");
}

fn format_hex(mut value: usize) -> ([u8; 16], usize) {
    let mut digits = [0u8; 16];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b"0123456789ABCDEF"[value & 0xf];
        value >>= 4;
        if value == 0 {
            return (digits, start);
        }
    }
}

/// Length of an IMF-fixdate (`Tue, 24 Nov 2026 01:30:00 GMT`).
const DATE_LENGTH: usize = 29;

thread_local! {
    /// The `date` value of the current second, formatted once per second
    /// per worker thread, as hyper does.
    static DATE: RefCell<(u64, [u8; DATE_LENGTH])> = const { RefCell::new((u64::MAX, [0; DATE_LENGTH])) };
}

fn date(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let second = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    DATE.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.0 != second {
            let text = httpdate::fmt_http_date(now);
            if text.len() == DATE_LENGTH {
                cached.1.copy_from_slice(text.as_bytes());
                cached.0 = second;
            } else {
                // Years past 9999: not cached, written as they are.
                out.extend_from_slice(text.as_bytes());
                return;
            }
        }
        out.extend_from_slice(&cached.1);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderValue, Response};

    fn encoded(response: Response<()>, empty: bool, hint: SizeHint) -> (String, Written) {
        let mut out = Vec::new();
        let written = head(&mut out, &response, &OwnFields::default(), empty, hint);
        (String::from_utf8(out).unwrap(), written)
    }

    fn without_date(head: &str) -> String {
        head.lines()
            .filter(|line| !line.starts_with("date: "))
            .map(|line| format!("{line}\r\n"))
            .collect()
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
        head(&mut out, &response, &own, true, SizeHint::with_exact(0));
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
        assert!(encoded(response, true, SizeHint::with_exact(0)).1.close);
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

    #[test]
    fn chunk_sizes_are_hex() {
        for (length, line) in [
            (0, "0\r\n"),
            (10, "A\r\n"),
            (4096, "1000\r\n"),
            (255, "FF\r\n"),
        ] {
            let mut out = Vec::new();
            chunk_size(&mut out, length);
            assert_eq!(out, line.as_bytes());
        }
    }
}
