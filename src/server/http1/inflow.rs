//! A request's body as the connection reads it: taken whole when it came
//! with its head (nearly every short body does, a chunked one too), else
//! decoded from the socket as the exchange asks for it and handed over
//! through a pipe (`http1/pipe.rs`). An `Expect: 100-continue` is answered
//! when the body is first asked for (a request refused first never tells
//! the client to send it: RFC 9110 §10.1.1, and Envoy's default).
//!
//! After the answer, what is left of a body nobody read is skipped when it
//! is already here, so the connection can carry the next request; anything
//! else closes the connection (hyper's `poll_drain_or_close_read`): bytes
//! of a body are never read as a next request.

use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use hyper::body::Frame;

use super::head::{BodyFraming, RequestHead};
use crate::http1::chunked::{BadChunk, Chunked, Decoded};
use crate::http1::pipe::{self, Broken, Demand, Sender};
use crate::http1::sending::Sending;
use crate::http1::transport::Transport;
use crate::proxy::ClientBody;

/// Bodies held whole before they are sent, at most, when they came
/// complete with their head (a chunked one is copied into one buffer).
const WHOLE_MAX: usize = 64 * 1024;

/// What a read asks for, at most, while a body streams.
const BODY_READ: usize = 64 * 1024;

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Where the decoding of a body stands.
#[derive(Debug)]
enum Decoder {
    /// This many bytes still to come.
    Length(u64),
    Chunked(Box<Chunked>),
}

/// A body being read from the connection into its pipe.
#[derive(Debug)]
pub struct Inflow {
    sender: Sender,
    decoder: Decoder,
    /// What is left to write of `100 Continue`; `None`: none is owed.
    continuing: Option<Sending>,
    /// How the body ended, once it did: whole, or broken off.
    ended: Option<Result<(), Broken>>,
    /// The request's reader asked for the body: it was not refused on
    /// its head alone.
    asked: bool,
}

/// What a turn of the pump did.
#[derive(Debug, PartialEq, Eq)]
pub enum Pumped {
    /// Handed something over: the receiver may take it now.
    Progress,
    /// Nothing to do until the socket or the receiver wakes the task.
    Waiting,
    /// The connection failed while writing to it.
    Left,
}

/// The body `head` announces, taken from `read` whole when it is all
/// there, else a pipe fed by the returned [`Inflow`]. A body framed both
/// ways is piped, so that it goes upstream chunked as it was read. A
/// chunked body's trailer section may have as many lines as a head may
/// have fields, `max_headers`.
pub fn take(
    head: &RequestHead,
    max_headers: usize,
    read: &mut BytesMut,
) -> (ClientBody, Option<Inflow>) {
    let (framing, expect_continue) = (head.body, head.expect_continue);
    let chunked = || {
        Box::new(Chunked::with_trailers_max(
            max_headers.try_into().unwrap_or(u32::MAX),
        ))
    };
    let decoder = match framing {
        BodyFraming::Length(0) => return (ClientBody::Empty, None),
        BodyFraming::Length(length) => {
            if read.len() as u64 >= length {
                let body = read.split_to(length as usize).freeze();
                return (ClientBody::Read(body), None);
            }
            Decoder::Length(length)
        }
        BodyFraming::Chunked if head.ambiguous => Decoder::Chunked(chunked()),
        BodyFraming::Chunked => {
            let mut chunked = chunked();
            match whole_chunked(&mut chunked, read) {
                Ok(Whole::Body(body)) => return (ClientBody::Read(body), None),
                Ok(Whole::Started(first)) => {
                    let (sender, receiver) = pipe::pipe(None);
                    let mut inflow = Inflow::new(sender, Decoder::Chunked(chunked), false);
                    if !first.is_empty() {
                        inflow.preload(first);
                    }
                    return (ClientBody::Piped(receiver), Some(inflow));
                }
                Ok(Whole::Nothing) => Decoder::Chunked(chunked),
                Err(BadChunk) => {
                    let (sender, receiver) = pipe::pipe(None);
                    let mut inflow = Inflow::new(sender, Decoder::Chunked(chunked), false);
                    inflow.broke();
                    return (ClientBody::Piped(receiver), Some(inflow));
                }
            }
        }
    };
    let length = match decoder {
        Decoder::Length(length) => Some(length),
        Decoder::Chunked(_) => None,
    };
    let (sender, receiver) = pipe::pipe(length);
    // A client that sent body bytes did not wait for a `100 Continue`.
    let continuing = expect_continue && read.is_empty();
    (
        ClientBody::Piped(receiver),
        Some(Inflow::new(sender, decoder, continuing)),
    )
}

