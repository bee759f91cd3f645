//! HTTPS on the listener (docs/edge.md, "TLS and certificate rotation"):
//! real TLS clients (rustls) against sluice in-process and the real binary,
//! with certificates a test CA makes.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::certs::{Leaf, TestCa};
use crate::support::tls_client::{self, HttpsConnection, H1, H2_AND_H1};
use crate::support::{eventually, metric, write_config, Sluice, SluiceProcess, Upstream};

/// `[server.tls]` serving the pairs `stems` in `dir`, in that order.
fn tls_table(dir: &std::path::Path, stems: &[&str]) -> String {
    let certs: Vec<String> = stems
        .iter()
        .map(|stem| {
            format!(
                "{{ cert = \"{}\", key = \"{}\" }}",
                dir.join(format!("{stem}.pem")).display(),
                dir.join(format!("{stem}.key")).display()
            )
        })
        .collect();
    format!("[server.tls]\ncerts = [{}]\n", certs.join(", "))
}

/// sluice in-process with TLS for `localhost`, a rule, and `more` `[server]`
/// keys.
async fn https_sluice(
    ca: &TestCa,
    dir: &std::path::Path,
    more: &str,
    rules: &str,
) -> (Upstream, Sluice) {
    ca.write_leaf(dir, "localhost", &["localhost", "127.0.0.1"]);
    let upstream = Upstream::start().await;
    let config = format!(
        "[server]\nupstream = \"http://{{upstream}}\"\n{more}{}{rules}",
        tls_table(dir, &["localhost"])
    );
    let sluice = Sluice::start(&config, upstream.addr).await;
    (upstream, sluice)
}

const PER_IP_3: &str = "[[rule]]\nname = \"per-ip\"\nkey = [\"ip\"]\nrate = \"3/m\"\n";

#[tokio::test]
async fn https_forwards_over_http1_and_http2_and_says_so_upstream() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let (upstream, sluice) = https_sluice(&ca, dir.path(), "", "").await;

    let h1 = tls_client::connect(
        &tls_client::verifying(ca.pem(), H1),
        sluice.addr,
        "localhost",
    )
    .await;
    assert_eq!(tls_client::alpn(&h1).as_deref(), Some(&b"http/1.1"[..]));
    let mut h1 = HttpsConnection::over(h1).await;
    let got = h1.get("localhost", "/over-h1", &[]).await;
    assert_eq!(got.status, StatusCode::OK);

    let h2 = tls_client::connect(
        &tls_client::verifying(ca.pem(), H2_AND_H1),
        sluice.addr,
        "localhost",
    )
    .await;
    assert_eq!(tls_client::alpn(&h2).as_deref(), Some(&b"h2"[..]));
    let mut h2 = HttpsConnection::over(h2).await;
    assert_eq!(h2.version, http::Version::HTTP_2);
    let got = h2.get("localhost", "/over-h2", &[]).await;
    assert_eq!(got.status, StatusCode::OK);

    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    for request in &seen {
        assert_eq!(request.headers["x-forwarded-proto"], "https", "{request:?}");
    }
    assert_eq!(
        sluice
            .metric("sluice_tls_handshakes_total{result=\"ok\"}")
            .await,
        2.0
    );
}

#[tokio::test]
async fn http2_over_tls_is_limited_like_http1() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let (upstream, sluice) = https_sluice(&ca, dir.path(), "", PER_IP_3).await;

    let h2 = tls_client::connect(
        &tls_client::verifying(ca.pem(), H2_AND_H1),
        sluice.addr,
        "localhost",
    )
    .await;
    let mut h2 = HttpsConnection::over(h2).await;
    let mut statuses = Vec::new();
    for _ in 0..2 {
        statuses.push(h2.get("localhost", "/", &[]).await.status);
    }
    // The same client over HTTP/1.1 on another connection: one bucket.
    let mut h1 = HttpsConnection::over(
        tls_client::connect(
            &tls_client::verifying(ca.pem(), H1),
            sluice.addr,
            "localhost",
        )
        .await,
    )
    .await;
    statuses.push(h1.get("localhost", "/", &[]).await.status);
    let refused = h1.get("localhost", "/", &[]).await;
    statuses.push(refused.status);
    let refused_h2 = h2.get("localhost", "/", &[]).await;
    statuses.push(refused_h2.status);
    assert_eq!(
        statuses,
        [200, 200, 200, 429, 429].map(|code| StatusCode::from_u16(code).unwrap())
    );
    assert_eq!(refused_h2.headers["x-ratelimit-limit"], "3");
    assert_eq!(upstream.count(), 3);
}

