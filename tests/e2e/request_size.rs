//! Oversized requests are refused before any limiter or upstream work:
//! a request target above `max_uri_bytes` gets 414, a declared body above
//! `max_body_bytes` gets 413, both as problem documents, and neither reaches
//! the upstream nor spends budget.

use crate::support;

use http::StatusCode;
use support::{get, post_streaming, Sluice, Upstream};

const CONFIG: &str = r#"
[server]
upstream = "http://{upstream}"
max_uri_bytes = 1024
max_body_bytes = 4096

[[rule]]
name = "per-ip"
rate = "3/m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_target_longer_than_max_uri_bytes_is_answered_414() {
    let upstream = Upstream::start().await;
    let sluice = Sluice::start(CONFIG, upstream.addr).await;
    let long = format!("/search?q={}", "a".repeat(1100));
    let got = get(&sluice.url(&long), &[]).await;
    assert_eq!(got.status, StatusCode::URI_TOO_LONG, "{got:?}");
    assert_eq!(got.header("content-type"), Some("application/problem+json"));
    assert_eq!(got.json()["status"], 414);
    // Just under the limit is served, and the 414 spent nothing.
    let fits = format!("/search?q={}", "a".repeat(900));
    for _ in 0..3 {
        assert_eq!(get(&sluice.url(&fits), &[]).await.status, StatusCode::OK);
    }
    assert_eq!(upstream.count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_body_larger_than_max_body_bytes_is_answered_413() {
    let upstream = Upstream::start().await;
    let sluice = Sluice::start(CONFIG, upstream.addr).await;
    let got = post_streaming(&sluice.url("/upload"), sized_body(5000)).await;
    assert_eq!(got.status, StatusCode::PAYLOAD_TOO_LARGE, "{got:?}");
    assert_eq!(got.json()["status"], 413);
    assert_eq!(upstream.count(), 0);
    let fits = post_streaming(&sluice.url("/upload"), sized_body(4096)).await;
    assert_eq!(fits.status, StatusCode::OK, "{fits:?}");
    assert_eq!(fits.body, "4096");
}

/// A body of `len` bytes whose length is declared up front (Content-Length).
fn sized_body(len: usize) -> support::TestBody {
    use http_body_util::BodyExt;
    http_body_util::Full::new(bytes::Bytes::from(vec![b'x'; len])).boxed()
}
