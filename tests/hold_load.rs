//! Holding under load, against the real binary on loopback (so the resident
//! memory measured is sluice's alone): 10,000 requests in flight at once
//! across 1000 keys, 9000 of them held by a delay-mode rule, over h2c (50
//! connections × 200 streams, two rounds on one process) and over HTTP/1.1
//! (one connection per request, as most held clients do); then 1000 keys
//! queueing for concurrency permits, some callers leaving while queued.
//! Checks that sluice's memory stays bounded, that nothing leaks (queue
//! depth, permits, client connections back to zero, descriptors bounded),
//! that every request is answered exactly once, and that callers within
//! their limits are not slowed down meanwhile. The measurements are printed
//! (`--nocapture`); the file takes about 20 s.
//!
//! Loopback details that matter at this scale:
//! - the test opens its HTTP/1.1 connections in batches and waits until
//!   sluice has accepted them, so that no batch outgrows the listen backlog
//!   (sluice asks for 4096; an overflowing backlog drops SYNs, and each
//!   retransmit costs the client a second);
//! - the upstream listens with a backlog of 4096, because sluice opens
//!   hundreds of upstream connections at once when held requests are
//!   released together;
//! - about 11,000 sockets on each side at the peak, under the 20,000 file
//!   descriptors allowed here; the tests take turns ([`SERIAL`]) so that
//!   two loads never share the test process's descriptors or the 2 cores.

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::{get, metric, write_config, SluiceProcess, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// Callers, each with its own bucket.
const KEYS: usize = 1000;
/// Requests per caller in the delay-mode load, all in flight at once.
const PER_KEY: usize = 10;
/// HTTP/1.1 connections opened before waiting for sluice to accept them
/// (well under its listen backlog).
const CONNECT_BATCH: usize = 500;
/// h2c streams per connection (sluice allows 250).
const STREAMS_PER_CONNECTION: usize = 200;
/// Sequential requests per latency measurement, each a fresh caller.
const PROBES: usize = 100;
/// Nothing here may take longer than this.
const PATIENCE: Duration = Duration::from_secs(30);
/// Idle upstream connections sluice's pool may keep (`proxy::pool`).
const POOL_MAX_IDLE: usize = 1024;

/// The tests of this file take turns: each needs most of the test
/// process's file descriptors and both cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Http1,
    H2c,
}

/// What one exchange came back with.
#[derive(Debug)]
struct Answer {
    /// 0 when there was no answer (see `error`).
    status: u16,
    delay_ms: Option<u64>,
    /// Why there was no answer; "abandoned" when the test hung up on purpose.
    error: Option<String>,
}

fn failed(error: impl Into<String>) -> Answer {
    Answer {
        status: 0,
        delay_ms: None,
        error: Some(error.into()),
    }
}

/// The load's clients, connected before it starts.
enum Clients {
    /// One connection per request.
    Http1(Vec<TcpStream>),
    H2c(Vec<http2::SendRequest<Empty<Bytes>>>),
}

/// Connects enough clients for `n` requests in flight at once.
async fn connect(transport: Transport, sluice: &SluiceProcess, n: usize) -> Clients {
    let addr = sluice.addr;
    match transport {
        Transport::Http1 => {
            let pid = sluice.child.id();
            let before = open_fds(pid);
            let mut streams = Vec::with_capacity(n);
            while streams.len() < n {
                let batch = CONNECT_BATCH.min(n - streams.len());
                let tasks: Vec<_> = (0..batch)
                    .map(|_| tokio::spawn(TcpStream::connect(addr)))
                    .collect();
                for task in tasks {
                    let stream = task
                        .await
                        .unwrap()
                        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
                    stream.set_nodelay(true).unwrap();
                    streams.push(stream);
                }
                let opened = streams.len();
                // Transient sockets (an admin scrape closing) may be counted
                // in `before`: a few still in the backlog are harmless.
                wait_until("sluice accepted the connections", || {
                    open_fds(pid) + 8 >= before + opened
                })
                .await;
            }
            Clients::Http1(streams)
        }
        Transport::H2c => {
            let mut senders = Vec::new();
            for _ in 0..n.div_ceil(STREAMS_PER_CONNECTION) {
                let stream = TcpStream::connect(addr).await.expect("connect");
                stream.set_nodelay(true).unwrap();
                let (sender, connection) = http2::Builder::new(TokioExecutor::new())
                    .initial_max_send_streams(STREAMS_PER_CONNECTION)
                    .handshake(TokioIo::new(stream))
                    .await
                    .expect("h2c handshake");
                tokio::spawn(connection);
                senders.push(sender);
            }
            Clients::H2c(senders)
        }
    }
}

