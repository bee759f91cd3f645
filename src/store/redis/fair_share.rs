//! How many sluice instances share the Redis store, so that each enforces
//! its share of every limit while Redis is down (docs/multi-instance.md):
//! an outage must not multiply the limits by the number of instances.
//!
//! Unless `[store.redis] instances` fixes the number, every instance keeps a
//! heartbeat in Redis: a member of one sorted set, scored with the instant
//! it lapses ([`LAPSE`] after its last beat), refreshed every [`BEAT_EVERY`].
//! Each beat also drops lapsed members and reads how many are left: the
//! last number seen is the one used while Redis is down.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::link::Link;

/// How often an instance renews its heartbeat.
pub const BEAT_EVERY: Duration = Duration::from_secs(2);
/// How soon a beat that could not be sent is tried again: the first beat
/// goes out as soon as the link is up.
const RETRY_EVERY: Duration = Duration::from_millis(100);
/// How long a heartbeat counts without renewal: a crashed instance stops
/// counting within this.
pub const LAPSE: Duration = Duration::from_secs(10);

/// One beat: `KEYS[1]` the set, `ARGV[1]` this instance, `ARGV[2]` the lapse
/// in microseconds. Answers the instances alive, this one included.
const BEAT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], math.floor(tonumber(ARGV[2]) / 1000))
return redis.call('ZCARD', KEYS[1])
";

/// The instances sharing the store, as last seen.
#[derive(Debug)]
pub struct FairShare {
    /// `[store.redis] instances`, or 0 to count heartbeats.
    configured: u64,
    /// The last count of live heartbeats (1 until one was read).
    seen: AtomicU64,
}

impl FairShare {
    pub fn new(configured: u64) -> Arc<FairShare> {
        Arc::new(FairShare {
            configured,
            seen: AtomicU64::new(1),
        })
    }

    /// How many instances share each limit (at least 1).
    pub fn instances(&self) -> u64 {
        match self.configured {
            0 => self.seen.load(Ordering::Relaxed).max(1),
            configured => configured,
        }
    }

    /// Starts beating on `link` under `key` as instance `id`, until the
    /// store is dropped. Does nothing when the count is configured.
    pub fn start(self: &Arc<FairShare>, link: Link, key: String, id: String) {
        if self.configured != 0 {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let share: Weak<FairShare> = Arc::downgrade(self);
        runtime.spawn(async move {
            let lapse = LAPSE.as_micros().to_string();
            loop {
                let Some(share) = share.upgrade() else {
                    return;
                };
                let mut wait = RETRY_EVERY;
                if link.is_up() {
                    let mut beat = redis::cmd("EVAL");
                    beat.arg(BEAT).arg(1).arg(&key).arg(&id).arg(&lapse);
                    match link.run::<u64>(beat).await {
                        Ok(count) => {
                            share.seen.store(count.max(1), Ordering::Relaxed);
                            wait = BEAT_EVERY;
                        }
                        Err(error) => tracing::debug!(%error, "heartbeat not sent"),
                    }
                }
                drop(share);
                tokio::time::sleep(wait).await;
            }
        });
    }
}
