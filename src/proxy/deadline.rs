//! The request body's deadline and size cap, enforced while the body streams
//! to the upstream.
//!
//! hyper has no body timeout, so a client can hold a connection, and the
//! upstream connection behind it, by trickling a large body (RUDY). The
//! whole body must arrive within `server.body_timeout`, counted from when
//! sluice starts reading it (after any hold: a held request's body waits in
//! the socket, and a client sending `Expect: 100-continue` starts only
//! then). A body longer than `server.max_body_bytes` is cut off when it
//! crosses the limit; a declared `Content-Length` above it never gets here
//! (413 up front).
//!
//! Either way the body ends in an error, so hyper aborts the upstream
//! request: the upstream sees an incomplete body and a closed connection,
//! never a complete request. If the upstream had not answered yet, the
//! client gets 408 or 413 (what [`BodyWatch::cut_off`] says the proxy
//! answers) and the connection is closed.
//!
//! The limits come from `[server]` ([`BodyLimits`]); [`guard`] applies them
//! where the request's body is handed to the upstream.
//!
//! A guarded body also notes when it ended ([`BodyWatch::ended_at`]): an
//! upstream cannot answer a request before it has all of it, so the time a
//! slow client took to send its body is not the upstream's (adaptive rules
//! learn from the upstream's time alone: docs/adaptive.md).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Version;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Sleep;

use super::client_request::ClientBody;
use crate::clock::{Clock, Nanos, ProxyClock};

/// The limits on one request body, from `[server]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimits {
    /// The whole body must arrive within this.
    pub timeout: Duration,
    /// At most this many bytes; 0 = no limit.
    pub max_bytes: u64,
}

impl BodyLimits {
    /// These limits without the deadline (a stream that may last).
    pub fn without_deadline(self) -> BodyLimits {
        BodyLimits {
            timeout: Duration::MAX,
            ..self
        }
    }
}

/// Why a guarded body was cut off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    Timeout,
    TooLarge,
    Client,
    /// sluice ended the call the body belongs to (its messages:
    /// `proxy/messages/grpc.rs`): the server's stream is reset with
    /// HTTP/2's `CANCEL`, which hyper finds as this error's source.
    Cancelled,
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BodyError::Timeout => "the request body did not arrive within body_timeout",
            BodyError::TooLarge => "the request body is longer than max_body_bytes",
            BodyError::Client => "the client's request body failed",
            BodyError::Cancelled => "sluice ended the call",
        })
    }
}

impl std::error::Error for BodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        static CANCEL: std::sync::LazyLock<h2::Error> =
            std::sync::LazyLock::new(|| h2::Error::from(h2::Reason::CANCEL));
        match self {
            BodyError::Cancelled => Some(&*CANCEL),
            BodyError::Timeout | BodyError::TooLarge | BodyError::Client => None,
        }
    }
}

/// Which of its limits cut a body off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutOff {
    /// It did not arrive within `body_timeout`.
    Timeout,
    /// It grew past `max_body_bytes`.
    TooLarge,
}

const TRIPPED_TIMEOUT: u8 = 1;
const TRIPPED_TOO_LARGE: u8 = 2;

/// The request body as the upstream receives it.
#[derive(Debug)]
pub struct GuardedBody {
    inner: ClientBody,
    guard: Option<Box<Active>>,
    /// A frame was asked for: the body may be partly sent.
    polled: bool,
}

impl GuardedBody {
    /// No body (a request sent again over HTTP/2, copied from one that
    /// had none).
    pub fn empty() -> GuardedBody {
        GuardedBody::read(Bytes::new())
    }

    /// A body read whole before it was sent, within its deadline and size
    /// cap, so that the same bytes can go to another server.
    pub fn read(bytes: Bytes) -> GuardedBody {
        GuardedBody {
            inner: if bytes.is_empty() {
                ClientBody::Empty
            } else {
                ClientBody::Read(bytes)
            },
            guard: None,
            polled: false,
        }
    }

    /// Whether a frame was asked for: then the body may be partly sent, and
    /// cannot be sent again.
    pub fn was_polled(&self) -> bool {
        self.polled
    }

    /// Counts the bytes of this body as they are forwarded into the
    /// returned counter, for a `request_bytes` charge (docs/charging.md):
    /// a body read whole starts at its length. Only a body asked to counts,
    /// so the others' frames pass as before.
    pub fn count_bytes(&mut self) -> Arc<AtomicU64> {
        match self.guard.as_deref_mut() {
            Some(active) => Arc::clone(
                active
                    .counted
                    .get_or_insert_with(|| Arc::new(AtomicU64::new(active.received))),
            ),
            None => Arc::new(AtomicU64::new(
                self.bytes().map_or(0, |bytes| bytes.len() as u64),
            )),
        }
    }

