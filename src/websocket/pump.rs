//! A tunnel's two directions: the client's bytes to the server, the
//! server's to the client, until the conversation is over
//! (docs/conversation.md, "WebSocket messages"): once a Close frame passed
//! each way, or either side's connection ended (end of stream or a
//! reset), what was read is passed on and both sides are shut at once; a
//! tunnel silent both ways for its idle timeout is closed by sluice with
//! a Close frame 1001 to each side.
//!
//! Each read goes into this thread's buffer ([`READING`]) and is written
//! on from there in the same poll, handed to the write without a copy
//! ([`Sending`]); only what the other side could not take at once is
//! copied and kept, in a buffer allocated for it and freed once written.
//! An idle tunnel, the usual kind, holds no buffer at all: what it keeps
//! of each direction's frames is a few counters
//! ([`FrameEnds`], a header's 14 bytes inline), and its idle clock one
//! timer that moves later without touching the timer wheel
//! ([`LazyTimer`]).
//!
//! [`plain`] copies, following where each side's frames end (their
//! headers only: the payload is never looked at). [`metered`] reads the
//! client's frames as they pass ([`Reader`]): the bytes of a data message
//! are held from the first byte of its first frame until its [`Gate`]
//! admits it — the client is not read meanwhile, while the server's bytes
//! keep flowing — and a message refused, over the size limit or breaking
//! RFC 6455 closes the tunnel: the server gets a masked Close frame at
//! once (the client's bytes stop at a frame boundary, since a header is
//! held until it is judged), and the client, after the server's frame in
//! flight ends, the Close frame [`Closing::frame`] holds.

use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::io;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::time::Instant;

use super::frames::{close_frame, FrameEnds, Reader, Step, Violation};
use crate::clock::Nanos;
use crate::http1::sending::Sending;
use crate::http1::transport::{self, Transport};
use crate::timer::LazyTimer;

/// The most read in one go.
const SCRATCH: usize = 16 * 1024;

thread_local! {
    /// What a tunnel's reads land in, this thread's: taken for a read and
    /// put back after it, so that no tunnel holds a buffer while it waits
    /// (a transport that fills it later keeps it for as long,
    /// `http1/transport.rs`).
    static READING: Cell<BytesMut> = Cell::new(BytesMut::new());
}

/// How long closing waits for what was read to be taken, for the
/// server's frame in flight to end and for the server to take its Close
/// frame, before the sockets are simply dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The Close frame a tunnel silent for its idle timeout gets on each side
/// (RFC 6455 §7.4.1: going away).
const IDLE_CODE: u16 = 1001;
const IDLE_REASON: &str = "idle timeout";

/// What a metered tunnel asks before each message its client sends.
pub trait Gate: Send + Sync {
    /// Whether the next message may pass; it may wait first (a rule in
    /// delay mode holding it), and the client is not read meanwhile.
    /// Boxed, so that a tunnel holds any gate (`dyn Gate`): one allocation
    /// per message, against the reads and writes each message costs.
    fn admit(&self) -> Admitting<'_>;
}

/// A [`Gate`]'s decision under way.
pub type Admitting<'g> = Pin<Box<dyn Future<Output = Admission> + Send + 'g>>;

/// A [`Gate`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// The message passes.
    Pass,
    /// The named rule refused it: the tunnel closes with 1008 (a gRPC
    /// call ends `RESOURCE_EXHAUSTED`, its pushback `retry_after`).
    Refused { rule: Arc<str>, retry_after: Nanos },
    /// It could not be decided (the store failed and `on_error = "deny"`):
    /// the tunnel closes with 1013, try again later.
    Unavailable,
}

/// The reason a refused message's Close frame gives.
fn refused_reason(rule: &str) -> String {
    format!("rate limited: {rule}")
}

/// How a tunnel ended.
#[derive(Debug)]
pub enum Ended {
    /// The conversation ended (`by`): what was read went on and both
    /// sides' write sides are shut. Bytes from the client, bytes from
    /// the server.
    Closed {
        from_client: u64,
        from_server: u64,
        by: EndedBy,
    },
    /// sluice closes it: the server was sent its Close frame and its
    /// stream is shut; the client's frame is to be sent, then its side
    /// closed (lingering, so that it reads the frame).
    Closing(Closing),
}

