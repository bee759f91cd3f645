//! Queueing for a concurrency permit across instances (`on_limit =
//! "delay"` on a concurrency rule). The queue lives in Redis beside the
//! leases (`sluice.lua`: tickets in arrival order, each lapsing when its
//! waiter gives up), so waiters on every instance pass in arrival order.
//!
//! A permit returned on one instance cannot be handed to a waiter on
//! another, so each waiter claims its own: it asks the script whether its
//! turn has come, first soon, then less and less often, up to every
//! [`LAST_POLL`]. A permit returned on this instance wakes the waiters of
//! its key here at once, so that a hand-over within one instance costs one
//! round trip rather than a poll's pause.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// The first pause between two claims of a waiter.
pub const FIRST_POLL: Duration = Duration::from_millis(2);

/// The longest pause between two claims: a permit returned on another
/// instance waits at most this long for its next waiter.
pub const LAST_POLL: Duration = Duration::from_millis(32);

/// This instance's waiters, by the Redis key of the permits they wait for.
#[derive(Debug, Default)]
pub struct Waiters {
    /// How many wait, so that a returned permit looks no further when
    /// nobody does.
    count: AtomicUsize,
    /// Key → its waiters' bell and how many listen to it.
    keys: Mutex<HashMap<String, (Arc<Notify>, usize)>>,
}

impl Waiters {
    /// A waiter for a permit of `key` comes, until the guard drops.
    pub fn enter(&self, key: &str) -> Waiting<'_> {
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let entry = keys
            .entry(key.to_owned())
            .or_insert_with(|| (Arc::new(Notify::new()), 0));
        entry.1 += 1;
        Waiting {
            waiters: self,
            key: key.to_owned(),
            bell: Arc::clone(&entry.0),
        }
    }

    /// Whether anyone waits here.
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// A permit of `key` came back: its waiters here claim at once.
    pub fn wake(&self, key: &str) {
        let keys = self
            .keys
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((bell, _)) = keys.get(key) {
            bell.notify_waiters();
        }
    }
}

/// One waiter, registered for as long as it lives.
pub struct Waiting<'a> {
    waiters: &'a Waiters,
    key: String,
    /// Rung when a permit of the key comes back here.
    pub bell: Arc<Notify>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut keys = self
            .waiters
            .keys
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(entry) = keys.get_mut(&self.key) {
            entry.1 -= 1;
            if entry.1 == 0 {
                keys.remove(&self.key);
            }
        }
        self.waiters.count.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[tokio::test]
    async fn a_returned_permit_wakes_the_waiters_of_its_key_only() {
        let waiters = Waiters::default();
        assert!(!waiters.any());
        let first = waiters.enter("a");
        let other = waiters.enter("b");
        {
            let ringing = first.bell.notified();
            let silent = other.bell.notified();
            tokio::pin!(ringing, silent);
            ringing.as_mut().enable();
            silent.as_mut().enable();
            waiters.wake("a");
            assert!(ringing.as_mut().now_or_never().is_some());
            assert!(silent.as_mut().now_or_never().is_none());
        }
        drop(first);
        assert!(waiters.any());
        drop(other);
        assert!(!waiters.any());
        assert!(waiters.keys.lock().unwrap().is_empty());
    }
}
