//! The client connection's socket, with the deadlines an edge proxy needs
//! kept from what the socket sees and what the connection tells it.
//!
//! [`DeadlineIo`] wraps the `TcpStream` (or its TLS stream) and keeps three
//! clocks, from what it sees on the socket and from the exchanges in
//! flight (sluice's HTTP/1.1 server tells it in plain fields; hyper's
//! HTTP/2 server's service futures through [`Exchanges`]):
//!
//! - **head** (`header_read_timeout`): from the accept until the server
//!   has read the first request's head (as nginx's `client_header_timeout`),
//!   and from the first byte of each later request until its head is read.
//!   A head that is still incomplete then gets a 408 problem document and
//!   the connection is closed, however fast the client trickles (as
//!   HAProxy's `timeout http-request`); a new connection that has sent
//!   nothing at all is closed quietly, at `idle_timeout` if that comes
//!   first, so silent sockets cannot fill `max_connections`. Over HTTP/2
//!   the first request must arrive within it too (the connection then
//!   closes quietly), and so must the rest of any header block the client
//!   has begun: a `HEADERS` frame whose last `CONTINUATION` does not come
//!   in time closes the connection, whatever is in flight on it
//!   (`server/h2_frames.rs` finds the blocks).
//! - **idle** (`idle_timeout`): from the end of the last response until
//!   the next byte. The connection is then closed quietly, as nginx's
//!   `keepalive_timeout` does.
//! - **send** (`send_timeout`): while a write makes no progress because the
//!   client does not read. The connection is then dropped, which drops the
//!   response body and so the upstream exchange behind it (nginx's
//!   `send_timeout`).
//!
//! Between requests of sluice's own server a fourth clock may run, shorter
//! than the idle one: **quiet** ([`QUIET_AFTER`]), after which a read tells
//! the connection it may give back what it holds for requests (see
//! [`DeadlineIo::report_quiet`]); the idle clock runs on from the same
//! instant.
//!
//! While a request is in the service none of the read clocks run (but an
//! HTTP/2 header block's): the body has its own deadline
//! ([`crate::proxy::deadline`]) and a slow upstream has `upstream_timeout`.
//! An HTTP/2 connection (its server says so) keeps only the idle clock
//! between its streams, an upgraded one (a tunnel) only the send clock. An
//! HTTP/2 stream whose client takes nothing of its answer has a send clock
//! of its own (`server/http2/stalled.rs`): the socket's sees only the
//! connection.
//!
//! A connection that closes with an answer of its own (the 408, or the
//! server's refusal of a head) writes it here and then reads, dropping what
//! the client still sends for up to 2 s or 1 MiB before closing, so the
//! close does not reset the connection before the client read the answer
//! (a lingering close, as nginx's `lingering_close`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::h2_frames::FrameScan;
use crate::http1::sending::Sending;
use crate::http1::transport::Transport;
use crate::problem::{self, Layout};
use crate::timer::LazyTimer;

/// The `[server]` settings a connection enforces.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub send_timeout: Duration,
    /// An upgraded connection (a tunnel) silent both ways this long is
    /// closed (`server/http1/tunnel.rs`).
    pub tunnel_idle_timeout: Duration,
}

/// What hyper's HTTP/2 service tells the connection's socket: how many of
/// its requests are in flight (from the service call until the response
/// body is sent or dropped). sluice's own server tells it directly
/// ([`DeadlineIo::exchange_began`]).
#[derive(Debug, Default)]
pub struct Exchanges {
    in_flight: AtomicUsize,
    /// Requests the service received so far: an exchange may begin and end
    /// between two reads, and must still end the head phase.
    calls: AtomicUsize,
    /// The connection task, parked on a read while a request was in
    /// flight: woken when the last one ends, so the idle clock starts even
    /// though no byte arrives.
    reader: Mutex<Option<Waker>>,
}

impl Exchanges {
    /// Counts a request as in flight until the returned guard is dropped.
    pub fn start(self: &Arc<Exchanges>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.calls.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }

    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }

    /// Asks to be woken when the connection stops being busy; false when it
    /// already did.
    fn wake_when_idle(&self, waker: &Waker) -> bool {
        let mut reader = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        if !self.busy() {
            return false;
        }
        match &mut *reader {
            Some(parked) if parked.will_wake(waker) => {}
            parked => *parked = Some(waker.clone()),
        }
        true
    }
}

