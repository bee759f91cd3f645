//! Budgets for AI traffic (docs/ai-budgets.md): a rule with a `charge`
//! reserves at admission what a call may cost (its `max_tokens`) and
//! settles when the charge is known, on the real server in front of an
//! upstream that answers as an LLM API does. Parallel calls never overspend
//! the budget, in memory and with two instances on one `redis-server`;
//! each way a call can end settles it once.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{
    eventually, get, post_json, write_config, Got, RedisServer, Sluice, SluiceProcess,
};

/// An upstream that answers as an LLM API does. The request's JSON body
/// says how: `use` completion tokens, over `ms` milliseconds, as an event
/// stream (`stream`) or one JSON body; `end = "break"` cuts the stream off
/// before its usage. It counts the calls it serves at once.
pub(crate) struct Llm {
    pub(crate) addr: SocketAddr,
    in_flight: Arc<AtomicUsize>,
    most_at_once: Arc<AtomicUsize>,
}

type Body = BoxBody<Bytes, std::io::Error>;

impl Llm {
    pub(crate) async fn start() -> Llm {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let most_at_once = Arc::new(AtomicUsize::new(0));
        let counts = (Arc::clone(&in_flight), Arc::clone(&most_at_once));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counts = counts.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let counts = counts.clone();
                        async move { Ok::<_, Infallible>(answer(request, counts).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Llm {
            addr,
            in_flight,
            most_at_once,
        }
    }
}

/// Counts a call in flight until dropped (with its response body).
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn answer(
    request: Request<Incoming>,
    (in_flight, most): (Arc<AtomicUsize>, Arc<AtomicUsize>),
) -> Response<Body> {
    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    most.fetch_max(now, Ordering::SeqCst);
    let guard = InFlight(in_flight);
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let call: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let used = call["use"].as_u64().unwrap_or(0);
    let ms = call["ms"].as_u64().unwrap_or(0);
    let usage = format!("{{\"usage\":{{\"completion_tokens\":{used}}}}}");
    if !call["stream"].as_bool().unwrap_or(false) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        drop(guard);
        return Response::builder()
            .header("content-type", "application/json")
            .body(
                Full::new(Bytes::from(usage))
                    .map_err(|e| match e {})
                    .boxed(),
            )
            .unwrap();
    }
    // Ten chunks `ms / 10` apart, then the usage and `[DONE]` (or the
    // stream breaks off instead).
    let breaks = call["end"] == "break";
    let mut events: Vec<Result<String, std::io::Error>> = (0..10)
        .map(|i| {
            Ok(format!(
                "data: {{\"choices\":[{{\"delta\":{{\"content\":\"w{i}\"}}}}]}}\n\n"
            ))
        })
        .collect();
    if breaks {
        events.push(Err(std::io::Error::other("the model crashed")));
    } else {
        events.push(Ok(format!("data: {usage}\n\ndata: [DONE]\n\n")));
    }
    let gap = Duration::from_millis(ms / 10);
    let frames = stream::unfold(
        (events.into_iter(), Some(guard)),
        move |(mut rest, mut guard)| async move {
            tokio::time::sleep(gap).await;
            let event = rest.next()?;
            if rest.len() == 0 {
                guard.take();
            }
            Some((
                event.map(|text| Frame::data(Bytes::from(text))),
                (rest, guard),
            ))
        },
    );
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(BodyExt::boxed(StreamBody::new(frames)))
        .unwrap()
}

/// A budget of 10,000 tokens per key that refills too slowly to matter
/// during a test (10,000 in 30 days: one token every four minutes), each
/// call reserving its `max_tokens` and paying its completion tokens.
const TOKENS: &str = r#"
[[rule]]
name = "tokens"
key = ["header:authorization"]
rate = "10000/30d"
charge = "json:/usage/completion_tokens"
reserve = { "body:/max_tokens" = 1 }
"#;

fn call(max_tokens: u64, used: u64, ms: u64) -> String {
    json!({"model": "m", "max_tokens": max_tokens, "stream": true, "use": used, "ms": ms})
        .to_string()
}

/// What the admin view says is left of `key`'s budget, and whether it is in
/// debt (below zero).
async fn balance(admin: SocketAddr, key: &str) -> (u64, bool) {
    let url = format!(
        "http://{admin}/admin/buckets?rule=tokens&key={}",
        key.replace(' ', "%20")
    );
    let view = get(&url, &[]).await;
    assert_eq!(view.status, StatusCode::OK, "{}", view.body);
    let bucket = &view.json()["buckets"][0];
    (
        bucket["remaining"].as_u64().unwrap(),
        bucket["in_debt"].as_bool().unwrap(),
    )
}

async fn series(admin: SocketAddr, name: &str) -> f64 {
    let text = get(&format!("http://{admin}/metrics"), &[]).await.body;
    crate::support::metric(&text, &format!("{name}{{rule=\"tokens\"}}")).unwrap_or(0.0)
}

/// How often the balance is read while the load runs: the guarantee is
/// about every instant, so it is looked at throughout.
const SAMPLE_EVERY: Duration = Duration::from_millis(20);

/// 200 parallel streaming calls, spread over `instances` (sluice's admin
/// addresses and proxy URLs), against 10 calls' worth of budget: exactly 10
/// run (all at once), the rest are refused, the balance never goes below
/// zero, and afterwards it is the budget less what the 10 used.
async fn two_hundred_calls_on_ten_calls_of_budget(llm: &Llm, instances: &[&Sluice]) {
    let key = "Bearer sk-load";
    let admin = instances[0].admin;
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = Arc::clone(&sampling);
        tokio::spawn(async move {
            let mut samples = 0;
            while sampling.load(Ordering::SeqCst) {
                let (left, in_debt) = balance(admin, key).await;
                assert!(
                    !in_debt && left <= 10_000,
                    "the balance read {left}, in debt: {in_debt}"
                );
                samples += 1;
                tokio::time::sleep(SAMPLE_EVERY).await;
            }
            samples
        })
    };
    let calls: Vec<_> = (0..200)
        .map(|i| {
            let url = instances[i % instances.len()].url("/v1/chat/completions");
            // Each may use up to 1,000 tokens and uses 600, over 3 s: the
            // calls all overlap.
            tokio::spawn(async move {
                post_json(&url, &call(1_000, 600, 3_000), &[("authorization", key)]).await
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for answered in calls {
        let got: Got = answered.await.unwrap();
        if got.status == StatusCode::OK {
            assert!(
                got.body.contains("\"completion_tokens\":600"),
                "{}",
                got.body
            );
        }
        statuses.push(got.status);
    }
    sampling.store(false, Ordering::SeqCst);
    let samples = sampler.await.unwrap();
    let admitted = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!((admitted, refused), (10, 190), "{statuses:?}");
    assert_eq!(llm.most_at_once.load(Ordering::SeqCst), 10);
    assert!(samples > 50, "the balance was read {samples} times");
    // Settled as each answer ended: 10,000 − 10 × 600.
    for sluice in instances {
        let admin = sluice.admin;
        eventually(
            Duration::from_secs(5),
            "every reservation settled",
            || async move { series(admin, "sluice_budget_reserved_units").await == 0.0 },
        )
        .await;
        assert_eq!(series(admin, "sluice_budget_overrun_total").await, 0.0);
    }
    eventually(
        Duration::from_secs(5),
        "the balance settles at 4,000",
        || async { balance(admin, key).await == (4_000, false) },
    )
    .await;
    assert_eq!(llm.in_flight.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn two_hundred_parallel_calls_never_overspend_a_budget_in_memory() {
    let llm = Llm::start().await;
    let config = format!("[server]\nupstream = \"http://{{upstream}}\"\n{TOKENS}");
    let sluice = Sluice::start(&config, llm.addr).await;
    two_hundred_calls_on_ten_calls_of_budget(&llm, &[&sluice]).await;
}

#[tokio::test]
async fn two_instances_on_one_redis_never_overspend_a_shared_budget() {
    let redis = RedisServer::start();
    let llm = Llm::start().await;
    let config = format!(
        "[server]\nupstream = \"http://{{upstream}}\"\n[store]\nbackend = \"redis\"\n\
         [store.redis]\nurl = \"{}\"\ntimeout = \"5s\"\n{TOKENS}",
        redis.url()
    );
    let a = Sluice::start(&config, llm.addr).await;
    let b = Sluice::start(&config, llm.addr).await;
    for sluice in [&a, &b] {
        eventually(Duration::from_secs(15), "the store answers", || async {
            let _ = balance(sluice.admin, "warm-up").await;
            sluice.metric("sluice_store_fallback_active").await == 0.0
        })
        .await;
    }
    two_hundred_calls_on_ten_calls_of_budget(&llm, &[&a, &b]).await;
}

/// sluice (the binary) in front of `llm` with `rules`.
fn binary(llm: &Llm, rules: &str) -> (SluiceProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n\n[admin]\nlisten = \
         \"127.0.0.1:0\"\n\n{rules}",
        llm.addr
    );
    let path = write_config(dir.path(), &config);
    (SluiceProcess::spawn(&path), dir)
}

/// Waits until nothing is reserved, then reads what is left of `key`.
async fn settled(sluice: &SluiceProcess, key: &str) -> (u64, bool) {
    eventually(Duration::from_secs(5), "nothing left reserved", || async {
        series(sluice.admin, "sluice_budget_reserved_units").await == 0.0
    })
    .await;
    balance(sluice.admin, key).await
}

#[tokio::test]
async fn a_reservation_is_settled_once_however_the_call_ends() {
    let llm = Llm::start().await;
    let rules = format!("{TOKENS}charge_missing = 50\n");
    let (sluice, _dir) = binary(&llm, &rules);
    let url = sluice.url("/v1/chat/completions");
    let post = |body: Value, key: &'static str| {
        let url = url.clone();
        async move { post_json(&url, &body.to_string(), &[("authorization", key)]).await }
    };

    // The answer ends: a JSON body, then an event stream. Each reserves
    // 1,000 while it runs and pays what it used.
    let got = post(json!({"max_tokens": 1000, "use": 120}), "Bearer json").await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.header("x-ratelimit-cost"), Some("1000"));
    assert_eq!(got.header("x-ratelimit-remaining"), Some("9000"));
    assert_eq!(settled(&sluice, "Bearer json").await, (9_880, false));
    let got = post(
        json!({"max_tokens": 1000, "use": 300, "stream": true, "ms": 100}),
        "Bearer sse",
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    assert!(got.body.ends_with("data: [DONE]\n\n"), "{}", got.body);
    assert_eq!(settled(&sluice, "Bearer sse").await, (9_700, false));

    // While a call runs, its reservation is held (and shown).
    let running = tokio::spawn(post(
        json!({"max_tokens": 700, "use": 10, "stream": true, "ms": 1500}),
        "Bearer running",
    ));
    eventually(Duration::from_secs(5), "700 reserved", || async {
        series(sluice.admin, "sluice_budget_reserved_units").await == 700.0
    })
    .await;
    assert_eq!(
        balance(sluice.admin, "Bearer running").await,
        (9_300, false)
    );
    let status = get(&sluice.admin_url("/admin/status"), &[]).await.json();
    assert_eq!(status["rules"][0]["reserved"], 700, "{status}");
    assert_eq!(running.await.unwrap().status, StatusCode::OK);
    assert_eq!(settled(&sluice, "Bearer running").await, (9_990, false));

    // The stream breaks before its usage: charge_missing (50) is paid.
    let broken = json!({"max_tokens": 1000, "use": 400, "stream": true, "ms": 50, "end": "break"});
    let mut client = TcpStream::connect(sluice.addr).await.unwrap();
    client
        .write_all(raw_post(&broken, "Bearer broken").as_bytes())
        .await
        .unwrap();
    let mut read = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut read)).await;
    assert_eq!(settled(&sluice, "Bearer broken").await, (9_950, false));

    // The client leaves mid-stream: what never came is charge_missing.
    let long = json!({"max_tokens": 1000, "use": 400, "stream": true, "ms": 5000});
    let mut client = TcpStream::connect(sluice.addr).await.unwrap();
    client
        .write_all(raw_post(&long, "Bearer leaves").as_bytes())
        .await
        .unwrap();
    let mut head = [0u8; 512];
    let read = client.read(&mut head).await.unwrap();
    assert!(head[..read].starts_with(b"HTTP/1.1 200"));
    assert_eq!(balance(sluice.admin, "Bearer leaves").await, (9_000, false));
    drop(client);
    assert_eq!(settled(&sluice, "Bearer leaves").await, (9_950, false));
    assert_eq!(
        series(sluice.admin, "sluice_budget_overrun_total").await,
        0.0
    );
    // 120 + 300 + 10 + 50 + 50.
    assert_eq!(
        series(sluice.admin, "sluice_budget_charged_total").await,
        530.0
    );
}

/// Nothing is free by hanging up: on a reserving rule without
/// `charge_missing`, a client that reads every content event of a streamed
/// answer and leaves before the usage event pays its whole reservation, as
/// does a call whose stream breaks before its usage; an answer that reports
/// its usage still pays only that.
#[tokio::test]
async fn hanging_up_before_the_usage_keeps_the_whole_reservation() {
    let llm = Llm::start().await;
    let (sluice, _dir) = binary(&llm, TOKENS);
    // Three streamed answers of 3,000 tokens each, left after their last
    // content event (the usage follows 300 ms later).
    for n in 0..3 {
        let call = json!({"max_tokens": 3000, "use": 2900, "stream": true, "ms": 3000});
        let mut client = TcpStream::connect(sluice.addr).await.unwrap();
        client
            .write_all(raw_post(&call, "Bearer leaves").as_bytes())
            .await
            .unwrap();
        let mut read = Vec::new();
        let mut chunk = [0u8; 4096];
        while !String::from_utf8_lossy(&read).contains("w9") {
            let got = tokio::time::timeout(Duration::from_secs(10), client.read(&mut chunk))
                .await
                .expect("the stream goes on")
                .unwrap();
            assert!(
                got > 0,
                "call {n} ended early: {}",
                String::from_utf8_lossy(&read)
            );
            read.extend_from_slice(&chunk[..got]);
        }
        assert!(!String::from_utf8_lossy(&read).contains("usage"));
        drop(client);
    }
    assert_eq!(settled(&sluice, "Bearer leaves").await, (1_000, false));

    // A stream that breaks before its usage keeps its reservation too.
    let broken = json!({"max_tokens": 1000, "use": 400, "stream": true, "ms": 50, "end": "break"});
    let mut client = TcpStream::connect(sluice.addr).await.unwrap();
    client
        .write_all(raw_post(&broken, "Bearer broken").as_bytes())
        .await
        .unwrap();
    let mut read = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut read)).await;
    assert_eq!(settled(&sluice, "Bearer broken").await, (9_000, false));

