//! What crosses sluice on the way to the upstream and back: hop-by-hop
//! headers, `X-Forwarded-*`, the client IP behind trusted proxies, h2c,
//! streamed bodies and the access lists.

use crate::support;

use http::StatusCode;
use support::{
    download_len, generated_body, get, get_h2, post_json, post_streaming, start, write_config,
    Sluice, SluiceProcess, Upstream,
};

const GENEROUS_RULE: &str = r#"
[[rule]]
name = "per-ip"
rate = "1000/m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_request_headers_stop_at_sluice_except_te_trailers() {
    let (upstream, sluice) = start(GENEROUS_RULE).await;

    get(
        &sluice.url("/first"),
        &[
            ("connection", "close, x-secret"),
            ("x-secret", "for the next hop only"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("proxy-authorization", "Basic c2VjcmV0"),
            ("te", "trailers"),
            ("x-end-to-end", "kept"),
        ],
    )
    .await;
    get(&sluice.url("/second"), &[("te", "gzip")]).await;

    let seen = upstream.seen();
    let first = &seen[0].headers;
    for name in [
        "x-secret",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
    ] {
        assert!(first.get(name).is_none(), "{name} was forwarded: {first:?}");
    }
    let connection = first
        .get("connection")
        .map(|v| v.to_str().unwrap().to_ascii_lowercase());
    assert!(
        !connection.as_deref().unwrap_or("").contains("x-secret"),
        "the client's Connection was forwarded: {connection:?}"
    );
    assert_eq!(
        first.get("te").unwrap(),
        "trailers",
        "gRPC needs TE: trailers"
    );
    assert_eq!(first.get("x-end-to-end").unwrap(), "kept");
    assert!(
        seen[1].headers.get("te").is_none(),
        "TE: gzip is hop-by-hop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_response_headers_stop_at_sluice() {
    let (_upstream, sluice) = start(GENEROUS_RULE).await;

    let got = get(&sluice.url("/hop"), &[]).await;

    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.header("x-upstream-public"), Some("visible"));
    assert!(
        got.header("x-upstream-private").is_none(),
        "named in the upstream's Connection"
    );
    assert!(got.header("keep-alive").is_none());
    assert!(
        !got.header("connection")
            .unwrap_or("")
            .contains("x-upstream-private"),
        "{:?}",
        got.headers
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naming_x_forwarded_for_in_connection_cannot_remove_the_one_sluice_sets() {
    let (upstream, sluice) = start(&format!(
        "trusted_proxies = [\"127.0.0.1/32\"]\n{GENEROUS_RULE}"
    ))
    .await;

    get(
        &sluice.url("/"),
        &[
            ("connection", "x-forwarded-for"),
            ("x-forwarded-for", "203.0.113.7"),
        ],
    )
    .await;

    let seen = upstream.seen();
    assert_eq!(
        seen[0]
            .headers
            .get("x-forwarded-for")
            .map(|v| v.to_str().unwrap()),
        Some("127.0.0.1"),
        "the client's hop-by-hop XFF is dropped, then sluice adds the peer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_learns_the_peer_protocol_and_host_from_sluice_not_the_client() {
    let (upstream, sluice) = start(GENEROUS_RULE).await;
    let forged = [
        ("x-forwarded-for", "6.6.6.6"),
        ("x-forwarded-proto", "https"),
        ("x-forwarded-host", "evil.example"),
    ];

    // A GET without a body (sluice writes the request itself) and a POST
    // (hyper's client writes it): the same fields either way.
    get(&sluice.url("/"), &forged).await;
    post_json(&sluice.url("/"), "{}", &forged).await;

    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    let host = sluice.addr.to_string();
    for request in &seen {
        let headers = &request.headers;
        let values = |name: &str| -> Vec<String> {
            headers
                .get_all(name)
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(values("x-forwarded-for"), ["127.0.0.1"], "{headers:?}");
        assert_eq!(values("x-forwarded-proto"), ["http"], "{headers:?}");
        assert_eq!(values("x-forwarded-host"), [host.as_str()], "{headers:?}");
        assert_eq!(values("host"), [host.as_str()], "Host passes through");
    }
}

const TRUSTING_LOOPBACK: &str = r#"
trusted_proxies = ["127.0.0.1/32"]

[[rule]]
name = "per-ip"
rate = "2/m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_each_forwarded_client_gets_its_own_bucket() {
    let (upstream, sluice) = start(TRUSTING_LOOPBACK).await;
    let mut codes = Vec::new();
    let request = |xff: &'static str| {
        let url = sluice.url("/");
        async move { get(&url, &[("x-forwarded-for", xff)]).await.status.as_u16() }
    };

    codes.push(request("203.0.113.7").await);
    codes.push(request("203.0.113.7").await);
    codes.push(request("203.0.113.7").await);
    codes.push(request("203.0.113.8").await);
    // The rightmost untrusted entry is the client: 203.0.113.7 again.
    codes.push(request("1.2.3.4, 203.0.113.7").await);

    assert_eq!(codes, [200, 200, 429, 200, 429]);
    assert_eq!(
        upstream.seen()[0].headers.get("x-forwarded-for").unwrap(),
        "203.0.113.7, 127.0.0.1",
        "a trusted peer's chain is extended with the peer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_peer_cannot_pick_its_bucket_with_x_forwarded_for() {
    let (upstream, sluice) = start(
        r#"
[[rule]]
name = "per-ip"
rate = "3/m"
"#,
    )
    .await;

    let mut codes = Vec::new();
    for i in 0..5 {
        let spoofed = format!("198.51.100.{i}, 192.0.2.{i}");
        codes.push(
            get(&sluice.url("/"), &[("x-forwarded-for", &spoofed)])
                .await
                .status
                .as_u16(),
        );
    }

    assert_eq!(codes, [200, 200, 200, 429, 429]);
    for seen in upstream.seen() {
        assert_eq!(seen.headers.get("x-forwarded-for").unwrap(), "127.0.0.1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_rfc7239_forwarded_a_trusted_chain_is_extended_and_an_untrusted_one_replaced() {
    let limits = r#"
[[rule]]
name = "per-ip"
rate = "2/m"
"#;
    // Trusted: the client's elements stay, the peer is appended, and the
    // client named in the chain gets its own bucket.
    let (upstream, sluice) = start(&format!(
        "trusted_proxies = [\"127.0.0.0/8\"]\nforwarded_header = \"forwarded\"\n{limits}"
    ))
    .await;
    let chain = "for=198.51.100.1;proto=https, for=\"[2001:db8::7]\"";
    let codes: Vec<u16> = codes_in_a_row(&sluice, &[("forwarded", chain)], 3).await;
    assert_eq!(codes, [200, 200, 429], "keyed by the client in the chain");
    let other = get(&sluice.url("/"), &[("forwarded", "for=203.0.113.9")]).await;
    assert_eq!(
        other.status,
        StatusCode::OK,
        "another client, another bucket"
    );
    let seen = upstream.seen();
    assert_eq!(
        seen[0].headers.get("forwarded").unwrap(),
        "for=198.51.100.1;proto=https, for=\"[2001:db8::7]\", for=127.0.0.1"
    );
    assert_eq!(
        seen[2].headers.get("forwarded").unwrap(),
        "for=203.0.113.9, for=127.0.0.1"
    );

    // Untrusted: whatever the client wrote is replaced by the peer alone.
    let (upstream, sluice) = start(&format!("forwarded_header = \"forwarded\"\n{limits}")).await;
    let codes = codes_in_a_row(&sluice, &[("forwarded", "for=192.0.2.1")], 3).await;
    assert_eq!(codes, [200, 200, 429], "keyed by the peer, not the header");
    for seen in upstream.seen() {
        assert_eq!(seen.headers.get("forwarded").unwrap(), "for=127.0.0.1");
    }
    // Without a Forwarded header sluice starts the chain.
    let plain = get(&sluice.url("/"), &[]).await;
    assert_eq!(plain.status, StatusCode::TOO_MANY_REQUESTS);
}

/// Status codes of `n` requests in a row with `headers`.
async fn codes_in_a_row(sluice: &Sluice, headers: &[(&str, &str)], n: usize) -> Vec<u16> {
    let mut codes = Vec::new();
    for _ in 0..n {
        codes.push(get(&sluice.url("/"), headers).await.status.as_u16());
    }
    codes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2c_client_is_served_and_limited_like_an_http1_client() {
    let (upstream, sluice) = start(
        r#"
[[rule]]
name = "per-ip"
rate = "2/m"
"#,
    )
    .await;

    let first = get_h2(&sluice.url("/h2"), &[]).await;
    let second = get_h2(&sluice.url("/h2"), &[]).await;
    let third = get_h2(&sluice.url("/h2"), &[]).await;

    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body, "ok");
    assert_eq!(first.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(second.status, StatusCode::OK);
    assert_eq!(third.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        third.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(
        third.header("ratelimit-policy"),
        Some(r#""per-ip";q=2;w=60"#)
    );
    assert_eq!(third.json()["rule"], "per-ip");
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    let host = sluice.addr.to_string();
    assert_eq!(
        seen[0].headers.get("host").unwrap().to_str().unwrap(),
        host,
        ":authority becomes Host"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deny_list_is_answered_403_with_a_problem_document() {
    let (upstream, sluice) = start(&format!(
        "\n[access]\ndeny = [\"127.0.0.0/8\"]\n{GENEROUS_RULE}"
    ))
    .await;

    let got = get(&sluice.url("/"), &[]).await;

    assert_eq!(got.status, StatusCode::FORBIDDEN);
    assert_eq!(got.header("content-type"), Some("application/problem+json"));
    let body = got.json();
    assert_eq!(body["status"], 403);
    assert!(body["detail"].as_str().is_some_and(|d| !d.is_empty()));
    assert_eq!(upstream.count(), 0);
    let denied = r#"sluice_requests_total{rule="per-ip",outcome="denied"}"#;
    assert_eq!(sluice.metric(denied).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_allow_list_is_never_limited() {
    let (upstream, sluice) = start(
        r#"
[access]
allow = ["127.0.0.1/32"]

[[rule]]
name = "per-ip"
rate = "1/m"
"#,
    )
    .await;

    let mut codes = Vec::new();
    for _ in 0..4 {
        codes.push(get(&sluice.url("/"), &[]).await.status.as_u16());
    }

    assert_eq!(codes, [200, 200, 200, 200]);
    assert_eq!(upstream.count(), 4);
}

/// Larger than 64 MiB, so that buffering a body would show in sluice's memory.
const LARGE: u64 = 80 * 1024 * 1024;
/// Generous: a fraction of what crosses, far below what buffering would cost.
const MAX_GROWTH_KIB: u64 = 32 * 1024;

/// The real binary with a generous rule, in front of `upstream`.
fn spawn_binary(dir: &std::path::Path, upstream: &Upstream) -> SluiceProcess {
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
upstream = "http://{}"
workers = 2

[admin]
listen = "127.0.0.1:0"

[[rule]]
name = "per-ip"
rate = "1000/m"
"#,
        upstream.addr
    );
    SluiceProcess::spawn(&write_config(dir, &toml))
}

/// Peak resident memory since start (`VmHWM`) minus the resident memory
/// before the transfer: catches a body buffered and freed again, which the
/// resident size afterwards would not show.
fn growth_kib(sluice: &SluiceProcess, before_rss: u64) -> u64 {
    sluice.memory_kib("VmHWM").saturating_sub(before_rss)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_upload_streams_through_without_growing_sluices_memory() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let sluice = spawn_binary(dir.path(), &upstream);
    // Warm up: pooled connections and buffers exist before the baseline.
    post_streaming(&sluice.url("/upload"), generated_body(1024 * 1024)).await;
    let before = sluice.memory_kib("VmRSS");

    let got = post_streaming(&sluice.url("/upload"), generated_body(LARGE)).await;

    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(
        got.body,
        LARGE.to_string(),
        "the upstream counted every byte"
    );
    let growth = growth_kib(&sluice, before);
    assert!(
        growth < MAX_GROWTH_KIB,
        "sluice grew by {growth} KiB for a {LARGE}-byte upload"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_download_streams_through_without_growing_sluices_memory() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let sluice = spawn_binary(dir.path(), &upstream);
    download_len(&sluice.url("/download/1048576")).await;
    let before = sluice.memory_kib("VmRSS");

    let (status, received) = download_len(&sluice.url(&format!("/download/{LARGE}"))).await;

    assert_eq!(status, StatusCode::OK);
    assert_eq!(received, LARGE);
    let growth = growth_kib(&sluice, before);
    assert!(
        growth < MAX_GROWTH_KIB,
        "sluice grew by {growth} KiB for a {LARGE}-byte download"
    );
}
