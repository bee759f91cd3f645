//! Hot reload: SIGHUP, `POST /admin/reload` and changes to the config file
//! on disk all end in [`Reloader::reload`], which reads the file, validates
//! it fully and only then swaps the new policy in ([`Proxy::reload`]). An
//! invalid file keeps the running config, is logged with its line and
//! column, and counts `sluice_config_reloads_total{result="error"}`.
//!
//! The file is watched by polling its metadata (following symlinks, so an
//! atomic rename or a Kubernetes-style `..data` symlink swap is noticed as
//! well as an in-place write). A change is applied only once the file has
//! stayed the same for [`SETTLE`]: a file still being written is never read
//! half-way, and a burst of writes is applied once. Content that is
//! byte-for-byte what was last applied is not reloaded again.
//!
//! Settings that only take effect at start (listen addresses, workers,
//! timeouts of the listener and the upstream client, the store) are kept as
//! they were ([`crate::config::keep_startup_settings`]); a reload that
//! changes them says so in the log.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::config::{joined, Config, ConfigErrors, OnChange, RuleConfig};
use crate::proxy::Proxy;

/// How often the config file's metadata is looked at.
const POLL: Duration = Duration::from_millis(250);

/// How long a changed file must stay unchanged before it is read.
pub const SETTLE: Duration = Duration::from_millis(500);

/// What asked for a reload (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    Signal,
    Admin,
    FileChanged,
}

impl Trigger {
    /// How the log and the status page name it.
    pub fn name(self) -> &'static str {
        match self {
            Trigger::Signal => "SIGHUP",
            Trigger::Admin => "POST /admin/reload",
            Trigger::FileChanged => "config file changed",
        }
    }
}

/// What a successful reload did.
#[derive(Debug, Clone)]
pub struct Applied {
    /// How each rule's buckets fared.
    pub changes: Vec<RuleChange>,
    /// Settings that changed in the file but need a restart.
    pub needs_restart: Vec<&'static str>,
}

/// Reloads one proxy from one config file.
#[derive(Debug)]
pub struct Reloader {
    path: PathBuf,
    proxy: Proxy,
    /// Hash of the content last applied (or refused), so the watcher does
    /// not reload what it has already seen.
    last_content: Mutex<Option<u64>>,
    /// Serialises reloads from the three triggers.
    running: tokio::sync::Mutex<()>,
    /// The config generation and the last reload, for the status page.
    history: Mutex<History>,
}

/// The reloads so far, as the status page shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct History {
    /// 1 for the config sluice started with, one more per reload applied
    /// (a refused reload keeps the generation running).
    pub generation: u64,
    /// The latest reload, applied or refused; `None` before the first.
    pub last: Option<LastReload>,
}

/// One reload, as the status page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastReload {
    pub at: SystemTime,
    pub trigger: Trigger,
    /// `Err` holds the errors as `sluice check` prints them.
    pub result: Result<(), String>,
}

impl Default for History {
    fn default() -> History {
        History {
            generation: 1,
            last: None,
        }
    }
}

impl Reloader {
    /// A reloader for `proxy`, whose running config was read from `path`.
    pub fn new(path: PathBuf, proxy: Proxy) -> Arc<Reloader> {
        let last = std::fs::read(&path).ok().map(|bytes| content_hash(&bytes));
        Arc::new(Reloader {
            path,
            proxy,
            last_content: Mutex::new(last),
            running: tokio::sync::Mutex::new(()),
            history: Mutex::new(History::default()),
        })
    }

    /// The config generation and the last reload.
    pub fn history(&self) -> History {
        lock(&self.history).clone()
    }

    /// Notes a reload's result in [`Reloader::history`].
    fn record(&self, trigger: Trigger, result: Result<(), String>) {
        let mut history = lock(&self.history);
        if result.is_ok() {
            history.generation += 1;
        }
        history.last = Some(LastReload {
            at: SystemTime::now(),
            trigger,
            result,
        });
    }

