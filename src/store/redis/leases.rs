//! Concurrency permits across instances: each permit is a lease, a member
//! of the limit's sorted set scored with the instant it lapses. The script
//! drops lapsed leases before counting, so a permit whose instance died
//! comes back within [`LEASE_TTL`]; this instance renews the leases it
//! holds every [`RENEW_EVERY`] while their requests run, and removes each
//! when its request ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use dashmap::DashMap;

use super::link::Link;
use super::script::LEASE_TTL;

/// How often the leases of requests still running are renewed.
pub const RENEW_EVERY: Duration = Duration::from_secs(3);

/// Renews every lease given: `KEYS` the sets, `ARGV[i]` the lease in
/// `KEYS[i]`, the last `ARGV` the TTL in microseconds. Only leases still
/// there are renewed (`XX`): one returned meanwhile stays returned.
const RENEW: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[#ARGV])
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, 'XX', now + ttl, ARGV[i])
  redis.call('PEXPIREAT', key, math.floor((now + ttl) / 1000) + 1)
end
return #KEYS
";

/// The leases this instance holds.
#[derive(Debug)]
pub struct Leases {
    /// The next lease number (starting at a random point, so that two
    /// instances never name a lease alike).
    next: AtomicU64,
    /// Lease number → the sorted set it is in.
    held: DashMap<u64, String>,
}

impl Leases {
    pub fn new(first: u64) -> Arc<Leases> {
        Arc::new(Leases {
            next: AtomicU64::new(first),
            held: DashMap::new(),
        })
    }

    /// A number for a new lease.
    pub fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Lease `id` was taken in `key`: renewed until [`Leases::returned`].
    pub fn taken(&self, id: u64, key: String) {
        self.held.insert(id, key);
    }

    /// Lease `id` is returned (or lapses): no longer renewed.
    pub fn returned(&self, id: u64) {
        self.held.remove(&id);
    }

    /// Renews the leases held, every [`RENEW_EVERY`], until the store is
    /// dropped.
    pub fn start(self: &Arc<Leases>, link: Link) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let leases: Weak<Leases> = Arc::downgrade(self);
        runtime.spawn(async move {
            let ttl = LEASE_TTL.as_micros().to_string();
            loop {
                tokio::time::sleep(RENEW_EVERY).await;
                let Some(leases) = leases.upgrade() else {
                    return;
                };
                if leases.held.is_empty() || !link.is_up() {
                    continue;
                }
                let (keys, ids): (Vec<String>, Vec<u64>) = leases
                    .held
                    .iter()
                    .map(|entry| (entry.value().clone(), *entry.key()))
                    .unzip();
                drop(leases);
                // One call for all, or on a Redis Cluster one per lease (a
                // call's keys must share a slot).
                let batch = if link.is_cluster() { 1 } else { keys.len() };
                for (keys, ids) in keys.chunks(batch).zip(ids.chunks(batch)) {
                    let mut renew = redis::cmd("EVAL");
                    renew
                        .arg(RENEW)
                        .arg(keys.len())
                        .arg(keys)
                        .arg(ids)
                        .arg(&ttl);
                    if let Err(error) = link.run::<u64>(renew).await {
                        tracing::debug!(%error, "leases not renewed");
                    }
                }
            }
        });
    }
}