/// What the buffer held of a chunked body.
enum Whole {
    /// All of it, up to the last chunk (without trailer fields).
    Body(Bytes),
    /// Its beginning (data decoded so far, maybe none): the rest is to come.
    Started(Bytes),
    /// Nothing of it.
    Nothing,
}

/// Decodes a chunked body from `read` as far as it goes, gathering its
/// data into one buffer (a body sent in several chunks goes on as one). A
/// body with trailer fields, or past [`WHOLE_MAX`], streams instead.
fn whole_chunked(chunked: &mut Chunked, read: &mut BytesMut) -> Result<Whole, BadChunk> {
    if read.is_empty() {
        return Ok(Whole::Nothing);
    }
    let mut gathered = BytesMut::new();
    let mut first: Option<Bytes> = None;
    loop {
        match chunked.decode(read)? {
            Decoded::Data(data) => {
                match (&first, gathered.is_empty()) {
                    (None, true) => first = Some(data),
                    (Some(only), true) => {
                        gathered.reserve(only.len() + data.len());
                        gathered.extend_from_slice(only);
                        gathered.extend_from_slice(&data);
                        first = None;
                    }
                    _ => gathered.extend_from_slice(&data),
                }
                if gathered.len() > WHOLE_MAX {
                    return Ok(Whole::Started(gathered.freeze()));
                }
            }
            Decoded::End => {
                return Ok(Whole::Body(first.unwrap_or_else(|| gathered.freeze())));
            }
            Decoded::More | Decoded::Trailers(_) => {
                // Trailer fields: kept for the pipe, which passes them on.
                let so_far = first.unwrap_or_else(|| gathered.freeze());
                return Ok(Whole::Started(so_far));
            }
        }
    }
}

impl Inflow {
    fn new(sender: Sender, decoder: Decoder, expect_continue: bool) -> Inflow {
        Inflow {
            sender,
            decoder,
            continuing: expect_continue.then(|| Sending::of(Bytes::from_static(CONTINUE))),
            ended: None,
            asked: false,
        }
    }

    /// Hands `data`, decoded before the pipe existed, over first (the pipe
    /// holds one frame; nothing else is in it yet).
    fn preload(&mut self, data: Bytes) {
        let noop = Context::from_waker(std::task::Waker::noop());
        self.sender.send(Frame::data(data), &noop);
    }

    /// The body broke off where its chunked coding did.
    fn broke(&mut self) {
        let noop = Context::from_waker(std::task::Waker::noop());
        self.end(Err(Broken::BadFraming), &noop);
    }

    fn end(&mut self, end: Result<(), Broken>, cx: &Context<'_>) {
        self.ended = Some(end);
        self.sender.finish(end, cx);
    }

    /// The sender's task is polling: it looks for demand itself.
    pub fn unpark(&self) {
        if self.ended.is_none() {
            self.sender.unpark();
        }
    }

