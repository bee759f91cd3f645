//! https upstreams (docs/edge.md, "HTTPS upstreams"):
//! sluice speaks TLS to a real TLS upstream on loopback, with SNI = the
//! URL's host, verified against `upstream_ca` or the system's roots; keeps
//! its TLS connections alive and resumes sessions on new ones; and answers
//! a certificate that does not verify with a 502, counted as
//! `kind="tls"`, never falling back to plaintext.

use crate::support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::StatusCode;
use support::certs::{Leaf, TestCa};
use support::{assert_problem, eventually, get, post_json, Sluice, SluiceProcess, Upstream};
use tokio::net::TcpListener;

const TLS_ERRORS: &str = r#"sluice_upstream_errors_total{upstream="default",kind="tls"}"#;

/// sluice in front of `upstream` (a URL), verifying it against `ca` (a PEM
/// file) or, with `None`, the system's roots.
async fn sluice_for(upstream: &str, ca: Option<&Path>) -> Sluice {
    let ca = ca.map_or(String::new(), |ca| {
        format!("upstream_ca = \"{}\"\n", ca.display())
    });
    let config = format!(
        "[server]\nupstream = \"{upstream}\"\n{ca}\n[[rule]]\nname = \"per-ip\"\nrate = \"1000/s\"\n"
    );
    // The address is in the URL already.
    Sluice::start(&config, "127.0.0.1:1".parse().unwrap()).await
}

/// A CA written to `dir`, and a TLS upstream with a leaf it signed for
/// `localhost` and 127.0.0.1.
async fn upstream_signed_by_a_test_ca(dir: &Path) -> (std::path::PathBuf, Upstream) {
    let ca = TestCa::new("upstream test CA");
    let path = ca.write(dir, "upstream-ca");
    let upstream = Upstream::start_tls(&ca.leaf(&["localhost", "127.0.0.1"])).await;
    (path, upstream)
}

fn localhost(addr: SocketAddr) -> String {
    format!("https://localhost:{}", addr.port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_go_over_one_kept_alive_tls_connection_with_sni() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, upstream) = upstream_signed_by_a_test_ca(dir.path()).await;
    let sluice = sluice_for(&localhost(upstream.addr), Some(&ca)).await;
    for _ in 0..20 {
        let got = get(&sluice.url("/"), &[]).await;
        assert_eq!(got.status, StatusCode::OK, "{got:?}");
        assert_eq!(got.body, "ok");
    }
    // Bodies both ways, on the same connection.
    let got = post_json(&sluice.url("/upload"), "{\"a\":1}", &[]).await;
    assert_eq!((got.status, got.body.as_str()), (StatusCode::OK, "7"));
    let got = get(&sluice.url("/download/300000"), &[]).await;
    assert_eq!(got.body.len(), 300_000);
    assert_eq!(upstream.count(), 22);
    // Every exchange, with a body or without, shared one connection.
    assert_eq!(upstream.connections.load(Ordering::SeqCst), 1);
    assert_eq!(upstream.tls.handshakes(), 1);
    assert_eq!(upstream.tls.sni(), [Some("localhost".to_owned())]);
    assert_eq!(upstream.tls.plaintext(), 0);
    assert_eq!(sluice.metric(TLS_ERRORS).await, 0.0);
}

/// Every request on a new connection (the upstream closes each): all but
/// the first handshake resume a session, whether the request has a body or
/// not: the connections share one session cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_connections_resume_the_session_whichever_request_made_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, upstream) = upstream_signed_by_a_test_ca(dir.path()).await;
    let sluice = sluice_for(&localhost(upstream.addr), Some(&ca)).await;
    for round in 0..4 {
        let got = post_json(&sluice.url("/close"), "{}", &[]).await;
        assert_eq!((got.status, got.body.as_str()), (StatusCode::OK, "closing"));
        assert_eq!(upstream.tls.handshakes(), 2 * round + 1);
        let got = get(&sluice.url("/close"), &[]).await;
        assert_eq!((got.status, got.body.as_str()), (StatusCode::OK, "closing"));
    }
    assert_eq!(upstream.connections.load(Ordering::SeqCst), 8);
    assert_eq!(upstream.tls.handshakes(), 8);
    assert_eq!(
        upstream.tls.resumed(),
        7,
        "full handshakes where a session was there to resume"
    );
}

