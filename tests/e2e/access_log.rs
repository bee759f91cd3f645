//! The access log and request ids, on the real binary with a real
//! upstream: one JSON line per request with the fields docs/edge.md lists
//! ("One line per request"; a forwarded request, a 429, a held request, a
//! malformed request's 400, a client that leaves), credential keys as
//! labels and no query, the file reopened on
//! SIGHUP, a stdout nobody reads that never slows requests, and
//! `X-Request-Id` kept from trusted proxies, replaced otherwise, returned
//! and in problem documents.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use serde_json::Value;
use support::{assert_problem, get, metric, send, write_config, SluiceProcess, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Every member a line has, in order.
const MEMBERS: [&str; 17] = [
    "time",
    "request_id",
    "client",
    "method",
    "host",
    "path",
    "protocol",
    "status",
    "bytes_out",
    "duration_ms",
    "upstream_ms",
    "delay_ms",
    "outcome",
    "rule",
    "key",
    "cost",
    "keys",
];

/// A config whose `[server]` has `server_extra`, with rules `per-ip`
/// (1/m on /limited), `api-key` (keyed on `x-api-key`, on /keyed) and
/// `held` (1/s in delay mode on /held).
fn config(upstream: &Upstream, server_extra: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
upstream = "http://{}"
{server_extra}

[admin]
listen = "127.0.0.1:0"

[[rule]]
name = "per-ip"
match = {{ path_prefix = "/limited" }}
key = ["ip"]
rate = "1/m"

[[rule]]
name = "api-key"
match = {{ path_prefix = "/keyed" }}
key = ["header:x-api-key"]
rate = "100/m"

[[rule]]
name = "held"
match = {{ path_prefix = "/held" }}
key = ["ip"]
rate = "1/s"
on_limit = "delay"
max_delay = "5s"
"#,
        upstream.addr
    )
}

fn access_log_key(path: &Path) -> String {
    format!("access_log = {:?}", path.display().to_string())
}

/// The lines written to `path` so far, each parsed (every line must be
/// JSON with exactly [`MEMBERS`], in order).
fn lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| {
            let value: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            let names: Vec<&str> = value
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            let mut sorted = MEMBERS.to_vec();
            sorted.sort_unstable();
            assert_eq!(names, sorted, "{line}");
            let mut at = 0;
            for name in MEMBERS {
                at += line[at..]
                    .find(&format!("\"{name}\":"))
                    .unwrap_or_else(|| panic!("{name} out of order: {line}"));
            }
            value
        })
        .collect()
}