/// What ended a tunnel's conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndedBy {
    /// A Close frame passed each way (RFC 6455 §7.1): nothing more may
    /// come from either side.
    CloseHandshake,
    /// The client's connection ended (end of stream or a reset).
    Client,
    /// The server's connection ended (end of stream or a reset): the
    /// client may still be sending.
    Server,
}

/// A tunnel sluice closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closing {
    pub code: u16,
    pub reason: String,
    /// The client's Close frame; empty when the client's side is already
    /// shut (the server closed first), when the server's Close frame
    /// already went to it, or when its frame could not be ended.
    pub frame: Vec<u8>,
}

/// Copies both ways until the conversation is over or `idle_timeout`
/// passes with neither side sending (see the module docs). `client_early`
/// and `server_early` were read from each side before the tunnel began
/// (behind the handshake's head, behind the `101`) and go first (owned,
/// so that they are freed once written, as anything kept is).
pub async fn plain<C, S>(
    client: &mut C,
    server: &mut S,
    (client_early, server_early): (Vec<u8>, Vec<u8>),
    idle_timeout: Duration,
) -> io::Result<Ended>
where
    C: Transport + ?Sized,
    S: Transport + ?Sized,
{
    let mut inbound = Flow::new(FrameEnds::default(), client_early);
    let mut outbound = Flow::new(FrameEnds::default(), server_early);
    let mut idle = Idle::new(idle_timeout);
    let ending = poll_fn(|cx| {
        // These flows only copy: they stop only at their source's end.
        if inbound.poll(cx, client, server)?.is_ready() {
            return Poll::Ready(Ok::<_, io::Error>(Ending::Over(EndedBy::Client)));
        }
        if outbound.poll(cx, server, client)?.is_ready() {
            return Poll::Ready(Ok(Ending::Over(EndedBy::Server)));
        }
        poll_quiet(cx, &inbound, &outbound, &mut idle).map(Ok)
    })
    .await?;
    Ok(end(ending, &mut inbound, &mut outbound, client, server).await)
}

/// Copies both ways as [`plain`] does, counting and checking the client's
/// messages (see the module docs): each admitted by `gate`, none over
/// `max_message` bytes, reserved bits allowed only as `rsv_allowed` says
/// (the extensions the `101` accepted,
/// [`super::frames::rsv_for_extensions`]).
pub async fn metered<C, S, G>(
    client: &mut C,
    server: &mut S,
    (client_early, server_early): (Vec<u8>, Vec<u8>),
    gate: &G,
    (max_message, rsv_allowed): (u64, u8),
    idle_timeout: Duration,
) -> io::Result<Ended>
where
    C: Transport + ?Sized,
    S: Transport + ?Sized,
    G: Gate + ?Sized,
{
    let mut inbound = Flow::new(Reader::new(max_message, rsv_allowed), client_early);
    let mut outbound = Flow::new(FrameEnds::default(), server_early);
    let mut idle = Idle::new(idle_timeout);
    let ending = loop {
        let next = poll_fn(|cx| {
            // The server's side first: it flows whatever the client does.
            if outbound.poll(cx, server, client)?.is_ready() {
                return Poll::Ready(Ok::<_, io::Error>(Next::End(Ending::Over(EndedBy::Server))));
            }
            if let Poll::Ready(stop) = inbound.poll(cx, client, server)? {
                return Poll::Ready(Ok(match stop {
                    Stop::End => Next::End(Ending::Over(EndedBy::Client)),
                    Stop::Message(_) => Next::Message,
                    Stop::Close(violation) => Next::End(Ending::Close {
                        code: violation.code(),
                        reason: violation.reason().to_owned(),
                        to_server: true,
                    }),
                }));
            }
            poll_quiet(cx, &inbound, &outbound, &mut idle).map(|ending| Ok(Next::End(ending)))
        })
        .await?;
        let ending = match next {
            Next::End(ending) => ending,
            Next::Message => {
                // A message: the client is not read while it waits; the
                // server's bytes go on.
                let mut admission = pin!(gate.admit());
                let admitted = poll_fn(|cx| {
                    if let Poll::Ready(admitted) = admission.as_mut().poll(cx) {
                        return Poll::Ready(Ok::<_, io::Error>(Some(admitted)));
                    }
                    // Waiting: what came before the message goes now.
                    let _ = inbound.poll_flush(cx, server)?;
                    if outbound.poll(cx, server, client)?.is_ready() {
                        return Poll::Ready(Ok(None));
                    }
                    Poll::Pending
                })
                .await?;
                let (code, reason) = match admitted {
                    // The server ended while the message waited: it never
                    // passes.
                    None => break Ending::Over(EndedBy::Server),
                    Some(Admission::Pass) => {
                        inbound.admitted();
                        continue;
                    }
                    Some(Admission::Refused { rule, .. }) => (1008, refused_reason(&rule)),
                    Some(Admission::Unavailable) => {
                        (1013, "try again later: limits unavailable".to_owned())
                    }
                };
                // The refused message's header is held: the server's
                // bytes end at a frame boundary.
                Ending::Close {
                    code,
                    reason,
                    to_server: true,
                }
            }
        };
        break ending;
    };
    Ok(end(ending, &mut inbound, &mut outbound, client, server).await)
}

