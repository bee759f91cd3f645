//! The command line of the real binary: `check`, `run` on a bad file,
//! `--version`, `demo` (with and without `--once`).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::binary;

/// Runs the binary with `args`; fails the test if it does not exit in time.
fn sluice(args: &[&str], path: Option<&Path>) -> Output {
    let mut command = Command::new(binary());
    command.args(args);
    if let Some(path) = path {
        command.arg(path);
    }
    let child = command
        .env_remove("SLUICE_CONFIG")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    wait_with_deadline(child, Duration::from_secs(20))
}

/// The child's output once it exits; fails the test if it is still running
/// after `limit` (its output is read meanwhile, so a full pipe cannot stall
/// it).
fn wait_with_deadline(child: std::process::Child, limit: Duration) -> Output {
    let pid = child.id();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match finished.recv_timeout(limit) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("sluice (pid {pid}) did not exit within {limit:?}");
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes `toml` to a file in a fresh directory.
fn config_file(toml: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = support::write_config(dir.path(), toml);
    (dir, path)
}

/// `sluice check` on `toml`: (exit code, stdout, stderr, path).
fn check(toml: &str) -> (Option<i32>, String, String, PathBuf) {
    let (dir, path) = config_file(toml);
    let output = sluice(&["check", "--config"], Some(&path));
    drop(dir);
    (
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr),
        path,
    )
}

/// The `(line, column, message)` of every `FILE:LINE:COLUMN: message` error.
fn located_errors(stderr: &str, path: &Path) -> Vec<(u32, u32, String)> {
    located(stderr, &format!("{}:", path.display()))
}

/// The `(line, column, message)` of every `warning: FILE:LINE:COLUMN: message`.
fn located_warnings(stderr: &str, path: &Path) -> Vec<(u32, u32, String)> {
    located(stderr, &format!("warning: {}:", path.display()))
}

/// The `(line, column, message)` of every line `{prefix}LINE:COLUMN: message`.
fn located(stderr: &str, prefix: &str) -> Vec<(u32, u32, String)> {
    stderr
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(prefix)?;
            let mut parts = rest.splitn(3, ':');
            let line_no = parts.next()?.parse().ok()?;
            let column = parts.next()?.parse().ok()?;
            let message = parts.next()?.strip_prefix(' ')?.to_owned();
            Some((line_no, column, message))
        })
        .collect()
}