    /// Moves what the receiver asks for from `read` (and the socket) into
    /// the pipe.
    pub fn pump<T: Transport>(
        &mut self,
        io: &mut T,
        read: &mut BytesMut,
        cx: &mut Context<'_>,
    ) -> Pumped {
        if self.ended.is_some() {
            return Pumped::Waiting;
        }
        match self.sender.demand() {
            Demand::Frame => self.asked = true,
            Demand::None => {
                self.sender.park(cx);
                return Pumped::Waiting;
            }
            Demand::Abandoned => return Pumped::Waiting,
        }
        if let Some(continuing) = &mut self.continuing {
            while !continuing.is_empty() {
                match io.poll_send(cx, continuing) {
                    Poll::Ready(Ok(n)) if n > 0 => {}
                    Poll::Ready(_) => return Pumped::Left,
                    Poll::Pending => return Pumped::Waiting,
                }
            }
            if io.poll_push(cx).is_pending() {
                return Pumped::Waiting;
            }
            self.continuing = None;
        }
        loop {
            match self.decode(read) {
                Step::Frame(frame) => {
                    self.sender.send(frame, cx);
                    return Pumped::Progress;
                }
                Step::End(end) => {
                    self.end(end, cx);
                    return Pumped::Progress;
                }
                Step::More(want) => {
                    if read.capacity() - read.len() < want.min(4096) {
                        read.reserve(want);
                    }
                    match io.poll_fill(cx, read) {
                        // The body broke off; the exchange hears it, and
                        // its answer is still written (the client may have
                        // shut only its sending side), as hyper does.
                        Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                            self.end(Err(Broken::CutShort), cx);
                            return Pumped::Progress;
                        }
                        Poll::Ready(Ok(_)) => {}
                        Poll::Pending => return Pumped::Waiting,
                    }
                }
            }
        }
    }

    /// Decodes the next step from `read`.
    fn decode(&mut self, read: &mut BytesMut) -> Step {
        match &mut self.decoder {
            // The last data goes first; the receiver asks once more and
            // finds the end.
            Decoder::Length(0) => Step::End(Ok(())),
            Decoder::Length(left) => {
                if read.is_empty() {
                    return Step::More(want(*left));
                }
                let take = usize::try_from(*left).unwrap_or(usize::MAX).min(read.len());
                *left -= take as u64;
                Step::Frame(Frame::data(read.split_to(take).freeze()))
            }
            Decoder::Chunked(chunked) => match chunked.decode(read) {
                Ok(Decoded::Data(data)) => Step::Frame(Frame::data(data)),
                Ok(Decoded::Trailers(fields)) => Step::Frame(Frame::trailers(fields)),
                Ok(Decoded::End) => Step::End(Ok(())),
                Ok(Decoded::More) => Step::More(chunked.remaining().map_or(8 * 1024, want)),
                Err(BadChunk) => Step::End(Err(Broken::BadFraming)),
            },
        }
    }

    /// Where the body stands once its answer is known: read, still wanted
    /// (an upstream may read it as its answer streams), or left, in which
    /// case what is left of it is skipped when it is all in `read`.
    pub fn settle(&mut self, read: &mut BytesMut) -> BodyLeft {
        if self.ended.is_none() && self.sender.demand() != Demand::Abandoned {
            return BodyLeft::StillWanted;
        }
        if self.skip_rest(read) {
            BodyLeft::Read
        } else {
            BodyLeft::Unread
        }
    }

    /// Whether what is left of a body nobody read may be read and dropped
    /// after its answer: at most `most` bytes of a body framed by its
    /// length, of a request refused on its head alone (its reader never
    /// asked for it: one cut off by `body_timeout` was), whose client did
    /// not wait for `100 Continue`.
    pub fn discardable(&self, most: u64) -> bool {
        let untold = matches!(&self.continuing, Some(c) if c.left() == CONTINUE.len());
        let left = matches!(self.decoder, Decoder::Length(left) if left <= most);
        self.ended.is_none() && !self.asked && !untold && left
    }

    /// Skips what is left of the body when it is all in `read`; whether the
    /// connection may read a next request.
    fn skip_rest(&mut self, read: &mut BytesMut) -> bool {
        if let Some(end) = self.ended {
            return end.is_ok();
        }
        let untold = matches!(&self.continuing, Some(c) if c.left() == CONTINUE.len());
        if untold && read.is_empty() {
            // The client was never told to send the body: it may or may
            // not, and what comes next cannot be told apart.
            return false;
        }
        loop {
            match self.decode(read) {
                Step::Frame(_) => {}
                Step::End(end) => return end.is_ok(),
                Step::More(_) => return false,
            }
        }
    }
}

/// Where a request body stands once its answer is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLeft {
    /// Read to its end, or skipped: the next bytes are a next request.
    Read,
    /// Still being sent upstream while the answer streams.
    StillWanted,
    /// Not read, and not all here: the connection closes after the answer.
    Unread,
}

/// One step of decoding.
enum Step {
    Frame(Frame<Bytes>),
    End(Result<(), Broken>),
    /// More bytes are needed, about this many.
    More(usize),
}

/// What a read asks for while `remaining` bytes of a chunk or body are to
/// come.
fn want(remaining: u64) -> usize {
    usize::try_from(remaining)
        .unwrap_or(usize::MAX)
        .clamp(8 * 1024, BODY_READ)
}
