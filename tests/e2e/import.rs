//! `sluice import` in the real binary, on the other projects' own
//! examples: envoyproxy/ratelimit's configs (tests/fixtures/envoy-ratelimit/,
//! docs/import-envoy-ratelimit.md), Envoy Gateway's rate limit policies
//! (tests/fixtures/envoy-gateway/) and Traefik's rateLimit middlewares
//! (tests/fixtures/traefik/, both docs/import-gateway-policies.md). Each
//! imports into rules that `sluice check` accepts appended to a config, or,
//! when it uses what sluice has no equivalent for, the import exits 1 naming
//! the field and prints nothing on stdout. Imported rules then limit a
//! running sluice as the policy says.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use http::StatusCode;

/// Every fixture, and the error the import must report for it (`None`: it
/// imports).
const FIXTURES: &[(&str, Option<&str>)] = &[
    ("examples-ratelimit-config-config.yaml", None),
    (
        "examples-ratelimit-config-example.yaml",
        Some("descriptors[0].rate_limit.replaces: no equivalent"),
    ),
    ("readme-example-1.yaml", None),
    ("readme-example-2.yaml", None),
    ("readme-example-3.yaml", None),
    ("readme-example-4-match.yaml", None),
    ("readme-example-4-no-match.yaml", None),
    ("readme-example-5.yaml", None),
    ("readme-example-6.yaml", None),
    (
        "readme-example-7.yaml",
        Some("descriptors[1].descriptors[0].rate_limit.replaces: no equivalent"),
    ),
    ("readme-example-8.yaml", None),
    (
        "readme-example-9-middle.yaml",
        Some("descriptors[0].value: \"/api/*/action\" is a wildcard"),
    ),
    (
        "readme-example-9-multiple.yaml",
        Some("descriptors[0].value: \"/api/*/resource/*/action\" is a wildcard"),
    ),
    (
        "readme-example-9-trailing.yaml",
        Some("descriptors[0].value: \"value*\" is a wildcard"),
    ),
    ("readme-example-10.yaml", None),
    (
        "readme-example-10-wildcard.yaml",
        Some("descriptors[0].descriptors[0].value: \"read*\" is a wildcard"),
    ),
    (
        "readme-example-11.yaml",
        Some("descriptors[0].share_threshold: no equivalent"),
    ),
    (
        "readme-example-11-metrics.yaml",
        Some("descriptors[0].share_threshold: no equivalent"),
    ),
];

/// Envoy Gateway's rate limit task pages (global and local), one file per
/// section as an operator saves it, and the policy the migration guide
/// shows for ingress-nginx's `limit-rps`.
const ENVOY_GATEWAY_FIXTURES: &[(&str, Option<&str>)] = &[
    ("global-rate-limit-all-requests.yaml", None),
    ("global-rate-limit-based-on-http-method.yaml", None),
    ("global-rate-limit-based-on-path.yaml", None),
    ("global-rate-limit-client-ip-addresses.yaml", None),
    (
        "global-rate-limit-distinct-users-except-admin.yaml",
        Some(
            "document 1: spec.rateLimit.global.rules[0].clientSelectors[0].headers[1].invert: \
             no equivalent",
        ),
    ),
    ("global-rate-limit-jwt-claims.yaml", None),
    ("global-rate-limit-policy-merging.yaml", None),
    ("global-rate-limit-specific-user.yaml", None),
    ("local-migrating-limit-rps-annotation.yaml", None),
    ("local-rate-limit-all-requests.yaml", None),
    ("local-rate-limit-based-on-http-method.yaml", None),
    ("local-rate-limit-based-on-path.yaml", None),
    (
        "local-rate-limit-specific-user-unless-within-test-org.yaml",
        Some(
            "document 1: spec.rateLimit.local.rules[0].clientSelectors[0].headers[1].invert: \
             no equivalent",
        ),
    ),
    ("local-rate-limit-specific-user.yaml", None),
];

