//! sluice on a Redis that wants TLS and a password, as managed offerings do
//! (docs/edge.md, "Managed Redis: TLS and AUTH"): real `redis-server`
//! processes speaking TLS only, with certificates the tests make, and the
//! real binary. Limits are shared over TLS, on one server and on a Cluster;
//! a refused password or an unknown CA is a store error handled per
//! `on_error` and logged once per failure streak; and no password, from
//! the environment or from a URL, shows in a log line, `check`'s output or
//! an admin answer.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use http::{Method, StatusCode};

use crate::support::certs::TestCa;
use crate::support::{
    binary, eventually, get, metric, send, write_config, RedisCluster, RedisOptions, RedisServer,
    Sluice, SluiceProcess, Upstream,
};

/// What sluice's AUTH password is in these tests (never in a file).
const PASSWORD: &str = "env-secret-4b1d9e";

/// Five requests an hour per caller.
const PER_CALLER: &str = r#"
[[rule]]
name = "per-caller"
match = { path_prefix = "/api" }
key = ["header:x-caller"]
rate = "5/h"
"#;

/// A CA, and a certificate for `127.0.0.1` and `localhost` it signed, in
/// `dir` (`ca.pem`, `redis.pem`, `redis.key`): a TLS-only server's options.
fn tls(dir: &Path) -> RedisOptions {
    let ca = TestCa::new("sluice redis test CA");
    let ca_file = ca.write(dir, "ca");
    let (cert, key) = ca.write_leaf(dir, "redis", &["127.0.0.1", "localhost"]);
    RedisOptions::tls(&cert, &key, &ca_file)
}

/// A config on `upstream` with `redis` as its `[store.redis]` and the
/// per-caller rule.
fn config(upstream: &Upstream, redis: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [store]\nbackend = \"redis\"\n[store.redis]\ntimeout = \"2s\"\n{redis}\n{PER_CALLER}",
        upstream.addr
    )
}

/// `sluice run` on `config` (written in `dir`) with `env`, its standard
/// output kept in `dir/<name>.out` (the log is its standard error, which
/// the process keeps).
fn spawn(dir: &Path, name: &str, config: &Path, env: &[(&str, &str)]) -> (SluiceProcess, PathBuf) {
    let out = dir.join(format!("{name}.out"));
    let mut command = Command::new("sh");
    command
        .args(["-c", r#"exec "$0" run --config "$1" >"$2""#])
        .arg(binary())
        .arg(config)
        .arg(&out)
        .envs(env.iter().copied());
    (SluiceProcess::spawn_command(command), out)
}

async fn call(sluice: &SluiceProcess, caller: &str) -> StatusCode {
    send(Method::GET, &sluice.url("/api"), &[("x-caller", caller)])
        .await
        .status
}

async fn fallback_active(sluice: &SluiceProcess) -> f64 {
    let text = get(&sluice.admin_url("/metrics"), &[]).await.body;
    metric(&text, "sluice_store_fallback_active").expect("the fallback gauge")
}

/// Sends requests until the store answers them (the link connects in the
/// background).
async fn until_on_redis(sluice: &SluiceProcess) {
    eventually(
        Duration::from_secs(15),
        "sluice never used Redis",
        || async {
            let _ = call(sluice, "warm-up").await;
            fallback_active(sluice).await == 0.0
        },
    )
    .await;
}

/// Every place a password could leak through: each admin view, the
/// status page and its JSON, and a problem document.
async fn admin_answers(sluice: &SluiceProcess) -> Vec<(String, String)> {
    let mut answers = Vec::new();
    for path in [
        "/",
        "/admin/status",
        "/metrics",
        "/healthz",
        "/readyz",
        "/admin/rules",
        "/admin/top",
        "/admin/bans",
        "/admin/buckets?rule=per-caller&key=alice",
    ] {
        let got = get(&sluice.admin_url(path), &[]).await;
        answers.push((path.to_owned(), got.body));
    }
    let explained = crate::support::post_json(
        &sluice.admin_url("/admin/explain"),
        r#"{"method":"GET","path":"/api","headers":{"x-caller":"alice"}}"#,
        &[],
    )
    .await;
    answers.push(("/admin/explain".to_owned(), explained.body));
    answers
}

/// `sluice check` on `config` with `env`: whether it passed, and what it
/// printed on both outputs.
fn check(config: &Path, env: &[(&str, &str)]) -> (bool, String) {
    let output = Command::new(binary())
        .args(["check", "--config"])
        .arg(config)
        .env_remove("SLUICE_TEST_REDIS_PASSWORD")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), printed)
}

fn assert_nowhere(secrets: &[&str], surfaces: &[(String, String)]) {
    for (surface, text) in surfaces {
        for secret in secrets {
            assert!(
                !text.contains(secret),
                "a Redis password shows in {surface}:\n{text}"
            );
        }
    }
}