/// Waits (10 s at most) for a line of `path` that `matches`.
async fn line_where(path: &Path, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(line) = lines(path).into_iter().find(&matches) {
            return line;
        }
        assert!(
            Instant::now() < deadline,
            "no line {what} in {}:\n{}",
            path.display(),
            std::fs::read_to_string(path).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The line of the request whose id is `id`.
async fn line_of(path: &Path, id: &str) -> Value {
    line_where(path, &format!("with request_id {id}"), |line| {
        line["request_id"] == id
    })
    .await
}

/// A made id: 28 lowercase hexadecimal digits.
fn is_made(id: &str) -> bool {
    id.len() == 28
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A number of milliseconds.
fn millis(value: &Value) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {value}"))
}

/// The request's own id as the response says it.
fn id_of(got: &support::Got) -> String {
    got.header("x-request-id")
        .unwrap_or_else(|| panic!("no x-request-id: {got:?}"))
        .to_owned()
}

/// Sends `head` raw on a new connection; the answer's status, `x-request-id`
/// and body.
async fn raw(addr: std::net::SocketAddr, head: &str) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head[9..12].parse().unwrap();
    let id = head
        .lines()
        .find_map(|line| line.strip_prefix("x-request-id: "))
        .unwrap_or_default()
        .to_owned();
    (status, id, body.to_owned())
}

#[tokio::test]
async fn every_request_has_a_line_with_spec_s_fields() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let path = write_config(dir.path(), &config(&upstream, &access_log_key(&log)));
    let sluice = SluiceProcess::spawn(&path);

    // Forwarded, keyed on an API key, with a query that carries a secret.
    let forwarded = get(
        &sluice.url("/keyed//items/./one?token=QUERYSECRET&x=1"),
        &[("x-api-key", "sk_live_SECRET123")],
    )
    .await;
    assert_eq!(forwarded.status, StatusCode::OK);
    let id = id_of(&forwarded);
    assert!(is_made(&id), "{id}");
    let line = line_of(&log, &id).await;
    let time = line["time"].as_str().unwrap();
    assert!(
        time.len() == "2026-11-28T11:31:05.123456Z".len()
            && time.ends_with('Z')
            && time.as_bytes()[10] == b'T',
        "{time}"
    );
    let year: u32 = time[..4].parse().unwrap();
    assert!((2025..2200).contains(&year), "{time}");
    assert_eq!(line["client"], "127.0.0.1");
    assert_eq!(line["method"], "GET");
    assert_eq!(line["host"], "127.0.0.1");
    assert_eq!(line["path"], "/keyed/items/one", "normalised, no query");
    assert_eq!(line["protocol"], "HTTP/1.1");
    assert_eq!(line["status"], 200);
    assert_eq!(line["bytes_out"], forwarded.body.len());
    assert!(millis(&line["upstream_ms"]) >= 0.0);
    assert!(millis(&line["duration_ms"]) >= millis(&line["upstream_ms"]));
    assert_eq!(line["delay_ms"], 0);
    assert_eq!(line["outcome"], "allowed");
    assert_eq!(line["rule"], "api-key");
    let key = line["key"].as_str().unwrap();
    assert!(
        key.starts_with("sk_l…#") && key.len() == "sk_l…#".len() + 12,
        "{key}"
    );
    // What a replay needs: the cost, and every source a rule keys on, a
    // credential as the same label as `key`.
    assert_eq!(line["cost"], 1);
    assert_eq!(
        line["keys"],
        serde_json::json!({"ip": "127.0.0.1", "header:x-api-key": key}),
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("SECRET"), "a credential in the log: {text}");
    assert!(!text.contains("token"), "the query in the log: {text}");

    // Limited: the 429's line names the rule and the key.
    assert_eq!(
        get(&sluice.url("/limited"), &[]).await.status,
        StatusCode::OK
    );
    let limited = get(&sluice.url("/limited"), &[]).await;
    let body = assert_problem(&limited, StatusCode::TOO_MANY_REQUESTS);
    let id = id_of(&limited);
    assert_eq!(body["request_id"], id.as_str());
    let line = line_of(&log, &id).await;
    assert_eq!(line["status"], 429);
    assert_eq!(line["bytes_out"], limited.body.len());
    assert!(line["upstream_ms"].is_null(), "not forwarded: {line}");
    assert_eq!(line["outcome"], "limited");
    assert_eq!(line["rule"], "per-ip");
    assert_eq!(line["key"], "127.0.0.1");
    assert_eq!(line["path"], "/limited");
    assert_eq!(line["cost"], 1);
    assert_eq!(line["keys"]["header:x-api-key"], Value::Null, "none sent");

    // Held: the second request of a second waits for the next.
    assert_eq!(get(&sluice.url("/held"), &[]).await.status, StatusCode::OK);
    let held = get(&sluice.url("/held"), &[]).await;
    assert_eq!(held.status, StatusCode::OK);
    let line = line_of(&log, &id_of(&held)).await;
    let delay = line["delay_ms"].as_u64().unwrap();
    assert!(delay > 0, "{line}");
    assert_eq!(
        held.header("x-sluice-delay-ms"),
        Some(delay.to_string().as_str())
    );
    assert!(millis(&line["duration_ms"]) >= delay as f64 - 1.0, "{line}");
    assert_eq!(line["outcome"], "delayed");
    assert_eq!(line["rule"], "held");

    // A path that cannot be normalised: 400, with what was asked.
    let (status, id, body) = raw(
        sluice.addr,
        "GET /a/%zz?q=1 HTTP/1.1\r\nHost: api.example\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let problem: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(problem["request_id"], id.as_str());
    let line = line_of(&log, &id).await;
    assert_eq!(line["status"], 400);
    assert_eq!(line["path"], "/a/%zz");
    assert_eq!(line["host"], "api.example");
    assert_eq!(line["bytes_out"], body.len());
    assert!(line["rule"].is_null() && line["key"].is_null(), "{line}");
    assert!(line["cost"].is_null() && line["keys"].is_null(), "{line}");
    assert_eq!(line["outcome"], "allowed", "no rule applied");

    // A client that leaves while the upstream takes its time.
    let reached = upstream.count() + 1;
    let mut stream = tokio::net::TcpStream::connect(sluice.addr).await.unwrap();
    stream
        .write_all(b"GET /slow/3000 HTTP/1.1\r\nHost: gone.example\r\n\r\n")
        .await
        .unwrap();
    upstream.wait_for(reached).await;
    drop(stream);
    let line = line_where(&log, "of the client that left", |line| {
        line["host"] == "gone.example"
    })
    .await;
    assert_eq!(line["status"], 499, "{line}");
    assert_eq!(line["bytes_out"], 0);
    assert!(millis(&line["duration_ms"]) < 3000.0, "{line}");
    assert!(is_made(line["request_id"].as_str().unwrap()));
}

#[tokio::test]
async fn the_log_file_is_reopened_on_sighup() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let path = write_config(dir.path(), &config(&upstream, &access_log_key(&log)));
    let sluice = SluiceProcess::spawn(&path);
    let before = id_of(&get(&sluice.url("/before"), &[]).await);
    line_of(&log, &before).await;

    // As logrotate does: rename, then SIGHUP (its postrotate).
    let rotated: PathBuf = dir.path().join("access.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    sluice.signal("HUP");
    await_reload(&sluice).await;
    let after = id_of(&get(&sluice.url("/after"), &[]).await);
    let line = line_of(&log, &after).await;
    assert_eq!(line["path"], "/after");
    let old = lines(&rotated);
    assert!(old.iter().any(|line| line["request_id"] == before.as_str()));
    assert!(!old.iter().any(|line| line["request_id"] == after.as_str()));

    // A reload that switches the log to another file, then off.
    let other = dir.path().join("other.log");
    std::fs::write(&path, config(&upstream, &access_log_key(&other))).unwrap();
    post_reload(&sluice).await;
    let moved = id_of(&get(&sluice.url("/moved"), &[]).await);
    line_of(&other, &moved).await;
    std::fs::write(&path, config(&upstream, "access_log = \"off\"")).unwrap();
    post_reload(&sluice).await;
    let quiet = id_of(&get(&sluice.url("/quiet"), &[]).await);
    // Lines are written in order: once the log is on again and a later
    // request's line is there, a line for the quiet one would be too.
    std::fs::write(&path, config(&upstream, &access_log_key(&other))).unwrap();
    post_reload(&sluice).await;
    let later = id_of(&get(&sluice.url("/later"), &[]).await);
    line_of(&other, &later).await;
    for file in [&log, &other, &rotated] {
        assert!(
            !lines(file)
                .iter()
                .any(|line| line["request_id"] == quiet.as_str()),
            "logged while off"
        );
    }
}

/// Waits for a reload to be applied.
async fn await_reload(sluice: &SluiceProcess) {
    let series = "sluice_config_reloads_total{result=\"ok\"}";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = get(&sluice.admin_url("/metrics"), &[]).await.body;
        if metric(&text, series).unwrap_or(0.0) >= 1.0 {
            return;
        }
        assert!(Instant::now() < deadline, "no reload within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn post_reload(sluice: &SluiceProcess) {
    let got = send(Method::POST, &sluice.admin_url("/admin/reload"), &[]).await;
    assert_eq!(got.status, StatusCode::OK, "{got:?}");
}

#[tokio::test]
async fn a_stdout_nobody_reads_never_slows_requests() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        dir.path(),
        &config(
            &upstream,
            "access_log = \"stdout\"\nmax_connections = 10000",
        ),
    );
    let mut command = Command::new(support::binary());
    command.args(["run", "--config"]).arg(&path);
    // Piped, and never read: once the pipe is full, every write blocks.
    let sluice = SluiceProcess::spawn_command_with_stdout(command, Stdio::piped());
    assert!(sluice.child.stdout.is_some());

    const CLIENTS: usize = 8;
    const EACH: usize = 500;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let url = sluice.url(&format!("/load/{client}"));
        tasks.push(tokio::spawn(async move {
            // One keep-alive connection per client.
            let http =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build_http::<http_body_util::Full<bytes::Bytes>>();
            for _ in 0..EACH {
                let response = http.get(url.parse().unwrap()).await.unwrap();
                assert_eq!(response.status(), StatusCode::OK);
                let got = support::collect(response).await;
                assert!(got.header("x-request-id").is_some());
            }
        }));
    }
    let all = futures_util::future::join_all(tasks);
    let finished = tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("requests were held up by the log's stdout");
    for task in finished {
        task.unwrap();
    }
    let took = started.elapsed();
    let text = get(&sluice.admin_url("/metrics"), &[]).await.body;
    let dropped = metric(&text, "sluice_access_log_dropped_total").unwrap();
    // The pipe holds a few hundred lines, the buffers about a thousand.
    assert!(dropped > 0.0, "nothing dropped of {} lines", CLIENTS * EACH);
    assert!(dropped < (CLIENTS * EACH) as f64);
    // Memory stays at the buffers' size.
    let rss = sluice.memory_kib("VmRSS");
    assert!(rss < 200 * 1024, "{rss} KiB");
    eprintln!(
        "{} requests in {took:?}, {dropped} lines dropped",
        CLIENTS * EACH
    );
}

