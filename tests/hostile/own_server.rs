//! One client connection of sluice's HTTP/1.1 server (`src/server/http1.rs`)
//! carrying many requests and answers. Not a row of the table: every row's
//! test crosses it. These hold what a kept connection relies on: requests
//! with and without a body, pipelined or in pieces, each answered once and
//! in order, every framing of an upstream's answer passed on whole, and
//! each answer carrying only its own fields. (Until one engine served every
//! HTTP/1 request, a connection went from sluice's server to hyper's at its
//! first body; the first test is that seam's, kept.)

use crate::support;
use crate::wire;

use std::time::Duration;

use support::Sluice;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use wire::{exchange, ok, Action, RawUpstream};

fn targets(upstream: &RawUpstream) -> Vec<String> {
    upstream.requests().into_iter().map(|r| r.target).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gets_and_a_post_pipelined_on_one_connection_lose_nothing() {
    let (upstream, sluice) = crate::behind("", |_| ok()).await;
    // Two GETs, a body, then a GET after it; all in one write.
    let payload = concat!(
        "GET /1 HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
        "POST /3 HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi",
        "GET /4 HTTP/1.1\r\nHost: a\r\n\r\n",
    );

    let got = exchange(sluice.addr, payload.as_bytes()).await;

    let responses = got.responses();
    let statuses: Vec<u16> = responses.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200; 4], "{}", got.text());
    assert!(responses.iter().all(|r| r.complete && r.body == b"ok"));
    assert!(!got.closed, "the connection stays open");
    assert_eq!(targets(&upstream), ["/1", "/2", "/3", "/4"]);
    let posted = &upstream.requests()[2];
    assert_eq!(posted.method, "POST");
    assert_eq!(posted.body, b"hi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_arrives_in_pieces_is_answered_and_the_connection_kept() {
    let (upstream, sluice) = crate::behind("", |_| ok()).await;
    let mut client = TcpStream::connect(sluice.addr).await.unwrap();
    client.set_nodelay(true).unwrap();
    // The pieces under test: each its own read at sluice.
    const BETWEEN_PIECES: Duration = Duration::from_millis(30);
    for piece in ["GET /pie", "ces HTTP/1.1\r\nHo", "st: a\r\n", "\r\n"] {
        client.write_all(piece.as_bytes()).await.unwrap();
        tokio::time::sleep(BETWEEN_PIECES).await;
    }
    let first = wire::read_until_answered(&mut client).await;
    let after = b"GET /after HTTP/1.1\r\nHost: a\r\n\r\n";
    client.write_all(after).await.unwrap();
    let second = wire::read_answers(&mut client, after).await;

    assert_eq!(first.statuses(), [200], "{}", first.text());
    assert_eq!(second.statuses(), [200], "{}", second.text());
    assert!(!second.closed);
    assert_eq!(targets(&upstream), ["/pieces", "/after"]);
}

/// A body of `length` bytes that shows where a byte went missing.
fn body(length: usize) -> Vec<u8> {
    (0..length).map(|i| b'a' + (i % 26) as u8).collect()
}