/// Everything a process wrote: its log (standard error) and its standard
/// output.
fn printed(name: &str, sluice: &SluiceProcess, out: &Path) -> Vec<(String, String)> {
    vec![
        (
            format!("{name}'s log"),
            sluice.log.lock().unwrap().join("\n"),
        ),
        (
            format!("{name}'s standard output"),
            std::fs::read_to_string(out).unwrap_or_default(),
        ),
    ]
}

#[tokio::test]
async fn two_instances_share_limits_over_tls_with_the_password_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start_with(tls(dir.path()).with_password(PASSWORD));
    let upstream = Upstream::start().await;
    // The CA file beside the config, named relative to it.
    let path = write_config(
        dir.path(),
        &config(
            &upstream,
            &format!(
                "url = \"{}\"\nca = \"ca.pem\"\npassword_env = \"SLUICE_TEST_REDIS_PASSWORD\"\n",
                redis.url()
            ),
        ),
    );
    let env = [("SLUICE_TEST_REDIS_PASSWORD", PASSWORD)];
    let (a, a_out) = spawn(dir.path(), "a", &path, &env);
    let (b, b_out) = spawn(dir.path(), "b", &path, &env);
    until_on_redis(&a).await;
    until_on_redis(&b).await;
    let mut admitted = 0;
    for round in 0..12 {
        let sluice = if round % 2 == 0 { &a } else { &b };
        if call(sluice, "alice").await == StatusCode::OK {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 5, "5/h across two instances sharing Redis");
    let buckets = redis
        .cli(&["--scan", "--pattern", "sluice:{per-caller*"])
        .unwrap();
    assert!(!buckets.is_empty(), "no bucket in Redis");

    let (passed, checked) = check(&path, &env);
    assert!(passed, "{checked}");
    assert!(
        checked.contains(&format!("store redis {}  mode strict", redis.url()))
            && checked.contains("tls verified by")
            && checked.contains("password from $SLUICE_TEST_REDIS_PASSWORD"),
        "{checked}"
    );
    let mut surfaces = vec![("check".to_owned(), checked)];
    surfaces.extend(admin_answers(&a).await);
    surfaces.extend(printed("a", &a, &a_out));
    surfaces.extend(printed("b", &b, &b_out));
    assert_nowhere(&[PASSWORD], &surfaces);

    // Without the variable, check names it where it is written.
    let (passed, checked) = check(&path, &[]);
    assert!(!passed);
    assert!(
        checked.contains(
            "sluice.toml:12:16: store.redis.password_env: the environment variable \
             SLUICE_TEST_REDIS_PASSWORD is not set"
        ),
        "{checked}"
    );
}

#[tokio::test]
async fn a_password_in_the_url_is_used_and_shown_masked_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let url_password = "url-secret-77c2";
    let redis = RedisServer::start_with(tls(dir.path()).with_password(url_password));
    let upstream = Upstream::start().await;
    let url = redis
        .url()
        .replace("rediss://", &format!("rediss://default:{url_password}@"));
    let path = write_config(
        dir.path(),
        &config(&upstream, &format!("url = \"{url}\"\nca = \"ca.pem\"\n")),
    );
    let (sluice, out) = spawn(dir.path(), "sluice", &path, &[]);
    until_on_redis(&sluice).await;
    let admitted = {
        let mut admitted = 0;
        for _ in 0..7 {
            if call(&sluice, "bob").await == StatusCode::OK {
                admitted += 1;
            }
        }
        admitted
    };
    assert_eq!(admitted, 5);
    let (passed, checked) = check(&path, &[]);
    assert!(passed, "{checked}");
    let masked = redis.url().replace("rediss://", "rediss://default:***@");
    assert!(checked.contains(&masked), "{checked}");
    let mut surfaces = vec![("check".to_owned(), checked)];
    surfaces.extend(admin_answers(&sluice).await);
    surfaces.extend(printed("sluice", &sluice, &out));
    assert_nowhere(&[url_password], &surfaces);

    // With password_env as well, the environment's wins (the URL's is
    // wrong here) and check says the URL's is not used, masked. This
    // instance runs in hybrid mode: its syncs go over the same link.
    let wrong = redis
        .url()
        .replace("rediss://", "rediss://default:stale-in-file-0e1@");
    let path = write_config(
        dir.path(),
        &config(
            &upstream,
            &format!(
                "url = \"{wrong}\"\nca = \"ca.pem\"\npassword_env = \"SLUICE_TEST_REDIS_PASSWORD\"\n\
                 mode = \"hybrid\"\n"
            ),
        ),
    );
    let env = [("SLUICE_TEST_REDIS_PASSWORD", url_password)];
    let (passed, checked) = check(&path, &env);
    assert!(passed, "{checked}");
    assert!(
        checked.contains(
            "sluice.toml:12:16: store.redis.password_env: the password in \
             store.redis.url is not used: the one in SLUICE_TEST_REDIS_PASSWORD is"
        ),
        "{checked}"
    );
    let (second, second_out) = spawn(dir.path(), "second", &path, &env);
    let buckets = || {
        redis
            .cli(&["--scan", "--pattern", "sluice:{per-caller*"])
            .unwrap()
            .lines()
            .count()
    };
    let before = buckets();
    assert_eq!(call(&second, "erin").await, StatusCode::OK);
    eventually(
        Duration::from_secs(10),
        "the hybrid instance never synced erin's bucket to Redis",
        || async { buckets() > before },
    )
    .await;
    assert_eq!(fallback_active(&second).await, 0.0);
    let mut surfaces = vec![("check".to_owned(), checked)];
    surfaces.extend(printed("second", &second, &second_out));
    assert_nowhere(&[url_password, "stale-in-file-0e1"], &surfaces);
}

