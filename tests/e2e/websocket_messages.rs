//! WebSocket message limits (`unit = "message"`; docs/conversation.md,
//! "WebSocket messages") on the real binary, in front of a WebSocket
//! upstream on loopback (`support::websocket`): each data message counted
//! once (a fragmented one too, pings never), the frames arriving at the
//! upstream byte for byte, a refused message closing both sides with 1008
//! and its reason, 1009 and 1002, delay as back-pressure on the client
//! while the server's messages keep flowing, a budget per key, and the
//! tunnels gauge. Real time, with generous tolerances.

use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use crate::support::websocket::{
    frame, masked, reaches, series, sluice, WsClient, WsUpstream, BINARY, CONTINUE, CONTINUE_END,
    PING, PONG, TEXT, TEXT_START,
};
use crate::support::{checked, eventually, get, RedisServer};

/// How long anything the tests wait for may take.
const WITHIN: Duration = Duration::from_secs(10);

fn outcome(rule: &str, outcome: &str) -> String {
    format!("sluice_requests_total{{rule=\"{rule}\",outcome=\"{outcome}\"}}")
}

const COUNTED: &str = r#"
[[rule]]
name = "handshakes"
rate = "100/m"

[[rule]]
name = "msgs"
unit = "message"
match = { path_prefix = "/chat" }
rate = "3/m"
"#;

#[tokio::test]
async fn each_message_counts_once_and_reaches_the_upstream_byte_for_byte() {
    let upstream = WsUpstream::start().await;
    let (sluice, _dir) = sluice(&upstream, COUNTED);
    let (status, mut client) = WsClient::connect(sluice.addr, "/chat", &[]).await;
    assert_eq!(status, 101);

    // A text message in three fragments with a ping between them, a
    // binary one, a text one: three messages.
    let sent = [
        masked(TEXT_START, b"one "),
        masked(PING, b"are you there"),
        masked(CONTINUE, b"two "),
        masked(CONTINUE_END, b"three"),
        masked(BINARY, &[0, 1, 2, 255]),
        masked(TEXT, b"last one"),
    ]
    .concat();
    // In pieces cut through the headers.
    for piece in sent.chunks(5) {
        client.send(piece).await;
    }
    let mut got = Vec::new();
    while got.len() < 4 {
        got.push(client.next(WITHIN).await.expect("an answer"));
    }
    assert_eq!(got[0].first, PONG);
    assert_eq!(got[1].payload, b"one two three");
    assert_eq!(got[2].payload, [0, 1, 2, 255]);
    assert_eq!(got[3].payload, b"last one");

    // The fourth message is over the rule's 3 a minute.
    let refused = masked(TEXT, b"one too many");
    client.send(&refused).await;
    let (_, close) = client.until_close(WITHIN).await;
    assert_eq!(close, Some((1008, "rate limited: msgs".to_owned())));
    assert!(client.ends(WITHIN).await);

    // The upstream got every frame as sent, never the refused one, then
    // sluice's Close.
    let seen = upstream.conn(0).await;
    eventually(WITHIN, "the upstream got its Close", || async {
        seen.close.lock().unwrap().is_some()
    })
    .await;
    let bytes = seen.bytes.lock().unwrap().clone();
    assert!(bytes.starts_with(&sent), "{bytes:02x?}");
    assert_eq!(
        *seen.close.lock().unwrap(),
        Some((1008, "rate limited: msgs".to_owned()))
    );
    assert!(!bytes.windows(refused.len()).any(|w| w == refused));
    assert_eq!(seen.messages.lock().unwrap().len(), 3);
    // The handshake counts in the request rule, not in the message rule.
    assert!(seen
        .head
        .lock()
        .unwrap()
        .to_lowercase()
        .contains("upgrade: websocket"));
    assert_eq!(
        series(&sluice, &outcome("handshakes", "allowed")).await,
        1.0
    );
    reaches(&sluice, &outcome("msgs", "allowed"), 3.0).await;
    assert_eq!(series(&sluice, &outcome("msgs", "limited")).await, 1.0);
}