/// Where a metered tunnel's main loop stopped.
enum Next {
    /// A message waits for admission.
    Message,
    /// The tunnel ends.
    End(Ending),
}

/// How a tunnel is to end.
enum Ending {
    /// Its conversation is over: what was read goes on, then both sides
    /// are shut.
    Over(EndedBy),
    /// sluice closes it with `code` and `reason`: a Close frame to the
    /// server when `to_server` (its bytes so far end at a frame boundary)
    /// and none passed to it yet, and one to the client likewise.
    Close {
        code: u16,
        reason: String,
        to_server: bool,
    },
}

/// While both directions wait for bytes: whether a Close frame has
/// passed each way (the conversation is over), or the idle clock ran out.
fn poll_quiet<I: Inspect>(
    cx: &mut Context<'_>,
    inbound: &Flow<I>,
    outbound: &Flow<FrameEnds>,
    idle: &mut Idle,
) -> Poll<Ending> {
    if inbound.passed_close() && outbound.passed_close() {
        return Poll::Ready(Ending::Over(EndedBy::CloseHandshake));
    }
    ready!(idle.poll(cx, inbound.moved.wrapping_add(outbound.moved)));
    Poll::Ready(Ending::Close {
        code: IDLE_CODE,
        reason: IDLE_REASON.to_owned(),
        to_server: inbound.inspect.at_boundary(),
    })
}

/// A tunnel's idle clock: it runs out once no byte moved either way for
/// its timeout. Moving it later costs a clock read per poll that moved
/// bytes, and nothing in tokio's timer wheel ([`LazyTimer`]).
struct Idle {
    timeout: Duration,
    timer: LazyTimer,
    /// Bytes moved both ways when last looked at.
    moved: u64,
    /// When bytes last moved (or the tunnel began).
    since: Instant,
}

impl Idle {
    fn new(timeout: Duration) -> Idle {
        Idle {
            timeout,
            timer: LazyTimer::new(),
            moved: 0,
            since: Instant::now(),
        }
    }

    /// Ready once nothing moved for the timeout; `moved` is the bytes
    /// moved both ways so far.
    fn poll(&mut self, cx: &mut Context<'_>, moved: u64) -> Poll<()> {
        if moved != self.moved {
            self.moved = moved;
            self.since = Instant::now();
        }
        match self.since.checked_add(self.timeout) {
            Some(deadline) => self.timer.poll_until(cx, deadline),
            // Past what the clock can tell: never.
            None => Poll::Pending,
        }
    }
}