    /// The config file reloaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads and validates the file and, if it is valid, applies it. On
    /// error the running config stays; the errors are logged and returned.
    pub async fn reload(&self, trigger: Trigger) -> Result<Applied, ConfigErrors> {
        let _one_at_a_time = self.running.lock().await;
        let path = self.path.clone();
        let proxy = self.proxy.clone();
        // Reading, validating (key files) and carrying buckets over are
        // blocking work.
        let outcome = tokio::task::spawn_blocking(move || {
            let bytes = std::fs::read(&path);
            let hash = bytes.as_ref().ok().map(|b| content_hash(b));
            let result = match Config::load(&path) {
                Ok(config) => {
                    let old = proxy.policy();
                    let changes = diff(&old.config, &config);
                    let warnings = config.warnings.clone();
                    let needs_restart = proxy.reload(config);
                    Ok((
                        Applied {
                            changes,
                            needs_restart,
                        },
                        warnings,
                    ))
                }
                Err(errors) => {
                    proxy.reload_failed();
                    proxy.reopen_access_log();
                    Err(errors)
                }
            };
            (hash, result)
        })
        .await;
        let (hash, result) = match outcome {
            Ok(outcome) => outcome,
            Err(panicked) => {
                // Validation never panics on any input (fuzzed); should it,
                // the running config stays and the proxy keeps serving.
                self.proxy.reload_failed();
                tracing::error!(error = %panicked, "config reload failed unexpectedly");
                let errors = ConfigErrors::io(
                    &self.path.display().to_string(),
                    std::io::Error::other("reload failed unexpectedly"),
                );
                self.record(trigger, Err(errors.to_string()));
                return Err(errors);
            }
        };
        *lock(&self.last_content) = hash;
        match result {
            Ok((applied, warnings)) => {
                self.record(trigger, Ok(()));
                tracing::info!(trigger = trigger.name(), "config reloaded");
                for change in &applied.changes {
                    tracing::info!("reload: {change}");
                }
                for warning in warnings {
                    tracing::warn!("{warning}");
                }
                if !applied.needs_restart.is_empty() {
                    tracing::warn!(
                        settings = applied.needs_restart.join(", "),
                        "these settings changed in the file but only take effect after a restart"
                    );
                }
                Ok(applied)
            }
            Err(errors) => {
                self.record(trigger, Err(errors.to_string()));
                tracing::error!(
                    trigger = trigger.name(),
                    "config reload refused; the running config stays:\n{errors}"
                );
                Err(errors)
            }
        }
    }

    /// Watches the file and reloads when it changed and settled. Runs until
    /// the task is dropped.
    pub async fn watch(self: Arc<Self>) {
        let mut seen = Fingerprint::of(&self.path);
        let mut changed_at: Option<tokio::time::Instant> = None;
        let mut interval = tokio::time::interval(POLL);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let now = Fingerprint::of(&self.path);
            if now != seen {
                seen = now;
                changed_at = Some(tokio::time::Instant::now());
                continue;
            }
            let Some(since) = changed_at else { continue };
            if since.elapsed() < SETTLE {
                continue;
            }
            changed_at = None;
            let Ok(bytes) = tokio::fs::read(&self.path).await else {
                // Gone or unreadable (mid-swap): wait for the next change.
                continue;
            };
            let hash = content_hash(&bytes);
            if *lock(&self.last_content) == Some(hash) {
                continue;
            }
            let _ = self.reload(Trigger::FileChanged).await;
        }
    }
}

/// What the watcher compares between polls: the file's identity, size and
/// modification time, after following symlinks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(Option<(u64, u64, u64, Option<SystemTime>)>);

impl Fingerprint {
    pub fn of(path: &Path) -> Fingerprint {
        use std::os::unix::fs::MetadataExt;
        Fingerprint(
            std::fs::metadata(path)
                .ok()
                .map(|m| (m.dev(), m.ino(), m.len(), m.modified().ok())),
        )
    }
}

/// The lock's value, also after a panic while it was held (the value is
/// replaced whole, never left half-written).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn content_hash(bytes: &[u8]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

/// What a reload from one config to another does to one rule's buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleChange {
    /// Same rule, same limits: buckets kept as they are.
    Unchanged {
        rule: String,
    },
    /// Same name, key and algorithm, other limits: buckets kept and
    /// rescaled (or reset) as `on_change` says.
    LimitsChanged {
        rule: String,
        from: String,
        to: String,
        on_change: OnChange,
    },
    /// Name kept but key or algorithm changed: new buckets.
    Replaced {
        rule: String,
        why: String,
    },
    Added {
        rule: String,
    },
    Removed {
        rule: String,
    },
}

