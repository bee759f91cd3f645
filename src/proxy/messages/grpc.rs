//! gRPC message limits (`unit = "message"`; docs/streams.md, "gRPC
//! messages"): a call is one request however many messages it carries,
//! so on a call a message rule applies to, each length-prefixed message
//! the client sends (a flag byte, a 4-byte length, then the message) is
//! admitted by the call's [`MessageGate`] before its first byte passes.
//!
//! The client's body is read as it is forwarded ([`MeteredCall`]): bytes
//! pass as they come, cut only where a message that is not admitted at
//! once begins (a frame of messages the store admits without waiting
//! leaves as one frame), so a message is never gathered whole; only a
//! prefix split across two frames is copied (its 5 bytes). While a message waits for its admission the body is not
//! read, so hyper releases none of the stream's flow-control window and
//! HTTP/2 holds the sender back (what sluice keeps of a held call: the
//! frames the window let in, and the one frame being cut). A refusal, a
//! message longer than `max_message_bytes`, or a store that cannot decide
//! under `on_error = "deny"` ends the call: the message does not pass, the
//! body ends with HTTP/2's `CANCEL` (hyper resets the server's stream with
//! the reason it finds in the error), and the client's answer ends with
//! the status that says why ([`CallEnd`], `respond/grpc.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use sync_wrapper::SyncWrapper;

use super::{Deciding, MessageGate, Metered};
use crate::clock::Nanos;
use crate::metrics::Metrics;
use crate::proxy::client_request::{BodyFailure, ClientBody};
use crate::proxy::respond::grpc::{CallEnd, CallEnding};
use crate::websocket::pump::Admission;

/// A gRPC message's prefix: the compressed flag, then the length, big
/// endian (gRPC over HTTP/2, "Length-Prefixed-Message").
const PREFIX: usize = 5;

/// Makes `body`, the body of a call `metered`'s rules apply to, a metered
/// one; returns it with the end the call's answer is to watch.
#[inline(never)]
pub fn meter(
    body: ClientBody,
    metered: Metered,
    deciding: Deciding,
    metrics: &Metrics,
) -> (ClientBody, Arc<CallEnd>) {
    let Metered {
        rules,
        client_ip,
        carrier,
    } = metered;
    let max_message_bytes = deciding.policy.config.server.max_message_bytes;
    let end = Arc::new(CallEnd::new(metrics.grpc_stream_opened()));
    let gate = Arc::new(MessageGate {
        deciding,
        rules,
        client_ip,
        carrier,
    });
    let call = MeteredCall {
        inner: body,
        gate,
        end: Arc::clone(&end),
        max_message_bytes,
        frame: Bytes::new(),
        prefix: [0; PREFIX],
        prefix_held: 0,
        message: None,
        passing: 0,
        admitting: None,
        decided: None,
        ended: false,
    };
    (ClientBody::Metered(SyncWrapper::new(Box::pin(call))), end)
}

/// A message's admission under way.
type Admitting = Pin<Box<dyn Future<Output = Admission> + Send>>;

/// A call's body with each message admitted before it passes.
struct MeteredCall {
    inner: ClientBody,
    gate: Arc<MessageGate>,
    end: Arc<CallEnd>,
    max_message_bytes: u64,
    /// What is left of the frame being passed on.
    frame: Bytes,
    /// A prefix that arrived split across frames, copied here until it is
    /// whole (`prefix_held` bytes of it).
    prefix: [u8; PREFIX],
    prefix_held: usize,
    /// The length of the message whose prefix was read, until it is
    /// admitted.
    message: Option<u64>,
    /// Bytes of the admitted message (its prefix included) still to pass.
    passing: u64,
    admitting: Option<Admitting>,
    /// An admission that was decided while the frame before its message
    /// was being passed, to act on next.
    decided: Option<Admission>,
    /// The call was ended: nothing more passes.
    ended: bool,
}

impl MessageGate {
    /// [`MessageGate::decide`], owning the gate, for a body to keep.
    fn admit_owned(self: Arc<Self>) -> Admitting {
        Box::pin(async move { self.decide().await })
    }
}

impl MeteredCall {
    /// Ends the call with `ending`: the body fails with HTTP/2's `CANCEL`,
    /// which hyper resets the server's stream with.
    fn end_with(&mut self, ending: CallEnding) -> Poll<Option<Result<Frame<Bytes>, BodyFailure>>> {
        self.ended = true;
        self.frame = Bytes::new();
        self.inner = ClientBody::Empty;
        self.end.end(ending);
        Poll::Ready(Some(Err(Box::new(h2::Error::from(h2::Reason::CANCEL)))))
    }

