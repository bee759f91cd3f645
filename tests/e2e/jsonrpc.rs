//! Limits per JSON-RPC method and MCP tool (docs/ai-budgets.md, "JSON-RPC
//! and MCP") on the real server, in front of an upstream that echoes what
//! it gets: a call is keyed by its method or tool, a batch is decided call
//! by call and all or nothing, and a refusal of a call is a JSON-RPC error
//! its client maps to the call.

use http::StatusCode;
use serde_json::{json, Value};

use crate::support::{self, get, post_raw, Got};

const RULES: &str = r#"
[[rule]]
name = "per-tool"
match = { path = "/mcp" }
key = ["mcp:tool"]
missing = "skip"
rate = "3/m"

[[rule]]
name = "per-method"
match = { path = "/mcp" }
key = ["jsonrpc:method"]
rate = "6/m"
"#;

fn call(id: Value, method: &str, tool: Option<&str>) -> Value {
    let mut call = json!({"jsonrpc": "2.0", "id": id, "method": method});
    if let Some(tool) = tool {
        call["params"] = json!({"name": tool, "arguments": {"q": "rust"}});
    }
    call
}

fn tool(id: u64, name: &str) -> Value {
    call(json!(id), "tools/call", Some(name))
}

/// POSTs `body` as it is to `/mcp` (or `path`), with `content_type`.
async fn post(sluice: &support::Sluice, path: &str, body: &str, content_type: &str) -> Got {
    let (status, headers, bytes) = post_raw(
        &sluice.url(path),
        body.as_bytes(),
        &[("content-type", content_type)],
    )
    .await;
    Got {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

async fn mcp(sluice: &support::Sluice, body: &Value) -> Got {
    post(sluice, "/mcp", &body.to_string(), "application/json").await
}

/// A refusal answered in JSON-RPC: 429 with the usual fields, and an error
/// for the call `id`, whose data is the problem document.
fn jsonrpc_refusal(got: &Got, id: Value, rule: &str) -> Value {
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS, "{got:?}");
    assert_eq!(got.header("content-type"), Some("application/json"));
    assert!(got.header("x-ratelimit-limit").is_some(), "{got:?}");
    let answer = got.json();
    assert_eq!(answer["jsonrpc"], "2.0");
    assert_eq!(answer["id"], id, "{answer}");
    assert_eq!(answer["error"]["code"], -32029);
    assert_eq!(answer["error"]["message"], format!("rate limited: {rule}"));
    let data = &answer["error"]["data"];
    assert_eq!(data["rule"], rule);
    assert_eq!(data["status"], 429);
    assert_eq!(
        data["request_id"].as_str(),
        got.header("x-request-id"),
        "{answer}"
    );
    data.clone()
}

#[tokio::test]
async fn each_tool_and_each_method_has_its_own_bucket() {
    let (upstream, sluice) = support::start(RULES).await;
    // tools/list names no tool: the per-tool rule skips it; per-method
    // counts it.
    for id in 0..6 {
        let got = mcp(&sluice, &call(json!(id), "tools/list", None)).await;
        assert_eq!(got.status, StatusCode::OK, "{got:?}");
    }
    let got = mcp(&sluice, &call(json!("list-7"), "tools/list", None)).await;
    jsonrpc_refusal(&got, json!("list-7"), "per-method");
    // Three searches, then the fourth is refused by its tool's bucket,
    // while another tool still passes.
    for id in 0..3 {
        assert_eq!(
            mcp(&sluice, &tool(id, "search")).await.status,
            StatusCode::OK
        );
    }
    let got = mcp(&sluice, &tool(3, "search")).await;
    let data = jsonrpc_refusal(&got, json!(3), "per-tool");
    assert!(data["retry_after_secs"].as_u64().unwrap() >= 1, "{data}");
    assert!(got.header("retry-after").is_some());
    assert_eq!(mcp(&sluice, &tool(4, "fetch")).await.status, StatusCode::OK);
    assert_eq!(upstream.count(), 6 + 3 + 1);
    // A call sent as text/plain is still a call (a server may read it so).
    let plain = post(
        &sluice,
        "/mcp",
        &tool(5, "search").to_string(),
        "text/plain",
    )
    .await;
    jsonrpc_refusal(&plain, json!(5), "per-tool");
    // The keys are shown as they are: they name operations, not callers.
    let top = get(&format!("http://{}/admin/top", sluice.admin), &[])
        .await
        .json();
    let keys: Vec<&str> = top["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|key| key["rule"] == "per-tool")
        .map(|key| key["key"].as_str().unwrap())
        .collect();
    assert!(keys.contains(&"search"), "{top}");
}

#[tokio::test]
async fn a_batch_is_decided_call_by_call_and_refused_whole() {
    let (upstream, sluice) = support::start(RULES).await;
    // Two searches and a fetch: each from its own bucket.
    let batch = json!([tool(1, "search"), tool(2, "search"), tool(3, "fetch")]);
    assert_eq!(mcp(&sluice, &batch).await.status, StatusCode::OK);
    // Two more searches do not fit (one is left): the whole batch is
    // refused, and its fetch takes nothing either.
    let batch = json!([tool(4, "fetch"), tool(5, "search"), tool(6, "search")]);
    let got = mcp(&sluice, &batch).await;
    let data = jsonrpc_refusal(&got, Value::Null, "per-tool");
    assert_eq!(data["remaining"], 1, "{data}");
    assert_eq!(upstream.count(), 1);
    // Two fetches still fit (the refused batch took none), and the last
    // search.
    let batch = json!([tool(7, "fetch"), tool(8, "fetch"), tool(9, "search")]);
    assert_eq!(mcp(&sluice, &batch).await.status, StatusCode::OK);
    // per-method counted 6 tools/call: a notification in a batch counts
    // too, and is refused with them.
    let notification = json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "x"}});
    let got = mcp(&sluice, &json!([notification])).await;
    jsonrpc_refusal(&got, Value::Null, "per-method");
    let got = mcp(&sluice, &notification).await;
    jsonrpc_refusal(&got, Value::Null, "per-method");
    assert_eq!(upstream.count(), 2);
}