/// `GET path` as caller `key` on its own connection, asking sluice to close
/// it after the answer, which is read whole. Hangs up instead when `abandon`
/// turns true first.
async fn exchange_http1(
    mut stream: TcpStream,
    path: String,
    key: String,
    written: Arc<AtomicUsize>,
    abandon: Option<watch::Receiver<bool>>,
) -> Answer {
    let request =
        format!("GET {path} HTTP/1.1\r\nhost: sluice\r\nx-key: {key}\r\nconnection: close\r\n\r\n");
    if let Err(e) = stream.write_all(request.as_bytes()).await {
        return failed(format!("write: {e}"));
    }
    written.fetch_add(1, Ordering::SeqCst);
    let mut answer = Vec::with_capacity(1024);
    let read = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answer));
    let outcome = match abandon {
        None => read.await,
        Some(mut abandon) => tokio::select! {
            outcome = read => outcome,
            _ = abandon.wait_for(|go| *go) => return failed("abandoned"),
        },
    };
    match outcome {
        Err(_) => return failed("no answer in time"),
        Ok(Err(e)) => return failed(format!("read: {e}")),
        Ok(Ok(_)) => {}
    }
    let text = String::from_utf8_lossy(&answer);
    let Some((head, _body)) = text.split_once("\r\n\r\n") else {
        return failed(format!("incomplete answer: {text:?}"));
    };
    let status = head
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let delay_ms = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("x-sluice-delay-ms")
            .then(|| value.trim().parse().ok())?
    });
    Answer {
        status,
        delay_ms,
        error: None,
    }
}

/// `GET url` as caller `key` on a stream of a shared h2c connection.
async fn exchange_h2(
    mut sender: http2::SendRequest<Empty<Bytes>>,
    url: String,
    key: String,
    written: Arc<AtomicUsize>,
    abandon: Option<watch::Receiver<bool>>,
) -> Answer {
    let request = Request::get(url)
        .header("x-key", key)
        .body(Empty::new())
        .unwrap();
    if let Err(e) = sender.ready().await {
        return failed(format!("h2c connection: {e}"));
    }
    let response = sender.send_request(request);
    written.fetch_add(1, Ordering::SeqCst);
    let exchange = async {
        let response = response.await.map_err(|e| format!("h2c: {e}"))?;
        let status = response.status().as_u16();
        let delay_ms = response
            .headers()
            .get("x-sluice-delay-ms")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("h2c body: {e}"))?;
        Ok::<_, String>(Answer {
            status,
            delay_ms,
            error: None,
        })
    };
    let exchange = tokio::time::timeout(PATIENCE, exchange);
    let outcome = match abandon {
        None => exchange.await,
        Some(mut abandon) => tokio::select! {
            outcome = exchange => outcome,
            _ = abandon.wait_for(|go| *go) => return failed("abandoned"),
        },
    };
    match outcome {
        Err(_) => failed("no answer in time"),
        Ok(Err(e)) => failed(e),
        Ok(Ok(answer)) => answer,
    }
}

