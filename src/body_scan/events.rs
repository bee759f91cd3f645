//! Server-sent events as the WHATWG HTML standard splits them
//! ("Interpreting an event stream"), keeping only what `data` lines hold:
//! an event's data up to [`KEPT`] bytes, walked when the event is
//! dispatched if it could carry a pointer at all; longer data straight
//! into the JSON walk as it comes.
//!
//! Lines end in CRLF, LF or CR (a CR ending one piece and an LF starting
//! the next are one line end); one UTF-8 byte order mark at the start is
//! dropped; a line starting with `:` is a comment; a field's name runs to
//! the first `:` and one space after it is dropped; the values of an
//! event's `data` lines are joined with LF; a blank line dispatches the
//! event. An event still open when the stream ends is never dispatched.

use memchr::memchr2;

use super::json::Walker;
use super::{Reading, READ_LIMIT};

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// Data up to this long is kept until its event is dispatched, and walked
/// only if it could carry a pointer (`Walker::may_carry`): most events of
/// an LLM stream cannot (OpenAI's send `"usage":null` until the last), and
/// looking for a name costs a fraction of walking the JSON. Longer data is
/// walked as it comes, so no more than this is ever kept.
const KEPT: usize = 16 * 1024;

/// Where the splitter is in the current line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// Nothing of the line yet: a line end here is a blank line.
    Start,
    /// In the field name: `matched` bytes of `data` so far, `other` once
    /// it cannot be `data`.
    Name { matched: u8, other: bool },
    /// After `data:`: one space may follow.
    DataStart,
    /// In a `data` line's value.
    Data,
    /// In a line that does not matter (a comment, another field).
    Ignore,
}

/// The event splitter's state.
#[derive(Debug, Clone)]
pub(super) struct Events {
    line: Line,
    /// The last byte was a CR: an LF now ends nothing more.
    after_cr: bool,
    /// Bytes of the byte order mark seen at the start, until it is settled.
    bom_seen: u8,
    bom_settled: bool,
    /// The event has a `data` line (so the next one is joined with LF).
    has_data: bool,
    /// Bytes of the event's data so far.
    data_len: usize,
    /// The event's data, while it is at most [`KEPT`] bytes long.
    kept: Vec<u8>,
    /// The data outgrew `kept` and goes to the walker as it comes.
    walking: bool,
}

impl Events {
    pub(super) fn new() -> Events {
        Events {
            line: Line::Start,
            after_cr: false,
            bom_seen: 0,
            bom_settled: false,
            has_data: false,
            data_len: 0,
            kept: Vec::new(),
            walking: false,
        }
    }

    /// Reads the next piece of the stream: each event's data goes through
    /// `walker`, and the readings of an event that is one JSON value go to
    /// `readings`.
    pub(super) fn feed(&mut self, bytes: &[u8], walker: &mut Walker, readings: &mut [Reading]) {
        let mut at = if self.bom_settled {
            0
        } else {
            self.settle_bom(bytes)
        };
        while at < bytes.len() {
            if self.after_cr {
                self.after_cr = false;
                if bytes[at] == b'\n' {
                    at += 1;
                    continue;
                }
            }
            match self.line {
                Line::Start => at += self.line_start(&bytes[at..], walker, readings),
                Line::Name { matched, other } => {
                    self.line = self.name(bytes[at], matched, other, walker);
                    at += 1;
                }
                Line::DataStart => {
                    if bytes[at] == b' ' {
                        at += 1;
                    }
                    self.data_line(walker);
                    self.line = Line::Data;
                }
                Line::Data | Line::Ignore => at += self.line_rest(&bytes[at..], walker),
            }
        }
    }

    /// Reads the byte order mark (or the part of one) at the stream's start:
    /// how many bytes of `bytes` it took.
    #[cold]
    fn settle_bom(&mut self, bytes: &[u8]) -> usize {
        let mut at = 0;
        while let Some(&byte) = bytes.get(at) {
            if byte == BOM[usize::from(self.bom_seen)] {
                self.bom_seen += 1;
                at += 1;
                if usize::from(self.bom_seen) == BOM.len() {
                    self.bom_settled = true;
                    break;
                }
            } else {
                // Part of a mark and then something else: those bytes
                // start a line whose field is not `data`.
                if self.bom_seen > 0 {
                    self.line = Line::Name {
                        matched: 0,
                        other: true,
                    };
                }
                self.bom_settled = true;
                break;
            }
        }
        at
    }

