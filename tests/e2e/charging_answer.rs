//! Charging by what the answer says (docs/charging.md), on the real binary
//! in front of an upstream that answers as LLM APIs do: OpenAI-style chunks
//! with `stream_options.include_usage` (usage in a last chunk, `null`
//! before), Anthropic-style `message_start` / `message_delta` events (a
//! growing count), plain JSON, a 2 MiB body, malformed usage, a stream the
//! client leaves; and the failed-logins recipe (`refund_on = ["2xx",
//! "3xx"]`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{eventually, get, metric, write_config, Got, SluiceProcess};

/// An upstream speaking as LLM APIs do; the query sets the usage it
/// reports: `p` prompt tokens, `c` completion tokens, `n` content chunks.
struct Llm {
    addr: SocketAddr,
}

type Body = BoxBody<Bytes, Infallible>;

impl Llm {
    async fn start() -> Llm {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let service = service_fn(|request: Request<Incoming>| async move {
                        Ok::<_, Infallible>(answer(&request))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Llm { addr }
    }
}

fn query(request: &Request<Incoming>, name: &str) -> u64 {
    request
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

/// An OpenAI chat-completions stream: `n` content chunks with
/// `"usage":null`, a last chunk with the usage, `[DONE]`.
pub fn openai_stream(p: u64, c: u64, n: u64) -> Vec<String> {
    let mut events: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1764000000,\
                 \"model\":\"gpt-4o-mini\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"word{i} \"}},\
                 \"logprobs\":null,\"finish_reason\":null}}],\"usage\":null}}\n\n"
            )
        })
        .collect();
    events.push(format!(
        "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1764000000,\
         \"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{p},\
         \"completion_tokens\":{c},\"total_tokens\":{}}}}}\n\n",
        p + c
    ));
    events.push("data: [DONE]\n\n".to_owned());
    events
}

/// An Anthropic messages stream: `message_start` with the input tokens,
/// `message_delta`s repeating a growing output count, ending at `c`.
fn anthropic_stream(p: u64, c: u64) -> Vec<String> {
    let mut events = vec![format!(
        "event: message_start\r\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_1\",\
         \"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\
         \"usage\":{{\"input_tokens\":{p},\"output_tokens\":1}}}}}}\r\n\r\n"
    )];
    events.push("event: ping\r\ndata: {\"type\": \"ping\"}\r\n\r\n".to_owned());
    for part in 1..=3 {
        events.push(format!(
            "event: content_block_delta\r\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\
             \"delta\":{{\"type\":\"text_delta\",\"text\":\"part {part}\"}}}}\r\n\r\n"
        ));
        events.push(format!(
            "event: message_delta\r\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":null}},\
             \"usage\":{{\"output_tokens\":{}}}}}\r\n\r\n",
            c * part / 3
        ));
    }
    events.push("event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n".to_owned());
    events
}

fn completion_json(p: u64, c: u64, content: &str) -> String {
    format!(
        "{{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"model\":\"gpt-4o-mini\",\
         \"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":\"{content}\"}},\
         \"finish_reason\":\"stop\"}}],\"usage\":{{\"prompt_tokens\":{p},\"completion_tokens\":{c},\
         \"total_tokens\":{}}}}}",
        p + c
    )
}

fn full(content_type: &str, body: String) -> Response<Body> {
    Response::builder()
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)).boxed())
        .unwrap()
}

/// Events sent one frame each, `gap` apart, and then (with `stall`) a
/// body that never ends.
fn events(events: Vec<String>, gap: Duration, stall: bool) -> Response<Body> {
    let frames = stream::unfold(
        (events.into_iter(), true),
        move |(mut rest, first)| async move {
            if !first {
                tokio::time::sleep(gap).await;
            }
            match rest.next() {
                Some(event) => Some((
                    Ok::<_, Infallible>(Frame::data(Bytes::from(event))),
                    (rest, false),
                )),
                None if stall => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    None
                }
                None => None,
            }
        },
    );
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(BodyExt::boxed(StreamBody::new(frames)))
        .unwrap()
}

