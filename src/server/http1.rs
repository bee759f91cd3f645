//! sluice's HTTP/1.1 server: every request a client sends on a connection
//! (any method, HTTP/1.0 or 1.1, bodies framed by length or chunked,
//! `Expect: 100-continue`, pipelining, WebSocket upgrades), read and
//! answered by the connection's own task. hyper serves only HTTP/2
//! (`server/connection.rs`).
//!
//! A head is read with `httparse` into a request built in place
//! (`http1/head.rs`); its body is taken whole when it came with the head,
//! else piped from the socket as the exchange asks for it
//! (`http1/inflow.rs`); the answer's head is written as hyper frames it
//! (`http1/encode.rs`) and its body behind it, short pieces gathered into
//! one write (`crate::http1::outflow`). A `101` to a WebSocket handshake
//! turns the connection into a tunnel (`http1/tunnel.rs`).
//!
//! As hyper does, the connection reads while a request is in the service
//! only when nothing is buffered, to see the client leave: an end of stream
//! then drops the request (and whatever it holds); bytes that arrive are
//! kept for the next request (or the body).

use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{Response, StatusCode};
use hyper::body::Body;

use crate::http1::outflow::{BodyOut, Outflow};
use crate::http1::transport::Transport;
use crate::proxy::pool::spare_map;
use crate::proxy::respond::{self, OwnFields, ProxyBody};
use crate::proxy::upgrade::Upgraded;
use crate::proxy::ClientRequest;

mod encode;
pub mod head;
mod inflow;
pub mod tunnel;

pub use head::{HeadLimits, Refused, RequestHead};
use inflow::{BodyLeft, Inflow, Pumped};

/// How much is read at a time; heads are almost always shorter. A quiet
/// connection holds no buffer at all: [`first_bytes`] reads onto the stack.
const READ_SIZE: usize = 8 * 1024;
/// A busy connection's buffer holds this much more than [`READ_SIZE`]:
/// each head read is split off its front, and once what is left is less
/// than a read, `reserve` moves the unread bytes back to the start. With
/// 1 KiB to spare that happens once every few dozen requests of a kept-alive
/// client rather than at every one, where the move showed in every
/// request's profile (docs/benchmarks-history.md, "Idle connections").
const READ_SLACK: usize = 1024;
/// The least room worth a read while a request is in the service.
const MIN_READ: usize = 512;

/// What is left of a refused request's body, read after its answer and
/// dropped so that the connection serves on, at the most (more, and the
/// answer says `connection: close`); and how long it may take to come
/// (docs/operations.md, "Cheap refusals come first").
const DISCARDED_AT_MOST: u64 = 64 * 1024;
const DISCARDED_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

/// What the connection reads next.
#[derive(Debug)]
pub enum Next {
    /// A request, read into the slot it was given (what the connection
    /// needs of its head is kept: [`Http1::head`]).
    Request,
    /// The client closed the connection, or it failed, between requests
    /// (or in the middle of a head, which hyper answers no more than this).
    Closed,
    /// Nothing of a next request came for a while, and the connection said
    /// so (`DeadlineIo`'s quiet clock): the connection may give back what it
    /// holds for requests and wait with [`first_bytes`].
    Quiet,
    /// A head refused: answered (see [`head::Refused::answer`]), then the
    /// connection closes.
    Refused(head::Refused),
}

/// How an answer went.
#[derive(Debug)]
pub enum Answered {
    /// Written; the connection may carry the next request.
    Kept,
    /// Written; the connection closes (lingering: the client may still be
    /// sending what sluice did not read).
    Close,
    /// A `101`: the connection is a tunnel to the upstream from here.
    Tunnel(Box<Upgraded>),
    /// Not written whole: the connection is dropped.
    Failed(io::Error),
}

/// A client connection while sluice's server speaks on it.
#[derive(Debug)]
pub struct Http1<S> {
    io: S,
    /// Read and not yet parsed.
    read: BytesMut,
    /// What is being written.
    out: Outflow,
    scratch: head::Scratch,
    /// What the connection needs of the request in the service's head.
    head: RequestHead,
    /// The body of the request in the service, still being read.
    inflow: Option<Inflow>,
}

thread_local! {
    /// The buffer the first bytes of a request land in, this thread's: a
    /// connection waiting for them holds none of its own. Taken for each
    /// read and put back when nothing arrived; a transport that fills it
    /// later takes it for as long (`http1/transport.rs`).
    static WAITING: Cell<BytesMut> = Cell::new(BytesMut::new());
}

/// Waits for the first bytes of a request on a connection that holds no
/// buffer (for [`Http1::new`]). `None`: the connection ended (closed,
/// failed, or quiet for good: its idle clock ran out).
pub async fn first_bytes<S: Transport>(io: &mut S) -> Option<BytesMut> {
    poll_fn(|cx| {
        let mut read = WAITING.take();
        if read.capacity() == 0 {
            read.reserve(READ_SIZE + READ_SLACK);
        }
        let polled = io.poll_fill(cx, &mut read);
        match polled {
            Poll::Ready(Ok(arrived)) if arrived > 0 => return Poll::Ready(Some(read)),
            Poll::Ready(_) => read.clear(),
            Poll::Pending => {}
        }
        WAITING.set(read);
        polled.map(|_| None)
    })
    .await
}

