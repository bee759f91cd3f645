//! The Grafana dashboard (`deploy/grafana/sluice.json`) and the Prometheus
//! alerts (`deploy/prometheus/alerts.yml`) only ask for what a running
//! sluice exposes: every metric name their queries use is a series of its
//! `/metrics`, and every label value they match exactly (or by a list of
//! alternatives) is one that series carries. A renamed metric or outcome
//! breaks this test, not a dashboard in production.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use support::exposition::Exposition;
use support::{get, start};

/// A rule of each mode, so that every per-rule series exists; the series
/// that appear with traffic (`sluice_store_seconds` and friends) exist once
/// `/metrics` has been scraped and one request decided.
const CONFIG: &str = r#"
[[rule]]
name = "per-ip"
rate = "100/s"

[[rule]]
name = "held"
match = { path_prefix = "/held" }
rate = "10/s"
on_limit = "delay"
max_delay = "1s"
"#;

fn asset(path: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A metric name and the label matchers written after it:
/// `(label, values)` where values are the literal alternatives of `=` or
/// `=~"a|b"` (matchers with variables, wildcards or negations are skipped).
#[derive(Debug)]
struct Reference {
    name: String,
    matchers: Vec<(String, Vec<String>)>,
}

/// The metric references of a PromQL expression (sluice's and the process
/// collector's names: `sluice_*`, `process_*`).
fn references(expr: &str) -> Vec<Reference> {
    let mut found = Vec::new();
    let chars: Vec<char> = expr.chars().collect();
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        if c == '"' || c == '\'' {
            at = skip_string(&chars, at);
            continue;
        }
        if c == '[' {
            // A range or subquery duration.
            while at < chars.len() && chars[at] != ']' {
                at += 1;
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = at;
            while at < chars.len()
                && (chars[at].is_ascii_alphanumeric() || chars[at] == '_' || chars[at] == ':')
            {
                at += 1;
            }
            let name: String = chars[start..at].iter().collect();
            if !(name.starts_with("sluice_") || name.starts_with("process_")) {
                continue;
            }
            let mut matchers = Vec::new();
            if chars.get(at) == Some(&'{') {
                let end = (at..chars.len())
                    .find(|&i| chars[i] == '}')
                    .expect("an unclosed selector");
                let selector: String = chars[at + 1..end].iter().collect();
                matchers = literal_matchers(&selector);
                at = end + 1;
            }
            found.push(Reference { name, matchers });
            continue;
        }
        at += 1;
    }
    found
}

fn skip_string(chars: &[char], open: usize) -> usize {
    let quote = chars[open];
    let mut at = open + 1;
    while at < chars.len() && chars[at] != quote {
        at += if chars[at] == '\\' { 2 } else { 1 };
    }
    at + 1
}

/// `rule=~"$rule", outcome="limited", kind=~"a|b"` → the literal ones.
fn literal_matchers(selector: &str) -> Vec<(String, Vec<String>)> {
    selector
        .split(',')
        .filter_map(|matcher| {
            let matcher = matcher.trim();
            let (label, op, value) = if let Some((l, v)) = matcher.split_once("=~") {
                (l, "=~", v)
            } else if let Some((l, v)) = matcher.split_once("!=") {
                (l, "!=", v)
            } else {
                let (l, v) = matcher.split_once('=')?;
                (l, "=", v)
            };
            let value = value.trim().trim_matches('"');
            let literal = |v: &str| v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            match op {
                "=" if literal(value) => Some((label.trim().to_owned(), vec![value.to_owned()])),
                "=~" if value.split('|').all(literal) => Some((
                    label.trim().to_owned(),
                    value.split('|').map(str::to_owned).collect(),
                )),
                _ => None,
            }
        })
        .collect()
}

/// Checks every reference of `expr` against `metrics`; `origin` says where
/// the expression came from. Returns the problems found.
fn check_expr(origin: &str, expr: &str, metrics: &Exposition) -> Vec<String> {
    let mut problems = Vec::new();
    for reference in references(expr) {
        let sets = metrics.label_sets(&reference.name);
        if sets.is_empty() {
            problems.push(format!(
                "{origin}: `{}` is not a series of /metrics",
                reference.name
            ));
            continue;
        }
        for (label, values) in &reference.matchers {
            let exposed: BTreeSet<&str> = sets
                .iter()
                .filter_map(|labels| labels.get(label).map(String::as_str))
                .collect();
            for value in values {
                if !exposed.contains(value.as_str()) {
                    problems.push(format!(
                        "{origin}: `{}{{{label}=\"{value}\"}}` is not exposed (values: {exposed:?})",
                        reference.name
                    ));
                }
            }
        }
    }
    problems
}

/// Family names (`sluice_decision_seconds`) and sample names mentioned in
/// prose: an annotation or a description may name a histogram as a whole.
fn check_prose(origin: &str, text: &str, metrics: &Exposition) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("sluice_") || word.starts_with("process_"))
        .filter(|word| !metrics.types.contains_key(*word) && !metrics.names().contains(*word))
        .map(|word| format!("{origin}: the text names `{word}`, which /metrics does not have"))
        .collect()
}

/// `/metrics` of a sluice that decided a request of each rule.
async fn running_metrics() -> Exposition {
    let (upstream, sluice) = start(CONFIG).await;
    get(&sluice.url("/"), &[]).await;
    get(&sluice.url("/held"), &[]).await;
    upstream.wait_for(2).await;
    sluice.exposition().await
}

