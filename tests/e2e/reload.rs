//! Hot reload of the real binary: SIGHUP, `POST /admin/reload` and the file
//! watch apply a new config without a restart; buckets of unchanged rules
//! keep their state, a changed limit carries its buckets over, a broken file
//! keeps the old config, and reloading under load fails no request. A
//! Kubernetes ConfigMap's `..data` symlink swap is noticed like a write.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use support::{assert_problem, get, metric, send, write_config, SluiceProcess, Upstream};

/// A config with rule `spend` (header key, `spend_rate`, `on_change`) and
/// rule `steady` (2/m on /steady).
fn config(upstream: &Upstream, spend_rate: &str, on_change: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
upstream = "http://{}"

[admin]
listen = "127.0.0.1:0"

[[rule]]
name = "spend"
match = {{ path_prefix = "/spend" }}
key = ["header:x-id"]
rate = "{spend_rate}"
{on_change}

[[rule]]
name = "steady"
match = {{ path_prefix = "/steady" }}
key = ["header:x-id"]
rate = "2/m"
"#,
        upstream.addr
    )
}

/// Statuses of `n` requests to `path` as caller `id`.
async fn statuses(sluice: &SluiceProcess, path: &str, id: &str, n: usize) -> Vec<u16> {
    let mut got = Vec::with_capacity(n);
    for _ in 0..n {
        got.push(
            get(&sluice.url(path), &[("x-id", id)])
                .await
                .status
                .as_u16(),
        );
    }
    got
}

