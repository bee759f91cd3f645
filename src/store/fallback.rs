//! The local fallback (`on_error = "local"`): while a shared store fails,
//! each instance decides alone, with the memory store every backend keeps,
//! and enforces its share of every limit ([`Limiter::share`]: the limit
//! divided by the number of instances, rounded up), so that an outage does
//! not multiply the limits by the number of instances
//! (docs/multi-instance.md). What the fallback took is settled there too.

use smallvec::SmallVec;

use super::admission::{Admission, Ask, Asks, Decisions, Receipt, RuleAsk, Settle, INLINE};
use super::{MemoryStore, Store};
use crate::clock::Nanos;
use crate::limiter::Limiter;

impl Store {
    /// Decides `asks` at `now` with the local memory store, at this
    /// instance's share of every limit, into `answer` (as
    /// [`Store::admit`] does). Settle what it took with
    /// [`Store::settle_locally`].
    pub fn admit_locally(&self, asks: &Asks<'_>, now: Nanos, answer: &mut Admission) {
        admit_at_share(self.local(), self.instances(), asks, now, answer, |_| true);
    }

    /// What every limit of `asks` would decide at `now` with the local
    /// memory store, at this instance's share (as [`Store::peek`] does).
    pub fn peek_locally(&self, asks: &Asks<'_>, now: Nanos, decisions: &mut Decisions) {
        let local = self.local();
        at_share(
            self.instances(),
            asks,
            |_| true,
            |asks| local.peek_all(asks, now, decisions),
        );
    }

    /// Settles receipts that [`Store::admit_locally`] took, as `how` says,
    /// at once.
    pub fn settle_locally(&self, receipts: &mut [Receipt], how: Settle, now: Nanos) {
        let local = self.local();
        for receipt in receipts {
            local.settle(receipt, how, now);
        }
    }
}

/// Decides `asks` at `now` with `local`, the limits `shared_out` picks at
/// one of `instances` shares (the others whole), into `answer`. The
/// receipts carry the limiters they were decided with, so they settle
/// locally as they were taken.
pub(super) fn admit_at_share(
    local: &MemoryStore,
    instances: u64,
    asks: &Asks<'_>,
    now: Nanos,
    answer: &mut Admission,
    shared_out: impl Fn(&Limiter) -> bool,
) {
    at_share(instances, asks, shared_out, |asks| {
        local.admit(asks, now, answer)
    });
}