/// Every PromQL expression of the dashboard: panel targets (rows' nested
/// panels too), template variable queries and annotation queries.
fn dashboard_exprs(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    fn panels(list: &serde_json::Value, out: &mut Vec<(String, String)>) {
        for panel in list.as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("?");
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    out.push((format!("panel {title:?}"), expr.to_owned()));
                }
            }
            panels(&panel["panels"], out);
        }
    }
    let mut exprs = Vec::new();
    panels(&dashboard["panels"], &mut exprs);
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(query) = variable["definition"].as_str() {
            exprs.push((format!("variable {}", variable["name"]), query.to_owned()));
        }
    }
    for annotation in dashboard["annotations"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(expr) = annotation["expr"].as_str() {
            exprs.push((
                format!("annotation {}", annotation["name"]),
                expr.to_owned(),
            ));
        }
    }
    exprs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_queries_only_series_sluice_exposes() {
    let text = asset("deploy/grafana/sluice.json");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    // What Grafana needs to import it: a title, a uid, panels, and a
    // Prometheus data source chosen at import (a `datasource` variable).
    assert!(dashboard["title"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(dashboard["uid"].as_str().is_some_and(|u| !u.is_empty()));
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    assert!(variables
        .iter()
        .any(|v| v["type"] == "datasource" && v["query"] == "prometheus"));
    let exprs = dashboard_exprs(&dashboard);
    assert!(exprs.len() >= 20, "{} queries", exprs.len());
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert!(ids.insert(panel["id"].as_u64().unwrap()), "duplicate id");
        if panel["type"] != "row" {
            assert_eq!(panel["datasource"]["uid"], "${datasource}", "{panel}");
        }
    }

    let metrics = running_metrics().await;
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for (origin, expr) in &exprs {
        problems.extend(check_expr(origin, expr, &metrics));
        used.extend(references(expr).into_iter().map(|r| r.name));
    }
    for panel in dashboard["panels"].as_array().unwrap() {
        if let Some(description) = panel["description"].as_str() {
            problems.extend(check_prose("a panel description", description, &metrics));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");

    // The issue's list: each is on the dashboard.
    for name in [
        "sluice_requests_total",
        "sluice_overhead_seconds_bucket",
        "sluice_decision_seconds_bucket",
        "sluice_delay_seconds_bucket",
        "sluice_queue_depth",
        "sluice_upstream_errors_total",
        "sluice_upstream_seconds_bucket",
        "sluice_upstream_servers",
        "sluice_upstream_panic",
        "sluice_upstream_retries_total",
        "sluice_upstream_ejections_total",
        "sluice_store_fallback_active",
        "sluice_store_seconds_bucket",
        "sluice_config_reloads_total",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
    ] {
        assert!(used.contains(name), "the dashboard does not show {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alerts_query_only_series_sluice_exposes_and_say_what_to_do() {
    let text = asset("deploy/prometheus/alerts.yml");
    let alerts: serde_norway::Value = serde_norway::from_str(&text).expect("alerts.yml is YAML");
    let metrics = running_metrics().await;
    let mut problems = Vec::new();
    let mut names = BTreeSet::new();
    let groups = alerts["groups"].as_sequence().expect("a list of groups");
    assert!(!groups.is_empty());
    for group in groups {
        assert!(group["name"].as_str().is_some(), "a group without a name");
        for rule in group["rules"].as_sequence().expect("a group's rules") {
            let name = rule["alert"].as_str().expect("alerting rules only");
            assert!(names.insert(name.to_owned()), "{name} twice");
            let expr = rule["expr"].as_str().expect("an expr");
            problems.extend(check_expr(name, expr, &metrics));
            let severity = rule["labels"]["severity"].as_str();
            assert!(
                matches!(severity, Some("info" | "warning" | "critical")),
                "{name}: severity {severity:?}"
            );
            let annotations: BTreeMap<String, String> =
                serde_norway::from_value(rule["annotations"].clone())
                    .unwrap_or_else(|e| panic!("{name}: annotations ({e})"));
            for key in ["summary", "description"] {
                let text = annotations.get(key).map(String::as_str).unwrap_or("");
                assert!(!text.trim().is_empty(), "{name}: no {key}");
                problems.extend(check_prose(name, text, &metrics));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    for wanted in [
        "SluiceStoreFallbackActive",
        "SluiceConfigReloadFailed",
        "SluiceRuleLimitingMuch",
        "SluiceUpstreamErrors",
        "SluiceUpstreamPanic",
        "SluiceUpstreamServerOut",
        "SluiceOverheadHigh",
    ] {
        assert!(names.contains(wanted), "no alert {wanted}");
    }
    // The operations page says what to do for each one.
    let operations = asset("docs/operations.md");
    for name in &names {
        assert!(
            operations.contains(name.as_str()),
            "docs/operations.md does not explain {name}"
        );
    }
}

#[test]
fn promtool_accepts_the_alerting_rules() {
    // Prometheus' own parser and PromQL checker, beyond the series the test
    // above matches: a rule file it refuses is never loaded.
    let Some(promtool) = support::optional_tool(
        "deploy_assets::promtool_accepts_the_alerting_rules",
        &["promtool"],
        "prometheus",
    ) else {
        return;
    };
    let rules = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/alerts.yml");
    let output = std::process::Command::new(promtool)
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .expect("run promtool");
    assert!(
        output.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn references_see_names_and_literal_label_values_only() {
    let expr = r#"sum by (rule) (rate(sluice_requests_total{rule=~"$rule", outcome=~"allowed|limited"}[5m])) / on (instance) process_open_fds and max(sluice_x{kind="a-b"}) > 0 and "sluice_in_a_string""#;
    let found = references(expr);
    let names: Vec<&str> = found.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["sluice_requests_total", "process_open_fds", "sluice_x"]
    );
    assert_eq!(
        found[0].matchers,
        [(
            "outcome".to_owned(),
            vec!["allowed".to_owned(), "limited".to_owned()]
        )]
    );
    assert!(found[2].matchers.is_empty());
}