/// Starts one exchange per key, in order, without waiting for answers;
/// `written` counts the requests sent. `abandon(index)` may give a request
/// a signal to hang up on.
fn fire(
    clients: Clients,
    addr: SocketAddr,
    path: &str,
    keys: Vec<String>,
    written: &Arc<AtomicUsize>,
    abandon: impl Fn(usize) -> Option<watch::Receiver<bool>>,
) -> Vec<tokio::task::JoinHandle<Answer>> {
    match clients {
        Clients::Http1(streams) => {
            assert_eq!(streams.len(), keys.len());
            streams
                .into_iter()
                .zip(keys)
                .enumerate()
                .map(|(index, (stream, key))| {
                    tokio::spawn(exchange_http1(
                        stream,
                        path.to_owned(),
                        key,
                        written.clone(),
                        abandon(index),
                    ))
                })
                .collect()
        }
        Clients::H2c(senders) => keys
            .into_iter()
            .enumerate()
            .map(|(index, key)| {
                tokio::spawn(exchange_h2(
                    senders[index % senders.len()].clone(),
                    format!("http://{addr}{path}"),
                    key,
                    written.clone(),
                    abandon(index),
                ))
            })
            .collect(),
    }
}

async fn answers(tasks: Vec<tokio::task::JoinHandle<Answer>>) -> Vec<Answer> {
    let mut answers = Vec::with_capacity(tasks.len());
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

/// Polls until `done` holds; panics after `PATIENCE`.
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Polls `series` until it equals `value`; panics after `PATIENCE`.
async fn wait_for_gauge(sluice: &SluiceProcess, series: &str, value: f64) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let now = gauge(sluice, series).await;
        if now == value {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{series} stuck at {now}, expected {value}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The binary with `rule`, two workers and room for the load's
/// connections, in front of `upstream`.
fn spawn(dir: &std::path::Path, upstream: &Upstream, rule: &str) -> SluiceProcess {
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
upstream = "http://{}"
workers = 2
max_connections = 12000

[admin]
listen = "127.0.0.1:0"

{rule}
"#,
        upstream.addr
    );
    SluiceProcess::spawn(&write_config(dir, &toml))
}

async fn scrape(sluice: &SluiceProcess) -> String {
    get(&sluice.admin_url("/metrics"), &[]).await.body
}

async fn gauge(sluice: &SluiceProcess, series: &str) -> f64 {
    let text = scrape(sluice).await;
    metric(&text, series).unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
}

/// Open file descriptors of a process, sockets included.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Panics with advice unless this process (and so sluice, which inherits
/// it) may open `needed` file descriptors.
fn require_open_files(needed: u64) {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let soft = limits
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    assert!(
        soft >= needed,
        "this load needs {needed} file descriptors per process and the limit is {soft}: \
         raise it (ulimit -n 20000) before running the tests"
    );
}

/// Connections to sluice's proxy listener that sluice still holds open
/// (established, or closed by the client and not yet by sluice), from the
/// host's socket table: only sluice has sockets on its listening port.
fn client_connections(sluice: &SluiceProcess) -> usize {
    let port = format!(":{:04X}", sluice.addr.port());
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local address, remote address, state: 01 established, 08 close-wait.
            fields.len() > 3 && fields[1].ends_with(&port) && matches!(fields[3], "01" | "08")
        })
        .count()
}