fn answer(request: &Request<Incoming>) -> Response<Body> {
    let (p, c, n) = (
        query(request, "p"),
        query(request, "c"),
        query(request, "n"),
    );
    let no_gap = Duration::ZERO;
    match request.uri().path() {
        "/openai/stream" => events(openai_stream(p, c, n), Duration::from_millis(2), false),
        "/anthropic/stream" => events(anthropic_stream(p, c), Duration::from_millis(2), false),
        "/openai/json" => full(
            "application/json; charset=utf-8",
            completion_json(p, c, "hi"),
        ),
        "/openai/text" => full("text/plain", completion_json(p, c, "hi")),
        // 2 MiB of content before the usage: past what is read.
        "/openai/big" => full(
            "application/json",
            completion_json(p, c, &"x".repeat(2 << 20)),
        ),
        "/openai/malformed" => full(
            "application/json",
            "{\"usage\":{\"prompt_tokens\":\"12\",\"completion_tokens\":-3}}".to_owned(),
        ),
        // Content, then the usage only after the client is long gone.
        "/openai/stalls" => events(openai_stream(p, c, n)[..n as usize].to_vec(), no_gap, true),
        "/login" => {
            let right = request
                .headers()
                .get("x-password")
                .is_some_and(|password| password == "right");
            let mut response = full("application/json", "{}".to_owned());
            if !right {
                *response.status_mut() = StatusCode::UNAUTHORIZED;
            }
            response
        }
        _ => {
            let mut response = full("text/plain", "not found".to_owned());
            *response.status_mut() = StatusCode::NOT_FOUND;
            response
        }
    }
}

/// sluice (the binary) in front of `llm` with `rules`.
fn sluice(llm: &Llm, rules: &str) -> (SluiceProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n\n[admin]\nlisten = \"127.0.0.1:0\"\n\n{rules}",
        llm.addr
    );
    let path = write_config(dir.path(), &config);
    (SluiceProcess::spawn(&path), dir)
}

async fn series(sluice: &SluiceProcess, name: &str, rule: &str) -> f64 {
    let text = get(&sluice.admin_url("/metrics"), &[]).await.body;
    metric(&text, &format!("{name}{{rule=\"{rule}\"}}")).unwrap_or(0.0)
}

/// Waits until `rule` has been charged (the charge is made once, as the
/// body ends, just after the client read it), then checks it was `units`
/// and that `errors` values never arrived.
async fn charged(sluice: &SluiceProcess, rule: &str, units: f64, errors: f64) {
    eventually(
        Duration::from_secs(5),
        &format!("{rule} charged {units}"),
        || async { series(sluice, "sluice_budget_charged_total", rule).await >= units },
    )
    .await;
    assert_eq!(
        series(sluice, "sluice_budget_charged_total", rule).await,
        units,
        "{rule}: charged"
    );
    assert_eq!(
        series(sluice, "sluice_charge_errors_total", rule).await,
        errors,
        "{rule}: values that never arrived"
    );
}

fn remaining(got: &Got) -> i64 {
    got.header("x-ratelimit-remaining")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no X-RateLimit-Remaining: {got:?}"))
}

const TOKENS: &str = r#"
[[rule]]
name = "tokens"
key = ["header:authorization"]
rate = "100000/d"
charge = { "json:/usage/prompt_tokens" = 1, "json:/usage/completion_tokens" = 4 }
charge_missing = 500
"#;

#[tokio::test]
async fn an_openai_stream_is_charged_its_weighted_usage_and_reaches_the_client_whole() {
    let llm = Llm::start().await;
    let (sluice, _dir) = sluice(&llm, TOKENS);
    let key = [("authorization", "Bearer sk-one")];
    let got = get(&sluice.url("/openai/stream?p=12&c=30&n=40"), &key).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(
        got.body,
        openai_stream(12, 30, 40).concat(),
        "every byte, unchanged"
    );
    // 12 prompt tokens + 4 × 30 completion tokens.
    charged(&sluice, "tokens", 132.0, 0.0).await;
    let next = get(&sluice.url("/openai/json?p=1&c=1"), &key).await;
    // 100,000 − (1 + 132) − 1.
    assert_eq!(remaining(&next), 99_866, "{next:?}");
    charged(&sluice, "tokens", 137.0, 0.0).await;
    // The status page shows the units charged per second.
    let status = get(&sluice.admin_url("/admin/status"), &[]).await.json();
    let rule = &status["rules"][0];
    assert_eq!(rule["totals"]["charged"], 137, "{rule}");
    let per_second = rule["rates_per_sec"]["charged"].as_f64().unwrap();
    assert!(per_second > 0.0 && per_second <= 137.0, "{rule}");
}

#[tokio::test]
async fn an_anthropic_stream_is_charged_the_last_count_it_repeats() {
    let llm = Llm::start().await;
    let rules = r#"
[[rule]]
name = "claude"
key = ["header:x-api-key"]
rate = "100000/d"
charge = { "json:/message/usage/input_tokens" = 1, "json:/usage/output_tokens" = 5 }
"#;
    let (sluice, _dir) = sluice(&llm, rules);
    let got = get(
        &sluice.url("/anthropic/stream?p=25&c=90"),
        &[("x-api-key", "k")],
    )
    .await;
    assert_eq!(got.body, anthropic_stream(25, 90).concat());
    // The output count grew 30, 60, 90: the last is charged, × 5.
    charged(&sluice, "claude", 25.0 + 450.0, 0.0).await;
}