/// A request in flight on its connection; see [`Exchanges::start`].
#[derive(Debug)]
pub struct InFlight(Arc<Exchanges>);

impl InFlight {
    /// Another exchange on the same connection: a WebSocket that outlives
    /// its request (`server/http2/tunnel.rs`), which keeps the connection
    /// busy, not idle.
    pub fn another(&self) -> InFlight {
        self.0.start()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            let parked = self
                .0
                .reader
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            if let Some(waker) = parked {
                waker.wake();
            }
        }
    }
}

/// Where the connection is, as far as the read clocks are concerned.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Accepted at `since`, and not a byte of a request read yet.
    Opening { since: Option<Instant> },
    /// Waiting for (the rest of) a request head that began at `since`.
    Head { since: Option<Instant> },
    /// Between exchanges since `since`, no byte of a next request yet.
    Idle { since: Option<Instant> },
    /// A request is in the service.
    Busy,
}

/// How long a connection between requests waits, holding what its requests
/// need, before it gives it back (see [`DeadlineIo::report_quiet`]). A
/// connection under load never waits that long, and its quiet clock (the
/// read clocks' timer, armed earlier) fires once per period: longer would
/// hold the memory of used connections longer, shorter would wake busy
/// connections more often for nothing.
const QUIET_AFTER: Duration = Duration::from_secs(10);

/// What happens when a read clock runs out.
#[derive(Debug, Clone, Copy)]
enum Expiry {
    /// `header_read_timeout`: a 408, and the connection closes.
    Head,
    /// `header_read_timeout` in an HTTP/2 header block: the connection
    /// closes (nothing to answer a stream with that never began).
    HeaderBlock,
    /// `idle_timeout`: the connection closes quietly.
    Idle,
    /// [`QUIET_AFTER`], with [`DeadlineIo::report_quiet`] on: said once.
    Quiet,
}

/// What an HTTP/2 connection's reads tell its head clock.
#[derive(Debug)]
struct Http2Reads {
    frames: FrameScan,
    /// Since when a header block has been open, if one is.
    block_since: Option<Instant>,
}

impl Http2Reads {
    /// Reads `bytes`, the next the client sent: a header block left open
    /// by them starts its clock, one they end stops it.
    fn read(&mut self, bytes: &[u8]) {
        self.frames.read(bytes);
        match (self.frames.block_open(), self.block_since) {
            (true, None) => self.block_since = Some(Instant::now()),
            (false, Some(_)) => self.block_since = None,
            _ => {}
        }
    }

