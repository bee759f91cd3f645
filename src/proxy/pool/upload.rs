//! A request's body on its way to the upstream: held whole (written behind
//! the head, in the same write) or streamed as the client sends it, framed
//! by sluice (`Content-Length` when the length is known, else chunked),
//! never as the client framed it.
//!
//! A streamed body may still be going up when the answer's head arrives (an
//! upstream that answers early, or one that streams its answer while it
//! reads): the exchange then leaves it in the connection, and the answer's
//! body goes on sending it while the answer streams (`answer.rs`), as
//! hyper's client does. Frames that are ready together are gathered into
//! one write ([`Outflow`]).

use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::Body;

use super::super::deadline::GuardedBody;
use crate::http1::framing::Framing;
use crate::http1::outflow::{BodyOut, Mismatch, Outflow};
use crate::http1::transport::Transport;

/// A request's body as its attempts see it.
#[derive(Debug, Default)]
pub enum RequestBody {
    /// None at all.
    #[default]
    None,
    /// Held in full (it arrived whole, or was read whole so that another
    /// server may be sent it): every attempt writes it from here.
    Whole(Bytes),
    /// Streamed from the client as it arrives: the first attempt that
    /// takes a frame of it is its only one.
    Streamed(GuardedBody),
    /// Streamed, and taken by an attempt: not to be sent again.
    Taken,
}

impl RequestBody {
    /// How the upstream is told the body's length: `None` when there is no
    /// body.
    pub fn framing(&self) -> Framing {
        match self {
            RequestBody::None | RequestBody::Taken => Framing::Empty,
            RequestBody::Whole(bytes) => Framing::of_length(bytes.len() as u64),
            RequestBody::Streamed(body) => match body.size_hint().exact() {
                Some(length) => Framing::of_length(length),
                None => Framing::Chunked,
            },
        }
    }

    /// Whether it can be sent again: nothing of it was taken, or it is held
    /// whole.
    pub fn is_held(&self) -> bool {
        match self {
            RequestBody::None | RequestBody::Whole(_) => true,
            RequestBody::Streamed(body) => !body.was_polled(),
            RequestBody::Taken => false,
        }
    }

    /// The streamed body, for an attempt to send; [`RequestBody::Taken`]
    /// stays in its place.
    pub fn take_streamed(&mut self) -> Option<GuardedBody> {
        match std::mem::replace(self, RequestBody::Taken) {
            RequestBody::Streamed(body) => Some(body),
            other => {
                *self = other;
                None
            }
        }
    }
}

/// Why a streamed body stopped going up.
#[derive(Debug)]
pub enum UploadError {
    /// The client's body failed (cut off, malformed, over its limits), or
    /// did not add up to the length it declared.
    Client,
    /// The upstream took no more of it (it closed, or reset).
    Upstream,
}

/// A streamed body going up one connection.
#[derive(Debug)]
pub struct Upload {
    body: GuardedBody,
    framing: BodyOut,
    ended: bool,
}

impl Upload {
    /// Sends `body`, framed as `framing` (never [`Framing::Empty`]).
    pub fn new(body: GuardedBody, framing: Framing) -> Upload {
        Upload {
            body,
            framing: BodyOut::of(framing).unwrap_or(BodyOut::Length(0)),
            ended: false,
        }
    }

    /// The body, unsent: for another attempt.
    pub fn into_body(self) -> GuardedBody {
        self.body
    }

    /// Whether nothing of the body was taken yet.
    pub fn untouched(&self) -> bool {
        !self.body.was_polled()
    }

    /// Moves as much of the body as is ready into `out` and writes it to
    /// `io`; ready once all of it went (the last chunk included), pending
    /// while the client or the upstream holds it back.
    pub fn poll<T: Transport + ?Sized>(
        &mut self,
        out: &mut Outflow,
        io: &mut T,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), UploadError>> {
        loop {
            while !self.ended && out.has_room() {
                match std::pin::Pin::new(&mut self.body).poll_frame(cx) {
                    // Trailer fields go to no HTTP/1.1 upstream (`Outflow::finish`).
                    Poll::Ready(Some(Ok(frame))) => {
                        if let Ok(data) = frame.into_data() {
                            out.push(&mut self.framing, data)
                                .map_err(|_: Mismatch| UploadError::Client)?;
                        }
                    }
                    Poll::Ready(None) => {
                        out.finish(self.framing).map_err(|_| UploadError::Client)?;
                        self.ended = true;
                    }
                    Poll::Ready(Some(Err(_))) => return Poll::Ready(Err(UploadError::Client)),
                    Poll::Pending => break,
                }
            }
            if out.is_empty() {
                return if self.ended {
                    Poll::Ready(Ok(()))
                } else {
                    Poll::Pending
                };
            }
            match out.poll_write(io, cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(_)) => return Poll::Ready(Err(UploadError::Upstream)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
