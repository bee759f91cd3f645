//! One server of a pool: an address its URL stands for, the connections
//! to it (`super::super::pool::Pool`), what it has served, and whether it
//! is in (docs/upstreams.md, "Passive checks", "Active checks").
//!
//! A server is shared by every snapshot of the pool it belongs to: a
//! reload or a new DNS answer that keeps it keeps its connections, counts
//! and health, and a snapshot that drops it lets its requests in flight
//! finish on it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::balance;
use super::eject::Ejections;
use crate::clock::Nanos;
use crate::proxy::pool::Pool;

/// One address of a pool, with its connections and its health.
#[derive(Debug)]
pub struct Server {
    /// The URL it comes from, as written (`http://api.internal:3000`).
    url: Arc<str>,
    address: SocketAddr,
    /// Stands for it in rendezvous hashing.
    ring_id: u64,
    pool: Arc<Pool>,
    /// Client requests it answered or failed (health checks not counted).
    requests: AtomicU64,
    /// Of those, the ones that failed: connect errors, timeouts, resets,
    /// 502, 503 and 504 answers.
    failures: AtomicU64,
    /// Failures in a row, since the last success or ejection.
    streak: AtomicU32,
    /// Out until this instant of the proxy's clock (0: never ejected).
    ejected_until: AtomicU64,
    ejections: Mutex<Ejections>,
    /// Active checks have taken it out.
    failing_checks: AtomicBool,
    /// Active checks' results in a row: passes (> 0) or failures (< 0).
    check_streak: Mutex<i64>,
}

/// Why a server is out, for the admin view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Out {
    /// Ejected by passive checks until this instant.
    pub ejected_until: Option<Nanos>,
    /// Taken out by active checks.
    pub failing_checks: bool,
}

impl Server {
    pub fn new(url: Arc<str>, address: SocketAddr, pool: Arc<Pool>) -> Server {
        Server {
            ring_id: balance::ring_id(&format!("{url} {address}")),
            url,
            address,
            pool,
            requests: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            streak: AtomicU32::new(0),
            ejected_until: AtomicU64::new(0),
            ejections: Mutex::new(Ejections::default()),
            failing_checks: AtomicBool::new(false),
            check_streak: Mutex::new(0),
        }
    }

    pub fn url(&self) -> &Arc<str> {
        &self.url
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stands for it in rendezvous hashing, alike in every instance.
    #[inline]
    pub fn ring_id(&self) -> u64 {
        self.ring_id
    }

    /// The connections to it.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Whether it takes requests at `now`.
    #[inline]
    pub fn is_in(&self, now: Nanos) -> bool {
        self.ejected_until.load(Ordering::Relaxed) <= now
            && !self.failing_checks.load(Ordering::Relaxed)
    }

    /// Why it is out at `now`; `None` when it is in.
    pub fn out(&self, now: Nanos) -> Option<Out> {
        let until = self.ejected_until.load(Ordering::Relaxed);
        let out = Out {
            ejected_until: (until > now).then_some(until),
            failing_checks: self.failing_checks.load(Ordering::Relaxed),
        };
        (out.ejected_until.is_some() || out.failing_checks).then_some(out)
    }

    /// A request it answered with something other than 502, 503 or 504.
    #[inline]
    pub fn succeeded(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        // Read first: a server that has not failed is not written to.
        if self.streak.load(Ordering::Relaxed) != 0 {
            self.streak.store(0, Ordering::Relaxed);
        }
    }

    /// A request it failed at `now`. With passive checks (`eject`: `after`
    /// failures in a row take it out for `for`), returns whether this
    /// failure took it out.
    pub fn failed(&self, now: Nanos, eject: Option<(u32, Duration)>) -> bool {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.failures.fetch_add(1, Ordering::Relaxed);
        let streak = self.streak.fetch_add(1, Ordering::Relaxed) + 1;
        let Some((after, base)) = eject else {
            return false;
        };
        if streak < after || self.ejected_until.load(Ordering::Relaxed) > now {
            return false;
        }
        let mut ejections = self
            .ejections
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Another failure may have taken it out meanwhile.
        if self.ejected_until.load(Ordering::Relaxed) > now {
            return false;
        }
        let until = ejections.eject(now, base);
        self.ejected_until.store(until, Ordering::Relaxed);
        self.streak.store(0, Ordering::Relaxed);
        true
    }

    /// An active check's result: `fails` failures in a row take it out,
    /// `passes` passes in a row bring it back. Returns whether that
    /// changed whether checks hold it out.
    pub fn checked(&self, passed: bool, fails: u32, passes: u32) -> bool {
        let mut streak = self
            .check_streak
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *streak = match (passed, *streak) {
            (true, run) if run > 0 => run + 1,
            (true, _) => 1,
            (false, run) if run < 0 => run - 1,
            (false, _) => -1,
        };
        let failing = self.failing_checks.load(Ordering::Relaxed);
        let flip = if failing {
            *streak >= i64::from(passes)
        } else {
            *streak <= -i64::from(fails)
        };
        if flip {
            self.failing_checks.store(!failing, Ordering::Relaxed);
        }
        flip
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ProxyClock, RuntimeClock};
    use crate::proxy::pool::dial::Destination;

    const S: Nanos = 1_000_000_000;

    fn server() -> Server {
        let address: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let pool = Pool::new(
            Destination(address),
            None,
            Duration::from_secs(1),
            ProxyClock::Runtime(RuntimeClock::new(0)),
        );
        Server::new(Arc::from("http://127.0.0.1:9"), address, pool)
    }

    #[test]
    fn after_failures_in_a_row_take_it_out_and_a_success_breaks_the_row() {
        let server = server();
        let eject = Some((3, Duration::from_secs(30)));
        let now = 100 * S;
        assert!(!server.failed(now, eject));
        assert!(!server.failed(now, eject));
        server.succeeded();
        assert!(!server.failed(now, eject));
        assert!(!server.failed(now, eject));
        assert!(server.is_in(now));
        assert!(server.failed(now, eject), "the third in a row");
        assert!(!server.is_in(now));
        assert_eq!(
            server.out(now),
            Some(Out {
                ejected_until: Some(130 * S),
                failing_checks: false
            })
        );
        // Failures while out do not take it out again.
        assert!(!server.failed(now + S, eject));
        assert!(server.is_in(130 * S));
        assert_eq!(server.out(130 * S), None);
        assert_eq!((server.requests(), server.failures()), (7, 6));
        // Without passive checks nothing takes it out.
        let server2 = self::server();
        for _ in 0..10 {
            assert!(!server2.failed(now, None));
        }
        assert!(server2.is_in(now));
    }

    #[test]
    fn checks_take_it_out_after_fails_and_back_after_passes() {
        let server = server();
        let now = S;
        assert!(!server.checked(false, 2, 3));
        assert!(!server.checked(true, 2, 3), "a pass breaks the row");
        assert!(!server.checked(false, 2, 3));
        assert!(server.checked(false, 2, 3));
        assert!(!server.is_in(now));
        assert!(server.out(now).unwrap().failing_checks);
        assert!(!server.checked(true, 2, 3));
        assert!(!server.checked(true, 2, 3));
        assert!(server.checked(true, 2, 3));
        assert!(server.is_in(now));
    }
}
