//! Distributed traces on the real binary (docs/observability.md): spans
//! exported over OTLP/HTTP to a collector in the test
//! (`support::otlp::Collector`), which decodes them with
//! `opentelemetry-proto`'s types, and the trace headers the upstream sees.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use http::{Method, StatusCode};

use crate::support::otlp::{Collector, ReceivedSpan};
use crate::support::{binary, metric, send, write_config, Refusing, SluiceProcess, Upstream};

/// A parent as a trusted proxy would send it, sampled.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";
/// A trace id whose low 8 bytes are under 2^63: sampled at a ratio of 0.5.
const TRACE_UNDER_HALF: &str = "4bf92f3577b34da60000000000000001";

fn traceparent(flags: &str) -> String {
    format!("00-{TRACE}-{PARENT}-{flags}")
}

/// Spans are exported 20 ms after the first of a batch.
const QUICK: (&str, &str) = ("OTEL_BSP_SCHEDULE_DELAY", "20");

/// How long a span may take to reach the collector.
const ARRIVES: Duration = Duration::from_secs(10);

/// A config for `upstream` whose `[server]` has `server_extra` and whose
/// `[tracing]` is `tracing` (no section when empty), with the rules
/// `per-key` (1/m keyed on `x-api-key`, on /keyed) and `held` (1/s in
/// delay mode, on /held).
fn config(upstream: &str, server_extra: &str, tracing: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
upstream = "{upstream}"
{server_extra}

[admin]
listen = "127.0.0.1:0"

{tracing}

[[rule]]
name = "per-key"
match = {{ path_prefix = "/keyed" }}
key = ["header:x-api-key"]
rate = "1/m"

[[rule]]
name = "held"
match = {{ path_prefix = "/held" }}
key = ["ip"]
rate = "1/s"
on_limit = "delay"
max_delay = "5s"
"#
    )
}

fn tracing_section(collector: &Collector, rest: &str) -> String {
    format!("[tracing]\notlp = \"{}\"\n{rest}", collector.endpoint())
}

fn spawn(dir: &Path, toml: &str, env: &[(&str, &str)]) -> SluiceProcess {
    let mut env = env.to_vec();
    env.push(QUICK);
    SluiceProcess::spawn_with_env(&write_config(dir, toml), &env)
}

fn server_spans(spans: &[ReceivedSpan]) -> Vec<&ReceivedSpan> {
    spans.iter().filter(|span| span.is_server()).collect()
}

fn attr(span: &ReceivedSpan, key: &str) -> String {
    span.attr(key)
        .unwrap_or_else(|| panic!("no {key} on {:?}", span.span))
}

/// Waits until `sluice`'s metrics say what `holds` looks for.
async fn metrics_until(sluice: &SluiceProcess, what: &str, holds: impl Fn(&str) -> bool) {
    let admin = sluice.admin_url("/metrics");
    let holds = &holds;
    crate::support::eventually(ARRIVES, what, || {
        let admin = admin.clone();
        async move { holds(&crate::support::get(&admin, &[]).await.body) }
    })
    .await;
}

/// `sluice_trace_spans_total{result}` in a scrape.
fn spans_metric(text: &str, result: &str) -> Option<f64> {
    metric(
        text,
        &format!("sluice_trace_spans_total{{result=\"{result}\"}}"),
    )
}

fn reloads_ok(text: &str) -> Option<f64> {
    metric(text, "sluice_config_reloads_total{result=\"ok\"}")
}

