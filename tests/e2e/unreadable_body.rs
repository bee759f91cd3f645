//! A body sluice cannot read is never passed unread (docs/conversation.md,
//! "A body sluice cannot read"): behind the docs' MCP recipe (`mcp:tool`,
//! `missing = "skip"`), and behind a `body:` rule, every spelling of a call
//! that a lenient server would still run (a plain body labelled as coded,
//! a coding sluice does not know, a byte-order mark, UTF-16, bytes after
//! the value, invalid UTF-8, NaN) is refused 400 and never reaches the
//! upstream, while a body no reader takes is left to `missing`.

use http::StatusCode;

use crate::support::{self, assert_problem, gzip, post_raw, Got, Sluice};

const UNREADABLE_BODY: &str = "tag:sluice,2026:problems/unreadable-body";

/// POSTs `body` to `path` with `fields`.
async fn post(sluice: &Sluice, path: &str, body: &[u8], fields: &[(&str, &str)]) -> Got {
    let (status, headers, bytes) = post_raw(&sluice.url(path), body, fields).await;
    Got {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

const CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search"}}"#;

/// The call, its tool's name holding a byte that is not UTF-8.
fn invalid_utf8() -> Vec<u8> {
    let mut bytes = CALL.as_bytes().to_vec();
    bytes.insert(CALL.find("search").unwrap() + 3, 0xFF);
    bytes
}

fn utf16le(text: &str) -> Vec<u8> {
    text.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

/// A way of sending the call: what it is, its bytes, its fields.
type Spelling = (&'static str, Vec<u8>, Vec<(&'static str, &'static str)>);

/// Each way of sending the call that a lenient server still runs.
fn lenient_spellings() -> Vec<Spelling> {
    let json = ("content-type", "application/json");
    vec![
        (
            "labelled gzip",
            CALL.into(),
            vec![json, ("content-encoding", "gzip")],
        ),
        (
            "labelled br",
            CALL.into(),
            vec![json, ("content-encoding", "br")],
        ),
        (
            "an unknown coding",
            CALL.into(),
            vec![json, ("content-encoding", "x-foo")],
        ),
        (
            "a byte-order mark",
            [&b"\xEF\xBB\xBF"[..], CALL.as_bytes()].concat(),
            vec![json],
        ),
        ("UTF-16LE", utf16le(CALL), vec![json]),
        (
            "bytes after it",
            format!("{CALL} x").into_bytes(),
            vec![json],
        ),
        ("invalid UTF-8", invalid_utf8(), vec![json]),
        (
            "NaN",
            CALL.replace("\"id\":1", "\"id\":NaN").into_bytes(),
            vec![("content-type", "text/plain")],
        ),
    ]
}

#[tokio::test]
async fn an_mcp_limit_is_not_skipped_by_a_body_sluice_cannot_read() {
    let rules = r#"
[[rule]]
name = "per-tool"
match = { path = "/mcp" }
key = ["mcp:tool"]
missing = "skip"
rate = "1/m"
"#;
    let (upstream, sluice) = support::start(rules).await;
    let json = [("content-type", "application/json")];
    assert_eq!(
        post(&sluice, "/mcp", CALL.as_bytes(), &json).await.status,
        StatusCode::OK
    );
    let refused = post(&sluice, "/mcp", CALL.as_bytes(), &json).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let served = upstream.count();
    for (what, body, fields) in lenient_spellings() {
        let got = post(&sluice, "/mcp", &body, &fields).await;
        let problem = assert_problem(&got, StatusCode::BAD_REQUEST);
        assert_eq!(problem["type"], UNREADABLE_BODY, "{what}: {problem}");
        assert!(
            problem["detail"].as_str().unwrap().contains("per-tool"),
            "{what}: {problem}"
        );
        assert_eq!(upstream.count(), served, "{what} reached the upstream");
    }
    // The call sent gzipped for real is read, and still limited.
    let coded = [json[0], ("content-encoding", "gzip")];
    let got = post(&sluice, "/mcp", &gzip(CALL.as_bytes()), &coded).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    // What no reader runs is left to `missing` (skip): a form, a call cut
    // short, a lone number followed by words; and so is another method.
    for body in [
        &b"tool=search&q=rust"[..],
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sea"#,
        b"42 is the answer",
        br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    ] {
        let got = post(&sluice, "/mcp", body, &json).await;
        assert_eq!(
            got.status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    assert_eq!(upstream.count(), served + 4);
    // Each refusal counts as a missing key.
    let refused = sluice
        .metric("sluice_requests_total{rule=\"per-tool\",outcome=\"missing_key\"}")
        .await;
    assert_eq!(refused, lenient_spellings().len() as f64);
}

#[tokio::test]
async fn a_body_key_refuses_what_it_cannot_read_only_when_its_type_says_json() {
    let rules = r#"
[[rule]]
name = "per-tenant"
match = { path = "/api" }
key = ["body:/tenant"]
missing = "skip"
rate = "1/m"

[[rule]]
name = "dry-run"
match = { path = "/shadow" }
key = ["body:/user"]
rate = "1/m"
shadow = true
"#;
    let (upstream, sluice) = support::start(rules).await;
    let json = [("content-type", "application/json")];
    let body = br#"{"tenant":"acme","user":"ann"}"#;
    let bom = [&b"\xEF\xBB\xBF"[..], body].concat();
    let got = post(&sluice, "/api", &bom, &json).await;
    let problem = assert_problem(&got, StatusCode::BAD_REQUEST);
    assert_eq!(problem["type"], UNREADABLE_BODY);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("byte-order mark"),
        "{problem}"
    );
    assert_eq!(upstream.count(), 0);
    // A body: source reads JSON bodies only: sent as text, the same bytes
    // are a missing key, and skipped.
    let got = post(&sluice, "/api", &bom, &[("content-type", "text/plain")]).await;
    assert_eq!(got.status, StatusCode::OK);
    // A body that no reader takes is a missing key too.
    let got = post(&sluice, "/api", b"{\"tenant\":", &json).await;
    assert_eq!(got.status, StatusCode::OK);
    // Read, the key limits as ever.
    assert_eq!(
        post(&sluice, "/api", body, &json).await.status,
        StatusCode::OK
    );
    let got = post(&sluice, "/api", body, &json).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    // A shadow rule never refuses: it reads what it can, as a dry run may.
    let got = post(&sluice, "/shadow", &bom, &json).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(upstream.count(), 4);
}
