//! Hybrid mode's bans (docs/multi-instance.md, "Bans across instances"),
//! followed by every sync after its deltas:
//!
//! - the strikes each rule's ban table counted since the last sync are
//!   added up in Redis, in each caller's ban key, where the fleet's
//!   `after`-th strike within `within` starts the ban (as strict mode
//!   counts them). A ban in force there is copied into this instance's
//!   table at once; one these strikes started is posted on the board.
//!   (Each instance also bans on its own count, as memory mode does: a
//!   ban is never later than on one instance alone.)
//! - the board's version is read (every round, so an idle instance still
//!   proves Redis answers), and the board when it changed: bans set or
//!   lifted through any instance reach this one within one interval.
//!
//! Strikes a round could not send, and a ban it could not list, wait for
//! the next round.

use std::sync::{Mutex, MutexGuard, PoisonError};

use super::sync::CHUNK;
use super::HybridStore;
use crate::clock::{Clock, Nanos};
use crate::store::admission::StoreError;
use crate::store::redis::{Posted, Struck};
use crate::store::BucketKey;

impl HybridStore {
    /// The strikes and the board, after a round's deltas: the calls made.
    pub(super) async fn follow_bans(&self, clock: &impl Clock) -> Result<u64, StoreError> {
        let mut calls = self.send_strikes(clock).await?;
        let shared = self.shared();
        shared.mirror().refresh(shared.board(), clock.now()).await?;
        calls += 1;
        Ok(calls)
    }

    /// Adds up in Redis the strikes counted since the last round, and
    /// copies the bans in force there: the calls made. Strikes a failed
    /// call did not count go back to their table for the next round; a ban
    /// they started that could not be listed on the board is listed with
    /// the next round.
    async fn send_strikes(&self, clock: &impl Clock) -> Result<u64, StoreError> {
        let shared = self.shared();
        let mut calls = self.list_unlisted(clock).await?;
        for table in shared.mirror().tables() {
            let Some(ban) = table.ban else {
                continue;
            };
            let taken = table.bans.take_strikes();
            let struck: Vec<Struck<'_>> = taken
                .iter()
                .map(|&(key, strikes)| Struck {
                    rule: &table.rule,
                    key,
                    ban,
                    strikes,
                })
                .collect();
            // A Cluster keeps a call to one caller's slot.
            let chunk = if shared.link().is_cluster() { 1 } else { CHUNK };
            for (number, part) in struck.chunks(chunk).enumerate() {
                let answers = match shared.strike(part).await {
                    Ok(answers) => answers,
                    Err(error) => {
                        table.bans.restore_strikes(&taken[number * chunk..]);
                        return Err(error);
                    }
                };
                calls += 1;
                let now = clock.now();
                for (one, (lasts, started)) in part.iter().zip(answers) {
                    let Some(lasts) = lasts else {
                        continue;
                    };
                    let until = now.saturating_add(lasts);
                    table.bans.mirror(one.key, now, until);
                    if started {
                        calls += 1;
                        let listed = Posted::Listed(lasts);
                        if shared
                            .board()
                            .post(one.rule, one.key, listed, None)
                            .await
                            .is_err()
                        {
                            lock(&self.unlisted).push((table.rule.clone(), one.key, until));
                        }
                    }
                }
            }
        }
        Ok(calls)
    }

    /// Lists on the board the bans an earlier round's strikes started and
    /// could not list: the calls made.
    async fn list_unlisted(&self, clock: &impl Clock) -> Result<u64, StoreError> {
        let waiting = std::mem::take(&mut *lock(&self.unlisted));
        let mut calls = 0;
        for (at, (rule, key, until)) in waiting.iter().enumerate() {
            let left = until.saturating_sub(clock.now());
            if left == 0 {
                continue;
            }
            calls += 1;
            let listed = self
                .shared()
                .board()
                .post(rule, *key, Posted::Listed(left), None);
            if let Err(error) = listed.await {
                lock(&self.unlisted).extend_from_slice(&waiting[at..]);
                return Err(error);
            }
        }
        Ok(calls)
    }
}

/// Bans whose board entry waits, as `(rule, key, until)`.
pub(super) type Unlisted = Mutex<Vec<(Box<str>, BucketKey, Nanos)>>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each update is one push or take: a poisoned lock still guards a
    // consistent list.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