/// Ends `sluice` with SIGTERM, which exports what is still queued (to a
/// collector on this test's runtime: the wait runs off it).
async fn stop(mut sluice: SluiceProcess) {
    tokio::task::spawn_blocking(move || {
        sluice.terminate();
        sluice
            .wait_exit(Duration::from_secs(10))
            .expect("sluice exits");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_trusted_parent_is_followed_and_the_upstream_gets_sluices_attempt_as_its_parent() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, collector) = (Upstream::start().await, Collector::start().await);
    let toml = config(
        &format!("http://{}", upstream.addr),
        "trusted_proxies = [\"127.0.0.1\"]",
        &tracing_section(&collector, "sample = 0"),
    );
    let sluice = spawn(dir.path(), &toml, &[]);
    let parent = traceparent("01");
    let headers = [
        ("traceparent", parent.as_str()),
        ("tracestate", "vendor=abc"),
        ("user-agent", "tracing-test/1"),
    ];
    let got = send(Method::GET, &sluice.url("/anything?secret=1"), &headers).await;
    assert_eq!(got.status, StatusCode::OK);
    let spans = collector.spans_eventually(2, ARRIVES).await;
    let server = server_spans(&spans)[0];
    let client = spans.iter().find(|span| span.is_client()).unwrap();

    // The server span is the parent's child, the attempt the server span's.
    assert_eq!(server.trace_id_hex(), TRACE);
    assert_eq!(server.parent_hex(), PARENT);
    assert_eq!(server.span.trace_state, "vendor=abc");
    assert_eq!(client.trace_id_hex(), TRACE);
    assert_eq!(client.parent_hex(), server.span_id_hex());
    // And the upstream's parent is the attempt.
    let seen = &upstream.seen()[0];
    let forwarded = seen.headers["traceparent"].to_str().unwrap();
    assert_eq!(forwarded, format!("00-{TRACE}-{}-01", client.span_id_hex()));
    assert_eq!(seen.headers["tracestate"], "vendor=abc");

    assert_eq!(server.span.name, "GET default");
    assert_eq!(attr(server, "http.request.method"), "GET");
    assert_eq!(attr(server, "url.path"), "/anything");
    assert_eq!(attr(server, "url.scheme"), "http");
    assert_eq!(attr(server, "server.address"), "127.0.0.1");
    assert_eq!(attr(server, "client.address"), "127.0.0.1");
    assert_eq!(attr(server, "network.protocol.version"), "1.1");
    assert_eq!(attr(server, "user_agent.original"), "tracing-test/1");
    assert_eq!(attr(server, "http.response.status_code"), "200");
    assert_eq!(attr(server, "sluice.outcome"), "allowed");
    assert_eq!(attr(server, "sluice.store"), "memory");
    assert_eq!(
        attr(server, "sluice.request_id"),
        got.header("x-request-id").unwrap()
    );
    assert!(!server.is_error());
    assert_eq!(attr(client, "server.address"), "127.0.0.1");
    assert_eq!(
        attr(client, "server.port"),
        upstream.addr.port().to_string()
    );
    assert_eq!(attr(client, "http.response.status_code"), "200");
    assert_eq!(attr(client, "sluice.upstream"), "default");
    assert_eq!(attr(client, "sluice.attempt"), "1");
    assert_eq!(
        server.resource_attr("service.name").as_deref(),
        Some("sluice")
    );
    assert_eq!(
        server.resource_attr("service.version").as_deref(),
        Some(env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        server
            .resource_attr("service.instance.id")
            .map(|id| id.len()),
        Some(32)
    );
    assert!(server.span.start_time_unix_nano <= client.span.start_time_unix_nano);
    assert!(client.span.end_time_unix_nano <= server.span.end_time_unix_nano);

    // An unsampled parent from a trusted peer: nothing recorded, its
    // headers go on unchanged.
    let unsampled = traceparent("00");
    let got = send(
        Method::GET,
        &sluice.url("/quiet"),
        &[("traceparent", &unsampled)],
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    stop(sluice).await;
    let quiet = upstream
        .seen()
        .into_iter()
        .find(|s| s.target == "/quiet")
        .unwrap();
    assert_eq!(quiet.headers["traceparent"].to_str().unwrap(), unsampled);
    assert_eq!(
        collector.spans().len(),
        2,
        "the unsampled request was recorded"
    );
}

#[tokio::test]
async fn a_client_cannot_make_sluice_follow_or_pick_its_trace() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, collector) = (Upstream::start().await, Collector::start().await);
    let parent = traceparent("01");
    // Not trusted, ratio 0: not followed and not sampled; its headers go
    // on unchanged.
    let toml = config(
        &format!("http://{}", upstream.addr),
        "",
        &tracing_section(&collector, "sample = 0"),
    );
    let sluice = spawn(dir.path(), &toml, &[]);
    let got = send(Method::GET, &sluice.url("/a"), &[("traceparent", &parent)]).await;
    assert_eq!(got.status, StatusCode::OK);
    stop(sluice).await;
    assert_eq!(
        upstream.seen()[0].headers["traceparent"].to_str().unwrap(),
        parent
    );
    assert!(collector.spans().is_empty(), "{:?}", collector.spans());

    // Ratio 1: sampled, as a trace of sluice's own.
    let toml = config(
        &format!("http://{}", upstream.addr),
        "",
        &tracing_section(&collector, "sample = 1"),
    );
    let sluice = spawn(dir.path(), &toml, &[]);
    send(Method::GET, &sluice.url("/b"), &[("traceparent", &parent)]).await;
    let spans = collector.spans_eventually(2, ARRIVES).await;
    let server = server_spans(&spans)[0];
    assert_ne!(server.trace_id_hex(), TRACE);
    assert_eq!(server.parent_hex(), "");
    let seen = upstream
        .seen()
        .into_iter()
        .find(|s| s.target == "/b")
        .unwrap();
    let forwarded = seen.headers["traceparent"].to_str().unwrap();
    assert!(
        forwarded.starts_with(&format!("00-{}-", server.trace_id_hex())),
        "{forwarded}"
    );
    stop(sluice).await;
}

/// `OTEL_TRACES_SAMPLER=traceidratio` at 0.5: `sample = 0.5` with
/// `parent = "never"`.
const TRACEIDRATIO_HALF: [(&str, &str); 2] = [
    ("OTEL_TRACES_SAMPLER", "traceidratio"),
    ("OTEL_TRACES_SAMPLER_ARG", "0.5"),
];

/// The target and `traceparent` the upstream saw for each request, by
/// target.
fn forwarded_traceparents(upstream: &Upstream) -> std::collections::HashMap<String, String> {
    upstream
        .seen()
        .into_iter()
        .map(|seen| {
            let value = seen.headers["traceparent"].to_str().unwrap().to_owned();
            (seen.target, value)
        })
        .collect()
}

#[tokio::test]
async fn under_traceidratio_a_trusted_peers_trace_id_decides_and_its_trace_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, collector) = (Upstream::start().await, Collector::start().await);
    let toml = config(
        &format!("http://{}", upstream.addr),
        "trusted_proxies = [\"127.0.0.1\"]",
        &tracing_section(&collector, ""),
    );
    let sluice = spawn(dir.path(), &toml, &TRACEIDRATIO_HALF);
    // At 0.5 a trace id is sampled when its low 8 bytes are below 2^63,
    // whatever its flag says: the flags are the opposite of the decision.
    let under = ["0000000000000000", "7fffffffffffffff", "3a1c5e0f9b2d4c68"];
    let over = ["8000000000000000", "ffffffffffffffff", "c3a1c5e0f9b2d4c6"];
    let mut requests = Vec::new();
    for (n, low) in under.iter().enumerate() {
        requests.push((format!("/under/{n}"), format!("{:016x}{low}", n + 1), "00"));
    }
    for (n, low) in over.iter().enumerate() {
        requests.push((format!("/over/{n}"), format!("{:016x}{low}", n + 1), "01"));
    }
    for (path, trace, flags) in &requests {
        let parent = format!("00-{trace}-{PARENT}-{flags}");
        let got = send(Method::GET, &sluice.url(path), &[("traceparent", &parent)]).await;
        assert_eq!(got.status, StatusCode::OK, "{path}");
    }
    collector.spans_eventually(2 * under.len(), ARRIVES).await;
    stop(sluice).await;
    let spans = collector.spans();
    assert_eq!(spans.len(), 2 * under.len(), "{spans:?}");
    let forwarded = forwarded_traceparents(&upstream);
    for (path, trace, flags) in &requests {
        let sent = format!("00-{trace}-{PARENT}-{flags}");
        let server = spans
            .iter()
            .find(|span| span.is_server() && span.trace_id_hex() == *trace);
        if path.starts_with("/under/") {
            // sluice's span is the incoming parent's child, in its trace,
            // and the upstream's parent is sluice's attempt.
            let server = server.unwrap_or_else(|| panic!("{path}: no span in {spans:?}"));
            assert_eq!(server.parent_hex(), PARENT, "{path}");
            assert_eq!(attr(server, "url.path"), *path);
            let client = spans
                .iter()
                .find(|span| span.is_client() && span.parent_hex() == server.span_id_hex())
                .unwrap_or_else(|| panic!("{path}: no attempt span"));
            assert_eq!(client.trace_id_hex(), *trace);
            assert_eq!(
                forwarded[path],
                format!("00-{trace}-{}-01", client.span_id_hex()),
                "{path}"
            );
        } else {
            // Not sampled: no span, and the upstream gets the parent as it
            // came.
            assert!(server.is_none(), "{path} was traced");
            assert_eq!(forwarded[path], sent, "{path}");
        }
    }
}