/// The upstream closes its idle connections (a keep-alive timeout, with a
/// `close_notify`): the next requests, plain and with a body, are served
/// on new connections, and nothing failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_closing_idle_tls_connections_costs_no_request() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, upstream) = upstream_signed_by_a_test_ca(dir.path()).await;
    let sluice = sluice_for(&localhost(upstream.addr), Some(&ca)).await;
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
    let got = post_json(&sluice.url("/upload"), "{}", &[]).await;
    assert_eq!(got.status, StatusCode::OK);
    // One connection for both.
    assert_eq!(upstream.connections.load(Ordering::SeqCst), 1);
    upstream.close_idle_connections();
    eventually(Duration::from_secs(5), "the upstream closed it", || async {
        upstream.closed.load(Ordering::SeqCst) == 1
    })
    .await;
    // The close is in sluice's socket now (loopback), where its checkout
    // of an idle connection looks first.
    for _ in 0..3 {
        assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
        let got = post_json(&sluice.url("/upload"), "{}", &[]).await;
        assert_eq!(got.status, StatusCode::OK);
    }
    // One new connection carried the six: none failed for the closed one.
    assert_eq!(upstream.connections.load(Ordering::SeqCst), 2);
    for kind in ["connect", "timeout", "other", "tls"] {
        let series =
            format!("sluice_upstream_errors_total{{upstream=\"default\",kind=\"{kind}\"}}");
        assert_eq!(sluice.metric(&series).await, 0.0, "{series}");
    }
}

/// Each request gets a 502 problem document, counted as `kind="tls"`; the
/// upstream saw failed handshakes only: no request, and no plaintext.
async fn refused_as_tls(sluice: &Sluice, upstream: &Upstream) {
    let got = get(&sluice.url("/"), &[]).await;
    assert_problem(&got, StatusCode::BAD_GATEWAY);
    let got = post_json(&sluice.url("/upload"), "{}", &[]).await;
    assert_problem(&got, StatusCode::BAD_GATEWAY);
    assert_eq!(sluice.metric(TLS_ERRORS).await, 2.0);
    for kind in ["connect", "other"] {
        let series =
            format!("sluice_upstream_errors_total{{upstream=\"default\",kind=\"{kind}\"}}");
        assert_eq!(sluice.metric(&series).await, 0.0, "{series}");
    }
    eventually(
        Duration::from_secs(5),
        "the upstream saw both handshakes fail",
        || async { upstream.tls.failed() == 2 },
    )
    .await;
    assert_eq!(upstream.tls.handshakes(), 0);
    assert_eq!(upstream.tls.plaintext(), 0);
    assert_eq!(upstream.connections.load(Ordering::SeqCst), 2);
    assert_eq!(upstream.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_authority_is_a_502_and_never_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let (_, upstream) = upstream_signed_by_a_test_ca(dir.path()).await;
    let other = TestCa::new("another CA").write(dir.path(), "other-ca");
    let sluice = sluice_for(&localhost(upstream.addr), Some(&other)).await;
    refused_as_tls(&sluice, &upstream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_upstream_ca_the_systems_roots_refuse_a_private_authority() {
    let dir = tempfile::tempdir().unwrap();
    let (_, upstream) = upstream_signed_by_a_test_ca(dir.path()).await;
    let sluice = sluice_for(&localhost(upstream.addr), None).await;
    refused_as_tls(&sluice, &upstream).await;
}

/// A certificate for another name, or one that expired, from the trusted
/// authority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_or_expired_is_a_502() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("upstream test CA");
    let ca_file = ca.write(dir.path(), "ca");
    let leaves: [(&str, Leaf); 2] = [
        ("another name", ca.leaf(&["api.example.com"])),
        ("expired", ca.expired_leaf(&["localhost"])),
    ];
    for (what, leaf) in leaves {
        let upstream = Upstream::start_tls(&leaf).await;
        let sluice = sluice_for(&localhost(upstream.addr), Some(&ca_file)).await;
        let got = get(&sluice.url("/"), &[]).await;
        assert_problem(&got, StatusCode::BAD_GATEWAY);
        assert_eq!(sluice.metric(TLS_ERRORS).await, 1.0, "{what}");
        assert_eq!(upstream.count(), 0, "{what}");
        assert_eq!(upstream.tls.plaintext(), 0, "{what}");
    }
}

/// An IP address in the URL is verified against the certificate's IP
/// addresses, and sends no SNI (RFC 6066 §3 allows only names).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ip_address_upstream_is_verified_as_an_address() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("upstream test CA");
    let ca_file = ca.write(dir.path(), "ca");
    let upstream = Upstream::start_tls(&ca.leaf(&["localhost", "127.0.0.1"])).await;
    let sluice = sluice_for(&format!("https://{}", upstream.addr), Some(&ca_file)).await;
    let got = get(&sluice.url("/"), &[]).await;
    assert_eq!((got.status, got.body.as_str()), (StatusCode::OK, "ok"));
    assert_eq!(upstream.tls.sni(), [None]);

    // A certificate for the name alone does not cover the address.
    let named = Upstream::start_tls(&ca.leaf(&["localhost"])).await;
    let sluice = sluice_for(&format!("https://{}", named.addr), Some(&ca_file)).await;
    assert_problem(&get(&sluice.url("/"), &[]).await, StatusCode::BAD_GATEWAY);
    assert_eq!(sluice.metric(TLS_ERRORS).await, 1.0);
    assert_eq!(named.count(), 0);
}

/// `localhost` is every address the system gives it (`::1` and
/// `127.0.0.1` on many systems): a service listening on any one of them
/// alone is reached, over http:// and https:// alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn localhost_reaches_a_service_on_whichever_of_its_addresses_listens() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("upstream test CA");
    let ca_file = ca.write(dir.path(), "ca");
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host("localhost:0")
        .await
        .unwrap()
        .collect();
    assert!(!addresses.is_empty());
    for address in addresses {
        let listener = TcpListener::bind((address.ip(), 0)).await.unwrap();
        let upstream = Upstream::start_tls_on(listener, &ca.leaf(&["localhost"]));
        let sluice = sluice_for(&localhost(upstream.addr), Some(&ca_file)).await;
        let got = get(&sluice.url("/"), &[]).await;
        assert_eq!(got.status, StatusCode::OK, "https on {address}: {got:?}");

        let listener = TcpListener::bind((address.ip(), 0)).await.unwrap();
        let upstream = Upstream::start_on(listener);
        let url = format!("http://localhost:{}", upstream.addr.port());
        let sluice = sluice_for(&url, None).await;
        let got = get(&sluice.url("/"), &[]).await;
        assert_eq!(got.status, StatusCode::OK, "http on {address}: {got:?}");
    }
}