    /// The whole body, when it was read ([`GuardedBody::read`]).
    pub fn bytes(&self) -> Option<&Bytes> {
        match &self.inner {
            ClientBody::Read(bytes) => Some(bytes),
            ClientBody::Empty
            | ClientBody::Piped(_)
            | ClientBody::Hyper(_)
            | ClientBody::Prefixed(_)
            | ClientBody::Metered(_)
            | ClientBody::Streamed(_) => None,
        }
    }
}

#[derive(Debug)]
struct Active {
    limits: BodyLimits,
    /// Started at the first poll.
    timer: Option<Pin<Box<Sleep>>>,
    received: u64,
    /// Where the bytes passed on are counted, once asked
    /// ([`GuardedBody::count_bytes`]).
    counted: Option<Arc<AtomicU64>>,
    watched: Arc<Watched>,
    /// Dates the end of the body.
    clock: ProxyClock,
}

/// What a guarded body tells the proxy that handed it over.
#[derive(Debug, Default)]
struct Watched {
    /// Which limit cut it off (0: none).
    tripped: AtomicU8,
    /// When its last frame was read (0: not yet).
    ended_at: AtomicU64,
}

/// What the proxy keeps of a guarded body once it was handed over.
#[derive(Debug)]
pub struct BodyWatch {
    watched: Option<Arc<Watched>>,
    version: Version,
}

/// Wraps a request's body (of a request of `version`) with `limits`; its
/// end is dated on `clock`.
pub fn guard(
    inner: ClientBody,
    limits: BodyLimits,
    version: Version,
    clock: &ProxyClock,
) -> (GuardedBody, BodyWatch) {
    let watched = Arc::new(Watched::default());
    let watch = BodyWatch {
        watched: Some(Arc::clone(&watched)),
        version,
    };
    let body = GuardedBody {
        guard: Some(Box::new(Active {
            limits,
            timer: None,
            received: 0,
            counted: None,
            watched,
            clock: clock.clone(),
        })),
        inner,
        polled: false,
    };
    (body, watch)
}

impl BodyWatch {
    /// The watch of a request that has no body to guard.
    pub fn no_body(version: Version) -> BodyWatch {
        BodyWatch {
            watched: None,
            version,
        }
    }

    /// Whether the body was cut off by one of its limits; an exchange that
    /// failed then failed because of it, and the client is to blame.
    pub fn cut_off(&self) -> Option<CutOff> {
        match self.watched.as_ref()?.tripped.load(Ordering::Acquire) {
            TRIPPED_TIMEOUT => Some(CutOff::Timeout),
            TRIPPED_TOO_LARGE => Some(CutOff::TooLarge),
            _ => None,
        }
    }

    /// When the body's last frame was read, if it was (a guarded body).
    pub fn ended_at(&self) -> Option<Nanos> {
        let at = self.watched.as_ref()?.ended_at.load(Ordering::Acquire);
        (at != 0).then_some(at)
    }

    /// The HTTP version of the request whose body this watches.
    pub fn version(&self) -> Version {
        self.version
    }
}

impl Active {
    fn trip(&self, why: BodyError) -> BodyError {
        let code = match why {
            BodyError::Timeout => TRIPPED_TIMEOUT,
            BodyError::TooLarge => TRIPPED_TOO_LARGE,
            BodyError::Client | BodyError::Cancelled => return why,
        };
        self.watched.tripped.store(code, Ordering::Release);
        why
    }
}

/// What a body's `failure` is to the upstream: sluice's own ending of a
/// call (a `CANCEL`), else the client's failure.
fn failed(failure: &(dyn std::error::Error + Send + Sync + 'static)) -> BodyError {
    match failure
        .downcast_ref::<h2::Error>()
        .and_then(h2::Error::reason)
    {
        Some(h2::Reason::CANCEL) => BodyError::Cancelled,
        _ => BodyError::Client,
    }
}

impl Body for GuardedBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        this.polled = true;
        let Some(active) = this.guard.as_deref_mut() else {
            return Pin::new(&mut this.inner)
                .poll_frame(cx)
                .map_err(|failure| failed(&*failure));
        };
        let timeout = active.limits.timeout;
        let timer = active
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if timer.is_elapsed() {
                    return Poll::Ready(Some(Err(active.trip(BodyError::Timeout))));
                }
                if let Some(data) = frame.data_ref() {
                    active.received += data.len() as u64;
                    let max = active.limits.max_bytes;
                    if max > 0 && active.received > max {
                        return Poll::Ready(Some(Err(active.trip(BodyError::TooLarge))));
                    }
                    if let Some(counted) = &active.counted {
                        counted.store(active.received, Ordering::Release);
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(failure))) => Poll::Ready(Some(Err(failed(&*failure)))),
            Poll::Ready(None) => {
                let ended = active.clock.now();
                active.watched.ended_at.store(ended, Ordering::Release);
                // Complete: the timer is no longer needed.
                this.guard = None;
                Poll::Ready(None)
            }
            Poll::Pending => match timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(active.trip(BodyError::Timeout)))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