/// A config for request-id tests: `trusted` peers are 127.0.0.1, or none.
fn id_config(upstream: &Upstream, dir: &Path, trusted: bool) -> (PathBuf, PathBuf) {
    let log = dir.join("access.log");
    let trust = if trusted {
        "trusted_proxies = [\"127.0.0.1/32\"]"
    } else {
        ""
    };
    let extra = format!("{}\n{trust}", access_log_key(&log));
    (write_config(dir, &config(upstream, &extra)), log)
}

/// The `x-request-id` values the upstream saw on its last request.
fn seen_ids(upstream: &Upstream) -> Vec<String> {
    let seen = upstream.seen();
    let last = seen.last().expect("the upstream saw the request");
    last.headers
        .get_all("x-request-id")
        .iter()
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        .collect()
}

#[tokio::test]
async fn a_trusted_proxy_s_request_id_is_kept_and_an_invalid_one_replaced() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (path, log) = id_config(&upstream, dir.path(), true);
    let sluice = SluiceProcess::spawn(&path);

    let got = get(&sluice.url("/kept"), &[("x-request-id", "lb-7f3a/42:x")]).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.header("x-request-id"), Some("lb-7f3a/42:x"));
    assert_eq!(seen_ids(&upstream), ["lb-7f3a/42:x"]);
    assert_eq!(line_of(&log, "lb-7f3a/42:x").await["path"], "/kept");

    // The longest kept, and a request with a body (hyper's side).
    let longest = "a".repeat(200);
    let got = get(&sluice.url("/long"), &[("x-request-id", &longest)]).await;
    assert_eq!(id_of(&got), longest);
    assert_eq!(seen_ids(&upstream), [longest.as_str()]);
    let posted =
        support::post_json(&sluice.url("/post"), "{}", &[("x-request-id", "post-1")]).await;
    assert_eq!(id_of(&posted), "post-1");
    assert_eq!(seen_ids(&upstream), ["post-1"]);

    // Not ones to keep: 201 characters, a space, beyond ASCII.
    let too_long = "a".repeat(201);
    for (what, value) in [
        ("201 characters", too_long.as_bytes()),
        ("a space", b"has space".as_slice()),
        ("non-ASCII", "caf\u{e9}".as_bytes()),
    ] {
        let got = raw(
            sluice.addr,
            &format!(
                "GET /replaced HTTP/1.1\r\nHost: h\r\nConnection: close\r\nx-request-id: {}\r\n\r\n",
                String::from_utf8_lossy(value)
            ),
        )
        .await;
        let (status, id, _) = got;
        assert_eq!(status, 200, "{what}");
        assert!(is_made(&id), "{what}: {id}");
        assert_eq!(seen_ids(&upstream), [id.as_str()], "{what}");
        line_of(&log, &id).await;
    }

    // A problem document carries the id of its response.
    assert_eq!(
        get(&sluice.url("/limited"), &[]).await.status,
        StatusCode::OK
    );
    let limited = get(&sluice.url("/limited"), &[("x-request-id", "client-429")]).await;
    let body = assert_problem(&limited, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["request_id"], "client-429");
    assert_eq!(id_of(&limited), "client-429");
    assert_eq!(line_of(&log, "client-429").await["status"], 429);
}