#[tokio::test]
async fn a_message_over_max_message_bytes_closes_with_1009_and_a_broken_frame_with_1002() {
    let upstream = WsUpstream::start().await;
    let rest = "max_message_bytes = 1024\n\n[[rule]]\nname = \"msgs\"\nunit = \"message\"\n\
                rate = \"1000/m\"\n";
    let (sluice, _dir) = sluice(&upstream, rest);

    // 1024 bytes pass, across fragments too.
    let (_, mut client) = WsClient::connect(sluice.addr, "/a", &[]).await;
    client.send(&masked(BINARY, &[7; 1024])).await;
    assert_eq!(client.next(WITHIN).await.unwrap().payload.len(), 1024);
    let split = [masked(0x02, &[1; 1000]), masked(CONTINUE_END, &[2; 24])].concat();
    client.send(&split).await;
    assert_eq!(client.next(WITHIN).await.unwrap().payload.len(), 1024);
    // 1025 bytes, announced: closed from the header, before its payload.
    let header = &masked(BINARY, &[9; 1025])[..8];
    client.send(header).await;
    let (_, close) = client.until_close(WITHIN).await;
    assert_eq!(close, Some((1009, "message too big".to_owned())));
    let seen = upstream.conn(0).await;
    eventually(WITHIN, "the upstream got its Close", || async {
        seen.close.lock().unwrap().is_some()
    })
    .await;
    assert_eq!(seen.close.lock().unwrap().clone().unwrap().0, 1009);
    assert_eq!(seen.messages.lock().unwrap().len(), 2);

    // An unmasked client frame, a reserved opcode, a stray continuation:
    // 1002 each, and nothing of it reaches the upstream.
    for (n, bad) in [
        frame(TEXT, b"unmasked", None),
        masked(0x83, b""),
        masked(CONTINUE_END, b"stray"),
    ]
    .into_iter()
    .enumerate()
    {
        let (_, mut client) = WsClient::connect(sluice.addr, "/a", &[]).await;
        client.send(&bad).await;
        let (_, close) = client.until_close(WITHIN).await;
        assert_eq!(close.map(|(code, _)| code), Some(1002), "{bad:02x?}");
        let seen = upstream.conn(n + 1).await;
        eventually(WITHIN, "the upstream got its Close", || async {
            seen.close.lock().unwrap().is_some()
        })
        .await;
        assert_eq!(seen.close.lock().unwrap().clone().unwrap().0, 1002);
        assert!(seen.messages.lock().unwrap().is_empty());
    }

    // permessage-deflate, accepted by the upstream, sets RSV1: it passes.
    let (_, mut client) = WsClient::connect(sluice.addr, "/deflate", &[]).await;
    client.send(&masked(0x40 | TEXT, b"compressed")).await;
    let echoed = client.next(WITHIN).await.unwrap();
    assert_eq!(echoed.payload, b"compressed");
    assert_eq!(series(&sluice, &outcome("msgs", "allowed")).await, 3.0);
}

