//! Tunnels that end (docs/conversation.md, "WebSocket messages"), on the
//! real binary in front of a WebSocket upstream on loopback
//! (`support::websocket`): after the close handshake sluice closes both
//! connections though neither side closes its socket; either side's end
//! closes the other; a tunnel silent both ways for `tunnel_idle_timeout`
//! gets a Close frame 1001 on each side and is closed; and
//! `sluice_websocket_connections` drops as each ends. With and without a
//! message rule: the two ways a tunnel runs. Real time, with generous
//! tolerances.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use crate::support::eventually;
use crate::support::websocket::{
    masked, reaches, series, sluice, WsClient, WsUpstream, CLOSE, TEXT,
};

/// How long anything the tests wait for may take.
const WITHIN: Duration = Duration::from_secs(10);

const GAUGE: &str = "sluice_websocket_connections";

/// A message rule for `/metered` paths: the tunnels it applies to read
/// the client's frames, the others copy.
const RULES: &str = r#"
[[rule]]
name = "msgs"
unit = "message"
match = { path_prefix = "/metered" }
rate = "1000/m"
"#;

/// The two ways a tunnel runs: the path prefix that copies, and the one a
/// message rule reads.
const BOTH: [&str; 2] = ["/plain", "/metered"];

#[tokio::test]
async fn after_the_close_handshake_sluice_closes_both_sides_though_neither_closes_its_socket() {
    let upstream = WsUpstream::start().await;
    let (sluice, _dir) = sluice(&upstream, RULES);
    for (n, prefix) in BOTH.into_iter().enumerate() {
        // `hold`: the upstream answers the Close frame and keeps its socket.
        let (status, mut client) =
            WsClient::connect(sluice.addr, &format!("{prefix}/hold"), &[]).await;
        assert_eq!(status, 101);
        reaches(&sluice, GAUGE, 1.0).await;
        client.text("hello").await;
        assert_eq!(client.next(WITHIN).await.unwrap().payload, b"hello");

        client.send(&masked(CLOSE, &1000u16.to_be_bytes())).await;
        let (_, close) = client.until_close(WITHIN).await;
        assert_eq!(close, Some((1000, String::new())), "{prefix}");
        // The client keeps its socket open, as RFC 6455 has a client wait
        // for the server to close first.
        let handshake_done = Instant::now();
        assert!(client.ends(WITHIN).await, "{prefix}: sluice never closed");
        let took = handshake_done.elapsed();
        assert!(
            took < Duration::from_secs(3),
            "{prefix}: closed after {took:?}"
        );
        reaches(&sluice, GAUGE, 0.0).await;
        let seen = upstream.conn(n).await;
        eventually(WITHIN, "the upstream's connection never ended", || async {
            seen.ended.load(Ordering::SeqCst)
        })
        .await;
    }
}

#[tokio::test]
async fn the_upstreams_end_closes_the_clients_connection() {
    let upstream = WsUpstream::start().await;
    let (sluice, _dir) = sluice(&upstream, RULES);
    for prefix in BOTH {
        // The upstream closes its connection 300 ms after the 101.
        let path = format!("{prefix}/hangup/300");
        let (status, mut client) = WsClient::connect(sluice.addr, &path, &[]).await;
        assert_eq!(status, 101);
        // The client never closes; sluice does.
        assert!(client.ends(WITHIN).await, "{prefix}");
        reaches(&sluice, GAUGE, 0.0).await;
    }
}

#[tokio::test]
async fn the_clients_end_closes_the_upstreams_connection() {
    let upstream = WsUpstream::start().await;
    let (sluice, _dir) = sluice(&upstream, RULES);
    for (n, prefix) in BOTH.into_iter().enumerate() {
        // The upstream talks every 50 ms and never closes on its own.
        let (status, mut client) =
            WsClient::connect(sluice.addr, &format!("{prefix}/push/50"), &[]).await;
        assert_eq!(status, 101);
        assert!(client.next(WITHIN).await.is_some());
        reaches(&sluice, GAUGE, 1.0).await;
        // The client ends its side of the connection, still reading.
        client.stream.shutdown().await.unwrap();
        let seen = upstream.conn(n).await;
        eventually(WITHIN, "the upstream's connection never ended", || async {
            seen.ended.load(Ordering::SeqCst)
        })
        .await;
        // Pushes stop reaching the client: its connection is closed too.
        assert!(client.ends(WITHIN).await, "{prefix}");
        reaches(&sluice, GAUGE, 0.0).await;
    }
}

