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
//! A caller's strikes one round could not send are lost to the others
//! (this instance still counted them).

use super::HybridStore;
use crate::clock::Clock;
use crate::store::admission::StoreError;
use crate::store::redis::{Posted, Struck};

/// Keys whose strikes go in one call (one Redis): as a spend's chunk, a
/// script call holds Redis for its whole run.
const CHUNK: usize = 256;

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
    /// copies the bans in force there: the calls made.
    async fn send_strikes(&self, clock: &impl Clock) -> Result<u64, StoreError> {
        let shared = self.shared();
        let mut calls = 0;
        for table in shared.mirror().tables() {
            let Some(ban) = table.ban else {
                continue;
            };
            let struck: Vec<Struck<'_>> = table
                .bans
                .take_strikes()
                .into_iter()
                .map(|(key, strikes)| Struck {
                    rule: &table.rule,
                    key,
                    ban,
                    strikes,
                })
                .collect();
            // A Cluster keeps a call to one caller's slot.
            let chunk = if shared.link().is_cluster() { 1 } else { CHUNK };
            for part in struck.chunks(chunk) {
                let answers = shared.strike(part).await?;
                calls += 1;
                let now = clock.now();
                for (one, (lasts, started)) in part.iter().zip(answers) {
                    let Some(lasts) = lasts else {
                        continue;
                    };
                    table.bans.mirror(one.key, now, now.saturating_add(lasts));
                    if started {
                        shared
                            .board()
                            .post(one.rule, one.key, Posted::Earned(lasts), None)
                            .await?;
                        calls += 2;
                    }
                }
            }
        }
        Ok(calls)
    }
}