impl<S: Transport> Http1<S> {
    /// sluice's server on `io`, with `read` (from [`first_bytes`]) read
    /// from it so far.
    pub fn new(io: S, read: BytesMut) -> Http1<S> {
        Http1 {
            io,
            read,
            out: Outflow::default(),
            scratch: head::Scratch::default(),
            head: RequestHead::default(),
            inflow: None,
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

    /// Reads until the buffer holds a request head (read `into` the slot,
    /// its body with it), a head to refuse, or the connection ends.
    pub async fn next(&mut self, limits: HeadLimits, into: &mut ClientRequest) -> Next {
        loop {
            if !self.read.is_empty() {
                match head::parse(&mut self.read, limits, &mut self.scratch, into) {
                    head::Head::Request(head) => {
                        self.head = head;
                        // Most requests have no body: the slot's is empty
                        // already, and no inflow is left from the last.
                        if head.body != head::BodyFraming::Length(0) {
                            let (body, inflow) =
                                inflow::take(&head, limits.max_headers, &mut self.read);
                            *into.get_mut().body_mut() = body;
                            self.inflow = inflow;
                        }
                        return Next::Request;
                    }
                    head::Head::Refused(answer) => return Next::Refused(answer),
                    head::Head::Partial => {}
                }
            }
            self.read.reserve(READ_SIZE);
            match poll_fn(|cx| self.io.poll_fill(cx, &mut self.read)).await {
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
    /// `None` when the client closed the connection first. The request's
    /// body is read as the exchange asks for it. The future is pinned where
    /// it was made: it is large, and a move copies it.
    pub async fn answer<F: Future>(&mut self, mut exchange: Pin<&mut F>) -> Option<F::Output> {
        poll_fn(|cx| {
            loop {
                if let Some(inflow) = &self.inflow {
                    inflow.unpark();
                }
                if let Poll::Ready(response) = exchange.as_mut().poll(cx) {
                    return Poll::Ready(Some(response));
                }
                match self.pump(cx) {
                    Pumped::Progress => continue,
                    Pumped::Waiting => break,
                    Pumped::Left => return Poll::Ready(None),
                }
            }
            if self.poll_left(cx) {
                return Poll::Ready(None);
            }
            Poll::Pending
        })
        .await
    }

    /// Writes `response` to the request in service, head (with
    /// `own_fields` after the map's, see `proxy/respond/own_fields.rs`) and
    /// body, where it is, and leaves it vacant ([`respond::vacate`]) before
    /// the last bytes go out.
    pub async fn respond(
        &mut self,
        response: &mut Response<ProxyBody>,
        own_fields: &OwnFields,
    ) -> Answered {
        let switched = response.status() == StatusCode::SWITCHING_PROTOCOLS;
        // A body nobody reads, and that is not all here to be skipped,
        // closes the connection: the head says so.
        let body = self.body_left();
        let discarding = body == BodyLeft::Unread
            && (self.inflow.as_ref()).is_some_and(|inflow| inflow.discardable(DISCARDED_AT_MOST));
        let written = encode::head(
            self.out.head(),
            response,
            own_fields,
            response.body().is_end_stream(),
            response.body().size_hint(),
            &self.head,
            body != BodyLeft::Unread || discarding,
        );
        // Kept for the next upstream response read on this thread.
        spare_map::give(std::mem::take(response.headers_mut()));
        if switched {
            if let Some(upgraded) = response.body_mut().take_tunnel() {
                respond::vacate(response);
                return match self.flush().await {
                    Ok(()) => Answered::Tunnel(Box::new(upgraded)),
                    Err(error) => Answered::Failed(error),
                };
            }
        }
        // A body sluice wrote goes behind the head as it is (a problem
        // document with its request id, made nowhere else); the upstream's
        // streams.
        let sent = match BodyOut::of(written.framing) {
            Some(body) if !response.body_mut().write_whole(self.out.buffer()) => {
                self.send_body(Pin::new(response.body_mut()), body).await
            }
            _ => Ok(()),
        };
        // The whole answer is in the outflow: what its body held (a
        // concurrency permit, the upstream connection, a settlement) goes
        // before the last bytes do. A client that has the whole answer and
        // asks again at once then finds the permit free; released after
        // the write, it was still taken for that instant.
        respond::vacate(response);
        if let Err(error) = sent {
            return Answered::Failed(error);
        }
        if let Err(error) = self.flush().await {
            return Answered::Failed(error);
        }
        // A body still going up as the answer streamed: once the answer
        // is over, nobody wants more of it.
        let kept = match body {
            BodyLeft::StillWanted => self.body_left() == BodyLeft::Read,
            BodyLeft::Read => true,
            BodyLeft::Unread => discarding && self.discard().await,
        };
        self.inflow = None;
        if written.close || !kept {
            Answered::Close
        } else {
            Answered::Kept
        }
    }

    /// Reads what is left of a body nobody read and drops it, for
    /// [`DISCARDED_WITHIN`] at the most: whether all of it came, so that
    /// the connection may read a next request.
    async fn discard(&mut self) -> bool {
        let discarded = async {
            while self.body_left() != BodyLeft::Read {
                if self.read.capacity() - self.read.len() < MIN_READ {
                    self.read.reserve(READ_SIZE);
                }
                let filled = poll_fn(|cx| self.io.poll_fill(cx, &mut self.read)).await;
                if matches!(filled, Ok(0) | Err(_)) {
                    return false;
                }
            }
            true
        };
        tokio::time::timeout(DISCARDED_WITHIN, discarded)
            .await
            .unwrap_or(false)
    }

    /// Where the request's body stands (see [`Inflow::settle`]).
    fn body_left(&mut self) -> BodyLeft {
        match &mut self.inflow {
            None => BodyLeft::Read,
            Some(inflow) => inflow.settle(&mut self.read),
        }
    }

    /// Writes the body of a response whose head is in the outflow, framed
    /// as `body` says, gathering the frames the body has ready and writing
    /// whenever it has nothing more for now. A request body still being
    /// read goes on being read meanwhile (an upstream may answer before it
    /// has all of it).
    async fn send_body<B>(&mut self, mut body: Pin<&mut B>, mut framing: BodyOut) -> io::Result<()>
    where
        B: Body<Data = Bytes>,
    {
        loop {
            let step = poll_fn(|cx| {
                loop {
                    if let Some(inflow) = &self.inflow {
                        inflow.unpark();
                    }
                    if !self.out.has_room() {
                        return Poll::Ready(Step::Flush);
                    }
                    match body.as_mut().poll_frame(cx) {
                        Poll::Ready(None) => return Poll::Ready(Step::End),
                        Poll::Ready(Some(Err(_))) => return Poll::Ready(Step::Failed),
                        Poll::Ready(Some(Ok(frame))) => {
                            // Trailer fields go to no HTTP/1.1 client
                            // (docs/edge-behaviour.md, "Reading the
                            // upstream's answer").
                            if let Ok(data) = frame.into_data() {
                                if self.out.push(&mut framing, data).is_err() {
                                    return Poll::Ready(Step::Failed);
                                }
                            }
                            continue;
                        }
                        Poll::Pending => {}
                    }
                    match self.pump(cx) {
                        Pumped::Progress => continue,
                        Pumped::Waiting => {}
                        Pumped::Left => return Poll::Ready(Step::Failed),
                    }
                    // Nothing more yet: what is gathered goes out.
                    if !self.out.is_empty() {
                        return Poll::Ready(Step::Flush);
                    }
                    // A body that stalls is dropped, with what it holds
                    // upstream, as soon as the client leaves.
                    if self.poll_left(cx) {
                        return Poll::Ready(Step::Failed);
                    }
                    return Poll::Pending;
                }
            })
            .await;
            match step {
                Step::Flush => self.flush().await?,
                Step::End => break,
                Step::Failed => {
                    return Err(io::Error::other(
                        "the response body failed, or the client left",
                    ))
                }
            }
        }
        self.out
            .finish(framing)
            .map_err(|mismatch| io::Error::other(mismatch.to_string()))
    }

    /// Moves the request body along, if one is being read.
    fn pump(&mut self, cx: &mut Context<'_>) -> Pumped {
        match &mut self.inflow {
            Some(inflow) => inflow.pump(&mut self.io, &mut self.read, cx),
            None => Pumped::Waiting,
        }
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
            self.io.poll_fill(cx, &mut self.read),
            Poll::Ready(Ok(0) | Err(_))
        )
    }

    async fn flush(&mut self) -> io::Result<()> {
        poll_fn(|cx| self.out.poll_write(&mut self.io, cx)).await
    }

    /// The connection and what was read of it past the last head, for a
    /// tunnel.
    pub fn into_parts(self) -> (S, BytesMut) {
        (self.io, self.read)
    }
}

impl<S: Transport> Http1<crate::server::deadline_io::DeadlineIo<S>> {
    /// Answers a refused head and closes the connection (see
    /// `DeadlineIo::answer_and_close`).
    pub async fn refuse(mut self, status: StatusCode, detail: &str) {
        let answer = crate::problem::closing_answer(status, detail, crate::problem::Layout::ByName);
        self.io.answer_and_close(answer).await;
    }

    /// The request being served is the connection's last: its answer says
    /// `connection: close`, and the connection closes after it.
    pub fn close_after(&mut self) {
        self.head.keep_alive = false;
    }

    /// Closes the connection after its last answer, lingering.
    pub async fn close(mut self) {
        self.io.close_lingering().await;
    }
}

/// One step of writing a body.
enum Step {
    Flush,
    End,
    Failed,
}