/// Ends a tunnel as `ending` says, within [`CLOSE_GRACE`] (a side that
/// takes nothing longer is dropped without the rest).
async fn end<I, C, S>(
    ending: Ending,
    inbound: &mut Flow<I>,
    outbound: &mut Flow<FrameEnds>,
    client: &mut C,
    server: &mut S,
) -> Ended
where
    I: Inspect,
    C: Transport + ?Sized,
    S: Transport + ?Sized,
{
    match ending {
        Ending::Over(by) => {
            let finished = poll_fn(|cx| {
                let to_server = inbound.poll_finish(cx, server);
                let to_client = outbound.poll_finish(cx, client);
                match (to_server, to_client) {
                    (Poll::Ready(()), Poll::Ready(())) => Poll::Ready(()),
                    _ => Poll::Pending,
                }
            });
            let _ = tokio::time::timeout(CLOSE_GRACE, finished).await;
            Ended::Closed {
                from_client: inbound.moved,
                from_server: outbound.moved,
                by,
            }
        }
        Ending::Close {
            code,
            reason,
            to_server,
        } => {
            let to_server = to_server && !inbound.passed_close();
            let closing = async {
                // What was admitted before goes first.
                let _ = poll_fn(|cx| inbound.poll_flush(cx, server)).await;
                close(outbound, client, server, (code, &reason), to_server).await
            };
            let frame = tokio::time::timeout(CLOSE_GRACE, closing)
                .await
                .unwrap_or_default();
            Ended::Closing(Closing {
                code,
                reason,
                frame,
            })
        }
    }
}

/// Closes a tunnel with `code` and `reason`: the server's Close frame
/// (masked: sluice is its client, RFC 6455 §5.3) at once when `to_server`,
/// then its stream shut; the server's frame in flight to the client
/// finished, and the client's Close frame returned to be sent (none when
/// the server's Close frame already went to it).
async fn close<C, S>(
    outbound: &mut Flow<FrameEnds>,
    client: &mut C,
    server: &mut S,
    (code, reason): (u16, &str),
    to_server: bool,
) -> Vec<u8>
where
    C: Transport + ?Sized,
    S: Transport + ?Sized,
{
    if to_server {
        let mask: [u8; 4] = rand::random();
        let _ = transport::send_all(server, close_frame(code, reason, Some(mask)).into()).await;
    }
    let _ = poll_fn(|cx| server.poll_close(cx)).await;
    // The client's frame goes between two of the server's.
    let ended = poll_fn(|cx| outbound.poll_to_boundary(cx, server, client)).await;
    match ended {
        Ok(true) if !outbound.passed_close() => close_frame(code, reason, None),
        _ => Vec::new(),
    }
}

/// What a [`Flow`] stopped at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Its source ended and everything read was written.
    End,
    /// A message begins with the next this many bytes (its header): the
    /// flow waits until [`Flow::admitted`].
    Message(usize),
    /// The source broke the protocol: nothing more is written.
    Close(Violation),
}

/// How a flow decides which bytes pass, and what it tells of the frames
/// that went by.
trait Inspect {
    fn step(&mut self, input: &[u8]) -> Step;
    /// Whether the bytes decided so far end at a frame boundary.
    fn at_boundary(&self) -> bool;
    /// Whether a Close frame was decided whole.
    fn saw_close(&self) -> bool;
}

impl Inspect for Reader {
    #[inline]
    fn step(&mut self, input: &[u8]) -> Step {
        Reader::step(self, input)
    }

    fn at_boundary(&self) -> bool {
        // A header still arriving is undecided: it has not passed.
        self.at_frame_start()
    }

    fn saw_close(&self) -> bool {
        Reader::saw_close(self)
    }
}

/// Everything passes; where its frames end is followed.
impl Inspect for FrameEnds {
    #[inline]
    fn step(&mut self, input: &[u8]) -> Step {
        if input.is_empty() {
            return Step::More;
        }
        self.saw(input);
        Step::Pass(input.len())
    }

    fn at_boundary(&self) -> bool {
        FrameEnds::at_boundary(self)
    }

    fn saw_close(&self) -> bool {
        FrameEnds::saw_close(self)
    }
}

/// One direction: bytes read from a source, decided by `inspect`, written
/// to a sink.
struct Flow<I> {
    inspect: I,
    /// Decided bytes on their way to the sink, owned (a transport holds
    /// them while its write is in flight). No allocation once written.
    out: Sending,
    /// Bytes read and not yet decided: a header still arriving, or a
    /// message waiting for admission. No allocation when there are none.
    kept: Vec<u8>,
    /// What deciding stopped at, reported once the bytes before it are
    /// written.
    stopped: Option<Stop>,
    /// The source ended.
    eof: bool,
    /// The sink's write side was shut.
    shut: bool,
    /// Bytes written to the sink.
    moved: u64,
}