impl std::fmt::Display for RuleChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuleChange::Unchanged { rule } => write!(f, "= {rule}: unchanged; buckets kept"),
            RuleChange::LimitsChanged {
                rule,
                from,
                to,
                on_change,
            } => {
                let what = match on_change {
                    OnChange::Keep => "buckets kept, units already spent stay spent (on_change = \"keep\")",
                    OnChange::Proportional => {
                        "buckets kept, each keeps its remaining share (on_change = \"proportional\")"
                    }
                    OnChange::Reset => "every bucket starts full (on_change = \"reset\")",
                };
                write!(f, "~ {rule}: {from} → {to}; {what}")
            }
            RuleChange::Replaced { rule, why } => {
                write!(f, "! {rule}: {why}; every bucket starts full")
            }
            RuleChange::Added { rule } => write!(f, "+ {rule}: new rule; buckets start full"),
            RuleChange::Removed { rule } => write!(f, "- {rule}: removed; its buckets are dropped"),
        }
    }
}

/// How a reload from `old` to `new` treats each rule's buckets, new rules
/// in file order then removed ones (the same matching the policy uses: a
/// rule keeps its buckets when its name, key and algorithm are unchanged).
pub fn diff(old: &Config, new: &Config) -> Vec<RuleChange> {
    let mut changes: Vec<RuleChange> = new
        .rules
        .iter()
        .map(|rule| {
            let name = rule.name.clone();
            let Some(before) = old.rules.iter().find(|o| o.name == rule.name) else {
                return RuleChange::Added { rule: name };
            };
            let (old_key, new_key) = (joined(&before.key, "+"), joined(&rule.key, "+"));
            let (was, is) = (before.algorithm.name(), rule.algorithm.name());
            let why = if before.key != rule.key {
                format!("key changed ({old_key} → {new_key})")
            } else if before.algorithm != rule.algorithm {
                format!("algorithm changed ({was} → {is})")
            } else {
                String::new()
            };
            if !why.is_empty() {
                return RuleChange::Replaced { rule: name, why };
            }
            let (from, to) = (limits_text(before), limits_text(rule));
            if from == to && before.overrides == rule.overrides {
                RuleChange::Unchanged { rule: name }
            } else {
                RuleChange::LimitsChanged {
                    rule: name,
                    from,
                    to,
                    on_change: rule.on_change,
                }
            }
        })
        .collect();
    changes.extend(
        old.rules
            .iter()
            .filter(|o| !new.rules.iter().any(|n| n.name == o.name))
            .map(|o| RuleChange::Removed {
                rule: o.name.clone(),
            }),
    );
    changes
}