#[test]
fn check_accepts_the_example_config_and_prints_its_rules() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/sluice.toml");

    let output = sluice(&["check", "--config"], Some(&example));

    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr: {}",
        text(&output.stderr)
    );
    for rule in [
        "per-ip",
        "search",
        "reports",
        "orders",
        "exports",
        "billing",
        "render",
        "sellers",
        "v0-retirement",
        "inference",
        "batch",
    ] {
        assert!(
            stdout.lines().any(|line| line.starts_with(rule)),
            "no row for rule {rule}:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("600/m"),
        "the effective rate is shown:\n{stdout}"
    );
    for line in [
        "rule inference: charge elapsed_ms after the response",
        "rule inference: refund_on 5xx, upstream_error",
        "rule batch: charge header:x-cost-units after the response",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
    let exports = stdout
        .lines()
        .find(|line| line.starts_with("exports"))
        .unwrap_or_default();
    for shown in ["sliding_window", "50/m, 1000/d", "50, 1000"] {
        assert!(
            exports.contains(shown),
            "the algorithm, limits and capacities are shown: {exports}"
        );
    }
    let row = |name: &str| {
        stdout
            .lines()
            .find(|line| line.starts_with(name))
            .unwrap_or_default()
            .to_owned()
    };
    for (rule, shown) in [
        ("per-ip", "reject"),
        ("billing", "leaky_bucket"),
        ("billing", "delay ≤2s q10"),
        ("render", "8 in flight"),
        ("render", "delay ≤15s q50"),
    ] {
        assert!(row(rule).contains(shown), "{rule} shows {shown}:\n{stdout}");
    }
    assert!(
        text(&output.stderr).is_empty(),
        "the example has no warnings: {}",
        text(&output.stderr)
    );
}

#[test]
fn check_reports_an_unknown_key_with_its_position_and_the_allowed_keys() {
    let (code, stdout, stderr, path) = check(
        r#"[server]
upstream = "http://127.0.0.1:3000"
upstream_timout = "5s"

[[rule]]
name = "per-ip"
rate = "100/m"
"#,
    );

    assert_eq!(code, Some(1));
    assert!(
        stdout.is_empty(),
        "no rules table for an invalid file: {stdout}"
    );
    let errors = located_errors(&stderr, &path);
    assert_eq!(errors.len(), 1, "{stderr}");
    let (line, column, message) = &errors[0];
    assert_eq!((*line, *column), (3, 1), "{stderr}");
    assert!(
        message.contains("upstream_timout"),
        "names the unknown key: {message}"
    );
    assert!(
        message.contains("upstream_timeout"),
        "lists the allowed keys: {message}"
    );
}

#[test]
fn check_reports_a_bad_rate_at_its_value() {
    let (code, _stdout, stderr, path) = check(
        r#"[server]
upstream = "http://127.0.0.1:3000"

[[rule]]
name = "per-ip"
rate = "100/fortnight"
"#,
    );

    assert_eq!(code, Some(1));
    let errors = located_errors(&stderr, &path);
    assert_eq!(errors.len(), 1, "{stderr}");
    let (line, column, message) = &errors[0];
    assert_eq!((*line, *column), (6, 8), "{stderr}");
    assert!(message.contains("rate"), "{message}");
    assert!(
        message.contains("fortnight"),
        "quotes the bad value: {message}"
    );
}

#[test]
fn check_reports_a_bad_tunnel_idle_timeout_at_its_value() {
    for (value, says) in [("\"forever\"", "forever"), ("\"0s\"", "longer than zero")] {
        let (code, _stdout, stderr, path) = check(&format!(
            "[server]\nupstream = \"http://127.0.0.1:3000\"\ntunnel_idle_timeout = {value}\n"
        ));
        assert_eq!(code, Some(1), "{stderr}");
        let errors = located_errors(&stderr, &path);
        assert_eq!(errors.len(), 1, "{stderr}");
        let (line, column, message) = &errors[0];
        assert_eq!((*line, *column), (3, 23), "{stderr}");
        assert!(message.contains("server.tunnel_idle_timeout"), "{message}");
        assert!(message.contains(says), "{message}");
    }
}

#[test]
fn check_reports_a_missing_upstream() {
    let (code, _stdout, stderr, path) = check(
        r#"[[rule]]
name = "per-ip"
rate = "100/m"
"#,
    );

    assert_eq!(code, Some(1));
    let errors = located_errors(&stderr, &path);
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].2.contains("server.upstream"), "{stderr}");
    assert!(errors[0].2.contains("required"), "{stderr}");
}

#[test]
fn check_reports_every_error_at_once() {
    let (code, _stdout, stderr, path) = check(
        r#"[server]
upstream = "http://127.0.0.1:3000"
upstream_timeout = "soon"

[[rule]]
name = "per-ip"
rate = "5/x"
"#,
    );

    assert_eq!(code, Some(1));
    let errors = located_errors(&stderr, &path);
    let positions: Vec<(u32, u32)> = errors.iter().map(|(l, c, _)| (*l, *c)).collect();
    assert_eq!(positions, [(3, 20), (7, 8)], "{stderr}");
    assert!(
        stderr.ends_with('\n'),
        "each error is a whole line: {stderr:?}"
    );
    assert!(errors[0].2.contains("upstream_timeout"), "{stderr}");
    assert!(errors[1].2.contains("rate"), "{stderr}");
}

#[test]
fn check_reports_an_unknown_key_together_with_the_other_errors() {
    let (code, _stdout, stderr, path) = check(
        r#"[server]
upstream = "http://127.0.0.1:3000"
upstream_timout = "5s"

[[rule]]
name = "per-ip"
rate = "5/x"
"#,
    );

    assert_eq!(code, Some(1));
    let positions: Vec<(u32, u32)> = located_errors(&stderr, &path)
        .iter()
        .map(|(l, c, _)| (*l, *c))
        .collect();
    assert_eq!(positions, [(3, 1), (7, 8)], "{stderr}");
}

