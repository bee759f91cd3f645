//! HTTP/3 at the edge (docs/edge.md, "HTTP/3"): a real quinn/h3 client
//! against sluice in-process, on the TLS listener's port over UDP; and
//! spoofed first packets (genuine Initials whose sender never answers),
//! which must cost no budget and no TLS work.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Buf;
use http::StatusCode;

use crate::support::certs::TestCa;
use crate::support::h3_client::{self, H3Client};
use crate::support::tls_client::{self, HttpsConnection, H2_AND_H1};
use crate::support::{assert_problem, eventually, post_json, Sluice, Upstream};

/// sluice in-process with TLS and HTTP/3 for `localhost`: `server` more
/// `[server]` keys, `tls` more `[server.tls]` keys, `rest` after it.
async fn h3_sluice(
    ca: &TestCa,
    dir: &std::path::Path,
    server: &str,
    tls: &str,
    rest: &str,
) -> (Upstream, Sluice) {
    ca.write_leaf(dir, "localhost", &["localhost", "127.0.0.1"]);
    let upstream = Upstream::start().await;
    let config = format!(
        "[server]\nupstream = \"http://{{upstream}}\"\n{server}\n\
         [server.tls]\ncerts = [{{ cert = \"{cert}\", key = \"{key}\" }}]\nhttp3 = true\n\
         {tls}\n{rest}",
        cert = dir.join("localhost.pem").display(),
        key = dir.join("localhost.key").display(),
    );
    let sluice = Sluice::start(&config, upstream.addr).await;
    (upstream, sluice)
}

const PER_IP_3: &str = "[[rule]]\nname = \"per-ip\"\nkey = [\"ip\"]\nrate = \"3/m\"\n";

/// `sluice_requests_total` of the rule `per-ip`, for `outcome`.
async fn per_ip(sluice: &Sluice, outcome: &str) -> f64 {
    let series = format!("sluice_requests_total{{rule=\"per-ip\",outcome=\"{outcome}\"}}");
    sluice.metric(&series).await
}

/// `sluice_connections` for `protocol`.
async fn open(sluice: &Sluice, protocol: &str) -> f64 {
    let series = format!("sluice_connections{{protocol=\"{protocol}\"}}");
    sluice.metric(&series).await
}

async fn handshakes(sluice: &Sluice, result: &str) -> f64 {
    let series = format!("sluice_tls_handshakes_total{{result=\"{result}\"}}");
    sluice.metric(&series).await
}

