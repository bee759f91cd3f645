//! Numbers at RFC 6901 JSON pointers in a response body, read as the body
//! streams to the client: what a `json:<pointer>` charge costs (an LLM
//! API's token counts, say), known only once the upstream has said it.
//!
//! The body is never buffered and never delayed: the caller hands each
//! piece to a [`BodyScanner`] after (or while) relaying it, and asks for
//! each pointer's [`Reading`] when the body ends, breaks off or the client
//! leaves. Which bodies are read is [`BodyKind::of`]'s answer:
//!
//! - a JSON body (`application/json`, `…+json`) is one value, and a value
//!   counts as soon as it is scanned (a body cut off after it still
//!   charges it); only its first [`READ_LIMIT`] bytes are read;
//! - a server-sent-event stream (`text/event-stream`, as LLM APIs stream)
//!   is read event by event, each event's `data` as one JSON value, and a
//!   pointer's value is the one in the last event that carries it (an
//!   event that is not JSON, such as `[DONE]`, or lacks the pointer, such
//!   as OpenAI's `"usage": null` chunks, changes nothing); an event whose
//!   data is longer than [`READ_LIMIT`] is skipped.
//!
//! Both are small hand-written state machines fed arbitrary pieces
//! (`events` splits the stream, `json` walks a value), so memory stays
//! bounded whatever the upstream sends: they keep their state, a bit per
//! open container, and per pointer how far the current path matches it;
//! never a string or the body, and of an event's data at most 16 KiB
//! (kept so that an event which cannot hold any pointer, most of an LLM
//! stream, is never walked; longer data is walked as it comes).

mod events;
mod json;
mod pointer;
#[cfg(test)]
mod tests;

use http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use http::HeaderMap;

pub use pointer::Pointer;

/// How much of a body is read: a JSON body's first bytes, the longest
/// event data. Values past it are missing.
pub const READ_LIMIT: usize = 1 << 20;

/// How many pointers one scanner reads (one bit each in its masks).
pub const MAX_POINTERS: usize = 16;

/// How a body is read, from its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// One JSON value.
    Json,
    /// Server-sent events, each event's data one JSON value.
    EventStream,
}

impl BodyKind {
    /// The kind of a response body with these headers: `None` (nothing is
    /// read, every value is missing) for any other content type, and for a
    /// content-coded body (`Content-Encoding` other than `identity`).
    pub fn of(headers: &HeaderMap) -> Option<BodyKind> {
        for coding in headers.get_all(CONTENT_ENCODING) {
            let coding = coding.to_str().ok()?;
            let identity = coding
                .split(',')
                .map(str::trim)
                .all(|coding| coding.is_empty() || coding.eq_ignore_ascii_case("identity"));
            if !identity {
                return None;
            }
        }
        BodyKind::of_type(headers)
    }

    /// The kind of a body by its `Content-Type` alone, whatever its
    /// coding (a request body is decoded before it is read:
    /// `key/content_coding.rs`).
    pub fn of_type(headers: &HeaderMap) -> Option<BodyKind> {
        let content_type = headers.get(CONTENT_TYPE)?;
        // The usual answer, `application/json` as most clients write it,
        // without parsing the field (a request keyed on its body asks this
        // on the request path: docs/conversation.md, "What it costs").
        if content_type.as_bytes() == b"application/json" {
            return Some(BodyKind::Json);
        }
        let content_type = content_type.to_str().ok()?;
        // The media type without its parameters (`; charset=utf-8`).
        let essence = content_type.split(';').next()?.trim();
        let (main, sub) = essence.split_once('/')?;
        let is = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
        // `application/json`, or any `…+json` (`application/problem+json`).
        let json_suffix = sub.len() > 5
            && sub
                .get(sub.len() - 5..)
                .is_some_and(|suffix| is(suffix, "+json"));
        if (is(main, "application") && is(sub, "json")) || (!main.is_empty() && json_suffix) {
            Some(BodyKind::Json)
        } else if is(main, "text") && is(sub, "event-stream") {
            Some(BodyKind::EventStream)
        } else {
            None
        }
    }
}

/// What a pointer's value is, as far as the body was read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reading {
    /// Not in the body (or not in what was read of it).
    Missing,
    /// There, but not a number ≥ 0 that fits a finite `f64`: a string
    /// (even `"12"`), `null`, a boolean, an object, an array, a negative
    /// number or one too large.
    Malformed,
    /// A number ≥ 0, fractions and exponents allowed (never `-0`).
    Number(f64),
}

/// Reads the values at up to [`MAX_POINTERS`] pointers out of one response
/// body, fed piece by piece.
#[derive(Debug, Clone)]
pub struct BodyScanner {
    walker: json::Walker,
    /// `None` for a JSON body.
    events: Option<events::Events>,
    /// An event stream's readings, from the events dispatched so far (a
    /// JSON body's are the walker's own).
    readings: [Reading; MAX_POINTERS],
    /// Bytes of a JSON body fed so far.
    read: usize,
}

impl BodyScanner {
    /// A scanner for a body of `kind`, reading `pointers` (their readings
    /// are asked for by index into this slice). Allocates twice: the
    /// pointers' segments, and a row for each level they reach.
    ///
    /// # Panics
    ///
    /// With no pointer or more than [`MAX_POINTERS`].
    pub fn new(kind: BodyKind, pointers: &[&Pointer]) -> BodyScanner {
        assert!(
            (1..=MAX_POINTERS).contains(&pointers.len()),
            "a body scanner reads 1 to {MAX_POINTERS} pointers, not {}",
            pointers.len()
        );
        let event_stream = kind == BodyKind::EventStream;
        BodyScanner {
            walker: json::Walker::new(pointers),
            events: event_stream.then(events::Events::new),
            readings: [Reading::Missing; MAX_POINTERS],
            read: 0,
        }
    }

    /// Reads the next piece of the body. Never panics, whatever the bytes.
    /// Allocates nothing for a JSON body; for an event stream, only the
    /// buffer of the event being read, once (1 KiB), grown for a longer
    /// event up to 16 KiB, and reused for every event after.
    pub fn feed(&mut self, chunk: &[u8]) {
        match &mut self.events {
            Some(events) => events.feed(chunk, &mut self.walker, &mut self.readings),
            None => {
                let unread = READ_LIMIT - self.read;
                let piece = &chunk[..chunk.len().min(unread)];
                self.read += piece.len();
                if !piece.is_empty() && !self.walker.failed() {
                    self.walker.feed(piece);
                }
            }
        }
    }

    /// What pointer `index` (into the `pointers` given to [`BodyScanner::new`])
    /// holds in the body read so far; `Missing` for an index out of range.
    pub fn reading(&self, index: usize) -> Reading {
        match self.events {
            Some(_) => self
                .readings
                .get(index)
                .copied()
                .unwrap_or(Reading::Missing),
            None => self.walker.found(index),
        }
    }
}