#[test]
fn check_warns_about_a_large_sliding_log_with_its_position_and_still_exits_0() {
    let (code, stdout, stderr, path) = check(
        r#"[server]
upstream = "http://127.0.0.1:3000"

[[rule]]
name = "per-ip"
algorithm = "sliding_log"
limits = ["100/s", "50000/h"]
"#,
    );

    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.lines().any(|line| line.starts_with("per-ip")),
        "the rules table is printed: {stdout}"
    );
    assert!(stdout.contains("100/s, 50000/h"), "{stdout}");
    let warnings = located_warnings(&stderr, &path);
    assert_eq!(warnings.len(), 1, "{stderr}");
    let (line, column, message) = &warnings[0];
    assert_eq!((*line, *column), (7, 20), "{stderr}");
    assert!(message.starts_with("rule[0].limits[1]: "), "{message}");
    assert!(message.contains("50000"), "{message}");
    assert!(message.contains("400 KB per key"), "{message}");
    assert!(message.contains("sliding_window"), "{message}");
}

#[test]
fn check_refuses_a_cost_that_a_limit_can_never_hold() {
    let (code, stdout, stderr, path) = check(
        r#"[server]
upstream = "http://127.0.0.1:3000"

[[rule]]
name = "exports"
limits = ["10/s", "5/m"]
cost = 6
"#,
    );

    assert_eq!(code, Some(1));
    assert!(
        stdout.is_empty(),
        "no rules table for an invalid file: {stdout}"
    );
    let errors = located_errors(&stderr, &path);
    assert_eq!(errors.len(), 1, "{stderr}");
    let (line, column, message) = &errors[0];
    assert_eq!((*line, *column), (7, 8), "{stderr}");
    assert!(message.starts_with("rule[0].cost: "), "{message}");
    assert!(message.contains("limits[1] \"5/m\""), "{message}");
    assert!(message.contains("never be admitted"), "{message}");
}

#[test]
fn check_shows_what_each_rule_does_on_limit_and_a_concurrency_bound() {
    let (code, stdout, stderr, _path) = check(
        r#"[server]
upstream = "http://127.0.0.1:3000"

[[rule]]
name = "per-ip"
rate = "100/m"

[[rule]]
name = "smooth"
algorithm = "leaky_bucket"
rate = "5/s"

[[rule]]
name = "slots"
algorithm = "concurrency"
on_limit = "delay"
max_delay = "500ms"
"#,
    );

    assert_eq!(code, Some(0), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "rule",
            "match",
            "key",
            "missing",
            "algorithm",
            "limits",
            "capacity",
            "on_limit",
            "mode"
        ],
        "{stdout}"
    );
    let cells = |name: &str| -> Vec<String> {
        let line = lines
            .iter()
            .find(|line| line.starts_with(name))
            .unwrap_or_else(|| panic!("no row for {name}:\n{stdout}"));
        line.split("  ")
            .map(str::trim)
            .filter(|cell| !cell.is_empty())
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        cells("per-ip"),
        [
            "per-ip",
            "*",
            "ip",
            "shared",
            "token_bucket",
            "100/m",
            "100",
            "reject",
            "enforce"
        ],
        "{stdout}"
    );
    // A leaky bucket always holds: 30s by default, its burst (the COUNT) as queue.
    assert_eq!(
        cells("smooth"),
        [
            "smooth",
            "*",
            "ip",
            "shared",
            "leaky_bucket",
            "5/s",
            "5",
            "delay ≤30s q5",
            "enforce"
        ],
        "{stdout}"
    );
    assert_eq!(
        cells("slots"),
        [
            "slots",
            "*",
            "ip",
            "shared",
            "concurrency",
            "100 in flight",
            "100",
            "delay ≤500ms q1000",
            "enforce"
        ],
        "{stdout}"
    );
    // The columns line up, counted in characters ("≤" is one).
    let column = |line: &str, text: &str| line[..line.find(text).unwrap()].chars().count();
    let mode = column(lines[0], "mode");
    for line in &lines[1..4] {
        assert_eq!(column(line, "enforce"), mode, "{stdout}");
    }
}