#[tokio::test]
async fn a_value_not_read_charges_charge_missing_and_is_counted() {
    let llm = Llm::start().await;
    let (sluice, _dir) = sluice(&llm, TOKENS);
    let key = [("authorization", "Bearer sk-two")];

    // Usage after 2 MiB of content: past the 1 MiB read, so missing (each
    // source on its own), yet the client gets every byte.
    let big = get(&sluice.url("/openai/big?p=3&c=4"), &key).await;
    assert_eq!(big.status, StatusCode::OK);
    assert_eq!(
        big.body.len(),
        completion_json(3, 4, &"x".repeat(2 << 20)).len()
    );
    charged(&sluice, "tokens", 1_000.0, 2.0).await;

    // A string and a negative number: malformed, both.
    get(&sluice.url("/openai/malformed"), &key).await;
    charged(&sluice, "tokens", 2_000.0, 4.0).await;

    // Not JSON by its content type: nothing is read.
    get(&sluice.url("/openai/text?p=1&c=1"), &key).await;
    charged(&sluice, "tokens", 3_000.0, 6.0).await;

    // A JSON body read in full.
    get(&sluice.url("/openai/json?p=7&c=2"), &key).await;
    charged(&sluice, "tokens", 3_015.0, 6.0).await;
}

#[tokio::test]
async fn a_client_that_leaves_before_the_usage_pays_the_deposit_and_charge_missing() {
    // The recipe: `cost` as a deposit taken at admission, `charge_missing`
    // for a stream that never reported its usage.
    let llm = Llm::start().await;
    let rules = r#"
[[rule]]
name = "deposit"
key = ["global"]
rate = "100000/d"
cost = 100
charge = "json:/usage/total_tokens"
charge_missing = 4000
"#;
    let (sluice, _dir) = sluice(&llm, rules);
    let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
    let head = "GET /openai/stalls?p=5&c=5&n=3 HTTP/1.1\r\nHost: t\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    // Read until the first content chunk arrived, then leave.
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("word0") {
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
            .await
            .expect("the first chunk streams at once")
            .unwrap();
        assert!(read > 0, "closed early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buffer[..read]);
    }
    drop(stream);
    charged(&sluice, "deposit", 4_000.0, 1.0).await;
    let next = get(&sluice.url("/openai/json?p=1&c=1"), &[]).await;
    // 100,000 − 100 (deposit) − 4,000 − 100 (this request's deposit).
    assert_eq!(remaining(&next), 95_800, "{next:?}");
}

#[tokio::test]
async fn failed_logins_are_counted_and_successful_ones_never() {
    // docs/charging.md, "Count only failures": 5 failed logins per 15
    // minutes per user.
    let llm = Llm::start().await;
    let rules = r#"
[[rule]]
name = "failed-logins"
match = { path = "/login", method = "POST" }
key = ["header:x-user"]
algorithm = "fixed_window"
rate = "5/15m"
refund_on = ["2xx", "3xx"]
"#;
    let (sluice, _dir) = sluice(&llm, rules);
    let login = |password: &'static str| {
        let url = sluice.url("/login");
        async move {
            crate::support::post_json(&url, "{}", &[("x-user", "ada"), ("x-password", password)])
                .await
                .status
        }
    };
    // Logging in successfully never counts, however often.
    for _ in 0..20 {
        assert_eq!(login("right").await, StatusCode::OK);
    }
    for attempt in 1..=5 {
        assert_eq!(
            login("wrong").await,
            StatusCode::UNAUTHORIZED,
            "attempt {attempt}"
        );
    }
    // The sixth attempt after five failures is refused, right password or not.
    assert_eq!(login("right").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(login("wrong").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        series(&sluice, "sluice_budget_refunded_total", "failed-logins").await,
        20.0
    );
    // Another user is not affected.
    let other = crate::support::post_json(
        &sluice.url("/login"),
        "{}",
        &[("x-user", "bob"), ("x-password", "wrong")],
    )
    .await;
    assert_eq!(other.status, StatusCode::UNAUTHORIZED);
}

/// An HTTP/2 (h2c) upstream that answers `/work?u=N` with a body and then
/// reports its cost in a trailer, as a gRPC service reports its status.
async fn h2_reporting_in_trailers() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = service_fn(|request: Request<Incoming>| async move {
                    let units = query(&request, "u").to_string();
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("x-cost-units", units.parse().unwrap());
                    trailers.insert("grpc-status", "0".parse().unwrap());
                    let frames = stream::iter([
                        Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"worked"))),
                        Ok(Frame::trailers(trailers)),
                    ]);
                    Ok::<_, Infallible>(Response::new(StreamBody::new(frames)))
                });
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_cost_reported_in_a_trailer_is_charged_and_stripped() {
    let upstream = h2_reporting_in_trailers().await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        r#"[server]
listen = "127.0.0.1:0"
upstream = "work"

[admin]
listen = "127.0.0.1:0"

[[upstream]]
name = "work"
protocol = "h2c"
servers = ["http://{upstream}"]

[[rule]]
name = "work-units"
key = ["global"]
rate = "10000/h"
charge = "header:x-cost-units"
"#
    );
    let sluice = SluiceProcess::spawn(&write_config(dir.path(), &config));
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let request = Request::get(sluice.url("/work?u=42"))
        .version(http::Version::HTTP_2)
        .header("te", "trailers")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = client.request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let collected = response.into_body().collect().await.unwrap();
    let trailers = collected
        .trailers()
        .cloned()
        .expect("trailers reach the client");
    assert_eq!(trailers.get("grpc-status").unwrap(), "0");
    assert!(
        trailers.get("x-cost-units").is_none(),
        "stripped: {trailers:?}"
    );
    assert_eq!(collected.to_bytes(), "worked");
    charged(&sluice, "work-units", 42.0, 0.0).await;
}