#[tokio::test]
async fn sni_picks_the_exact_name_then_a_wildcard_then_the_first() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let leaves: Vec<(&str, Leaf)> = vec![
        ("default", ca.leaf(&["default.test"])),
        ("wildcard", ca.leaf(&["*.example.com"])),
        ("api", ca.leaf(&["api.example.com"])),
    ];
    for (stem, leaf) in &leaves {
        leaf.write(dir.path(), stem);
    }
    let upstream = Upstream::start().await;
    let config = format!(
        "[server]\nupstream = \"http://{{upstream}}\"\n{}",
        tls_table(dir.path(), &["default", "wildcard", "api"])
    );
    let sluice = Sluice::start(&config, upstream.addr).await;

    let served = |name: &'static str| {
        let addr = sluice.addr;
        async move {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let _stream =
                tls_client::connect(&tls_client::recording(seen.clone()), addr, name).await;
            let der = seen.lock().unwrap()[0].clone();
            der
        }
    };
    let stem_of = |der: &rustls::pki_types::CertificateDer<'_>| {
        leaves
            .iter()
            .find(|(_, leaf)| der_of(&leaf.cert_pem) == der.to_vec())
            .map(|(stem, _)| *stem)
            .unwrap()
    };
    for (name, stem) in [
        ("api.example.com", "api"),
        ("www.example.com", "wildcard"),
        ("API.EXAMPLE.COM", "api"),
        ("example.com", "default"),
        ("deep.www.example.com", "default"),
        ("other.test", "default"),
        // An address as the name: the client sends no SNI.
        ("127.0.0.1", "default"),
    ] {
        assert_eq!(stem_of(&served(name).await), stem, "{name}");
    }
    // And a verifying client accepts what it was given.
    let got = tls_client::get(ca.pem(), sluice.addr, "www.example.com", "/").await;
    assert_eq!(got.status, StatusCode::OK);
}

/// The DER of the (first) certificate in `pem`.
fn der_of(pem: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

#[tokio::test]
async fn a_handshake_that_never_comes_is_closed_within_header_read_timeout() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let (_upstream, sluice) =
        https_sluice(&ca, dir.path(), "header_read_timeout = \"1s\"\n", "").await;
    let mut silent = TcpStream::connect(sluice.addr).await.unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(10), silent.read(&mut buf))
        .await
        .expect("closed, not left hanging");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    // Half a ClientHello, then silence: the same.
    let mut half = TcpStream::connect(sluice.addr).await.unwrap();
    half.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    let read = tokio::time::timeout(Duration::from_secs(10), half.read(&mut buf))
        .await
        .expect("closed, not left hanging");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert_eq!(
        sluice
            .metric("sluice_tls_handshakes_total{result=\"error\"}")
            .await,
        2.0
    );
}

#[tokio::test]
async fn plain_http_sent_to_the_tls_port_is_answered_400() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let (upstream, sluice) = https_sluice(&ca, dir.path(), "", "").await;
    let mut plain = TcpStream::connect(sluice.addr).await.unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut answer))
        .await
        .expect("answered and closed")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert!(answer.contains("plain HTTP"), "{answer}");
    // Its id, on the head and in the document, as on every answer.
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let id = head
        .lines()
        .find_map(|line| line.strip_prefix("x-request-id: "))
        .expect("an x-request-id");
    let document: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(document["request_id"], id);
    assert_eq!(upstream.count(), 0);
}