#[tokio::test]
async fn under_traceidratio_a_clients_trace_id_is_replaced_by_a_fresh_one() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, collector) = (Upstream::start().await, Collector::start().await);
    // No trusted peer: the client's ids, all under the bound, decide
    // nothing. About half the requests are sampled, each in a trace of
    // sluice's own; the others go on with their headers unchanged.
    let toml = config(
        &format!("http://{}", upstream.addr),
        "",
        &tracing_section(&collector, ""),
    );
    let sluice = spawn(dir.path(), &toml, &TRACEIDRATIO_HALF);
    let sent = format!("00-{TRACE_UNDER_HALF}-{PARENT}-01");
    const REQUESTS: usize = 32;
    for n in 0..REQUESTS {
        let path = format!("/client/{n}");
        let got = send(Method::GET, &sluice.url(&path), &[("traceparent", &sent)]).await;
        assert_eq!(got.status, StatusCode::OK, "{path}");
    }
    stop(sluice).await;
    let spans = collector.spans();
    let servers = server_spans(&spans);
    // All 32 unsampled has a chance of 2^-32.
    assert!(!servers.is_empty(), "no request was sampled");
    assert!(servers.len() < REQUESTS, "every request was sampled");
    for span in &spans {
        assert_ne!(span.trace_id_hex(), TRACE_UNDER_HALF, "{span:?}");
    }
    for server in &servers {
        assert_eq!(server.parent_hex(), "", "{server:?}");
    }
    let forwarded = forwarded_traceparents(&upstream);
    assert_eq!(forwarded.len(), REQUESTS);
    let fresh = forwarded.values().filter(|value| **value != sent).count();
    assert_eq!(fresh, servers.len(), "{forwarded:?}");
    for value in forwarded.values().filter(|value| **value != sent) {
        assert!(
            servers
                .iter()
                .any(|server| value.starts_with(&format!("00-{}-", server.trace_id_hex()))),
            "{value} names no trace sluice recorded"
        );
    }
}