/// Traefik's rateLimit pages: each option's Kubernetes and file examples,
/// as the docs print them (a tab and a lower-case `ratelimit` included).
const TRAEFIK_FIXTURES: &[(&str, Option<&str>)] = &[
    ("middlewares-http-ratelimit-average-file.yaml", None),
    ("middlewares-http-ratelimit-average-kubernetes.yaml", None),
    ("middlewares-http-ratelimit-burst-file.yaml", None),
    ("middlewares-http-ratelimit-burst-kubernetes.yaml", None),
    (
        "middlewares-http-ratelimit-configuration-example-file.yaml",
        None,
    ),
    (
        "middlewares-http-ratelimit-configuration-example-kubernetes.yaml",
        None,
    ),
    (
        "middlewares-http-ratelimit-ipstrategy-depth-file.yaml",
        None,
    ),
    (
        "middlewares-http-ratelimit-ipstrategy-depth-kubernetes.yaml",
        None,
    ),
    (
        "middlewares-http-ratelimit-ipstrategy-excludedips-file.yaml",
        None,
    ),
    (
        "middlewares-http-ratelimit-ipstrategy-excludedips-kubernetes.yaml",
        None,
    ),
    (
        "middlewares-http-ratelimit-ipstrategy-ipv6subnet-file.yaml",
        None,
    ),
    (
        "middlewares-http-ratelimit-ipstrategy-ipv6subnet-kubernetes.yaml",
        Some("spec.ratelimit: unknown field: Kubernetes reads field names as written"),
    ),
    ("middlewares-http-ratelimit-period-file.yaml", None),
    ("middlewares-http-ratelimit-period-kubernetes.yaml", None),
    ("middlewares-http-ratelimit-redis-endpoints-file.yaml", None),
    (
        "middlewares-http-ratelimit-redis-endpoints-kubernetes.yaml",
        None,
    ),
    (
        "middlewares-http-ratelimit-sourcecriterion-requestheadername-file.yaml",
        None,
    ),
    (
        "middlewares-http-ratelimit-sourcecriterion-requestheadername-kubernetes.yaml",
        Some("not valid YAML"),
    ),
    (
        "middlewares-http-ratelimit-sourcecriterion-requesthost-file.yaml",
        None,
    ),
    (
        "middlewares-http-ratelimit-sourcecriterion-requesthost-kubernetes.yaml",
        None,
    ),
    ("reference-ratelimit-configuration-example-file.yaml", None),
    (
        "reference-ratelimit-configuration-example-kubernetes.yaml",
        None,
    ),
];

/// What the imported rules are appended to: an upstream and the rate limit
/// service's listener.
const BASE: &str =
    "[server]\nupstream = \"http://127.0.0.1:9\"\n\n[rls]\nlisten = \"127.0.0.1:0\"\n\n";

fn sluice(args: &[&str], file: &Path) -> Output {
    Command::new(support::binary())
        .args(args)
        .arg(file)
        .env_remove("SLUICE_CONFIG")
        .output()
        .expect("run sluice")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every fixture of `format` in tests/fixtures/`format`/ imports into rules
/// `check` accepts and lists, or is refused with `expected_error` (and
/// nothing on stdout); every fixture there has its outcome listed.
fn imports_or_is_refused(format: &str, fixtures: &[(&str, Option<&str>)]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format);
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let mut listed: Vec<String> = fixtures.iter().map(|(name, _)| name.to_string()).collect();
    listed.sort();
    assert_eq!(
        found, listed,
        "every fixture needs its expected outcome here"
    );

    for (name, expected_error) in fixtures {
        let fixture = dir.join(name);
        let import = sluice(&["import", format], &fixture);
        let (stdout, stderr) = (text(&import.stdout), text(&import.stderr));
        if let Some(error) = expected_error {
            assert_eq!(import.status.code(), Some(1), "{name}: {stdout}");
            assert_eq!(stdout, "", "{name}: nothing on stdout when refused");
            assert!(
                stderr.contains(&format!("{}: {error}", fixture.display())),
                "{name}: {stderr}"
            );
            continue;
        }
        assert!(import.status.success(), "{name}: {stderr}");
        assert_eq!(stderr, "", "{name}");
        assert!(stdout.starts_with("# Imported by"), "{name}: {stdout}");
        let config = tempfile::tempdir().unwrap();
        let path = support::write_config(config.path(), &format!("{BASE}{stdout}"));
        let check = sluice(&["check", "--config"], &path);
        assert!(
            check.status.success(),
            "{name}: check refused the import:\n{}\n{BASE}{stdout}",
            text(&check.stderr)
        );
        // Every imported rule is one check lists.
        let listed = text(&check.stdout);
        for rule in stdout
            .lines()
            .filter_map(|line| line.strip_prefix("name = \""))
        {
            let rule = rule.trim_end_matches('"');
            assert!(
                listed
                    .lines()
                    .any(|line| line.starts_with(&format!("{rule} "))),
                "{name}: {rule} missing from\n{listed}"
            );
        }
    }
}

#[test]
fn every_envoy_ratelimit_example_imports_into_rules_check_accepts_or_is_refused_by_field() {
    imports_or_is_refused("envoy-ratelimit", FIXTURES);
}

#[test]
fn every_envoy_gateway_example_imports_into_rules_check_accepts_or_is_refused_by_field() {
    imports_or_is_refused("envoy-gateway", ENVOY_GATEWAY_FIXTURES);
}

#[test]
fn every_traefik_example_imports_into_rules_check_accepts_or_is_refused_by_field() {
    imports_or_is_refused("traefik", TRAEFIK_FIXTURES);
}