#[tokio::test]
async fn http3_is_forwarded_and_limited_as_tcp_is_in_one_budget() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let server = format!("access_log = {:?}", log.display().to_string());
    let (upstream, sluice) = h3_sluice(&ca, dir.path(), &server, "", PER_IP_3).await;

    let mut h3 = H3Client::connect(ca.pem(), sluice.addr, "localhost").await;
    let got = h3.get("/over-h3", &[]).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    assert_eq!(got.headers["x-ratelimit-remaining"], "2");
    // Over HTTP/3, no word of HTTP/3.
    assert!(got.headers.get("alt-svc").is_none());
    let seen = upstream.seen();
    assert_eq!(seen[0].target, "/over-h3");
    assert_eq!(seen[0].headers["x-forwarded-proto"], "https");
    assert_eq!(seen[0].headers["x-forwarded-for"], "127.0.0.1");
    // A GET is forwarded without a body, as over TCP.
    assert!(seen[0].headers.get("transfer-encoding").is_none());

    // The same client over TCP: the same bucket, and told where HTTP/3 is.
    let tcp = tls_client::connect(
        &tls_client::verifying(ca.pem(), H2_AND_H1),
        sluice.addr,
        "localhost",
    )
    .await;
    let mut h2 = HttpsConnection::over(tcp).await;
    let got = h2.get("localhost", "/over-h2", &[]).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.headers["x-ratelimit-remaining"], "1");
    let port = sluice.addr.port();
    assert_eq!(got.headers["alt-svc"], format!("h3=\":{port}\"; ma=86400"));

    assert_eq!(h3.get("/", &[]).await.status, StatusCode::OK);
    let refused = h3.get("/", &[]).await;
    let body = assert_problem(&refused, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["rule"], "per-ip");
    assert!(refused.headers.contains_key("retry-after"));
    assert_eq!(upstream.seen().len(), 3);
    assert_eq!(per_ip(&sluice, "allowed").await, 3.0);
    assert_eq!(per_ip(&sluice, "limited").await, 1.0);

    assert_eq!(open(&sluice, "h3").await, 1.0);
    assert_eq!(open(&sluice, "h2").await, 1.0);
    assert_eq!(open(&sluice, "http1").await, 0.0);
    assert_eq!(handshakes(&sluice, "ok").await, 2.0);
    // The status page counts them by protocol too.
    let status = crate::support::get(&format!("http://{}/admin/status", sluice.admin), &[]).await;
    let connections = &status.json()["connections"];
    assert_eq!(
        (connections["http1"].as_i64(), connections["h2"].as_i64()),
        (Some(0), Some(1))
    );
    assert_eq!(connections["h3"], 1);
    let page = crate::support::get(&format!("http://{}/", sluice.admin), &[]).await;
    assert!(
        page.body
            .contains("HTTP/1.1 0 \u{b7} HTTP/2 1 \u{b7} HTTP/3 1"),
        "{}",
        page.body
    );
    h3.connection.close(0u32.into(), b"done");
    eventually(
        Duration::from_secs(5),
        "the HTTP/3 connection counted as closed",
        || async { open(&sluice, "h3").await == 0.0 },
    )
    .await;

    // Each line says which protocol the client spoke.
    let lines = || -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    };
    eventually(Duration::from_secs(5), "four access log lines", || async {
        lines().len() == 4
    })
    .await;
    let protocols: Vec<String> = lines()
        .iter()
        .map(|l| l["protocol"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(protocols, ["HTTP/3", "HTTP/2", "HTTP/3", "HTTP/3"]);
    assert_eq!(lines()[3]["status"], 429);
}

/// The TLS listener's certificates and SNI choice (docs/edge.md, "TLS and
/// certificate rotation"), over QUIC too.
#[tokio::test]
async fn sni_picks_the_certificate_over_quic_as_over_tcp() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let pair = |stem: &str, name: &str| {
        let (cert, key) = ca.write_leaf(dir.path(), stem, &[name]);
        format!(
            "{{ cert = \"{}\", key = \"{}\" }}",
            cert.display(),
            key.display()
        )
    };
    // `localhost` first (the default), then `api.test`.
    let certs = [pair("localhost", "localhost"), pair("api", "api.test")].join(", ");
    let upstream = Upstream::start().await;
    let config = format!(
        "[server]\nupstream = \"http://{{upstream}}\"\n\
         [server.tls]\ncerts = [{certs}]\nhttp3 = true\n"
    );
    let sluice = Sluice::start(&config, upstream.addr).await;
    // Each name gets the certificate that names it (the client verifies
    // it against that name); an unknown one the default.
    for name in ["api.test", "localhost"] {
        let mut h3 = H3Client::connect(ca.pem(), sluice.addr, name).await;
        assert_eq!(h3.get("/", &[]).await.status, StatusCode::OK, "{name}");
    }
    let unknown = H3Client::try_connect(ca.pem(), sluice.addr, "other.test").await;
    assert!(
        unknown.is_err(),
        "other.test was served a certificate naming it"
    );
}

#[tokio::test]
async fn a_body_over_http3_arrives_byte_for_byte() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let (_upstream, sluice) = h3_sluice(&ca, dir.path(), "", "", "").await;
    let mut h3 = H3Client::connect(ca.pem(), sluice.addr, "localhost").await;
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let length = body.len().to_string();
    for headers in [vec![("content-length", length.as_str())], vec![]] {
        let got = h3.request("POST", "/upload", &headers, Some(&body)).await;
        assert_eq!(got.status, StatusCode::OK, "{}", got.body);
        assert_eq!(got.body, length, "with {headers:?}");
    }
}

#[tokio::test]
async fn spoofed_addresses_are_sent_retries_and_move_no_budget_nor_tls_work() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let (_upstream, sluice) =
        h3_sluice(&ca, dir.path(), "", "quic_retry = \"always\"", PER_IP_3).await;

    // Genuine Initials from 20 addresses that never answer what comes back.
    let initial = h3_client::spoofed_initial(sluice.addr);
    for last in 2..22u8 {
        let from = SocketAddr::from(([127, 0, 0, last], 0));
        let socket = tokio::net::UdpSocket::bind(from).await.unwrap();
        socket.send_to(&initial, sluice.addr).await.unwrap();
        let mut answer = [0u8; 1500];
        let (n, _) = tokio::time::timeout(Duration::from_secs(5), socket.recv_from(&mut answer))
            .await
            .expect("an answer to the Initial")
            .unwrap();
        assert!(
            h3_client::is_retry(&answer[..n]),
            "a Retry, got {:02x?}",
            &answer[..n.min(8)]
        );
    }
    assert_eq!(sluice.metric("sluice_quic_retries_total").await, 20.0);
    // No handshake began: nothing succeeded, failed or is open.
    assert_eq!(handshakes(&sluice, "ok").await, 0.0);
    assert_eq!(handshakes(&sluice, "error").await, 0.0);
    assert_eq!(open(&sluice, "h3").await, 0.0);

    // A real client answers its Retry and is served, charged once a
    // request.
    let mut h3 = H3Client::connect(ca.pem(), sluice.addr, "localhost").await;
    assert_eq!(h3.get("/", &[]).await.status, StatusCode::OK);
    assert_eq!(sluice.metric("sluice_quic_retries_total").await, 21.0);
    assert_eq!(handshakes(&sluice, "ok").await, 1.0);
    assert_eq!(per_ip(&sluice, "allowed").await, 1.0);
    assert_eq!(per_ip(&sluice, "limited").await, 0.0);
}