#[tokio::test]
async fn refused_and_held_requests_carry_the_decision_and_no_key_in_clear() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, collector) = (Upstream::start().await, Collector::start().await);
    let toml = config(
        &format!("http://{}", upstream.addr),
        "",
        &tracing_section(&collector, ""),
    );
    let sluice = spawn(dir.path(), &toml, &[]);
    let key = "sk-live-0123456789abcdef";
    for expected in [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS] {
        let got = send(Method::GET, &sluice.url("/keyed"), &[("x-api-key", key)]).await;
        assert_eq!(got.status, expected);
    }
    // Together, so that one of them is held (1/s) however slow the machine.
    let held_url = sluice.url("/held");
    let (first, second) = tokio::join!(
        send(Method::GET, &held_url, &[]),
        send(Method::GET, &held_url, &[])
    );
    assert_eq!(
        (first.status, second.status),
        (StatusCode::OK, StatusCode::OK)
    );
    // Two forwarded and a held request (a server and a client span each),
    // and the 429 (a server span).
    let spans = collector.spans_eventually(7, ARRIVES).await;
    let limited = spans
        .iter()
        .find(|span| span.attr("http.response.status_code").as_deref() == Some("429"))
        .unwrap();
    assert_eq!(attr(limited, "sluice.outcome"), "limited");
    assert_eq!(attr(limited, "sluice.rule"), "per-key");
    assert_eq!(attr(limited, "sluice.remaining"), "0");
    let retry: u64 = attr(limited, "sluice.retry_after_ms").parse().unwrap();
    assert!((1..=60_000).contains(&retry), "{retry}");
    assert!(!limited.is_error(), "a 429 is not an error");
    // The key is shown as its label, never in clear, anywhere.
    let label = attr(limited, "sluice.key");
    assert!(!label.contains(key), "{label}");
    for span in &spans {
        for attribute in &span.span.attributes {
            let text = format!("{:?}", attribute.value);
            assert!(!text.contains(key), "{}: {text}", attribute.key);
        }
    }
    let held = spans
        .iter()
        .filter(|span| {
            span.is_server() && span.attr("sluice.outcome").as_deref() == Some("delayed")
        })
        .collect::<Vec<_>>();
    assert_eq!(held.len(), 1, "{spans:#?}");
    // About a second (1/s): the hold also covers the instant between the
    // two requests' clock reads and the wake-up, so a little over it.
    let delay: u64 = attr(held[0], "sluice.delay_ms").parse().unwrap();
    assert!((500..=1_100).contains(&delay), "{delay}");
    stop(sluice).await;
}

