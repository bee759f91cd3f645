//! `server.shutdown_delay` on the real binary (docs/operations.md,
//! "Shutting down"): after SIGTERM `/readyz` is 503 at once while sluice
//! keeps accepting and serving for the delay, telling kept-alive clients to
//! reconnect (HTTP/1 `Connection: close`, HTTP/2 GOAWAY); a second SIGTERM
//! ends the wait; without a delay it stops accepting at once. Last, the
//! reason for it: a rolling update behind a balancer that notices the 503
//! late fails no request.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::balancer::Balancer;
use support::{eventually, get, write_config, SluiceProcess, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The real binary in front of `upstream`, with `shutdown_delay = delay`.
fn spawn(dir: &std::path::Path, upstream: &Upstream, delay: &str) -> SluiceProcess {
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
upstream = "http://{}"
workers = 1
shutdown_delay = "{delay}"
shutdown_grace = "5s"

[admin]
listen = "127.0.0.1:0"

[[rule]]
name = "per-ip"
rate = "100000/s"
"#,
        upstream.addr
    );
    SluiceProcess::spawn(&write_config(dir, &toml))
}

/// Waits (polling) until `/readyz` answers 503.
async fn until_unready(sluice: &SluiceProcess) {
    let url = sluice.admin_url("/readyz");
    eventually(
        Duration::from_secs(2),
        "/readyz did not turn 503",
        || async { get(&url, &[]).await.status == StatusCode::SERVICE_UNAVAILABLE },
    )
    .await;
}

/// How often [`exit_within`] looks for the exit: a poll interval, not a wait.
const EXIT_POLL: Duration = Duration::from_millis(20);

