//! One clock for every exchange that charges upstream time: once a second
//! (on the proxy's clock) it wakes the exchanges waiting on it, which then
//! charge the time that passed.
//!
//! A tokio timer per request would cost more than the rest of charging
//! together (arming and cancelling a timer entry for requests that mostly
//! last milliseconds). Instead an exchange leaves its waker here once per
//! second at most, and one task wakes them all at each tick. The wakers
//! are kept in a few shards, so exchanges on different workers never wait
//! on one lock; a shard holds at most one waker per exchange that asked
//! during the current second, and is emptied (its capacity kept) at every
//! tick.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::Waker;

use crate::clock::{Clock, Nanos, ProxyClock};

/// How often waiting exchanges are woken.
pub const TICK: Nanos = 1_000_000_000;

const SHARDS: usize = 8;

/// Wakes registered exchanges once a second.
#[derive(Debug)]
pub struct Ticker {
    clock: ProxyClock,
    /// Ticks so far: an exchange that registered at epoch `e` is woken when
    /// it becomes `e + 1`.
    epoch: AtomicU64,
    started: AtomicBool,
    waiting: [Mutex<Vec<Waker>>; SHARDS],
}

impl Ticker {
    /// A ticker on `clock`; its task starts with the first registration.
    pub fn new(clock: ProxyClock) -> Arc<Ticker> {
        Arc::new(Ticker {
            clock,
            epoch: AtomicU64::new(0),
            started: AtomicBool::new(false),
            waiting: Default::default(),
        })
    }

    /// The number of ticks so far.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Wakes `waker` at the next tick; returns the epoch it waits from.
    /// Must be called within the tokio runtime (the first call starts the
    /// ticking task).
    pub fn wake_at_next_tick(self: &Arc<Self>, waker: &Waker) -> u64 {
        if !self.started.load(Ordering::Relaxed) && !self.started.swap(true, Ordering::AcqRel) {
            tokio::spawn(tick(Arc::downgrade(self), self.clock.clone()));
        }
        // Read before registering: a tick in between makes this wait one
        // tick longer (it then finds two ticks passed), but the waker is
        // always in a list the next tick empties, so it is never lost.
        let epoch = self.epoch();
        lock(&self.waiting[shard()]).push(waker.clone());
        epoch
    }
}

/// The ticking task: runs until the proxy (and its ticker) is gone.
async fn tick(ticker: Weak<Ticker>, clock: ProxyClock) {
    let mut next = clock.now().saturating_add(TICK);
    let mut woken = Vec::new();
    loop {
        clock.sleep_until(next).await;
        let Some(ticker) = ticker.upgrade() else {
            return;
        };
        ticker.epoch.fetch_add(1, Ordering::AcqRel);
        for shard in &ticker.waiting {
            // Moved out rather than taken: each list keeps its capacity, so
            // registering does not grow it again (realloc, copy) every second.
            // Woken outside the lock, which a waker may want.
            woken.extend(lock(shard).drain(..));
            woken.drain(..).for_each(Waker::wake);
        }
        next = next.max(clock.now()).saturating_add(TICK);
    }
}

/// This thread's shard: threads take shards in turn, so the workers of a
/// small runtime never share one.
fn shard() -> usize {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) as usize % SHARDS;
    }
    SHARD.with(|shard| *shard)
}

fn lock(shard: &Mutex<Vec<Waker>>) -> std::sync::MutexGuard<'_, Vec<Waker>> {
    // A waker list stays valid whatever panicked while it was held.
    shard
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::RuntimeClock;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;
    use std::time::Duration;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// On paused time: the ticks come exactly when the runtime's time
    /// reaches them, and at no other instant.
    #[tokio::test(start_paused = true)]
    async fn registered_wakers_are_woken_once_at_the_next_tick() {
        let t0 = tokio::time::Instant::now();
        let ticker = Ticker::new(ProxyClock::Runtime(RuntimeClock::new(1_000 * TICK)));
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        assert_eq!(ticker.wake_at_next_tick(&waker), 0);
        assert_eq!(ticker.wake_at_next_tick(&waker), 0);
        // The ticking task starts, and waits for 1 s from now.
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_nanos(TICK - 1)).await;
        // A turn of the runtime without time moving: a timer due would fire.
        tokio::task::yield_now().await;
        assert_eq!(count.0.load(Ordering::SeqCst), 0, "woken before the tick");
        assert_eq!(ticker.epoch(), 0);
        tokio::time::advance(Duration::from_nanos(1)).await;
        // The runtime runs everything due at the tick before time moves on.
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(
            t0.elapsed(),
            Duration::from_nanos(TICK) + Duration::from_millis(1)
        );
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
        assert_eq!(ticker.epoch(), 1);
        // Woken once: the list was emptied. The next tick is at 2 s.
        tokio::time::sleep(Duration::from_nanos(TICK)).await;
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
        assert_eq!(ticker.epoch(), 2);
    }
}
