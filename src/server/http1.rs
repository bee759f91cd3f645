//! sluice's own HTTP/1.1 server for the common request, in front of hyper's.
//!
//! hyper's server connection is general: it reads into its own buffer,
//! keeps a state machine for bodies, upgrades and HTTP/1.0, and encodes the
//! response through several layers. For the request most clients send — a
//! `GET` with no body — that cost nearly as much as nginx spends on a whole
//! 429 (figures in docs/benchmarks-history.md). This server reads the head with
//! the same `httparse`, answers it, and writes the response head and body
//! itself (`http1/encode.rs`), as the upstream side's plain exchanges do.
//!
//! Anything else it does not read further: the connection is handed to
//! hyper, with the bytes read so far in front of the socket
//! ([`Prefixed`]), and stays hyper's (`http1/head.rs` lists what is ours).
//! So a request with a body, an upgrade, h2c, HTTP/1.0 and every head hyper
//! would refuse get hyper's handling, and `DeadlineIo`'s clocks and answers,
//! exactly as before; the socket is the same `DeadlineIo` either way.
//!
//! As hyper does, the connection reads while a request is in the service
//! only when nothing is buffered, to see the client leave: an end of stream
//! then drops the request (and whatever it holds); bytes that arrive are
//! kept for the next request.

use std::future::{poll_fn, Future};
use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::pin::{pin, Pin};
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::Response;
use hyper::body::Body;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::proxy::pool::spare_map;
use crate::proxy::respond::{OwnFields, ProxyBody};
use crate::proxy::ClientRequest;

mod encode;
pub mod head;

use encode::Framing;
pub use head::HeadLimits;

/// How much is read at a time; heads are almost always shorter. A quiet
/// connection holds no buffer at all: [`first_bytes`] reads onto the stack.
const READ_SIZE: usize = 8 * 1024;
/// A busy connection's buffer holds this much more than [`READ_SIZE`]:
/// each head read is split off its front, and once what is left is less
/// than a read, `reserve` moves the unread bytes back to the start. With
/// 1 KiB to spare that happens once every few dozen requests of a kept-alive
/// client rather than at every one (35 instructions each, callgrind).
const READ_SLACK: usize = 1024;
/// The least room worth a read while a request is in the service.
const MIN_READ: usize = 512;
/// Bodies up to this size are copied behind the head and written with it;
/// longer ones are written from where they are.
const COPY_BELOW: usize = 8 * 1024;

/// What the connection reads next.
#[derive(Debug)]
pub enum Next {
    /// A request this server answers, read into the slot it was given.
    Request,
    /// The client closed the connection, or it failed, between requests.
    Closed,
    /// Nothing of a next request came for a while, and the connection said
    /// so (`DeadlineIo`'s quiet clock): the connection may give back what it
    /// holds for requests and wait with [`first_bytes`].
    Quiet,
    /// The connection is hyper's from here: [`Http1::into_hyper`].
    Hyper,
}

/// A client connection while sluice's own server speaks on it.
#[derive(Debug)]
pub struct Http1<S> {
    io: S,
    /// Read and not yet parsed.
    read: BytesMut,
    /// The response being written.
    write: Vec<u8>,
    scratch: head::Scratch,
}

/// Waits for the first bytes of a request on a connection that holds no
/// buffer: they are read onto the stack, and only then copied into a buffer
/// of their own (for [`Http1::new`]). `None`: the connection ended (closed,
/// failed, or quiet for good: its idle clock ran out).
pub async fn first_bytes<S: AsyncRead + Unpin>(io: &mut S) -> Option<BytesMut> {
    poll_fn(|cx| {
        let mut stack = [MaybeUninit::<u8>::uninit(); READ_SIZE];
        let mut landed = ReadBuf::uninit(&mut stack);
        match ready!(Pin::new(&mut *io).poll_read(cx, &mut landed)) {
            Ok(()) if !landed.filled().is_empty() => {
                let mut read = BytesMut::with_capacity(READ_SIZE + READ_SLACK);
                read.extend_from_slice(landed.filled());
                Poll::Ready(Some(read))
            }
            _ => Poll::Ready(None),
        }
    })
    .await
}