    /// Since when a header block has been open, if one is.
    fn block_since(&self) -> Option<Instant> {
        self.block_since
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct DeadlineIo<S> {
    inner: S,
    limits: ConnectionLimits,
    exchanges: Arc<Exchanges>,
    /// An exchange of sluice's own server is in flight (see
    /// [`DeadlineIo::exchange_began`]).
    own_busy: bool,
    /// Exchanges sluice's own server began.
    own_calls: usize,
    /// Whether a read that finds the connection quiet says so (see
    /// [`DeadlineIo::report_quiet`]).
    report_quiet: bool,
    phase: Phase,
    /// [`DeadlineIo::calls`] when the phase was last updated.
    calls_seen: usize,
    /// The connection speaks HTTP/2: between streams it is idle, never
    /// reading a head. Boxed: only HTTP/2 connections scan their frames.
    http2: Option<Box<Http2Reads>>,
    /// A tunnel: no read clock runs.
    upgraded: bool,
    /// The read clocks' timer: the idle deadline moves later after every
    /// exchange, which a [`LazyTimer`] does without touching tokio's wheel.
    read_timer: LazyTimer,
    send_timer: Option<Pin<Box<Sleep>>>,
    /// Whether `send_timer` runs (a write is blocked).
    send_blocked: bool,
    /// An answer of our own, on its way out; the connection then closes.
    answer: Option<Answer>,
    /// Once our own answer is out, reads see the end of the stream.
    answered: bool,
}

/// Our own answer's progress.
#[derive(Debug)]
enum Answer {
    /// The response, as far as it is still to write.
    Writing(Sending),
    /// Written and the write side shut: reading what the client still
    /// sends, so that closing with unread data does not reset the
    /// connection before the client read the answer (a lingering close, as
    /// nginx's `lingering_close`).
    Lingering {
        drained: usize,
        until: Instant,
        /// What each read lands in, dropped.
        discard: BytesMut,
    },
}

/// How much a lingering close reads at a time.
const LINGER_READ: usize = 4096;

/// How long, and how many bytes, a lingering close reads at most.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;

impl<S> DeadlineIo<S> {
    /// Wraps a connection accepted just now.
    pub fn new(inner: S, limits: ConnectionLimits, exchanges: Arc<Exchanges>) -> DeadlineIo<S> {
        DeadlineIo {
            inner,
            limits,
            exchanges,
            own_busy: false,
            own_calls: 0,
            report_quiet: false,
            phase: Phase::Opening { since: None },
            calls_seen: 0,
            http2: None,
            upgraded: false,
            read_timer: LazyTimer::new(),
            send_timer: None,
            send_blocked: false,
            answer: None,
            answered: false,
        }
    }

    fn upgraded(&self) -> bool {
        self.upgraded
    }

    /// The connection speaks HTTP/2 from its first byte (hyper's server
    /// serves it); `read` is what was read of it so far (the preface
    /// first), which hyper reads before the socket.
    pub fn serve_http2(&mut self, read: &[u8]) {
        let mut reads = Box::new(Http2Reads {
            frames: FrameScan::new(),
            block_since: None,
        });
        reads.read(read);
        self.http2 = Some(reads);
    }

    /// How long the connection, once a tunnel, may be silent both ways.
    pub fn tunnel_idle_timeout(&self) -> Duration {
        self.limits.tunnel_idle_timeout
    }

    /// The connection is a tunnel from now on (a `101` was answered): its
    /// bytes are no longer HTTP/1 heads, and no read clock runs.
    pub fn mark_upgraded(&mut self) {
        self.upgraded = true;
    }

    /// sluice's own server began an exchange: the read clocks stop until
    /// [`DeadlineIo::exchange_ended`]. Its exchanges run in the connection's
    /// own task, one at a time, so they are counted here, in plain fields:
    /// [`Exchanges`], which hyper's service futures report to, costs seven
    /// atomic operations per request and wakes the task once more when the
    /// last exchange ends.
    pub fn exchange_began(&mut self) {
        self.own_busy = true;
        self.own_calls = self.own_calls.wrapping_add(1);
    }

    /// The exchange [`DeadlineIo::exchange_began`] announced is over (its
    /// response written, or dropped).
    pub fn exchange_ended(&mut self) {
        self.own_busy = false;
    }

    /// Whether reads say when the connection has been quiet, between
    /// exchanges, for [`QUIET_AFTER`]: such a read fails once with
    /// `ErrorKind::WouldBlock` (which no socket returns to an async read),
    /// and the connection, which holds the buffers and slots of its
    /// requests, gives them back (`server/connection.rs`). Off again once
    /// said; the idle clock runs on from the same instant. Only for
    /// sluice's own server: hyper must never see it.
    pub fn report_quiet(&mut self, on: bool) {
        // An idle clock that runs out first closes the connection anyway.
        self.report_quiet = on && self.limits.idle_timeout > QUIET_AFTER;
    }

    /// The first bytes of the connection's first request arrived: its
    /// head's clock runs on from the accept. Once per connection, out of
    /// the reads' line.
    #[cold]
    #[inline(never)]
    fn first_head_begun(&mut self) {
        if let Phase::Opening { since } = self.phase {
            self.phase = Phase::Head { since };
        }
    }

    /// Whether an HTTP/2 header block is open (see [`Http2Reads`]).
    #[inline]
    fn http2_block_open(&self) -> bool {
        match &self.http2 {
            None => false,
            Some(reads) => reads.block_since().is_some(),
        }
    }

    /// Exchanges begun so far, by either server.
    fn calls(&self) -> usize {
        self.exchanges.calls().wrapping_add(self.own_calls)
    }

    /// Whether an exchange of either server is in flight.
    fn busy(&self) -> bool {
        self.own_busy || self.exchanges.busy()
    }

    /// Moves between phases on what the service reports.
    fn update_phase(&mut self) {
        let calls = self.calls();
        if self.busy() {
            self.phase = Phase::Busy;
        } else if calls != self.calls_seen || matches!(self.phase, Phase::Busy) {
            // An exchange ended since the last read.
            self.phase = Phase::Idle { since: None };
        }
        self.calls_seen = calls;
    }

    /// The read deadline of the current phase, if one runs. A phase's
    /// start is read from the clock here, when a read first has to wait,
    /// not when the phase begins: a kept-alive client's next head usually
    /// arrives whole with its first read, and then no deadline is needed.
    /// The two instants differ by the microseconds of one poll.
    fn read_deadline(&mut self) -> Option<(Instant, Expiry)> {
        if self.upgraded() {
            return None;
        }
        if self.http2.is_some() {
            return self.http2_read_deadline();
        }
        match &mut self.phase {
            Phase::Opening { since } => Some(first_request_deadline(since, self.limits)),
            Phase::Head { since } => {
                let since = *since.get_or_insert_with(Instant::now);
                Some((since + self.limits.header_read_timeout, Expiry::Head))
            }
            Phase::Idle { since } => Some(idle_deadline(since, self.limits, self.report_quiet)),
            Phase::Busy => None,
        }
    }

    /// [`DeadlineIo::read_deadline`] over HTTP/2: a header block begun
    /// must end in time, whatever else goes on; before its first request
    /// the connection is timed as a silent one, between streams as an idle
    /// one. Out of line: sluice's own server never asks.
    #[inline(never)]
    fn http2_read_deadline(&mut self) -> Option<(Instant, Expiry)> {
        let block_since = self.http2.as_ref().and_then(|reads| reads.block_since());
        if let Some(since) = block_since {
            return Some((since + self.limits.header_read_timeout, Expiry::HeaderBlock));
        }
        match &mut self.phase {
            // No request yet (its preface, settings, pings are none).
            Phase::Opening { since } | Phase::Head { since } => {
                Some(first_request_deadline(since, self.limits))
            }
            Phase::Idle { since } => Some(idle_deadline(since, self.limits, self.report_quiet)),
            Phase::Busy => None,
        }
    }

    /// Polls the send clock for a blocked write; an error when it ran out.
    fn poll_send_deadline(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let deadline = if self.send_blocked {
            None
        } else {
            self.send_blocked = true;
            Some(Instant::now() + self.limits.send_timeout)
        };
        let timer = self.send_timer.get_or_insert_with(|| {
            Box::pin(tokio::time::sleep_until(
                deadline.unwrap_or_else(Instant::now),
            ))
        });
        if let Some(deadline) = deadline {
            timer.as_mut().reset(deadline);
        }
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for send_timeout",
            )),
            Poll::Pending => Ok(()),
        }
    }

    /// Queues an answer of our own; the connection closes after it.
    fn queue_answer(&mut self, answer: Vec<u8>) {
        self.answer = Some(Answer::Writing(Sending::copied(answer)));
    }

    /// Writes `answer` (a head refused by the server, whole), then closes
    /// the connection, lingering as the module docs say.
    pub async fn answer_and_close(&mut self, answer: Vec<u8>)
    where
        S: Transport,
    {
        self.queue_answer(answer);
        let _ = std::future::poll_fn(|cx| self.poll_answer(cx)).await;
    }

    /// Closes after a last answer already written: the write side is shut,
    /// then what the client still sends is read and dropped for a while
    /// (an unread request body would otherwise reset the connection before
    /// the client read the answer).
    pub async fn close_lingering(&mut self)
    where
        S: Transport,
    {
        self.answer_and_close(Vec::new()).await;
    }
}

