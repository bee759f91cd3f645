//! The status page in a real browser: headless Chromium loads `GET /` from a
//! sluice under traffic, runs the page's script (which polls
//! `/admin/status` and redraws), and the test reads the DOM it dumps: the
//! rules, rates that move between two loads, the top key escaped. It keeps
//! screenshots at `target/status-page.png` (laptop) and
//! `target/status-page-phone.png` (phone) to look at. With an admin token
//! set, the page opens with Basic credentials, as a person's browser sends
//! them after its login prompt, and its polls carry them.
//!
//! Skipped, loudly, when Chromium is not installed (`.ci/run` installs it).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{get, start, write_config, SluiceProcess, Upstream};

const HOSTILE: &str = "<script>alert(1)</script>";

/// Keys shown in clear, so that the page's escaping of a client's text is
/// seen (a label shows only a key's first characters).
const REVEAL: &str = "[admin]\nreveal_keys = true\n";

const RULES: &str = r#"
[[rule]]
name = "per-key"
key = ["header:x-key"]
rate = "4/s"

[[rule]]
name = "everyone"
key = ["global"]
rate = "10000/m"
"#;

/// The longest one Chromium run may take before it is killed.
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(60);

/// Debian's headless Chromium, or `None` after saying the test is skipped.
fn chromium(test: &str) -> Option<PathBuf> {
    crate::support::optional_tool(test, &["chromium", "chromium-browser"], "chromium")
}

/// Runs headless Chromium with `args` (after the flags every run needs and
/// a fresh profile), at most [`CHROMIUM_TIMEOUT`]; its stdout.
async fn run_chromium(binary: PathBuf, args: Vec<String>) -> String {
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        use std::os::unix::process::CommandExt;
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new(&binary)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            // Its own process group, so that a hung run is killed with
            // every helper process it started (renderer, zygote, ...).
            .process_group(0)
            .spawn()
            .expect("start chromium");
        let mut stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut out = String::new();
            let _ = stdout.read_to_string(&mut out);
            out
        });
        let deadline = Instant::now() + CHROMIUM_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() >= deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if status.is_none() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            panic!("chromium did not finish within {CHROMIUM_TIMEOUT:?}: {args:?}");
        }
        reader.join().unwrap()
    })
    .await
    .unwrap()
}

/// The rendered DOM of `url` once the page's scripts ran for a few
/// (virtual) seconds.
async fn dump_dom(binary: &Path, url: &str) -> String {
    run_chromium(
        binary.to_owned(),
        vec![
            "--virtual-time-budget=5000".into(),
            "--dump-dom".into(),
            url.into(),
        ],
    )
    .await
}

async fn screenshot(binary: &Path, url: &str, path: &Path, size: &str, scale: &str, dark: bool) {
    let _ = std::fs::remove_file(path);
    let mut args = vec![
        "--virtual-time-budget=3000".into(),
        format!("--window-size={size}"),
        format!("--force-device-scale-factor={scale}"),
        format!("--screenshot={}", path.display()),
    ];
    if dark {
        // prefers-color-scheme: dark.
        args.push("--force-dark-mode".into());
    }
    args.push(url.into());
    run_chromium(binary.to_owned(), args).await;
    let png = std::fs::read(path).unwrap_or_else(|e| panic!("no screenshot {path:?}: {e}"));
    assert!(png.starts_with(b"\x89PNG"), "{path:?} is not a PNG");
    assert!(png.len() > 10_000, "{path:?} is suspiciously small");
}

/// The number in the cell `key` of the row of `rule` in the dumped DOM.
fn cell(dom: &str, rule: &str, key: &str) -> f64 {
    let row = dom
        .find(&format!("<tr data-rule=\"{rule}\">"))
        .unwrap_or_else(|| panic!("no row for {rule} in:\n{dom}"));
    let row = &dom[row..];
    let row = &row[..row.find("</tr>").unwrap()];
    let marker = format!("data-k=\"{key}\">");
    let at = row
        .find(&marker)
        .unwrap_or_else(|| panic!("no {key} in {row}"))
        + marker.len();
    let text = &row[at..at + row[at..].find('<').unwrap()];
    text.parse()
        .unwrap_or_else(|_| panic!("{key} of {rule}: {text:?}"))
}

