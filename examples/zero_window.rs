//! The zero-window attack on HTTP/2, against the release binary: many
//! connections, each with `INITIAL_WINDOW_SIZE` 0 and its 250 streams all
//! asking for a large answer, so that sluice can send each answer's head and
//! not a byte of its body (docs/edge-behaviour.md, "Slow clients and
//! deadlines", row B9). Before `send_timeout` held for HTTP/2 streams, each
//! such stream held an upstream connection and two descriptors for as long
//! as its client stayed connected.
//!
//! ```sh
//! cargo build --release --bin sluice
//! cargo run --example zero_window                 # 40 connections × 250 streams, send_timeout 5 s
//! cargo run --example zero_window -- 20 250 2     # CONNECTIONS STREAMS SEND_TIMEOUT_SECS
//! SLUICE=path/to/sluice cargo run --example zero_window
//! ```
//!
//! The attack and the upstream need no optimised build (a debug one keeps
//! up); sluice is the release binary.
//!
//! It runs, all on loopback: nginx as the upstream (`/big` a 16 MiB file,
//! anything else `ok`; its connections counted in `/proc/net/tcp`); sluice (`target/release/sluice`, or
//! `$SLUICE`) in front of it, as a child process; a normal client that
//! asks sluice for `/` on a kept-alive HTTP/1.1 connection every 50 ms and
//! the admin port for `/readyz` every 200 ms throughout; and the attack.
//! It prints when each stream was reset after its request was sent and
//! after its answer's head arrived (the clock starts once sluice has the
//! answer, so a slow upstream adds to the first figure only), the
//! peaks of sluice's open descriptors (`/proc/PID/fd`) and of upstream
//! connections, how long both took to come back to their level before the
//! attack (first with the attacking connections still open, which hold one
//! descriptor each, then once they close), and the normal client's
//! latencies. It exits non-zero when a stream was not reset within
//! `send_timeout` plus a second of its answer's head, when descriptors or upstream connections
//! did not come back, or when a normal request failed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The large answer's size.
const BIG: usize = 16 << 20;

#[tokio::main]
async fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|arg| arg.parse().expect("CONNECTIONS STREAMS SEND_TIMEOUT_SECS"))
        .collect();
    let connections = args.first().copied().unwrap_or(40) as usize;
    let streams = args.get(1).copied().unwrap_or(250) as usize;
    let send_timeout = Duration::from_secs(args.get(2).copied().unwrap_or(5));

    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(dir.path());
    let mut sluice = Sluice::start(dir.path(), upstream.addr, send_timeout).await;
    let result = attack(&sluice, &upstream, connections, streams, send_timeout).await;
    sluice.stop();
    if let Err(failed) = result {
        eprintln!("FAILED: {failed}");
        std::process::exit(1);
    }
}