#[test]
fn check_reports_a_max_queue_on_a_leaky_bucket_at_its_value() {
    let (code, stdout, stderr, path) = check(
        r#"[server]
upstream = "http://127.0.0.1:3000"

[[rule]]
name = "smooth"
algorithm = "leaky_bucket"
rate = "5/s"
max_queue = 20
"#,
    );

    assert_eq!(code, Some(1));
    assert!(stdout.is_empty(), "{stdout}");
    let errors = located_errors(&stderr, &path);
    assert_eq!(errors.len(), 1, "{stderr}");
    let (line, column, message) = &errors[0];
    assert_eq!((*line, *column), (8, 13), "{stderr}");
    assert!(message.starts_with("rule[0].max_queue: "), "{message}");
    assert!(message.contains("burst"), "{message}");
}

#[test]
fn check_summarises_tiers_overrides_sunset_ban_and_on_change_under_the_table() {
    let (code, stdout, stderr, _path) = check(
        r#"[server]
upstream = "http://127.0.0.1:3000"

[[rule]]
name = "sellers"
key = ["header:x-seller-id"]
rate = "10/s"
tiers = { by = "header:x-plan", premium = { rate = "100/s" }, free = { limits = ["10/s", "1000/d"], burst = 5 } }
overrides = { "seller-42" = { rate = "1000/s" } }
ban = { after = 20, within = "1m", for = "10m" }
on_change = "reset"

[[rule]]
name = "v0"
rate = "100/d"
sunset = { start = "2026-12-01T00:00:00Z", end = 2027-01-01T00:00:00Z, to = "10/d" }

[[rule]]
name = "plain"
rate = "1/s"
"#,
    );

    assert_eq!(code, Some(0), "{stderr}");
    let extras: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("rule ") && line.contains(": "))
        .collect();
    assert_eq!(
        extras,
        [
            "rule sellers: tiers by header:x-plan: premium 100/s; free 10/s, 1000/d burst 5",
            // The override's key is a credential (header:), shown labelled.
            extras[1],
            "rule sellers: ban 20 in 1m → 10m",
            "rule sellers: on_change reset",
            "rule v0: sunset 100/d → 10/d from 2026-12-01 to 2027-01-01 step 1d (31 steps)",
        ],
        "{stdout}"
    );
    assert!(
        extras[1].starts_with("rule sellers: overrides \"se…#") && extras[1].ends_with("\" 1000/s"),
        "{stdout}"
    );
    assert!(!stdout.contains("r-42"), "{stdout}");
    // The table itself keeps one row per rule, with the rule's own limits.
    let sellers = stdout
        .lines()
        .find(|line| line.starts_with("sellers"))
        .unwrap_or_default();
    assert!(sellers.contains("10/s"), "{stdout}");
}

