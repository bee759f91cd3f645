//! A tunnel's two directions: the client's bytes to the server, the
//! server's to the client, until both sides closed (each side's end of
//! stream shuts the other's write side, as `tokio::io::copy_bidirectional`
//! does).
//!
//! Each read goes into a buffer on the stack of the poll that makes it,
//! and is written on from there in the same poll; only what the other
//! side could not take at once is kept, in a buffer allocated for it and
//! freed once written. An idle tunnel, the usual kind, holds no buffer at
//! all (docs/conversation.md, "WebSocket messages").
//!
//! [`plain`] copies. [`metered`] reads the client's frames as they pass
//! ([`Reader`]): the bytes of a data message are held from the first byte
//! of its first frame until its [`Gate`] admits it — the client is not
//! read meanwhile, while the server's bytes keep flowing — and a message
//! refused, over the size limit or breaking RFC 6455 closes the tunnel:
//! the server gets a masked Close frame at once (the client's bytes stop
//! at a frame boundary, since a header is held until it is judged), and
//! the client, after the server's frame in flight ends, the Close frame
//! [`Closing::frame`] holds.

use std::future::{poll_fn, Future};
use std::io;
use std::mem::MaybeUninit;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::frames::{close_frame, FrameEnds, Reader, Step, Violation};

/// The most read in one go: a read's stack buffer.
const SCRATCH: usize = 16 * 1024;

/// How long closing waits for the server's frame in flight to end and for
/// the server to take its Close frame, before the sockets are simply
/// dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

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
    /// The named rule refused it: the tunnel closes with 1008.
    Refused(Arc<str>),
    /// It could not be decided (the store failed and `on_error = "deny"`):
    /// the tunnel closes with 1013, try again later.
    Unavailable,
}

/// How a tunnel ended.
#[derive(Debug)]
pub enum Ended {
    /// Both sides closed (or one failed): bytes from the client, bytes
    /// from the server.
    Closed { from_client: u64, from_server: u64 },
    /// sluice closes it: the server was sent its Close frame and its
    /// stream is shut; the client's frame is to be sent, then its side
    /// closed (lingering, so that it reads the frame).
    Closing(Closing),
}

/// A tunnel sluice closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closing {
    pub code: u16,
    pub reason: String,
    /// The client's Close frame; empty when the client's side is already
    /// shut (the server closed first) or its frame could not be ended.
    pub frame: Vec<u8>,
}

/// Copies both ways until both sides closed. `client_early` and
/// `server_early` were read from each side before the tunnel began (behind
/// the handshake's head, behind the `101`) and go first (owned, so that
/// they are freed once written, as anything kept is).
pub async fn plain<C, S>(
    client: &mut C,
    server: &mut S,
    client_early: Vec<u8>,
    server_early: Vec<u8>,
) -> io::Result<Ended>
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut inbound = Flow::new(Copy, client_early);
    let mut outbound = Flow::new(Copy, server_early);
    poll_fn(|cx| {
        let inbound_done = inbound.poll_to_end(cx, client, server)?;
        let outbound_done = outbound.poll_to_end(cx, server, client)?;
        if inbound_done.is_ready() && outbound_done.is_ready() {
            return Poll::Ready(Ok(Ended::Closed {
                from_client: inbound.moved,
                from_server: outbound.moved,
            }));
        }
        Poll::Pending
    })
    .await
}