#[tokio::test]
async fn a_retried_request_has_an_attempt_span_each_and_a_502_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, collector) = (Upstream::start().await, Collector::start().await);
    let refusing = Refusing::new();
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
upstream = "api"
[admin]
listen = "127.0.0.1:0"
[[upstream]]
name = "api"
servers = ["http://{}", "http://{}"]
retries = 1
eject = {{ after = 1000, for = "1s" }}
[[upstream]]
name = "gone"
servers = ["http://{}"]
[[route]]
match = {{ path_prefix = "/gone" }}
upstream = "gone"
{}
"#,
        refusing.addr,
        upstream.addr,
        refusing.addr,
        tracing_section(&collector, "")
    );
    let sluice = spawn(dir.path(), &toml, &[]);
    // Until one request met the refusing server first (the pick is the
    // pool's; 30 tries miss it with odds of 1 in a billion).
    let mut retried = None;
    for index in 0..30 {
        let path = format!("/r{index}");
        assert_eq!(
            send(Method::GET, &sluice.url(&path), &[]).await.status,
            StatusCode::OK
        );
        let found = wait_for_server_span(&collector, &path).await;
        let attempts: Vec<ReceivedSpan> = collector
            .spans()
            .into_iter()
            .filter(|span| span.is_client() && span.parent_hex() == found.span_id_hex())
            .collect();
        if attempts.len() == 2 {
            retried = Some((found, attempts, path));
            break;
        }
    }
    let (server, mut attempts, path) = retried.expect("no request was retried");
    attempts.sort_by_key(|span| attr(span, "sluice.attempt"));
    assert_eq!(server.span.name, "GET api");
    assert_eq!(attr(&attempts[0], "sluice.attempt"), "1");
    assert_eq!(attr(&attempts[0], "error.type"), "connect");
    assert_eq!(
        attr(&attempts[0], "server.port"),
        refusing.addr.port().to_string()
    );
    assert!(attempts[0].is_error());
    assert_eq!(attr(&attempts[1], "sluice.attempt"), "2");
    assert_eq!(attr(&attempts[1], "http.response.status_code"), "200");
    assert_ne!(attempts[0].span_id_hex(), attempts[1].span_id_hex());
    let seen = upstream
        .seen()
        .into_iter()
        .find(|s| s.target == path)
        .unwrap();
    let forwarded = seen.headers["traceparent"].to_str().unwrap().to_owned();
    assert!(
        forwarded.contains(&attempts[1].span_id_hex()),
        "{forwarded}"
    );
    assert!(!server.is_error());

    // A pool that cannot be reached: a 502, marked ERROR.
    assert_eq!(
        send(Method::GET, &sluice.url("/gone"), &[]).await.status,
        StatusCode::BAD_GATEWAY
    );
    let failed = wait_for_server_span(&collector, "/gone").await;
    assert!(failed.is_error());
    assert_eq!(attr(&failed, "http.response.status_code"), "502");
    assert_eq!(failed.span.name, "GET gone");
    stop(sluice).await;
}

/// The server span of the request for `path`, once it arrived.
async fn wait_for_server_span(collector: &Collector, path: &str) -> ReceivedSpan {
    let what = format!("the span of {path}");
    collector
        .span_where(&what, ARRIVES, |span| {
            span.is_server() && span.attr("url.path").as_deref() == Some(path)
        })
        .await
}

#[tokio::test]
async fn b3_is_read_and_written_in_each_form() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, collector) = (Upstream::start().await, Collector::start().await);
    // The file asks for W3C and B3's single header.
    let toml = config(
        &format!("http://{}", upstream.addr),
        "trusted_proxies = [\"127.0.0.1\"]",
        &tracing_section(
            &collector,
            "sample = 0\npropagators = [\"tracecontext\", \"b3\"]",
        ),
    );
    let sluice = spawn(dir.path(), &toml, &[]);
    let b3 = format!("{TRACE}-{PARENT}-1");
    send(Method::GET, &sluice.url("/single"), &[("b3", &b3)]).await;
    let spans = collector.spans_eventually(2, ARRIVES).await;
    let server = server_spans(&spans)[0];
    let client = spans.iter().find(|span| span.is_client()).unwrap();
    assert_eq!(server.trace_id_hex(), TRACE);
    assert_eq!(server.parent_hex(), PARENT);
    let seen = &upstream.seen()[0];
    let attempt = client.span_id_hex();
    assert_eq!(seen.headers["b3"], format!("{TRACE}-{attempt}-1").as_str());
    assert_eq!(
        seen.headers["traceparent"],
        format!("00-{TRACE}-{attempt}-01").as_str()
    );
    stop(sluice).await;

    // OTEL_PROPAGATORS, without `propagators` in the file: B3's multi
    // headers, read and written.
    let toml = config(
        &format!("http://{}", upstream.addr),
        "trusted_proxies = [\"127.0.0.1\"]",
        &tracing_section(&collector, "sample = 0"),
    );
    let sluice = spawn(dir.path(), &toml, &[("OTEL_PROPAGATORS", "b3multi")]);
    let headers = [
        ("x-b3-traceid", TRACE),
        ("x-b3-spanid", PARENT),
        ("x-b3-sampled", "1"),
    ];
    send(Method::GET, &sluice.url("/multi"), &headers).await;
    let server = wait_for_server_span(&collector, "/multi").await;
    assert_eq!(server.parent_hex(), PARENT);
    let seen = upstream
        .seen()
        .into_iter()
        .find(|s| s.target == "/multi")
        .unwrap();
    assert_eq!(seen.headers["x-b3-traceid"], TRACE);
    assert_eq!(seen.headers["x-b3-sampled"], "1");
    assert_ne!(seen.headers["x-b3-spanid"], PARENT);
    assert!(!seen.headers.contains_key("traceparent"));
    stop(sluice).await;
}

/// `sluice check`'s output for `toml` with `env`.
fn check(dir: &Path, toml: &str, env: &[(&str, &str)]) -> String {
    let path = write_config(dir, toml);
    let out = Command::new(binary())
        .args(["check", "--config"])
        .arg(&path)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap() + &String::from_utf8(out.stderr).unwrap()
}