#[test]
fn check_reports_tier_override_sunset_and_ban_mistakes_at_their_values() {
    let (code, stdout, stderr, path) = check(
        r#"[server]
upstream = "http://127.0.0.1:3000"

[[rule]]
name = "sellers"
rate = "10/s"
tiers = { by = "header:x-plan", premium = { rate = "100/x" } }
overrides = { "not-an-ip" = { rate = "1/s" } }
ban = { after = 0, within = "1m", for = "10m" }
on_change = "never"

[[rule]]
name = "v0"
rate = "100/d"
sunset = { start = 2026-12-01T00:00:00, end = "2027-01-01T00:00:00Z", to = "0/d" }
"#,
    );

    assert_eq!(code, Some(1));
    assert!(stdout.is_empty(), "{stdout}");
    let errors = located_errors(&stderr, &path);
    let positions: Vec<(u32, u32, &str)> = errors
        .iter()
        .map(|(line, column, message)| {
            (
                *line,
                *column,
                message.split(": ").next().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        positions,
        [
            (7, 52, "rule[0].tiers.premium.rate"),
            (8, 15, "rule[0].overrides.not-an-ip"),
            (9, 17, "rule[0].ban.after"),
            (10, 13, "rule[0].on_change"),
            (15, 20, "rule[1].sunset.start"),
        ],
        "{stderr}"
    );
    assert!(
        errors[3]
            .2
            .contains("\"keep\", \"proportional\", \"reset\""),
        "{stderr}"
    );
    assert!(
        errors[4].2.contains("add Z for UTC or an offset"),
        "{stderr}"
    );
}

#[test]
fn run_refuses_to_start_on_an_invalid_file() {
    let (_dir, path) = config_file(
        r#"[server]
listen = "127.0.0.1:0"
upstream = "http://127.0.0.1:3000"

[admin]
listen = "127.0.0.1:0"

[[rule]]
name = "per-ip"
rate = "many/m"
"#,
    );

    let output = sluice(&["run", "--config"], Some(&path));

    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert_eq!(located_errors(&stderr, &path).len(), 1, "{stderr}");
    assert!(!stderr.contains("sluice is serving"), "{stderr}");
}

#[test]
fn version_prints_the_package_version() {
    let output = sluice(&["--version"], None);

    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        text(&output.stdout).trim(),
        concat!("sluice ", env!("CARGO_PKG_VERSION"))
    );
}

/// `sluice demo` with the log levels a newcomer gets (no `RUST_LOG`).
fn demo(once: bool) -> Command {
    let mut command = Command::new(binary());
    command.arg("demo");
    if once {
        command.arg("--once");
    }
    command
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// The address in `line` after `label` (`label  http://ADDR/...`).
fn address_after(stdout: &str, label: &str) -> std::net::SocketAddr {
    let line = stdout
        .lines()
        .find(|line| line.starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} line:\n{stdout}"));
    let url = line[label.len()..].trim_start();
    let rest = url.strip_prefix("http://").expect(url);
    rest[..rest.find('/').unwrap_or(rest.len())]
        .trim_end()
        .parse()
        .unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

/// One `GET` over a fresh connection; the status code and the whole answer.
fn get_raw(addr: std::net::SocketAddr, target: &str, fields: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {target} HTTP/1.1\r\nHost: demo\r\n{fields}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let answer = text(&answer);
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
    (status, answer)
}

#[test]
fn demo_once_shows_allowed_and_limited_requests_then_exits() {
    let child = demo(true).spawn().expect("spawn sluice demo");
    let output = wait_with_deadline(child, Duration::from_secs(20));

    let stdout = text(&output.stdout);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "stderr: {stderr}");
    let rows_with = |status: &str| {
        stdout
            .lines()
            .filter(|line| line.split_whitespace().any(|word| word == status))
            .count()
    };
    assert!(rows_with("200") >= 1, "no admitted row:\n{stdout}");
    assert!(rows_with("429") >= 1, "no limited row:\n{stdout}");
    // The status page is named, at an address that was served.
    address_after(&stdout, "status page");
    // The tour's refusals are not logged into its table: nothing below a
    // warning reaches the terminal while it runs.
    assert!(
        !stderr.contains("request refused") && !stderr.contains("INFO"),
        "logged during the tour:\n{stderr}"
    );
}

/// A child process killed when the test ends, however it ends (a failed
/// assertion included): `Child` itself is left running when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn demo_keeps_serving_with_its_status_page_and_logs_refusals_tried_by_hand() {
    use std::io::{BufRead, BufReader};
    let mut demo = KillOnDrop(demo(false).spawn().expect("spawn sluice demo"));
    let child = &mut demo.0;
    // Everything it prints up to "Ctrl-C to stop.", within 20 s.
    let (lines, printed) = std::sync::mpsc::channel();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut shown = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !shown.contains("Ctrl-C to stop.") {
        let left = deadline.saturating_duration_since(Instant::now());
        match printed.recv_timeout(left) {
            Ok(line) => shown.extend([line.as_str(), "\n"]),
            Err(_) => panic!("the demo did not say how to go on:\n{shown}"),
        }
    }
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (log, logged) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = log.send(line);
        }
    });

    // The status page it names answers with the page.
    let admin = address_after(&shown, "status page");
    let (status, page) = get_raw(admin, "/", "");
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("<html") || page.contains("<!doctype html"),
        "{page}"
    );
    // Its first curl line works as printed: alice may search 3 times in
    // 10 s, so four searches in a row are refused at least once, and the
    // refusal is logged now that the tour is over, her key labelled.
    let curl = shown
        .lines()
        .find(|line| line.contains("curl -i") && line.contains("x-api-key: alice"))
        .unwrap_or_else(|| panic!("no curl line for alice:\n{shown}"));
    let proxy = curl
        .split_whitespace()
        .find_map(|word| word.strip_prefix("http://"))
        .and_then(|url| url.split('/').next())
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| panic!("no address in {curl:?}"));
    let statuses: Vec<u16> = (0..4)
        .map(|_| get_raw(proxy, "/api/search", "x-api-key: alice\r\n").0)
        .collect();
    assert!(statuses.contains(&429), "{statuses:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let refusal = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match logged.recv_timeout(left) {
            Ok(line) if line.contains("request refused") => break line,
            Ok(_) => {}
            Err(_) => panic!("alice's refusal was not logged"),
        }
    };
    assert!(refusal.contains("/api/search"), "{refusal}");
    assert!(
        !refusal.contains("alice"),
        "the API key in clear: {refusal}"
    );

    // Ctrl-C stops it cleanly.
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the demo did not stop on SIGINT");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn check_shows_the_redis_store_it_would_use() {
    let (code, stdout, stderr, _) = check(
        r#"[server]
upstream = "http://127.0.0.1:3000"
[store]
backend = "redis"
[store.redis]
url = "redis://sluice:hunter2-secret@cache:6380/1"
timeout = "50ms"
on_error = "deny"
instances = 3
"#,
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains(
            "store redis redis://sluice:***@cache:6380/1  mode strict  timeout 50ms  on_error deny  \
             settle_retry_for 10m  instances 3"
        ),
        "{stdout}"
    );
    assert!(
        !stdout.contains("hunter2"),
        "the password in clear: {stdout}"
    );
    // Hybrid mode: the interval, and what it does with each rule.
    let (code, stdout, stderr, _) = check(
        r#"[server]
upstream = "http://127.0.0.1:3000"
[store]
backend = "redis"
[store.redis]
mode = "hybrid"
sync_interval = "20ms"
[[rule]]
name = "per-ip"
rate = "100/s"
[[rule]]
name = "exact"
algorithm = "sliding_log"
rate = "10/m"
"#,
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("mode hybrid (sync every 20ms)"), "{stdout}");
    assert!(
        stdout.contains("rule per-ip: hybrid: decided in memory, synced every 20ms"),
        "{stdout}"
    );
    assert!(
        stdout.contains("rule exact: hybrid: decided by each instance at its share"),
        "{stdout}"
    );
    // Nor in a config error about the URL.
    let (code, _, stderr, _) = check(
        "[server]\nupstream = \"http://127.0.0.1:3000\"\n[store]\nbackend = \"redis\"\n\
         [store.redis]\nurl = \"redis://:hunter2-secret@\"\n",
    );
    assert_ne!(code, Some(0));
    assert!(stderr.contains("redis://:***@"), "{stderr}");
    assert!(
        !stderr.contains("hunter2"),
        "the password in clear: {stderr}"
    );
}