    // A client that waits for the usage pays what it reports.
    let got = post_json(
        &sluice.url("/v1/chat/completions"),
        &call(1000, 250, 50),
        &[("authorization", "Bearer waits")],
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(settled(&sluice, "Bearer waits").await, (9_750, false));
    // 3 × 3,000 + 1,000 kept, 250 reported: every unit counted as charged,
    // the four values that never came as errors.
    assert_eq!(
        series(sluice.admin, "sluice_budget_charged_total").await,
        10_250.0
    );
    assert_eq!(
        series(sluice.admin, "sluice_charge_errors_total").await,
        4.0
    );
    assert_eq!(
        series(sluice.admin, "sluice_budget_overrun_total").await,
        0.0
    );
}

fn raw_post(body: &Value, key: &str) -> String {
    let body = body.to_string();
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: llm\r\nauthorization: {key}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test]
async fn overruns_missing_sizes_and_reservations_beyond_the_budget() {
    let llm = Llm::start().await;
    let rules = format!("{TOKENS}reserve_missing = 2500\n");
    let (sluice, _dir) = binary(&llm, &rules);
    let url = sluice.url("/v1/chat/completions");
    let post = |body: Value| {
        let url = url.clone();
        async move { post_json(&url, &body.to_string(), &[("authorization", "Bearer sk")]).await }
    };

    // An answer that costs more than was reserved: the rest is taken too,
    // and counted as an overrun.
    let got = post(json!({"max_tokens": 100, "use": 130})).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(settled(&sluice, "Bearer sk").await, (9_870, false));
    assert_eq!(
        series(sluice.admin, "sluice_budget_overrun_total").await,
        30.0
    );

    // A call that says nothing of its size, or says it as a string,
    // reserves reserve_missing.
    for body in [json!({"use": 1}), json!({"max_tokens": "100", "use": 1})] {
        let got = post(body).await;
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(got.header("x-ratelimit-cost"), Some("2500"));
    }
    assert_eq!(settled(&sluice, "Bearer sk").await, (9_868, false));

    // More than the budget could ever hold: refused at once, for good (no
    // Retry-After), nothing taken.
    let got = post(json!({"max_tokens": 20000, "use": 1})).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(got.header("retry-after"), None);
    assert_eq!(got.header("x-ratelimit-cost"), Some("20000"));
    let problem = got.json();
    assert_eq!(problem["retry_after_secs"], Value::Null);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .starts_with("this request reserves 20000 units and rule 'tokens' holds at most 10000"),
        "{problem}"
    );
    // More than is left now: refused, with when it would fit.
    let got = post(json!({"max_tokens": 9900, "use": 1})).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(got.header("retry-after").is_some(), "{got:?}");
    assert_eq!(settled(&sluice, "Bearer sk").await, (9_868, false));
    assert_eq!(llm.in_flight.load(Ordering::SeqCst), 0);