/// A rule's limits as `check` shows them, with capacities and any tiers,
/// overrides or sunset (all of which change what its buckets hold).
fn limits_text(rule: &RuleConfig) -> String {
    let mut text = crate::config::describe_limits(rule);
    if rule
        .limits
        .iter()
        .any(|limit| limit.capacity != limit.rate.count)
    {
        let capacities = crate::config::describe_capacity(rule);
        text.push_str(&format!(" (capacity {capacities})"));
    }
    if let Some(tiers) = &rule.tiers {
        text.push_str(&format!(" tiers by {}: {:?}", tiers.by, tiers.tiers));
    }
    if !rule.overrides.is_empty() {
        // A key with a caller's credential in it is shown elided
        // (docs/operations.md, "Keys in logs and admin views").
        let each: Vec<String> = rule
            .overrides
            .iter()
            .map(|o| {
                let name = crate::key::label::elided_override(&rule.key, &o.name)
                    .unwrap_or_else(|| o.name.clone());
                format!("{name:?} {:?}", o.limits)
            })
            .collect();
        text.push_str(&format!(" overrides [{}]", each.join(", ")));
    }
    if let Some(sunset) = &rule.sunset {
        text.push_str(&format!(" sunset {sunset:?}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(rules: &str) -> Config {
        let text = format!("[server]\nupstream = \"http://127.0.0.1:3000\"\n{rules}");
        Config::from_toml(&text, "test.toml").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_diff_names_what_happens_to_each_rule() {
        let old = config(
            r#"
[[rule]]
name = "same"
rate = "10/s"
[[rule]]
name = "raised"
rate = "4/h"
[[rule]]
name = "rekeyed"
rate = "1/s"
[[rule]]
name = "gone"
rate = "1/s"
"#,
        );
        let new = config(
            r#"
[[rule]]
name = "same"
rate = "10/s"
[[rule]]
name = "raised"
rate = "8/h"
on_change = "keep"
[[rule]]
name = "rekeyed"
rate = "1/s"
key = ["header:x-api-key"]
[[rule]]
name = "fresh"
rate = "1/s"
"#,
        );
        let lines: Vec<String> = diff(&old, &new).iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "= same: unchanged; buckets kept",
                "~ raised: 4/h → 8/h; buckets kept, units already spent stay spent (on_change = \"keep\")",
                "! rekeyed: key changed (ip → header:x-api-key); every bucket starts full",
                "+ fresh: new rule; buckets start full",
                "- gone: removed; its buckets are dropped",
            ]
        );
    }

    /// The file watch on paused time: `POLL` and `SETTLE` are exact.
    mod watch {
        use super::*;

        const TEXT: &str = "[server]\nupstream = \"http://127.0.0.1:3000\"\n";

        fn text(rate: &str) -> String {
            format!("{TEXT}[[rule]]\nname = \"r\"\nrate = \"{rate}\"\n")
        }

        /// A watcher of a config file holding `rate`, started at a poll.
        async fn watching(rate: &str) -> (tempfile::TempDir, PathBuf, Arc<Reloader>) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("sluice.toml");
            std::fs::write(&path, text(rate)).unwrap();
            let config = Config::from_toml(&text(rate), "sluice.toml").unwrap();
            let reloader = Reloader::new(path.clone(), Proxy::new(config));
            tokio::spawn(reloader.clone().watch());
            // The watch's first poll, at once.
            tokio::task::yield_now().await;
            (dir, path, reloader)
        }

        /// Waits, without time moving, until a reload has run to
        /// `generation` (its read of the file is on a blocking thread).
        async fn until_generation(reloader: &Reloader, generation: u64) {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while reloader.history().generation != generation {
                assert!(
                    std::time::Instant::now() < deadline,
                    "never generation {generation}"
                );
                tokio::task::yield_now().await;
            }
        }

        /// Lets `span` of paused time pass, poll by poll.
        async fn pass(span: Duration) {
            tokio::time::sleep(span).await;
        }

        #[tokio::test(start_paused = true)]
        async fn a_changed_file_is_applied_once_it_has_settled() {
            let (_dir, path, reloader) = watching("1/m").await;
            std::fs::write(&path, text("3/m")).unwrap();
            // Seen at the next poll (250 ms), read once it stayed the same
            // for 500 ms: at the poll of 750 ms.
            pass(POLL * 3 - Duration::from_millis(1)).await;
            assert_eq!(reloader.history().generation, 1, "read before it settled");
            pass(Duration::from_millis(1)).await;
            until_generation(&reloader, 2).await;
            let last = reloader.history().last.unwrap();
            assert_eq!(last.trigger, Trigger::FileChanged);
            assert_eq!(last.result, Ok(()));
        }

        #[tokio::test(start_paused = true)]
        async fn a_file_written_in_pieces_is_read_once_whole() {
            let (_dir, path, reloader) = watching("1/m").await;
            let whole = text("5/m");
            let (half, _) = whole.split_at(whole.len() / 2);
            // Truncated, then written in two pieces 400 ms apart: each
            // write restarts the settling, so no piece is read.
            std::fs::write(&path, "").unwrap();
            pass(Duration::from_millis(400)).await;
            std::fs::write(&path, half).unwrap();
            pass(Duration::from_millis(400)).await;
            assert_eq!(reloader.history().last, None, "a piece was read");
            std::fs::write(&path, &whole).unwrap();
            pass(Duration::from_secs(5)).await;
            until_generation(&reloader, 2).await;
            let history = reloader.history();
            assert_eq!(history.generation, 2, "applied more than once");
            assert_eq!(history.last.unwrap().result, Ok(()), "a piece was read");
        }

        #[tokio::test(start_paused = true)]
        async fn the_same_content_written_again_is_not_reloaded() {
            let (_dir, path, reloader) = watching("1/m").await;
            std::fs::write(&path, text("3/m")).unwrap();
            pass(Duration::from_secs(1)).await;
            until_generation(&reloader, 2).await;
            let applied = reloader.history().last.unwrap().at;
            // A new file with the same bytes: a change to look at, nothing
            // to apply.
            let fresh = path.with_extension("new");
            std::fs::write(&fresh, text("3/m")).unwrap();
            std::fs::rename(&fresh, &path).unwrap();
            pass(Duration::from_secs(5)).await;
            let history = reloader.history();
            assert_eq!(history.generation, 2);
            assert_eq!(history.last.unwrap().at, applied, "reloaded again");
        }
    }
}
