//! The body of an upstream's answer, read from its connection as the
//! client's side asks for it, and the connection handed back to the idle
//! list once the body ended exactly where its framing said (and the
//! request's body, if it was still going up, went up whole).
//!
//! Data is passed on in the pieces the socket gave (no copy: each frame
//! shares the read buffer). A chunked body is decoded as hyper's client
//! decodes it (`http1/chunked.rs`; chunk extensions are dropped, trailer
//! fields passed on as a frame). A body that ends early, or whose chunk
//! framing is invalid, ends in an error, so the client's connection is cut
//! rather than given a short body that looks complete; a connection is
//! reused only when nothing followed the body.
//!
//! While the answer streams, the rest of a request body that was still
//! going up when the head came is sent on (`upload.rs`): an upstream may
//! answer before it read the whole request.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};

use super::exchange::{Conn, Framing};
use super::idle::IdleConns;
use super::stream::UpstreamStream;
use super::upload::UploadError;
use crate::http1::chunked::{Chunked, Decoded};
use crate::http1::transport::Transport;

/// Why an answer's body failed.
#[derive(Debug, thiserror::Error)]
pub enum AnswerBodyError {
    #[error("the upstream closed the connection before the response body ended")]
    CutShort,
    #[error("the upstream's chunked response body is badly framed")]
    BadChunk,
    #[error("reading the upstream response body failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the client's request body failed while the answer streamed")]
    ClientBody,
}

/// Where the body stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// This many bytes still to come.
    Length(u64),
    /// Chunked: the connection's decoder says where it stands.
    Chunked,
    /// Until the upstream closes.
    UntilClose,
    /// Ended.
    Done,
    /// Broke off: the error is handed on at the next poll.
    Failed,
    /// A `101`: no body; the connection is a tunnel's (see
    /// [`AnswerBody::take_tunnel`]).
    Switched,
}

/// An answer's body; see the module docs.
#[derive(Debug)]
pub struct AnswerBody<S: UpstreamStream> {
    state: State,
    /// Dropped (closing it) on an error, or when the connection cannot be
    /// reused; handed back when the body ends.
    conn: Option<Box<Conn<S>>>,
    keep_alive: bool,
    idle: Arc<IdleConns<S>>,
    /// The error the body broke off with, handed on at the next poll.
    failed: Option<AnswerBodyError>,
}

/// The upstream's side of a WebSocket tunnel: its connection, and what it
/// sent behind its `101`.
pub struct Tunnel {
    pub stream: Box<dyn TunnelStream>,
    pub early: BytesMut,
}

/// A stream a tunnel runs over: a pooled connection's, whichever its type,
/// or an HTTP/2 stream's.
pub trait TunnelStream: Transport {}

impl<T: UpstreamStream> TunnelStream for T {}

/// A server's HTTP/2 stream its extended `CONNECT` opened
/// (`extended_connect.rs`).
impl TunnelStream for hyper_util::rt::TokioIo<hyper::upgrade::Upgraded> {}

impl std::fmt::Debug for Tunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunnel")
            .field("early", &self.early.len())
            .finish()
    }
}

impl<S: UpstreamStream> AnswerBody<S> {
    pub fn new(
        mut conn: Box<Conn<S>>,
        framing: Framing,
        keep_alive: bool,
        switched: bool,
        idle: Arc<IdleConns<S>>,
    ) -> AnswerBody<S> {
        let state = match framing {
            _ if switched => State::Switched,
            Framing::Empty => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => {
                conn.chunked = Chunked::new();
                State::Chunked
            }
            Framing::UntilClose => State::UntilClose,
        };
        AnswerBody {
            state,
            conn: Some(conn),
            keep_alive,
            idle,
            failed: None,
        }
    }

    /// Never hands the connection back: it is closed when the body ends.
    pub fn discard_connection(&mut self) {
        self.keep_alive = false;
    }

    /// The connection of a `101`, for the tunnel.
    pub fn take_tunnel(&mut self) -> Option<Tunnel> {
        if self.state != State::Switched {
            return None;
        }
        self.state = State::Done;
        self.keep_alive = false;
        let conn = self.conn.take()?;
        let Conn { stream, read, .. } = *conn;
        Some(Tunnel {
            stream: Box::new(stream),
            early: read,
        })
    }

