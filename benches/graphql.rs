//! What reading a GraphQL request costs (`graphql:operation`,
//! `graphql:type`, `cost = "graphql"`), on one core:
//!
//! - `cost-100-fields`: the cost of a 100-field query with 3 nested
//!   connections (the target is under 20 µs), sent as an
//!   `application/graphql` body: parsing the document, selecting its
//!   operation and walking its connections;
//! - `json-1k`: `read` of a typical 1 KiB JSON POST (a named query with
//!   variables, indented with `\n` escapes as clients send it, a fragment
//!   and two connections sized by variables): what a `graphql:operation`
//!   key adds to the request path.
//!
//! Each iteration is one request read whole. Before timing, a counting
//! allocator reports the allocations of one `read`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice::key::graphql::{read, GraphqlRequest};

#[path = "common/counting_alloc.rs"]
mod counting_alloc;
#[path = "common/graphql_inputs.rs"]
mod graphql_inputs;

use graphql_inputs::{hundred_fields, JSON_1K_QUERY};

/// A typical JSON POST of about 1 KiB: a named query indented with `\n`
/// escapes, variables sizing its connections, a fragment.
fn json_1k() -> Vec<u8> {
    let body = serde_json::json!({
        "operationName": "RepositoryIssues",
        "query": JSON_1K_QUERY,
        "variables": {"owner": "octocat", "name": "hello-world", "first": 50, "labels": 10},
    });
    serde_json::to_vec(&body).unwrap()
}

fn graphql(c: &mut Criterion) {
    let document = hundred_fields();
    let fields = document
        .lines()
        .filter(|line| !line.trim().starts_with('}'))
        .count();
    assert_eq!(fields - 1, 100, "the operation line and 100 fields");
    let json = json_1k();

    let mut group = c.benchmark_group("graphql");
    for (name, request, cost) in [
        (
            "cost-100-fields",
            GraphqlRequest::Document(document.as_bytes()),
            51,
        ),
        // 1 + 50 requests (`labels` is filled once per issue).
        ("json-1k", GraphqlRequest::Json(&json), 1),
    ] {
        let bytes = match request {
            GraphqlRequest::Document(body) | GraphqlRequest::Json(body) => body.len(),
            GraphqlRequest::Get(query) => query.len(),
        };
        let operation = read(request).expect(name);
        assert_eq!(operation.cost, cost, "{name}: {operation:?}");
        let allocations = counting_alloc::allocations(|| read(black_box(request)));
        println!("graphql/{name}: {bytes} bytes; {allocations} allocations per read");
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_function(name, |b| b.iter(|| read(black_box(request))));
    }
    group.finish();
}

criterion_group!(benches, graphql);
criterion_main!(benches);
