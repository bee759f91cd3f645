//! The server's word to its connections that it is shutting down, and how
//! it knows they have all ended.
//!
//! Two words, in order: [`Drain::announce`] when shutdown begins (HTTP/2
//! connections open then are sent GOAWAY, so their clients move while
//! the listener still accepts; HTTP/1 responses say `Connection: close`
//! from then on by the proxy's own flag), and [`Drain::start`] when the
//! listener closes, after `shutdown_delay` (every connection finishes
//! what is in flight and closes; docs/operations.md, "Shutting down").
//! With no delay the two come together.
//!
//! A connection waits for it between requests, once per request. A
//! `watch` channel's `changed()` future, polled again each time, showed in
//! every request's profile (figures in docs/benchmarks-history.md); here a connection's task registers once
//! (a `Notify` waiter that keeps its waker), and later waits by the same
//! task only read a flag.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use tokio::sync::futures::Notified;
use tokio::sync::{watch, Notify};

/// Held by the server; [`Drain::start`] tells every connection to finish.
#[derive(Debug)]
pub struct Drain {
    signals: Arc<Signals>,
    /// Each connection holds a receiver until it ends: the channel closes
    /// when the last one has.
    alive: watch::Sender<()>,
}

/// What a connection holds: the signal, and its place among those alive.
#[derive(Debug)]
pub struct DrainHandle {
    signals: Arc<Signals>,
    _alive: watch::Receiver<()>,
}

#[derive(Debug, Default)]
struct Signals {
    /// Shutdown has begun ([`Drain::announce`]).
    announced: Signal,
    /// The listener has closed ([`Drain::start`]).
    started: Signal,
}

#[derive(Debug, Default)]
struct Signal {
    given: AtomicBool,
    notify: Notify,
}

impl Drain {
    pub fn new() -> Drain {
        Drain {
            signals: Arc::default(),
            alive: watch::channel(()).0,
        }
    }

    /// A handle for a connection accepted just now.
    pub fn handle(&self) -> DrainHandle {
        DrainHandle {
            signals: Arc::clone(&self.signals),
            _alive: self.alive.subscribe(),
        }
    }

    /// Says that shutdown has begun: the waits of [`DrainHandle::moving`]
    /// made before resolve.
    pub fn announce(&self) {
        self.signals.announced.set();
    }

    /// Tells every connection to finish: the waits of [`DrainHandle::wait`]
    /// (and of [`DrainHandle::moving`]) resolve. Announces too, if
    /// [`Drain::announce`] did not.
    pub fn start(&self) {
        self.signals.announced.set();
        self.signals.started.set();
    }

    /// Resolves once every handle has been dropped.
    pub async fn ended(&self) {
        self.alive.closed().await;
    }
}

impl DrainHandle {
    /// A handle for another connection, from a listener that holds this
    /// one (HTTP/3's, `server/http3.rs`).
    pub fn another(&self) -> DrainHandle {
        DrainHandle {
            signals: Arc::clone(&self.signals),
            _alive: self._alive.clone(),
        }
    }

    /// Waits for the drain to start; see [`Started`].
    pub fn wait(&self) -> Started<'_> {
        self.signals.started.wait()
    }

    /// Waits for the moment an HTTP/2 connection is sent GOAWAY: shutdown's
    /// beginning for a connection open before it; the drain's start for
    /// one that comes after. That one came from a balancer still sending
    /// here (it has `shutdown_delay` to stop), and GOAWAY at once would
    /// only send its client back, round and round for one that only knows
    /// this address.
    pub fn moving(&self) -> Started<'_> {
        if self.signals.announced.is_set() {
            self.signals.started.wait()
        } else {
            self.signals.announced.wait()
        }
    }
}

impl Signal {
    fn set(&self) {
        self.given.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    fn is_set(&self) -> bool {
        self.given.load(Ordering::Acquire)
    }

    fn wait(&self) -> Started<'_> {
        let mut notified = Box::pin(self.notify.notified());
        // Registered now, so a signal from here on is not missed even
        // before the first poll.
        notified.as_mut().enable();
        Started {
            given: &self.given,
            notified,
            waker: None,
        }
    }
}

/// Resolves once its signal is given (the drain's start, or shutdown's
/// announcement). After its first poll it holds the polling task's waker;
/// a later poll by the same task reads the flag only.
pub struct Started<'a> {
    given: &'a AtomicBool,
    notified: Pin<Box<Notified<'a>>>,
    /// The waker `notified` holds, once polled.
    waker: Option<Waker>,
}

impl Future for Started<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        if this.given.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        // `set` sets the flag before it wakes the waiters, so a task
        // woken by it sees the flag above.
        if this
            .waker
            .as_ref()
            .is_some_and(|waker| waker.will_wake(cx.waker()))
        {
            return Poll::Pending;
        }
        if this.notified.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        this.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// On paused time: the sleep below fires only once every task waits,
    /// so the waiter has polled its wait as far as it can.
    #[tokio::test(start_paused = true)]
    async fn a_waiting_connection_is_told_and_the_drain_ends_when_it_does() {
        let drain = Drain::new();
        let handle = drain.handle();
        let waiter = tokio::spawn(async move {
            let mut started = std::pin::pin!(handle.wait());
            // Polled many times by the same task before the start, as a
            // connection does between requests.
            for _ in 0..3 {
                let polled =
                    std::future::poll_fn(|cx| Poll::Ready(started.as_mut().poll(cx).is_ready()))
                        .await;
                assert!(!polled);
                tokio::task::yield_now().await;
            }
            started.await;
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            tokio::time::timeout(Duration::from_millis(20), drain.ended())
                .await
                .is_err()
        );
        drain.start();
        tokio::time::timeout(Duration::from_secs(5), drain.ended())
            .await
            .expect("the connection ended once told");
        waiter.await.unwrap();
    }

    #[tokio::test]
    async fn a_connection_open_at_the_announcement_moves_then_and_a_later_one_at_the_start() {
        let drain = Drain::new();
        let before = drain.handle();
        let moving = before.moving();
        let during = drain.handle();
        drain.announce();
        tokio::time::timeout(Duration::from_secs(5), moving)
            .await
            .expect("told at the announcement");
        let mut later = std::pin::pin!(during.moving());
        let mut started = std::pin::pin!(during.wait());
        let polled = std::future::poll_fn(|cx| {
            Poll::Ready(later.as_mut().poll(cx).is_ready() || started.as_mut().poll(cx).is_ready())
        })
        .await;
        assert!(
            !polled,
            "after the announcement, the start is still to come"
        );
        drain.start();
        tokio::time::timeout(Duration::from_secs(5), later)
            .await
            .expect("told at the start");
    }

    #[tokio::test]
    async fn a_start_without_an_announcement_announces() {
        let drain = Drain::new();
        let handle = drain.handle();
        let moving = handle.moving();
        drain.start();
        tokio::time::timeout(Duration::from_secs(5), moving)
            .await
            .expect("resolved");
    }

    #[tokio::test]
    async fn a_wait_made_after_the_start_resolves_at_once() {
        let drain = Drain::new();
        let handle = drain.handle();
        drain.start();
        tokio::time::timeout(Duration::from_secs(5), handle.wait())
            .await
            .expect("resolved");
    }
}