impl<S: AsyncRead + AsyncWrite + Unpin> Http1<S> {
    /// sluice's server on `io`, with `read` (from [`first_bytes`]) read
    /// from it so far.
    pub fn new(io: S, read: BytesMut) -> Http1<S> {
        Http1 {
            io,
            read,
            write: Vec::new(),
            scratch: head::Scratch::default(),
        }
    }

    /// The connection under this server.
    pub fn io_mut(&mut self) -> &mut S {
        &mut self.io
    }

    /// The connection, once nothing of a next request has been read: the
    /// buffers are given back.
    pub fn into_io(self) -> S {
        debug_assert!(self.read.is_empty());
        self.io
    }

    /// Whether nothing of a next request has been read.
    pub fn is_idle(&self) -> bool {
        self.read.is_empty()
    }

    /// Reads until the buffer holds a request head of ours (read `into`
    /// the slot), or something for hyper, or the connection ends.
    pub async fn next(&mut self, limits: HeadLimits, into: &mut ClientRequest) -> Next {
        loop {
            if !self.read.is_empty() {
                match head::parse(&mut self.read, limits, &mut self.scratch, into) {
                    head::Head::Ours => return Next::Request,
                    head::Head::Hyper => return Next::Hyper,
                    head::Head::Partial => {}
                }
            }
            self.read.reserve(READ_SIZE);
            match self.io.read_buf(&mut self.read).await {
                // What was read of a head, hyper answers as it would have.
                Ok(0) if !self.read.is_empty() => return Next::Hyper,
                Ok(0) => return Next::Closed,
                Ok(_) => {}
                // Quiet between requests (see `DeadlineIo::report_quiet`);
                // with part of a head read, the head is still awaited.
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    if self.read.is_empty() {
                        return Next::Quiet;
                    }
                }
                Err(_) => return Next::Closed,
            }
        }
    }

    /// Runs `exchange` (the request in the service) to its response, or
    /// `None` when the client closed the connection first. The future is
    /// pinned where it was made: it is large, and a move copies it.
    pub async fn answer<F: Future>(&mut self, mut exchange: Pin<&mut F>) -> Option<F::Output> {
        poll_fn(|cx| {
            if let Poll::Ready(response) = exchange.as_mut().poll(cx) {
                return Poll::Ready(Some(response));
            }
            if self.poll_left(cx) {
                return Poll::Ready(None);
            }
            Poll::Pending
        })
        .await
    }

    /// Writes `response`, head (with `own_fields` after the map's, see
    /// `proxy/respond/own_fields.rs`) and body, where it is (its body read
    /// to the end, its map taken); whether the connection may carry another
    /// request. An error (the client's, or the body's) means the connection
    /// is to be dropped.
    pub async fn respond(
        &mut self,
        response: &mut Response<ProxyBody>,
        own_fields: &OwnFields,
    ) -> io::Result<bool> {
        self.write.clear();
        let written = encode::head(
            &mut self.write,
            response,
            own_fields,
            response.body().is_end_stream(),
            response.body().size_hint(),
        );
        // Kept for the next upstream response read on this thread.
        spare_map::give(std::mem::take(response.headers_mut()));
        // A body sluice wrote goes behind the head as it is (a problem
        // document with its request id, made nowhere else); the upstream's
        // streams.
        if written.framing != Framing::Empty && !response.body_mut().write_whole(&mut self.write) {
            self.send_body(Pin::new(response.body_mut()), written.framing)
                .await?;
        }
        self.flush().await?;
        Ok(!written.close)
    }

    /// Writes the body of a response whose head is written, as `framing`
    /// says, flushing whenever the body has nothing more yet.
    async fn send_body<B>(&mut self, mut body: Pin<&mut B>, framing: Framing) -> io::Result<()>
    where
        B: Body<Data = Bytes>,
    {
        let mut left = match framing {
            Framing::Empty => 0,
            Framing::Length(length) => length,
            Framing::Chunked | Framing::UntilClose => u64::MAX,
        };
        loop {
            let frame = poll_fn(|cx| match body.as_mut().poll_frame(cx) {
                // Nothing more yet: what is written so far goes out.
                Poll::Pending if !self.write.is_empty() => Poll::Ready(Step::Flush),
                // A body that stalls is dropped, with what it holds
                // upstream, as soon as the client leaves.
                Poll::Pending if self.poll_left(cx) => Poll::Ready(Step::Failed),
                Poll::Pending => Poll::Pending,
                Poll::Ready(None) => Poll::Ready(Step::End),
                Poll::Ready(Some(Err(_))) => Poll::Ready(Step::Failed),
                Poll::Ready(Some(Ok(frame))) => Poll::Ready(Step::Frame(frame.into_data().ok())),
            })
            .await;
            let data = match frame {
                Step::Flush => {
                    self.flush().await?;
                    continue;
                }
                Step::End => break,
                Step::Failed => {
                    return Err(io::Error::other(
                        "the response body failed, or the client left",
                    ))
                }
                // Trailers: not asked for (a request with `TE` is hyper's).
                Step::Frame(None) => continue,
                Step::Frame(Some(data)) if data.is_empty() => continue,
                Step::Frame(Some(data)) => data,
            };
            if data.len() as u64 > left {
                return Err(io::Error::other(
                    "the response body is longer than declared",
                ));
            }
            if framing != Framing::Chunked {
                left -= data.len() as u64;
                self.send(data).await?;
            } else {
                encode::chunk_size(&mut self.write, data.len());
                self.send(data).await?;
                self.write.extend_from_slice(b"\r\n");
            }
        }
        match framing {
            Framing::Chunked => self.write.extend_from_slice(b"0\r\n\r\n"),
            Framing::Length(_) if left > 0 => {
                return Err(io::Error::other(
                    "the response body is shorter than declared",
                ))
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether the client closed the connection (or it failed). Reads only
    /// while nothing is buffered, as hyper does: a pipelined request waits
    /// its turn and is not read past; its bytes are kept.
    fn poll_left(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.read.is_empty() {
            return false;
        }
        // What is left of the buffer after the request's head will do: the
        // request still holds its head's bytes, so growing the buffer now
        // would allocate a new one, where `next` reclaims it in place once
        // the request is gone.
        if self.read.capacity() < MIN_READ {
            self.read.reserve(READ_SIZE);
        }
        matches!(
            pin!(self.io.read_buf(&mut self.read)).poll(cx),
            Poll::Ready(Ok(0) | Err(_))
        )
    }

    /// Closes the connection after a last response: the write side is shut
    /// so the client sees the end of the stream.
    pub async fn close(mut self) {
        let _ = self.io.shutdown().await;
    }

    /// The connection as hyper gets it: the socket, behind what was read.
    pub fn into_hyper(self) -> Prefixed<S> {
        Prefixed {
            prefix: self.read.freeze(),
            io: self.io,
        }
    }

    /// Adds `data` to what is written: copied when short, else written
    /// behind the buffered bytes without a copy.
    async fn send(&mut self, mut data: Bytes) -> io::Result<()> {
        if data.len() < COPY_BELOW {
            self.write.extend_from_slice(&data);
            return Ok(());
        }
        let mut head = &self.write[..];
        while !head.is_empty() || !data.is_empty() {
            let slices = [IoSlice::new(head), IoSlice::new(&data)];
            let n = poll_fn(|cx| Pin::new(&mut self.io).poll_write_vectored(cx, &slices)).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            let from_head = n.min(head.len());
            head = &head[from_head..];
            data.advance(n - from_head);
        }
        self.write.clear();
        Ok(())
    }

    async fn flush(&mut self) -> io::Result<()> {
        if !self.write.is_empty() {
            self.io.write_all(&self.write).await?;
            self.write.clear();
        }
        Ok(())
    }
}

/// One step of writing a body.
enum Step {
    Frame(Option<Bytes>),
    Flush,
    End,
    Failed,
}

/// A socket behind bytes already read from it: reads return those first.
/// hyper gets the connection this way (hyper-util has the same type, but
/// keeps it to itself).
#[derive(Debug)]
pub struct Prefixed<S> {
    prefix: Bytes,
    io: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