/// The whole run once sluice serves: the baseline, the attack beside the
/// normal client, and the recovery.
async fn attack(
    sluice: &Sluice,
    upstream: &Upstream,
    connections: usize,
    streams: usize,
    send_timeout: Duration,
) -> Result<(), String> {
    // A few normal exchanges first, so the baseline has the pooled
    // upstream connection and a warm runtime.
    for _ in 0..5 {
        normal_get(sluice.addr).await?;
    }
    // The normal clients run from before the baseline: the normal one's
    // kept connection is part of it.
    let stop = Arc::new(AtomicBool::new(false));
    let normal = tokio::spawn(normal_client(sluice.addr, Arc::clone(&stop)));
    let admin = tokio::spawn(admin_client(sluice.admin, Arc::clone(&stop)));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let base_fds = sluice.fds();
    let base_upstream = upstream.open();
    println!(
        "before: sluice {base_fds} descriptors, {base_upstream} upstream connections; \
         attack: {connections} connections × {streams} streams, send_timeout {send_timeout:?}"
    );

    let peaks = tokio::spawn(watch_peaks(
        sluice.pid,
        upstream.addr.port(),
        Arc::clone(&stop),
    ));

    let started = Instant::now();
    let (attackers, resets) = open_stalled(sluice.addr, connections, streams).await;
    let opened = started.elapsed();
    let (mut after, mut after_head): (Vec<Duration>, Vec<Duration>) = (Vec::new(), Vec::new());
    let mut other = 0;
    for reset in resets {
        match reset.await.unwrap() {
            Ok((elapsed, since_head)) => {
                after.push(elapsed);
                after_head.push(since_head);
            }
            Err(what) => {
                other += 1;
                if other <= 3 {
                    eprintln!("a stream ended otherwise: {what}");
                }
            }
        }
    }
    after.sort();
    after_head.sort();
    let reset_done = started.elapsed();
    println!(
        "{} streams opened in {opened:.2?}; {} reset CANCEL, {other} otherwise; \
         reset after its request: {}; after its answer's head: {}; all by {reset_done:.2?}",
        connections * streams,
        after.len(),
        spread(&after),
        spread(&after_head),
    );

    // Back to the level before, with the attackers still connected (one
    // descriptor each), then once they have gone.
    let with_attackers = base_fds + connections;
    let back = settle(|| sluice.fds() <= with_attackers && upstream.open() <= base_upstream).await;
    println!(
        "with the attackers connected: sluice {} descriptors (before + {connections}), \
         {} upstream connections, {} after the last reset",
        sluice.fds(),
        upstream.open(),
        fmt_settled(back),
    );
    drop(attackers);
    let gone = settle(|| sluice.fds() <= base_fds && upstream.open() <= base_upstream).await;
    println!(
        "attackers gone: sluice {} descriptors, {} upstream connections, {} after",
        sluice.fds(),
        upstream.open(),
        fmt_settled(gone),
    );
    stop.store(true, Ordering::SeqCst);
    let (peak_fds, peak_upstream, peak_rss) = peaks.await.unwrap();
    println!(
        "peaks: sluice {peak_fds} descriptors, {peak_upstream} upstream connections, RSS {} MiB",
        peak_rss / 1024
    );
    let normal = normal.await.unwrap();
    let admin = admin.await.unwrap();
    report("normal client GET /", &normal);
    report("admin GET /readyz", &admin);

    let late = after_head
        .iter()
        .filter(|&&elapsed| elapsed > send_timeout + Duration::from_secs(1))
        .count();
    let mut failed = Vec::new();
    if other > 0 || after.len() != connections * streams {
        failed.push(format!("{other} streams not reset CANCEL"));
    }
    if late > 0 {
        failed.push(format!(
            "{late} streams reset later than send_timeout + 1 s after their answer's head"
        ));
    }
    if back.is_none() || gone.is_none() {
        failed.push("descriptors or upstream connections did not come back".to_owned());
    }
    if normal.errors > 0 || admin.errors > 0 {
        failed.push("normal requests failed".to_owned());
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

/// Opens `connections` HTTP/2 connections with every stream window at
/// zero, each with `streams` GETs of the large answer; the connections
/// (kept open), and per stream how long after its request it was reset.
async fn open_stalled(
    addr: SocketAddr,
    connections: usize,
    streams: usize,
) -> (
    Vec<AbortOnDrop>,
    Vec<tokio::task::JoinHandle<Result<(Duration, Duration), String>>>,
) {
    let mut attackers = Vec::new();
    let mut resets = Vec::new();
    for _ in 0..connections {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(0)
            .handshake::<_, Bytes>(tcp)
            .await
            .unwrap();
        attackers.push(AbortOnDrop(tokio::spawn(async move {
            let _ = connection.await;
        })));
        for _ in 0..streams {
            let mut ready = send.clone().ready().await.unwrap();
            let request = http::Request::get("http://attack.example/big")
                .body(())
                .unwrap();
            let sent = Instant::now();
            let (response, _) = ready.send_request(request, true).unwrap();
            resets.push(tokio::spawn(async move {
                let response = response.await.map_err(|e| format!("no answer: {e}"))?;
                let headed = Instant::now();
                let mut body = response.into_body();
                match tokio::time::timeout(Duration::from_secs(120), body.data()).await {
                    Ok(Some(Err(e))) if e.reason() == Some(h2::Reason::CANCEL) => {
                        Ok((sent.elapsed(), headed.elapsed()))
                    }
                    Ok(other) => Err(format!("{:?}", other.map(|data| data.map(|d| d.len())))),
                    Err(_) => Err("not reset within 120 s".to_owned()),
                }
            }));
        }
    }
    (attackers, resets)
}

/// Min, median and max of sorted `times`.
fn spread(times: &[Duration]) -> String {
    let at = |i: usize| times.get(i).copied().unwrap_or_default();
    format!(
        "min {:.2?}, median {:.2?}, max {:.2?}",
        at(0),
        at(times.len() / 2),
        at(times.len().saturating_sub(1))
    )
}

/// Polls `done` every 50 ms for 30 s; how long it took, if it came.
async fn settle(mut done: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if done() {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

fn fmt_settled(settled: Option<Duration>) -> String {
    match settled {
        Some(after) => format!("back to that level {after:.2?}"),
        None => "NOT back to that level within 30 s".to_owned(),
    }
}

/// Latencies and failures of a client that ran beside the attack.
#[derive(Default)]
struct Served {
    latencies: Vec<Duration>,
    errors: u64,
}

fn report(what: &str, served: &Served) {
    let mut sorted = served.latencies.clone();
    sorted.sort();
    let at = |q: f64| {
        sorted
            .get(((sorted.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or_default()
    };
    println!(
        "{what}: {} answered, {} failed; p50 {:.2?}, p99 {:.2?}, max {:.2?}",
        sorted.len(),
        served.errors,
        at(0.5),
        at(0.99),
        sorted.last().copied().unwrap_or_default()
    );
}

/// `GET /` every 50 ms on a kept-alive HTTP/1.1 connection (a new one when
/// it closes) until `stop`.
async fn normal_client(addr: SocketAddr, stop: Arc<AtomicBool>) -> Served {
    let mut served = Served::default();
    let mut conn: Option<TcpStream> = None;
    while !stop.load(Ordering::SeqCst) {
        let started = Instant::now();
        let stream = match conn.take() {
            Some(stream) => Ok(stream),
            None => TcpStream::connect(addr).await,
        };
        let answered: Result<(), String> = match stream {
            Ok(mut stream) => {
                let exchanged = tokio::time::timeout(
                    Duration::from_secs(10),
                    exchange(
                        &mut stream,
                        b"GET / HTTP/1.1\r\nHost: normal.example\r\n\r\n",
                    ),
                )
                .await;
                match exchanged {
                    Ok(Ok(kept)) => {
                        if kept {
                            conn = Some(stream);
                        }
                        Ok(())
                    }
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err("no answer within 10 s".to_owned()),
                }
            }
            Err(e) => Err(format!("connect: {e}")),
        };
        match answered {
            Ok(()) => served.latencies.push(started.elapsed()),
            Err(why) => {
                served.errors += 1;
                if served.errors <= 3 {
                    eprintln!(
                        "a normal request failed after {:.2?}: {why}",
                        started.elapsed()
                    );
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    served
}

/// `GET /readyz` from the admin port every 200 ms, each on a new
/// connection, until `stop`.
async fn admin_client(addr: SocketAddr, stop: Arc<AtomicBool>) -> Served {
    let mut served = Served::default();
    while !stop.load(Ordering::SeqCst) {
        let started = Instant::now();
        let answered = tokio::time::timeout(Duration::from_secs(10), async {
            let mut stream = TcpStream::connect(addr).await?;
            exchange(
                &mut stream,
                b"GET /readyz HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n",
            )
            .await
        })
        .await;
        match answered {
            Ok(Ok(_)) => served.latencies.push(started.elapsed()),
            _ => served.errors += 1,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    served
}

/// One request and its `200` answer with a `content-length` body; whether
/// the connection is kept.
async fn exchange(stream: &mut TcpStream, request: &[u8]) -> std::io::Result<bool> {
    stream.write_all(request).await?;
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let n = stream.read(&mut buffer).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        received.extend_from_slice(&buffer[..n]);
        let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&received[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0);
        if received.len() < end + 4 + length {
            continue;
        }
        if !head.starts_with("http/1.1 200") {
            return Err(std::io::Error::other(head));
        }
        return Ok(!head.contains("connection: close"));
    }
}

async fn normal_get(addr: SocketAddr) -> Result<(), String> {
    let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    exchange(
        &mut stream,
        b"GET / HTTP/1.1\r\nHost: normal.example\r\nConnection: close\r\n\r\n",
    )
    .await
    .map(|_| ())
    .map_err(|e| e.to_string())
}

/// Samples sluice's descriptors and RSS and the upstream's open
/// connections every 20 ms until `stop`; their peaks.
async fn watch_peaks(pid: u32, upstream: u16, stop: Arc<AtomicBool>) -> (usize, u64, u64) {
    let (mut fds, mut conns, mut rss) = (0, 0, 0);
    while !stop.load(Ordering::SeqCst) {
        fds = fds.max(count_fds(pid));
        conns = conns.max(established_to(upstream));
        rss = rss.max(rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (fds, conns, rss)
}

fn count_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| dir.count())
        .unwrap_or(0)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A connection's task, aborted (its socket closed) when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The upstream: nginx on loopback, `/big` a 16 MiB file, anything else
/// `ok`; its connections open now are sluice's sockets to its port
/// (`/proc/net/tcp`, established).
struct Upstream {
    addr: SocketAddr,
    nginx: Child,
}

impl Upstream {
    fn start(dir: &std::path::Path) -> Upstream {
        let addr = free_port();
        let root = dir.join("www");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("big"), vec![b'x'; BIG]).unwrap();
        let conf = dir.join("nginx.conf");
        let text = format!(
            "worker_processes 1;\ndaemon off;\npid {dir}/nginx.pid;\n\
             error_log {dir}/nginx-error.log;\nworker_rlimit_nofile 19000;\n\
             events {{ worker_connections 18000; }}\n\
             http {{ access_log off; server {{ listen {addr} backlog=4096;\n\
             keepalive_requests 1000000; root {root};\n\
             location = /big {{ }}\nlocation / {{ return 200 \"ok\\n\"; }} }} }}\n",
            dir = dir.display(),
            root = root.display(),
        );
        std::fs::write(&conf, text).unwrap();
        let nginx = Command::new("nginx")
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx is needed for the upstream (apt-get install nginx)");
        let start = Instant::now();
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "nginx did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Upstream { addr, nginx }
    }

    fn open(&self) -> u64 {
        established_to(self.addr.port())
    }
}

impl Drop for Upstream {
    /// SIGTERM, so the master stops its worker too (a SIGKILL left the
    /// worker running, orphaned, after the example ended).
    fn drop(&mut self) {
        let terminated = Command::new("kill")
            .arg("-TERM")
            .arg(self.nginx.id().to_string())
            .status()
            .is_ok_and(|status| status.success());
        if !terminated {
            let _ = self.nginx.kill();
        }
        let _ = self.nginx.wait();
    }
}

/// Established TCP connections whose remote port is `port`.
fn established_to(port: u16) -> u64 {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return 0;
    };
    let remote = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() > 3 && fields[2].ends_with(&remote) && fields[3] == "01"
        })
        .count() as u64
}

/// sluice as a child process.
struct Sluice {
    child: Child,
    pid: u32,
    addr: SocketAddr,
    admin: SocketAddr,
}

impl Sluice {
    async fn start(dir: &std::path::Path, upstream: SocketAddr, send_timeout: Duration) -> Sluice {
        let binary = std::env::var_os("SLUICE")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/release/sluice")
            });
        let (addr, admin) = (free_port(), free_port());
        let config = dir.join("sluice.toml");
        std::fs::write(
            &config,
            format!(
                "[server]\nlisten = \"{addr}\"\nupstream = \"http://{upstream}\"\n\
                 send_timeout = \"{}s\"\nmax_connections = 1000\n\n\
                 [admin]\nlisten = \"{admin}\"\n",
                send_timeout.as_secs()
            ),
        )
        .unwrap();
        let child = Command::new(&binary)
            .arg("run")
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
        let pid = child.id();
        let sluice = Sluice {
            child,
            pid,
            addr,
            admin,
        };
        let start = Instant::now();
        while normal_get(addr).await.is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "sluice did not start"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        sluice
    }

    fn fds(&self) -> usize {
        count_fds(self.pid)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port free just now.
fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}
