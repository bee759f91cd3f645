//! When the upstream fails, clients get a problem document that blames it
//! (502 or 504) and operators see the failure counted by kind; rows F1–F5
//! of docs/edge-behaviour.md's "Hostile inputs" table (one test each, named after it) drive a raw,
//! scripted upstream that records the exact bytes sluice sent it.

use crate::support;
use crate::wire;

use std::time::{Duration, Instant};

use http::StatusCode;
use support::{assert_problem, get, Sluice, Upstream};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use wire::{exchange, ok, Action, RawUpstream};

const RULE: &str = r#"
[[rule]]
name = "per-ip"
rate = "100/m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_answered_502_and_counted_as_connect() {
    let refusing = support::Refusing::new();
    let down = refusing.addr;
    let toml =
        format!("[server]\nupstream = \"http://{{upstream}}\"\nconnect_timeout = \"1s\"\n{RULE}");
    let sluice = Sluice::start(&toml, down).await;
    let connect = r#"sluice_upstream_errors_total{upstream="default",kind="connect"}"#;
    assert_eq!(sluice.metric(connect).await, 0.0);

    let got = get(&sluice.url("/"), &[]).await;

    assert_problem(&got, StatusCode::BAD_GATEWAY);
    assert!(
        !got.body.contains(&down.port().to_string()),
        "no upstream internals: {}",
        got.body
    );
    assert_eq!(sluice.metric(connect).await, 1.0);
    let responses = r#"sluice_responses_total{code_class="5xx"}"#;
    assert_eq!(sluice.metric(responses).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_slower_than_upstream_timeout_is_answered_504_and_counted_as_timeout() {
    let upstream = Upstream::start().await;
    let toml = format!(
        "[server]\nupstream = \"http://{{upstream}}\"\nupstream_timeout = \"300ms\"\n{RULE}"
    );
    let sluice = Sluice::start(&toml, upstream.addr).await;
    let timeout = r#"sluice_upstream_errors_total{upstream="default",kind="timeout"}"#;
    assert_eq!(sluice.metric(timeout).await, 0.0);

    let started = Instant::now();
    let got = get(&sluice.url("/slow/2000"), &[]).await;
    let waited = started.elapsed();

    assert_problem(&got, StatusCode::GATEWAY_TIMEOUT);
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_millis(1200),
        "answered after {waited:?}, not about 300 ms"
    );
    assert_eq!(sluice.metric(timeout).await, 1.0);
    let connect = r#"sluice_upstream_errors_total{upstream="default",kind="connect"}"#;
    assert_eq!(sluice.metric(connect).await, 0.0);
}