fn shown<'a>(out: &'a str, setting: &str) -> &'a str {
    let prefix = format!("tracing {setting} ");
    out.lines()
        .find(|line| line.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} in:\n{out}"))
}

#[test]
fn check_prints_each_setting_and_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let bare = config("http://127.0.0.1:9", "", "");
    // Nothing asked for tracing: nothing said.
    assert!(!check(dir.path(), &bare, &[]).contains("tracing"));

    let env = [
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://collector.example:4318/",
        ),
        ("OTEL_SERVICE_NAME", "edge"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=prod%20eu,service.name=ignored",
        ),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "x-api-key=collector-secret-42",
        ),
        ("OTEL_TRACES_SAMPLER", "traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ("OTEL_PROPAGATORS", "tracecontext,baggage,b3"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
    ];
    let out = check(dir.path(), &bare, &env);
    assert!(!out.contains("collector-secret-42"), "{out}");
    assert_eq!(
        shown(&out, "endpoint"),
        "tracing endpoint http://collector.example:4318/v1/traces  (from OTEL_EXPORTER_OTLP_ENDPOINT)"
    );
    assert_eq!(
        shown(&out, "header"),
        "tracing header x-api-key: (hidden)  (from OTEL_EXPORTER_OTLP_HEADERS)"
    );
    assert_eq!(
        shown(&out, "sample"),
        "tracing sample 0.25  (from OTEL_TRACES_SAMPLER)"
    );
    assert_eq!(
        shown(&out, "parent"),
        "tracing parent never  (from OTEL_TRACES_SAMPLER)"
    );
    assert_eq!(
        shown(&out, "propagators"),
        "tracing propagators tracecontext,b3  (from OTEL_PROPAGATORS)"
    );
    assert_eq!(
        shown(&out, "service.name"),
        "tracing service.name edge  (from OTEL_SERVICE_NAME)"
    );
    assert_eq!(
        shown(&out, "resource"),
        "tracing resource deployment.environment=prod eu  (from OTEL_RESOURCE_ATTRIBUTES)"
    );
    assert_eq!(
        shown(&out, "queue"),
        "tracing queue 100  (from OTEL_BSP_MAX_QUEUE_SIZE)"
    );
    assert_eq!(
        shown(&out, "timeout"),
        "tracing timeout 10000ms  (from default)"
    );

    // The file wins over each variable.
    let filed = config(
        "http://127.0.0.1:9",
        "",
        "[tracing]\notlp = \"http://127.0.0.1:4318\"\nsample = 0.5\nparent = \"always\"\npropagators = \"b3multi\"",
    );
    let out = check(dir.path(), &filed, &env);
    assert_eq!(
        shown(&out, "endpoint"),
        "tracing endpoint http://127.0.0.1:4318/v1/traces  (from [tracing])"
    );
    assert_eq!(
        shown(&out, "sample"),
        "tracing sample 0.5  (from [tracing])"
    );
    assert_eq!(
        shown(&out, "parent"),
        "tracing parent always  (from [tracing])"
    );
    assert_eq!(
        shown(&out, "propagators"),
        "tracing propagators b3multi  (from [tracing])"
    );
    // The traces endpoint variable is taken as it is.
    let traces = [("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/custom")];
    let out = check(dir.path(), &bare, &traces);
    assert_eq!(
        shown(&out, "endpoint"),
        "tracing endpoint http://c:4318/custom  (from OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)"
    );
    assert_eq!(shown(&out, "sample"), "tracing sample 1  (from default)");
    assert_eq!(
        shown(&out, "parent"),
        "tracing parent trusted  (from default)"
    );
    for (sampler, sample) in [
        ("always_off", "0"),
        ("parentbased_always_off", "0"),
        ("always_on", "1"),
    ] {
        let out = check(
            dir.path(),
            &bare,
            &[traces[0], ("OTEL_TRACES_SAMPLER", sampler)],
        );
        assert_eq!(
            shown(&out, "sample"),
            format!("tracing sample {sample}  (from OTEL_TRACES_SAMPLER)")
        );
        assert_eq!(
            shown(&out, "parent"),
            "tracing parent trusted  (from default)"
        );
    }
    // An unusable variable is a warning, and the default stands.
    let out = check(
        dir.path(),
        &bare,
        &[
            traces[0],
            ("OTEL_TRACES_SAMPLER_ARG", "lots"),
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
        ],
    );
    assert!(
        out.contains("OTEL_TRACES_SAMPLER_ARG: \"lots\" is not a ratio"),
        "{out}"
    );
    // The operator's switch wins over the file.
    let out = check(dir.path(), &filed, &[("OTEL_SDK_DISABLED", "true")]);
    assert!(out.contains("tracing off: OTEL_SDK_DISABLED=true"), "{out}");
    assert!(!out.contains("tracing endpoint"), "{out}");
}