/// How many times the page's script redrew the page (its `data-polls`).
fn polls(dom: &str) -> u32 {
    let at = dom.find("data-polls=\"").expect("data-polls") + "data-polls=\"".len();
    dom[at..at + dom[at..].find('"').unwrap()].parse().unwrap()
}

/// Keeps sending requests, more each second, as three callers: `alice`,
/// `bob` and a caller whose key is markup. Each is held to 4/s, so some
/// are limited.
fn traffic(url: String, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let started = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let burst = 1 + started.elapsed().as_secs() as usize;
            for key in ["alice", "bob", HOSTILE] {
                for _ in 0..burst {
                    get(&url, &[("x-key", key)]).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// `/admin/status`, read as the page reads it.
async fn status(admin: std::net::SocketAddr, token: Option<&str>) -> serde_json::Value {
    let bearer = token.map(|token| format!("Bearer {token}"));
    let headers: Vec<(&str, &str)> = bearer
        .iter()
        .map(|value| ("authorization", value.as_str()))
        .collect();
    get(&format!("http://{admin}/admin/status"), &headers)
        .await
        .json()
}

/// The current rates per second in `status`, as (`"rule rate"`, value).
fn rates(status: &serde_json::Value) -> Vec<(String, f64)> {
    let mut rates = Vec::new();
    for rule in status["rules"].as_array().unwrap() {
        for (name, value) in rule["rates_per_sec"].as_object().unwrap() {
            let series = format!("{} {name}", rule["name"].as_str().unwrap());
            // null until the sampler has two readings.
            rates.push((series, value.as_f64().unwrap_or(0.0)));
        }
    }
    rates
}

/// The rate `series` (`"rule rate"`) in `rates`.
fn rate(rates: &[(String, f64)], series: &str) -> f64 {
    rates.iter().find(|(s, _)| s == series).unwrap().1
}

/// Polls `/admin/status` until its rates are non-zero for every one of
/// `series` and every rule's history has the two readings a sparkline
/// needs: the sampler (one reading a second) has seen the traffic the page
/// is to show.
async fn until_rates(admin: std::net::SocketAddr, token: Option<&str>, series: &[&str]) {
    let mut last = serde_json::Value::Null;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        last = status(admin, token).await;
        let now = rates(&last);
        let drawn = last["rules"].as_array().unwrap().iter().all(|rule| {
            rule["history"]["admitted"]
                .as_array()
                .is_some_and(|history| history.len() >= 2)
        });
        if drawn && series.iter().all(|name| rate(&now, name) > 0.0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the status never showed {series:?}: {last}");
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_redraws_live_rates_in_a_real_browser_and_looks_right() {
    let Some(binary) =
        chromium("status_browser::the_page_redraws_live_rates_in_a_real_browser_and_looks_right")
    else {
        return;
    };
    let (_upstream, sluice) = start(&format!("{REVEAL}{RULES}")).await;
    let page = format!("http://{}/", sluice.admin);
    // The sampler reads before the first answer, so the rates count all
    // the traffic below.
    get(&format!("http://{}/admin/status", sluice.admin), &[]).await;
    let stop = Arc::new(AtomicBool::new(false));
    let sender = traffic(sluice.url("/api"), Arc::clone(&stop));
    let shown = ["per-key admitted", "per-key limited", "everyone admitted"];
    until_rates(sluice.admin, None, &shown).await;

    let first = dump_dom(&binary, &page).await;
    assert!(polls(&first) >= 1, "the script never redrew:\n{first}");
    assert!(first.contains("class=\"live on\""), "{first}");
    for rule in ["per-key", "everyone"] {
        assert!(cell(&first, rule, "admitted") > 0.0, "{rule}:\n{first}");
    }
    assert!(cell(&first, "per-key", "limited") > 0.0, "{first}");
    // The caller whose key is markup is listed as text, never as markup.
    assert!(
        first.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{first}"
    );
    assert!(
        !first.contains(HOSTILE),
        "the key reached the DOM as markup"
    );
    assert!(
        first.contains(">alice<") || first.contains(">bob<"),
        "{first}"
    );
    assert!(
        first.contains("<polyline class=\"a\" points=\"0.0,"),
        "{first}"
    );

    // The traffic grows each second: once the sampler's rates differ from
    // what the page showed, a second load shows them.
    let rates_of = |dom: &str| {
        [
            cell(dom, "per-key", "admitted"),
            cell(dom, "per-key", "limited"),
            cell(dom, "everyone", "admitted"),
        ]
    };
    let shown = rates_of(&first);
    support::eventually(Duration::from_secs(10), "the rates never moved", || async {
        let now = rates(&status(sluice.admin, None).await);
        [
            rate(&now, "per-key admitted"),
            rate(&now, "per-key limited"),
            rate(&now, "everyone admitted"),
        ] != shown
    })
    .await;
    let second = dump_dom(&binary, &page).await;
    assert!(polls(&second) >= 1, "{second}");
    assert_ne!(
        rates_of(&first),
        rates_of(&second),
        "the rates did not move under changing traffic"
    );
    for (rule, key) in [("per-key", "admitted"), ("per-key", "limited")] {
        assert!(cell(&second, rule, key) > 0.0, "{rule} {key}:\n{second}");
    }

    let target = target_dir();
    std::fs::create_dir_all(&target).unwrap();
    let laptop = target.join("status-page.png");
    let phone = target.join("status-page-phone.png");
    screenshot(&binary, &page, &laptop, "1280,900", "1", false).await;
    screenshot(&binary, &page, &phone, "390,844", "2", false).await;
    // The same page as a system in dark mode sees it.
    let dark = target.join("status-page-dark.png");
    screenshot(&binary, &page, &dark, "1280,900", "1", true).await;
    eprintln!("status page screenshots: {laptop:?}, {phone:?}, {dark:?}");

    stop.store(true, Ordering::Relaxed);
    sender.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_page_opens_with_basic_credentials_and_keeps_polling() {
    let Some(binary) = chromium(
        "status_browser::with_a_token_the_page_opens_with_basic_credentials_and_keeps_polling",
    ) else {
        return;
    };
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n{RULES}",
        upstream.addr
    );
    let path = write_config(dir.path(), &config);
    let token = "browser-t0ken";
    let sluice = SluiceProcess::spawn_with_env(&path, &[("SLUICE_ADMIN_TOKEN", token)]);
    let stop = Arc::new(AtomicBool::new(false));
    let sender = traffic(sluice.url("/api"), Arc::clone(&stop));
    until_rates(sluice.admin, Some(token), &["per-key limited"]).await;

    // Without credentials: the 401's problem document, no page.
    let refused = dump_dom(&binary, &format!("http://{}/", sluice.admin)).await;
    assert!(!refused.contains("data-polls"), "{refused}");
    // With them (written in the URL, as the browser then holds them for the
    // origin): the page, redrawn by its polls, the callers' keys as labels.
    let dom = dump_dom(&binary, &format!("http://admin:{token}@{}/", sluice.admin)).await;
    assert!(polls(&dom) >= 1, "the script never redrew:\n{dom}");
    assert!(dom.contains("class=\"live on\""), "{dom}");
    assert!(cell(&dom, "per-key", "limited") > 0.0, "{dom}");
    assert!(dom.contains("a…#") || dom.contains("…#"), "{dom}");
    assert!(!dom.contains("alice") && !dom.contains(">bob<"), "{dom}");
    stop.store(true, Ordering::Relaxed);
    sender.await.unwrap();
}