impl<I: Inspect> Flow<I> {
    /// A flow whose source already gave `early`.
    fn new(inspect: I, early: Vec<u8>) -> Flow<I> {
        let mut flow = Flow {
            inspect,
            out: Sending::default(),
            kept: early,
            stopped: None,
            eof: false,
            shut: false,
            moved: 0,
        };
        flow.decide(0);
        flow
    }

    /// Decides as much of the kept bytes after `from` (decided already) as
    /// can be, and moves what passes to [`out`](Flow::out).
    fn decide(&mut self, from: usize) {
        let (decided, stopped) = decide(&mut self.inspect, &self.kept[from..]);
        self.stopped = stopped;
        let passing = from + decided;
        if passing == self.kept.len() && self.out.is_empty() {
            // All of it, with nothing ahead of it: the buffer itself goes.
            self.out = Sending::copied(std::mem::take(&mut self.kept));
        } else if passing > 0 {
            self.out.buffer().extend_from_slice(&self.kept[..passing]);
            self.kept.drain(..passing);
            if self.kept.is_empty() {
                self.kept = Vec::new();
            }
        }
    }

    /// A message this flow stopped at was admitted: it passes.
    fn admitted(&mut self) {
        if let Some(Stop::Message(header)) = self.stopped.take() {
            self.decide(header);
        }
    }

    /// Passes on what is decided, then shuts the sink's write side:
    /// `Ready` once done, or once the sink failed.
    fn poll_finish<W: Transport + ?Sized>(
        &mut self,
        cx: &mut Context<'_>,
        sink: &mut W,
    ) -> Poll<()> {
        if ready!(self.poll_flush(cx, sink)).is_ok() {
            let _ = ready!(self.poll_shut(cx, sink));
        }
        Poll::Ready(())
    }

    /// Whether a Close frame passed: decided whole, and written.
    fn passed_close(&self) -> bool {
        self.inspect.saw_close() && self.out.is_empty()
    }

    /// Shuts the sink's write side, once.
    fn poll_shut<W: Transport + ?Sized>(
        &mut self,
        cx: &mut Context<'_>,
        sink: &mut W,
    ) -> Poll<io::Result<()>> {
        if !self.shut {
            // A sink already gone is shut enough.
            let _ = ready!(sink.poll_close(cx));
            self.shut = true;
        }
        Poll::Ready(Ok(()))
    }