/// Every page under docs/ opens with an example config, and `check` accepts
/// it as it is (with the JWT secret its identity example names set), as it
/// accepts README's first config.
#[test]
fn check_accepts_the_example_that_opens_each_doc_page_and_readme() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    pages.sort();
    assert!(pages.len() >= 8, "{pages:?}");
    pages.push(root.join("README.md"));
    for page in pages {
        let markdown = std::fs::read_to_string(&page).unwrap();
        // A doc page opens with its example; README opens with the two
        // commands, then its first config.
        let opening = if page.ends_with("README.md") {
            "```toml"
        } else {
            "```"
        };
        let first_block = markdown
            .find(opening)
            .unwrap_or_else(|| panic!("{page:?} has no example"));
        // Opens: before the page's first section.
        let first_section = markdown.find("\n## ").unwrap_or(markdown.len());
        assert!(
            page.ends_with("README.md") || first_block < first_section,
            "{page:?}: the example comes after the first section"
        );
        let example = markdown[first_block..]
            .strip_prefix("```toml\n")
            .and_then(|rest| rest.split_once("\n```").map(|(toml, _)| toml))
            .unwrap_or_else(|| panic!("{page:?} does not open with a ```toml example"));
        let (dir, path) = config_file(example);
        let output = Command::new(binary())
            .args(["check", "--config"])
            .arg(&path)
            .env("SLUICE_JWT_SECRET", "an-example-secret")
            .output()
            .unwrap();
        drop(dir);
        assert!(
            output.status.success(),
            "{page:?}: {}",
            text(&output.stderr)
        );
    }
}

