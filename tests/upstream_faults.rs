//! When the upstream fails, clients get a problem document that blames it
//! (502 or 504) and operators see the failure counted by kind.

mod support;

use std::time::{Duration, Instant};

use http::StatusCode;
use support::{assert_problem, closed_port, get, Sluice, Upstream};

const RULE: &str = r#"
[[rule]]
name = "per-ip"
rate = "100/m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_answered_502_and_counted_as_connect() {
    let down = closed_port();
    let toml =
        format!("[server]\nupstream = \"http://{{upstream}}\"\nconnect_timeout = \"1s\"\n{RULE}");
    let sluice = Sluice::start(&toml, down).await;
    let connect = r#"sluice_upstream_errors_total{kind="connect"}"#;
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
    let timeout = r#"sluice_upstream_errors_total{kind="timeout"}"#;
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
    let connect = r#"sluice_upstream_errors_total{kind="connect"}"#;
    assert_eq!(sluice.metric(connect).await, 0.0);
}