#[tokio::test]
async fn the_variables_alone_turn_tracing_on_and_the_operators_switch_turns_it_off() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, collector) = (Upstream::start().await, Collector::start().await);
    let bare = config(&format!("http://{}", upstream.addr), "", "");
    let endpoint = collector.endpoint();
    let sluice = spawn(
        dir.path(),
        &bare,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_SERVICE_NAME", "edge"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-api-key=collector-secret-42",
            ),
        ],
    );
    send(Method::GET, &sluice.url("/on"), &[]).await;
    let spans = collector.spans_eventually(2, ARRIVES).await;
    assert_eq!(
        spans[0].resource_attr("service.name").as_deref(),
        Some("edge")
    );
    assert_eq!(
        spans[0].resource_attr("deployment.environment").as_deref(),
        Some("test")
    );
    assert_eq!(collector.headers()[0]["x-api-key"], "collector-secret-42");
    assert_eq!(
        collector.headers()[0]["content-type"],
        "application/x-protobuf"
    );
    let log = sluice.log.lock().unwrap().join("\n");
    assert!(!log.contains("collector-secret-42"), "{log}");
    drop(log);
    stop(sluice).await;

    // OTEL_SDK_DISABLED=true, whatever the file says.
    let before = collector.spans().len();
    let filed = config(
        &format!("http://{}", upstream.addr),
        "",
        &tracing_section(&collector, ""),
    );
    let sluice = spawn(dir.path(), &filed, &[("OTEL_SDK_DISABLED", "true")]);
    send(Method::GET, &sluice.url("/off"), &[]).await;
    let metrics = crate::support::get(&sluice.admin_url("/metrics"), &[])
        .await
        .body;
    assert_eq!(spans_metric(&metrics, "exported"), Some(0.0));
    stop(sluice).await;
    assert_eq!(collector.spans().len(), before);
}

#[tokio::test]
async fn a_collector_that_hangs_or_is_gone_costs_spans_not_requests() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let hanging = Collector::hanging().await;
    let toml = config(
        &format!("http://{}", upstream.addr),
        "",
        &tracing_section(&hanging, ""),
    );
    let env = [
        ("OTEL_BSP_MAX_QUEUE_SIZE", "8"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4"),
        ("OTEL_BSP_EXPORT_TIMEOUT", "300"),
    ];
    let sluice = spawn(dir.path(), &toml, &env);
    for index in 0..40 {
        let got = send(Method::GET, &sluice.url(&format!("/h{index}")), &[]).await;
        assert_eq!(got.status, StatusCode::OK);
    }
    metrics_until(&sluice, "spans dropped and failed", |text| {
        let spans = |result: &str| spans_metric(text, result).unwrap();
        spans("dropped") > 0.0 && spans("failed") > 0.0
    })
    .await;
    stop(sluice).await;

    // A collector that refuses connections: each export fails, counted.
    let gone = Refusing::new();
    let toml = config(
        &format!("http://{}", upstream.addr),
        "",
        &format!("[tracing]\notlp = \"http://{}\"", gone.addr),
    );
    let sluice = spawn(dir.path(), &toml, &[]);
    assert_eq!(
        send(Method::GET, &sluice.url("/g"), &[]).await.status,
        StatusCode::OK
    );
    metrics_until(&sluice, "the failed export counted", |text| {
        spans_metric(text, "failed") == Some(2.0)
    })
    .await;
    stop(sluice).await;
}

#[tokio::test]
async fn a_reload_applies_tracing() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let (first, second) = (Collector::start().await, Collector::start().await);
    let upstream_url = format!("http://{}", upstream.addr);
    let toml = config(&upstream_url, "", &tracing_section(&first, "sample = 0"));
    let path = write_config(dir.path(), &toml);
    let sluice = SluiceProcess::spawn_with_env(&path, &[QUICK]);
    send(Method::GET, &sluice.url("/before"), &[]).await;
    // Sampled from now on, and sent to the second collector.
    let reloaded = config(&upstream_url, "", &tracing_section(&second, "sample = 1"));
    std::fs::write(&path, reloaded).unwrap();
    sluice.signal("HUP");
    metrics_until(&sluice, "the reload", |text| reloads_ok(text) == Some(1.0)).await;
    send(Method::GET, &sluice.url("/after"), &[]).await;
    let server = wait_for_server_span(&second, "/after").await;
    assert_eq!(attr(&server, "sluice.outcome"), "allowed");
    // Then off.
    std::fs::write(&path, config(&upstream_url, "", "")).unwrap();
    sluice.signal("HUP");
    metrics_until(&sluice, "the second reload", |text| {
        reloads_ok(text) == Some(2.0)
    })
    .await;
    send(Method::GET, &sluice.url("/off"), &[]).await;
    stop(sluice).await;
    assert!(first.spans().is_empty());
    assert!(second
        .spans()
        .iter()
        .all(|span| span.attr("url.path").as_deref() != Some("/off")));
}