/// Copies both ways, counting and checking the client's messages (see the
/// module docs): each admitted by `gate`, none over `max_message` bytes,
/// reserved bits allowed only as `rsv_allowed` says (the extensions the
/// `101` accepted, [`super::frames::rsv_for_extensions`]).
pub async fn metered<C, S, G>(
    client: &mut C,
    server: &mut S,
    (client_early, server_early): (Vec<u8>, Vec<u8>),
    gate: &G,
    (max_message, rsv_allowed): (u64, u8),
) -> io::Result<Ended>
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
    G: Gate + ?Sized,
{
    let mut inbound = Flow::new(Reader::new(max_message, rsv_allowed), client_early);
    let mut outbound = Flow::new(FrameEnds::default(), server_early);
    loop {
        let stopped = poll_fn(|cx| {
            // The server's side first: it flows whatever the client does.
            let outbound_done = outbound.poll_to_end(cx, server, client)?;
            match ready!(inbound.poll(cx, client, server))? {
                Stop::End => {
                    ready!(inbound.poll_shut(cx, server))?;
                    ready!(outbound_done);
                    Poll::Ready(Ok::<_, io::Error>(Next::Ended))
                }
                Stop::Message(_) => Poll::Ready(Ok(Next::Message)),
                Stop::Close(violation) => Poll::Ready(Ok(Next::Broken(violation))),
            }
        })
        .await?;
        let (code, reason) = match stopped {
            Next::Ended => {
                return Ok(Ended::Closed {
                    from_client: inbound.moved,
                    from_server: outbound.moved,
                })
            }
            Next::Message => {
                // A message: the client is not read while it waits; the
                // server's bytes go on.
                let mut admission = pin!(gate.admit());
                let admitted = poll_fn(|cx| {
                    if let Poll::Ready(admitted) = admission.as_mut().poll(cx) {
                        return Poll::Ready(Ok::<_, io::Error>(admitted));
                    }
                    // Waiting: what came before the message goes now.
                    let _ = inbound.poll_flush(cx, server)?;
                    let _ = outbound.poll_to_end(cx, server, client)?;
                    Poll::Pending
                })
                .await?;
                match admitted {
                    Admission::Pass => {
                        inbound.admitted();
                        continue;
                    }
                    Admission::Refused(rule) => (1008, format!("rate limited: {rule}")),
                    Admission::Unavailable => {
                        (1013, "try again later: limits unavailable".to_owned())
                    }
                }
            }
            Next::Broken(violation) => (violation.code(), violation.reason().to_owned()),
        };
        let closing = async {
            // The messages admitted before the refused one go first.
            let _ = poll_fn(|cx| inbound.poll_flush(cx, server)).await;
            close(&mut outbound, client, server, code, reason).await
        };
        return Ok(Ended::Closing(
            tokio::time::timeout(CLOSE_GRACE, closing)
                .await
                .unwrap_or_else(|_| Closing {
                    code,
                    reason: String::new(),
                    frame: Vec::new(),
                }),
        ));
    }
}

/// Closes a metered tunnel with `code` and `reason`: the server's Close
/// frame (masked: sluice is its client, RFC 6455 §5.3) at once, then its
/// stream shut; the server's frame in flight to the client finished, and
/// the client's Close frame returned to be sent.
async fn close<C, S>(
    outbound: &mut Flow<FrameEnds>,
    client: &mut C,
    server: &mut S,
    code: u16,
    reason: String,
) -> Closing
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mask: [u8; 4] = rand::random();
    let to_server = close_frame(code, &reason, Some(mask));
    let _ = server.write_all(&to_server).await;
    let _ = server.shutdown().await;
    // The client's frame goes between two of the server's.
    let ended = poll_fn(|cx| outbound.poll_to_boundary(cx, server, client)).await;
    let frame = match ended {
        Ok(true) => close_frame(code, &reason, None),
        _ => Vec::new(),
    };
    Closing {
        code,
        reason,
        frame,
    }
}

/// Where a metered tunnel's client side stopped.
enum Next {
    /// Both sides ended.
    Ended,
    /// A message waits for admission.
    Message,
    /// The client broke RFC 6455 or the size limit.
    Broken(Violation),
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

/// How a flow decides which bytes pass.
trait Inspect {
    fn step(&mut self, input: &[u8]) -> Step;
}

/// Everything passes.
struct Copy;

impl Inspect for Copy {
    #[inline]
    fn step(&mut self, input: &[u8]) -> Step {
        if input.is_empty() {
            Step::More
        } else {
            Step::Pass(input.len())
        }
    }
}

impl Inspect for Reader {
    #[inline]
    fn step(&mut self, input: &[u8]) -> Step {
        Reader::step(self, input)
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
}

/// One direction: bytes read from a source, decided by `inspect`, written
/// to a sink.
struct Flow<I> {
    inspect: I,
    /// Bytes read and not yet written: `[..written]` are written (dead),
    /// `[written..decided]` may pass, the rest is undecided (a header
    /// still arriving, or a message waiting for admission). Empty, with no
    /// allocation, whenever everything read was written.
    kept: Vec<u8>,
    written: usize,
    decided: usize,
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
            kept: early,
            written: 0,
            decided: 0,
            stopped: None,
            eof: false,
            shut: false,
            moved: 0,
        };
        flow.decide();
        flow
    }

