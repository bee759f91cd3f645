//! Slow and oversized clients from docs/edge-behaviour.md's "Hostile inputs" table, section B, one
//! test per row, named after it: B2 (slow body), B3 (a client that never
//! reads), B4 (a 70 KB URI), B7 (out of file descriptors), B8 (idle
//! keep-alive hoarding), and hyper's own 400/431 answers as problem
//! documents. Clients send raw bytes. sluice runs as the real binary so
//! that its file descriptors and RSS are its own (`/proc/<pid>`); counts are
//! in the hundreds and timeouts short, so the file stays fast.

use crate::support;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use support::{write_config, SluiceProcess, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// sluice as a process in front of a fresh upstream; `server` adds lines to
/// `[server]`, `rest` follows it.
pub(crate) async fn spawn(
    server: &str,
    rest: &str,
) -> (Upstream, SluiceProcess, tempfile::TempDir) {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = config_text(&upstream, server, rest);
    let sluice = SluiceProcess::spawn(&write_config(dir.path(), &toml));
    (upstream, sluice, dir)
}

fn config_text(upstream: &Upstream, server: &str, rest: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\nworkers = 2\n{server}\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n{rest}",
        upstream.addr
    )
}

/// Open file descriptors of `pid`.
pub(crate) fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Waits up to `limit` for `pid`'s descriptor count to fall to `at_most`;
/// returns the last count seen.
pub(crate) async fn fds_settle(pid: u32, at_most: usize, limit: Duration) -> usize {
    let deadline = Instant::now() + limit;
    loop {
        let now = fds(pid);
        if now <= at_most || Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One HTTP/1.1 response read off a raw socket.
#[derive(Debug)]
pub(crate) struct Raw {
    pub(crate) status: u16,
    /// The head, lower-cased.
    pub(crate) head: String,
    pub(crate) body: String,
}

impl Raw {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }

    /// A problem document with this status.
    pub(crate) fn assert_problem(&self, status: u16) {
        assert_eq!(self.status, status, "{self:?}");
        assert!(
            self.head.contains("content-type: application/problem+json"),
            "{self:?}"
        );
        let body = self.json();
        assert_eq!(body["status"], status, "{self:?}");
        assert!(body["title"].as_str().is_some_and(|t| !t.is_empty()));
        assert!(body["detail"].as_str().is_some_and(|d| !d.is_empty()));
    }
}

/// Reads one response (head and a Content-Length body); `None` when the
/// connection closed or nothing came within `limit`.
pub(crate) async fn read_response(stream: &mut TcpStream, limit: Duration) -> Option<Raw> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut received = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        if let Some(end) = find(&received, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&received[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|value| value.trim().parse().ok())
                .unwrap_or(0);
            if received.len() >= end + 4 + length {
                let status = head.split_whitespace().nth(1)?.parse().ok()?;
                let body = String::from_utf8_lossy(&received[end + 4..end + 4 + length]);
                return Some(Raw {
                    status,
                    head,
                    body: body.into_owned(),
                });
            }
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
            Ok(Ok(n)) => received.extend_from_slice(&buffer[..n]),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Waits up to `limit` for the server to close `stream` (EOF or reset).
pub(crate) async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    let mut buffer = [0u8; 8192];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

pub(crate) const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n";

/// One exchange on a closed connection, so that a descriptor baseline
/// includes the warm runtime and a pooled upstream connection.
pub(crate) async fn warm_up(sluice: &SluiceProcess) {
    let mut warm = TcpStream::connect(sluice.addr).await.unwrap();
    warm.write_all(GET).await.unwrap();
    read_response(&mut warm, Duration::from_secs(2))
        .await
        .unwrap();
    let pid = sluice.child.id();
    let with_it = fds(pid);
    drop(warm);
    // sluice closes its side once it reads the hang-up.
    let what = "the warm-up connection was never closed";
    support::eventually(Duration::from_secs(5), what, || async {
        fds(pid) < with_it
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b2_slow_bodies_are_cut_at_body_timeout_with_408_and_the_upstream_sees_no_complete_request()
{
    let (upstream, sluice, _dir) = spawn("body_timeout = \"1s\"\n", "").await;
    let pid = sluice.child.id();
    let baseline = fds(pid);
    const CLIENTS: usize = 100;
    const DECLARED: u64 = 1_000_000;

    // RUDY: each client declares a large body and trickles 10 bytes every
    // 100 ms, which would take hours.
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let addr = sluice.addr;
        clients.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let head = format!(
                "POST /upload HTTP/1.1\r\nHost: a.example\r\nContent-Length: {DECLARED}\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await.unwrap();
            let (mut reader, mut writer) = stream.into_split();
            let trickle = tokio::spawn(async move {
                while writer.write_all(&[b'u'; 10]).await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
            let mut stream_reader = Vec::new();
            let mut buffer = [0u8; 4096];
            // Everything sluice sends until it closes.
            while let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_secs(5), reader.read(&mut buffer)).await
            {
                if n == 0 {
                    break;
                }
                stream_reader.extend_from_slice(&buffer[..n]);
            }
            let closed_after = started.elapsed();
            trickle.abort();
            (
                String::from_utf8_lossy(&stream_reader).into_owned(),
                closed_after,
            )
        }));
    }
    let mut longest = Duration::ZERO;
    for client in clients {
        let (raw, closed_after) = client.await.unwrap();
        let (head, body) = raw
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no response: {raw:?}"));
        assert!(head.starts_with("HTTP/1.1 408 "), "{raw}");
        let head = head.to_ascii_lowercase();
        assert!(
            head.contains("content-type: application/problem+json"),
            "{raw}"
        );
        assert!(head.contains("connection: close"), "{raw}");
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["status"], 408);
        longest = longest.max(closed_after);
    }

    // Closed at the deadline (1 s), not at the 5 s read limit above.
    assert!(longest < Duration::from_secs(3), "longest {longest:?}");
    // Every upload reached the upstream as a stream and was aborted there.
    assert_eq!(upstream.count(), CLIENTS);
    assert!(upstream.uploaded.load(Ordering::SeqCst) < DECLARED);
    // Client and upstream connections are all gone.
    let settled = fds_settle(pid, baseline, Duration::from_secs(3)).await;
    assert!(settled <= baseline, "fds {settled} > baseline {baseline}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b2_a_body_that_arrives_within_body_timeout_is_forwarded_whole() {
    let (upstream, sluice, _dir) = spawn("body_timeout = \"2s\"\n", "").await;
    let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
    stream
        .write_all(b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n")
        .await
        .unwrap();
    // Slow, but done in 0.5 s.
    for _ in 0..5 {
        stream.write_all(&[b'u'; 20]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let got = read_response(&mut stream, Duration::from_secs(3))
        .await
        .unwrap();
    assert_eq!(got.status, 200, "{got:?}");
    assert_eq!(got.body, "100");
    assert_eq!(upstream.uploaded.load(Ordering::SeqCst), 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b2_a_chunked_body_beyond_max_body_bytes_is_cut_off_with_413() {
    let (upstream, sluice, _dir) = spawn("max_body_bytes = 4096\n", "").await;
    let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
    // No Content-Length to check up front: the cap applies as it streams.
    stream
        .write_all(b"POST /upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    let chunk = format!("400\r\n{}\r\n", "u".repeat(0x400));
    for _ in 0..8 {
        if stream.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    let got = read_response(&mut stream, Duration::from_secs(3))
        .await
        .unwrap();
    got.assert_problem(413);
    assert!(got.head.contains("connection: close"), "{got:?}");
    assert!(upstream.uploaded.load(Ordering::SeqCst) <= 4096);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b3_a_client_that_never_reads_is_dropped_at_send_timeout_with_bounded_memory() {
    // 3 s, not less: the 50 clients connect one after the other, and on a
    // loaded CI machine that took long enough (about 1 s) for the first
    // ones to time out before the check that they are all still held.
    let (upstream, sluice, _dir) = spawn("send_timeout = \"3s\"\n", "").await;
    let pid = sluice.child.id();
    warm_up(&sluice).await;
    let baseline_fds = fds(pid);
    let baseline_rss = sluice.memory_kib("VmRSS");

    // 50 clients ask for 32 MiB each with a 4 KiB receive buffer, and never
    // read a byte.
    const CLIENTS: usize = 50;
    let mut stuck = Vec::new();
    for _ in 0..CLIENTS {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(sluice.addr).await.unwrap();
        stream
            .write_all(b"GET /download/33554432 HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        stuck.push(stream);
    }
    // While they are stuck: sluice holds them (and their upstream
    // exchanges), with little memory each. The stall under test: long
    // enough for every buffer on the way to fill.
    const STUCK: Duration = Duration::from_millis(600);
    tokio::time::sleep(STUCK).await;
    let peak_fds = fds(pid);
    let peak_rss = sluice.memory_kib("VmRSS");
    assert!(
        peak_fds >= baseline_fds + CLIENTS,
        "the stuck clients should still be connected: {peak_fds} fds, baseline {baseline_fds}"
    );
    let per_connection_kib = peak_rss.saturating_sub(baseline_rss) / CLIENTS as u64;
    assert!(
        per_connection_kib <= 1024,
        "{per_connection_kib} KiB per stuck connection (RSS {baseline_rss} → {peak_rss} KiB)"
    );

    // After send_timeout without progress they are dropped, upstream
    // exchanges included, though the clients still hold their sockets.
    let settled = fds_settle(pid, baseline_fds, Duration::from_secs(8)).await;
    assert!(
        settled <= baseline_fds,
        "fds {settled} > baseline {baseline_fds}"
    );
    assert!(upstream.count() > CLIENTS);
    // A client that reads gets the whole download.
    let (status, len) = support::download_len(&sluice.url("/download/1048576")).await;
    assert_eq!((status.as_u16(), len), (200, 1_048_576));
    drop(stuck);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b4_a_70_kb_uri_gets_414_before_any_limiter_or_upstream_work_with_flat_rss() {
    let one_per_minute = "[[rule]]\nname = \"tight\"\nkey = [\"global\"]\nrate = \"1/m\"\n";
    let (upstream, sluice, _dir) = spawn("", one_per_minute).await;
    let request = format!(
        "GET /search?q={} HTTP/1.1\r\nHost: a.example\r\n\r\n",
        "a".repeat(70 * 1024)
    );

    let send_one = || async {
        let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
        // The client may still be writing when sluice answers and closes.
        let _ = stream.write_all(request.as_bytes()).await;
        read_response(&mut stream, Duration::from_secs(3))
            .await
            .expect("no 414")
    };
    let first = send_one().await;
    first.assert_problem(414);
    assert!(first.head.contains("connection: close"), "{first:?}");
    for _ in 0..49 {
        assert_eq!(send_one().await.status, 414);
    }
    let rss_after_50 = sluice.memory_kib("VmRSS");
    for _ in 0..450 {
        assert_eq!(send_one().await.status, 414);
    }
    let rss_after_500 = sluice.memory_kib("VmRSS");

    // 450 × 70 KB went by: a leak of even the URIs would show as 30 MiB.
    assert!(
        rss_after_500 <= rss_after_50 + 8 * 1024,
        "RSS grew from {rss_after_50} to {rss_after_500} KiB"
    );
    assert_eq!(upstream.count(), 0);
    // No budget was spent: the one request a minute is still there.
    let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
    stream.write_all(GET).await.unwrap();
    let got = read_response(&mut stream, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(got.status, 200, "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b5_hypers_own_431_and_400_answers_are_problem_documents() {
    let (upstream, sluice, _dir) = spawn("", "").await;
    let many: String = (0..200).map(|i| format!("X-H{i}: v\r\n")).collect();
    let cases = [
        (
            format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n").into_bytes(),
            431,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n".to_vec(),
            400,
        ),
        (b"G\x01T / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(), 400),
    ];
    for (request, status) in cases {
        let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
        stream.write_all(&request).await.unwrap();
        let got = read_response(&mut stream, Duration::from_secs(2))
            .await
            .expect("no answer");
        got.assert_problem(status);
        assert!(got.head.contains("connection: close"), "{got:?}");
        assert!(closed_within(&mut stream, Duration::from_secs(3)).await);
    }
    assert_eq!(upstream.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b8_idle_keep_alive_connections_are_closed_at_idle_timeout() {
    let (_upstream, sluice, _dir) = spawn(
        "idle_timeout = \"500ms\"\nheader_read_timeout = \"5s\"\n",
        "",
    )
    .await;
    let pid = sluice.child.id();
    warm_up(&sluice).await;
    let baseline = fds(pid);

    // 200 connections, one request each (one after the other, so a single
    // pooled upstream connection serves them all), then silence.
    const CLIENTS: usize = 200;
    let mut idle = Vec::new();
    for _ in 0..CLIENTS {
        let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
        stream.write_all(GET).await.unwrap();
        let got = read_response(&mut stream, Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(got.status, 200);
        assert!(!got.head.contains("connection: close"), "{got:?}");
        idle.push((stream, Instant::now()));
    }
    assert!(fds(pid) >= baseline + CLIENTS);

    let mut shortest = Duration::MAX;
    let mut longest = Duration::ZERO;
    for (stream, answered) in &mut idle {
        assert!(
            closed_within(stream, Duration::from_secs(3)).await,
            "an idle connection was kept: {:?} after its answer",
            answered.elapsed()
        );
        let lived = answered.elapsed();
        longest = longest.max(lived);
        shortest = shortest.min(lived);
    }
    // Not before the idle timeout, and at most 1 s after it (the last
    // connection was measured after the others were waited for).
    assert!(shortest >= Duration::from_millis(450), "{shortest:?}");
    assert!(longest <= Duration::from_millis(1500), "{longest:?}");
    drop(idle);
    let settled = fds_settle(pid, baseline, Duration::from_secs(2)).await;
    assert!(settled <= baseline, "fds {settled} > baseline {baseline}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b8_an_idle_timeout_longer_than_the_header_timeout_is_honoured() {
    // hyper restarts its header timer when a connection goes idle, which
    // would cut this connection at 300 ms.
    let (_upstream, sluice, _dir) = spawn(
        "idle_timeout = \"3s\"\nheader_read_timeout = \"300ms\"\n",
        "",
    )
    .await;
    let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
    for _ in 0..2 {
        stream.write_all(GET).await.unwrap();
        let got = read_response(&mut stream, Duration::from_secs(2))
            .await
            .expect("the idle connection was closed before idle_timeout");
        assert_eq!(got.status, 200);
        // Idle under test: past the header timeout, within idle_timeout.
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    // The head clock still runs once a request begins.
    stream.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    let got = read_response(&mut stream, Duration::from_secs(2))
        .await
        .expect("no 408 for a head that stalled");
    got.assert_problem(408);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b8_the_idle_clock_restarts_after_every_exchange() {
    // Exchanges 400 ms apart keep the connection for 2 s, twice its
    // idle_timeout counted from the accept; once they stop, it closes one
    // idle_timeout after the last answer.
    let (_upstream, sluice, _dir) =
        spawn("idle_timeout = \"1s\"\nheader_read_timeout = \"5s\"\n", "").await;
    let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
    let mut answered = Instant::now();
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        stream.write_all(GET).await.unwrap();
        let got = read_response(&mut stream, Duration::from_secs(2))
            .await
            .expect("the connection was closed although it was never idle for idle_timeout");
        assert_eq!(got.status, 200);
        answered = Instant::now();
    }
    assert!(closed_within(&mut stream, Duration::from_secs(3)).await);
    let lived = answered.elapsed();
    assert!(lived >= Duration::from_millis(950), "{lived:?}");
    assert!(lived <= Duration::from_millis(2000), "{lived:?}");
}

/// Counts CPU ticks (user + system) of `pid` from `/proc/<pid>/stat`.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// The sluice binary under `ulimit -n limit`.
fn spawn_with_fd_limit(config: &Path, limit: u32) -> SluiceProcess {
    let mut command = std::process::Command::new("sh");
    command
        .arg("-c")
        .arg(format!(
            "ulimit -n {limit} && exec \"$0\" run --config \"$1\""
        ))
        .arg(support::binary())
        .arg(config);
    SluiceProcess::spawn_command(command)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_out_of_file_descriptors_the_accept_loop_pauses_and_recovers() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = config_text(&upstream, "idle_timeout = \"30s\"\n", "");
    let sluice = spawn_with_fd_limit(&write_config(dir.path(), &toml), 64);
    let pid = sluice.child.id();

    // More idle connections than the process may have descriptors: the
    // kernel completes the handshakes, sluice's accept fails with EMFILE.
    let mut hoard = Vec::new();
    for _ in 0..100 {
        hoard.push(TcpStream::connect(sluice.addr).await.unwrap());
    }
    let what = "the descriptor limit was not reached";
    support::eventually(Duration::from_secs(5), what, || async { fds(pid) >= 60 }).await;

    // No busy loop: a spinning accept would burn a whole core (100 ticks a
    // second); the 100 ms pause costs next to nothing. Measured over:
    const MEASURED: Duration = Duration::from_secs(1);
    let before = cpu_ticks(pid);
    tokio::time::sleep(MEASURED).await;
    let spent = cpu_ticks(pid) - before;
    assert!(
        spent < 30,
        "{spent} CPU ticks in 1 s while out of descriptors"
    );

    // When the hoard leaves, sluice serves again, admin included.
    drop(hoard);
    let deadline = Instant::now() + Duration::from_secs(3);
    let status = loop {
        let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
        let _ = stream.write_all(GET).await;
        match read_response(&mut stream, Duration::from_millis(500)).await {
            Some(got) => break got.status,
            None if Instant::now() < deadline => continue,
            None => panic!("sluice did not recover"),
        }
    };
    assert_eq!(status, 200);
    let readyz = support::get(&sluice.admin_url("/readyz"), &[]).await;
    assert_eq!(readyz.status.as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b8_a_connection_that_never_sends_a_byte_is_closed_at_idle_timeout_when_that_comes_first() {
    let (_upstream, sluice, _dir) = spawn(
        "idle_timeout = \"500ms\"\nheader_read_timeout = \"5s\"\n",
        "",
    )
    .await;
    let connected = Instant::now();
    let mut silent = TcpStream::connect(sluice.addr).await.unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(3)).await);
    let lived = connected.elapsed();
    assert!(lived >= Duration::from_millis(450), "{lived:?}");
    assert!(lived <= Duration::from_millis(1500), "{lived:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b8_the_read_clocks_stop_while_a_request_is_in_flight_and_idle_restarts_after() {
    // A GET without a body is sluice's own server's: the read clocks stop
    // while its request is in flight (`DeadlineIo::exchange_began`), however
    // long the upstream takes, and the idle one starts again after the answer.
    let (_upstream, sluice, _dir) = spawn(
        "idle_timeout = \"300ms\"\nheader_read_timeout = \"300ms\"\n",
        "",
    )
    .await;
    let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
    for _ in 0..2 {
        stream
            .write_all(b"GET /slow/900 HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        let got = read_response(&mut stream, Duration::from_secs(3))
            .await
            .expect("the slow answer, on a kept connection");
        assert_eq!(got.status, 200, "{got:?}");
        assert!(!got.head.contains("connection: close"), "{got:?}");
    }
    let answered = Instant::now();
    assert!(closed_within(&mut stream, Duration::from_secs(3)).await);
    assert!(answered.elapsed() >= Duration::from_millis(250));
}

/// How often [`peak_rss_while`] reads sluice's RSS: a measurement's
/// interval, not a wait for anything.
const RSS_SAMPLE_EVERY: Duration = Duration::from_millis(20);

/// The peak of sluice's RSS (KiB) while `work` runs, sampled every
/// [`RSS_SAMPLE_EVERY`].
async fn peak_rss_while<T>(
    sluice: &SluiceProcess,
    work: impl std::future::Future<Output = T>,
) -> (T, u64) {
    let mut work = std::pin::pin!(work);
    let mut peak = sluice.memory_kib("VmRSS");
    loop {
        tokio::select! {
            done = &mut work => return (done, peak.max(sluice.memory_kib("VmRSS"))),
            () = tokio::time::sleep(RSS_SAMPLE_EVERY) => {
                peak = peak.max(sluice.memory_kib("VmRSS"));
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_gib_upload_streams_through_with_rss_within_64_mib() {
    // The body goes up as the client sends it, read only as fast as the
    // upstream takes it: one read buffer and one frame in flight, whatever
    // the size (docs/edge-behaviour.md, "Slow clients and deadlines").
    const SIZE: u64 = 1 << 30;
    let (upstream, sluice, _dir) = spawn("body_timeout = \"120s\"\n", "").await;
    warm_up(&sluice).await;
    let baseline = sluice.memory_kib("VmRSS");
    let upload = async {
        let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
        let head = format!("POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: {SIZE}\r\n\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        let block = vec![b'u'; 1 << 20];
        for _ in 0..SIZE >> 20 {
            stream.write_all(&block).await.unwrap();
        }
        read_response(&mut stream, Duration::from_secs(30)).await
    };
    let (answer, peak) = peak_rss_while(&sluice, upload).await;
    let answer = answer.expect("an answer to the upload");
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.body, SIZE.to_string(), "the upstream got all of it");
    assert_eq!(upstream.uploaded.load(Ordering::SeqCst), SIZE);
    let grown = peak.saturating_sub(baseline);
    assert!(
        grown <= 64 * 1024,
        "RSS {baseline} → {peak} KiB (+{grown} KiB)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_8_mib_answer_to_a_client_that_reads_slowly_stays_within_64_mib() {
    // sluice reads the answer only as fast as the client takes it.
    const SIZE: usize = 8 << 20;
    let (_upstream, sluice, _dir) = spawn("", "").await;
    warm_up(&sluice).await;
    let baseline = sluice.memory_kib("VmRSS");
    let download = async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(16 * 1024).unwrap();
        let mut stream = socket.connect(sluice.addr).await.unwrap();
        stream
            .write_all(format!("GET /download/{SIZE} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
            .await
            .unwrap();
        // The slow reader under test: 64 KiB every 10 ms, about 1.3 s for
        // all of it.
        const READ_PAUSE: Duration = Duration::from_millis(10);
        let mut answer = Vec::with_capacity(SIZE + 64 * 1024);
        let mut buffer = vec![0u8; 64 * 1024];
        while !answer.ends_with(b"\r\n0\r\n\r\n") {
            let n = stream.read(&mut buffer).await.unwrap();
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buffer[..n]);
            tokio::time::sleep(READ_PAUSE).await;
        }
        // The body's data, its chunks undone.
        let mut rest = &answer[find(&answer, b"\r\n\r\n").expect("a head") + 4..];
        let mut received = 0usize;
        while let Some(line) = find(rest, b"\r\n") {
            let size = usize::from_str_radix(std::str::from_utf8(&rest[..line]).unwrap(), 16)
                .expect("a chunk size");
            received += size;
            rest = &rest[(line + 2 + size + 2).min(rest.len())..];
            if size == 0 {
                break;
            }
        }
        received
    };
    let (received, peak) = peak_rss_while(&sluice, download).await;
    assert_eq!(received, SIZE);
    let grown = peak.saturating_sub(baseline);
    assert!(
        grown <= 64 * 1024,
        "RSS {baseline} → {peak} KiB (+{grown} KiB)"
    );
}
