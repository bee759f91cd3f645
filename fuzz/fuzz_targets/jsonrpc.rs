//! Arbitrary bytes as a JSON-RPC request body, read by
//! `key::jsonrpc::read`: it never panics, and wherever serde_json reads the
//! body as a `Value` the calls are the ones that value holds (a member
//! written twice is its last, as in serde_json's map): each element's
//! method, a `tools/call`'s tool and the id (compared as values). A body
//! serde_json refuses may still be read (the reader skips what no key
//! reads without checking it): a server refuses such a body whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use sluice::key::jsonrpc::{read, Call, Calls};

fuzz_target!(|body: &[u8]| {
    let calls = read(body);
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    match (&value, &calls) {
        (Value::Object(members), Calls::One(call)) => same(members, call),
        (Value::Array(elements), Calls::Batch(batch)) if !elements.is_empty() => {
            // The calls in order; the other elements counted.
            let mut calls = batch.calls.iter();
            let mut others = 0;
            for element in elements {
                match element {
                    Value::Object(members) if is_call(members) => {
                        same(members, calls.next().expect("as many calls"))
                    }
                    _ => others += 1,
                }
            }
            assert!(calls.next().is_none(), "as many calls");
            assert_eq!(batch.others, others);
        }
        (Value::Array(elements), Calls::None) => assert!(elements.is_empty()),
        (Value::Object(_) | Value::Array(_), _) => panic!("{value} read as {calls:?}"),
        (_, calls) => assert_eq!(*calls, Calls::None),
    }
});

/// Whether `members` make a call, as serde_json reads them.
fn is_call(members: &Map<String, Value>) -> bool {
    members.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
        && members.get("method").and_then(Value::as_str).is_some()
}

/// The call `members` make, as serde_json reads it, is `call`.
fn same(members: &Map<String, Value>, call: &Call<'_>) {
    let method = members.get("method").and_then(Value::as_str);
    if !is_call(members) {
        assert_eq!(*call, Call::default(), "{members:?}");
        return;
    }
    let text = |bytes: Option<&[u8]>| bytes.map(|b| String::from_utf8(b.to_vec()).unwrap());
    assert_eq!(text(call.method.as_deref()).as_deref(), method);
    let tool = match method {
        Some("tools/call") => members
            .get("params")
            .and_then(Value::as_object)
            .and_then(|params| params.get("name"))
            .and_then(Value::as_str),
        _ => None,
    };
    assert_eq!(text(call.tool.as_deref()).as_deref(), tool);
    let id = call
        .id
        .map(|raw| serde_json::from_slice::<Value>(raw).expect("an id serde_json read"));
    assert_eq!(id.as_ref(), members.get("id"));
}