#[tokio::test]
async fn an_untrusted_peer_s_request_id_is_replaced() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (path, log) = id_config(&upstream, dir.path(), false);
    let sluice = SluiceProcess::spawn(&path);

    let got = get(&sluice.url("/untrusted"), &[("x-request-id", "forged-1")]).await;
    let id = id_of(&got);
    assert!(is_made(&id), "{id}");
    assert_eq!(
        seen_ids(&upstream),
        [id.as_str()],
        "one id upstream, sluice's"
    );
    assert_eq!(line_of(&log, &id).await["path"], "/untrusted");

    // Sent twice, on hyper's side (a body) too.
    let posted = support::post_json(
        &sluice.url("/post"),
        "{}",
        &[("x-request-id", "forged-2"), ("x-request-id", "forged-3")],
    )
    .await;
    let id = id_of(&posted);
    assert!(is_made(&id), "{id}");
    assert_eq!(seen_ids(&upstream), [id.as_str()]);

    // Over HTTP/2 (h2c) too.
    let h2 = support::get_h2(&sluice.url("/h2"), &[("x-request-id", "forged-h2")]).await;
    let id = id_of(&h2);
    assert!(is_made(&id), "{id}");
    assert_eq!(seen_ids(&upstream), [id.as_str()]);
    assert_eq!(line_of(&log, &id).await["path"], "/h2");

    // Ids differ from one request to the next.
    let again = id_of(&get(&sluice.url("/untrusted"), &[]).await);
    assert!(is_made(&again) && again != id);

    // Its own problem documents carry its own id.
    assert_eq!(
        get(&sluice.url("/limited"), &[]).await.status,
        StatusCode::OK
    );
    let limited = get(&sluice.url("/limited"), &[("x-request-id", "forged-4")]).await;
    let body = assert_problem(&limited, StatusCode::TOO_MANY_REQUESTS);
    let id = id_of(&limited);
    assert!(is_made(&id));
    assert_eq!(body["request_id"], id.as_str());
}

