//! `/metrics` tells the truth: known traffic through a real sluice produces
//! every outcome, and the counters and histogram counts are asserted to the
//! exact value — not "at least one".

use crate::support;

use http::StatusCode;
use support::exposition::Exposition;
use support::{get, start, Sluice};

/// Three rules on two routes and a deny list:
/// - `strict` (`/strict`, keyed by `x-user`, missing → 400): 2 a minute;
/// - `watch` (`/strict`, shadow, by IP): 1 a minute, so it would limit the
///   second admitted request;
/// - `held` (`/held`, delay mode): one request every 400 ms, held rather
///   than refused.
///
/// Requests through a trusted proxy (loopback) carry their client address
/// in `X-Forwarded-For`; 192.0.2.0/24 is denied.
const CONFIG: &str = r#"
trusted_proxies = ["127.0.0.1/32"]

[access]
deny = ["192.0.2.0/24"]

[[rule]]
name = "strict"
match = { path_prefix = "/strict" }
key = ["header:x-user"]
missing = "reject"
rate = "2/m"
burst = 2

[[rule]]
name = "watch"
match = { path_prefix = "/strict" }
rate = "1/m"
burst = 1
shadow = true

[[rule]]
name = "held"
match = { path_prefix = "/held" }
rate = "5/2s"
burst = 1
on_limit = "delay"
max_delay = "30s"
"#;

async fn status(sluice: &Sluice, path: &str, headers: &[(&str, &str)]) -> StatusCode {
    get(&sluice.url(path), headers).await.status
}