#[tokio::test]
async fn a_denied_or_banned_address_is_proved_then_refused_at_the_handshake() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    // "never": the refusal waits for the proof all the same.
    let retry_never = "quic_retry = \"never\"";
    let denied = "[access]\ndeny = [\"127.0.0.1/32\"]\n";
    let (upstream, sluice) = h3_sluice(&ca, dir.path(), "", retry_never, denied).await;
    let refused = H3Client::try_connect(ca.pem(), sluice.addr, "localhost").await;
    assert!(refused_connection(&refused), "{:?}", refused.err());
    assert_eq!(sluice.metric("sluice_quic_retries_total").await, 1.0);
    assert_eq!(handshakes(&sluice, "ok").await, 0.0);
    assert_eq!(upstream.count(), 0);
    drop(sluice);

    let dir = tempfile::tempdir().unwrap();
    let admin = "[admin]\nreveal_keys = true\n";
    let (_upstream, sluice) = h3_sluice(
        &ca,
        dir.path(),
        "",
        retry_never,
        &format!("{admin}{PER_IP_3}"),
    )
    .await;
    let mut h3 = H3Client::connect(ca.pem(), sluice.addr, "localhost").await;
    assert_eq!(h3.get("/", &[]).await.status, StatusCode::OK);
    let url = format!("http://{}/admin/bans", sluice.admin);
    let banned = post_json(
        &url,
        r#"{"rule":"per-ip","key":"127.0.0.1","for":"10m"}"#,
        &[],
    )
    .await;
    assert_eq!(banned.status, StatusCode::CREATED, "{}", banned.body);
    // The connection open goes on, each request refused as banned.
    let got = h3.get("/", &[]).await;
    assert_eq!(
        assert_problem(&got, StatusCode::TOO_MANY_REQUESTS)["banned"],
        true
    );
    // A new one is refused before its handshake, and moves nothing.
    let refused = H3Client::try_connect(ca.pem(), sluice.addr, "localhost").await;
    assert!(refused_connection(&refused), "{:?}", refused.err());
    assert_eq!(handshakes(&sluice, "ok").await, 1.0);
    assert_eq!(per_ip(&sluice, "allowed").await, 1.0);
}

/// Whether a connection attempt was closed with `CONNECTION_REFUSED`.
fn refused_connection(attempt: &Result<H3Client, quinn::ConnectionError>) -> bool {
    match attempt {
        Err(quinn::ConnectionError::ConnectionClosed(close)) => {
            close.error_code == quinn::TransportErrorCode::CONNECTION_REFUSED
        }
        _ => false,
    }
}

#[tokio::test]
async fn max_connections_counts_quic_connections() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let (_upstream, sluice) = h3_sluice(&ca, dir.path(), "max_connections = 1", "", "").await;
    // A TCP connection takes the one place: a QUIC one is refused.
    let tcp = tls_client::connect(
        &tls_client::verifying(ca.pem(), H2_AND_H1),
        sluice.addr,
        "localhost",
    )
    .await;
    let mut tcp = HttpsConnection::over(tcp).await;
    assert_eq!(tcp.get("localhost", "/", &[]).await.status, StatusCode::OK);
    let refused = H3Client::try_connect(ca.pem(), sluice.addr, "localhost").await;
    assert!(refused_connection(&refused), "{:?}", refused.err());
    drop(tcp);
    // Once it closed, a QUIC connection takes it, and TCP finds no room.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut h3 = loop {
        match H3Client::try_connect(ca.pem(), sluice.addr, "localhost").await {
            Ok(h3) => break h3,
            Err(error) => assert!(std::time::Instant::now() < deadline, "no room: {error}"),
        }
    };
    assert_eq!(h3.get("/", &[]).await.status, StatusCode::OK);
    let connector = tls_client::verifying(ca.pem(), H2_AND_H1);
    let tcp = tokio::net::TcpStream::connect(sluice.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    // Answered with the cap's plain 503, which no TLS client takes.
    assert!(connector.connect(name, tcp).await.is_err());
}