#[tokio::test]
async fn each_refusal_names_its_outcome_rule_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    // The test's peer is trusted, so X-Forwarded-For picks each client.
    let (_upstream, sluice) = support::start(&format!(
        r#"{}
trusted_proxies = ["127.0.0.1/32"]

[access]
deny = ["192.0.2.0/24"]
allow = ["198.51.100.0/24"]

[[rule]]
name = "keyed"
match = {{ path_prefix = "/keyed" }}
key = ["ip", "header:x-api-key"]
missing = "reject"
rate = "100/m"

[[rule]]
name = "banning"
match = {{ path_prefix = "/ban" }}
key = ["ip"]
rate = "1/m"
ban = {{ after = 1, within = "1m", for = "10m" }}
"#,
        access_log_key(&log)
    ))
    .await;
    let from = |client: &'static str| [("x-forwarded-for", client)];

    let denied = get(&sluice.url("/keyed"), &from("192.0.2.9")).await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN);
    let line = line_of(&log, &id_of(&denied)).await;
    assert_eq!(line["client"], "192.0.2.9");
    assert_eq!(line["outcome"], "denied");
    assert!(line["rule"].is_null() && line["key"].is_null(), "{line}");

    let allowed = get(&sluice.url("/ban"), &from("198.51.100.5")).await;
    assert_eq!(allowed.status, StatusCode::OK);
    let line = line_of(&log, &id_of(&allowed)).await;
    assert_eq!(line["outcome"], "allowed");
    assert!(line["rule"].is_null() && line["key"].is_null(), "{line}");

    let keyless = get(&sluice.url("/keyed"), &from("203.0.113.1")).await;
    assert_eq!(keyless.status, StatusCode::BAD_REQUEST);
    let line = line_of(&log, &id_of(&keyless)).await;
    assert_eq!(line["outcome"], "missing_key");
    assert_eq!(line["rule"], "keyed");
    assert!(line["key"].is_null(), "{line}");

    // A composite key: the IP in clear, the credential as its label.
    let keyed = get(
        &sluice.url("/keyed"),
        &[
            ("x-forwarded-for", "203.0.113.1"),
            ("x-api-key", "tenant-secret-42"),
        ],
    )
    .await;
    assert_eq!(keyed.status, StatusCode::OK);
    let line = line_of(&log, &id_of(&keyed)).await;
    let key = line["key"].as_str().unwrap();
    assert!(key.starts_with("203.0.113.1|tena…#"), "{key}");
    assert!(!key.contains("secret"), "{key}");

    // Limited, which starts a ban; then banned, counted limited too.
    for (expected, status) in [("allowed", 200), ("limited", 429), ("limited", 429)] {
        let got = get(&sluice.url("/ban"), &from("203.0.113.2")).await;
        assert_eq!(got.status.as_u16(), status, "{got:?}");
        let line = line_of(&log, &id_of(&got)).await;
        assert_eq!(line["outcome"], expected, "{line}");
        assert_eq!(line["rule"], "banning");
        assert_eq!(line["key"], "203.0.113.2");
        assert_eq!(line["client"], "203.0.113.2");
    }
    let banned = get(&sluice.url("/ban"), &from("203.0.113.2")).await;
    assert_eq!(banned.json()["banned"], true, "{banned:?}");
    assert_eq!(banned.json()["request_id"], id_of(&banned).as_str());
}

