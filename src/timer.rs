//! A deadline timer that is cheap to move later.
//!
//! Registering a tokio `Sleep` in the runtime's timer wheel and taking it
//! out again is far from free (figures in docs/benchmarks-history.md), and resetting one does both.
//! A deadline that restarts on every exchange (a connection's idle clock,
//! an upstream's answer time) would pay that on every request, although it
//! almost never fires. [`LazyTimer`] keeps one `Sleep` and only ever moves
//! it earlier: while it is armed before the deadline asked for, it is left
//! to fire, and then re-armed for what remains. So a deadline that moves
//! later after each exchange costs one registration per timeout period
//! rather than one per exchange.
//!
//! An armed timer keeps the waker of the last task that polled it, so it
//! may wake that task once, for nothing, when it fires after the deadline
//! moved on: at most once per timeout period.
//!
//! Polling the `Sleep` again only to leave the same task's waker with it
//! would be paid once per request for an idle clock; so
//! while the `Sleep` is armed, has not fired and holds a waker that wakes
//! the polling task, a poll returns `Pending` without touching it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::time::{Instant, Sleep};

/// One `Sleep`, moved earlier at once and later only after it fired.
#[derive(Debug, Default)]
pub struct LazyTimer {
    /// Created on first use.
    armed: Option<Armed>,
}

#[derive(Debug)]
struct Armed {
    /// Boxed: a `Sleep` is not `Unpin`.
    sleep: Pin<Box<Sleep>>,
    /// The instant `sleep` is set to.
    at: Instant,
    /// The waker `sleep` was last polled with since it was set, if any.
    waker: Option<Waker>,
}

impl LazyTimer {
    /// A timer that is not armed yet.
    pub const fn new() -> LazyTimer {
        LazyTimer { armed: None }
    }

    /// Ready once `deadline` has passed (the timer registers the task's
    /// waker otherwise). `deadline` may move between calls, either way.
    pub fn poll_until(&mut self, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        let armed = self.armed.get_or_insert_with(|| Armed {
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
            at: deadline,
            waker: None,
        });
        if armed.at > deadline {
            armed.sleep.as_mut().reset(deadline);
            armed.at = deadline;
            armed.waker = None;
        }
        // Set no later than the deadline, not fired, and it will wake this
        // task when it fires: nothing to tell it.
        if armed
            .waker
            .as_ref()
            .is_some_and(|waker| waker.will_wake(cx.waker()))
            && !armed.sleep.is_elapsed()
        {
            return Poll::Pending;
        }
        loop {
            if armed.sleep.as_mut().poll(cx).is_pending() {
                if !armed
                    .waker
                    .as_ref()
                    .is_some_and(|waker| waker.will_wake(cx.waker()))
                {
                    armed.waker = Some(cx.waker().clone());
                }
                return Poll::Pending;
            }
            if armed.at == deadline {
                return Poll::Ready(());
            }
            armed.sleep.as_mut().reset(deadline);
            armed.at = deadline;
            armed.waker = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::time::Duration;

    use super::*;

    /// Whether the timer says `deadline` has passed, polled once.
    fn passed(timer: &mut LazyTimer, deadline: Instant) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        timer.poll_until(&mut cx, deadline).is_ready()
    }

    /// Waits on the timer; returns how long after `start` it said so.
    async fn wait(timer: &mut LazyTimer, start: Instant, deadline: Instant) -> Duration {
        poll_fn(|cx| timer.poll_until(cx, deadline)).await;
        Instant::now() - start
    }

    #[tokio::test(start_paused = true)]
    async fn it_fires_at_its_deadline_and_not_before() {
        let start = Instant::now();
        let mut timer = LazyTimer::new();
        let deadline = start + Duration::from_millis(300);
        assert!(!passed(&mut timer, deadline));
        tokio::time::advance(Duration::from_millis(299)).await;
        assert!(!passed(&mut timer, deadline));
        assert_eq!(
            wait(&mut timer, start, deadline).await,
            Duration::from_millis(300)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_moved_later_is_kept_although_the_earlier_one_fires() {
        let start = Instant::now();
        let mut timer = LazyTimer::new();
        assert!(!passed(&mut timer, start + Duration::from_millis(300)));
        // The next exchange's deadline, while the first is still armed.
        let later = start + Duration::from_millis(500);
        assert_eq!(
            wait(&mut timer, start, later).await,
            Duration::from_millis(500)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_moved_later_after_the_timer_fired_unseen_is_kept() {
        let start = Instant::now();
        let mut timer = LazyTimer::new();
        assert!(!passed(&mut timer, start + Duration::from_millis(300)));
        // Fires while nobody polls (an idle pooled connection).
        tokio::time::advance(Duration::from_millis(400)).await;
        let later = start + Duration::from_millis(700);
        assert!(!passed(&mut timer, later));
        assert_eq!(
            wait(&mut timer, start, later).await,
            Duration::from_millis(700)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_moved_earlier_fires_at_once_at_the_earlier_instant() {
        let start = Instant::now();
        let mut timer = LazyTimer::new();
        assert!(!passed(&mut timer, start + Duration::from_secs(60)));
        let earlier = start + Duration::from_millis(2);
        assert_eq!(
            wait(&mut timer, start, earlier).await,
            Duration::from_millis(2)
        );
    }
}