/// Runs `then` on `asks` with the limits `shared_out` picks at one of
/// `instances` shares (the others whole).
fn at_share(
    instances: u64,
    asks: &Asks<'_>,
    shared_out: impl Fn(&Limiter) -> bool,
    then: impl FnOnce(&Asks<'_>),
) {
    if instances <= 1 {
        return then(asks);
    }
    let shares: SmallVec<[Limiter; INLINE]> = asks
        .limits
        .iter()
        .map(|ask| match shared_out(ask.limiter) {
            true => ask.limiter.share(instances),
            false => *ask.limiter,
        })
        .collect();
    let shared = Asks {
        // Rebuilt rather than cloned: the asks borrow the shares, which
        // live shorter than the policy.
        rules: asks
            .rules
            .iter()
            .map(|rule| RuleAsk {
                limits: rule.limits.clone(),
                shadow: rule.shadow,
                bans: rule.bans,
                ban: rule.ban,
                key: rule.key,
            })
            .collect(),
        limits: asks
            .limits
            .iter()
            .zip(&shares)
            .map(|(ask, limiter)| Ask { limiter, ..*ask })
            .collect(),
    };
    then(&shared);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::HoldLimits;
    use crate::store::suite::{concurrency, token_bucket, Limit, T0};
    use crate::store::{RedisSettings, RedisStore};
    use crate::testing::SEC;

    /// A store whose Redis never answers: the fallback decides alone, as
    /// one of three instances.
    fn redis_down() -> Store {
        let settings = RedisSettings {
            urls: vec!["redis://127.0.0.1:1".into()],
            access: Default::default(),
            cluster: false,
            timeout: std::time::Duration::from_millis(10),
            prefix: "fallback".into(),
            instances: 3,
            settle_retry_for: std::time::Duration::from_secs(600),
        };
        Store::Redis(RedisStore::new(settings, 100).expect("a Redis URL"))
    }

    /// Three instances share a limit of 31: deciding alone, each admits its
    /// share, 11 (rounded up), and settles what it took locally.
    #[tokio::test]
    async fn each_instance_enforces_its_share_while_the_shared_store_fails() {
        let store = redis_down();
        let limit = Limit::new(&store, token_bucket(31, 60));
        let mut asks = Asks::default();
        asks.push_rule(1, false, None, [limit.ask(1, 1)]);
        let mut taken = Vec::new();
        for _ in 0..11 {
            let mut answer = Admission::default();
            store.admit_locally(&asks, T0, &mut answer);
            assert!(answer.admitted());
            taken.extend(answer.receipts);
        }
        let mut answer = Admission::default();
        store.admit_locally(&asks, T0, &mut answer);
        assert!(!answer.admitted(), "beyond this instance's share");
        store.settle_locally(&mut taken[..1], Settle::GiveBack, T0);
        let mut answer = Admission::default();
        store.admit_locally(&asks, T0, &mut answer);
        assert!(answer.admitted(), "a unit given back locally");
    }

    /// A reservation decided locally while the shared store fails is
    /// settled there: what its charge did not use comes back to this
    /// instance's share, once.
    #[tokio::test]
    async fn a_reservation_decided_locally_gives_back_locally() {
        let store = redis_down();
        // A share of 10 of 30 an hour.
        let limit = Limit::new(&store, token_bucket(30, 3600));
        let ask = |cost| {
            let mut asks = Asks::default();
            asks.push_rule(1, false, None, [limit.ask(2, cost)]);
            let mut answer = Admission::default();
            store.admit_locally(&asks, T0, &mut answer);
            answer
        };
        let mut reserved = ask(10);
        assert!(reserved.admitted());
        assert!(!ask(1).admitted(), "the share is held");
        // 6 of the 10 were used: 4 come back.
        reserved.receipts[0].units = 4;
        reserved.receipts[0].lent(T0);
        store.settle_locally(&mut reserved.receipts, Settle::GiveBack, T0);
        store.settle_locally(&mut reserved.receipts, Settle::GiveBack, T0);
        assert!(ask(4).admitted());
        assert!(!ask(1).admitted(), "given back once");
    }

    /// A local permit handed to a queued request whose client left at that
    /// moment goes back to the local store, not to Redis, which never
    /// lent it: the next request gets it.
    #[tokio::test]
    async fn a_local_permit_handed_to_an_abandoned_wait_is_given_back_locally() {
        let store = redis_down();
        let limit = Limit::new(&store, concurrency(1));
        let hold = Some(HoldLimits {
            max_wait: 5 * SEC,
            max_queued: 10,
        });
        let mut plain = Asks::default();
        plain.push_rule(1, false, None, [limit.ask(3, 1)]);
        let mut queueing = Asks::default();
        queueing.push_rule(
            1,
            false,
            None,
            [Ask {
                hold,
                ..limit.ask(3, 1)
            }],
        );
        let mut holder = Admission::default();
        store.admit_locally(&plain, T0, &mut holder);
        assert!(holder.admitted());
        let mut waiter = Admission::default();
        store.admit_locally(&queueing, T0, &mut waiter);
        let mut queued = waiter.queued.take().expect("queued for the permit");
        // The holder finishes: its permit is handed to the waiter...
        store.settle_locally(&mut holder.receipts, Settle::Keep, T0);
        // ...whose client leaves before it learns so.
        store.abandon_queue(&mut queued);
        let mut next = Admission::default();
        store.admit_locally(&plain, T0, &mut next);
        assert!(next.admitted(), "the permit was lost");
    }
}