#[tokio::test]
async fn a_tls_1_2_client_is_served() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let (_upstream, sluice) = https_sluice(&ca, dir.path(), "", "").await;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(ca.pem().as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(sluice::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let stream = tls_client::connect(&connector, sluice.addr, "localhost").await;
    assert_eq!(
        stream.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
    let got = HttpsConnection::over(stream)
        .await
        .get("localhost", "/", &[])
        .await;
    assert_eq!(got.status, StatusCode::OK);
}

/// The leaf the server at `addr` presents now, as DER.
async fn presented(addr: SocketAddr) -> Vec<u8> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let _stream =
        tls_client::connect(&tls_client::recording(seen.clone()), addr, "localhost").await;
    let der = seen.lock().unwrap()[0].to_vec();
    der
}

/// Writes `leaf` over `dir/<stem>.pem|.key` as certbot does: into new
/// files, renamed into place.
fn rename_into_place(dir: &std::path::Path, stem: &str, leaf: &Leaf) {
    leaf.write(dir, "incoming");
    std::fs::rename(dir.join("incoming.key"), dir.join(format!("{stem}.key"))).unwrap();
    std::fs::rename(dir.join("incoming.pem"), dir.join(format!("{stem}.pem"))).unwrap();
}

#[tokio::test]
async fn certificates_rotate_by_atomic_rename_and_open_connections_stay() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let first = ca.leaf(&["localhost"]);
    first.write(dir.path(), "localhost");
    let upstream = Upstream::start().await;
    let config = write_config(
        dir.path(),
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n{}[admin]\nlisten = \"127.0.0.1:0\"\n",
            upstream.addr,
            tls_table(dir.path(), &["localhost"])
        ),
    );
    let sluice = SluiceProcess::spawn(&config);
    assert_eq!(presented(sluice.addr).await, der_of(&first.cert_pem));
    let mut open = HttpsConnection::over(
        tls_client::connect(
            &tls_client::verifying(ca.pem(), H1),
            sluice.addr,
            "localhost",
        )
        .await,
    )
    .await;
    assert_eq!(open.get("localhost", "/", &[]).await.status, StatusCode::OK);

    // A pair that does not load keeps the running one and counts an error.
    std::fs::write(
        dir.path().join("localhost.key"),
        "-----BEGIN PRIVATE KEY-----\nbroken\n",
    )
    .unwrap();
    let metrics = format!("http://{}/metrics", sluice.admin);
    eventually(
        Duration::from_secs(10),
        "the failed rotation counted",
        || async {
            let text = crate::support::get(&metrics, &[]).await.body;
            metric(&text, "sluice_config_reloads_total{result=\"error\"}") == Some(1.0)
        },
    )
    .await;
    assert_eq!(presented(sluice.addr).await, der_of(&first.cert_pem));
    assert!(!sluice.logged("TLS certificates not rotated").is_empty());

    let second = ca.leaf(&["localhost"]);
    rename_into_place(dir.path(), "localhost", &second);
    eventually(
        Duration::from_secs(10),
        "the new certificate served",
        || async { presented(sluice.addr).await == der_of(&second.cert_pem) },
    )
    .await;
    // The connection opened before the rotation is still served.
    assert_eq!(open.get("localhost", "/", &[]).await.status, StatusCode::OK);

    // A reload reads the files again, and a new config's list.
    let third = ca.leaf(&["localhost"]);
    third.write(dir.path(), "other");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n{}[admin]\nlisten = \"127.0.0.1:0\"\n",
            upstream.addr,
            tls_table(dir.path(), &["other"])
        ),
    )
    .unwrap();
    sluice.signal("HUP");
    eventually(
        Duration::from_secs(10),
        "the reloaded list served",
        || async { presented(sluice.addr).await == der_of(&third.cert_pem) },
    )
    .await;
    assert_eq!(open.get("localhost", "/", &[]).await.status, StatusCode::OK);
}

#[test]
fn check_names_the_hosts_each_certificate_serves() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    ca.write_leaf(dir.path(), "api", &["api.example.com", "*.example.com"]);
    let config = write_config(
        dir.path(),
        "[server]\nupstream = \"http://127.0.0.1:3000\"\n\
         [server.tls]\ncerts = [{ cert = \"api.pem\", key = \"api.key\" }]\n",
    );
    let output = std::process::Command::new(crate::support::binary())
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.contains("api.pem (api.example.com *.example.com)"),
        "{stdout}"
    );
}

#[tokio::test]
async fn the_proxy_protocol_header_comes_before_the_handshake() {
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let (upstream, sluice) = https_sluice(
        &ca,
        dir.path(),
        "proxy_protocol = true\ntrusted_proxies = [\"127.0.0.1\"]\n",
        PER_IP_3,
    )
    .await;
    let mut statuses = Vec::new();
    for client in [
        "203.0.113.7",
        "203.0.113.7",
        "203.0.113.7",
        "203.0.113.7",
        "198.51.100.9",
    ] {
        let mut tcp = TcpStream::connect(sluice.addr).await.unwrap();
        tcp.write_all(format!("PROXY TCP4 {client} 127.0.0.1 40000 443\r\n").as_bytes())
            .await
            .unwrap();
        let stream =
            tls_client::connect_over(&tls_client::verifying(ca.pem(), H1), tcp, "localhost").await;
        let got = HttpsConnection::over(stream)
            .await
            .get("localhost", "/", &[])
            .await;
        statuses.push(got.status.as_u16());
    }
    // The carried client is the one limited, over TLS.
    assert_eq!(statuses, [200, 200, 200, 429, 200]);
    let seen = upstream.seen();
    assert_eq!(seen[0].headers["x-forwarded-for"], "203.0.113.7");
    assert_eq!(seen[3].headers["x-forwarded-for"], "198.51.100.9");
    assert_eq!(seen[3].headers["x-forwarded-proto"], "https");
}
