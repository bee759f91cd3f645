//! The server's word to its connections that it is shutting down, and how
//! it knows they have all ended.
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
    signal: Arc<Signal>,
    /// Each connection holds a receiver until it ends: the channel closes
    /// when the last one has.
    alive: watch::Sender<()>,
}

/// What a connection holds: the signal, and its place among those alive.
#[derive(Debug)]
pub struct DrainHandle {
    signal: Arc<Signal>,
    _alive: watch::Receiver<()>,
}

#[derive(Debug, Default)]
struct Signal {
    started: AtomicBool,
    notify: Notify,
}

impl Drain {
    pub fn new() -> Drain {
        Drain {
            signal: Arc::default(),
            alive: watch::channel(()).0,
        }
    }

    /// A handle for a connection accepted just now.
    pub fn handle(&self) -> DrainHandle {
        DrainHandle {
            signal: Arc::clone(&self.signal),
            _alive: self.alive.subscribe(),
        }
    }

    /// Tells every connection to finish: the waits of [`DrainHandle::wait`]
    /// resolve.
    pub fn start(&self) {
        self.signal.started.store(true, Ordering::Release);
        self.signal.notify.notify_waiters();
    }

    /// Resolves once every handle has been dropped.
    pub async fn ended(&self) {
        self.alive.closed().await;
    }
}

impl DrainHandle {
    /// Waits for the drain to start; see [`Started`].
    pub fn wait(&self) -> Started<'_> {
        let mut notified = Box::pin(self.signal.notify.notified());
        // Registered now, so a start from here on is not missed even before
        // the first poll.
        notified.as_mut().enable();
        Started {
            started: &self.signal.started,
            notified,
            waker: None,
        }
    }
}

/// Resolves once the drain has started. After its first poll it holds the
/// polling task's waker; a later poll by the same task reads the flag only.
pub struct Started<'a> {
    started: &'a AtomicBool,
    notified: Pin<Box<Notified<'a>>>,
    /// The waker `notified` holds, once polled.
    waker: Option<Waker>,
}

impl Future for Started<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        if this.started.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        // `start` sets the flag before it wakes the waiters, so a task
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
    async fn a_wait_made_after_the_start_resolves_at_once() {
        let drain = Drain::new();
        let handle = drain.handle();
        drain.start();
        tokio::time::timeout(Duration::from_secs(5), handle.wait())
            .await
            .expect("resolved");
    }
}