/// What `/v1/check` says is left in `rule`'s global bucket (cost 0: a look).
async fn left(sluice: &SluiceProcess, rule: &str) -> i64 {
    let body = format!(r#"{{"rule":"{rule}","key":"","cost":0}}"#);
    let got = crate::support::post_json(&sluice.admin_url("/v1/check"), &body, &[]).await;
    got.json()["remaining"]
        .as_i64()
        .unwrap_or_else(|| panic!("{}", got.body))
}

#[tokio::test]
async fn tokens_charged_on_one_instance_are_spent_on_the_others_in_both_redis_modes() {
    let redis = crate::support::RedisServer::start();
    let llm = Llm::start().await;
    for mode in ["strict", "hybrid"] {
        let rules = format!(
            "[store]\nbackend = \"redis\"\n[store.redis]\nurl = \"{}\"\nmode = \"{mode}\"\n\
             timeout = \"5s\"\n\n[[rule]]\nname = \"tokens-{mode}\"\nkey = [\"global\"]\n\
             rate = \"100000/30d\"\ncharge = {{ \"json:/usage/prompt_tokens\" = 1, \"json:/usage/completion_tokens\" = 4 }}\n",
            redis.url()
        );
        let (first, _a) = sluice(&llm, &rules);
        let (second, _b) = sluice(&llm, &rules);
        let rule = format!("tokens-{mode}");
        for instance in [&first, &second] {
            // Once the store answers (the link connects in the background).
            eventually(Duration::from_secs(10), "Redis answers", || async {
                left(instance, &rule).await;
                let text = get(&instance.admin_url("/metrics"), &[]).await.body;
                metric(&text, "sluice_store_fallback_active") == Some(0.0)
            })
            .await;
        }
        // The second instance knows the bucket (hybrid mode syncs the
        // buckets an instance has used): one request, 0 tokens, 1 unit.
        get(&second.url("/openai/json?p=0&c=0"), &[]).await;
        if mode == "hybrid" {
            crate::support::after_syncs([first.admin, second.admin]).await;
        }
        let got = get(&first.url("/openai/stream?p=100&c=200&n=10"), &[]).await;
        assert_eq!(got.status, StatusCode::OK, "{mode}");
        charged(&first, &rule, 900.0, 0.0).await;
        // The second instance sees the admission and the 900 tokens spent
        // (the bucket refills a unit in 26 s: none in this test). It
        // keeps using the bucket meanwhile, a unit a probe: hybrid mode
        // refreshes the buckets an instance uses.
        let what = format!("{mode}: the second instance never saw the tokens");
        let mut probes = 0;
        eventually(Duration::from_secs(5), &what, || {
            probes += 1;
            let probed = probes;
            let (url, admin) = (second.url("/openai/json?p=0&c=0"), &second);
            let rule = rule.clone();
            async move {
                get(&url, &[]).await;
                left(admin, &rule).await == 100_000 - 902 - probed
            }
        })
        .await;
    }
}