fn requests(metrics: &Exposition, rule: &str, outcome: &str) -> f64 {
    metrics.value(
        "sluice_requests_total",
        &[("rule", rule), ("outcome", outcome)],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_traffic_produces_exact_counters_for_every_outcome() {
    let (upstream, sluice) = start(CONFIG).await;
    let user = [("x-user", "alice")];

    // Before any traffic every rule's outcome series exist at 0.
    let before = sluice.exposition().await;
    for rule in ["strict", "watch", "held"] {
        for outcome in [
            "allowed",
            "limited",
            "delayed",
            "shadow_limited",
            "denied",
            "missing_key",
        ] {
            assert_eq!(requests(&before, rule, outcome), 0.0, "{rule} {outcome}");
        }
    }

    // strict allowed, watch allowed.
    assert_eq!(status(&sluice, "/strict", &user).await, StatusCode::OK);
    // strict allowed, watch would have limited: shadow_limited.
    assert_eq!(status(&sluice, "/strict", &user).await, StatusCode::OK);
    // strict limited; a refused request never reaches the shadow rule.
    assert_eq!(
        status(&sluice, "/strict", &user).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // No key: strict counts missing_key; watch comes after it and is not
    // reached.
    assert_eq!(
        status(&sluice, "/strict", &[]).await,
        StatusCode::BAD_REQUEST
    );
    // A denied address: denied for every rule matching the route.
    let denied = [("x-user", "bob"), ("x-forwarded-for", "192.0.2.9")];
    assert_eq!(
        status(&sluice, "/strict", &denied).await,
        StatusCode::FORBIDDEN
    );
    // held: the first passes at once, the next two wait for their slots
    // (400 ms apart, far longer than a request takes here).
    for _ in 0..3 {
        assert_eq!(status(&sluice, "/held", &[]).await, StatusCode::OK);
    }
    // No rule applies: forwarded, not decided; and an upstream 500.
    assert_eq!(status(&sluice, "/free", &[]).await, StatusCode::OK);
    assert_eq!(
        status(&sluice, "/status/500", &[]).await,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    // Forwarded: 2 strict, 3 held, /free and /status/500.
    upstream.wait_for(7).await;
    assert_eq!(upstream.count(), 7);

    let after = sluice.exposition().await;
    let expected = [
        ("strict", "allowed", 2.0),
        ("strict", "limited", 1.0),
        ("strict", "missing_key", 1.0),
        ("strict", "denied", 1.0),
        ("strict", "delayed", 0.0),
        ("strict", "shadow_limited", 0.0),
        ("watch", "allowed", 1.0),
        ("watch", "shadow_limited", 1.0),
        ("watch", "denied", 1.0),
        ("watch", "limited", 0.0),
        ("watch", "missing_key", 0.0),
        ("watch", "delayed", 0.0),
        ("held", "allowed", 1.0),
        ("held", "delayed", 2.0),
        ("held", "limited", 0.0),
        ("held", "shadow_limited", 0.0),
        ("held", "denied", 0.0),
        ("held", "missing_key", 0.0),
    ];
    for (rule, outcome, count) in expected {
        assert_eq!(requests(&after, rule, outcome), count, "{rule} {outcome}");
    }

    // What clients got: 2 + 3 + 1 forwarded 200s; 429, 400, 403; the 500.
    for (class, count) in [
        ("1xx", 0.0),
        ("2xx", 6.0),
        ("3xx", 0.0),
        ("4xx", 3.0),
        ("5xx", 1.0),
    ] {
        let got = after.value("sluice_responses_total", &[("code_class", class)]);
        assert_eq!(got, count, "{class}");
    }

    // Decided: the 3 /strict requests that reached the limiters and the 3
    // /held ones (not the refusals before admission, not the unruled).
    assert_eq!(after.value("sluice_decision_seconds_count", &[]), 6.0);
    // Every memory-store call is timed, one per decided request.
    assert_eq!(
        after.value("sluice_store_seconds_count", &[("backend", "memory")]),
        6.0
    );
    // Forwarded requests: overhead and upstream time each once.
    assert_eq!(after.value("sluice_overhead_seconds_count", &[]), 7.0);
    assert_eq!(
        after.value("sluice_upstream_seconds_count", &[("upstream", "default")]),
        7.0
    );
    // Two holds, each about 400 ms.
    let held = [("rule", "held")];
    assert_eq!(after.value("sluice_delay_seconds_count", &held), 2.0);
    let held_for = after.value("sluice_delay_seconds_sum", &held);
    assert!((0.4..30.0).contains(&held_for), "held {held_for} s in all");
    assert_eq!(
        after.value("sluice_delay_seconds_count", &[("rule", "strict")]),
        0.0
    );
    assert_eq!(after.value("sluice_queue_depth", &held), 0.0);
    // Histogram counts agree with their +Inf buckets.
    for (name, labels) in [
        ("sluice_decision_seconds", None),
        ("sluice_overhead_seconds", None),
        ("sluice_upstream_seconds", Some(("upstream", "default"))),
    ] {
        let mut infinity = vec![("le", "+Inf")];
        infinity.extend(labels);
        assert_eq!(
            after.value(&format!("{name}_bucket"), &infinity),
            after.value(&format!("{name}_count"), &Vec::from_iter(labels)),
            "{name}"
        );
    }
    // Nothing failed upstream; the store never fell back.
    for kind in ["connect", "timeout", "other", "tls"] {
        let errors = after.value(
            "sluice_upstream_errors_total",
            &[("upstream", "default"), ("kind", kind)],
        );
        assert_eq!(errors, 0.0, "{kind}");
    }
    assert_eq!(after.value("sluice_store_fallback_active", &[]), 0.0);
    for kind in ["unavailable", "script"] {
        let labels = [("backend", "memory"), ("kind", kind)];
        assert_eq!(after.value("sluice_store_errors_total", &labels), 0.0);
    }
    // Keys tracked: alice in strict (bob was denied before any limiter),
    // the loopback address in watch and in held (both key by IP).
    assert_eq!(
        after.value("sluice_tracked_keys", &[("rule", "strict")]),
        1.0
    );
    assert_eq!(
        after.value("sluice_tracked_keys", &[("rule", "watch")]),
        1.0
    );
    assert_eq!(after.value("sluice_tracked_keys", &[("rule", "held")]), 1.0);
    // No caller's key is a label value anywhere.
    for sample in &after.samples {
        for value in sample.labels.values() {
            assert!(
                !["alice", "bob", "127.0.0.1", "192.0.2.9"].contains(&value.as_str()),
                "{sample:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_metrics_describe_this_process() {
    let (_upstream, sluice) = start(CONFIG).await;
    let metrics = sluice.exposition().await;
    // In-process, the process is the test's: alive, with memory, threads
    // and descriptors (its own sockets at least).
    assert!(metrics.value("process_resident_memory_bytes", &[]) > 1e6);
    assert!(metrics.value("process_open_fds", &[]) >= 3.0);
    assert!(metrics.value("process_max_fds", &[]) >= metrics.value("process_open_fds", &[]));
    assert!(metrics.value("process_cpu_seconds_total", &[]) >= 0.0);
    assert!(metrics.value("process_start_time_seconds", &[]) > 1.6e9);
}