    /// Reads the next message's prefix out of the frame: `Some(length)`
    /// once it is whole. A prefix within the frame stays there, to pass
    /// with the message; one split across frames is copied.
    fn read_prefix(&mut self) -> Option<u64> {
        let length = |prefix: &[u8]| {
            u64::from(u32::from_be_bytes([
                prefix[1], prefix[2], prefix[3], prefix[4],
            ]))
        };
        if self.prefix_held == 0 && self.frame.len() >= PREFIX {
            return Some(length(&self.frame[..PREFIX]));
        }
        let take = (PREFIX - self.prefix_held).min(self.frame.len());
        let copied = self.frame.split_to(take);
        self.prefix[self.prefix_held..self.prefix_held + take].copy_from_slice(&copied);
        self.prefix_held += take;
        (self.prefix_held == PREFIX).then(|| message_length(&self.prefix))
    }

    /// The message whose prefix was read may pass: its bytes, the prefix
    /// first if it was copied.
    fn admitted(&mut self, length: u64) -> Option<Bytes> {
        if self.prefix_held == PREFIX {
            self.prefix_held = 0;
            self.passing = length;
            return Some(Bytes::copy_from_slice(&self.prefix));
        }
        self.passing = PREFIX as u64 + length;
        None
    }

    /// How much of the frame may pass now: what is left of the admitted
    /// message in it, and the messages after it in the same frame that
    /// are admitted at once (the memory store answers without waiting),
    /// so that a frame of several messages leaves as one frame. The first
    /// message not admitted at once stays at the front of what is left,
    /// its admission under way (or decided) for the next poll.
    fn admitted_run(&mut self, cx: &mut Context<'_>) -> usize {
        let mut take = self.passing.min(self.frame.len() as u64) as usize;
        self.passing -= take as u64;
        while self.passing == 0 && self.frame.len() - take >= PREFIX {
            let length = message_length(&self.frame[take..take + PREFIX]);
            if length > self.max_message_bytes {
                // Found again, and ended for, at the next poll.
                break;
            }
            let mut admitting = Arc::clone(&self.gate).admit_owned();
            match admitting.as_mut().poll(cx) {
                Poll::Ready(Admission::Pass) => {
                    let message = PREFIX as u64 + length;
                    let here = message.min((self.frame.len() - take) as u64);
                    take += here as usize;
                    self.passing = message - here;
                }
                Poll::Ready(admission) => {
                    self.message = Some(length);
                    self.decided = Some(admission);
                    break;
                }
                Poll::Pending => {
                    self.message = Some(length);
                    self.admitting = Some(admitting);
                    break;
                }
            }
        }
        take
    }

    fn refused(&mut self, admission: Admission) -> Poll<Option<Result<Frame<Bytes>, BodyFailure>>> {
        self.end_with(match admission {
            Admission::Refused { rule, retry_after } => CallEnding::Limited {
                rule,
                retry_after_ms: retry_after.div_ceil(MILLISECOND),
            },
            Admission::Pass | Admission::Unavailable => CallEnding::Unavailable,
        })
    }
}

const MILLISECOND: Nanos = 1_000_000;

/// The length a message's `prefix` gives (its bytes after the flag).
fn message_length(prefix: &[u8]) -> u64 {
    u64::from(u32::from_be_bytes([
        prefix[1], prefix[2], prefix[3], prefix[4],
    ]))
}

impl Body for MeteredCall {
    type Data = Bytes;
    type Error = BodyFailure;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyFailure>>> {
        let this = self.get_mut();
        loop {
            if this.ended {
                return Poll::Ready(None);
            }
            let decided = match (this.decided.take(), &mut this.admitting) {
                (Some(admission), _) => Some(admission),
                (None, Some(admitting)) => Some(ready!(admitting.as_mut().poll(cx))),
                (None, None) => None,
            };
            if let Some(admission) = decided {
                this.admitting = None;
                let length = this.message.take().unwrap_or_default();
                if admission != Admission::Pass {
                    return this.refused(admission);
                }
                if let Some(prefix) = this.admitted(length) {
                    return Poll::Ready(Some(Ok(Frame::data(prefix))));
                }
            }
            if this.passing > 0 && !this.frame.is_empty() {
                let take = this.admitted_run(cx);
                let data = if take == this.frame.len() {
                    std::mem::take(&mut this.frame)
                } else {
                    this.frame.split_to(take)
                };
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
            if this.frame.is_empty() {
                match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => this.frame = data,
                        // Trailers (a client's, rare): they end the body.
                        Err(frame) => return Poll::Ready(Some(Ok(frame))),
                    },
                    // A message cut short by the end passes as it came.
                    None if this.prefix_held > 0 => {
                        let held = this.prefix_held;
                        this.prefix_held = 0;
                        let cut = Bytes::copy_from_slice(&this.prefix[..held]);
                        return Poll::Ready(Some(Ok(Frame::data(cut))));
                    }
                    other => return Poll::Ready(other),
                }
                continue;
            }
            // A message begins here.
            let Some(length) = this.read_prefix() else {
                continue;
            };
            if length > this.max_message_bytes {
                return this.end_with(CallEnding::TooLarge);
            }
            this.message = Some(length);
            this.admitting = Some(Arc::clone(&this.gate).admit_owned());
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || (self.frame.is_empty() && self.prefix_held == 0 && self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests;