#[tokio::test]
async fn a_rate_limit_service_call_is_a_server_span_with_envoys_status() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
        rate_limit_descriptor::Entry, RateLimitDescriptor,
    };
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

    let dir = tempfile::tempdir().unwrap();
    let collector = Collector::start().await;
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
upstream = "http://127.0.0.1:9"
trusted_proxies = ["127.0.0.1"]
shutdown_grace = "1s"
[admin]
listen = "127.0.0.1:0"
[rls]
listen = "127.0.0.1:0"
{}
[[rule]]
name = "per-user"
match = {{ domain = "edge" }}
key = ["descriptor:user"]
rate = "1/m"
"#,
        tracing_section(&collector, "sample = 0")
    );
    let sluice = spawn(dir.path(), &toml, &[]);
    let addr = sluice
        .rls
        .expect("the serving line names the rate limit service");
    let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let parent = traceparent("01");
    for _ in 0..2 {
        let mut request = tonic::Request::new(RateLimitRequest {
            domain: "edge".to_owned(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "user".to_owned(),
                    value: "alice".to_owned(),
                }],
                ..Default::default()
            }],
            hits_addend: 1,
        });
        request
            .metadata_mut()
            .insert("traceparent", parent.parse().unwrap());
        client.should_rate_limit(request).await.unwrap();
    }
    // And a call without a parent: not sampled (`sample = 0`).
    let call = RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".to_owned(),
                value: "bob".to_owned(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    };
    client.should_rate_limit(call).await.unwrap();
    stop(sluice).await;
    let spans = collector.spans();
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let statuses: Vec<String> = spans
        .iter()
        .map(|span| attr(span, "ratelimit_status"))
        .collect();
    assert_eq!(statuses, ["ok", "over_limit"]);
    for span in &spans {
        assert!(span.is_server());
        assert!(!span.is_error());
        assert_eq!(
            span.span.name,
            "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
        );
        assert_eq!(span.trace_id_hex(), TRACE);
        assert_eq!(span.parent_hex(), PARENT);
        assert_eq!(attr(span, "sluice.domain"), "edge");
        assert_eq!(attr(span, "sluice.descriptors"), "1");
        assert_eq!(attr(span, "rpc.system"), "grpc");
    }
}

#[tokio::test]
async fn spans_still_queued_at_shutdown_are_exported() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, collector) = (Upstream::start().await, Collector::start().await);
    let toml = config(
        &format!("http://{}", upstream.addr),
        "",
        &tracing_section(&collector, ""),
    );
    let path = write_config(dir.path(), &toml);
    // A batch would wait a minute for more spans.
    let sluice = SluiceProcess::spawn_with_env(&path, &[("OTEL_BSP_SCHEDULE_DELAY", "60000")]);
    assert_eq!(
        send(Method::GET, &sluice.url("/last"), &[]).await.status,
        StatusCode::OK
    );
    stop(sluice).await;
    let spans = collector.spans();
    assert_eq!(spans.len(), 2, "{spans:#?}");
}

/// Over HTTP/2 both ways: an h2c client's request is a span with protocol
/// version 2, and an h2c upstream gets the attempt as its parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_clients_and_upstreams_carry_the_trace_too() {
    let dir = tempfile::tempdir().unwrap();
    let collector = Collector::start().await;
    // The h2c upstream answers with the traceparent it got.
    let addr = crate::support::h2c_upstream(|request| {
        let seen = request.headers().get("traceparent");
        seen.map(|value| value.to_str().unwrap().to_owned())
            .unwrap_or_default()
    })
    .await;
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"h2\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n{}\n\
         [[upstream]]\nname = \"h2\"\nprotocol = \"h2c\"\nservers = [\"http://{addr}\"]\n",
        tracing_section(&collector, "")
    );
    let sluice = spawn(dir.path(), &toml, &[]);
    let got = crate::support::get_h2(&sluice.url("/two"), &[]).await;
    assert_eq!(got.status, StatusCode::OK);
    let spans = collector.spans_eventually(2, ARRIVES).await;
    let server = server_spans(&spans)[0];
    let client = spans.iter().find(|span| span.is_client()).unwrap();
    assert_eq!(attr(server, "network.protocol.version"), "2");
    assert_eq!(server.span.name, "GET h2");
    assert_eq!(
        got.body,
        format!("00-{}-{}-01", server.trace_id_hex(), client.span_id_hex())
    );
    stop(sluice).await;
}