    /// Decides as much of the kept bytes as can be.
    fn decide(&mut self) {
        let (decided, stopped) = decide(&mut self.inspect, &self.kept[self.decided..]);
        self.decided += decided;
        self.stopped = stopped;
    }

    /// A message this flow stopped at was admitted: it passes.
    fn admitted(&mut self) {
        if let Some(Stop::Message(header)) = self.stopped.take() {
            self.decided += header;
            self.decide();
        }
    }

    /// Copies until the source ends (then the sink's write side is shut)
    /// or an error; `Ready(())` once done.
    fn poll_to_end<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        source: &mut R,
        sink: &mut W,
    ) -> Poll<io::Result<()>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        if self.shut {
            return Poll::Ready(Ok(()));
        }
        match ready!(self.poll(cx, source, sink))? {
            Stop::End => self.poll_shut(cx, sink),
            // A flow that only copies never stops otherwise.
            Stop::Message(_) | Stop::Close(_) => Poll::Pending,
        }
    }

    /// Shuts the sink's write side, once.
    fn poll_shut<W: AsyncWrite + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        sink: &mut W,
    ) -> Poll<io::Result<()>> {
        if !self.shut {
            // A sink already gone is shut enough.
            let _ = ready!(Pin::new(sink).poll_shutdown(cx));
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
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
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
    /// can of them; what the sink does not take at once is kept. Not
    /// inlined: its stack buffer stays in one frame of its own.
    #[inline(never)]
    fn poll_read<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        source: &mut R,
        sink: &mut W,
        limit: usize,
    ) -> Poll<io::Result<()>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let mut scratch = [MaybeUninit::<u8>::uninit(); SCRATCH];
        let mut read = ReadBuf::uninit(&mut scratch[..limit.clamp(1, SCRATCH)]);
        ready!(Pin::new(&mut *source).poll_read(cx, &mut read))?;
        let bytes = read.filled();
        if bytes.is_empty() {
            // What is left undecided (a header cut off) never passes.
            self.eof = true;
            return Poll::Ready(Ok(()));
        }
        if !self.kept.is_empty() {
            // A header begun in an earlier read: the new bytes join it.
            self.kept.drain(..self.written);
            self.decided -= self.written;
            self.written = 0;
            self.kept.extend_from_slice(bytes);
            self.decide();
            return Poll::Ready(Ok(()));
        }
        // Written from the stack when the sink takes it; only the rest is
        // kept. Before a message, nothing is written yet: admitted at
        // once, it goes in the same write as what came before it.
        let (decided, stopped) = decide(&mut self.inspect, bytes);
        let mut written = 0;
        if decided > 0 && !matches!(stopped, Some(Stop::Message(_))) {
            match Pin::new(&mut *sink).poll_write(cx, &bytes[..decided]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => written = n,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => {}
            }
            self.moved += written as u64;
        }
        if written < bytes.len() {
            self.kept.extend_from_slice(&bytes[written..]);
            self.decided = decided - written;
        }
        self.stopped = stopped;
        Poll::Ready(Ok(()))
    }

    /// Writes what is decided; frees the buffer once everything kept is
    /// written.
    fn poll_flush<W: AsyncWrite + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        sink: &mut W,
    ) -> Poll<io::Result<()>> {
        while self.written < self.decided {
            let pending = &self.kept[self.written..self.decided];
            match ready!(Pin::new(&mut *sink).poll_write(cx, pending))? {
                0 => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                n => {
                    self.written += n;
                    self.moved += n as u64;
                }
            }
        }
        if self.written == self.kept.len() && self.written > 0 {
            self.kept = Vec::new();
            self.written = 0;
            self.decided = 0;
        }
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
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
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
