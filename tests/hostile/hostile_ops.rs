//! Operations rows of docs/edge-behaviour.md's "Hostile inputs" table not in
//! `tests/e2e/operations.rs` or `tests/e2e/reload.rs`: H3 (invalid configs
//! on reload, by SIGHUP and by the file watch, under load), H6 (a reload
//! storm: no failed request, no descriptor or memory growth), H7 (shadow
//! mode predicts enforcement exactly) and H8 (`/metrics` stays quick during
//! a key flood and slowloris).
//! Against the real binary where /proc is read.

use crate::support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use support::{metric, send, start, write_config, SluiceProcess, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Writes `text` to `path` by atomic replacement (write aside, rename), so
/// the file watch never reads half a file.
fn replace(path: &Path, text: &str) {
    let aside = path.with_extension("toml.new");
    std::fs::write(&aside, text).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

async fn scrape(admin: SocketAddr) -> String {
    support::get(&format!("http://{admin}/metrics"), &[])
        .await
        .body
}

/// Waits until `sluice_config_reloads_total{result}` reaches `count`.
async fn await_reloads(sluice: &SluiceProcess, result: &str, count: f64) {
    let series = format!("sluice_config_reloads_total{{result=\"{result}\"}}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = scrape(sluice.admin).await;
        if metric(&text, &series).unwrap_or(0.0) >= count {
            return;
        }
        assert!(Instant::now() < deadline, "no {series} = {count}:\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One `GET path` with `X-Id: id` on a keep-alive raw connection; the status,
/// or `None` when the connection failed (it is then closed).
async fn request(
    stream: &mut Option<TcpStream>,
    addr: SocketAddr,
    path: &str,
    id: &str,
) -> Option<u16> {
    if stream.is_none() {
        *stream = Some(TcpStream::connect(addr).await.ok()?);
    }
    let connection = stream.as_mut().unwrap();
    let text = format!("GET {path} HTTP/1.1\r\nHost: sluice.test\r\nX-Id: {id}\r\n\r\n");
    let answer = async {
        connection.write_all(text.as_bytes()).await.ok()?;
        read_one(connection).await
    };
    let status = tokio::time::timeout(Duration::from_secs(5), answer)
        .await
        .ok()
        .flatten();
    if status.is_none() {
        *stream = None;
    }
    status
}

/// Reads one `Content-Length`-framed response; its status.
async fn read_one(stream: &mut TcpStream) -> Option<u16> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())?;
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.ok()?;
    Some(status)
}

/// `clients` keep-alive connections sending requests one after another
/// (each waits for its answer, then 5 ms) until `stop`; every status seen,
/// with 0 for a failed exchange.
fn load(
    addr: SocketAddr,
    clients: usize,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<u16>> {
    tokio::spawn(async move {
        let tasks: Vec<_> = (0..clients)
            .map(|client| {
                let stop = stop.clone();
                tokio::spawn(async move {
                    let mut stream = None;
                    let mut seen = Vec::new();
                    let path = if client % 2 == 0 { "/spend" } else { "/steady" };
                    while !stop.load(Ordering::Relaxed) {
                        let id = format!("load-{client}");
                        seen.push(request(&mut stream, addr, path, &id).await.unwrap_or(0));
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    seen
                })
            })
            .collect();
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.unwrap());
        }
        all
    })
}

/// A config with rule `spend` at `rate` and, when `extra`, a third rule, so
/// alternating reloads create and drop a bucket table.
fn config(upstream: &Upstream, rate: &str, extra: bool) -> String {
    let extra = if extra {
        "[[rule]]\nname = \"extra\"\nmatch = { path_prefix = \"/extra\" }\nrate = \"5/s\"\n"
    } else {
        ""
    };
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
upstream = "http://{}"

[admin]
listen = "127.0.0.1:0"

[[rule]]
name = "spend"
match = {{ path_prefix = "/spend" }}
key = ["header:x-id"]
rate = "{rate}"

[[rule]]
name = "steady"
match = {{ path_prefix = "/steady" }}
key = ["header:x-id"]
rate = "3/m"
{extra}"#,
        upstream.addr
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h3_invalid_configs_on_reload_keep_the_old_limits_and_fail_no_request() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let good = config(&upstream, "1000/s", false);
    let path = write_config(dir.path(), &good);
    let sluice = SluiceProcess::spawn(&path);
    let mut caller = None;
    let spend_two = [
        request(&mut caller, sluice.addr, "/steady", "a").await,
        request(&mut caller, sluice.addr, "/steady", "a").await,
    ];
    assert_eq!(spend_two, [Some(200), Some(200)]);

    let stop = Arc::new(AtomicBool::new(false));
    let traffic = load(sluice.addr, 2, stop.clone());
    let duplicate_rule = good.replace("name = \"steady\"", "name = \"spend\"");
    let broken = [
        ("a TOML syntax error", good.replace("[[rule]]", "[[rule]")),
        ("a negative rate", good.replace("1000/s", "-5/m")),
        (
            "an upstream that is not http://",
            good.replace("upstream = \"http://", "upstream = \"ftp://"),
        ),
        ("a duplicate rule name", duplicate_rule),
    ];
    for (index, (what, text)) in broken.iter().enumerate() {
        // Half by SIGHUP, half by the file watch.
        replace(&path, text);
        if index % 2 == 0 {
            sluice.signal("HUP");
        }
        await_reloads(&sluice, "error", (index + 1) as f64).await;
        let text = scrape(sluice.admin).await;
        assert_eq!(
            metric(&text, r#"sluice_config_reloads_total{result="ok"}"#),
            Some(0.0),
            "{what} was applied"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let seen = traffic.await.unwrap();
    let failed: Vec<&u16> = seen.iter().filter(|s| ![200, 429].contains(*s)).collect();
    assert!(
        failed.is_empty(),
        "{} of {} requests failed",
        failed.len(),
        seen.len()
    );

    // The old 3/m still holds for caller a, with its two spent.
    let after = [
        request(&mut caller, sluice.addr, "/steady", "a").await,
        request(&mut caller, sluice.addr, "/steady", "a").await,
    ];
    assert_eq!(after, [Some(200), Some(429)]);
    // A valid file is applied again.
    replace(&path, &config(&upstream, "1000/s", true));
    await_reloads(&sluice, "ok", 1.0).await;
}

/// Reloads by `POST /admin/reload`, alternating two valid configs written
/// atomically; panics on any refusal.
async fn reload_storm(
    sluice: &SluiceProcess,
    path: &Path,
    upstream: &Upstream,
    reloads: usize,
    gap: Duration,
) {
    let url = sluice.admin_url("/admin/reload");
    for index in 0..reloads {
        let odd = index % 2 == 1;
        replace(
            path,
            &config(upstream, if odd { "2000/s" } else { "1000/s" }, odd),
        );
        let answer = send(Method::POST, &url, &[]).await;
        assert_eq!(
            answer.status,
            StatusCode::OK,
            "reload {index}: {}",
            answer.body
        );
        tokio::time::sleep(gap).await;
    }
}

/// Open descriptors once they stop falling (closed connections take a moment).
async fn settled_fds(pid: u32) -> usize {
    let mut last = open_fds(pid);
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = open_fds(pid);
        if now == last {
            return now;
        }
        last = now;
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h6_a_reload_storm_fails_no_request_and_leaks_nothing() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(&upstream, "1000/s", false));
    let sluice = SluiceProcess::spawn(&path);
    let pid = sluice.child.id();

    // Warm up: every code path of a reload and a request has run once.
    let stop = Arc::new(AtomicBool::new(false));
    let warm = load(sluice.addr, 2, stop.clone());
    reload_storm(&sluice, &path, &upstream, 10, Duration::from_millis(10)).await;
    stop.store(true, Ordering::Relaxed);
    warm.await.unwrap();
    let fds_before = settled_fds(pid).await;
    let rss_before = sluice.memory_kib("VmRSS");

    // The catalogue's storm: 100 reloads in 10 s under load...
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = load(sluice.addr, 4, stop.clone());
    let started = Instant::now();
    reload_storm(&sluice, &path, &upstream, 100, Duration::from_millis(90)).await;
    let storm = started.elapsed();
    // ...then 400 more back to back, still under load.
    let started = Instant::now();
    reload_storm(&sluice, &path, &upstream, 400, Duration::ZERO).await;
    let burst = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let seen = traffic.await.unwrap();

    let fds_after = settled_fds(pid).await;
    let rss_after = sluice.memory_kib("VmRSS");
    let text = scrape(sluice.admin).await;
    eprintln!(
        "h6: 100 reloads in {storm:?}, 400 in {burst:?}; {} requests; \
         fds {fds_before} → {fds_after}; RSS {rss_before} → {rss_after} KiB",
        seen.len()
    );
    let failed: Vec<&u16> = seen.iter().filter(|s| ![200, 429].contains(*s)).collect();
    assert!(failed.is_empty(), "failed answers: {failed:?}");
    assert!(seen.len() > 500, "only {} requests", seen.len());
    assert!(
        metric(&text, r#"sluice_config_reloads_total{result="ok"}"#).unwrap() >= 510.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, r#"sluice_config_reloads_total{result="error"}"#),
        Some(0.0)
    );
    assert!(
        fds_after <= fds_before + 2,
        "descriptors {fds_before} → {fds_after} over 500 reloads"
    );
    assert!(
        rss_after <= rss_before + 8 * 1024,
        "RSS {rss_before} → {rss_after} KiB over 500 reloads"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h7_a_shadow_rule_counts_exactly_the_rejects_enforcement_would_make() {
    /// Callers a, b, c interleaved: 5, 8 and 12 requests against 4/m.
    async fn traffic(sluice: &support::Sluice) -> Vec<u16> {
        let mut statuses = Vec::new();
        for round in 0..12 {
            for (id, count) in [("a", 5), ("b", 8), ("c", 12)] {
                if round < count {
                    let got = support::get(&sluice.url("/"), &[("x-id", id)]).await;
                    statuses.push(got.status.as_u16());
                }
            }
        }
        statuses
    }
    let rule = |shadow: bool| {
        format!("[[rule]]\nname = \"rollout\"\nkey = [\"header:x-id\"]\nrate = \"4/m\"\nshadow = {shadow}\n")
    };

    let (_upstream, enforced) = start(&rule(false)).await;
    let enforced_statuses = traffic(&enforced).await;
    let rejects = enforced_statuses.iter().filter(|s| **s == 429).count();
    let (shadow_upstream, shadow) = start(&rule(true)).await;
    let shadow_statuses = traffic(&shadow).await;

    assert_eq!(rejects, 1 + 4 + 8);
    assert!(
        shadow_statuses.iter().all(|s| *s == 200),
        "{shadow_statuses:?}"
    );
    assert_eq!(shadow_upstream.count(), 25);
    let would = shadow
        .metric(r#"sluice_requests_total{rule="rollout",outcome="shadow_limited"}"#)
        .await;
    assert_eq!(
        would, rejects as f64,
        "would-limit count = enforced rejects"
    );
    let limited = enforced
        .metric(r#"sluice_requests_total{rule="rollout",outcome="limited"}"#)
        .await;
    assert_eq!(limited, rejects as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h8_metrics_stay_quick_during_a_key_flood_and_slowloris() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        r#"
[server]
listen = "127.0.0.1:0"
upstream = "http://{}"
header_read_timeout = "2s"

[admin]
listen = "127.0.0.1:0"

[store]
max_keys = 2000

[[rule]]
name = "per-key"
key = ["header:x-api-key"]
rate = "10/h"
"#,
        upstream.addr
    );
    let sluice = SluiceProcess::spawn(&write_config(dir.path(), &config));
    let addr = sluice.addr;
    let flood_until = Instant::now() + Duration::from_secs(4);

    // 50 slowloris connections, each a head that never ends.
    let mut slow = Vec::new();
    for _ in 0..50 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        slow.push(stream);
    }
    // Two connections sending new keys, 100 pipelined at a time.
    let flood: Vec<_> = (0..2)
        .map(|connection| {
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(addr).await.unwrap();
                let mut sent = 0usize;
                while Instant::now() < flood_until {
                    let batch: String = (0..100)
                        .map(|i| format!("GET / HTTP/1.1\r\nHost: x\r\nX-Api-Key: k{connection}-{sent}-{i}\r\n\r\n"))
                        .collect();
                    stream.write_all(batch.as_bytes()).await.unwrap();
                    for _ in 0..100 {
                        assert!(read_one(&mut stream).await.is_some());
                    }
                    sent += 100;
                }
                sent
            })
        })
        .collect();

    // Scrape every 100 ms while it runs.
    let mut latencies = Vec::new();
    while Instant::now() < flood_until {
        let started = Instant::now();
        let got = support::get(&sluice.admin_url("/metrics"), &[]).await;
        latencies.push(started.elapsed());
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(
            metric(&got.body, "sluice_store_fallback_active"),
            Some(0.0),
            "a backend-state gauge"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut keys = 0;
    for task in flood {
        keys += task.await.unwrap();
    }
    latencies.sort();
    let worst = *latencies.last().unwrap();
    eprintln!(
        "h8: {} scrapes during {keys} new keys and 50 slowloris connections; median {:?}, worst {worst:?}",
        latencies.len(),
        latencies[latencies.len() / 2]
    );
    assert!(keys > 2_000, "only {keys} keys");
    assert!(latencies.len() >= 20, "only {} scrapes", latencies.len());
    assert!(worst < Duration::from_secs(1), "a scrape took {worst:?}");
    drop(slow);
}
