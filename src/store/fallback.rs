//! The local fallback (`on_error = "local"`): while a shared store fails,
//! each instance decides alone, with the memory store every backend keeps,
//! and enforces its share of every limit ([`Limiter::share`]: the limit
//! divided by the number of instances, rounded up), so that an outage does
//! not multiply the limits by the number of instances
//! (docs/multi-instance.md). What the fallback took is settled there too.

use smallvec::SmallVec;

use super::admission::{Admission, Ask, Asks, Receipt, RuleAsk, Settle, INLINE};
use super::Store;
use crate::clock::Nanos;
use crate::limiter::Limiter;

impl Store {
    /// Decides `asks` at `now` with the local memory store, at this
    /// instance's share of every limit, into `answer` (as
    /// [`Store::admit`] does). Settle what it took with
    /// [`Store::settle_locally`].
    pub fn admit_locally(&self, asks: &Asks<'_>, now: Nanos, answer: &mut Admission) {
        let instances = self.instances();
        if instances <= 1 {
            return self.local().admit(asks, now, answer);
        }
        let shares: SmallVec<[Limiter; INLINE]> = asks
            .limits
            .iter()
            .map(|ask| ask.limiter.share(instances))
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
        self.local().admit(&shared, now, answer);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::suite::{token_bucket, Limit, T0};
    use crate::store::{RedisSettings, RedisStore};

    /// Three instances share a limit of 31: deciding alone, each admits its
    /// share, 11 (rounded up), and settles what it took locally.
    #[tokio::test]
    async fn each_instance_enforces_its_share_while_the_shared_store_fails() {
        let settings = RedisSettings {
            // Never connected: the fallback decides without Redis.
            urls: vec!["redis://127.0.0.1:1".into()],
            cluster: false,
            timeout: std::time::Duration::from_millis(10),
            prefix: "fallback".into(),
            instances: 3,
        };
        let store = Store::Redis(RedisStore::new(settings, 100).expect("a Redis URL"));
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
}