    // /admin/explain says what a call would reserve.
    let explained = post_json(
        &sluice.admin_url("/admin/explain"),
        &json!({"method": "POST", "path": "/v1/chat/completions",
                "headers": {"authorization": "Bearer sk", "content-type": "application/json"},
                "ip": "203.0.113.7", "body": "{\"max_tokens\": 640}"})
        .to_string(),
        &[],
    )
    .await;
    assert_eq!(explained.status, StatusCode::OK, "{}", explained.body);
    let answer = explained.json();
    assert_eq!(answer["rules"][0]["reserve"], 640, "{answer}");
}

#[tokio::test]
async fn a_held_call_waits_for_the_refill_its_reservation_needs() {
    let llm = Llm::start().await;
    // 100 tokens a second, at most 100 at once; held up to 600 ms.
    let rules = r#"
[[rule]]
name = "tokens"
key = ["header:authorization"]
rate = "100/s"
charge = "json:/usage/completion_tokens"
reserve = { "body:/max_tokens" = 1 }
on_limit = "delay"
max_delay = "600ms"
"#;
    let (sluice, _dir) = binary(&llm, rules);
    let url = sluice.url("/v1/chat/completions");
    let post = |body: Value| {
        let url = url.clone();
        async move { post_json(&url, &body.to_string(), &[("authorization", "Bearer sk")]).await }
    };
    assert_eq!(
        post(json!({"max_tokens": 100, "use": 100})).await.status,
        StatusCode::OK
    );
    // 40 more need 400 ms of refill: held that long, then forwarded.
    let got = post(json!({"max_tokens": 40, "use": 40})).await;
    assert_eq!(got.status, StatusCode::OK);
    let held: u64 = got.header("x-sluice-delay-ms").unwrap().parse().unwrap();
    assert!((300..=600).contains(&held), "held {held} ms");
    // 100 more would need a second: past max_delay, refused at once.
    let started = std::time::Instant::now();
    let got = post(json!({"max_tokens": 100, "use": 1})).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn check_refuses_a_reservation_it_cannot_settle_and_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        dir.path(),
        "[server]\nupstream = \"http://127.0.0.1:1\"\n\n[[rule]]\nname = \"tokens\"\n\
         rate = \"1000/d\"\nreserve = { \"body:/max_tokens\" = 1 }\n\n[[rule]]\nname = \"gcra\"\n\
         algorithm = \"leaky_bucket\"\nrate = \"10/s\"\ncharge = \"elapsed_ms\"\nreserve = 5\n",
    );
    let check = std::process::Command::new(crate::support::binary())
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!check.status.success());
    let said = String::from_utf8_lossy(&check.stderr);
    let file = path.display();
    assert!(
        said.contains(&format!(
            "{file}:7:11: rule[0].reserve: a reservation is settled against the rule's charge"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "{file}:14:11: rule[1].reserve: a leaky_bucket rule cannot give back part of what it \
             took"
        )),
        "{said}"
    );
}
