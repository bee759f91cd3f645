//! The log line of a refused request, against the real binary's stderr: one
//! line per refusal, at most ten a second per rule, the held-back ones
//! counted into the next line, the key shown truncated (with `reveal_keys`,
//! as a key otherwise shows as a short label: tests/e2e/keys_are_secrets.rs).

use crate::support;

use std::time::Duration;

use support::{get, write_config, SluiceProcess, Upstream};

/// The `suppressed=N` field of a log line.
fn suppressed(line: &str) -> u64 {
    let at = line.find("suppressed=").expect("a suppressed field") + "suppressed=".len();
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn refusals_are_logged_ten_a_second_per_rule_and_the_rest_counted() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\nreveal_keys = true\n\
         [[rule]]\nname = \"per-key\"\nkey = [\"header:x-key\"]\nrate = \"1/m\"\n",
        upstream.addr
    );
    let sluice = SluiceProcess::spawn(&write_config(dir.path(), &toml));
    let url = sluice.url("/api");
    let mut refused = 0;
    for _ in 0..40 {
        if get(&url, &[("x-key", "mallory")]).await.status == 429 {
            refused += 1;
        }
    }
    assert_eq!(refused, 39);
    // The gate's window under test (its arithmetic is tested on an
    // injected clock in src/log_gate.rs): past it, the first refusal of
    // the next second reports every line held back before it.
    const NEXT_SECOND: Duration = Duration::from_millis(1_100);
    tokio::time::sleep(NEXT_SECOND).await;
    assert_eq!(get(&url, &[("x-key", "mallory")]).await.status, 429);
    refused += 1;
    let long_key = "k".repeat(300);
    tokio::time::sleep(NEXT_SECOND).await;
    assert_eq!(get(&url, &[("x-key", &long_key)]).await.status, 200);
    assert_eq!(get(&url, &[("x-key", &long_key)]).await.status, 429);
    support::eventually(Duration::from_secs(5), "the long key's line", || async {
        !sluice.logged("kkkk").is_empty()
    })
    .await;

    let lines = sluice.logged("request refused");
    let mallory: Vec<&String> = lines.iter().filter(|l| l.contains("mallory")).collect();
    // 39 refusals within one or two seconds, then one more: at most ten
    // lines a second were written, and every refusal is either a line or
    // counted as suppressed in a later one.
    assert!(mallory.len() <= 21, "{} lines: {mallory:#?}", mallory.len());
    let held_back: u64 = mallory.iter().map(|line| suppressed(line)).sum();
    assert_eq!(mallory.len() as u64 + held_back, refused, "{mallory:#?}");
    let first = mallory[0];
    for field in ["per-key", "limited", "127.0.0.1", "GET", "/api"] {
        assert!(first.contains(field), "{field} missing from {first}");
    }
    // A client's long key is cut, never written whole.
    let long: Vec<&String> = lines.iter().filter(|l| l.contains("kkkk")).collect();
    assert_eq!(long.len(), 1, "{lines:#?}");
    assert!(
        long[0].contains(&format!("{}…", "k".repeat(64))),
        "{}",
        long[0]
    );
    assert!(!long[0].contains(&"k".repeat(65)), "{}", long[0]);
}