fn answer(target: &str) -> Action {
    let mut bytes = Vec::new();
    match target {
        "/small" => bytes.extend(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-up: 1\r\n\r\nhello"),
        "/long" => {
            bytes.extend(b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n");
            bytes.extend(body(100_000));
        }
        "/chunked" => {
            bytes.extend(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
            let whole = body(70_000);
            for part in [&whole[..5], &whole[5..30_005], &whole[30_005..]] {
                bytes.extend(format!("{:x}\r\n", part.len()).as_bytes());
                bytes.extend(part);
                bytes.extend(b"\r\n");
            }
            bytes.extend(b"0\r\nx-trailer: t\r\n\r\n");
        }
        "/no-content" => bytes.extend(b"HTTP/1.1 204 No Content\r\ncontent-length: 7\r\n\r\n"),
        "/empty" => bytes.extend(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"),
        // Its end is the upstream's close; relayed as HTTP/1.1, chunked,
        // so the client's connection stays open.
        "/until-close" => {
            bytes.extend(b"HTTP/1.0 200 OK\r\n\r\n");
            bytes.extend(body(20_000));
            return Action::ReplyAndClose(bytes);
        }
        other => panic!("no answer scripted for {other}"),
    }
    Action::Reply(bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_framing_of_an_answer_reaches_a_kept_connection_whole_and_in_order() {
    let (upstream, sluice) = crate::behind("", |request| answer(&request.target)).await;
    let order = [
        "/small",
        "/long",
        "/chunked",
        "/no-content",
        "/empty",
        "/until-close",
    ];
    let payload: String = order
        .iter()
        .map(|target| format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n"))
        .collect();

    let got = exchange(sluice.addr, payload.as_bytes()).await;

    let responses = got.responses();
    let statuses: Vec<u16> = responses.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 200, 204, 200, 200], "{}", got.text());
    let bodies: Vec<Vec<u8>> = responses.iter().map(|r| r.body.clone()).collect();
    let expected = [
        b"hello".to_vec(),
        body(100_000),
        body(70_000),
        vec![],
        vec![],
        body(20_000),
    ];
    for (index, (got_body, want)) in bodies.iter().zip(&expected).enumerate() {
        assert!(
            got_body == want,
            "{}: {} bytes",
            order[index],
            got_body.len()
        );
    }
    assert!(responses.iter().all(|r| r.complete));
    assert_eq!(responses[0].header("x-up"), Some("1"));
    assert_eq!(responses[1].header("content-length"), Some("100000"));
    assert_eq!(responses[2].header("transfer-encoding"), Some("chunked"));
    assert_eq!(
        responses[3].header("content-length"),
        None,
        "a 204 has no length"
    );
    assert_eq!(responses[4].header("content-length"), Some("0"));
    assert_eq!(responses[5].header("transfer-encoding"), Some("chunked"));
    assert!(!got.closed, "{}", got.text());
    assert!(!got.text().contains("x-trailer"));
    assert_eq!(targets(&upstream), order);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_on_one_connection_carry_only_their_own_fields() {
    // Each answer is written into one response kept for the connection
    // (`proxy/respond.rs`, `vacant`): nothing of one may reach the next.
    let upstream = RawUpstream::start(|request| match request.target.as_str() {
        "/open" | "/tight" => {
            Action::Reply(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-up: 1\r\n\r\nok".to_vec())
        }
        other => panic!("no answer scripted for {other}"),
    })
    .await;
    let toml = "[server]\nupstream = \"http://{upstream}\"\n\n[[rule]]\nname = \"tight\"\n\
                key = [\"ip\"]\nmatch = { path_prefix = \"/tight\" }\nrate = \"1/h\"\n";
    let sluice = Sluice::start(toml, upstream.addr).await;
    wire::serve_plain_at(sluice.addr);
    let payload = concat!(
        "GET /open HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /tight HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /tight HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /open HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /open HTTP/1.1\r\nHost: a, b\r\n\r\n",
        "GET /open HTTP/1.1\r\nHost: a\r\n\r\n",
    );

    let got = exchange(sluice.addr, payload.as_bytes()).await;

    let responses = got.responses();
    let statuses: Vec<u16> = responses.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 429, 200, 400, 200], "{}", got.text());
    assert!(responses.iter().all(|r| r.complete), "{}", got.text());
    let problem = Some("application/problem+json");
    for (index, response) in responses.iter().enumerate() {
        let forwarded = response.status == 200;
        let text = got.text();
        // The upstream's field on its answers only, a problem's type on
        // sluice's only.
        assert_eq!(
            response.header("x-up").is_some(),
            forwarded,
            "{index}: {text}"
        );
        assert_eq!(
            response.header("content-type") == problem,
            !forwarded,
            "{index}"
        );
        assert_eq!(response.body == b"ok", forwarded, "{index}");
        // Rate-limit fields where the rule applies, Retry-After on the 429.
        let limited = index == 1 || index == 2;
        assert_eq!(
            response.header("x-ratelimit-limit").is_some(),
            limited,
            "{index}: {text}"
        );
        assert_eq!(
            response.header("retry-after").is_some(),
            index == 2,
            "{index}"
        );
    }
    assert!(!got.closed, "the connection stays open");
    assert_eq!(targets(&upstream), ["/open", "/tight", "/open", "/open"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_returns_its_concurrency_permit_before_the_client_has_it_whole() {
    // A 204's, an empty 200's or a short body's permit returns before the
    // answer's last bytes are written, not when the connection carries
    // another request or closes. So a client that has the whole answer
    // finds the permit free, every time (sluice once gave it back only
    // after its last write returned, and a client quick enough to ask
    // again in between was refused: on a busy machine, most runs of this
    // test).
    let upstream = RawUpstream::start(|request| match request.target.as_str() {
        "/no-content" => Action::Reply(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()),
        "/empty" => Action::Reply(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec()),
        "/hello" => Action::Reply(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello".to_vec()),
        other => panic!("no answer scripted for {other}"),
    })
    .await;
    let toml = "[server]\nupstream = \"http://{upstream}\"\n\n[[rule]]\nname = \"one\"\n\
                key = [\"ip\"]\nalgorithm = \"concurrency\"\nmax_in_flight = 1\n";
    let sluice = Sluice::start(toml, upstream.addr).await;
    let targets = [("/no-content", 204), ("/empty", 200), ("/hello", 200)];
    for (target, status) in targets.into_iter().cycle().take(300) {
        let head = format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n");
        // The first caller's connection stays open and idle.
        let mut idle = TcpStream::connect(sluice.addr).await.unwrap();
        idle.write_all(head.as_bytes()).await.unwrap();
        let first = wire::read_until_answered(&mut idle).await;
        assert_eq!(first.statuses(), [status], "{}", first.text());
        let second = exchange(sluice.addr, head.as_bytes()).await;
        assert_eq!(
            second.statuses(),
            [status],
            "{target}: the idle connection's permit was returned: {}",
            second.text()
        );
        drop(idle);
    }
}

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const H2_PREFACE: &str = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http2_preface_after_a_request_is_not_prior_knowledge_and_the_connection_closes() {
    // Prior knowledge is only the first bytes of a connection (RFC 9113
    // §3.3); later, the preface is an HTTP/1.1 request line with a version
    // sluice does not speak, after a request with or without a body: the
    // connection closes without an answer, as hyper's HTTP/1 server does
    // (docs/edge-behaviour.md, "Which server reads a request"). Never
    // HTTP/2 frames.
    const ANSWER: &[u8] =
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ndate: Thu, 01 Jan 2026 00:00:00 GMT\r\n\r\nok";
    let (upstream, sluice) = crate::behind("", |_| Action::Reply(ANSWER.to_vec())).await;
    for (after, first) in [
        ("a GET", "GET /first HTTP/1.1\r\nHost: a\r\n\r\n"),
        (
            "a POST",
            "POST /first HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi",
        ),
    ] {
        let payload = format!("{first}{H2_PREFACE}");

        let got = exchange(sluice.addr, payload.as_bytes()).await;

        // The upstream's answer as it came, and the request's id after its
        // fields.
        let text = got.text();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let (fields, id) = head.rsplit_once("\r\nx-request-id: ").unwrap();
        assert!(
            id.len() == 28 && id.bytes().all(|b| b.is_ascii_hexdigit()),
            "{id}"
        );
        assert_eq!(
            format!("{fields}\r\n\r\n{body}"),
            String::from_utf8_lossy(ANSWER),
            "{after}"
        );
        assert!(got.closed, "{after}: the connection is closed");
    }
    assert_eq!(targets(&upstream), ["/first", "/first"]);
}