/// Waits until sluice holds no client connection; panics after `PATIENCE`.
async fn wait_until_no_client_connections(sluice: &SluiceProcess) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let open = client_connections(sluice);
        if open == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "sluice still holds {open} client connections"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn mibs(kib: impl Iterator<Item = u64>) -> String {
    kib.map(|kib| format!("{:.1}", mib(kib)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The host's count of connections dropped because a listen backlog was
/// full: printed, so that a slow run can be told apart from SYN retransmits.
fn listen_overflows() -> u64 {
    let text = std::fs::read_to_string("/proc/net/netstat").unwrap_or_default();
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "ListenOverflows")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0)
}

/// Latency percentiles of one measurement.
#[derive(Debug, Clone, Copy)]
struct Latency {
    p50: Duration,
    p99: Duration,
    max: Duration,
}

/// `PROBES` sequential requests 10 ms apart, each a fresh caller within its
/// budget (so never held) on a fresh connection.
async fn probe(sluice: &SluiceProcess, label: &str) -> Latency {
    let mut took = Vec::with_capacity(PROBES);
    for i in 0..PROBES {
        let key = format!("probe-{label}-{i}");
        let sent = Instant::now();
        let got = get(&sluice.url("/probe"), &[("x-key", &key)]).await;
        took.push(sent.elapsed());
        assert_eq!(got.status, StatusCode::OK, "{got:?}");
        assert_eq!(got.header("x-sluice-delay-ms"), None, "a probe was held");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    took.sort();
    Latency {
        p50: took[PROBES / 2],
        p99: took[(PROBES * 99).div_ceil(100) - 1],
        max: took[PROBES - 1],
    }
}

/// One sample taken while a load is on.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Duration,
    depth: f64,
}

/// Samples `series` every 50 ms until `stop`.
fn sample(
    sluice: &SluiceProcess,
    series: &'static str,
    started: Instant,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<Vec<Sample>> {
    let metrics_url = sluice.admin_url("/metrics");
    tokio::spawn(async move {
        let mut samples = Vec::new();
        while !*stop.borrow() {
            let text = get(&metrics_url, &[]).await.body;
            samples.push(Sample {
                at: started.elapsed(),
                depth: metric(&text, series).unwrap(),
            });
            tokio::select! {
                _ = stop.changed() => {}
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        samples
    })
}

/// Each caller's budget: one request now, then one every 500 ms, so a
/// caller's 10 simultaneous requests pass over 4.5 s, 9 of them held.
const HELD_RULE: &str = r#"
[[rule]]
name = "held"
key = ["header:x-key"]
rate = "2/s"
burst = 1
on_limit = "delay"
max_delay = "20s"
max_queue = 10
"#;
/// Requests sent to warm sluice up before the baseline, each a fresh caller.
const WARM_UP: usize = 20;

/// A caller within its limits, under the load. The shortest hold is 500 ms:
/// a caller stuck behind held requests (a blocked worker, a lock held across
/// the hold) would take at least that, while CPU contention on 2 shared
/// cores costs tens of milliseconds.
const MAX_LOADED_P99: Duration = Duration::from_millis(250);
/// The typical request under the load, relative to the same without it.
const MAX_P50_RATIO: f64 = 20.0;
/// How much higher a round may push sluice's peak memory than the round
/// before (h2c): the allocator reuses what the first round freed, so a leak
/// of ~2 KiB per request (a task, a request, a timer: 17.6 MiB over the
/// 9,000 held, on top of the usual growth) would show. The usual growth,
/// measured 2026-11-25 on one machine: +4.7 and +8.1 MiB before the
/// upstream pools (41b51ef), +8.3 to +11.6 MiB after (each request's future
/// carries the pool's attempt), and once +16.8 MiB in a CI run; the bound
/// was 16 MiB before them.
const MAX_NEXT_ROUND_GROWTH_MIB: f64 = 20.0;

/// What one round of the delay-mode load measured.
struct Round {
    /// Highest queue depth sampled, and when (from the first request).
    peak_depth: f64,
    peak_at: Duration,
    /// Requests answered with `X-Sluice-Delay-Ms`, and the longest hold.
    held: usize,
    longest_hold_ms: u64,
    latency: Latency,
    /// Sluice's resident memory once the load was in, and its peak so far.
    rss_held_kib: u64,
    hwm_kib: u64,
}

/// 10,000 requests for 1000 callers at once into a delay-mode rule, and a
/// fresh caller's latency meanwhile; checks that every request got its 200
/// exactly once and that the queue emptied.
async fn held_round(
    transport: Transport,
    sluice: &SluiceProcess,
    upstream: &Upstream,
    round: usize,
) -> Round {
    let depth = r#"sluice_queue_depth{rule="held"}"#;
    let total = KEYS * PER_KEY;
    let seen_before = upstream.count();
    let connect_started = Instant::now();
    let clients = connect(transport, sluice, total).await;
    let connect_took = connect_started.elapsed();
    let rss_connected = sluice.memory_kib("VmRSS");

    // Every caller's first request, then every caller's second, ...
    let (stop, stopped) = watch::channel(false);
    let load_started = Instant::now();
    let sampler = sample(sluice, depth, load_started, stopped);
    let written = Arc::new(AtomicUsize::new(0));
    let keys = (0..total)
        .map(|i| format!("r{round}-k{}", i % KEYS))
        .collect();
    let tasks = fire(clients, sluice.addr, "/held", keys, &written, |_| None);
    wait_until("every request is written", || {
        written.load(Ordering::SeqCst) == total
    })
    .await;
    let written_at = load_started.elapsed();
    // Once sluice has taken most of them in, measure a caller within its
    // limits while the held ones are being released, 2000 a second.
    let deadline = Instant::now() + Duration::from_secs(5);
    while gauge(sluice, depth).await < (total - KEYS) as f64 * 0.8 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rss_held_kib = sluice.memory_kib("VmRSS");
    let probes_started = load_started.elapsed();
    let latency = probe(sluice, &format!("load-{round}")).await;
    let probes_ended = load_started.elapsed();

    let answers = answers(tasks).await;
    let answered_at = load_started.elapsed();
    stop.send(true).unwrap();
    let samples = sampler.await.unwrap();
    let hwm_kib = sluice.memory_kib("VmHWM");

    // Every request answered 200: none would have waited past max_delay
    // (4.5 s < 20 s) and no caller had more than max_queue waiting.
    let failures: Vec<&Answer> = answers.iter().filter(|a| a.status != 200).collect();
    assert!(
        failures.is_empty(),
        "{} of {total} not answered 200, e.g. {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    // Each 200 reached the upstream exactly once, and nothing else did.
    assert_eq!(upstream.count() - seen_before, total + PROBES);
    assert_eq!(
        gauge(sluice, depth).await,
        0.0,
        "queue depth after the load"
    );

    let peak = samples
        .iter()
        .max_by(|a, b| a.depth.total_cmp(&b.depth))
        .unwrap();
    let round = Round {
        peak_depth: peak.depth,
        peak_at: peak.at,
        held: answers.iter().filter(|a| a.delay_ms.is_some()).count(),
        longest_hold_ms: answers.iter().filter_map(|a| a.delay_ms).max().unwrap_or(0),
        latency,
        rss_held_kib,
        hwm_kib,
    };
    println!(
        "round {}: connected in {connect_took:?} (sluice RSS {:.1} MiB); from the first request: \
         all written at {written_at:?}, probes {probes_started:?}..{probes_ended:?}, all \
         answered at {answered_at:?}",
        round_label(transport),
        mib(rss_connected)
    );
    println!(
        "  held {} (longest {} ms); queue depth peak {} at {:?}; sluice RSS held {:.1} MiB, \
         VmHWM {:.1} MiB",
        round.held,
        round.longest_hold_ms,
        round.peak_depth,
        round.peak_at,
        mib(round.rss_held_kib),
        mib(round.hwm_kib)
    );
    round
}

fn round_label(transport: Transport) -> &'static str {
    match transport {
        Transport::Http1 => "HTTP/1.1",
        Transport::H2c => "h2c",
    }
}

/// `rounds` rounds of [`held_round`] on one sluice, then checks that nothing
/// was left behind. `max_growth_mib` bounds sluice's peak resident memory
/// over its warmed-up baseline; with two rounds, the second must fit in
/// about the memory the first one left (the allocator reuses it), so that
/// a leak per request shows.
async fn held_load(transport: Transport, rounds: usize, max_growth_mib: f64) {
    let _turn = SERIAL.lock().await;
    // Each side: the clients' sockets, and up to ~1000 to the upstream.
    require_open_files(match transport {
        Transport::Http1 => 12_000,
        Transport::H2c => 2_000,
    });
    let test_started = Instant::now();
    let overflows_before = listen_overflows();
    let upstream = Upstream::start_with_backlog(4096).await;
    let dir = tempfile::tempdir().unwrap();
    let sluice = spawn(dir.path(), &upstream, HELD_RULE);
    let pid = sluice.child.id();
    let total = KEYS * PER_KEY;

    // Warm up (upstream connections, allocator arenas), then the baseline:
    // memory, descriptors, and latency without load.
    for i in 0..WARM_UP {
        let got = get(&sluice.url("/warm"), &[("x-key", &format!("warm-{i}"))]).await;
        assert_eq!(got.status, StatusCode::OK);
    }
    let idle = probe(&sluice, "idle").await;
    let rss_before = sluice.memory_kib("VmRSS");
    let fds_before = open_fds(pid);

    let mut done = Vec::new();
    let mut rss_after_rounds = Vec::new();
    for round in 0..rounds {
        done.push(held_round(transport, &sluice, &upstream, round).await);
        // Sluice closed every client connection after its answer (and the
        // next round's connection pacing counts on it).
        wait_until_no_client_connections(&sluice).await;
        rss_after_rounds.push(sluice.memory_kib("VmRSS"));
    }

    // Nothing left behind.
    let text = scrape(&sluice).await;
    let recorded = metric(&text, r#"sluice_delay_seconds_count{rule="held"}"#).unwrap();
    assert_eq!(
        recorded as usize,
        done.iter().map(|round| round.held).sum::<usize>(),
        "every hold is recorded once, and every held response says so"
    );
    let outcome = |outcome: &str| {
        let series = format!(r#"sluice_requests_total{{rule="held",outcome="{outcome}"}}"#);
        metric(&text, &series).unwrap_or(0.0) as usize
    };
    // Held then admitted counts `delayed`; passed at once, `allowed`.
    let held: usize = done.iter().map(|round| round.held).sum();
    assert_eq!(outcome("delayed"), held);
    assert_eq!(
        outcome("allowed") + outcome("delayed"),
        WARM_UP + (1 + rounds) * PROBES + rounds * total
    );
    assert_eq!(outcome("limited"), 0);
    let tracked = metric(&text, r#"sluice_tracked_keys{rule="held"}"#).unwrap();
    assert_eq!(
        tracked as usize,
        WARM_UP + (1 + rounds) * PROBES + rounds * KEYS,
        "one bucket per caller"
    );
    // What may remain open is the upstream pool's idle connections.
    let fds_after = open_fds(pid);
    let fds_bound = fds_before + POOL_MAX_IDLE + 8;

    let hwm = |round: &Round| round.hwm_kib;
    let growth_kib = done
        .iter()
        .map(hwm)
        .max()
        .unwrap()
        .saturating_sub(rss_before);
    let first_growth_kib = hwm(&done[0]).saturating_sub(rss_before);
    println!(
        "{} summary: sluice RSS before {:.1} MiB; per round: held [{}] MiB, peak (VmHWM) [{}] \
         MiB, after [{}] MiB; growth +{:.1} MiB ({:.1} KiB per request in flight); descriptors \
         before {fds_before}, after {fds_after}; listen overflows on the host {}",
        round_label(transport),
        mib(rss_before),
        mibs(done.iter().map(|r| r.rss_held_kib)),
        mibs(done.iter().map(hwm)),
        mibs(rss_after_rounds.iter().copied()),
        mib(growth_kib),
        first_growth_kib as f64 / total as f64,
        listen_overflows() - overflows_before
    );
    println!(
        "  a fresh caller's latency p50 / p99 / max: idle {:?} / {:?} / {:?}",
        idle.p50, idle.p99, idle.max
    );
    for (round, Round { latency, .. }) in done.iter().enumerate() {
        println!(
            "  under load (round {round}): {:?} / {:?} / {:?}",
            latency.p50, latency.p99, latency.max
        );
    }

    // On a quiet machine the peak is ~9,000 (docs/benchmarks-history.md); on a shared
    // one the ramp-up of 10,000 requests from this same process stretches
    // over more of the 4.5 s hold and the peak falls (3,000–4,000 measured
    // at a load average of 3, the same for the commit that first set 5,000;
    // on 2026-11-23 the debug binary read the requests slowly enough that
    // peaks of 1,686–3,681 and 6,438–8,685 held of 9,000 were measured, at
    // 3f7f174 and after the 429-path changes alike). What these two checks
    // ask is that the load really built up: over a thousand held at once is
    // what makes the memory and leak checks below meaningful, and those do
    // not depend on the exact peak (the memory bound is an upper one).
    for round in &done {
        assert!(
            round.peak_depth >= 1200.0,
            "at most {} requests were held at once: the load did not build up",
            round.peak_depth
        );
        // Of the requests that cannot pass at once (all but each key's
        // first), most are held; how many exactly depends on how fast this
        // process writes them (slots free up while a slow ramp goes on:
        // 8,498 of the 9,000 on a shared machine, where 8,500 was asked).
        assert!(
            round.held >= (total - KEYS) * 2 / 3,
            "only {} of {total} requests were held",
            round.held
        );
        assert!(
            round.latency.p99 < MAX_LOADED_P99,
            "p99 of a caller within its limits rose to {:?} under load (idle {:?})",
            round.latency.p99,
            idle.p99
        );
        let ratio = round.latency.p50.as_secs_f64() / idle.p50.as_secs_f64();
        assert!(
            ratio < MAX_P50_RATIO,
            "p50 of a caller within its limits rose {ratio:.1}× under load ({:?} → {:?})",
            idle.p50,
            round.latency.p50
        );
    }
    assert!(
        mib(growth_kib) < max_growth_mib,
        "sluice grew by {:.1} MiB for {total} requests in flight",
        mib(growth_kib)
    );
    for pair in done.windows(2) {
        let more = mib(hwm(&pair[1]).saturating_sub(hwm(&pair[0])));
        assert!(
            more < MAX_NEXT_ROUND_GROWTH_MIB,
            "a round grew sluice by {more:.1} MiB more than the one before"
        );
    }
    assert!(
        fds_after <= fds_bound,
        "sluice has {fds_after} descriptors open after the load (before: {fds_before})"
    );
    println!("took {:?}", test_started.elapsed());
}

/// Measured (debug build): +55 to +60 MiB for the first round (≈ 6 KiB per
/// request in flight), +4.5 to +8 MiB more for the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_held_h2c_streams_stay_bounded_and_leak_nothing() {
    held_load(Transport::H2c, 2, 100.0).await;
}

/// Measured (debug build): +206 to +210 MiB: ≈ 4 KiB per idle connection,
/// ≈ 20 KiB per connection with a held request (hyper's 8 KiB read buffer, which the
/// request's headers point into, and its write buffer among it). A second
/// round on the same process would push the peak up by another ≈ 60 MiB of
/// allocator fragmentation (converging over further rounds: +27, +10, +4,
/// +4, +2, +3 MiB), so this transport runs one round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_held_http1_connections_stay_bounded_and_leak_nothing() {
    held_load(Transport::Http1, 1, 300.0).await;
}

/// Callers of the concurrency load.
const PERMIT_KEYS: usize = 1000;
/// Callers whose last queued request hangs up while queued.
const LEAVING: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_keys_queueing_for_permits_get_every_permit_back() {
    let _turn = SERIAL.lock().await;
    require_open_files(7_000);
    let test_started = Instant::now();
    let upstream = Upstream::start_with_backlog(4096).await;
    let dir = tempfile::tempdir().unwrap();
    let sluice = spawn(
        dir.path(),
        &upstream,
        r#"
[[rule]]
name = "permits"
algorithm = "concurrency"
key = ["header:x-key"]
max_in_flight = 2
on_limit = "delay"
max_delay = "10s"
max_queue = 10
"#,
    );
    let pid = sluice.child.id();
    let depth = r#"sluice_queue_depth{rule="permits"}"#;
    let tracked = r#"sluice_tracked_keys{rule="permits"}"#;
    let got = get(&sluice.url("/warm"), &[("x-key", "warm")]).await;
    assert_eq!(got.status, StatusCode::OK);
    wait_for_gauge(&sluice, tracked, 0.0).await;
    let rss_before = sluice.memory_kib("VmRSS");
    let fds_before = open_fds(pid);
    let keys = || (0..2 * PERMIT_KEYS).map(|i| format!("c{}", i % PERMIT_KEYS));
    let written = Arc::new(AtomicUsize::new(0));

    // Two slow requests per caller take both its permits...
    let clients = connect(Transport::Http1, &sluice, 2 * PERMIT_KEYS).await;
    let first = fire(
        clients,
        sluice.addr,
        "/slow/3000",
        keys().collect(),
        &written,
        |_| None,
    );
    wait_until("the first two of each caller reach the upstream", || {
        upstream.count() == 1 + 2 * PERMIT_KEYS
    })
    .await;
    assert_eq!(gauge(&sluice, tracked).await, PERMIT_KEYS as f64);
    assert_eq!(gauge(&sluice, depth).await, 0.0);

    // ...two more queue for them, and some callers give up their last one.
    let clients = connect(Transport::Http1, &sluice, 2 * PERMIT_KEYS).await;
    let (leave, leaving) = watch::channel(false);
    let second = fire(
        clients,
        sluice.addr,
        "/slow/100",
        keys().collect(),
        &written,
        |index| (index >= 2 * PERMIT_KEYS - LEAVING).then(|| leaving.clone()),
    );
    wait_for_gauge(&sluice, depth, (2 * PERMIT_KEYS) as f64).await;
    let queued_at = test_started.elapsed();
    let rss_queued = sluice.memory_kib("VmRSS");
    leave.send(true).unwrap();
    wait_for_gauge(&sluice, depth, (2 * PERMIT_KEYS - LEAVING) as f64).await;
    assert_eq!(upstream.count(), 1 + 2 * PERMIT_KEYS, "nobody overtook");

    let first = answers(first).await;
    let second = answers(second).await;
    let hwm = sluice.memory_kib("VmHWM");
    for answer in &first {
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(answer.delay_ms, None, "{answer:?}");
    }
    let (served, left) = second.split_at(2 * PERMIT_KEYS - LEAVING);
    for answer in served {
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(answer.delay_ms.is_some(), "queued, so held: {answer:?}");
    }
    for answer in left {
        assert_eq!(answer.error.as_deref(), Some("abandoned"), "{answer:?}");
    }

    // Every permit came back, nobody is queued, the leavers never reached
    // the upstream, and every connection closed.
    wait_for_gauge(&sluice, tracked, 0.0).await;
    assert_eq!(gauge(&sluice, depth).await, 0.0);
    assert_eq!(upstream.count(), 1 + 4 * PERMIT_KEYS - LEAVING);
    // Served at once counts `allowed`; served after queueing, `delayed`.
    let allowed = r#"sluice_requests_total{rule="permits",outcome="allowed"}"#;
    let delayed = r#"sluice_requests_total{rule="permits",outcome="delayed"}"#;
    let delayed = gauge(&sluice, delayed).await as usize;
    assert_eq!(delayed, served.len());
    assert_eq!(
        gauge(&sluice, allowed).await as usize + delayed,
        1 + 4 * PERMIT_KEYS - LEAVING
    );
    wait_until_no_client_connections(&sluice).await;
    let fds_bound = fds_before + POOL_MAX_IDLE + 8;
    let fds_after = open_fds(pid);
    assert!(
        fds_after <= fds_bound,
        "sluice has {fds_after} descriptors open after the load (before: {fds_before})"
    );
    let growth_kib = hwm.saturating_sub(rss_before);
    println!(
        "--- {} requests for {PERMIT_KEYS} callers, 2 permits each, {LEAVING} leaving while queued",
        4 * PERMIT_KEYS
    );
    println!(
        "all queued at {queued_at:?}; sluice RSS before {:.1} MiB, with 2000 in flight and 2000 \
         queued {:.1} MiB, VmHWM {:.1} MiB (+{:.1} MiB); descriptors before {fds_before}, after \
         {fds_after}; took {:?}",
        mib(rss_before),
        mib(rss_queued),
        mib(hwm),
        mib(growth_kib),
        test_started.elapsed()
    );
    // Measured ≈ 118 MiB: 4000 client and 2000 upstream connections.
    assert!(
        mib(growth_kib) < 200.0,
        "sluice grew by {:.1} MiB",
        mib(growth_kib)
    );
}