    /// A line's first bytes (`rest`, not empty): `data:`, a blank line
    /// (which dispatches the event) or another field's name. How many
    /// bytes it took.
    #[inline]
    fn line_start(&mut self, rest: &[u8], walker: &mut Walker, readings: &mut [Reading]) -> usize {
        if rest.starts_with(b"data:") {
            self.line = Line::DataStart;
            5
        } else if let b'\n' | b'\r' = rest[0] {
            self.after_cr = rest[0] == b'\r';
            self.dispatch(walker, readings);
            1
        } else {
            self.line = Line::Name {
                matched: 0,
                other: false,
            };
            0
        }
    }

    /// The next byte of a field's name, `matched` bytes of `data` so far
    /// (`other`: it cannot be `data`): where the line is after it.
    #[inline]
    fn name(&mut self, byte: u8, matched: u8, other: bool, walker: &mut Walker) -> Line {
        let is_data = matched == 4 && !other;
        match byte {
            b':' if is_data => Line::DataStart,
            b':' => Line::Ignore,
            b'\n' | b'\r' => {
                self.after_cr = byte == b'\r';
                // `data` alone: a data line with an empty value.
                if is_data {
                    self.data_line(walker);
                }
                Line::Start
            }
            _ if !other && matched < 4 && byte == b"data"[usize::from(matched)] => Line::Name {
                matched: matched + 1,
                other,
            },
            _ => Line::Name {
                matched,
                other: true,
            },
        }
    }

    /// The rest of a `data` line's value, or of a line that does not
    /// matter, up to its end: how many bytes of `rest` it took.
    #[inline]
    fn line_rest(&mut self, rest: &[u8], walker: &mut Walker) -> usize {
        let end = memchr2(b'\n', b'\r', rest);
        if self.line == Line::Data {
            self.data(&rest[..end.unwrap_or(rest.len())], walker);
        }
        match end {
            Some(end) => {
                self.after_cr = rest[end] == b'\r';
                self.line = Line::Start;
                end + 1
            }
            None => rest.len(),
        }
    }

    /// A `data` line starts: its value joins the event's data after an LF.
    fn data_line(&mut self, walker: &mut Walker) {
        if self.has_data {
            self.data(b"\n", walker);
        }
        self.has_data = true;
    }

    fn data(&mut self, piece: &[u8], walker: &mut Walker) {
        if self.data_len > READ_LIMIT {
            return;
        }
        self.data_len += piece.len();
        if self.data_len > READ_LIMIT {
            // Too long: the event is skipped (see `dispatch`).
            return;
        }
        if self.walking {
            walker.feed(piece);
        } else if self.kept.len() + piece.len() <= KEPT {
            if self.kept.capacity() == 0 {
                // Once per stream: enough for most events.
                self.kept.reserve(1024);
            }
            self.kept.extend_from_slice(piece);
        } else {
            self.walking = true;
            walker.feed(&self.kept);
            self.kept.clear();
            walker.feed(piece);
        }
    }

    /// A blank line: the event's data counts if it was one JSON value.
    fn dispatch(&mut self, walker: &mut Walker, readings: &mut [Reading]) {
        if !self.has_data {
            return;
        }
        let complete = if self.walking {
            walker.complete()
        } else if walker.may_carry(&self.kept) {
            walker.feed(&self.kept);
            walker.complete()
        } else {
            // Nothing to commit, whether it is JSON or not.
            false
        };
        if self.data_len <= READ_LIMIT && complete {
            let mut found = walker.found_any();
            while found != 0 {
                let p = found.trailing_zeros() as usize;
                found &= found - 1;
                // An event without the pointer changes nothing.
                if walker.found(p) != Reading::Missing {
                    readings[p] = walker.found(p);
                }
            }
        }
        walker.reset();
        self.has_data = false;
        self.data_len = 0;
        self.kept.clear();
        self.walking = false;
    }
}
