//! Upstream answers whose framing a proxy must not relay as it came, to a
//! request without a body and to one with a body (`src/proxy/pool/exchange.rs`
//! reads both; the body's upload is `upload.rs`).
//! Exact bytes in, exact bytes out (the `date` and request id values
//! masked). Rows F9–F12 of docs/edge-behaviour.md's "Hostile inputs"
//! table. No rule: the answers carry no rate-limit fields, so every byte of
//! them but `x-request-id` is the upstream's or the framing's.

use crate::support;
use crate::wire;

use support::Sluice;
use wire::{exchange, Action, Received};

/// The two requests, without and with a body: (name, bytes).
fn requests(target: &str) -> [(&'static str, String); 2] {
    [
        (
            "bodiless",
            format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n"),
        ),
        (
            "with a body",
            format!("POST {target} HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi"),
        ),
    ]
}

/// Sends `request` on a new connection, reading every answer it draws
/// (`wire::exchange`).
async fn ask(sluice: &Sluice, request: &str) -> Received {
    exchange(sluice.addr, request.as_bytes()).await
}

/// The text received, with each `date` field's value replaced by `<date>`
/// and each request id sluice made (`x-request-id`, and the `request_id` of
/// a problem document, which must be the same) by `<id>`.
fn dateless(got: &Received) -> String {
    let text = got.text();
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    let mut last_id = None;
    loop {
        let next = ["\r\ndate: ", "\r\nx-request-id: ", "\"request_id\":\""]
            .into_iter()
            .filter_map(|start| rest.find(start).map(|at| (at, start)))
            .min();
        let Some((at, start)) = next else { break };
        let value = at + start.len();
        out.push_str(&rest[..value]);
        rest = &rest[value..];
        let end = rest.find(['\r', '"']).unwrap_or(rest.len());
        if start == "\r\ndate: " {
            out.push_str("<date>");
        } else {
            let id = &rest[..end];
            assert!(
                id.len() == 28 && id.bytes().all(|b| b.is_ascii_hexdigit()),
                "not an id sluice made: {id:?}"
            );
            if start.starts_with('"') {
                assert_eq!(last_id, Some(id), "the body's id is the head's");
            }
            last_id = Some(id);
            out.push_str("<id>");
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The length of `text` once `<id>` stands for an id again.
fn unmasked_len(text: &str) -> usize {
    text.len() + text.matches("<id>").count() * (28 - "<id>".len())
}

/// A chunk-size line needs a hex digit (RFC 9112 §7.1): an empty line, or
/// one holding only an extension, is broken framing, never the last chunk.
/// The head went out first, so the client gets the body cut short (no last
/// chunk) and its connection closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f9_a_chunk_size_line_without_a_digit_cuts_the_answer_short() {
    let (_upstream, sluice) = crate::behind("", |request| match request.target.as_str() {
        "/empty-size" => Action::Reply(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n\r\n\r\n".to_vec(),
        ),
        "/extension-only" => Action::Reply(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n;ext=1\r\n\r\n"
                .to_vec(),
        ),
        _ => wire::ok(),
    })
    .await;
    for target in ["/empty-size", "/extension-only"] {
        for (client, request) in requests(target) {
            let got = ask(&sluice, &request).await;
            assert_eq!(
                dateless(&got),
                "HTTP/1.1 200 OK\r\nx-request-id: <id>\r\ntransfer-encoding: chunked\r\ndate: <date>\r\n\r\n5\r\nhello\r\n",
                "{client} {target}"
            );
            assert!(got.closed, "{client} {target}: the connection stayed open");
        }
    }
}

/// Several `Content-Length` values that agree reach the client as one
/// (RFC 9110 §8.6), and the upstream connection stays in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f10_agreeing_content_lengths_are_relayed_as_one() {
    let (upstream, sluice) = crate::behind("", |request| match request.target.as_str() {
        "/list" => Action::Reply(b"HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\n\r\nhello".to_vec()),
        "/lines" => Action::Reply(
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\nhello".to_vec(),
        ),
        _ => wire::ok(),
    })
    .await;
    for target in ["/list", "/lines"] {
        for (client, request) in requests(target) {
            let got = ask(&sluice, &request).await;
            assert_eq!(
                dateless(&got),
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-request-id: <id>\r\ndate: <date>\r\n\r\nhello",
                "{client} {target}"
            );
            assert!(!got.closed, "{client} {target}: closed");
        }
    }
    // One connection, kept for every next exchange (sluice speaks HTTP/1.1
    // to the upstream with one client, whatever the request).
    assert_eq!(upstream.conns().len(), 1);
}

/// An HTTP/1.0 answer is relayed as HTTP/1.1, sluice's own version (RFC
/// 9110 §6.2): one that ends with the upstream's close is chunked, so the
/// client's connection stays open; the upstream's connection, which
/// HTTP/1.0 without `keep-alive` does not keep, is not used again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f11_an_http_1_0_answer_is_relayed_as_http_1_1_and_the_client_connection_kept() {
    let (upstream, sluice) = crate::behind("", |request| match request.target.as_str() {
        "/until-close" => Action::ReplyAndClose(b"HTTP/1.0 200 OK\r\n\r\nall of it".to_vec()),
        "/sized" => Action::Reply(b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec()),
        _ => wire::ok(),
    })
    .await;
    let cases = [
        (
            "/until-close",
            "HTTP/1.1 200 OK\r\nx-request-id: <id>\r\ntransfer-encoding: chunked\r\ndate: <date>\r\n\r\n9\r\nall of it\r\n0\r\n\r\n",
        ),
        (
            "/sized",
            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-request-id: <id>\r\ndate: <date>\r\n\r\nok",
        ),
    ];
    for (target, expected) in cases {
        for (client, request) in requests(target) {
            let got = ask(&sluice, &request).await;
            assert_eq!(dateless(&got), expected, "{client} {target}");
            assert!(!got.closed, "{client} {target}: closed");
        }
    }
    // An HTTP/1.0 client is answered in sluice's version (RFC 9110 §2.5),
    // the body running to the close, which the head says (RFC 9112 §9.3;
    // hyper's server answered `HTTP/1.0 200 OK` and said nothing).
    let got = ask(&sluice, "GET /until-close HTTP/1.0\r\n\r\n").await;
    assert_eq!(
        dateless(&got),
        "HTTP/1.1 200 OK\r\nx-request-id: <id>\r\nconnection: close\r\ndate: <date>\r\n\r\nall of it"
    );
    assert!(got.closed);
    // Five answers, each on a connection of its own.
    let conns = upstream.conns();
    assert_eq!(conns.len(), 5);
    assert!(conns.iter().all(|conn| conn.requests.len() == 1));
}

/// A `Transfer-Encoding` other than exactly `chunked` names a coding sluice
/// never offered and can neither undo nor pass on: the answer is a 502,
/// before any of it reaches the client, and its connection is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f12_a_transfer_coding_other_than_chunked_is_502() {
    let (upstream, sluice) = crate::behind("", |request| match request.target.as_str() {
        "/gzip" => Action::ReplyAndClose(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\nzipped".to_vec(),
        ),
        "/gzip-chunked" => Action::Reply(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n6\r\nzipped\r\n0\r\n\r\n"
                .to_vec(),
        ),
        "/chunked-chunked" => Action::Reply(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, chunked\r\n\r\n6\r\nzipped\r\n0\r\n\r\n"
                .to_vec(),
        ),
        "/two-fields" => Action::Reply(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n6\r\nzipped\r\n0\r\n\r\n"
                .to_vec(),
        ),
        // No body follows a 304 or a HEAD's answer: the coding is refused all
        // the same.
        "/not-modified" => {
            Action::Reply(b"HTTP/1.1 304 Not Modified\r\ntransfer-encoding: gzip\r\n\r\n".to_vec())
        }
        "/head" => Action::Reply(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n".to_vec(),
        ),
        _ => wire::ok(),
    })
    .await;
    let body = r#"{"title":"Bad Gateway","status":502,"detail":"the service behind this proxy failed to answer","request_id":"<id>"}"#;
    let bad_gateway = format!(
        "HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/problem+json\r\nx-request-id: <id>\r\ncontent-length: {}\r\ndate: <date>\r\n\r\n",
        unmasked_len(body)
    );
    let targets = [
        "/gzip",
        "/gzip-chunked",
        "/chunked-chunked",
        "/two-fields",
        "/not-modified",
    ];
    for target in targets {
        for (client, request) in requests(target) {
            let got = ask(&sluice, &request).await;
            assert_eq!(
                dateless(&got),
                format!("{bad_gateway}{body}"),
                "{client} {target}"
            );
            assert!(!got.text().contains("zipped"), "{client} {target}");
        }
    }
    // A `HEAD` (the plain exchange's): the 502's head, without its body.
    let got = ask(&sluice, "HEAD /head HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(dateless(&got), bad_gateway, "HEAD");
    // None of the eleven connections carried a second exchange.
    let conns = upstream.conns();
    assert_eq!(conns.len(), 11);
    assert!(conns.iter().all(|conn| conn.requests.len() == 1));
}
