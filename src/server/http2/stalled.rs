//! `send_timeout` for each HTTP/2 stream: an answer whose client takes
//! nothing of it for that long is abandoned, its stream reset
//! (`RST_STREAM` / `CANCEL`) and its upstream exchange dropped, which
//! closes the upstream connection it held (docs/edge-behaviour.md, "Slow
//! clients and deadlines").
//!
//! The socket's send clock (`server/deadline_io.rs`) cannot see this: a
//! client that keeps a stream's flow-control window at zero still reads
//! the socket, and the connection's other streams go on. Nor can the
//! answer's body alone: hyper's server takes a frame from the body, then
//! waits for the stream's window to send it, and polls the body for its
//! next frame only once it has; while it waits, nothing polls the body.
//! What does get polled is the stream's task, which hyper hands to its
//! executor, so the clock runs there: [`StreamExecutor`] spawns each
//! stream's task inside a [`Watched`], which learns from the stream's body
//! (through [`took`], on the same thread within the same poll) whether
//! hyper took a frame and is now waiting to send it. The clock runs from
//! the last frame taken while hyper is waiting, and stops whenever the
//! body itself is waited for (the upstream's turn). When it runs out the
//! task ends: hyper's stream future is dropped with the body in it, and
//! h2 resets a stream that all its handles left unfinished with `CANCEL`.
//! A body hands hyper at most [`PIECE`] bytes at a time, so a client that
//! reads slowly but steadily shows progress every 16 KiB.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use crate::timer::LazyTimer;

/// The most of an answer's body handed to hyper at once: one HTTP/2 DATA
/// frame of the default size (RFC 9113 §4.2, `SETTINGS_MAX_FRAME_SIZE`).
/// Each piece taken counts as progress.
pub const PIECE: usize = 16 * 1024;

/// What a stream's body did when hyper last polled it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Took {
    /// Not polled in this poll of the stream's task.
    Nothing,
    /// It handed hyper a data frame, which hyper sends before it asks for
    /// another: if hyper asks for none before the task waits, it waits
    /// for flow control.
    Data,
    /// It had nothing ready (the upstream's turn), or handed something
    /// that needs no window (trailers, its end).
    Other,
}

thread_local! {
    /// What the body of the stream being polled on this thread did last.
    static TOOK: Cell<Took> = const { Cell::new(Took::Nothing) };
}

/// Said by a stream's body each time hyper polls it.
#[inline]
pub fn took(what: Took) {
    TOOK.set(what);
}

/// hyper's executor for a connection's streams: tokio's, with each
/// stream's task [`Watched`] for `send_timeout`.
#[derive(Debug, Clone, Copy)]
pub struct StreamExecutor {
    send_timeout: Duration,
}

impl StreamExecutor {
    pub fn new(send_timeout: Duration) -> StreamExecutor {
        StreamExecutor { send_timeout }
    }
}

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, future: F) {
        tokio::spawn(Watched {
            future,
            send_timeout: self.send_timeout,
            deadline: None,
            timer: LazyTimer::new(),
        });
    }
}

pin_project_lite::pin_project! {
    /// A stream's task, ended when its answer made no progress for
    /// `send_timeout` while hyper waited to send it.
    pub struct Watched<F> {
        #[pin]
        future: F,
        send_timeout: Duration,
        // When the answer is abandoned, while hyper waits to send it.
        deadline: Option<Instant>,
        timer: LazyTimer,
    }
}

impl<F: Future<Output = ()>> Future for Watched<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        // Restored after: a task polled within another's poll says
        // nothing of the outer one.
        let outer = TOOK.replace(Took::Nothing);
        let polled = this.future.poll(cx);
        let took = TOOK.replace(outer);
        if polled.is_ready() {
            return Poll::Ready(());
        }
        match took {
            // Progress: the clock starts again from here.
            Took::Data => *this.deadline = Some(Instant::now() + *this.send_timeout),
            Took::Other => *this.deadline = None,
            // Woken for something else: as it was.
            Took::Nothing => {}
        }
        let Some(deadline) = *this.deadline else {
            return Poll::Pending;
        };
        match this.timer.poll_until(cx, deadline) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                tracing::debug!(
                    send_timeout = ?this.send_timeout,
                    "an HTTP/2 stream took nothing of its answer for send_timeout: reset"
                );
                // Dropped by tokio now, with hyper's stream in it.
                Poll::Ready(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream task whose body hands a frame on its first poll and is
    /// then never polled again (hyper waiting for a window that stays
    /// shut), or, `drained`, whose body is waited for after it.
    fn stream(drained: bool) -> impl Future<Output = ()> {
        let mut polls = 0;
        std::future::poll_fn(move |_| {
            polls += 1;
            match (polls, drained) {
                (1, _) => took(Took::Data),
                (_, true) => took(Took::Other),
                _ => {}
            }
            Poll::<()>::Pending
        })
    }

    fn watched<F: Future<Output = ()>>(future: F) -> Watched<F> {
        Watched {
            future,
            send_timeout: Duration::from_secs(60),
            deadline: None,
            timer: LazyTimer::new(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_that_sends_nothing_for_send_timeout_ends() {
        let start = Instant::now();
        watched(stream(false)).await;
        assert_eq!(start.elapsed(), Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_waiting_for_its_upstream_is_not_timed() {
        let mut task = std::pin::pin!(watched(stream(true)));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(task.as_mut().poll(&mut cx).is_pending());
        // The upstream's turn from the second poll on.
        assert!(task.as_mut().poll(&mut cx).is_pending());
        let waited = tokio::time::timeout(Duration::from_secs(600), task).await;
        assert!(waited.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn each_frame_taken_starts_the_clock_again() {
        let start = Instant::now();
        let (mut frames, mut next) = (0, start);
        let stream = std::future::poll_fn(move |cx| {
            // A frame taken every 50 s, five times, then none; a poll for
            // anything else (the clock's old deadline) takes nothing.
            if frames < 5 && Instant::now() >= next {
                frames += 1;
                next += Duration::from_secs(50);
                took(Took::Data);
                let waker = cx.waker().clone();
                tokio::spawn(async move {
                    tokio::time::sleep_until(next).await;
                    waker.wake();
                });
            }
            Poll::<()>::Pending
        });
        watched(stream).await;
        assert_eq!(start.elapsed(), Duration::from_secs(4 * 50 + 60));
    }
}