#[tokio::test]
async fn a_tunnel_silent_both_ways_gets_1001_on_each_side_at_tunnel_idle_timeout() {
    let upstream = WsUpstream::start().await;
    let rest = format!("tunnel_idle_timeout = \"1s\"\n{RULES}");
    let (sluice, _dir) = sluice(&upstream, &rest);
    for (n, prefix) in BOTH.into_iter().enumerate() {
        let (status, mut client) = WsClient::connect(sluice.addr, prefix, &[]).await;
        assert_eq!(status, 101);
        let opened = Instant::now();
        // Talk for 1.5 s, a message every 300 ms: never idle that long.
        loop {
            client.send(&masked(TEXT, b"still here")).await;
            assert_eq!(client.next(WITHIN).await.unwrap().payload, b"still here");
            if opened.elapsed() >= Duration::from_millis(1500) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        // Then silence.
        let silent = Instant::now();
        let (_, close) = client.until_close(WITHIN).await;
        let took = silent.elapsed();
        assert_eq!(close, Some((1001, "idle timeout".to_owned())), "{prefix}");
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(5),
            "{prefix}: closed after {took:?} of silence"
        );
        assert!(client.ends(WITHIN).await, "{prefix}");
        reaches(&sluice, GAUGE, 0.0).await;
        // The upstream got its own Close frame 1001 (masked: the support
        // upstream unmasks what it reads).
        let seen = upstream.conn(n).await;
        eventually(WITHIN, "the upstream got no Close frame", || async {
            seen.close.lock().unwrap().is_some()
        })
        .await;
        assert_eq!(
            *seen.close.lock().unwrap(),
            Some((1001, "idle timeout".to_owned()))
        );
    }
}

/// Tunnels in the load below, unless `TUNNELS` says otherwise.
const LOAD_TUNNELS: usize = 10_000;
/// Handshakes sent at once (well under sluice's and the upstream's listen
/// backlogs).
const LOAD_BATCH: usize = 500;

/// Open descriptors of the process `pid`.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |dir| dir.count())
}

/// A load, not a check run with the others (two descriptors a tunnel in
/// sluice, two in the test process: more than a process is usually
/// allowed): `scripts/tunnel-ends-load.sh` raises the limit and runs it.
/// 10,000 (or `TUNNELS`)
/// tunnels whose clients and upstream never close their sockets after the
/// close handshake: how long until sluice's gauge reads 0 and its
/// descriptors are back where they were before the tunnels opened. It
/// prints the figures; it fails only when they are not gone within 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a load of 10,000 tunnels: scripts/tunnel-ends-load.sh"]
async fn ten_thousand_tunnels_whose_sides_never_close_are_gone_after_their_close_handshakes() {
    let tunnels = std::env::var("TUNNELS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(LOAD_TUNNELS);
    let upstream = WsUpstream::start().await;
    let (sluice, _dir) = sluice(&upstream, "max_connections = 20000\n");
    let pid = sluice.child.id();
    let fds_before = open_fds(pid);

    let opening = Instant::now();
    let mut clients = Vec::with_capacity(tunnels);
    while clients.len() < tunnels {
        let mut batch = tokio::task::JoinSet::new();
        for _ in 0..LOAD_BATCH.min(tunnels - clients.len()) {
            let addr = sluice.addr;
            batch.spawn(async move { WsClient::connect(addr, "/hold", &[]).await });
        }
        while let Some(opened) = batch.join_next().await {
            let (status, client) = opened.unwrap();
            assert_eq!(status, 101);
            clients.push(client);
        }
    }
    reaches(&sluice, GAUGE, tunnels as f64).await;
    let fds_open = open_fds(pid);
    eprintln!(
        "{tunnels} tunnels open in {:.1?}: sluice holds {fds_open} descriptors \
         ({fds_before} before)",
        opening.elapsed()
    );

    // Every client sends its Close frame and reads the upstream's answer;
    // then it keeps its socket, as the upstream keeps its own.
    let closing = Instant::now();
    let mut handshakes = tokio::task::JoinSet::new();
    for mut client in clients {
        handshakes.spawn(async move {
            client.send(&masked(CLOSE, &1000u16.to_be_bytes())).await;
            let (_, close) = client.until_close(Duration::from_secs(60)).await;
            assert_eq!(close.map(|(code, _)| code), Some(1000));
            (Instant::now(), client)
        });
    }
    let mut last_answer = closing;
    let mut kept = Vec::with_capacity(tunnels);
    while let Some(done) = handshakes.join_next().await {
        let (answered, client) = done.unwrap();
        last_answer = last_answer.max(answered);
        kept.push(client);
    }
    let (mut gauge_zero, mut fds_back) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(30);
    while (gauge_zero.is_none() || fds_back.is_none()) && Instant::now() < deadline {
        if gauge_zero.is_none() && series(&sluice, GAUGE).await == 0.0 {
            gauge_zero = Some(Instant::now());
        }
        // The metrics scrape's own connection may be open: a few over.
        if fds_back.is_none() && open_fds(pid) <= fds_before + 4 {
            fds_back = Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let since = |at: Option<Instant>, from: Instant| at.map(|at| at - from);
    eprintln!(
        "close handshakes: all {tunnels} answered {:.1?} after the first Close was sent; \
         gauge at 0 {:.1?} after the first Close, {:.1?} after the last answer; \
         descriptors back to {} ({fds_before} before) {:.1?} after the first Close, \
         {:.1?} after the last answer",
        last_answer - closing,
        since(gauge_zero, closing),
        since(gauge_zero, last_answer),
        open_fds(pid),
        since(fds_back, closing),
        since(fds_back, last_answer),
    );
    assert!(
        gauge_zero.is_some() && fds_back.is_some(),
        "tunnels were left"
    );
    // The clients kept their sockets to the end: sluice closed them.
    drop(kept);
}
