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
use crate::support::websocket::{masked, reaches, sluice, WsClient, WsUpstream, CLOSE, TEXT};

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