impl<S: Transport> DeadlineIo<S> {
    /// A read of the socket by `read` (how many bytes arrived), with the
    /// connection's clocks: what sluice's own server reads through
    /// [`Transport`] and hyper's through `AsyncRead`.
    #[inline(always)]
    fn poll_read_with(
        &mut self,
        cx: &mut Context<'_>,
        read: impl FnOnce(&mut S, &mut Context<'_>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        if self.answer.is_some() {
            ready!(self.poll_answer(cx))?;
        }
        if self.answered {
            // What follows our answer is not read: the connection closes.
            return Poll::Ready(Ok(0));
        }
        self.update_phase();
        match read(&mut self.inner, cx) {
            Poll::Ready(Ok(arrived)) => {
                if arrived > 0 && self.http2.is_none() && !self.upgraded() {
                    match self.phase {
                        Phase::Idle { .. } => self.phase = Phase::Head { since: None },
                        Phase::Opening { .. } => self.first_head_begun(),
                        Phase::Head { .. } | Phase::Busy => {}
                    }
                }
                Poll::Ready(Ok(arrived))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => self.poll_read_clock(cx).map_ok(|()| 0),
        }
    }

    /// A write to the socket by `write` (how many bytes went), with the
    /// send clock running while it is blocked.
    #[inline(always)]
    fn poll_write_with(
        &mut self,
        cx: &mut Context<'_>,
        write: impl FnOnce(&mut S, &mut Context<'_>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        if self.answer.is_some() {
            ready!(self.poll_answer(cx))?;
        }
        match write(&mut self.inner, cx) {
            Poll::Ready(result) => {
                self.send_blocked = false;
                Poll::Ready(result)
            }
            Poll::Pending => {
                self.poll_send_deadline(cx)?;
                Poll::Pending
            }
        }
    }

    /// Pushes on what the socket holds, once our own answer, if any, is
    /// out.
    #[inline]
    fn poll_push_inner(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.answer.is_some() {
            ready!(self.poll_answer(cx))?;
        }
        self.inner.poll_push(cx)
    }

    /// Shuts the write side, after our own answer if one is queued.
    fn poll_close_inner(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_answer(cx))?;
        if self.answered {
            // Shut down after the answer already.
            return Poll::Ready(Ok(()));
        }
        self.inner.poll_close(cx)
    }

