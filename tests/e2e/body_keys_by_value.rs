//! Body keys by value (docs/conversation.md, "Keys from the request body"):
//! a number is one caller however it is spelled, a string after unescaping,
//! and a body in a `Content-Encoding` is decoded for reading (bounded: a
//! decompression bomb stops at `max_key_body_bytes`) and forwarded as it
//! came. Against the real server and a counting upstream on loopback.

use http::StatusCode;

use crate::support::{self, post_json};

const PER_TENANT: &str = r#"
[[rule]]
name = "per-tenant"
match.path_prefix = "/rpc"
key = ["body:/tenant"]
missing = "reject"
rate = "3/m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_one_number_is_one_bucket() {
    let (upstream, sluice) = support::start(PER_TENANT).await;
    // 42, 42.0, 4.2e1 and "42" are one tenant with 3 a minute: the fourth
    // spelling is refused, whoever wrote it how.
    for spelling in ["42", "42.0", "4.2e1"] {
        let body = format!(r#"{{"tenant":{spelling}}}"#);
        let got = post_json(&sluice.url("/rpc"), &body, &[]).await;
        assert_eq!(got.status, StatusCode::OK, "{spelling}: {got:?}");
    }
    for spelling in ["420e-1", "\"42\"", "42.000"] {
        let body = format!(r#"{{"tenant":{spelling}}}"#);
        let got = post_json(&sluice.url("/rpc"), &body, &[]).await;
        assert_eq!(
            got.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{spelling}: {got:?}"
        );
    }
    // A string is keyed after unescaping: "\u0061cme" is acme.
    for body in [
        r#"{"tenant":"acme"}"#,
        r#"{"tenant":"\u0061cme"}"#,
        r#"{"tenant":"ac\u006de"}"#,
    ] {
        assert_eq!(
            post_json(&sluice.url("/rpc"), body, &[]).await.status,
            StatusCode::OK
        );
    }
    let got = post_json(&sluice.url("/rpc"), r#"{"tenant":"\u0061\u0063me"}"#, &[]).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS, "{got:?}");
    // Another number is another tenant.
    let got = post_json(&sluice.url("/rpc"), r#"{"tenant":43}"#, &[]).await;
    assert_eq!(got.status, StatusCode::OK, "{got:?}");
    assert_eq!(upstream.count(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coded_body_is_keyed_by_what_it_decodes_to_and_a_bomb_stops_at_the_bound() {
    let config = format!("max_key_body_bytes = 65536\n{PER_TENANT}");
    let (upstream, sluice) = support::start(&config).await;
    let coded = [
        ("content-type", "application/json"),
        ("content-encoding", "gzip"),
    ];
    let body = support::gzip(br#"{"tenant":"acme"}"#);
    for _ in 0..3 {
        let (status, _, _) = support::post_raw(&sluice.url("/rpc"), &body, &coded).await;
        assert_eq!(status, StatusCode::OK);
    }
    // The same tenant, sent plain: the same bucket, now spent.
    let got = post_json(&sluice.url("/rpc"), r#"{"tenant":"acme"}"#, &[]).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS, "{got:?}");

    // 64 MiB of a JSON string, gzipped to about 64 KiB: past the bound
    // once decoded, so the key is missing (and `missing = "reject"`
    // answers 400) without sluice inflating it.
    let mut bomb = Vec::with_capacity(64 << 20);
    bomb.extend_from_slice(br#"{"tenant":""#);
    bomb.resize(64 << 20, b'a');
    bomb.extend_from_slice(br#""}"#);
    let bomb = support::gzip(&bomb);
    assert!(bomb.len() < 65_536, "{}", bomb.len());
    let (status, _, body) = support::post_raw(&sluice.url("/rpc"), &bomb, &coded).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "{}",
        String::from_utf8_lossy(&body)
    );
    // A coding sluice does not know is no key either.
    let compress = [
        ("content-type", "application/json"),
        ("content-encoding", "compress"),
    ];
    let (status, _, _) = support::post_raw(&sluice.url("/rpc"), b"\x1f\x9d", &compress).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(upstream.count(), 3);
}