/// How many lines of `sluice`'s log contain `needle`.
/// How many times Redis refused sluice's AUTH: the `count` of the newest
/// entry of its ACL log (refusals alike within a minute are one entry).
fn auth_refusals(redis: &RedisServer) -> u64 {
    let log = redis.cli(&["ACL", "LOG", "1"]).unwrap_or_default();
    let mut lines = log.lines().map(str::trim);
    lines
        .by_ref()
        .find(|line| *line == "count")
        .and_then(|_| lines.next()?.parse().ok())
        .unwrap_or(0)
}

/// Waits until Redis has refused sluice's AUTH `more` times after `since`
/// of [`auth_refusals`]: its probes (one every 250 ms) went on.
async fn until_refused(redis: &RedisServer, since: u64, more: u64) {
    let what = format!("Redis never refused {more} more AUTHs");
    eventually(Duration::from_secs(10), &what, || async {
        auth_refusals(redis) >= since + more
    })
    .await;
}

fn lines_with(sluice: &SluiceProcess, needle: &str) -> usize {
    sluice.logged(needle).len()
}

#[tokio::test]
async fn a_refused_password_is_a_store_error_per_on_error_logged_once_per_streak() {
    let dir = tempfile::tempdir().unwrap();
    // The server's own password is the administrator's; sluice logs in as
    // a user of its own (an RBAC user, as ElastiCache has), not created yet.
    let admin_password = "admin-secret-90aa";
    let redis = RedisServer::start_with(tls(dir.path()).with_password(admin_password));
    let upstream = Upstream::start().await;
    let user_url = redis.url().replace("rediss://", "rediss://sluice@");
    let path = write_config(
        dir.path(),
        &config(
            &upstream,
            &format!(
                "url = \"{user_url}\"\nca = \"ca.pem\"\npassword_env = \"SLUICE_TEST_REDIS_PASSWORD\"\n\
                 on_error = \"deny\"\n"
            ),
        ),
    );
    let env = [("SLUICE_TEST_REDIS_PASSWORD", PASSWORD)];
    let before = auth_refusals(&redis);
    let (sluice, out) = spawn(dir.path(), "sluice", &path, &env);
    let refused = "Redis refused AUTH";
    let mut denied = Vec::new();
    for _ in 0..20 {
        let got = send(Method::GET, &sluice.url("/api"), &[("x-caller", "carol")]).await;
        assert_eq!(got.status, StatusCode::SERVICE_UNAVAILABLE, "{}", got.body);
        denied.push(got.body);
    }
    // Several probes were refused meanwhile (one every 250 ms).
    until_refused(&redis, before, 4).await;
    assert_eq!(fallback_active(&sluice).await, 1.0);
    assert_eq!(lines_with(&sluice, refused), 1, "{:#?}", sluice.log.lock());
    assert_eq!(
        lines_with(&sluice, "the store failed a decision"),
        1,
        "{:#?}",
        sluice.log.lock()
    );

    // The user is made: sluice gets in and decides in Redis.
    // The access string docs/edge.md suggests: every key sluice
    // writes starts with `sluice:`.
    let made = redis.cli(&[
        "ACL",
        "SETUSER",
        "sluice",
        "on",
        &format!(">{PASSWORD}"),
        "~sluice:*",
        "+@all",
    ]);
    assert_eq!(made.as_deref(), Some("OK"));
    until_on_redis(&sluice).await;
    assert_eq!(call(&sluice, "carol").await, StatusCode::OK);
    // The user is deleted (its connections with it): a new streak, logged
    // once again, however many requests it refuses.
    assert_eq!(
        redis.cli(&["ACL", "DELUSER", "sluice"]).as_deref(),
        Some("1")
    );
    eventually(
        Duration::from_secs(10),
        "requests never denied again",
        || async { call(&sluice, "carol").await == StatusCode::SERVICE_UNAVAILABLE },
    )
    .await;
    let deleted = auth_refusals(&redis);
    for _ in 0..20 {
        assert_eq!(
            call(&sluice, "carol").await,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
    until_refused(&redis, deleted, 4).await;
    assert_eq!(lines_with(&sluice, refused), 2, "{:#?}", sluice.log.lock());

    let mut surfaces: Vec<(String, String)> = denied
        .into_iter()
        .map(|body| ("a 503 problem document".to_owned(), body))
        .collect();
    surfaces.extend(admin_answers(&sluice).await);
    surfaces.extend(printed("sluice", &sluice, &out));
    assert_nowhere(&[PASSWORD, admin_password], &surfaces);
}

#[tokio::test]
async fn a_server_the_ca_did_not_sign_is_a_store_error_never_an_unverified_link() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start_with(tls(dir.path()));
    let upstream = Upstream::start().await;
    TestCa::new("another CA").write(dir.path(), "other");
    for (name, ca) in [("other-ca", "ca = \"other.pem\"\n"), ("system-roots", "")] {
        let path = write_config(
            dir.path(),
            &config(
                &upstream,
                &format!("url = \"{}\"\n{ca}on_error = \"deny\"\n", redis.url()),
            ),
        );
        let (sluice, _out) = spawn(dir.path(), name, &path, &[]);
        for _ in 0..10 {
            assert_eq!(
                call(&sluice, "dana").await,
                StatusCode::SERVICE_UNAVAILABLE,
                "{name}"
            );
        }
        // The streak under test: several probes (one every 250 ms) fail
        // their handshake, which Redis counts nowhere.
        const SEVERAL_PROBES: Duration = Duration::from_millis(1000);
        tokio::time::sleep(SEVERAL_PROBES).await;
        let unreachable = sluice.logged("cannot reach Redis");
        assert_eq!(unreachable.len(), 1, "{name}: {:#?}", sluice.log.lock());
        assert!(
            unreachable[0].contains("certificate"),
            "{name}: {unreachable:?}"
        );
        assert_eq!(fallback_active(&sluice).await, 1.0, "{name}");
    }
    // Nothing sluice sent reached Redis.
    assert_eq!(redis.cli(&["DBSIZE"]).as_deref(), Some("0"));
}

#[tokio::test]
async fn a_redis_cluster_over_tls_with_a_password_shares_limits() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = RedisCluster::start_with(tls(dir.path()).with_password(PASSWORD));
    // In-process instances read the variable from this test process: a
    // name no other test sets.
    std::env::set_var("SLUICE_TEST_CLUSTER_REDIS_PASSWORD", PASSWORD);
    let urls: Vec<String> = cluster
        .urls()
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    assert!(urls.iter().all(|url| url.starts_with("\"rediss://")));
    let config = format!(
        "[server]\nupstream = \"http://{{upstream}}\"\n\
         [store]\nbackend = \"redis\"\n[store.redis]\ntimeout = \"5s\"\ncluster = true\n\
         urls = [{}]\nca = \"{}\"\npassword_env = \"SLUICE_TEST_CLUSTER_REDIS_PASSWORD\"\n\
         {PER_CALLER}",
        urls.join(", "),
        dir.path().join("ca.pem").display()
    );
    let upstream = Upstream::start().await;
    let mut sluices = Vec::new();
    for _ in 0..2 {
        sluices.push(Sluice::start(&config, upstream.addr).await);
    }
    for sluice in &sluices {
        eventually(
            Duration::from_secs(20),
            "sluice never used the cluster",
            || async {
                let _ = send(Method::GET, &sluice.url("/api"), &[("x-caller", "warm-up")]).await;
                sluice.metric("sluice_store_fallback_active").await == 0.0
            },
        )
        .await;
    }
    // 12 callers, 7 requests each over both instances: exactly 5 each.
    for caller in 0..12 {
        let mut admitted = 0;
        for round in 0..7 {
            let got = send(
                Method::GET,
                &sluices[round % 2].url("/api"),
                &[("x-caller", &format!("caller-{caller}"))],
            )
            .await;
            if got.status == StatusCode::OK {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 5, "caller-{caller}");
    }
    // The callers' buckets are spread over the primaries.
    let holding = cluster
        .nodes
        .iter()
        .filter(|node| node.cli(&["DBSIZE"]).is_some_and(|size| size != "0"))
        .count();
    assert!(holding >= 2, "{holding} primaries hold buckets");
    for sluice in sluices {
        sluice.shutdown().await;
    }
}