/// `upstream_ca` is read again on every reload: a CA file replaced with the
/// right authority makes the next connections verify, and the reason of
/// the failures before is in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_reads_upstream_ca_again() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("upstream test CA");
    let upstream = Upstream::start_tls(&ca.leaf(&["localhost"])).await;
    let ca_file = TestCa::new("stale CA").write(dir.path(), "upstream-ca");
    let config = support::write_config(
        dir.path(),
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"{}\"\nupstream_ca = \"upstream-ca.pem\"\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n[[rule]]\nname = \"per-ip\"\nrate = \"1000/s\"\n",
            localhost(upstream.addr)
        ),
    );
    let sluice = SluiceProcess::spawn(&config);
    let got = get(&sluice.url("/"), &[]).await;
    assert_problem(&got, StatusCode::BAD_GATEWAY);
    eventually(Duration::from_secs(5), "the reason in the log", || async {
        !sluice.logged("UnknownIssuer").is_empty()
    })
    .await;
    let line = &sluice.logged("TLS handshake with the upstream failed")[0];
    assert!(
        line.contains(&format!(":{}", upstream.addr.port())) && line.contains("localhost"),
        "{line}"
    );

    std::fs::write(&ca_file, ca.pem()).unwrap();
    sluice.signal("HUP");
    eventually(
        Duration::from_secs(10),
        "the new authority trusted",
        || async { get(&sluice.url("/"), &[]).await.status == StatusCode::OK },
    )
    .await;
    assert_eq!(upstream.tls.plaintext(), 0);
}

/// An upstream with a self-signed certificate is trusted by naming that
/// certificate as `upstream_ca`, and by nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_upstream_is_trusted_by_naming_its_own_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let own = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let leaf = Leaf {
        cert_pem: own.cert.pem(),
        key_pem: own.signing_key.serialize_pem(),
    };
    let certificate = dir.path().join("upstream.pem");
    std::fs::write(&certificate, &leaf.cert_pem).unwrap();
    let upstream = Upstream::start_tls(&leaf).await;
    let sluice = sluice_for(&localhost(upstream.addr), Some(&certificate)).await;
    let got = get(&sluice.url("/"), &[]).await;
    assert_eq!((got.status, got.body.as_str()), (StatusCode::OK, "ok"));

    let unrelated = TestCa::new("unrelated").write(dir.path(), "unrelated");
    let sluice = sluice_for(&localhost(upstream.addr), Some(&unrelated)).await;
    assert_problem(&get(&sluice.url("/"), &[]).await, StatusCode::BAD_GATEWAY);
}

/// `check` loads `upstream_ca`: one that cannot serve is an error at its
/// line and column; one that can is named with its authorities.
#[test]
fn check_loads_upstream_ca() {
    let dir = tempfile::tempdir().unwrap();
    let config = |ca: &str| {
        support::write_config(
            dir.path(),
            &format!(
                "[server]\nupstream = \"https://api.internal:8443\"\nupstream_ca = \"{ca}\"\n\
                 [[rule]]\nname = \"per-ip\"\nrate = \"100/m\"\n"
            ),
        )
    };
    let check = |path: &Path| {
        std::process::Command::new(support::binary())
            .args(["check", "--config"])
            .arg(path)
            .output()
            .unwrap()
    };
    let output = check(&config("missing.pem"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("sluice.toml:3:15: server.upstream_ca: cannot read"),
        "{stderr}"
    );

    std::fs::write(dir.path().join("not.pem"), "not a certificate\n").unwrap();
    let output = check(&config("not.pem"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("holds no PEM certificate"), "{stderr}");

    TestCa::new("private CA").write(dir.path(), "ca");
    let output = check(&config("ca.pem"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("upstream default: https://api.internal:8443 "),
        "{stdout}"
    );
    assert!(stdout.contains("ca.pem (1 authority)"), "{stdout}");
}