/// sluice in front of a scripted raw upstream, with `[server]` keys `rest`.
async fn behind(
    rest: &str,
    script: impl Fn(&wire::RawRequest) -> Action + Send + Sync + 'static,
) -> (RawUpstream, Sluice) {
    crate::behind(&format!("{rest}\n{RULE}"), script).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_a_hung_upstream_is_504_at_the_timeout_and_its_connections_closed() {
    let (upstream, sluice) = behind("upstream_timeout = \"300ms\"", |_| Action::Hang).await;

    let mut waits = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let got = get(&sluice.url("/hang"), &[]).await;
        waits.push(started.elapsed());
        assert_problem(&got, StatusCode::GATEWAY_TIMEOUT);
    }

    // At the timeout (generous bounds: a shared 2-core machine).
    for waited in &waits {
        assert!(
            *waited >= Duration::from_millis(290) && *waited < Duration::from_millis(1000),
            "answered after {waited:?}, not about 300 ms"
        );
    }
    // No pile-up: each timed-out exchange's connection is closed, not kept.
    support::eventually(
        Duration::from_secs(5),
        "a hung upstream connection was left open",
        || {
            let conns = upstream.conns();
            async move { conns.iter().all(|conn| conn.closed_at.is_some()) }
        },
    )
    .await;
    assert_eq!(
        upstream.conns().len(),
        5,
        "one connection per hung exchange"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hung_exchange_on_a_reused_connection_gets_its_own_full_timeout() {
    // A pooled connection keeps its answer timer armed between exchanges
    // and lets it fire early rather than moving it: the earlier exchanges'
    // deadlines must not cut a later one short, whether the timer went off
    // while the connection was idle (the first pause is longer than the
    // timeout) or goes off during the hung exchange (the second request's
    // deadline, 200 ms before it).
    // On paused time: the pauses and the timeout are exact.
    let upstream = RawUpstream::start(|request| {
        if request.target == "/hang" {
            Action::Hang
        } else {
            ok()
        }
    })
    .await;
    let sluice =
        support::paused::start_for(upstream.addr, "upstream_timeout = \"300ms\"\n", "").await;
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = tokio::time::Instant::now();
    let got = get(&sluice.url("/hang"), &[]).await;
    let waited = started.elapsed();

    assert_problem(&got, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(waited, Duration::from_millis(300), "not its own 300 ms");
    let conns = upstream.conns();
    assert_eq!(conns.len(), 1, "the three exchanges shared one connection");
    assert_eq!(conns[0].requests.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f2_a_refused_upstream_is_502_at_once_and_a_post_is_never_retried() {
    // Refused: 502 long before the connect timeout.
    let refusing = support::Refusing::new();
    let down = refusing.addr;
    let toml =
        format!("[server]\nupstream = \"http://{{upstream}}\"\nconnect_timeout = \"5s\"\n{RULE}");
    let sluice = Sluice::start(&toml, down).await;
    let started = Instant::now();
    let got = get(&sluice.url("/"), &[]).await;
    assert_problem(&got, StatusCode::BAD_GATEWAY);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );

    // A POST the upstream read and then dropped without answering, on a
    // kept-alive pooled connection, is 502, not sent a second time.
    let (upstream, sluice) = behind("", |request| {
        if request.method == "POST" {
            Action::Close
        } else {
            ok()
        }
    })
    .await;
    let warm = exchange(sluice.addr, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(warm.statuses(), [200]);
    let got = exchange(
        sluice.addr,
        b"POST /order HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
    )
    .await;
    assert_eq!(got.statuses(), [502], "{}", got.text());
    let posts = upstream
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .count();
    assert_eq!(posts, 1, "the POST was retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_an_upstream_dying_mid_response_is_a_truncated_response_never_a_clean_one() {
    let (_upstream, sluice) = behind("", |request| match request.target.as_str() {
        "/chunked" => Action::ReplyAndClose(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n".to_vec(),
        ),
        _ => Action::ReplyAndClose(
            [
                &b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n"[..],
                &[b'x'; 50][..],
            ]
            .concat(),
        ),
    })
    .await;

    for target in ["/chunked", "/sized"] {
        for _ in 0..5 {
            let request = format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n");
            let got = exchange(sluice.addr, request.as_bytes()).await;

            let responses = got.responses();
            assert_eq!(responses.len(), 1, "{target}: {}", got.text());
            // The head went out before the upstream died: the client sees
            // the body cut short (no last chunk, or fewer bytes than
            // declared) and the connection closed.
            assert_eq!(responses[0].status, 200);
            assert!(
                !responses[0].complete,
                "{target}: a clean response: {}",
                got.text()
            );
            assert!(got.closed, "{target}: not closed");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_response_splitting_from_the_upstream_is_one_response_and_the_connection_discarded() {
    // HAProxy's "response splitting attach": TE and CL, then a second
    // response smuggled after the chunked body.
    let (upstream, sluice) = behind("", |request| match request.target.as_str() {
        "/split" => Action::Reply(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 30\r\n\r\n\
              0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsplit!"
                .to_vec(),
        ),
        _ => ok(),
    })
    .await;

    let got = exchange(sluice.addr, b"GET /split HTTP/1.1\r\nHost: a\r\n\r\n").await;

    let responses = got.responses();
    assert_eq!(responses.len(), 1, "{}", got.text());
    assert_eq!(responses[0].status, 200);
    assert!(responses[0].body.is_empty(), "{}", got.text());
    assert!(!got.text().contains("split!"), "{}", got.text());
    assert!(
        responses[0]
            .header("content-length")
            .is_none_or(|cl| cl == "0"),
        "the upstream's CL reached the client: {}",
        got.text()
    );

    // The next exchanges never see the smuggled response: the connection
    // that carried it was not reused.
    for _ in 0..3 {
        let next = exchange(sluice.addr, b"GET /next HTTP/1.1\r\nHost: a\r\n\r\n").await;
        let responses = next.responses();
        assert_eq!(responses.len(), 1, "{}", next.text());
        assert_eq!(responses[0].body, b"ok", "{}", next.text());
    }
    let conns = upstream.conns();
    assert_eq!(
        conns[0].requests.len(),
        1,
        "the split connection was reused"
    );
    assert!(
        conns[0].closed_at.is_some(),
        "the split connection was kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_a_client_abort_closes_the_upstream_connection_promptly() {
    let (upstream, sluice) = behind("upstream_timeout = \"30s\"", |request| {
        match request.target.as_str() {
            // A download that starts, then stalls.
            "/stall" => Action::Reply(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n".to_vec(),
            ),
            // An answer that never comes.
            _ => Action::Hang,
        }
    })
    .await;

    for (index, target) in ["/slow", "/stall"].into_iter().enumerate() {
        let mut client = TcpStream::connect(sluice.addr).await.unwrap();
        let request = format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n");
        client.write_all(request.as_bytes()).await.unwrap();
        // Wait until the exchange is under way at the upstream (the stalled
        // download's first bytes have reached the client).
        support::eventually(
            Duration::from_secs(5),
            "the request reached the upstream",
            || async { upstream.requests().len() == index + 1 },
        )
        .await;
        if target == "/stall" {
            let seen = wire::read_until(&mut client, |bytes| bytes.ends_with(b"hello\r\n")).await;
            assert!(!seen.closed, "{}", seen.text());
        }
        assert_eq!(upstream.conns().len(), index + 1, "{target}");
        assert!(upstream.conns()[index].closed_at.is_none(), "{target}");

        let aborted = Instant::now();
        drop(client);
        let deadline = aborted + Duration::from_secs(2);
        let closed_at = loop {
            if let Some(at) = upstream.conns()[index].closed_at {
                break at;
            }
            assert!(
                Instant::now() < deadline,
                "{target}: the upstream never saw the close"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };

        // Catalogue: within 100 ms (measured ~1 ms; generous bound here).
        let lag = closed_at.saturating_duration_since(aborted);
        assert!(
            lag < Duration::from_millis(500),
            "{target}: closed {lag:?} after the abort"
        );
    }
}