    /// While the socket has nothing to read: whether a read clock ran out
    /// (a 408 for a late head, a quiet close for an idle connection); a
    /// busy connection's clocks are stopped.
    #[inline]
    fn poll_read_clock(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // An HTTP/2 header block is timed even while requests are in flight.
        if matches!(self.phase, Phase::Busy) && !self.http2_block_open() {
            // An exchange of the own server ends in this task,
            // which reads again after it: nothing to be woken.
            if self.own_busy || self.exchanges.wake_when_idle(cx.waker()) {
                return Poll::Pending;
            }
            // The exchange ended meanwhile: idle from now.
            self.update_phase();
        }
        let Some((deadline, expiry)) = self.read_deadline() else {
            return Poll::Pending;
        };
        ready!(self.read_timer.poll_until(cx, deadline));
        match expiry {
            Expiry::Quiet => {
                self.report_quiet = false;
                Poll::Ready(Err(io::ErrorKind::WouldBlock.into()))
            }
            Expiry::Head => {
                self.queue_answer(problem_response(
                    408,
                    "the request head did not arrive within header_read_timeout",
                ));
                ready!(self.poll_answer(cx))?;
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "request head not complete within header_read_timeout",
                )))
            }
            Expiry::HeaderBlock => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "HTTP/2 header block not complete within header_read_timeout",
            ))),
            // Idle for idle_timeout: end of stream, a quiet close.
            Expiry::Idle => Poll::Ready(Ok(())),
        }
    }

    /// Writes the queued answer, if any, to its end, then lingers.
    fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            match &mut self.answer {
                None => return Poll::Ready(Ok(())),
                Some(Answer::Writing(out)) if out.is_empty() => {
                    ready!(self.inner.poll_close(cx))?;
                    let until = Instant::now() + LINGER_TIME;
                    self.answer = Some(Answer::Lingering {
                        drained: 0,
                        until,
                        discard: BytesMut::with_capacity(LINGER_READ),
                    });
                    // Starts the clock; it cannot have run out yet.
                    let _ = self.read_timer.poll_until(cx, until);
                }
                Some(Answer::Writing(out)) => match self.inner.poll_send(cx, out) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(_)) => self.send_blocked = false,
                    Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                    Poll::Pending => {
                        self.poll_send_deadline(cx)?;
                        return Poll::Pending;
                    }
                },
                Some(Answer::Lingering {
                    drained,
                    until,
                    discard,
                }) => {
                    discard.clear();
                    match self.inner.poll_fill(cx, discard) {
                        Poll::Ready(Ok(arrived)) if arrived > 0 => {
                            *drained += arrived;
                            if *drained <= LINGER_BYTES {
                                continue;
                            }
                        }
                        // The client closed, failed, or lingered too long.
                        Poll::Ready(_) => {}
                        Poll::Pending => {
                            if self.read_timer.poll_until(cx, *until).is_pending() {
                                return Poll::Pending;
                            }
                        }
                    }
                    self.answer = None;
                    self.answered = true;
                    return Poll::Ready(Ok(()));
                }
            }
        }
    }
}