#[tokio::test]
async fn a_handshake_that_does_not_finish_in_header_read_timeout_is_dropped() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let server = "header_read_timeout = \"1s\"";
    let (_upstream, sluice) =
        h3_sluice(&ca, dir.path(), server, "quic_retry = \"never\"", "").await;
    // A first packet, then silence: the handshake begins and never ends.
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket
        .send_to(&h3_client::spoofed_initial(sluice.addr), sluice.addr)
        .await
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "the handshake counted as failed",
        || async { handshakes(&sluice, "error").await == 1.0 },
    )
    .await;
    assert_eq!(sluice.metric("sluice_quic_retries_total").await, 0.0);
    assert_eq!(open(&sluice, "h3").await, 0.0);
}

#[tokio::test]
async fn shutdown_sends_goaway_and_closes_an_idle_connection_at_once() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let (_upstream, sluice) = h3_sluice(&ca, dir.path(), "shutdown_grace = \"30s\"", "", "").await;
    let mut h3 = H3Client::connect(ca.pem(), sluice.addr, "localhost").await;
    assert_eq!(h3.get("/", &[]).await.status, StatusCode::OK);
    // Well within the grace: nothing is in flight, so nothing to wait for.
    tokio::time::timeout(Duration::from_secs(5), sluice.shutdown())
        .await
        .expect("shutdown waited on an idle HTTP/3 connection");
    let closed = tokio::time::timeout(Duration::from_secs(5), h3.connection.closed())
        .await
        .expect("the connection closed");
    match closed {
        quinn::ConnectionError::ApplicationClosed(close) => {
            assert_eq!(
                close.error_code,
                quinn::VarInt::from_u32(0x100),
                "{close:?}"
            )
        }
        other => panic!("closed with {other:?}"),
    }
}

/// How long the client below takes nothing: past `send_timeout` (1 s).
const STALL: Duration = Duration::from_millis(2_500);

#[tokio::test]
async fn an_answer_the_client_takes_nothing_of_is_abandoned_after_send_timeout() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let (_upstream, sluice) = h3_sluice(&ca, dir.path(), "send_timeout = \"1s\"", "", "").await;
    let mut h3 = H3Client::connect(ca.pem(), sluice.addr, "localhost").await;
    // 64 MiB: far more than the windows of the stream, the connection and
    // the sockets between hold.
    let total = 64 << 20;
    let mut stream = h3.open(&format!("/download/{total}")).await;
    tokio::time::sleep(STALL).await;
    let mut got = 0usize;
    let ended = loop {
        match stream.recv_data().await {
            Ok(Some(data)) => got += data.remaining(),
            Ok(None) => break Ok(()),
            Err(error) => break Err(error),
        }
    };
    assert!(ended.is_err(), "the whole answer came: {got} bytes");
    assert!(got < total, "{got}");
    // The connection goes on.
    assert_eq!(h3.get("/", &[]).await.status, StatusCode::OK);
}

/// Another make of client (Python's aioquic): served through a Retry, and
/// when it resumes its session, its request is not taken as early data,
/// so it is charged once, after the handshake.
#[tokio::test]
async fn an_aioquic_client_is_served_and_its_early_data_declined() {
    const TEST: &str = "http3::an_aioquic_client_is_served_and_its_early_data_declined";
    let has_aioquic = std::process::Command::new("python3")
        .args(["-c", "import aioquic"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !has_aioquic {
        println!("SKIPPED {TEST}: needs aioquic (pip install aioquic)");
        return;
    }
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let ca_pem = ca.write(dir.path(), "ca");
    let (upstream, sluice) =
        h3_sluice(&ca, dir.path(), "", "quic_retry = \"always\"", PER_IP_3).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/h3_aioquic.py");
    let run = tokio::process::Command::new("python3")
        .arg(script)
        .arg(&ca_pem)
        .arg(sluice.addr.port().to_string())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("aioquic's client done in 30 s")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["first"]["status"], 200, "{got}");
    assert_eq!(
        got["first"]["headers"]["x-ratelimit-remaining"], "2",
        "{got}"
    );
    assert_eq!(got["second"]["status"], 200, "{got}");
    assert_eq!(
        got["second"]["headers"]["x-ratelimit-remaining"], "1",
        "{got}"
    );
    // Proved by a Retry first.
    assert_eq!(got["retries"], 1, "{got}");
    // Resumed with a ticket that offered no early data.
    assert!(got["tickets"].as_u64().unwrap() >= 1, "{got}");
    assert_eq!(got["resumed"], true, "{got}");
    assert_eq!(got["ticket_offers_early_data"], false, "{got}");
    assert_eq!(got["early_data_accepted"], false, "{got}");
    assert_eq!(per_ip(&sluice, "allowed").await, 2.0);
    assert_eq!(upstream.count(), 2);
}
