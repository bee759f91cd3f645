//! Byte quotas (docs/charging.md, "Charging by traffic"), on the real
//! binary in front of a real upstream on loopback: `response_bytes` and
//! `request_bytes` charge the body bytes that pass, alone or weighted; a
//! long body is charged while it streams, so a quota spent mid-stream
//! refuses the caller's next request before the stream ends; a body cut
//! off charges what passed; each key has its own budget.

use std::time::Duration;

use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{
    checked, eventually, generated_body, get, metric, post_json, post_streaming, write_config,
    SluiceProcess, Upstream,
};

/// How long a charge may take to show in `/metrics` (it lands as the body
/// ends, just after the client read it; or at a tick, once a second).
const SETTLED: Duration = Duration::from_secs(10);

/// sluice (the binary) in front of `upstream` with `rules`; the config's
/// path comes back for `sluice check`.
fn sluice(upstream: &Upstream, rules: &str) -> (SluiceProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n\n[admin]\nlisten = \"127.0.0.1:0\"\n\n{rules}",
        upstream.addr
    );
    let path = write_config(dir.path(), &config);
    (SluiceProcess::spawn(&path), dir)
}

/// `sluice_budget_charged_total{rule}`: the units charged after admission.
async fn charged(sluice: &SluiceProcess, rule: &str) -> f64 {
    let text = get(&sluice.admin_url("/metrics"), &[]).await.body;
    metric(
        &text,
        &format!("sluice_budget_charged_total{{rule=\"{rule}\"}}"),
    )
    .unwrap_or(0.0)
}

/// Waits until `rule` was charged `units` in all, and checks it stays so
/// (no more than that was charged).
async fn charged_exactly(sluice: &SluiceProcess, rule: &str, units: f64) {
    eventually(
        SETTLED,
        &format!("{rule} was never charged {units}"),
        || async { charged(sluice, rule).await >= units },
    )
    .await;
    assert_eq!(charged(sluice, rule).await, units, "{rule}: charged");
}

const DOWNLOADS: &str = r#"
[[rule]]
name = "downloads"
key = ["header:x-key"]
rate = "100000/d"            # 100,000 bytes a day a key
charge = "response_bytes"
"#;

#[tokio::test]
async fn a_download_quota_lets_the_crossing_answer_finish_and_refuses_the_next() {
    let upstream = Upstream::start().await;
    let (sluice, _dir) = sluice(&upstream, DOWNLOADS);
    let alice = [("x-key", "alice")];
    let first = get(&sluice.url("/download/60000"), &alice).await;
    assert_eq!((first.status, first.body.len()), (StatusCode::OK, 60_000));
    charged_exactly(&sluice, "downloads", 60_000.0).await;
    // 40,000 bytes left: admitted, and the whole answer arrives though it
    // spends 20,000 bytes more than the quota had.
    let crossing = get(&sluice.url("/download/60000"), &alice).await;
    assert_eq!(
        (crossing.status, crossing.body.len()),
        (StatusCode::OK, 60_000)
    );
    charged_exactly(&sluice, "downloads", 120_000.0).await;
    let refused = get(&sluice.url("/download/10"), &alice).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{refused:?}");
    assert!(refused.header("retry-after").is_some(), "{refused:?}");
    // sluice's own answer is nothing the quota counts: not charged.
    assert_eq!(charged(&sluice, "downloads").await, 120_000.0);
    assert_eq!(upstream.count(), 2, "the refused request was forwarded");

    // Another key has a budget of its own.
    let bob = [("x-key", "bob")];
    let other = get(&sluice.url("/download/1000"), &bob).await;
    assert_eq!((other.status, other.body.len()), (StatusCode::OK, 1_000));
    // A body of 0 bytes is a value, and costs only the admission.
    let empty = get(&sluice.url("/download/0"), &bob).await;
    assert_eq!((empty.status, empty.body.len()), (StatusCode::OK, 0));
    charged_exactly(&sluice, "downloads", 121_000.0).await;
    assert_eq!(
        get(&sluice.url("/download/10"), &alice).await.status,
        StatusCode::TOO_MANY_REQUESTS,
        "alice is still over her quota"
    );
    // Nothing went missing: there is no charge_missing for bytes.
    let text = get(&sluice.admin_url("/metrics"), &[]).await.body;
    let errors = metric(&text, "sluice_charge_errors_total{rule=\"downloads\"}");
    assert_eq!(errors.unwrap_or(0.0), 0.0);
}