/// The rules `sluice import FORMAT` prints for `yaml`.
fn imported(format: &str, yaml: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.yaml");
    std::fs::write(&file, yaml).unwrap();
    let import = sluice(&["import", format], &file);
    assert!(import.status.success(), "{}", text(&import.stderr));
    text(&import.stdout)
}

/// The status of each of `n` requests to `/get` with `headers`, in turn.
async fn statuses(sluice: &support::Sluice, headers: &[(&str, &str)], n: usize) -> Vec<u16> {
    let mut seen = Vec::with_capacity(n);
    for _ in 0..n {
        seen.push(
            support::get(&sluice.url("/get"), headers)
                .await
                .status
                .as_u16(),
        );
    }
    seen
}

const POLICY: &str = "apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata:
  name: policy-httproute
spec:
  targetRefs:
  - group: gateway.networking.k8s.io
    kind: HTTPRoute
    name: http-ratelimit
  rateLimit:
    global:
      rules:
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_distinct_header_gives_each_value_its_own_bucket_and_leaves_requests_without_it_alone() {
    let rules = imported(
        "envoy-gateway",
        &format!(
            "{POLICY}      - clientSelectors:\n        - headers:\n          - type: Distinct\n            \
             name: x-user-id\n        limit:\n          requests: 2\n          unit: Hour\n"
        ),
    );
    let (_upstream, sluice) = support::start(&rules).await;
    let ok = StatusCode::OK.as_u16();
    let limited = StatusCode::TOO_MANY_REQUESTS.as_u16();
    assert_eq!(
        statuses(&sluice, &[("x-user-id", "one")], 3).await,
        [ok, ok, limited]
    );
    assert_eq!(
        statuses(&sluice, &[("x-user-id", "two")], 3).await,
        [ok, ok, limited]
    );
    // Envoy does not limit a request without the header: nor does sluice.
    assert_eq!(statuses(&sluice, &[], 4).await, [ok; 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exact_header_limits_that_value_only() {
    // The task page's "Rate Limit Specific User", at 3 requests an hour.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/envoy-gateway");
    let yaml = std::fs::read_to_string(dir.join("global-rate-limit-specific-user.yaml")).unwrap();
    let rules = imported("envoy-gateway", &yaml);
    let (_upstream, sluice) = support::start(&rules).await;
    let ok = StatusCode::OK.as_u16();
    let limited = StatusCode::TOO_MANY_REQUESTS.as_u16();
    assert_eq!(
        statuses(&sluice, &[("x-user-id", "one")], 4).await,
        [ok, ok, ok, limited]
    );
    assert_eq!(statuses(&sluice, &[("x-user-id", "two")], 4).await, [ok; 4]);
    assert_eq!(statuses(&sluice, &[], 4).await, [ok; 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traefik_limit_admits_its_burst_then_limits() {
    // One request per 10s, a burst of 3: the fourth at once is refused
    // (its token is 10s away, far past Traefik's 500ms hold).
    let rules = imported(
        "traefik",
        "apiVersion: traefik.io/v1alpha1
kind: Middleware
metadata:
  name: test-ratelimit
spec:
  rateLimit:
    average: 1
    period: 10s
    burst: 3
    sourceCriterion:
      requestHeaderName: username
",
    );
    let (_upstream, sluice) = support::start(&rules).await;
    let ok = StatusCode::OK.as_u16();
    let limited = StatusCode::TOO_MANY_REQUESTS.as_u16();
    assert_eq!(
        statuses(&sluice, &[("username", "ann")], 4).await,
        [ok, ok, ok, limited]
    );
    // Each user has a bucket; users without the header share one.
    assert_eq!(
        statuses(&sluice, &[("username", "bob")], 4).await,
        [ok, ok, ok, limited]
    );
    assert_eq!(statuses(&sluice, &[], 4).await, [ok, ok, ok, limited]);
}

#[test]
fn a_file_that_cannot_be_read_is_an_error_naming_it() {
    let missing = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/no-such.yaml");
    for format in ["envoy-ratelimit", "envoy-gateway", "traefik"] {
        let import = sluice(&["import", format], &missing);
        assert_eq!(import.status.code(), Some(1), "{format}");
        assert_eq!(text(&import.stdout), "", "{format}");
        assert!(
            text(&import.stderr)
                .starts_with(&format!("error: could not read {}", missing.display())),
            "{format}: {}",
            text(&import.stderr)
        );
    }
}

#[test]
fn import_help_names_every_format() {
    let help = Command::new(support::binary())
        .args(["import", "--help"])
        .output()
        .expect("run sluice");
    assert!(help.status.success());
    let help = text(&help.stdout);
    for format in ["envoy-ratelimit", "envoy-gateway", "traefik"] {
        assert!(help.contains(&format!("  {format} ")), "{format}: {help}");
    }
    assert!(help.contains("BackendTrafficPolicy"), "{help}");
    assert!(help.contains("rateLimit middlewares"), "{help}");
}