impl<S: Transport> Transport for DeadlineIo<S> {
    // Always: it is most of a read of sluice's own server, which LLVM
    // otherwise leaves out of line once the clocks grew.
    #[inline(always)]
    fn poll_fill(&mut self, cx: &mut Context<'_>, buf: &mut BytesMut) -> Poll<io::Result<usize>> {
        self.poll_read_with(cx, |inner, cx| inner.poll_fill(cx, buf))
    }

    #[inline]
    fn poll_send(&mut self, cx: &mut Context<'_>, out: &mut Sending) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, |inner, cx| inner.poll_send(cx, out))
    }

    #[inline]
    fn poll_push(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_push_inner(cx)
    }

    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_close_inner(cx)
    }
}

/// For hyper's HTTP/2 server, which reads and writes tokio streams: the
/// same clocks over the same socket.
impl<S: Transport + AsyncRead + AsyncWrite> AsyncRead for DeadlineIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = self.get_mut();
        let read = this.poll_read_with(cx, |inner, cx| {
            Pin::new(inner)
                .poll_read(cx, buf)
                .map_ok(|()| buf.filled().len() - before)
        });
        if let (Poll::Ready(Ok(arrived)), Some(reads)) = (&read, &mut this.http2) {
            if *arrived > 0 {
                reads.read(&buf.filled()[before..]);
            }
        }
        read.map_ok(|_| ())
    }
}

impl<S: Transport + AsyncRead + AsyncWrite> AsyncWrite for DeadlineIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .poll_write_with(cx, |inner, cx| Pin::new(inner).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_with(cx, |inner, cx| {
            Pin::new(inner).poll_write_vectored(cx, bufs)
        })
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_push_inner(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_close_inner(cx)
    }
}

/// When a connection that has sent no request yet is closed: a silent one
/// is late and idle both, so whichever timeout comes first (from `since`,
/// its first wait, set now if not yet). Once per connection.
#[cold]
fn first_request_deadline(
    since: &mut Option<Instant>,
    limits: ConnectionLimits,
) -> (Instant, Expiry) {
    let since = *since.get_or_insert_with(Instant::now);
    let within = limits.header_read_timeout.min(limits.idle_timeout);
    (since + within, Expiry::Idle)
}

/// When a connection idle between requests since `since` (set now if not
/// yet) is told it is quiet, or closed.
#[inline]
fn idle_deadline(
    since: &mut Option<Instant>,
    limits: ConnectionLimits,
    report_quiet: bool,
) -> (Instant, Expiry) {
    let since = *since.get_or_insert_with(Instant::now);
    let (after, expiry) = if report_quiet {
        (QUIET_AFTER, Expiry::Quiet)
    } else {
        (limits.idle_timeout, Expiry::Idle)
    };
    (since + after, expiry)
}