    /// The body ended: the connection goes back to the idle list if it can
    /// carry another exchange.
    fn finish(&mut self) {
        self.state = State::Done;
        if let Some(conn) = self.conn.take() {
            // Bytes after the end of the response are not an answer to
            // anything, and a request body not sent whole leaves the
            // upstream mid-request: the connection cannot be trusted.
            if self.keep_alive && conn.read.is_empty() && conn.upload.is_none() {
                self.idle.put_back(conn);
            }
        }
    }

    /// The body broke off. The error is handed on at the next poll, not
    /// this one: what was already passed on in this poll (often the head and
    /// the first data, read together) is then written to the client before
    /// the error cuts its connection, so the client sees a response cut
    /// short rather than nothing (hostile-input row F3).
    fn fail(
        &mut self,
        error: AnswerBodyError,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, AnswerBodyError>>> {
        self.state = State::Failed;
        self.conn = None;
        self.failed = Some(error);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Sends on what is ready of a request body still going up; whether the
/// connection may still be reused. An error only when the client's body
/// failed: an upstream that takes no more of it ends the upload (and the
/// connection's reuse), and its answer is still read.
fn poll_upload<S: UpstreamStream>(
    conn: &mut Conn<S>,
    cx: &mut Context<'_>,
) -> Result<bool, AnswerBodyError> {
    let Some(upload) = conn.upload.as_mut() else {
        return Ok(true);
    };
    match upload.poll(&mut conn.out, &mut conn.stream, cx) {
        Poll::Ready(Ok(())) => conn.upload = None,
        Poll::Ready(Err(UploadError::Client)) => return Err(AnswerBodyError::ClientBody),
        Poll::Ready(Err(UploadError::Upstream)) => {
            conn.upload = None;
            return Ok(false);
        }
        Poll::Pending => {}
    }
    Ok(true)
}

/// Reads more from the socket into the connection's buffer; `Ok(0)` when
/// the upstream closed it.
fn poll_fill<S: UpstreamStream>(
    conn: &mut Conn<S>,
    cx: &mut Context<'_>,
    want: usize,
) -> Poll<std::io::Result<usize>> {
    if conn.read.capacity() - conn.read.len() < want.min(4096) {
        conn.read.reserve(want);
    }
    conn.stream.poll_fill(cx, &mut conn.read)
}

/// Reads more of a body that has not ended: `Err` when the upstream closed
/// the connection.
fn poll_more<S: UpstreamStream>(
    conn: &mut Conn<S>,
    cx: &mut Context<'_>,
    want: usize,
) -> Poll<Result<(), AnswerBodyError>> {
    Poll::Ready(match ready!(poll_fill(conn, cx, want)) {
        Ok(0) => Err(AnswerBodyError::CutShort),
        Ok(_) => Ok(()),
        Err(error) => Err(error.into()),
    })
}

/// What a read wants to fill the buffer with: the rest of a known length,
/// between 8 and 256 KiB. A large download read in smaller pieces made
/// several times the system calls of hyper's (whose reads grow larger
/// still); 256 KiB brings them close to hyper's (docs/benchmarks-history.md,
/// "Plain exchanges").
fn want(remaining: u64) -> usize {
    usize::try_from(remaining)
        .unwrap_or(usize::MAX)
        .clamp(8 * 1024, 256 * 1024)
}

/// What [`AnswerBody::poll_frame`] answers.
type Polled = Poll<Option<Result<Frame<Bytes>, AnswerBodyError>>>;

/// One turn of [`AnswerBody::poll_frame`] in each framing: what it answers,
/// or `None` when it read more and goes round again. Each is called with
/// the connection still there.
impl<S: UpstreamStream> AnswerBody<S> {
    /// A body of `remaining` more bytes: what was read of it, up to them.
    #[inline(always)]
    fn length_turn(&mut self, cx: &mut Context<'_>, remaining: u64) -> Option<Polled> {
        let conn = self.conn.as_mut()?;
        if conn.read.is_empty() {
            return match poll_more(conn, cx, want(remaining)) {
                Poll::Ready(Ok(())) => None,
                Poll::Ready(Err(error)) => Some(self.fail(error, cx)),
                Poll::Pending => Some(Poll::Pending),
            };
        }
        let take = usize::try_from(remaining)
            .unwrap_or(usize::MAX)
            .min(conn.read.len());
        let data = conn.read.split_to(take).freeze();
        let left = remaining - take as u64;
        if left == 0 {
            self.finish();
        } else {
            self.state = State::Length(left);
        }
        Some(Poll::Ready(Some(Ok(Frame::data(data)))))
    }

    /// A body that ends with the connection: what was read of it.
    #[inline(always)]
    fn until_close_turn(&mut self, cx: &mut Context<'_>) -> Option<Polled> {
        let conn = self.conn.as_mut()?;
        if conn.read.is_empty() {
            return match poll_fill(conn, cx, 256 * 1024) {
                Poll::Ready(Ok(0)) => {
                    // The close is the end; the connection is gone with it.
                    self.conn = None;
                    self.state = State::Done;
                    Some(Poll::Ready(None))
                }
                Poll::Ready(Ok(_)) => None,
                Poll::Ready(Err(error)) => Some(self.fail(error.into(), cx)),
                Poll::Pending => Some(Poll::Pending),
            };
        }
        let data = conn.read.split().freeze();
        Some(Poll::Ready(Some(Ok(Frame::data(data)))))
    }

    /// A chunked body: its next chunk's data, its trailers or its end.
    #[inline(always)]
    fn chunked_turn(&mut self, cx: &mut Context<'_>) -> Option<Polled> {
        let conn = self.conn.as_mut()?;
        match conn.chunked.decode(&mut conn.read) {
            Ok(Decoded::Data(data)) => Some(Poll::Ready(Some(Ok(Frame::data(data))))),
            // The end: a server that writes the trailers (or drops them, to
            // an HTTP/1.1 client) asks for nothing after.
            Ok(Decoded::Trailers(fields)) => {
                self.finish();
                Some(Poll::Ready(Some(Ok(Frame::trailers(fields)))))
            }
            Ok(Decoded::End) => {
                self.finish();
                Some(Poll::Ready(None))
            }
            Ok(Decoded::More) => {
                let wanted = conn.chunked.remaining().map_or(8 * 1024, want);
                match poll_more(conn, cx, wanted) {
                    Poll::Ready(Ok(())) => None,
                    Poll::Ready(Err(error)) => Some(self.fail(error, cx)),
                    Poll::Pending => Some(Poll::Pending),
                }
            }
            Err(_) => Some(self.fail(AnswerBodyError::BadChunk, cx)),
        }
    }
}

impl<S: UpstreamStream> Body for AnswerBody<S> {
    type Data = Bytes;
    type Error = AnswerBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, AnswerBodyError>>> {
        let this = &mut *self;
        if let Some(error) = this.failed.take() {
            return Poll::Ready(Some(Err(error)));
        }
        if let Some(conn) = this.conn.as_mut() {
            if conn.upload.is_some() {
                match poll_upload(conn, cx) {
                    Ok(reusable) => this.keep_alive &= reusable,
                    Err(error) => return this.fail(error, cx),
                }
            }
        }
        loop {
            let turn = match this.state {
                _ if this.conn.is_none() => return Poll::Ready(None),
                State::Done => {
                    this.finish();
                    return Poll::Ready(None);
                }
                State::Failed | State::Switched => return Poll::Ready(None),
                State::Length(remaining) => this.length_turn(cx, remaining),
                State::UntilClose => this.until_close_turn(cx),
                State::Chunked => this.chunked_turn(cx),
            };
            if let Some(polled) = turn {
                return polled;
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done | State::Switched)
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            State::Done | State::Switched => SizeHint::with_exact(0),
            State::Length(remaining) => SizeHint::with_exact(remaining),
            _ => SizeHint::default(),
        }
    }
}

impl<S: UpstreamStream> Drop for AnswerBody<S> {
    fn drop(&mut self) {
        // A body with nothing to read (HEAD, 204, 304, length 0) may never
        // be polled: it is complete all the same. Anything else dropped
        // before its end leaves the connection mid-message: it closes.
        if self.state == State::Done {
            self.finish();
        }
    }
}
