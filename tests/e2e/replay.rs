//! `sluice replay` and `sluice suggest` on the real binary
//! (docs/replay.md): a live run's access log replayed with the config it
//! ran (the same decisions) and with a tighter one (newly limited), logs
//! written by hand whose answers are known for each kind of rule, the
//! rules a log cannot replay named with why, gzip, stdin and several
//! files, `--strict`, and `suggest` on known per-key peaks, its rule
//! accepted by `check`.

use crate::support;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use http::StatusCode;
use serde_json::{json, Value};
use support::{binary, get, write_config, SluiceProcess, Upstream};

/// Runs the binary with `args`, `stdin` on its standard input.
fn sluice(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(binary())
        .args(args)
        .env_remove("SLUICE_CONFIG")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// `sluice replay --json` of `logs` with `config`: its report.
fn replay(config: &Path, logs: &[&str], stdin: &[u8]) -> Value {
    let mut args = vec!["replay", "--json", "--config", config.to_str().unwrap()];
    args.extend_from_slice(logs);
    let out = sluice(&args, stdin);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The report's row for `rule`.
fn row<'a>(report: &'a Value, rule: &str) -> &'a Value {
    report["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["rule"] == rule)
        .unwrap_or_else(|| panic!("no row for {rule}: {report}"))
}

const HEAD: &str = "[server]\nupstream = \"http://127.0.0.1:9\"\n";

/// A line as sluice writes it: `at` seconds after 2026-11-28T00:00:00Z.
fn line(at: f64, client: &str, path: &str, duration_ms: f64, outcome: &str, keys: Value) -> String {
    let whole = at.floor() as u64;
    let micros = ((at - at.floor()) * 1e6).round() as u64;
    let time = format!(
        "2026-11-28T{:02}:{:02}:{:02}.{micros:06}Z",
        whole / 3600,
        whole / 60 % 60,
        whole % 60
    );
    json!({
        "time": time, "request_id": "r", "client": client, "method": "GET",
        "host": "api.example", "path": path, "status": 200, "bytes_out": 0,
        "duration_ms": duration_ms, "upstream_ms": null, "delay_ms": 0,
        "outcome": outcome, "rule": null, "key": null, "cost": 1, "keys": keys,
    })
    .to_string()
}

fn ip_keys(client: &str) -> Value {
    json!({ "ip": client })
}

#[tokio::test]
async fn a_live_run_replays_to_the_same_decisions_and_a_tighter_config_limits_more() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let rules = r#"
[[rule]]
name = "bucket"
match = { path_prefix = "/tb" }
key = ["ip"]
rate = "5/m"

[[rule]]
name = "window"
match = { path_prefix = "/fw" }
key = ["header:x-api-key"]
algorithm = "fixed_window"
rate = "3/h"

[[rule]]
name = "held"
match = { path_prefix = "/held" }
key = ["ip"]
rate = "2/s"
burst = 1
on_limit = "delay"
max_delay = "3s"
"#;
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\naccess_log = {:?}\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n{rules}",
        upstream.addr,
        log.display().to_string()
    );
    let config = write_config(dir.path(), &text);
    let sluice = SluiceProcess::spawn(&config);
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(get(&sluice.url("/tb"), &[]).await.status);
    }
    for key in ["a", "a", "a", "a", "a", "b"] {
        statuses.push(get(&sluice.url("/fw"), &[("x-api-key", key)]).await.status);
    }
    let held: Vec<_> = (0..3)
        .map(|_| {
            let url = sluice.url("/held");
            tokio::spawn(async move { get(&url, &[]).await })
        })
        .collect();
    for one in held {
        statuses.push(one.await.unwrap().status);
    }
    let limited = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!(limited, 3 + 2, "{statuses:?}");
    // Written within 100 ms of each request's end: waits for every line.
    let written = || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        std::future::ready(text.lines().count() == statuses.len())
    };
    support::eventually(Duration::from_secs(5), "a line per request", written).await;
    drop(sluice);

    let report = replay(&config, &[log.to_str().unwrap()], b"");
    assert_eq!(&report["lines"], 17);
    assert_eq!(&report["skipped"], 0);
    for rule in ["bucket", "window", "held"] {
        let row = row(&report, rule);
        assert_eq!(&row["newly_limited"], 0, "{row}");
        assert_eq!(&row["no_longer_limited"], 0, "{row}");
    }
    let bucket = row(&report, "bucket");
    assert_eq!(
        (&bucket["matched"], &bucket["allowed"], &bucket["limited"]),
        (&json!(8), &json!(5), &json!(3))
    );
    assert_eq!(&bucket["distinct_keys"], 1);
    assert_eq!(
        bucket["top_keys"],
        json!([{"key": "127.0.0.1", "limited": 3}])
    );
    let window = row(&report, "window");
    assert_eq!(
        (&window["allowed"], &window["limited"]),
        (&json!(4), &json!(2))
    );
    assert_eq!(&window["distinct_keys"], 2);
    let label = window["top_keys"][0]["key"].as_str().unwrap();
    assert!(
        label.starts_with("a…#") || label.starts_with('…'),
        "a label: {label}"
    );
    let held = row(&report, "held");
    assert_eq!(
        (&held["allowed"], &held["held"], &held["limited"]),
        (&json!(1), &json!(2), &json!(0))
    );
    // The longest hold the replay finds is the one the log says sluice
    // held for: the reservation's wait, which the live hold outlasts by
    // its timer's lateness (a millisecond, more on a busy machine).
    let logged = std::fs::read_to_string(&log).unwrap();
    let logged_hold = (logged.lines())
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter_map(|line| line["delay_ms"].as_u64())
        .max()
        .unwrap();
    let longest = held["longest_hold_ms"].as_u64().unwrap();
    assert!(logged_hold >= 400, "a request was held: {logged_hold}");
    assert!(
        longest <= logged_hold + 2 && logged_hold <= longest + 100,
        "replayed {longest} ms, logged {logged_hold} ms"
    );
    assert!(report["not_replayed"].as_array().unwrap().is_empty());

    // Tighter: the bucket lets 2 through, not 5; the window 1 of key a.
    let tighter = rules
        .replace("rate = \"5/m\"", "rate = \"2/m\"")
        .replace("rate = \"3/h\"", "rate = \"1/h\"");
    let tighter = write_config(dir.path(), &format!("{HEAD}{tighter}"));
    let report = replay(&tighter, &[log.to_str().unwrap()], b"");
    let bucket = row(&report, "bucket");
    assert_eq!(
        (&bucket["limited"], &bucket["newly_limited"]),
        (&json!(6), &json!(3))
    );
    let window = row(&report, "window");
    assert_eq!(
        (&window["limited"], &window["newly_limited"]),
        (&json!(4), &json!(2))
    );
    assert!(bucket["first_limited"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn each_kind_of_rule_gives_its_known_answer() {
    let dir = tempfile::tempdir().unwrap();
    let rules = r#"
[[rule]]
name = "tokens"
match = { path = "/tokens" }
key = ["ip"]
rate = "10/s"

[[rule]]
name = "fixed"
match = { path = "/fixed" }
key = ["ip"]
algorithm = "fixed_window"
rate = "5/m"

[[rule]]
name = "sliding"
match = { path = "/sliding" }
key = ["ip"]
algorithm = "sliding_log"
rate = "3/m"

[[rule]]
name = "in-flight"
match = { path = "/slow" }
key = ["ip"]
algorithm = "concurrency"
max_in_flight = 2

[[rule]]
name = "delayed"
match = { path = "/delay" }
key = ["ip"]
rate = "1/s"
burst = 1
on_limit = "delay"
max_delay = "2500ms"
"#;
    let config = write_config(dir.path(), &format!("{HEAD}{rules}"));
    let mut log = Vec::new();
    let c = "198.51.100.7";
    // 20 at once: 10 tokens.
    for _ in 0..20 {
        log.push(line(1.0, c, "/tokens", 1.0, "allowed", ip_keys(c)));
    }
    // 7 in one minute (5 pass), 2 in the next (both pass).
    for n in 0..7 {
        log.push(line(
            60.0 + f64::from(n),
            c,
            "/fixed",
            1.0,
            "allowed",
            ip_keys(c),
        ));
    }
    for n in 0..2 {
        log.push(line(
            120.0 + f64::from(n),
            c,
            "/fixed",
            1.0,
            "allowed",
            ip_keys(c),
        ));
    }
    // 4 within a minute (3 pass); one 61 s after the first passes.
    for at in [200.0, 210.0, 220.0, 230.0, 261.5] {
        log.push(line(at, c, "/sliding", 1.0, "allowed", ip_keys(c)));
    }
    // Three requests of 1 s each at once: two in flight, one refused; a
    // fourth after they ended passes.
    for at in [300.0, 300.1, 300.2, 301.5] {
        log.push(line(at, c, "/slow", 1000.0, "allowed", ip_keys(c)));
    }
    // Four at once at 1/s: held 0, 1, 2 s; the fourth would wait 3 s.
    for _ in 0..4 {
        log.push(line(400.0, c, "/delay", 1.0, "allowed", ip_keys(c)));
    }
    // Written out of order, as a log is (each line when its request ends).
    for pair in log.chunks_mut(2) {
        pair.reverse();
    }
    let path = dir.path().join("access.log");
    std::fs::write(&path, log.join("\n")).unwrap();
    let report = replay(&config, &[path.to_str().unwrap()], b"");
    let counts = |rule| {
        let row = row(&report, rule);
        (
            row["matched"].as_u64().unwrap(),
            row["allowed"].as_u64().unwrap(),
            row["limited"].as_u64().unwrap(),
            row["held"].as_u64().unwrap(),
        )
    };
    assert_eq!(counts("tokens"), (20, 10, 10, 0));
    assert_eq!(counts("fixed"), (9, 7, 2, 0));
    assert_eq!(counts("sliding"), (5, 4, 1, 0));
    assert_eq!(counts("in-flight"), (4, 3, 1, 0));
    assert_eq!(counts("delayed"), (4, 1, 1, 2));
    assert_eq!(row(&report, "delayed")["longest_hold_ms"], 2000);
    assert_eq!(row(&report, "tokens")["newly_limited"], 10);
    assert_eq!(
        row(&report, "tokens")["first_limited"],
        "2026-11-28T00:00:01.000000Z"
    );
}

#[test]
fn what_a_log_cannot_replay_is_named_and_other_lines_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let rules = r#"
[[rule]]
name = "per-key"
key = ["header:x-api-key"]
rate = "1/m"

[[rule]]
name = "per-tenant"
key = ["header:x-tenant"]
rate = "1/m"

[[rule]]
name = "graphql"
match = { path = "/graphql" }
key = ["ip"]
rate = "100/m"
cost = "graphql"
unreadable = 1
"#;
    let config = write_config(dir.path(), &format!("{HEAD}{rules}"));
    let keys = json!({"ip": "192.0.2.1", "header:x-api-key": "sk_l…#3f9a1c2e4b7d"});
    let lines = [
        line(1.0, "192.0.2.1", "/a", 1.0, "allowed", keys.clone()),
        "not json".to_owned(),
        line(2.0, "192.0.2.1", "/a", 1.0, "allowed", keys.clone()),
        r#"{"some":"other json"}"#.to_owned(),
    ];
    let text = lines.join("\n");
    // Through stdin, gzipped, and split over two files: the same report.
    let report = replay(&config, &["-"], text.as_bytes());
    assert_eq!(
        (&report["lines"], &report["skipped"]),
        (&json!(2), &json!(2))
    );
    let not_replayed = report["not_replayed"].as_array().unwrap();
    let named: Vec<&str> = not_replayed
        .iter()
        .map(|n| n["rule"].as_str().unwrap())
        .collect();
    assert_eq!(named, ["per-tenant", "graphql"], "{report}");
    let reason = not_replayed[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("header:x-tenant") && reason.contains("access_log_keys"),
        "{reason}"
    );
    assert!(not_replayed[1]["reason"]
        .as_str()
        .unwrap()
        .contains("GraphQL"));
    let per_key = row(&report, "per-key");
    assert_eq!(
        (&per_key["limited"], &per_key["newly_limited"]),
        (&json!(1), &json!(1))
    );

    let gz = dir.path().join("access.log.gz");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(text.as_bytes()).unwrap();
    std::fs::write(&gz, encoder.finish().unwrap()).unwrap();
    assert_eq!(replay(&config, &[gz.to_str().unwrap()], b""), report);
    let (first, second) = (dir.path().join("1.log"), dir.path().join("2.log"));
    std::fs::write(&first, lines[..2].join("\n") + "\n").unwrap();
    std::fs::write(&second, lines[2..].join("\n")).unwrap();
    let split = replay(
        &config,
        &[first.to_str().unwrap(), second.to_str().unwrap()],
        b"",
    );
    assert_eq!(split, report);

    // --strict stops at the first line that is not an access log line.
    let out = sluice(
        &[
            "replay",
            "--strict",
            "--config",
            config.to_str().unwrap(),
            first.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!("{}:2: not JSON", first.display())),
        "{stderr}"
    );
    // An unreadable file, a broken config: exit 1, said on stderr.
    let out = sluice(
        &[
            "replay",
            "--config",
            config.to_str().unwrap(),
            "/nonexistent.log",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.log"));
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, format!("{HEAD}[[rule]]\nname = \"x\"\n")).unwrap();
    let out = sluice(&["replay", "--config", broken.to_str().unwrap(), "-"], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(":"),
        "FILE:LINE:COLUMN"
    );
    // The text report says the same.
    let out = sluice(
        &["replay", "--config", config.to_str().unwrap(), "-"],
        text.as_bytes(),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("rule per-key") && text.contains("1 newly limited"),
        "{text}"
    );
    assert!(
        text.contains("not replayed:") && text.contains("rule graphql:"),
        "{text}"
    );
}

#[test]
fn suggest_finds_each_key_s_busiest_period_and_a_rule_check_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let rules = r#"
[[rule]]
name = "per-key"
match = { path_prefix = "/api" }
key = ["header:x-api-key"]
rate = "1000/m"
"#;
    let config = write_config(dir.path(), &format!("{HEAD}{rules}"));
    // Key k<n> sends n requests within 30 s, twice, an hour apart: its
    // busiest minute holds n. 100 keys: the p-th percentile is p.
    let mut log = Vec::new();
    for n in 1..=100u32 {
        let keys = json!({ "header:x-api-key": format!("k{n}…#{n:012x}") });
        for hour in [0.0, 3600.0] {
            for i in 0..n {
                let at = hour + f64::from(i) * 30.0 / f64::from(n);
                log.push(line(
                    at,
                    "192.0.2.1",
                    "/api/x",
                    1.0,
                    "allowed",
                    keys.clone(),
                ));
            }
        }
        // Not the rule's: another path.
        log.push(line(10.0, "192.0.2.1", "/other", 1.0, "allowed", keys));
    }
    let path = dir.path().join("access.log");
    std::fs::write(&path, log.join("\n")).unwrap();
    let out = sluice(
        &[
            "suggest",
            "--config",
            config.to_str().unwrap(),
            "--rule",
            "per-key",
            "--spare",
            "1",
            path.to_str().unwrap(),
        ],
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("100 key(s)"), "{text}");
    assert!(
        text.contains("median 50, p90 90, p99 99, p99.9 100, max 100"),
        "{text}"
    );
    // All but 1 % of the keys: the 99th percentile.
    assert!(
        text.contains("rate = \"99/m\"") && text.contains("burst = 99"),
        "{text}"
    );
    assert!(
        text.contains("match = { path_prefix = \"/api\" }"),
        "{text}"
    );
    let rule = &text[text.find("[[rule]]").unwrap()..];
    let suggested = write_config(dir.path(), &format!("{HEAD}{rule}"));
    let out = sluice(&["check", "--config", suggested.to_str().unwrap()], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = sluice(
        &[
            "suggest",
            "--config",
            config.to_str().unwrap(),
            "--rule",
            "nope",
            path.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("per-key"));
}

/// A line at `time` as it is written, from `client`, that the log says
/// `rule` decided with `outcome`.
fn timed(time: &str, client: &str, outcome: &str, rule: Option<&str>) -> String {
    json!({
        "time": time, "request_id": "r", "client": client, "method": "GET",
        "host": "api.example", "path": "/a", "status": 200, "bytes_out": 0,
        "duration_ms": 1.0, "upstream_ms": null, "delay_ms": 0,
        "outcome": outcome, "rule": rule, "key": null, "cost": 1,
        "keys": ip_keys(client),
    })
    .to_string()
}

fn gzipped(text: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(text).unwrap();
    encoder.finish().unwrap()
}

#[test]
fn a_line_over_a_mebibyte_and_a_time_outside_1970_to_9999_are_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let rules = "[[rule]]\nname = \"per-ip\"\nkey = [\"ip\"]\nrate = \"1/m\"\n";
    let config = write_config(dir.path(), &format!("{HEAD}{rules}"));
    let c = "192.0.2.1";
    let first = timed("2026-11-28T00:00:01.000000Z", c, "allowed", None);
    // An access log line in all but its length: a long path.
    let long = timed("2026-11-28T00:00:02Z", c, "allowed", None)
        .replace("\"/a\"", &format!("\"/{}\"", "a".repeat(3 << 19)));
    let lines = [
        first.clone(),
        long,
        timed("1969-12-31T23:59:59.999999Z", c, "allowed", None),
        timed("10000-01-01T00:00:00Z", c, "allowed", None),
        timed("2026-11-28T00:00:03.000000Z", c, "allowed", None),
    ];
    let text = lines.join("\n") + "\n";
    let plain = dir.path().join("access.log");
    std::fs::write(&plain, &text).unwrap();
    let gz = dir.path().join("access.log.gz");
    std::fs::write(&gz, gzipped(text.as_bytes())).unwrap();
    for log in [&plain, &gz] {
        let report = replay(&config, &[log.to_str().unwrap()], b"");
        assert_eq!(
            (&report["lines"], &report["skipped"]),
            (&json!(2), &json!(3)),
            "{}",
            log.display()
        );
        assert_eq!(&row(&report, "per-ip")["limited"], 1, "{report}");
    }
    // --strict names the line and says why.
    let strict = |lines: &[String]| {
        std::fs::write(&plain, lines.join("\n")).unwrap();
        let args = ["replay", "--strict", "--config", config.to_str().unwrap()];
        let out = sluice(&[&args[..], &[plain.to_str().unwrap()]].concat(), b"");
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = strict(&lines[..2]);
    let at = format!("{}:2: ", plain.display());
    assert!(
        stderr.starts_with(&at) && stderr.contains("longer than 1 MiB"),
        "{stderr}"
    );
    for (out_of_range, time) in [
        (2, "1969-12-31T23:59:59.999999Z"),
        (3, "10000-01-01T00:00:00Z"),
    ] {
        let stderr = strict(&[lines[0].clone(), lines[out_of_range].clone()]);
        assert!(
            stderr.starts_with(&at) && stderr.contains(&format!("{time:?} is outside 1970–9999")),
            "{stderr}"
        );
    }
}

#[test]
fn the_first_and_last_years_a_replay_takes_are_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let rules = "[[rule]]\nname = \"per-ip\"\nkey = [\"ip\"]\nrate = \"1/m\"\n";
    let config = write_config(dir.path(), &format!("{HEAD}{rules}"));
    let c = "192.0.2.1";
    for (first, second) in [
        ("1970-01-01T00:00:00Z", "1970-01-01T00:00:30.000000Z"),
        ("9999-12-31T23:59:00.000000Z", "9999-12-31T23:59:59.999999Z"),
    ] {
        let log = dir.path().join("access.log");
        let lines = [
            timed(first, c, "allowed", None),
            timed(second, c, "allowed", None),
        ];
        std::fs::write(&log, lines.join("\n")).unwrap();
        let report = replay(&config, &[log.to_str().unwrap()], b"");
        assert_eq!(
            (&report["lines"], &report["skipped"]),
            (&json!(2), &json!(0))
        );
        let row = row(&report, "per-ip");
        assert_eq!((&row["allowed"], &row["limited"]), (&json!(1), &json!(1)));
        assert_eq!(row["first_limited"], second, "{report}");
    }
}

#[test]
fn the_whole_log_s_totals_count_each_request_once_whatever_its_rule() {
    let dir = tempfile::tempdir().unwrap();
    // The log's rule "old" is gone; "tight" limits what the log let by.
    let rules = "[[rule]]\nname = \"tight\"\nmatch = { path = \"/a\" }\nkey = [\"ip\"]\n\
                 rate = \"1/h\"\n\n[[rule]]\nname = \"also\"\nkey = [\"ip\"]\nrate = \"1/h\"\n";
    let config = write_config(dir.path(), &format!("{HEAD}{rules}"));
    let lines = [
        // Limited by "old": the new config admits them (two clients).
        timed("2026-11-28T00:00:01Z", "192.0.2.1", "limited", Some("old")),
        timed("2026-11-28T00:00:02Z", "192.0.2.2", "limited", Some("old")),
        // Allowed then: the second of a client is newly limited, by both
        // rules but counted once.
        timed("2026-11-28T00:00:03Z", "192.0.2.1", "allowed", None),
        timed("2026-11-28T00:00:04Z", "192.0.2.3", "allowed", None),
    ];
    let log = dir.path().join("access.log");
    std::fs::write(&log, lines.join("\n")).unwrap();
    let report = replay(&config, &[log.to_str().unwrap()], b"");
    assert_eq!(
        (&report["newly_limited"], &report["no_longer_limited"]),
        (&json!(1), &json!(2)),
        "{report}"
    );
    let tight = row(&report, "tight");
    assert_eq!(
        (&tight["limited"], &tight["newly_limited"]),
        (&json!(1), &json!(1))
    );
    assert_eq!(&row(&report, "also")["limited"], 1);
    assert_eq!(&row(&report, "also")["newly_limited"], 0);
    for rule in ["tight", "also"] {
        assert_eq!(&row(&report, rule)["no_longer_limited"], 0);
    }
    let out = sluice(
        &[
            "replay",
            "--config",
            config.to_str().unwrap(),
            log.to_str().unwrap(),
        ],
        b"",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "replayed 4 line(s)\nagainst the log: 1 newly limited, 2 no longer limited\n"
        ),
        "{text}"
    );
}