/// A body source in `access_log_keys` reads the body as a rule would, for
/// every request, though no rule keys on it: the value is recorded (a
/// credential, as its label; a coded body decoded), and a body sluice
/// cannot read is recorded as `null`, its request decided as ever.
#[tokio::test]
async fn a_body_source_in_access_log_keys_is_recorded_though_no_rule_reads_the_body() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let server = format!(
        "{}\naccess_log_keys = [\"body:/tenant\", \"body:/n\"]",
        access_log_key(&log)
    );
    let path = write_config(dir.path(), &config(&upstream, &server));
    let sluice = SluiceProcess::spawn(&path);
    let post = |body: Vec<u8>, coding: Option<&'static str>| {
        let url = sluice.url("/anything");
        async move {
            let mut fields = vec![("content-type", "application/json")];
            fields.extend(coding.map(|coding| ("content-encoding", coding)));
            let (status, headers, _) = support::post_raw(&url, &body, &fields).await;
            assert_eq!(status, StatusCode::OK);
            headers["x-request-id"].to_str().unwrap().to_owned()
        }
    };
    let body = br#"{"tenant":"acme-SECRET","n":4.2e1}"#;
    let id = post(body.to_vec(), None).await;
    let keys = line_of(&log, &id).await["keys"].clone();
    let tenant = keys["body:/tenant"].as_str().unwrap();
    assert!(
        tenant.starts_with("ac") && tenant.contains("…#"),
        "a label: {keys}"
    );
    // A number by its value, as a rule keys it: 4.2e1 is 42.
    let id = post(br#"{"n":42}"#.to_vec(), None).await;
    assert_eq!(line_of(&log, &id).await["keys"]["body:/n"], keys["body:/n"]);
    let id = post(support::gzip(body), Some("gzip")).await;
    assert_eq!(
        line_of(&log, &id).await["keys"],
        keys,
        "decoded as a rule reads it"
    );
    // Unreadable (a byte-order mark) or not JSON: forwarded, recorded null.
    for unread in [
        [&b"\xEF\xBB\xBF"[..], body].concat(),
        b"tenant=acme".to_vec(),
    ] {
        let id = post(unread, None).await;
        let keys = &line_of(&log, &id).await["keys"];
        assert_eq!(keys["body:/tenant"], Value::Null, "{keys}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("SECRET"), "a credential in the log: {text}");
    assert_eq!(upstream.count(), 5);
}
