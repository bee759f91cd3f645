//! sluice's GraphQL reader (`sluice::key::graphql::read`) against the two
//! parser crates it could have used instead, graphql-parser 0.4.1 and
//! apollo-parser 0.8.7 (docs/conversation.md, "What it costs", says why
//! sluice has a parser of its own):
//!
//! - `100-fields`: the 100-field query with 3 nested connections of
//!   benches/graphql.rs. Each crate parses it and walks it for GitHub's
//!   connection cost (51); sluice `read`s it as an `application/graphql`
//!   body (parse, select the operation, cost).
//! - `json-1k query`: the query of benches/graphql.rs's 1 KiB JSON POST,
//!   the text alone. Each crate parses it; sluice `read`s it as a document.
//!
//! For each case: µs per operation, the median of 5 runs of 10,000
//! iterations, the cases interleaved run by run so that a noisy moment
//! falls on all of them; time is the thread's CPU time, so time the thread
//! spent descheduled is not counted. Then heap allocations per operation
//! (one operation, counted by a counting global allocator).
//!
//! From the repository's root:
//!
//! ```text
//! cargo run --release --manifest-path scripts/bench/graphql-parsers/Cargo.toml
//! ```
//!
//! (optionally with `CARGO_TARGET_DIR=/tmp/gpbench-target` to keep the
//! build, a few minutes with fat LTO, out of the repository).

use std::hint::black_box;

use apollo_parser::cst;
use graphql_parser::query as gq;
use sluice::key::graphql::{read, GraphqlRequest};

#[path = "../../../../benches/common/counting_alloc.rs"]
mod counting_alloc;
/// The inputs of benches/graphql.rs.
#[path = "../../../../benches/common/graphql_inputs.rs"]
mod graphql_inputs;

use graphql_inputs::{hundred_fields, JSON_1K_QUERY};

const RUNS: usize = 5;
const ITERATIONS: u32 = 10_000;

// ---- The cost walks on each crate's tree ----
//
// Only what the 100-field query needs (integer `first`/`last`, no
// variables, no fragments), so these are a lower bound on what the full
// cost of src/key/graphql/cost.rs would take on either tree.

/// GitHub's score of a sum of requests: / 100, a half up, at least 1.
fn score(requests: u64) -> u64 {
    (requests / 100 + u64::from(requests % 100 >= 50)).max(1)
}

fn gp_requests<'a>(set: &gq::SelectionSet<'a, &'a str>, multiplier: u64) -> u64 {
    let mut sum = 0u64;
    for item in &set.items {
        if let gq::Selection::Field(field) = item {
            let size = field
                .arguments
                .iter()
                .filter(|(name, _)| *name == "first" || *name == "last")
                .filter_map(|(_, value)| match value {
                    gq::Value::Int(n) => n.as_i64().and_then(|n| u64::try_from(n).ok()),
                    _ => None,
                })
                .max();
            let inner = match size {
                Some(size) => {
                    sum = sum.saturating_add(multiplier);
                    multiplier.saturating_mul(size)
                }
                None => multiplier,
            };
            sum = sum.saturating_add(gp_requests(&field.selection_set, inner));
        }
    }
    sum
}

fn gp_cost<'a>(document: &gq::Document<'a, &'a str>) -> u64 {
    let requests = document
        .definitions
        .iter()
        .map(|definition| match definition {
            gq::Definition::Operation(gq::OperationDefinition::Query(query)) => {
                gp_requests(&query.selection_set, 1)
            }
            _ => 0,
        })
        .sum();
    score(requests)
}

fn apollo_requests(set: &cst::SelectionSet, multiplier: u64) -> u64 {
    let mut sum = 0u64;
    for selection in set.selections() {
        if let cst::Selection::Field(field) = selection {
            let size = field.arguments().and_then(|arguments| {
                arguments
                    .arguments()
                    .filter(|argument| {
                        argument
                            .name()
                            .is_some_and(|name| name.text() == "first" || name.text() == "last")
                    })
                    .filter_map(|argument| match argument.value()? {
                        cst::Value::IntValue(n) => u64::try_from(i32::try_from(&n).ok()?).ok(),
                        _ => None,
                    })
                    .max()
            });
            let inner = match size {
                Some(size) => {
                    sum = sum.saturating_add(multiplier);
                    multiplier.saturating_mul(size)
                }
                None => multiplier,
            };
            if let Some(set) = field.selection_set() {
                sum = sum.saturating_add(apollo_requests(&set, inner));
            }
        }
    }
    sum
}

