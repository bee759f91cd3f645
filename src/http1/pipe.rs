//! A request body between the connection that reads it and whoever sends it
//! on: the connection's task decodes the body from its socket and hands it
//! over frame by frame, only as fast as the receiving side asks for it (an
//! upstream exchange, in the same task, or hyper's HTTP/2 client, in a task
//! of its own). At most one frame waits in the pipe, so a body of any size
//! holds a frame and the connection's read buffer, and a receiver that
//! stops asking stops the reading (back-pressure onto the client).
//!
//! Each side keeps a waker in the shared state: the receiver's, woken when a
//! frame or the end arrives; the sender's, woken when the receiver asks for
//! more (or leaves). A receiver polled by the sender's own task wakes
//! nothing: that task looks for demand after every poll of the receiver
//! (`Sender::unpark` takes the sender's waker away while it does), so a
//! frame passed within one task costs a lock, not another trip through the
//! scheduler.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// Why a body did not arrive whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Broken {
    #[error("the client closed the connection before the request body ended")]
    CutShort,
    #[error("the request body's chunked coding is malformed")]
    BadFraming,
}

/// A pipe for one body, `length` bytes long when the head said so.
pub fn pipe(length: Option<u64>) -> (Sender, Receiver) {
    let shared = Arc::new(Shared::default());
    (
        Sender {
            shared: Arc::clone(&shared),
        },
        Receiver { shared, length },
    )
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The frame waiting for the receiver.
    frame: Option<Frame<Bytes>>,
    /// Set by the sender at the body's end: `Err` when it broke off.
    end: Option<Result<(), Broken>>,
    /// The receiver asked for a frame and got none yet.
    wanted: bool,
    receiver: Option<Waker>,
    sender: Option<Waker>,
    /// The receiver was dropped: nothing more is wanted.
    abandoned: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent after any panic (plain fields).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The connection's end.
#[derive(Debug)]
pub struct Sender {
    shared: Arc<Shared>,
}

/// What the receiver wants now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Demand {
    /// A frame.
    Frame,
    /// Nothing yet (one waits, or none was asked for).
    None,
    /// Nothing ever again: the receiver is gone.
    Abandoned,
}

impl Sender {
    /// What the receiver wants.
    pub fn demand(&self) -> Demand {
        let state = self.shared.lock();
        if state.abandoned {
            Demand::Abandoned
        } else if state.wanted && state.frame.is_none() && state.end.is_none() {
            Demand::Frame
        } else {
            Demand::None
        }
    }

    /// Hands `frame` over; `cx` is the sender's task, whose own receiver
    /// needs no wake-up.
    pub fn send(&self, frame: Frame<Bytes>, cx: &Context<'_>) {
        let waker = {
            let mut state = self.shared.lock();
            state.frame = Some(frame);
            state.wanted = false;
            state.receiver.take()
        };
        wake_unless_own(waker, cx);
    }

    /// Ends the body: whole (`Ok`) or broken off.
    pub fn finish(&self, end: Result<(), Broken>, cx: &Context<'_>) {
        let waker = {
            let mut state = self.shared.lock();
            state.end = Some(end);
            state.receiver.take()
        };
        wake_unless_own(waker, cx);
    }

    /// Wakes `cx`'s task when the receiver asks for a frame (or leaves).
    pub fn park(&self, cx: &Context<'_>) {
        let mut state = self.shared.lock();
        match &mut state.sender {
            Some(parked) if parked.will_wake(cx.waker()) => {}
            parked => *parked = Some(cx.waker().clone()),
        }
    }

    /// Takes the parked waker away: the sender's task is polling, and looks
    /// for demand itself.
    pub fn unpark(&self) {
        self.shared.lock().sender = None;
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        let waker = {
            let mut state = self.shared.lock();
            if state.end.is_none() {
                state.end = Some(Err(Broken::CutShort));
            }
            state.receiver.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

fn wake_unless_own(waker: Option<Waker>, cx: &Context<'_>) {
    if let Some(waker) = waker {
        if !waker.will_wake(cx.waker()) {
            waker.wake();
        }
    }
}

/// The body's end: what sends it on polls it.
#[derive(Debug)]
pub struct Receiver {
    shared: Arc<Shared>,
    /// The length the head declared, if it did.
    length: Option<u64>,
}

impl Body for Receiver {
    type Data = Bytes;
    type Error = Broken;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Broken>>> {
        let sender = {
            let mut state = self.shared.lock();
            if let Some(frame) = state.frame.take() {
                return Poll::Ready(Some(Ok(frame)));
            }
            match state.end {
                Some(Ok(())) => return Poll::Ready(None),
                Some(Err(broken)) => return Poll::Ready(Some(Err(broken))),
                None => {}
            }
            state.wanted = true;
            match &mut state.receiver {
                Some(parked) if parked.will_wake(cx.waker()) => {}
                parked => *parked = Some(cx.waker().clone()),
            }
            state.sender.take()
        };
        if let Some(sender) = sender {
            sender.wake();
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        let state = self.shared.lock();
        state.frame.is_none() && state.end == Some(Ok(()))
    }

    fn size_hint(&self) -> SizeHint {
        match self.length {
            Some(length) => SizeHint::with_exact(length),
            None => SizeHint::default(),
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let sender = {
            let mut state = self.shared.lock();
            state.abandoned = true;
            state.sender.take()
        };
        if let Some(sender) = sender {
            sender.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    #[tokio::test]
    async fn frames_pass_on_demand_and_the_end_follows() {
        let (sender, mut receiver) = pipe(Some(5));
        assert_eq!(receiver.size_hint().exact(), Some(5));
        assert_eq!(sender.demand(), Demand::None);
        let receiving = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(frame) = poll_fn(|cx| Pin::new(&mut receiver).poll_frame(cx)).await {
                got.extend_from_slice(&frame.unwrap().into_data().unwrap());
            }
            got
        });
        for piece in [&b"hel"[..], b"lo"] {
            // The receiver's ask wakes the parked sender.
            poll_fn(|cx| {
                if sender.demand() == Demand::Frame {
                    return Poll::Ready(());
                }
                sender.park(cx);
                Poll::Pending
            })
            .await;
            poll_fn(|cx| {
                sender.send(Frame::data(Bytes::copy_from_slice(piece)), cx);
                Poll::Ready(())
            })
            .await;
        }
        poll_fn(|cx| {
            sender.finish(Ok(()), cx);
            Poll::Ready(())
        })
        .await;
        assert_eq!(receiving.await.unwrap(), b"hello");
    }

    #[tokio::test]
    async fn a_dropped_sender_breaks_the_body_and_a_dropped_receiver_abandons_it() {
        let (sender, mut receiver) = pipe(None);
        drop(sender);
        let end = poll_fn(|cx| Pin::new(&mut receiver).poll_frame(cx)).await;
        assert_eq!(end.unwrap().unwrap_err(), Broken::CutShort);

        let (sender, receiver) = pipe(None);
        drop(receiver);
        assert_eq!(sender.demand(), Demand::Abandoned);
    }
}
