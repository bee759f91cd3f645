use super::*;

/// GitHub's own example (docs.github.com, "Rate limits and query limits for
/// the GraphQL API", "Calculating a rate limit score before running the
/// call").
const GITHUB_EXAMPLE: &str = r#"query {
  viewer {
    login
    repositories(first: 100) {
      edges {
        node {
          id

          issues(first: 50) {
            edges {
              node {
                id

                labels(first: 60) {
                  edges {
                    node {
                      id
                      name
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}"#;

/// The operation of an `application/graphql` body.
fn document(source: &str) -> Option<Operation<'_>> {
    read(GraphqlRequest::Document(source.as_bytes()))
}

/// The requests of a document's only operation.
fn requests(source: &str) -> u64 {
    document(source).expect(source).requests
}

/// The operation of a JSON POST of `query` with `variables` (JSON text).
fn with_variables(query: &str, variables: &str) -> Operation<'static> {
    let body = serde_json::json!({
        "query": query,
        "variables": serde_json::from_str::<serde_json::Value>(variables).unwrap(),
    })
    .to_string();
    let operation = read(GraphqlRequest::Json(body.as_bytes())).expect(query);
    Operation {
        name: operation.name.map(|name| Cow::Owned(name.into_owned())),
        ..operation
    }
}

#[test]
fn githubs_example_takes_5101_requests_a_cost_of_51() {
    let operation = document(GITHUB_EXAMPLE).unwrap();
    assert_eq!(operation.requests, 1 + 100 + 100 * 50);
    assert_eq!(operation.cost, 51);
    assert_eq!(operation.kind, OperationType::Query);
    assert_eq!(operation.name_text(), "anonymous");
}

#[test]
fn the_three_shapes_read_the_same_operation() {
    let query = "query Repos($n: Int) { viewer { repositories(first: $n) { nodes { issues(first: 50) { totalCount } } } } }";
    let json =
        serde_json::json!({"query": query, "operationName": "Repos", "variables": {"n": 20}})
            .to_string();
    let get = "query=query+Repos(%24n%3A+Int)+%7B+viewer+%7B+repositories(first%3A+%24n)+%7B+nodes+%7B+issues(first%3A+50)+%7B+totalCount+%7D+%7D+%7D+%7D+%7D&operationName=Repos&variables=%7B%22n%22%3A20%7D";
    let expected = Operation {
        name: Some(Cow::Borrowed("Repos")),
        kind: OperationType::Query,
        requests: 1 + 20,
        cost: 1,
    };
    assert_eq!(
        read(GraphqlRequest::Json(json.as_bytes())),
        Some(expected.clone())
    );
    assert_eq!(read(GraphqlRequest::Get(get)), Some(expected.clone()));
    // No variables in a document body: `$n` counts 100.
    assert_eq!(
        document(query),
        Some(Operation {
            requests: 1 + 100,
            ..expected
        })
    );
}

#[test]
fn names_are_borrowed_from_the_request() {
    let body = br#"{"query":"query Repos { a }"}"#;
    let operation = read(GraphqlRequest::Json(body)).unwrap();
    assert!(matches!(operation.name, Some(Cow::Borrowed("Repos"))));
    let operation = document("query Repos { a }").unwrap();
    assert!(matches!(operation.name, Some(Cow::Borrowed("Repos"))));
    let body = br#"{"query":"query Repos {\n a }"}"#;
    let operation = read(GraphqlRequest::Json(body)).unwrap();
    assert_eq!(operation.name.as_deref(), Some("Repos"));
}

#[test]
fn operation_name_selects_the_operation_and_only_it_is_costed() {
    let query =
        "query Big { a(first: 100) { b(first: 100) { c } } } mutation Small { d(first: 1) { e } }";
    let body = |name: &str| serde_json::json!({"query": query, "operationName": name}).to_string();
    let small = body("Small");
    let operation = read(GraphqlRequest::Json(small.as_bytes())).unwrap();
    assert_eq!(operation.name_text(), "Small");
    assert_eq!(operation.kind, OperationType::Mutation);
    assert_eq!(operation.requests, 1);
    let big = body("Big");
    let operation = read(GraphqlRequest::Json(big.as_bytes())).unwrap();
    assert_eq!((operation.requests, operation.cost), (101, 1));
    let none = body("None");
    assert_eq!(read(GraphqlRequest::Json(none.as_bytes())), None);
}

#[test]
fn several_operations_without_a_name_are_unreadable() {
    let query = "query A { a } query B { b }";
    assert_eq!(document(query), None);
    let body = serde_json::json!({"query": query}).to_string();
    assert_eq!(read(GraphqlRequest::Json(body.as_bytes())), None);
}

#[test]
fn anonymous_operations_have_no_name() {
    for query in [
        "{ a }",
        "query { a }",
        "query($n: Int) { a(first: $n) { b } }",
    ] {
        let operation = document(query).unwrap();
        assert_eq!(operation.name, None);
        assert_eq!(operation.name_text(), ANONYMOUS);
    }
}

#[test]
fn operation_types_are_read() {
    assert_eq!(
        document("mutation M { a }").unwrap().kind,
        OperationType::Mutation
    );
    assert_eq!(
        document("subscription { a }").unwrap().kind,
        OperationType::Subscription
    );
    assert_eq!(
        document("query Q { a }").unwrap().kind,
        OperationType::Query
    );
    assert_eq!(OperationType::Mutation.as_str(), "mutation");
    assert_eq!(OperationType::Subscription.as_str(), "subscription");
    assert_eq!(OperationType::Query.as_str(), "query");
}

#[test]
fn variables_count_as_given_else_their_default_else_100() {
    let query =
        "query($n: Int = 10, $m: Int) { a(first: $n) { b(first: $m) { c(last: $x) { d } } } }";
    // a: 1; b: n; c: n × m.
    assert_eq!(
        with_variables(query, r#"{"n": 20, "m": 3}"#).requests,
        1 + 20 + 60
    );
    assert_eq!(with_variables(query, r#"{"m": 3}"#).requests, 1 + 10 + 30);
    assert_eq!(with_variables(query, "{}").requests, 1 + 10 + 1000);
    assert_eq!(with_variables(query, "null").requests, 1 + 10 + 1000);
    // An explicit null is a value, not an absence: it counts 100.
    assert_eq!(
        with_variables(query, r#"{"n": null, "m": 1}"#).requests,
        1 + 100 + 100
    );
    // Non-integers count 100.
    for value in ["-1", "2.5", r#""20""#, "[20]", r#"{"n": 20}"#, "true"] {
        let variables = format!(r#"{{"n": {value}, "m": 1}}"#);
        assert_eq!(
            with_variables(query, &variables).requests,
            1 + 100 + 100,
            "{value}"
        );
    }
    // A default that is not a non-negative integer counts 100.
    let query = "query($n: Int = -5) { a(first: $n) { b(first: 1) { c } } }";
    assert_eq!(with_variables(query, "{}").requests, 1 + 100);
}

#[test]
fn written_arguments_count_as_written() {
    // Both first and last: the larger.
    assert_eq!(
        requests("{ a(first: 5, last: 7) { b(first: 1) { c } } }"),
        1 + 7
    );
    // A connection of 0 holds nothing to fill.
    assert_eq!(requests("{ a(first: 0) { b(first: 10) { c } } }"), 1);
    // Not a non-negative integer: 100.
    for value in [
        "-3", "2.0", r#""2""#, "null", "TWO", "[2]", "{n: 2}", "true",
    ] {
        let query = format!("{{ a(first: {value}) {{ b(first: 1) {{ c }} }} }}");
        assert_eq!(requests(&query), 1 + 100, "{value}");
    }
    // Aliased: the same field.
    assert_eq!(
        requests("{ x: a(first: 3) { y: b(last: 2) { c } } }"),
        1 + 3
    );
    // A `first` of a directive is not a connection's.
    assert_eq!(requests("{ a @page(first: 10) { b(first: 2) { c } } }"), 1);
}

#[test]
fn fragments_are_counted_where_they_are_spread() {
    let query = "query { x(first: 3) { ...F } ...F }
        fragment F on T { a(first: 10) { ...G } }
        fragment G on A { b(first: 5) { c } }";
    // Under x (×3): a 3, b 30; at the top: a 1, b 10; and x 1.
    assert_eq!(requests(query), 1 + (3 + 30) + (1 + 10));
    let inline = "{ x(first: 10) { ... on T { y(first: 10) { z(first: 2) { w } } } ... { v(first: 4) { u } } } }";
    assert_eq!(requests(inline), 1 + 10 + 100 + 10);
    // A fragment spread twice in one selection set counts twice.
    let twice = "{ x(first: 2) { ...F ...F } } fragment F on T { a(first: 10) { b } }";
    assert_eq!(requests(twice), 1 + 2 + 2);
}

#[test]
fn fragments_a_server_refuses_make_the_operation_unreadable() {
    for query in [
        // A cycle, direct and through another fragment.
        "{ ...F } fragment F on T { a { ...F } }",
        "{ ...F } fragment F on T { ...G } fragment G on T { b(first: 1) { ...F } }",
        // Not defined.
        "{ ...F }",
        // Defined twice.
        "{ ...F } fragment F on T { a } fragment F on T { b }",
    ] {
        assert_eq!(document(query), None, "{query}");
    }
    // A fragment the operation does not spread is not read.
    assert!(document("{ a } fragment F on T { ...F }").is_some());
}

#[test]
fn a_fan_out_of_fragments_is_counted_in_linear_time() {
    // F0 holds a connection; F(k) spreads F(k-1) twice: F(k) is 2^k requests.
    let mut query = String::from("query { ...F60 } fragment F0 on T { a(first: 1) { b } }");
    for k in 1..=60 {
        query.push_str(&format!(
            " fragment F{k} on T {{ ...F{j} ...F{j} }}",
            j = k - 1
        ));
    }
    assert_eq!(requests(&query), 1 << 60);
    // Far past 64 bits: the sum saturates.
    let mut query = String::from("query { ...F1000 } fragment F0 on T { a(first: 1) { b } }");
    for k in 1..=1000 {
        query.push_str(&format!(
            " fragment F{k} on T {{ ...F{j} ...F{j} }}",
            j = k - 1
        ));
    }
    let started = std::time::Instant::now();
    let operation = document(&query).unwrap();
    assert_eq!((operation.requests, operation.cost), (u64::MAX, u64::MAX));
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
}

/// `depth` connections of `size` nested in one another.
fn nested(depth: usize, size: u64) -> String {
    let mut query = String::new();
    for _ in 0..depth {
        query.push_str(&format!("{{ c(first: {size}) "));
    }
    query.push_str("{ id }");
    query.push_str(&" }".repeat(depth));
    query
}

#[test]
fn costs_saturate_rather_than_wrap() {
    // Ten connections of 100: 1 + 100 + … + 100^9, within 64 bits.
    let ten: u64 = (0..10).map(|k| 100u64.pow(k)).sum();
    let query = nested(10, 100);
    let operation = document(&query).unwrap();
    assert_eq!(operation.requests, ten);
    assert_eq!(operation.cost, ten / 100);
    // Twelve overflow 64 bits.
    let query = nested(12, 100);
    let operation = document(&query).unwrap();
    assert_eq!((operation.requests, operation.cost), (u64::MAX, u64::MAX));
    // A written size beyond 64 bits saturates too.
    let operation =
        document("{ a(first: 99999999999999999999999) { b(first: 1) { c } } }").unwrap();
    assert_eq!(operation.cost, u64::MAX);
    // As deep as the parser goes: the walk keeps its own stack.
    let deep = nested(RECURSION_LIMIT - 2, 2);
    let handle = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || document(&deep).map(|operation| operation.cost))
        .unwrap();
    assert_eq!(handle.join().unwrap(), Some(u64::MAX));
}

#[test]
fn a_document_that_does_not_parse_is_unreadable() {
    for query in ["{ a(first: 10) { b }", "query A { a } }", "not graphql", ""] {
        assert_eq!(document(query), None, "{query}");
    }
    let deep = format!(
        "{}{}",
        "{ a ".repeat(RECURSION_LIMIT + 1),
        "}".repeat(RECURSION_LIMIT + 1)
    );
    assert_eq!(document(&deep), None);
}

#[test]
fn the_score_rounds_to_the_nearest_hundred_at_least_1() {
    assert_eq!(score(0), 1);
    assert_eq!(score(49), 1);
    assert_eq!(score(149), 1);
    assert_eq!(score(150), 2);
    assert_eq!(score(249), 2);
    assert_eq!(score(250), 3);
    assert_eq!(score(5_101), 51);
    assert_eq!(score(u64::MAX - 1), (u64::MAX - 1) / 100);
    assert_eq!(score(u64::MAX), u64::MAX);
    // The same through documents: 1 + 48, 1 + 149, 1 + 248 requests.
    assert_eq!(
        document("{ a(first: 48) { b(first: 1) { c } } }")
            .unwrap()
            .cost,
        1
    );
    assert_eq!(
        document("{ a(first: 149) { b(first: 1) { c } } }")
            .unwrap()
            .cost,
        2
    );
    assert_eq!(
        document("{ a(first: 248) { b(first: 1) { c } } }")
            .unwrap()
            .cost,
        2
    );
}
