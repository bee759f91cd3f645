//! What keys on JSON-RPC calls cost (`jsonrpc:method`, `mcp:tool`:
//! docs/ai-budgets.md), on one core:
//!
//! - `read/tools-call-1k`: `key::jsonrpc::read` of a 1 KiB MCP `tools/call`
//!   (a 900-byte argument); `read/serde-json-value-1k` parses the same
//!   body into a `serde_json::Value`, the fuzz target's oracle, for scale;
//!   `judge/tools-call-1k` tells whether it is strict JSON, as every body a
//!   rule reads is judged once (docs/conversation.md, "A body sluice
//!   cannot read");
//! - `decide/…`: a whole decision of a POST, as the proxy makes it after
//!   reading the body: its facts, `identify` over the policy, the asks and
//!   the memory store's admission (limits that always admit), for a rule
//!   keyed on `header:x-api-key` alone (`header-key-1k`), the same rule
//!   keyed on the caller and the tool (`mcp-tool-1k`), and a batch of 100
//!   `tools/call`s of about 330 bytes each (33 KiB, within the default
//!   `max_key_body_bytes`), each of another tool (`batch-100-tools`: 100
//!   buckets) or all of one (`batch-100-one-tool`: one bucket taking 100).
//!   The target for a batch of 100 is under 50 µs.
//!
//! Each iteration is one request; the body's calls are read anew in each
//! (the facts are made per request, as the proxy makes them).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures_util::FutureExt;
use http::Request;
use serde_json::{json, Value};
use sluice::config::Config;
use sluice::decider::{fill_asks, Holds};
use sluice::key::body::{BodyFacts, KeyBody};
use sluice::key::graphql::persisted::{Learned, Manifest, Persisted};
use sluice::key::jsonrpc::{read, Calls};
use sluice::key::unreadable_body::judge;
use sluice::metrics::Metrics;
use sluice::policy::Policy;
use sluice::proxy::{check, facts_of, identify, Applicability};
use sluice::store::{Admission, Asks, MemoryStore, Store};

/// A `tools/call` whose argument repeats a 22-byte phrase `repeat` times:
/// 41 make a call of about 1 KiB, 12 one of about 330 bytes (a batch of
/// 100 such calls is 33 KiB, within the default `max_key_body_bytes`).
fn tools_call(id: u64, tool: &str, repeat: usize) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": {"query": "rate limiting proxies ".repeat(repeat), "limit": 10},
        },
    })
}

/// A policy of one rule keyed on `key`, whose limit always admits, and the
/// store it was compiled on.
fn policy(key: &str) -> (Policy, Arc<Store>) {
    let text = format!(
        "[server]\nupstream = \"http://127.0.0.1:1\"\n\n[[rule]]\nname = \"calls\"\n\
         key = {key}\nrate = \"1000000000/s\"\nburst = 1000000000\n"
    );
    let config = Config::from_toml(&text, "bench.toml").expect("a valid config");
    let store = Arc::new(Store::Memory(MemoryStore::new(1 << 20)));
    let policy = Policy::compile(Arc::new(config), &Metrics::new(), &store);
    (policy, store)
}

/// One decision of `body` POSTed with an API key, as the proxy makes it
/// once the body is read: whether it was admitted.
fn decide(policy: &Policy, store: &Store, request: &Request<()>, body: &[u8]) -> bool {
    let (manifest, learned) = (Manifest::default(), Learned::new(1));
    let persisted = Persisted {
        manifest: &manifest,
        learned: &learned,
        learns: false,
    };
    let checked = check(request, policy).expect("a valid request");
    let mut facts = facts_of(request, &checked, [10, 0, 0, 1].into(), policy);
    let body_facts = BodyFacts::of(request, KeyBody::Whole(body), persisted);
    facts.body = Some(&body_facts);
    let claims = std::cell::OnceCell::new();
    let mut applicable = Applicability::default();
    identify(&mut facts, &claims, policy, 1, &mut applicable, &mut ()).expect("identified");
    let mut asks = Asks::default();
    fill_asks(
        &mut asks,
        &applicable.enforced,
        &applicable.shadowed,
        Holds::AsRuled,
    );
    let mut answer = Admission::default();
    store
        .admit(&asks, 1_800_000_000_000_000_000, &mut answer)
        .now_or_never()
        .expect("the memory store answers at once")
        .expect("admitted or not");
    answer.admitted()
}

fn jsonrpc(c: &mut Criterion) {
    let one = serde_json::to_vec(&tools_call(1, "search", 41)).unwrap();
    let tools: Vec<Value> = (0..100)
        .map(|i| tools_call(i, &format!("tool-{i}"), 12))
        .collect();
    let one_tool: Vec<Value> = (0..100).map(|i| tools_call(i, "search", 12)).collect();
    let batch_tools = serde_json::to_vec(&tools).unwrap();
    let batch_one_tool = serde_json::to_vec(&one_tool).unwrap();
    assert!((1000..1100).contains(&one.len()), "{}", one.len());
    assert!(batch_tools.len() <= 65_536, "{}", batch_tools.len());
    assert!(matches!(read(&one), Calls::One(_)));

    let mut group = c.benchmark_group("jsonrpc");
    group.throughput(Throughput::Bytes(one.len() as u64));
    group.bench_function("read/tools-call-1k", |b| b.iter(|| read(black_box(&one))));
    group.bench_function("read/serde-json-value-1k", |b| {
        b.iter(|| serde_json::from_slice::<Value>(black_box(&one)).unwrap())
    });
    group.bench_function("judge/tools-call-1k", |b| b.iter(|| judge(black_box(&one))));
    group.throughput(Throughput::Elements(1));
    let request = Request::post("/mcp")
        .header("host", "api.example.com")
        .header("x-api-key", "sk-7f3a9c2e")
        .header("content-type", "application/json")
        .body(())
        .unwrap();
    for (name, key, body) in [
        ("decide/header-key-1k", r#"["header:x-api-key"]"#, &one),
        (
            "decide/mcp-tool-1k",
            r#"["header:x-api-key", "mcp:tool"]"#,
            &one,
        ),
        (
            "decide/batch-100-tools",
            r#"["header:x-api-key", "mcp:tool"]"#,
            &batch_tools,
        ),
        (
            "decide/batch-100-one-tool",
            r#"["header:x-api-key", "mcp:tool"]"#,
            &batch_one_tool,
        ),
    ] {
        let (policy, store) = policy(key);
        assert!(decide(&policy, &store, &request, body), "{name}");
        group.bench_function(name, |b| {
            b.iter(|| decide(&policy, &store, &request, black_box(body)))
        });
    }
    group.finish();
}

criterion_group!(benches, jsonrpc);
criterion_main!(benches);