#[tokio::test]
async fn a_batch_beyond_a_capacity_is_refused_for_good() {
    let (upstream, sluice) = support::start(RULES).await;
    let batch: Vec<Value> = (0..4).map(|id| tool(id, "search")).collect();
    let got = mcp(&sluice, &json!(batch)).await;
    let data = jsonrpc_refusal(&got, Value::Null, "per-tool");
    assert_eq!(data["retry_after_secs"], Value::Null, "{data}");
    assert_eq!(got.header("retry-after"), None);
    // Nothing was taken.
    let batch: Vec<Value> = (0..3).map(|id| tool(id, "search")).collect();
    assert_eq!(mcp(&sluice, &json!(batch)).await.status, StatusCode::OK);
    assert_eq!(upstream.count(), 1);
}

#[tokio::test]
async fn a_body_that_is_not_json_rpc_has_no_call_and_every_body_passes_as_sent() {
    let rules = r#"
[[rule]]
name = "per-method"
match = { path = "/echo" }
key = ["jsonrpc:method"]
missing = "reject"
rate = "100/m"
"#;
    let (_upstream, sluice) = support::start(rules).await;
    // Not a call: refused as a missing key, with a problem document; so
    // is a batch with an element that is not a call.
    for body in [
        "not json",
        "[]",
        r#"[{"jsonrpc":"2.0","method":"m"}, 7]"#,
        r#"{"jsonrpc":"1.0","method":"m"}"#,
        r#"{"jsonrpc":"2.0","method":"m"} trailing"#,
    ] {
        let got = post(&sluice, "/echo", body, "application/json").await;
        assert_eq!(got.status, StatusCode::BAD_REQUEST, "{body}: {got:?}");
        assert_eq!(
            got.header("content-type"),
            Some("application/problem+json"),
            "{body}"
        );
    }
    // Calls reach the upstream byte for byte, escapes and spacing kept.
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"meth\u006fd":"tools\/call","params":{"name":"s\u00e9arch"}}"#,
        "[ {\"jsonrpc\" : \"2.0\", \"method\" : \"a\"} ,\n {\"jsonrpc\":\"2.0\",\"method\":\"b\",\"id\":\"x\"} ]",
    ] {
        let got = post(&sluice, "/echo", body, "application/json").await;
        assert_eq!(got.status, StatusCode::OK, "{body}: {got:?}");
        assert_eq!(got.body, body);
    }
}