    /// Copies until the source's bytes stopped: a message to admit (at
    /// once, so that messages admitted without waiting go on in one write
    /// with what came before them), or, once what is decided is written,
    /// a violation or the end.
    fn poll<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        source: &mut R,
        sink: &mut W,
    ) -> Poll<io::Result<Stop>>
    where
        R: Transport + ?Sized,
        W: Transport + ?Sized,
    {
        loop {
            if let Some(stop @ Stop::Message(_)) = self.stopped {
                return Poll::Ready(Ok(stop));
            }
            ready!(self.poll_flush(cx, sink))?;
            if let Some(stop) = self.stopped {
                return Poll::Ready(Ok(stop));
            }
            if self.eof {
                return Poll::Ready(Ok(Stop::End));
            }
            ready!(self.poll_read(cx, source, sink, SCRATCH))?;
        }
    }

    /// Reads once, at most `limit` bytes, and decides and writes what it
    /// can of them; what the sink does not take at once is kept. The read
    /// lands in this thread's buffer ([`READING`]), so that an idle tunnel
    /// holds none; a read of less than all it holds (to a frame's end)
    /// lands in one of its size.
    fn poll_read<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        source: &mut R,
        sink: &mut W,
        limit: usize,
    ) -> Poll<io::Result<()>>
    where
        R: Transport + ?Sized,
        W: Transport + ?Sized,
    {
        let limit = limit.clamp(1, SCRATCH);
        let mut read = if limit < SCRATCH {
            BytesMut::with_capacity(limit)
        } else {
            READING.take()
        };
        read.reserve(limit);
        let polled = source.poll_fill(cx, &mut read);
        let result = match polled {
            Poll::Pending => Poll::Pending,
            // A reset ends the source as its end of stream does: what was
            // read before still goes on.
            Poll::Ready(Err(_)) => {
                self.eof = true;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Ok(_)) => self.take_read(cx, read.split().freeze(), sink),
        };
        if limit == SCRATCH {
            read.clear();
            READING.set(read);
        }
        result
    }

    /// [`Flow::poll_read`] with the bytes it read.
    fn take_read<W: Transport + ?Sized>(
        &mut self,
        cx: &mut Context<'_>,
        bytes: Bytes,
        sink: &mut W,
    ) -> Poll<io::Result<()>> {
        if bytes.is_empty() {
            // What is left undecided (a header cut off) never passes.
            self.eof = true;
            return Poll::Ready(Ok(()));
        }
        if !self.kept.is_empty() || !self.out.is_empty() {
            // A header begun in an earlier read: the new bytes join it.
            self.kept.extend_from_slice(&bytes);
            self.decide(0);
            return Poll::Ready(Ok(()));
        }
        // Written from the read's buffer when the sink takes it; only the
        // rest is copied and kept. Before a message, nothing is written
        // yet: admitted at once, it goes in the same write as what came
        // before it.
        let (decided, stopped) = decide(&mut self.inspect, &bytes);
        self.stopped = stopped;
        if matches!(stopped, Some(Stop::Message(_))) {
            self.out.buffer().extend_from_slice(&bytes[..decided]);
        } else if decided > 0 {
            self.out = Sending::of(bytes.slice(..decided));
            match sink.poll_send(cx, &mut self.out) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => self.moved += n as u64,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => {}
            }
            self.release_read();
        }
        if decided < bytes.len() {
            self.kept.extend_from_slice(&bytes[decided..]);
        }
        Poll::Ready(Ok(()))
    }

    /// Lets go of the read's buffer: what the sink did not take is copied
    /// (unless a write in flight holds it), so that the thread's buffer
    /// is free for the next read.
    fn release_read(&mut self) {
        if self.out.is_empty() {
            self.out = Sending::default();
        } else if self.out.left() > 0 {
            self.out.buffer();
        }
    }

    /// Writes what is decided; frees the buffer once it is all written.
    fn poll_flush<W: Transport + ?Sized>(
        &mut self,
        cx: &mut Context<'_>,
        sink: &mut W,
    ) -> Poll<io::Result<()>> {
        while !self.out.is_empty() {
            match ready!(sink.poll_send(cx, &mut self.out))? {
                0 => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                n => self.moved += n as u64,
            }
        }
        self.out = Sending::default();
        Poll::Ready(Ok(()))
    }
}

impl Flow<FrameEnds> {
    /// Copies the rest of the server's frame in flight, reading no further:
    /// `true` once its bytes so far end with a whole frame, written;
    /// `false` when the server ended first.
    fn poll_to_boundary<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        source: &mut R,
        sink: &mut W,
    ) -> Poll<io::Result<bool>>
    where
        R: Transport + ?Sized,
        W: Transport + ?Sized,
    {
        loop {
            ready!(self.poll_flush(cx, sink))?;
            if self.shut {
                return Poll::Ready(Ok(false));
            }
            if self.inspect.at_boundary() {
                return Poll::Ready(Ok(true));
            }
            if self.eof {
                return Poll::Ready(Ok(false));
            }
            let limit = self.inspect.to_boundary();
            ready!(self.poll_read(cx, source, sink, limit))?;
        }
    }
}

/// Steps `inspect` over `input` as far as it decides: how many bytes pass,
/// and what stopped it (`None`: it wants more).
#[inline]
fn decide(inspect: &mut impl Inspect, input: &[u8]) -> (usize, Option<Stop>) {
    let mut decided = 0;
    loop {
        match inspect.step(&input[decided..]) {
            Step::Pass(n) => decided += n,
            Step::More => return (decided, None),
            Step::Message(header) => return (decided, Some(Stop::Message(header))),
            Step::Close(violation) => return (decided, Some(Stop::Close(violation))),
        }
    }
}

#[cfg(test)]
mod tests;
