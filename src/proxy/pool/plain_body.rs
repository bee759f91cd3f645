//! The body of a plain exchange's response, read from its connection as the
//! client's side asks for it, and the connection handed back to the idle
//! list once the body ended exactly where its framing said.
//!
//! Data is passed on in the pieces the socket gave (no copy: each frame
//! shares the read buffer). A chunked body is decoded as hyper's client
//! decodes it (`chunked.rs`; chunk extensions and trailer fields are
//! dropped, as nginx drops them). A body that ends early,
//! or whose chunk framing is invalid, ends in an error, so the client's
//! connection is cut rather than given a short body that looks complete; a
//! connection is reused only when nothing followed the body.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::AsyncReadExt;

use super::chunked::{Chunked, Decoded};
use super::plain::{Conn, Framing, IdleConns};
use super::stream::UpstreamStream;

/// Why a plain response body failed.
#[derive(Debug, thiserror::Error)]
pub enum PlainBodyError {
    #[error("the upstream closed the connection before the response body ended")]
    CutShort,
    #[error("the upstream's chunked response body is badly framed")]
    BadChunk,
    #[error("reading the upstream response body failed: {0}")]
    Io(#[from] std::io::Error),
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
}

/// A plain response body; see the module docs.
#[derive(Debug)]
pub struct PlainBody<S: UpstreamStream> {
    state: State,
    /// Dropped (closing it) on an error, or when the connection cannot be
    /// reused; handed back when the body ends.
    conn: Option<Box<Conn<S>>>,
    keep_alive: bool,
    idle: Arc<IdleConns<S>>,
    /// The error the body broke off with, handed on at the next poll.
    failed: Option<PlainBodyError>,
}

impl<S: UpstreamStream> PlainBody<S> {
    pub fn new(
        mut conn: Box<Conn<S>>,
        framing: Framing,
        keep_alive: bool,
        idle: Arc<IdleConns<S>>,
    ) -> PlainBody<S> {
        let state = match framing {
            Framing::Empty => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => {
                conn.chunked = Chunked::new();
                State::Chunked
            }
            Framing::UntilClose => State::UntilClose,
        };
        PlainBody {
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

    /// The body ended: the connection goes back to the idle list if it can
    /// carry another exchange.
    fn finish(&mut self) {
        self.state = State::Done;
        if let Some(conn) = self.conn.take() {
            // Bytes after the end of the response are not an answer to
            // anything: the connection cannot be trusted.
            if self.keep_alive && conn.read.is_empty() {
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
        error: PlainBodyError,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, PlainBodyError>>> {
        self.state = State::Failed;
        self.conn = None;
        self.failed = Some(error);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
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
    // `read_buf` through tokio's poll_read clears readiness after a short
    // read, so the next read waits for the reactor instead of trying.
    let read = conn.stream.read_buf(&mut conn.read);
    std::pin::pin!(read).poll(cx)
}

/// Reads more of a body that has not ended: `Err` when the upstream closed
/// the connection.
fn poll_more<S: UpstreamStream>(
    conn: &mut Conn<S>,
    cx: &mut Context<'_>,
    want: usize,
) -> Poll<Result<(), PlainBodyError>> {
    Poll::Ready(match ready!(poll_fill(conn, cx, want)) {
        Ok(0) => Err(PlainBodyError::CutShort),
        Ok(_) => Ok(()),
        Err(error) => Err(error.into()),
    })
}

/// What a read wants to fill the buffer with: the rest of a known length,
/// between 8 and 256 KiB. Reads of at most 64 KiB took four times the
/// system calls of hyper's (whose reads grow to 400 KiB) on a 1 MiB
/// download; at 256 KiB it is 6 reads and 4.7 writes per MiB against
/// hyper's 4.6 and 4.6 (docs/benchmarks-history.md).
fn want(remaining: u64) -> usize {
    usize::try_from(remaining)
        .unwrap_or(usize::MAX)
        .clamp(8 * 1024, 256 * 1024)
}

impl<S: UpstreamStream> Body for PlainBody<S> {
    type Data = Bytes;
    type Error = PlainBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, PlainBodyError>>> {
        let this = &mut *self;
        if let Some(error) = this.failed.take() {
            return Poll::Ready(Some(Err(error)));
        }
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match this.state {
                State::Done => {
                    this.finish();
                    return Poll::Ready(None);
                }
                State::Failed => return Poll::Ready(None),
                State::Length(remaining) => {
                    if conn.read.is_empty() {
                        if let Err(error) = ready!(poll_more(conn, cx, want(remaining))) {
                            return this.fail(error, cx);
                        }
                        continue;
                    }
                    let take = usize::try_from(remaining)
                        .unwrap_or(usize::MAX)
                        .min(conn.read.len());
                    let data = conn.read.split_to(take).freeze();
                    let left = remaining - take as u64;
                    if left == 0 {
                        this.finish();
                    } else {
                        this.state = State::Length(left);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                State::UntilClose => {
                    if conn.read.is_empty() {
                        match ready!(poll_fill(conn, cx, 256 * 1024)) {
                            Ok(0) => {
                                // The close is the end; the connection is
                                // gone with it.
                                this.conn = None;
                                this.state = State::Done;
                                return Poll::Ready(None);
                            }
                            Ok(_) => continue,
                            Err(error) => return this.fail(error.into(), cx),
                        }
                    }
                    let data = conn.read.split().freeze();
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                State::Chunked => match conn.chunked.decode(&mut conn.read) {
                    Ok(Decoded::Data(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Ok(Decoded::End) => {
                        this.finish();
                        return Poll::Ready(None);
                    }
                    Ok(Decoded::More) => {
                        let wanted = conn.chunked.remaining().map_or(8 * 1024, want);
                        if let Err(error) = ready!(poll_more(conn, cx, wanted)) {
                            return this.fail(error, cx);
                        }
                    }
                    Err(_) => return this.fail(PlainBodyError::BadChunk, cx),
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.state == State::Done
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            State::Done => SizeHint::with_exact(0),
            State::Length(remaining) => SizeHint::with_exact(remaining),
            _ => SizeHint::default(),
        }
    }
}

impl<S: UpstreamStream> Drop for PlainBody<S> {
    fn drop(&mut self) {
        // A body with nothing to read (HEAD, 204, 304, length 0) may never
        // be polled: it is complete all the same. Anything else dropped
        // before its end leaves the connection mid-message: it closes.
        if self.state == State::Done {
            self.finish();
        }
    }
}