/// A problem-document response that closes the connection, with an id of
/// its own (no request was read to keep one from).
fn problem_response(status: u16, detail: &str) -> Vec<u8> {
    let status = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_REQUEST);
    problem::closing_answer(status, detail, Layout::ByName)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::h2_frames::frame as h2_frame;

    fn limits(idle_timeout: Duration) -> ConnectionLimits {
        ConnectionLimits {
            header_read_timeout: Duration::from_secs(5),
            idle_timeout,
            send_timeout: Duration::from_secs(5),
            tunnel_idle_timeout: Duration::from_secs(300),
        }
    }

    /// A connection past its first exchange, between requests.
    fn kept_alive<S>(inner: S, limits: ConnectionLimits) -> DeadlineIo<S> {
        let mut io = DeadlineIo::new(inner, limits, Arc::default());
        io.phase = Phase::Idle { since: None };
        io
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_connection_is_told_once_and_its_idle_clock_runs_on() {
        use tokio::io::AsyncReadExt;
        let (_client, server) = tokio::io::duplex(64);
        let idle_timeout = Duration::from_secs(60);
        let mut io = kept_alive(server, limits(idle_timeout));
        io.report_quiet(true);
        let start = Instant::now();
        let mut buf = [0u8; 16];
        let told = io.read(&mut buf).await.unwrap_err();
        assert_eq!(told.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(start.elapsed(), QUIET_AFTER);
        // Once: the next read waits for the idle clock, which counts from
        // the same instant.
        assert_eq!(io.read(&mut buf).await.unwrap(), 0);
        assert_eq!(start.elapsed(), idle_timeout);
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_before_the_quiet_clock_are_read_and_a_head_is_never_quiet() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // Room for the 408, which is written, then lingered on.
        let (mut client, server) = tokio::io::duplex(4096);
        let mut io = kept_alive(server, limits(Duration::from_secs(60)));
        io.report_quiet(true);
        let start = Instant::now();
        let writing = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(9)).await;
            client.write_all(b"GET / HT").await.unwrap();
            client
        });
        let mut buf = [0u8; 16];
        assert_eq!(io.read(&mut buf).await.unwrap(), 8);
        let mut client = writing.await.unwrap();
        // A head begun: its own clock runs (5 s: a 408, then a lingering
        // close), and the quiet one not.
        assert_eq!(io.read(&mut buf).await.unwrap(), 0);
        assert_eq!(start.elapsed(), Duration::from_secs(14) + LINGER_TIME);
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert!(answer.starts_with(b"HTTP/1.1 408 "));
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_timeout_shorter_than_the_quiet_clock_just_closes() {
        use tokio::io::AsyncReadExt;
        let (_client, server) = tokio::io::duplex(64);
        let mut io = kept_alive(server, limits(Duration::from_secs(3)));
        io.report_quiet(true);
        let start = Instant::now();
        assert_eq!(io.read(&mut [0u8; 16]).await.unwrap(), 0);
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_connection_that_sends_nothing_is_closed_quietly_at_the_header_timeout() {
        use tokio::io::AsyncReadExt;
        let (mut client, server) = tokio::io::duplex(4096);
        let mut io = DeadlineIo::new(server, limits(Duration::from_secs(60)), Arc::default());
        let start = Instant::now();
        assert_eq!(io.read(&mut [0u8; 16]).await.unwrap(), 0);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        drop(io);
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert!(answer.is_empty(), "{answer:?}");
        // An idle timeout shorter than the header timeout comes first.
        let (_client, server) = tokio::io::duplex(64);
        let mut io = DeadlineIo::new(server, limits(Duration::from_secs(2)), Arc::default());
        let start = Instant::now();
        assert_eq!(io.read(&mut [0u8; 16]).await.unwrap(), 0);
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_head_is_timed_from_the_accept() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, server) = tokio::io::duplex(4096);
        let mut io = DeadlineIo::new(server, limits(Duration::from_secs(60)), Arc::default());
        let start = Instant::now();
        let writing = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(4)).await;
            client.write_all(b"GET / HT").await.unwrap();
            client
        });
        let mut buf = [0u8; 16];
        assert_eq!(io.read(&mut buf).await.unwrap(), 8);
        let mut client = writing.await.unwrap();
        assert_eq!(io.read(&mut buf).await.unwrap(), 0);
        assert_eq!(start.elapsed(), Duration::from_secs(5) + LINGER_TIME);
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert!(answer.starts_with(b"HTTP/1.1 408 "));
    }

    #[tokio::test(start_paused = true)]
    async fn an_http2_header_block_left_open_fails_the_reads_at_the_header_timeout() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, server) = tokio::io::duplex(4096);
        let exchanges = Arc::new(Exchanges::default());
        let mut io = DeadlineIo::new(server, limits(Duration::from_secs(60)), exchanges.clone());
        io.serve_http2(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        // A request in flight stops the other read clocks, not this one.
        let _in_flight = exchanges.start();
        tokio::time::sleep(Duration::from_secs(3)).await;
        client
            .write_all(&h2_frame(0x1, 0, b"\x82\x86"))
            .await
            .unwrap();
        let start = Instant::now();
        let mut buf = [0u8; 64];
        assert_eq!(io.read(&mut buf).await.unwrap(), 11);
        let error = io.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        // Its last frame in time: no clock left but the idle one, stopped
        // while the request is in flight.
        let (mut client, server) = tokio::io::duplex(4096);
        let mut io = DeadlineIo::new(server, limits(Duration::from_secs(60)), exchanges.clone());
        io.serve_http2(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        client
            .write_all(&h2_frame(0x1, 0, b"\x82\x86"))
            .await
            .unwrap();
        assert_eq!(io.read(&mut buf).await.unwrap(), 11);
        tokio::time::sleep(Duration::from_secs(4)).await;
        client
            .write_all(&h2_frame(0x9, 0x4, b"\x84"))
            .await
            .unwrap();
        assert_eq!(io.read(&mut buf).await.unwrap(), 10);
        let read = tokio::time::timeout(Duration::from_secs(30), io.read(&mut buf)).await;
        assert!(read.is_err(), "{read:?}");
    }
}