fn apollo_cost(document: &cst::Document) -> u64 {
    let requests = document
        .definitions()
        .filter_map(|definition| match definition {
            cst::Definition::OperationDefinition(operation) => operation.selection_set(),
            _ => None,
        })
        .map(|set| apollo_requests(&set, 1))
        .sum();
    score(requests)
}

// ---- Timing ----

/// This thread's CPU time, in µs.
fn thread_cpu_micros() -> f64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to write.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    now.tv_sec as f64 * 1e6 + now.tv_nsec as f64 * 1e-3
}

fn main() {
    let hundred = hundred_fields();
    let (hundred, json) = (hundred.as_str(), JSON_1K_QUERY);

    // The walks count what sluice counts, or the comparison is not like
    // for like.
    let parsed = gq::parse_query::<&str>(hundred).expect("graphql-parser: 100-fields");
    assert_eq!(gp_cost(&parsed), 51, "graphql-parser walk");
    let tree = apollo_parser::Parser::new(hundred).parse();
    assert_eq!(tree.errors().len(), 0, "apollo-parser: 100-fields");
    assert_eq!(apollo_cost(&tree.document()), 51, "apollo-parser walk");
    let operation = read(GraphqlRequest::Document(hundred.as_bytes())).expect("sluice: 100-fields");
    assert_eq!(operation.cost, 51, "sluice");
    gq::parse_query::<&str>(json).expect("graphql-parser: json-1k query");
    let tree = apollo_parser::Parser::new(json).parse();
    assert_eq!(tree.errors().len(), 0, "apollo-parser: json-1k query");
    read(GraphqlRequest::Document(json.as_bytes())).expect("sluice: json-1k query");

    type Case<'a> = (&'static str, Box<dyn Fn() + 'a>);
    let cases: [Case; 6] = [
        (
            "100-fields: graphql-parser parse + cost",
            Box::new(|| {
                let document = gq::parse_query::<&str>(black_box(hundred)).unwrap();
                black_box(gp_cost(&document));
            }),
        ),
        (
            "100-fields: apollo-parser parse + cost",
            Box::new(|| {
                let tree = apollo_parser::Parser::new(black_box(hundred)).parse();
                black_box(apollo_cost(&tree.document()));
            }),
        ),
        (
            "100-fields: sluice read (document)",
            Box::new(|| {
                black_box(read(GraphqlRequest::Document(black_box(
                    hundred.as_bytes(),
                ))));
            }),
        ),
        (
            "json-1k query: graphql-parser parse",
            Box::new(|| {
                black_box(gq::parse_query::<&str>(black_box(json)).unwrap());
            }),
        ),
        (
            "json-1k query: apollo-parser parse",
            Box::new(|| {
                black_box(apollo_parser::Parser::new(black_box(json)).parse());
            }),
        ),
        (
            "json-1k query: sluice read (document)",
            Box::new(|| {
                black_box(read(GraphqlRequest::Document(black_box(json.as_bytes()))));
            }),
        ),
    ];

    // Warm up (caches, branch predictors, the allocator's free lists)
    // before counting or timing anything.
    for (_, case) in &cases {
        (0..1_000).for_each(|_| case());
    }
    let allocations: Vec<usize> = cases
        .iter()
        .map(|(_, case)| counting_alloc::allocations(case))
        .collect();
    let mut micros = vec![Vec::with_capacity(RUNS); cases.len()];
    for _ in 0..RUNS {
        for ((_, case), runs) in cases.iter().zip(&mut micros) {
            let start = thread_cpu_micros();
            (0..ITERATIONS).for_each(|_| case());
            runs.push((thread_cpu_micros() - start) / f64::from(ITERATIONS));
        }
    }

    println!(
        "{} bytes (100-fields), {} bytes (json-1k query); \
         median of {RUNS} runs of {ITERATIONS} iterations, thread CPU time\n",
        hundred.len(),
        json.len()
    );
    println!(
        "{:<40} {:>9} {:>19} {:>12}",
        "", "µs/op", "runs: min–max", "allocations"
    );
    for (((name, _), runs), allocations) in cases.iter().zip(&mut micros).zip(&allocations) {
        runs.sort_by(f64::total_cmp);
        let (median, min, max) = (runs[RUNS / 2], runs[0], runs[RUNS - 1]);
        println!("{name:<40} {median:>9.2} {min:>9.2}–{max:<9.2} {allocations:>12}");
    }
}
