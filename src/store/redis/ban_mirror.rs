//! This instance's ban tables, kept equal to the fleet's board
//! ([`super::BanBoard`]; docs/multi-instance.md, "Bans across instances").
//!
//! The policy registers each rule's ban table as it compiles it
//! ([`BanMirror::watch`]). [`BanMirror::refresh`] reads the board's
//! version and, when it changed, the board, and reconciles every table:
//! bans set elsewhere are copied in, bans lifted elsewhere are lifted. Hybrid
//! mode refreshes with every sync, since its decisions read these tables;
//! strict mode decides in Redis and refreshes every second, so that its
//! local fallback and metrics know the fleet's bans too.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use super::ban_board::BanBoard;
use crate::clock::{Clock, Nanos, ProxyClock};
use crate::store::admission::StoreError;
use crate::store::bans::{BanPolicy, BanTable};
use crate::store::BucketKey;

/// One rule's ban table as the policy registered it.
#[derive(Debug)]
struct Watched {
    rule: Box<str>,
    bans: Weak<BanTable>,
    ban: Option<BanPolicy>,
}

/// A rule's ban table, alive, with its name and `ban`.
#[derive(Debug, Clone)]
pub struct WatchedTable {
    pub rule: Box<str>,
    pub bans: Arc<BanTable>,
    pub ban: Option<BanPolicy>,
}

/// Every rule's ban table, and the board's version they were last made
/// equal to.
#[derive(Debug)]
pub struct BanMirror {
    watched: Mutex<Vec<Watched>>,
    /// The board's version at the last refresh (`None`: it held no ban).
    version: Mutex<Option<String>>,
    /// A table was registered since: the next refresh reads the board
    /// whatever its version.
    stale: AtomicBool,
}

impl Default for BanMirror {
    fn default() -> BanMirror {
        BanMirror {
            watched: Mutex::default(),
            version: Mutex::default(),
            stale: AtomicBool::new(true),
        }
    }
}

impl BanMirror {
    /// Registers the ban table of the rule named `rule` (with its `ban`),
    /// in place of any earlier table of that name (a reload that changed
    /// the rule's key made a new one). The next refresh reads the board
    /// again, so a new table learns the bans in force at once.
    pub fn watch(&self, rule: &str, bans: &Arc<BanTable>, ban: Option<BanPolicy>) {
        let mut watched = lock(&self.watched);
        watched.retain(|table| table.bans.strong_count() > 0 && *table.rule != *rule);
        watched.push(Watched {
            rule: rule.into(),
            bans: Arc::downgrade(bans),
            ban,
        });
        self.stale.store(true, Ordering::Release);
    }

    /// Every registered table still in use.
    pub fn tables(&self) -> Vec<WatchedTable> {
        lock(&self.watched)
            .iter()
            .filter_map(|table| {
                Some(WatchedTable {
                    rule: table.rule.clone(),
                    bans: table.bans.upgrade()?,
                    ban: table.ban,
                })
            })
            .collect()
    }

    /// Makes every table what the board says, if the board changed since
    /// the last refresh: whether it had.
    pub async fn refresh(&self, board: &BanBoard, now: Nanos) -> Result<bool, StoreError> {
        let version = board.version().await?;
        let stale = self.stale.swap(false, Ordering::AcqRel);
        if !stale && *lock(&self.version) == version {
            return Ok(false);
        }
        let listed = match version {
            Some(_) => board
                .list()
                .await
                .inspect_err(|_| self.stale.store(true, Ordering::Release))?,
            None => Vec::new(),
        };
        let mut by_rule: HashMap<&str, Vec<(BucketKey, Nanos, bool)>> = HashMap::new();
        for ban in &listed {
            by_rule.entry(&ban.rule).or_default().push((
                ban.key,
                now.saturating_add(ban.left),
                ban.manual,
            ));
        }
        for table in self.tables() {
            let bans = by_rule.get(&*table.rule).map_or(&[][..], Vec::as_slice);
            table.bans.reconcile(bans, now);
        }
        *lock(&self.version) = version;
        Ok(true)
    }

    /// Refreshes the mirror from `board` every `period` (strict mode),
    /// while the link is up, until the mirror is dropped.
    pub fn refresh_every(
        self: &Arc<BanMirror>,
        board: BanBoard,
        clock: ProxyClock,
        period: std::time::Duration,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mirror = Arc::downgrade(self);
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(mirror) = mirror.upgrade() else {
                    return;
                };
                if board.link().is_up() {
                    if let Err(error) = mirror.refresh(&board, clock.now()).await {
                        tracing::debug!(%error, "the ban board was not read");
                    }
                }
            }
        });
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each update is one assignment: a poisoned lock still guards a
    // consistent value.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