/// Waits until `sluice_config_reloads_total{result}` reaches `count`.
async fn await_reloads(sluice: &SluiceProcess, result: &str, count: f64) {
    let series = format!("sluice_config_reloads_total{{result=\"{result}\"}}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = get(&sluice.admin_url("/metrics"), &[]).await.body;
        if metric(&text, &series).unwrap_or(0.0) >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {series} = {count} within 10 s:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writes `text` to `path` by atomic replacement (write aside, rename).
fn replace(path: &Path, text: &str) {
    let aside = path.with_extension("toml.new");
    std::fs::write(&aside, text).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_a_changed_limit_without_refilling_and_keeps_unchanged_buckets() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(&upstream, "3/m", ""));
    let sluice = SluiceProcess::spawn(&path);

    // Caller A spends its whole 3/m; caller B spends one of its 2 on /steady.
    assert_eq!(
        statuses(&sluice, "/spend", "a", 4).await,
        [200, 200, 200, 429]
    );
    assert_eq!(statuses(&sluice, "/steady", "b", 1).await, [200]);

    // 3/m → 6/m, proportional (the default): A had 0 of 3 left, so 0 of 6.
    std::fs::write(&path, config(&upstream, "6/m", "")).unwrap();
    sluice.signal("HUP");
    await_reloads(&sluice, "ok", 1.0).await;

    // No fresh burst for A; B's unchanged bucket still holds exactly 1.
    assert_eq!(statuses(&sluice, "/spend", "a", 1).await, [429]);
    assert_eq!(statuses(&sluice, "/steady", "b", 2).await, [200, 429]);
    // A new caller gets the new limit: 6, not 3.
    assert_eq!(
        statuses(&sluice, "/spend", "c", 7).await,
        [200, 200, 200, 200, 200, 200, 429]
    );
    let limit = get(&sluice.url("/spend"), &[("x-id", "d")]).await;
    assert_eq!(limit.header("x-ratelimit-limit"), Some("6"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_change_keep_leaves_spent_units_spent_and_reset_refills() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(&upstream, "4/m", ""));
    let sluice = SluiceProcess::spawn(&path);
    assert_eq!(statuses(&sluice, "/spend", "a", 2).await, [200, 200]);

    // 4/m → 8/m, keep: 2 spent stay spent, 6 left.
    std::fs::write(&path, config(&upstream, "8/m", "on_change = \"keep\"")).unwrap();
    let answer = send(Method::POST, &sluice.admin_url("/admin/reload"), &[]).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let changes = answer.json()["changes"].to_string();
    assert!(changes.contains("~ spend: 4/m → 8/m"), "{changes}");
    let got = statuses(&sluice, "/spend", "a", 7).await;
    assert_eq!(got.iter().filter(|&&s| s == 200).count(), 6, "{got:?}");

    // 8/m → 3/m, reset: every bucket starts full at the new limit.
    std::fs::write(&path, config(&upstream, "3/m", "on_change = \"reset\"")).unwrap();
    let answer = send(Method::POST, &sluice.admin_url("/admin/reload"), &[]).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(
        statuses(&sluice, "/spend", "a", 4).await,
        [200, 200, 200, 429]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_keeps_the_running_config_and_counts_an_error() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(&upstream, "2/m", ""));
    let sluice = SluiceProcess::spawn(&path);
    assert_eq!(statuses(&sluice, "/spend", "a", 1).await, [200]);

    // A negative rate on line 14: refused with its position.
    let broken = config(&upstream, "-5/m", "");
    std::fs::write(&path, &broken).unwrap();
    let answer = send(Method::POST, &sluice.admin_url("/admin/reload"), &[]).await;
    let body = assert_problem(&answer, StatusCode::UNPROCESSABLE_ENTITY);
    let errors = body["errors"].as_array().expect("an errors list");
    assert_eq!(errors.len(), 1, "{body}");
    let line = broken.lines().position(|l| l.contains("-5/m")).unwrap() + 1;
    let position = format!("sluice.toml:{line}:8:");
    assert!(
        errors[0].as_str().unwrap().contains(&position),
        "expected {position} in {body}"
    );
    await_reloads(&sluice, "error", 1.0).await;
    let text = get(&sluice.admin_url("/metrics"), &[]).await.body;
    assert_eq!(
        metric(&text, r#"sluice_config_reloads_total{result="ok"}"#),
        Some(0.0)
    );

    // The old 2/m still holds: one more, then 429.
    assert_eq!(statuses(&sluice, "/spend", "a", 2).await, [200, 429]);

    // SIGHUP with the same broken file: still refused, still serving.
    sluice.signal("HUP");
    await_reloads(&sluice, "error", 2.0).await;
    assert_eq!(statuses(&sluice, "/steady", "z", 1).await, [200]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_watch_applies_an_atomically_replaced_file_once() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(&upstream, "1/m", ""));
    let sluice = SluiceProcess::spawn(&path);
    assert_eq!(statuses(&sluice, "/spend", "a", 2).await, [200, 429]);

    // 1/m → 3/m: A keeps its share (none), a new caller gets 3.
    replace(&path, &config(&upstream, "3/m", ""));
    await_reloads(&sluice, "ok", 1.0).await;
    assert_eq!(statuses(&sluice, "/spend", "a", 1).await, [429]);
    assert_eq!(
        statuses(&sluice, "/spend", "b", 4).await,
        [200, 200, 200, 429]
    );
    // (That the same content written again is not reloaded, and when a
    // change is read, is the watch's own test on paused time:
    // `reload::tests::watch`.)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_in_pieces_is_never_applied_half_way() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(&upstream, "1/m", ""));
    let sluice = SluiceProcess::spawn(&path);

    // Hostile-input row H4: truncate, then append in two pieces 200 ms apart.
    const BETWEEN_WRITES: Duration = Duration::from_millis(200);
    let full = config(&upstream, "5/m", "");
    let (first, _) = full.split_at(full.len() / 2);
    std::fs::write(&path, "").unwrap();
    tokio::time::sleep(BETWEEN_WRITES).await;
    std::fs::write(&path, first).unwrap();
    tokio::time::sleep(BETWEEN_WRITES).await;
    std::fs::write(&path, &full).unwrap();
    await_reloads(&sluice, "ok", 1.0).await;

    // The watch reads one file at a time, in the order of the writes: had
    // it read a half, that reload's error would be counted by now.
    let text = get(&sluice.admin_url("/metrics"), &[]).await.body;
    // The halves were never read: no error, exactly one successful reload.
    assert_eq!(
        metric(&text, r#"sluice_config_reloads_total{result="error"}"#),
        Some(0.0)
    );
    assert_eq!(
        metric(&text, r#"sluice_config_reloads_total{result="ok"}"#),
        Some(1.0)
    );
    assert_eq!(
        statuses(&sluice, "/spend", "a", 6).await,
        [200, 200, 200, 200, 200, 429]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloading_under_load_fails_no_request() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(&upstream, "1000/s", ""));
    let sluice = SluiceProcess::spawn(&path);
    let stop = Instant::now() + Duration::from_secs(3);

    // Four clients send without pause while the config flips 30 times.
    let mut clients = Vec::new();
    for client in 0..4 {
        let url = sluice.url(if client % 2 == 0 { "/spend" } else { "/steady" });
        clients.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while Instant::now() < stop {
                let id = format!("c{client}");
                seen.push(get(&url, &[("x-id", &id)]).await.status.as_u16());
            }
            seen
        }));
    }
    let mut reloads = 0;
    while Instant::now() < stop && reloads < 30 {
        let rate = if reloads % 2 == 0 { "2000/s" } else { "1000/s" };
        std::fs::write(&path, config(&upstream, rate, "")).unwrap();
        let answer = send(Method::POST, &sluice.admin_url("/admin/reload"), &[]).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        reloads += 1;
        // The flips' pace under test: about 20 a second.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut total = 0;
    for client in clients {
        let seen = client.await.unwrap();
        total += seen.len();
        let failed: Vec<&u16> = seen.iter().filter(|s| ![200, 429].contains(*s)).collect();
        assert!(failed.is_empty(), "failed answers: {failed:?}");
    }
    assert!(reloads >= 10, "only {reloads} reloads");
    assert!(total > 100, "only {total} requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_needs_the_token_when_one_is_set() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(&upstream, "1/m", ""));
    let sluice = SluiceProcess::spawn_with_env(&path, &[("SLUICE_ADMIN_TOKEN", "s3cret")]);
    let url = sluice.admin_url("/admin/reload");

    let none = send(Method::POST, &url, &[]).await;
    assert_problem(&none, StatusCode::UNAUTHORIZED);
    assert!(none
        .header("www-authenticate")
        .unwrap()
        .starts_with("Bearer"));
    let wrong = send(Method::POST, &url, &[("authorization", "Bearer nope")]).await;
    assert_problem(&wrong, StatusCode::UNAUTHORIZED);
    let right = send(Method::POST, &url, &[("authorization", "Bearer s3cret")]).await;
    assert_eq!(right.status, StatusCode::OK, "{}", right.body);
    assert_eq!(right.json()["reloaded"], true);
    // Reading needs it too (tests/e2e/keys_are_secrets.rs has every
    // endpoint).
    let refused = get(&sluice.admin_url("/admin/rules"), &[]).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    let rules = get(
        &sluice.admin_url("/admin/rules"),
        &[("authorization", "Bearer s3cret")],
    )
    .await;
    assert_eq!(rules.status, StatusCode::OK);
    assert_eq!(rules.json()["rules"][0]["name"], "spend");
}

/// SIGHUP is caught from `Server::reload_from` on, before "sluice is
/// serving" is logged: a hangup sent the moment it is (as a config manager
/// that reloads on every change may) reloads, where the signal's default
/// action would end the process. Here the hangup comes before serving even
/// begins, so a regression ends this test process.
#[tokio::test]
async fn a_hangup_before_serving_begins_reloads_and_does_not_stop_sluice() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let text = config(&upstream, "5/m", "");
    let path = write_config(dir.path(), &text);
    let config = sluice::config::Config::from_toml(&text, "sluice.toml").unwrap();
    let mut server = sluice::server::Server::bind(config).await.unwrap();
    server.reload_from(path);
    let admin = server.admin_addr().unwrap();
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));
    // The hangup that came before serving is the reload it asked for.
    let reloads = r#"sluice_config_reloads_total{result="ok"}"#;
    support::eventually(Duration::from_secs(10), "the reload", || async {
        let metrics = send(Method::GET, &format!("http://{admin}/metrics"), &[]).await;
        metric(&metrics.body, reloads) == Some(1.0)
    })
    .await;
    let _ = stop.send(());
    serving.await.unwrap();
}

/// A config file laid out as the kubelet mounts a ConfigMap: the file in a
/// timestamped directory, `..data` a symlink to that directory, and
/// `sluice.toml` a symlink through `..data`.
struct ConfigMapDir {
    dir: tempfile::TempDir,
    generations: u32,
}

impl ConfigMapDir {
    fn new(text: &str) -> ConfigMapDir {
        let mut volume = ConfigMapDir {
            dir: tempfile::tempdir().unwrap(),
            generations: 0,
        };
        let first = volume.write_generation(text);
        std::os::unix::fs::symlink(&first, volume.dir.path().join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/sluice.toml", volume.path()).unwrap();
        volume
    }

    /// What sluice is started with: `DIR/sluice.toml`.
    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("sluice.toml")
    }

    /// A new timestamped directory holding `text`; its name.
    fn write_generation(&mut self, text: &str) -> String {
        self.generations += 1;
        let name = format!("..2026_11_27_08_00_00.{:09}", self.generations);
        std::fs::create_dir(self.dir.path().join(&name)).unwrap();
        std::fs::write(self.dir.path().join(&name).join("sluice.toml"), text).unwrap();
        name
    }

    /// An update as the kubelet's atomic writer makes it: the new
    /// directory, a `..data_tmp` symlink to it renamed over `..data`, the
    /// old directory removed.
    fn swap(&mut self, text: &str) {
        let data = self.dir.path().join("..data");
        let old = std::fs::read_link(&data).unwrap();
        let new = self.write_generation(text);
        let tmp = self.dir.path().join("..data_tmp");
        std::os::unix::fs::symlink(&new, &tmp).unwrap();
        std::fs::rename(&tmp, &data).unwrap();
        std::fs::remove_dir_all(self.dir.path().join(old)).unwrap();
    }
}

/// The `X-RateLimit-Limit` a new caller of `/spend` is answered with.
async fn spend_limit(sluice: &SluiceProcess, caller: usize) -> Option<String> {
    let caller = format!("new-{caller}");
    let got = get(&sluice.url("/spend"), &[("x-id", &caller)]).await;
    got.header("x-ratelimit-limit").map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_map_swapped_as_the_kubelet_does_is_applied_within_2_s_and_a_broken_one_is_not() {
    let upstream = Upstream::start().await;
    let mut volume = ConfigMapDir::new(&config(&upstream, "3/m", ""));
    let sluice = SluiceProcess::spawn(&volume.path());
    assert_eq!(spend_limit(&sluice, 0).await.as_deref(), Some("3"));

    volume.swap(&config(&upstream, "6/m", ""));
    let swapped = Instant::now();
    let mut callers = 1..;
    while spend_limit(&sluice, callers.next().unwrap())
        .await
        .as_deref()
        != Some("6")
    {
        assert!(
            swapped.elapsed() < Duration::from_secs(2),
            "the swapped config was not in force 2 s later"
        );
        // A poll interval while waiting for the new limit, not a wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A broken file swapped in: refused and counted, the running config
    // stays.
    volume.swap(&config(&upstream, "-5/m", ""));
    await_reloads(&sluice, "error", 1.0).await;
    assert_eq!(
        spend_limit(&sluice, callers.next().unwrap())
            .await
            .as_deref(),
        Some("6")
    );
    assert_eq!(statuses(&sluice, "/steady", "z", 1).await, [200]);
    let refused = sluice.logged("config reload refused");
    assert_eq!(refused.len(), 1, "{:?}", sluice.log);
    let text = get(&sluice.admin_url("/metrics"), &[]).await.body;
    assert_eq!(
        metric(&text, r#"sluice_config_reloads_total{result="ok"}"#),
        Some(1.0)
    );
}