/// docs/charging.md's "Calendar quotas" opens with a config `check`
/// accepts, and `check` shows the calendar with the rule's rates.
#[test]
fn check_accepts_the_calendar_quotas_example() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/charging.md")).unwrap();
    let (_, section) = page
        .split_once("\n## Calendar quotas\n")
        .expect("docs/charging.md has a \"Calendar quotas\" section");
    let example = section
        .trim_start()
        .strip_prefix("```toml\n")
        .and_then(|rest| rest.split_once("\n```").map(|(toml, _)| toml))
        .expect("the section opens with a ```toml example");
    let (code, stdout, stderr, _) = check(example);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("20000/d, 1000000/mo (Europe/Berlin calendar)"),
        "{stdout}"
    );
}

/// Every section of docs/edge.md, docs/upstreams.md and docs/charging.md opens with a config
/// `check` accepts, with the certificate, key and CA files it names in
/// place (made by a test CA) and the Redis password and JWT secret
/// variables its examples name set.
#[test]
fn check_accepts_the_example_that_opens_each_section_of_the_edge_upstreams_and_charging_pages() {
    for page in ["docs/edge.md", "docs/upstreams.md", "docs/charging.md"] {
        check_each_section_opening(page);
    }
}

fn check_each_section_opening(name: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join(name)).unwrap();
    let ca = support::certs::TestCa::new("docs CA");
    let sections: Vec<&str> = page.split("\n## ").skip(1).collect();
    assert!(sections.len() >= 3, "{sections:?}");
    for section in sections {
        let title = section.lines().next().unwrap();
        let example = section
            .split_once("\n\n")
            .and_then(|(_, rest)| rest.strip_prefix("```toml\n"))
            .and_then(|rest| rest.split_once("\n```").map(|(toml, _)| toml))
            .unwrap_or_else(|| panic!("section {title:?} does not open with a ```toml example"));
        let (dir, path) = config_file(example);
        // The files the example names, beside the config.
        let beside = |named: &str| {
            let file = dir.path().join(named);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            file
        };
        for line in example.lines() {
            if let (Some(cert), Some(key)) = (quoted(line, "cert = "), quoted(line, "key = ")) {
                let leaf = ca.leaf(&["example.com"]);
                std::fs::write(beside(cert), &leaf.cert_pem).unwrap();
                std::fs::write(beside(key), &leaf.key_pem).unwrap();
            }
            let field = line.trim_start();
            if let Some(named) = quoted(field, "upstream_ca = ").or_else(|| {
                field
                    .starts_with("ca = ")
                    .then(|| quoted(field, "ca = "))
                    .flatten()
            }) {
                std::fs::write(beside(named), ca.pem()).unwrap();
            }
        }
        let output = Command::new(binary())
            .args(["check", "--config"])
            .arg(&path)
            .env("SLUICE_REDIS_PASSWORD", "an-example-password")
            .env("SLUICE_JWT_SECRET", "an-example-secret")
            .output()
            .unwrap();
        drop(dir);
        assert!(
            output.status.success(),
            "{name}, section {title:?}: {}",
            text(&output.stderr)
        );
    }
}

/// The string value of `field` (`name = `) in one line of TOML.
fn quoted<'a>(line: &'a str, field: &str) -> Option<&'a str> {
    let rest = &line[line.find(field)? + field.len()..];
    let rest = rest.strip_prefix('"')?;
    Some(&rest[..rest.find('"')?])
}

/// `check` says that HTTP/3 is on, where, and when a Retry is sent.
#[test]
fn check_says_where_http3_listens_and_when_a_retry_is_sent() {
    let ca = support::certs::TestCa::new("check CA");
    let dir = tempfile::tempdir().unwrap();
    ca.write_leaf(dir.path(), "api", &["api.example.com"]);
    let toml = format!(
        "[server]\nlisten = \"0.0.0.0:8443\"\nupstream = \"http://127.0.0.1:3000\"\n\
         [server.tls]\ncerts = [{{ cert = \"{}\", key = \"{}\" }}]\nhttp3 = true\n\
         quic_retry = 20\n",
        dir.path().join("api.pem").display(),
        dir.path().join("api.key").display(),
    );
    let (code, stdout, stderr, _) = check(&toml);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains(
            "http/3 on udp 0.0.0.0:8443, the same certificates; an unproved address is sent \
             a Retry once 20 handshakes are in progress"
        ),
        "{stdout}"
    );
}