#[tokio::test]
async fn a_gigabyte_message_is_refused_from_its_header_in_bounded_memory() {
    let upstream = WsUpstream::start().await;
    let rest = "[[rule]]\nname = \"msgs\"\nunit = \"message\"\nrate = \"1000/m\"\n";
    let (sluice, _dir) = sluice(&upstream, rest);
    let before = sluice.memory_kib("VmRSS");
    let (_, mut client) = WsClient::connect(sluice.addr, "/a", &[]).await;
    let mut header = vec![BINARY, 0x80 | 127];
    header.extend_from_slice(&(1u64 << 30).to_be_bytes());
    header.extend_from_slice(&[1, 2, 3, 4]);
    client.send(&header).await;
    // The client goes on sending what it announced; sluice has closed.
    let junk = vec![0x55u8; 1 << 20];
    let mut sent = 0;
    while sent < 64 {
        match tokio::time::timeout(Duration::from_secs(2), client.stream.write_all(&junk)).await {
            Ok(Ok(())) => sent += 1,
            _ => break,
        }
    }
    let after = sluice.memory_kib("VmRSS");
    assert!(
        after <= before + 8 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    let seen = upstream.conn(0).await;
    eventually(WITHIN, "the upstream got its Close", || async {
        seen.close.lock().unwrap().is_some()
    })
    .await;
    assert_eq!(seen.close.lock().unwrap().clone().unwrap().0, 1009);
    assert!(
        seen.bytes.lock().unwrap().len() < 64,
        "message bytes passed"
    );
}

#[tokio::test]
async fn delay_holds_the_client_while_the_servers_messages_keep_flowing() {
    let upstream = WsUpstream::start().await;
    let rest = "[[rule]]\nname = \"paced\"\nunit = \"message\"\nrate = \"4/s\"\nburst = 1\n\
                on_limit = \"delay\"\nmax_delay = \"10s\"\n";
    let (sluice, _dir) = sluice(&upstream, rest);
    // The upstream pushes a message every 20 ms.
    let (_, mut client) = WsClient::connect(sluice.addr, "/push/20", &[]).await;
    let started = Instant::now();
    for n in 0..5 {
        client.text(&format!("m{n}")).await;
    }
    // All five come back, 250 ms apart after the first; the pushes go on
    // arriving meanwhile.
    let mut echoes = Vec::new();
    let mut pushes = 0;
    while echoes.len() < 5 {
        let frame = client.next(WITHIN).await.expect("a frame");
        let text = String::from_utf8(frame.payload).unwrap();
        if text.starts_with("push") {
            pushes += 1;
        } else {
            echoes.push((text, started.elapsed()));
        }
    }
    let names: Vec<&str> = echoes.iter().map(|(text, _)| text.as_str()).collect();
    assert_eq!(names, ["m0", "m1", "m2", "m3", "m4"]);
    let last = echoes[4].1;
    assert!(last >= Duration::from_millis(900), "not paced: {echoes:?}");
    assert!(pushes >= 10, "only {pushes} pushes while held ({last:?})");
    reaches(&sluice, &outcome("paced", "delayed"), 4.0).await;
    assert_eq!(series(&sluice, &outcome("paced", "allowed")).await, 1.0);
    // The messages reached the upstream paced too.
    let seen = upstream.conn(0).await;
    assert_eq!(seen.messages.lock().unwrap().len(), 5);
}

#[tokio::test]
async fn a_message_that_would_wait_past_max_delay_is_closed_at_once() {
    let upstream = WsUpstream::start().await;
    let rest = "[[rule]]\nname = \"slow\"\nunit = \"message\"\nrate = \"1/m\"\n\
                on_limit = \"delay\"\nmax_delay = \"2s\"\n";
    let (sluice, _dir) = sluice(&upstream, rest);
    let (_, mut client) = WsClient::connect(sluice.addr, "/a", &[]).await;
    client.text("first").await;
    assert_eq!(client.next(WITHIN).await.unwrap().payload, b"first");
    let asked = Instant::now();
    client.text("second").await;
    let (_, close) = client.until_close(WITHIN).await;
    assert_eq!(close, Some((1008, "rate limited: slow".to_owned())));
    assert!(
        asked.elapsed() < Duration::from_millis(1500),
        "{:?}",
        asked.elapsed()
    );
}

#[tokio::test]
async fn each_key_has_its_own_budget_across_its_connections() {
    let upstream = WsUpstream::start().await;
    let rest = "[[rule]]\nname = \"per-user\"\nunit = \"message\"\nkey = [\"header:x-user\"]\n\
                missing = \"reject\"\nrate = \"2/m\"\n";
    let (sluice, _dir) = sluice(&upstream, rest);
    let alice = [("x-user", "alice")];
    let (_, mut first) = WsClient::connect(sluice.addr, "/a", &alice).await;
    let (_, mut bob) = WsClient::connect(sluice.addr, "/a", &[("x-user", "bob")]).await;
    first.text("a1").await;
    assert_eq!(first.next(WITHIN).await.unwrap().payload, b"a1");
    // Alice's second connection spends the same budget.
    let (_, mut second) = WsClient::connect(sluice.addr, "/a", &alice).await;
    second.text("a2").await;
    assert_eq!(second.next(WITHIN).await.unwrap().payload, b"a2");
    first.text("a3").await;
    let (_, close) = first.until_close(WITHIN).await;
    assert_eq!(close.map(|(code, _)| code), Some(1008));
    // Bob's is whole.
    for text in ["b1", "b2"] {
        bob.text(text).await;
        assert_eq!(bob.next(WITHIN).await.unwrap().payload, text.as_bytes());
    }
    // A handshake without the key is refused, as a request would be.
    let (status, _) = WsClient::connect(sluice.addr, "/a", &[]).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn the_gauge_counts_tunnels_open_with_and_without_a_message_rule() {
    let upstream = WsUpstream::start().await;
    let rest = "[[rule]]\nname = \"msgs\"\nunit = \"message\"\nmatch = { path = \"/metered\" }\n\
                rate = \"100/m\"\n";
    let (sluice, _dir) = sluice(&upstream, rest);
    let gauge = "sluice_websocket_connections";
    assert_eq!(series(&sluice, gauge).await, 0.0);
    let (_, mut metered) = WsClient::connect(sluice.addr, "/metered", &[]).await;
    let (_, mut plain) = WsClient::connect(sluice.addr, "/plain", &[]).await;
    reaches(&sluice, gauge, 2.0).await;
    metered.text("counted").await;
    plain.text("copied").await;
    assert_eq!(metered.next(WITHIN).await.unwrap().payload, b"counted");
    assert_eq!(plain.next(WITHIN).await.unwrap().payload, b"copied");
    assert_eq!(series(&sluice, &outcome("msgs", "allowed")).await, 1.0);
    // A client's Close is forwarded; the upstream answers: that tunnel
    // ends, and only that one (docs/conversation.md, "When a tunnel ends").
    metered.send(&masked(0x88, &1000u16.to_be_bytes())).await;
    let (_, close) = metered.until_close(WITHIN).await;
    assert_eq!(close.map(|(code, _)| code), Some(1000));
    reaches(&sluice, gauge, 1.0).await;
    drop((metered, plain));
    reaches(&sluice, gauge, 0.0).await;
}

#[tokio::test]
async fn check_and_admin_rules_say_a_rule_counts_messages() {
    let upstream = WsUpstream::start().await;
    let rest = "max_message_bytes = 4096\n\n[[rule]]\nname = \"chat\"\nunit = \"message\"\n\
                rate = \"10/s\"\n";
    let (sluice, dir) = sluice(&upstream, rest);
    let said = checked(&dir.path().join("sluice.toml"));
    assert!(
        said.contains(
            "rule chat: counts messages, not requests (unit = message): each a client sends on \
             the WebSocket tunnels its handshakes open and on the gRPC calls it matches, at most \
             4096 bytes (server.max_message_bytes)"
        ),
        "{said}"
    );
    let rules = get(&sluice.admin_url("/admin/rules"), &[]).await.json();
    assert_eq!(rules["rules"][0]["unit"], "message", "{rules}");
}

#[tokio::test]
async fn the_status_page_says_a_rule_counts_messages() {
    let upstream = WsUpstream::start().await;
    let rest = "[[rule]]\nname = \"chat\"\nunit = \"message\"\nrate = \"10/s\"\n";
    let (sluice, _dir) = sluice(&upstream, rest);
    let status = get(&sluice.admin_url("/admin/status"), &[]).await.json();
    assert_eq!(
        status["rules"][0]["limits"], "10/s WebSocket and gRPC messages",
        "{status}"
    );
}

#[tokio::test]
async fn instances_sharing_redis_share_a_message_budget_and_a_dead_store_closes_with_1013() {
    let mut redis = RedisServer::start();
    let upstream = WsUpstream::start().await;
    let rest = format!(
        "[store]\nbackend = \"redis\"\n[store.redis]\nurl = \"{}\"\ntimeout = \"1s\"\n\
         on_error = \"deny\"\n\n[[rule]]\nname = \"msgs\"\nunit = \"message\"\n\
         key = [\"header:x-user\"]\nrate = \"3/m\"\n",
        redis.url()
    );
    let (a, _dir_a) = sluice(&upstream, &rest);
    let (b, _dir_b) = sluice(&upstream, &rest);

    // One caller's three messages a minute, spent through both instances.
    let user = [("x-user", "ada")];
    let (status, mut through_a) = WsClient::connect(a.addr, "/chat", &user).await;
    assert_eq!(status, 101);
    let (status, mut through_b) = WsClient::connect(b.addr, "/chat", &user).await;
    assert_eq!(status, 101);
    for (through, text) in [(0, &b"one"[..]), (1, b"two"), (0, b"three")] {
        let client = if through == 0 {
            &mut through_a
        } else {
            &mut through_b
        };
        client.send(&masked(TEXT, text)).await;
        assert_eq!(client.next(WITHIN).await.expect("the echo").payload, text);
    }
    through_b.send(&masked(TEXT, b"four")).await;
    let (_, close) = through_b.until_close(WITHIN).await;
    assert_eq!(close, Some((1008, "rate limited: msgs".to_owned())));
    // Another caller has a budget of their own.
    let (_, mut other) = WsClient::connect(a.addr, "/chat", &[("x-user", "bob")]).await;
    other.send(&masked(TEXT, b"hello")).await;
    assert_eq!(other.next(WITHIN).await.unwrap().payload, b"hello");

    // With Redis gone, `on_error = "deny"`: no message passes undecided,
    // and the client is told to try again later.
    redis.kill();
    other.send(&masked(TEXT, b"anyone?")).await;
    let (_, close) = other.until_close(WITHIN).await;
    assert_eq!(
        close,
        Some((1013, "try again later: limits unavailable".to_owned()))
    );
    let seen = upstream.conn(2).await;
    eventually(WITHIN, "the upstream got its Close", || async {
        seen.close.lock().unwrap().is_some()
    })
    .await;
    let passed: Vec<Vec<u8>> = (seen.messages.lock().unwrap().iter())
        .map(|(_, payload)| payload.clone())
        .collect();
    assert_eq!(passed, [b"hello".to_vec()]);
}