#[tokio::test]
async fn an_upload_quota_charges_request_bodies_whole_or_streamed() {
    let upstream = Upstream::start().await;
    let rules = r#"
[[rule]]
name = "uploads"
key = ["global"]
rate = "100000/d"
charge = "request_bytes"
"#;
    let (sluice, _dir) = sluice(&upstream, rules);
    // A body with a Content-Length, then one sent chunked as it is made.
    let whole = post_json(&sluice.url("/upload"), &"u".repeat(60_000), &[]).await;
    assert_eq!(
        (whole.status, whole.body.as_str()),
        (StatusCode::OK, "60000")
    );
    charged_exactly(&sluice, "uploads", 60_000.0).await;
    let streamed = post_streaming(&sluice.url("/upload"), generated_body(60_000)).await;
    assert_eq!(
        (streamed.status, streamed.body.as_str()),
        (StatusCode::OK, "60000")
    );
    // The bodies' bytes only: not the heads, not the chunk framing, not
    // the answers.
    charged_exactly(&sluice, "uploads", 120_000.0).await;
    let refused = post_json(&sluice.url("/upload"), "{}", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{refused:?}");
    assert_eq!(charged(&sluice, "uploads").await, 120_000.0);
}

#[tokio::test]
async fn weighted_byte_sources_charge_their_rounded_up_sum() {
    let upstream = Upstream::start().await;
    let rules = r#"
[[rule]]
name = "traffic"
key = ["global"]
rate = "1000/d"
charge = { response_bytes = 0.001, request_bytes = 0.01 }
"#;
    let (sluice, dir) = sluice(&upstream, rules);
    // `sluice check` names the sources as written.
    let said = checked(&dir.path().join("sluice.toml"));
    assert!(
        said.contains(
            "rule traffic: charge { \"response_bytes\" = 0.001, \"request_bytes\" = 0.01 } after the response"
        ),
        "{said}"
    );
    // So does `GET /admin/rules`.
    let rules = get(&sluice.admin_url("/admin/rules"), &[]).await.json();
    let rule = &rules["rules"][0];
    assert_eq!(
        rule["charge"], "{ \"response_bytes\" = 0.001, \"request_bytes\" = 0.01 }",
        "{rule}"
    );
    // 10,000 bytes down at 0.001: 10 units.
    get(&sluice.url("/download/10000"), &[]).await;
    charged_exactly(&sluice, "traffic", 10.0).await;
    // 1,500 bytes: 1.5, rounded up to 2.
    get(&sluice.url("/download/1500"), &[]).await;
    charged_exactly(&sluice, "traffic", 12.0).await;
    // 250 bytes up at 0.01 (2.5 → 3) and the answer's 3 bytes, "250",
    // down (0.003 → 1): each source rounds on its own.
    let upload = post_json(&sluice.url("/upload"), &"u".repeat(250), &[]).await;
    assert_eq!(upload.body, "250");
    charged_exactly(&sluice, "traffic", 16.0).await;
}

#[tokio::test]
async fn a_long_download_is_charged_as_it_streams_and_stops_the_next_request_before_it_ends() {
    let upstream = Upstream::start().await;
    let rules = r#"
[[rule]]
name = "stream"
key = ["header:x-key"]
rate = "100/d"
charge = "response_bytes"
"#;
    let (sluice, _dir) = sluice(&upstream, rules);
    // 80 chunks of 5 bytes, 50 ms apart: 400 bytes over 4 s, the quota of
    // 100 spent in its first second.
    let streaming = tokio::spawn({
        let url = sluice.url("/drip/80/50");
        async move { get(&url, &[("x-key", "carol")]).await }
    });
    eventually(
        SETTLED,
        "nothing was charged while the body streamed",
        || async { charged(&sluice, "stream").await >= 100.0 },
    )
    .await;
    assert!(!streaming.is_finished(), "the stream ended before a tick");
    let next = get(&sluice.url("/status/204"), &[("x-key", "carol")]).await;
    assert_eq!(next.status, StatusCode::TOO_MANY_REQUESTS, "{next:?}");
    assert!(
        !streaming.is_finished(),
        "refused only after the stream ended"
    );
    // The stream itself is never cut: it was admitted.
    let got = streaming.await.unwrap();
    assert_eq!((got.status, got.body.len()), (StatusCode::OK, 400));
    charged_exactly(&sluice, "stream", 400.0).await;
}

#[tokio::test]
async fn a_download_cut_off_by_its_client_charges_the_bytes_that_passed() {
    let upstream = Upstream::start().await;
    let rules = r#"
[[rule]]
name = "downloads"
key = ["global"]
rate = "1000000000/d"
charge = "response_bytes"
"#;
    let (sluice, _dir) = sluice(&upstream, rules);
    const TOTAL: u64 = 200_000_000;
    let mut client = TcpStream::connect(sluice.addr).await.unwrap();
    let head = format!("GET /download/{TOTAL} HTTP/1.1\r\nHost: test\r\n\r\n");
    client.write_all(head.as_bytes()).await.unwrap();
    let mut read = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    while read < 1_000_000 {
        let n = client.read(&mut buf).await.unwrap();
        assert!(n > 0, "the answer ended after {read} bytes");
        read += n as u64;
    }
    drop(client);
    // sluice let go of the answer (settling it) when it closed the
    // upstream connection it came on.
    eventually(SETTLED, "the upstream exchange was kept", || async {
        upstream.closed.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    let charged = charged(&sluice, "downloads").await;
    // At least what the client read (less the head), at most that and what
    // the sockets' buffers held: never the whole body.
    assert!(
        charged >= (read - 1_000) as f64 && charged < (TOTAL / 4) as f64,
        "read {read}, charged {charged}"
    );
}

#[tokio::test]
async fn an_upload_is_charged_as_it_streams_and_when_cut_off_what_passed() {
    let upstream = Upstream::start().await;
    let rules = r#"
[[rule]]
name = "uploads"
key = ["global"]
rate = "1000000/d"
charge = "request_bytes"
"#;
    let (sluice, _dir) = sluice(&upstream, rules);
    let mut client = TcpStream::connect(sluice.addr).await.unwrap();
    let head = "POST /upload HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n";
    client.write_all(head.as_bytes()).await.unwrap();
    let chunk = format!("3e8\r\n{}\r\n", "u".repeat(1_000));
    for _ in 0..3 {
        client.write_all(chunk.as_bytes()).await.unwrap();
    }
    // The answer has not begun (the upstream reads to the end): the bytes
    // sent so far are charged at the next tick.
    eventually(SETTLED, "the upload was not charged as it went", || async {
        charged(&sluice, "uploads").await >= 3_000.0
    })
    .await;
    // The client leaves mid-body: the upstream gets an incomplete body, and
    // the charge stays what passed.
    drop(client);
    eventually(SETTLED, "the upstream never saw the body end", || async {
        upstream.uploaded.load(std::sync::atomic::Ordering::SeqCst) == 3_000
    })
    .await;
    eventually(SETTLED, "the upstream exchange was kept", || async {
        upstream.closed.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(charged(&sluice, "uploads").await, 3_000.0);
}
