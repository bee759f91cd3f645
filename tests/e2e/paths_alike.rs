//! Paths an upstream treats alike (docs/configuration.md): with the default
//! `server.paths_alike`, a rule on `/login` limits every spelling Tomcat,
//! Express or ASP.NET would serve as `/login`, and the upstream still
//! receives each spelling as sent (normalised, not folded); with
//! `paths_alike = []` the rule matches `/login` only. The real binary, a
//! real upstream on loopback; `sluice replay` folds a log's paths with the
//! config it replays.

use crate::support;

use std::process::Command;

use http::StatusCode;
use serde_json::{json, Value};
use support::{assert_problem, binary, get, post_json, write_config, SluiceProcess, Upstream};

/// What a Tomcat, Express or ASP.NET upstream serves as `/login`.
const SPELLINGS: [&str; 6] = [
    "/login",
    "/login/",
    "/login;x=1",
    "/login/..;/login",
    "/Login",
    "/LOGIN/",
];

/// One `/login` rule keyed on the path, admitting one request per
/// spelling a minute, and a rule no request here fits.
fn config(upstream: &Upstream, paths_alike: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
upstream = "http://{}"
{paths_alike}
[admin]
listen = "127.0.0.1:0"

[[rule]]
name = "logins"
match = {{ path = "/login" }}
key = ["path"]
rate = "{}/m"
"#,
        upstream.addr,
        SPELLINGS.len()
    )
}

fn start(upstream: &Upstream, paths_alike: &str) -> (tempfile::TempDir, SluiceProcess) {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(upstream, paths_alike));
    let sluice = SluiceProcess::spawn(&path);
    (dir, sluice)
}

async fn status(sluice: &SluiceProcess, path: &str) -> u16 {
    get(&sluice.url(path), &[]).await.status.as_u16()
}

#[tokio::test]
async fn every_spelling_the_upstream_serves_as_login_is_limited_by_a_login_rule() {
    let upstream = Upstream::start().await;
    let (_dir, sluice) = start(&upstream, "");

    let mut codes = Vec::new();
    for spelling in SPELLINGS {
        codes.push(status(&sluice, spelling).await);
    }
    assert_eq!(
        codes,
        [200; SPELLINGS.len()],
        "one bucket has room for each"
    );
    // Each spelling spent the one bucket of `/login`: every spelling is
    // refused now, not only the one sent twice.
    for spelling in SPELLINGS {
        assert_eq!(status(&sluice, spelling).await, 429, "{spelling}");
    }
    // A path the upstream serves apart is not the rule's.
    assert_eq!(status(&sluice, "/logins").await, 200);
    assert_eq!(
        status(&sluice, "/login%3Bx=1").await,
        200,
        "%3B is no parameter"
    );

    // The upstream received each spelling as sent (normalised, unfolded).
    let targets: Vec<String> = upstream
        .seen()
        .into_iter()
        .map(|seen| seen.target)
        .collect();
    let mut expected: Vec<&str> = SPELLINGS.to_vec();
    expected.extend(["/logins", "/login%3Bx=1"]);
    assert_eq!(targets, expected);

    // `..;` climbing above the root is refused, as Tomcat refuses it.
    let above = get(&sluice.url("/..;/login"), &[]).await;
    let problem = assert_problem(&above, StatusCode::BAD_REQUEST);
    assert!(
        problem["detail"].as_str().unwrap().contains("'..;'"),
        "{problem}"
    );
    assert_eq!(upstream.count(), expected.len(), "nothing more forwarded");

    // Explain shows the path it forwards and the one it matched on.
    let answer = post_json(
        &sluice.admin_url("/admin/explain"),
        &json!({"method": "GET", "path": "/LOGIN;jsessionid=1/", "ip": "192.0.2.1"}).to_string(),
        &[],
    )
    .await;
    let answer: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(answer["request"]["normalized_path"], "/LOGIN;jsessionid=1/");
    assert_eq!(answer["request"]["folded_path"], "/login");
    assert_eq!(answer["rules"][0]["matched"], true, "{answer}");
    assert_eq!(answer["rules"][0]["key"], "/login", "{answer}");
}

#[tokio::test]
async fn with_paths_alike_empty_only_the_path_as_written_is_limited() {
    let upstream = Upstream::start().await;
    let (_dir, sluice) = start(&upstream, "paths_alike = []");

    for _ in 0..SPELLINGS.len() {
        assert_eq!(status(&sluice, "/login").await, 200);
    }
    assert_eq!(status(&sluice, "/login").await, 429);
    let mut codes = Vec::new();
    for spelling in &SPELLINGS[1..] {
        codes.push(status(&sluice, spelling).await);
    }
    assert_eq!(
        codes,
        [200; SPELLINGS.len() - 1],
        "no other spelling is the rule's"
    );
    let targets: Vec<String> = upstream
        .seen()
        .into_iter()
        .map(|seen| seen.target)
        .collect();
    assert_eq!(&targets[targets.len() - 5..], &SPELLINGS[1..]);
    // `..;` is a name like any other then.
    assert_eq!(status(&sluice, "/..;/login").await, 200);
}

/// Lines of an access log: one request a second from one client, to each
/// of `paths`, all forwarded.
fn access_log(paths: &[&str]) -> String {
    let mut log = String::new();
    for (second, path) in paths.iter().enumerate() {
        log.push_str(&format!(
            r#"{{"time":"2026-11-28T10:00:{second:02}.000000Z","client":"10.0.0.1","method":"GET","host":"h","path":"{path}","status":200,"duration_ms":1,"delay_ms":0,"outcome":"allowed","rule":null,"keys":{{"ip":"10.0.0.1"}}}}"#
        ));
        log.push('\n');
    }
    log
}

/// `sluice replay --json` of `log` with a `/login` rule of one request a
/// minute: how many lines that rule newly limits.
fn replayed(log: &str, paths_alike: &str) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "[server]\nupstream = \"http://127.0.0.1:9\"\n{paths_alike}\n[[rule]]\nname = \"logins\"\n\
             match = {{ path = \"/login\" }}\nkey = [\"ip\"]\nrate = \"1/m\"\n"
        ),
    );
    let log_path = dir.path().join("access.log");
    std::fs::write(&log_path, log).unwrap();
    let output = Command::new(binary())
        .args(["replay", "--json", "--config"])
        .arg(&config)
        .arg(&log_path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let row = (report["rules"].as_array().unwrap().iter())
        .find(|row| row["rule"] == "logins")
        .unwrap_or_else(|| panic!("no logins row: {report}"));
    row["newly_limited"].as_u64().unwrap()
}

#[test]
fn replay_folds_each_line_s_path_with_the_config_it_replays() {
    let log = access_log(&["/login", "/Login/", "/login;x=1", "/other"]);
    assert_eq!(replayed(&log, ""), 2, "both other spellings are /login's");
    assert_eq!(replayed(&log, "paths_alike = []"), 0);
    assert_eq!(
        replayed(&log, "paths_alike = [\"case\"]"),
        0,
        "/Login/ keeps its slash"
    );
    assert_eq!(
        replayed(&log, "paths_alike = [\"case\", \"trailing_slash\"]"),
        1
    );
}