/// Waits up to `limit` for the process to exit, polling from the runtime.
async fn exit_within(
    sluice: &mut SluiceProcess,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = sluice.child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(EXIT_POLL).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_turns_readyz_503_and_keeps_serving_new_connections_for_the_delay() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let delay = Duration::from_secs(2);
    let mut sluice = spawn(dir.path(), &upstream, "2s");
    // Open before the signal: a kept-alive HTTP/1 connection and an HTTP/2
    // one, each answered once.
    let mut kept = tokio::net::TcpStream::connect(sluice.addr).await.unwrap();
    assert!(support::exchange(&mut kept)
        .await
        .starts_with("http/1.1 200"));
    let h2 = tokio::net::TcpStream::connect(sluice.addr).await.unwrap();
    let (mut h2_sender, h2_connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(h2))
            .await
            .unwrap();
    let h2_ended = tokio::spawn(h2_connection);
    let request = http::Request::get(sluice.url("/a"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let answered = h2_sender.send_request(request).await.unwrap();
    assert_eq!(answered.status(), StatusCode::OK);
    answered.into_body().collect().await.unwrap();

    let signalled = Instant::now();
    sluice.terminate();
    until_unready(&sluice).await;
    let healthz = get(&sluice.admin_url("/healthz"), &[]).await;
    assert_eq!(healthz.status, StatusCode::OK, "alive while draining");

    // The HTTP/2 connection is sent GOAWAY and ends, with nothing in flight.
    tokio::time::timeout(Duration::from_secs(5), h2_ended)
        .await
        .expect("the HTTP/2 connection was not sent GOAWAY")
        .unwrap()
        .expect("a clean end");
    // The kept-alive HTTP/1 connection's next answer says it is its last.
    let head = support::exchange(&mut kept).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    let mut rest = Vec::new();
    assert_eq!(kept.read_to_end(&mut rest).await.unwrap_or(0), 0);

    // A new connection is accepted and proxied, now and a second in.
    let seen = upstream.count();
    let fresh = get(&sluice.url("/fresh"), &[]).await;
    assert_eq!(fresh.status, StatusCode::OK);
    assert_eq!(fresh.header("connection"), Some("close"));
    assert_eq!(upstream.count(), seen + 1);
    tokio::time::sleep_until((signalled + Duration::from_secs(1)).into()).await;
    assert!(
        sluice.child.try_wait().unwrap().is_none(),
        "exited within a second of SIGTERM, before its 2 s delay"
    );
    assert_eq!(get(&sluice.url("/later"), &[]).await.status, StatusCode::OK);

    let status = exit_within(&mut sluice, Duration::from_secs(10))
        .await
        .expect("still running 10 s after SIGTERM");
    assert!(status.success(), "exit status {status}");
    assert!(
        signalled.elapsed() >= delay,
        "exited {:?} after SIGTERM, before its delay",
        signalled.elapsed()
    );
    assert_eq!(sluice.logged("serving for 2s").len(), 1, "{:?}", sluice.log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_ends_the_delay() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut sluice = spawn(dir.path(), &upstream, "30s");
    sluice.terminate();
    // The first was handled (signals that come together may count as one).
    until_unready(&sluice).await;
    assert_eq!(get(&sluice.url("/a"), &[]).await.status, StatusCode::OK);

    sluice.terminate();
    let status = exit_within(&mut sluice, Duration::from_secs(5))
        .await
        .expect("still running 5 s after a second SIGTERM, in a 30 s delay");
    assert!(status.success(), "exit status {status}");
    assert_eq!(
        sluice.logged("not waiting out").len(),
        1,
        "{:?}",
        sluice.log
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_delay_sigterm_exits_without_waiting() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut sluice = spawn(dir.path(), &upstream, "0s");
    sluice.terminate();
    let status = exit_within(&mut sluice, Duration::from_secs(5))
        .await
        .expect("still running 5 s after SIGTERM");
    assert!(status.success(), "exit status {status}");
    assert!(sluice.logged("serving for").is_empty(), "{:?}", sluice.log);
}

/// What the clients of [`rolling_update`] saw, as they go.
#[derive(Debug, Default)]
struct Load {
    /// Requests answered 2xx before the SIGTERM, and after it.
    before: AtomicU64,
    after: AtomicU64,
    /// Every other outcome: a refused or reset connection, a 5xx.
    failures: Mutex<Vec<String>>,
}

/// How [`rolling_update`] went.
#[derive(Debug)]
struct Rollout {
    before: u64,
    after: u64,
    failures: Vec<String>,
    /// Connections the balancer relayed to the leaving instance after its
    /// SIGTERM.
    relayed_after_sigterm: u64,
    /// Whether the balancer had taken it out of rotation when it exited.
    out_before_exit: bool,
    /// When what happened, what the balancer saw go wrong, the leaving
    /// instance's log: for failure messages.
    story: String,
}

/// What each rolling-update client waits between its answer and its next
/// request: hundreds of requests a second through each instance, a few
/// hundred in the balancer's 300 ms of lag.
const THINK: Duration = Duration::from_millis(2);

/// One request through the balancer at `addr`: on `kept_alive`'s
/// connections, or (`None`) on a fresh connection of its own that the
/// client closes after the answer.
async fn one_request(
    addr: std::net::SocketAddr,
    kept_alive: Option<&Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>>,
) -> Result<StatusCode, String> {
    let Some(client) = kept_alive else {
        let mut conn = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        conn.write_all(b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut answer = Vec::new();
        conn.read_to_end(&mut answer)
            .await
            .map_err(|e| format!("read: {e}"))?;
        let answer = String::from_utf8_lossy(&answer);
        return match answer.get(9..12).and_then(|code| code.parse::<u16>().ok()) {
            Some(code) if answer.starts_with("HTTP/1.1 ") => {
                Ok(StatusCode::from_u16(code).unwrap())
            }
            _ => Err(format!("no answer: {answer:?}")),
        };
    };
    let uri = format!("http://{addr}/a").parse().unwrap();
    let response = client.get(uri).await.map_err(|e| format!("{e:?}"))?;
    let status = response.status();
    response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(status)
}

/// Two instances behind a [`Balancer`] that takes one out of rotation
/// 200 ms after its `/readyz` says 503 (polled every 100 ms). Four clients
/// send requests back to back through it, two on kept-alive connections
/// and two on a fresh connection each; once both instances have served,
/// the first gets SIGTERM, and the load goes on until it has exited and
/// the other has served 200 requests more.
async fn rolling_update(delay: &str) -> Rollout {
    let upstream = Upstream::start().await;
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut leaving = spawn(dirs[0].path(), &upstream, delay);
    let staying = spawn(dirs[1].path(), &upstream, delay);
    let balancer = Balancer::start(
        &[(leaving.addr, leaving.admin), (staying.addr, staying.admin)],
        Duration::from_millis(100),
        Duration::from_millis(200),
    )
    .await;
    let load = Arc::new(Load::default());
    let started = Instant::now();
    let terminated = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let addr = balancer.addr;
    let clients: Vec<_> = (0..4)
        .map(|client| {
            let (load, terminated, stop) = (
                Arc::clone(&load),
                Arc::clone(&terminated),
                Arc::clone(&stop),
            );
            tokio::spawn(async move {
                let kept_alive =
                    (client % 2 == 0).then(|| Client::builder(TokioExecutor::new()).build_http());
                while !stop.load(Ordering::SeqCst) {
                    let after = terminated.load(Ordering::SeqCst);
                    let answered = tokio::time::timeout(
                        Duration::from_secs(5),
                        one_request(addr, kept_alive.as_ref()),
                    )
                    .await;
                    match answered {
                        Ok(Ok(status)) if status.is_success() => {
                            let count = if after { &load.after } else { &load.before };
                            count.fetch_add(1, Ordering::SeqCst);
                        }
                        other => load.failures.lock().unwrap().push(format!(
                            "client {client} ({}) at {:?}: {other:?}",
                            if kept_alive.is_some() {
                                "kept alive"
                            } else {
                                "fresh"
                            },
                            started.elapsed()
                        )),
                    }
                    // Still closed-loop, but not flat out: the suite's
                    // other tests share these two cores.
                    tokio::time::sleep(THINK).await;
                }
            })
        })
        .collect();

    eventually(Duration::from_secs(10), "no load through both", || async {
        load.before.load(Ordering::SeqCst) >= 100
            && balancer.relayed(0) > 0
            && balancer.relayed(1) > 0
    })
    .await;
    terminated.store(true, Ordering::SeqCst);
    let relayed = balancer.relayed(0);
    let signalled = started.elapsed();
    leaving.terminate();
    let status = exit_within(&mut leaving, Duration::from_secs(10))
        .await
        .expect("the instance did not exit within 10 s of SIGTERM");
    assert!(status.success(), "exit status {status}");
    let exited = started.elapsed();
    let out_before_exit = !balancer.in_rotation(0);
    let relayed_after_sigterm = balancer.relayed(0) - relayed;
    let after_exit = load.after.load(Ordering::SeqCst);
    eventually(
        Duration::from_secs(10),
        "no load after the exit",
        || async { load.after.load(Ordering::SeqCst) >= after_exit + 200 },
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.await.unwrap();
    }
    let story = format!(
        "SIGTERM at {signalled:?}, out of rotation at {:?}, exited by {exited:?}; \
         the balancer's trouble: {:?}, {:?}; the leaving instance's log: {:#?}",
        balancer.removed_at(0).map(|at| at - started),
        balancer.trouble(0),
        balancer.trouble(1),
        leaving.log.lock().unwrap()
    );
    let failures = std::mem::take(&mut *load.failures.lock().unwrap());
    Rollout {
        before: load.before.load(Ordering::SeqCst),
        after: load.after.load(Ordering::SeqCst),
        failures,
        relayed_after_sigterm,
        out_before_exit,
        story,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_behind_a_lagging_balancer_fails_no_request() {
    let rollout = rolling_update("2s").await;
    let Rollout {
        failures, story, ..
    } = &rollout;
    assert!(
        failures.is_empty(),
        "{} failed: {failures:#?}; {story}",
        failures.len()
    );
    assert!(rollout.before >= 100 && rollout.after >= 200, "{rollout:?}");
    // The window the delay is for was there: the balancer still sent the
    // leaving instance new connections after its SIGTERM, and had stopped
    // by the time it exited.
    assert!(rollout.relayed_after_sigterm > 0, "{rollout:?}");
    assert!(rollout.out_before_exit, "{rollout:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_delay_the_same_rolling_update_fails_requests() {
    let rollout = rolling_update("0s").await;
    assert!(
        !rollout.failures.is_empty(),
        "no request failed, although the balancer sent connections to a closed \
         listener: {rollout:?}"
    );
}
