//! The JSON walk: a validating state machine fed a value in arbitrary
//! pieces, which notes the values found at its pointers as it passes them
//! and keeps nothing else of the text.
//!
//! What it holds between pieces is its state (a few bytes), the container
//! stack as one bit per level (object or array), per level a pointer could
//! still reach the pointers that match the path so far (and the array index
//! there), the length of a key being compared and the digits of a number
//! being read at a pointer. Strings that no pointer needs are skipped with
//! `memchr2`; a key is compared only where some pointer could match it, as
//! its bytes go by, so it is never copied.
//!
//! It accepts exactly what `serde_json::from_slice::<Value>` accepts, but
//! for these deliberate edges:
//!
//! - invalid UTF-8 inside strings is not checked (outside strings it is not
//!   JSON anyway);
//! - a number too large for an `f64` (`1e400`) is well-formed JSON here
//!   (RFC 8259's grammar), so a document holding one still counts; at a
//!   pointer it is malformed. serde_json refuses the whole document.
//!
//! And one in what a number is worth: a negative number too small for an
//! `f64` (`-1e-400`) is negative, so malformed; serde_json reads it as
//! `-0.0` (`-0` itself is 0 for both).
//!
//! Numbers at a pointer keep their first [`SIGNIFICANT`] significant digits
//! (and whether any later digit is non-zero), so a longer number is
//! rounded to the nearest `f64` except in ties decided past that digit;
//! serde_json's own parser (without `float_roundtrip`) may differ from the
//! correctly rounded value by one unit in the last place too.

use memchr::memmem::Finder;
use memchr::{memchr, memchr2};
use smallvec::SmallVec;

use super::{Pointer, Reading, MAX_POINTERS};

/// How many containers may be open at once: serde_json's recursion limit
/// (its 128th nested container is an error), which a body deeper than this
/// is not JSON for.
pub(super) const MAX_DEPTH: usize = 127;

/// Significant digits kept of a number read at a pointer (an `f64` needs
/// 17 to round-trip; the rest only decide rare ties).
const SIGNIFICANT: usize = 32;

/// Where the walk is in the grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A value starts here (at the top, after `:`, after `,` in an array).
    Value,
    /// After `[`: a value or `]`.
    FirstElement,
    /// After `{`: a key or `}`.
    FirstKey,
    /// After `,` in an object: a key.
    Key,
    /// After a key: `:`.
    Colon,
    /// After a value in a container: `,` or the container's end.
    Next,
    /// Inside a string.
    Str(Text),
    /// After a backslash in a string.
    Escape(Text),
    /// Inside `\uXXXX`: `digits` read so far make `code`; `high` is the
    /// leading surrogate before it, 0 for none.
    Unicode {
        text: Text,
        high: u16,
        code: u16,
        digits: u8,
    },
    /// After a leading surrogate's escape: its trailing one's `\`, then `u`.
    LowBackslash(Text, u16),
    LowU(Text, u16),
    Number(Num),
    /// Inside one of [`LITERALS`]: which one, and the bytes of it read.
    /// (Small variants keep `State` in a register.)
    Literal(u8, u8),
    /// After the top-level value: only whitespace may follow.
    Done,
    /// Not JSON: nothing more is read.
    Failed,
}

/// What a string is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Text {
    Value,
    /// A member name no pointer could match here: only skipped.
    SkippedKey,
    /// A member name compared with the pointers' segments at this level.
    ComparedKey,
}

/// The words JSON has.
const LITERALS: [&[u8]; 3] = [b"true", b"false", b"null"];

/// Where a number is in the JSON grammar
/// (`-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Num {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    E,
    ESign,
    Exp,
}

impl Num {
    /// Whether the number may end here.
    fn complete(self) -> bool {
        matches!(self, Num::Zero | Num::Int | Num::Frac | Num::Exp)
    }
}

/// A pointer's segment as the walk compares it.
#[derive(Debug, Clone)]
struct Slot {
    /// The name's length (read without looking into `key`).
    len: usize,
    index: Option<usize>,
    key: SmallVec<[u8; 24]>,
}

/// One level of the container stack that some pointer could reach.
#[derive(Debug, Clone, Copy, Default)]
struct Level {
    /// Pointers the container's own path matches (so its members are
    /// compared with their next segment).
    candidates: u16,
    /// Pointers the current member (key or index) matches too.
    current: u16,
    /// The current element's index, in an array with candidates.
    index: usize,
    /// Pointers that end at this level / go deeper (fixed by the pointers).
    ends_here: u16,
    goes_deeper: u16,
}

/// The walk over one JSON value.
#[derive(Debug, Clone)]
pub(super) struct Walker {
    /// Every pointer's segment at each level: `segments[(level - 1) * pointers + p]`
    /// (an empty one where pointer `p` is shorter than the level).
    segments: Box<[Slot]>,
    pointers: usize,
    /// Levels 1..=the longest pointer's length (deeper ones need nothing).
    levels: Box<[Level]>,
    state: State,
    /// Containers open.
    depth: usize,
    /// The containers open as a stack of bits, the innermost lowest: set
    /// for an object.
    objects: u128,
    /// Pointers whose value is the scalar being read.
    scalar_for: u16,
    /// Bytes of the key being compared so far, and the pointers whose
    /// segment they still match.
    key_len: usize,
    key_match: u16,
    number: Digits,
    /// What each pointer's value is, as last seen in this value.
    found: [Reading; MAX_POINTERS],
    /// Pointers with something in `found`.
    found_any: u16,
    /// Per pointer, a searcher for its longest segment that can only be a
    /// member name, between quotes (see [`Walker::may_carry`]); `None`
    /// when it has none. Built once: a search then costs no setup.
    names: SmallVec<[Option<Finder<'static>>; 4]>,
}

impl Walker {
    pub(super) fn new(pointers: &[&Pointer]) -> Walker {
        let count = pointers.len();
        let longest = pointers
            .iter()
            .map(|p| p.segments().len())
            .max()
            .unwrap_or(0);
        let mut segments = Vec::with_capacity(longest * count);
        let mut levels = Vec::with_capacity(longest);
        for level in 1..=longest {
            let mut this = Level::default();
            for (p, pointer) in pointers.iter().enumerate() {
                let bit = 1u16 << p;
                match pointer.segments().len() {
                    len if len == level => this.ends_here |= bit,
                    len if len > level => this.goes_deeper |= bit,
                    _ => {}
                }
                segments.push(match pointer.segments().get(level - 1) {
                    Some(segment) => Slot {
                        len: segment.key.len(),
                        index: segment.index,
                        key: segment.key.clone(),
                    },
                    None => Slot {
                        len: 0,
                        index: None,
                        key: SmallVec::new(),
                    },
                });
            }
            levels.push(this);
        }
        let names = (0..count)
            .map(|p| {
                let slot = (1..=pointers[p].segments().len())
                    .map(|level| (level - 1) * count + p)
                    .filter(|&slot| segments[slot].index.is_none())
                    .max_by_key(|&slot| segments[slot].len)?;
                let mut quoted = Vec::with_capacity(segments[slot].len + 2);
                quoted.push(b'"');
                quoted.extend_from_slice(&segments[slot].key);
                quoted.push(b'"');
                Some(Finder::new(&quoted).into_owned())
            })
            .collect();
        Walker {
            segments: segments.into_boxed_slice(),
            pointers: count,
            levels: levels.into_boxed_slice(),
            state: State::Value,
            depth: 0,
            objects: 0,
            scalar_for: 0,
            key_len: 0,
            key_match: 0,
            number: Digits::default(),
            found: [Reading::Missing; MAX_POINTERS],
            found_any: 0,
            names,
        }
    }

    /// What was found at pointer `p` in this value so far.
    pub(super) fn found(&self, p: usize) -> Reading {
        self.found.get(p).copied().unwrap_or(Reading::Missing)
    }

    /// The pointers with a value found (set bits; the readings may be
    /// `Missing` again).
    pub(super) fn found_any(&self) -> u16 {
        self.found_any
    }

    /// Whether the text so far is exactly one JSON value (and whitespace).
    pub(super) fn complete(&self) -> bool {
        match self.state {
            State::Done => true,
            // A number at the top ends with the text.
            State::Number(num) => self.depth == 0 && num.complete(),
            _ => false,
        }
    }

    /// Whether `text` could carry one of the pointers: `false` only when
    /// it cannot, so an event that is `false` need not be walked at all.
    ///
    /// Text without a backslash holds every member name as written, so a
    /// pointer it carries has each of its names in it between quotes; one
    /// name missing (its longest, the likeliest to be rare) rules the pointer out. A
    /// segment that is also an array index (`/0`) may name an element
    /// instead, so it rules nothing out.
    pub(super) fn may_carry(&self, text: &[u8]) -> bool {
        if memchr(b'\\', text).is_some() {
            return true;
        }
        self.names.iter().any(|name| match name {
            None => true,
            Some(finder) => finder.find(text).is_some(),
        })
    }

    /// Whether the text is not JSON (nothing more will be read).
    pub(super) fn failed(&self) -> bool {
        self.state == State::Failed
    }

    /// Ready for the next value, forgetting what was found.
    pub(super) fn reset(&mut self) {
        self.state = State::Value;
        self.depth = 0;
        self.objects = 0;
        let mut any = self.found_any;
        while any != 0 {
            self.found[any.trailing_zeros() as usize] = Reading::Missing;
            any &= any - 1;
        }
        self.found_any = 0;
    }

    /// Reads the next piece of the text.
    ///
    /// Each handler returns the state and position after what it read;
    /// the common sequences (a member name and its colon, a comma and the
    /// next name, a value's first byte and the value) are read by one
    /// handler calling the next, never in a cycle, so the stack stays flat.
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        let mut state = self.state;
        let mut at = 0;
        while at < bytes.len() {
            (state, at) = match state {
                State::Failed => break,
                State::Value => match token(bytes, at) {
                    Some(at) => self.value(bytes, at),
                    None => break,
                },
                State::FirstElement => match token(bytes, at) {
                    Some(at) if bytes[at] == b']' => self.close(at),
                    Some(at) => {
                        self.element();
                        self.value(bytes, at)
                    }
                    None => break,
                },
                State::FirstKey | State::Key => match token(bytes, at) {
                    Some(at) if bytes[at] == b'"' => self.member(bytes, at + 1),
                    Some(at) if bytes[at] == b'}' && state == State::FirstKey => self.close(at),
                    Some(at) => (State::Failed, at),
                    None => break,
                },
                State::Colon => match token(bytes, at) {
                    Some(at) if bytes[at] == b':' => (State::Value, at + 1),
                    Some(at) => (State::Failed, at),
                    None => break,
                },
                State::Next => match token(bytes, at) {
                    Some(at) => self.next(bytes, at),
                    None => break,
                },
                State::Str(text) => self.string(text, bytes, at),
                State::Escape(text) => match unescape(bytes[at]) {
                    Some(byte) => {
                        if text == Text::ComparedKey {
                            self.compare_key(&[byte]);
                        }
                        (State::Str(text), at + 1)
                    }
                    None if bytes[at] == b'u' => (State::unicode(text, 0), at + 1),
                    None => (State::Failed, at),
                },
                State::Unicode {
                    text,
                    high,
                    code,
                    digits,
                } => self.unicode(text, high, code, digits, bytes[at], at),
                State::LowBackslash(text, high) if bytes[at] == b'\\' => {
                    (State::LowU(text, high), at + 1)
                }
                State::LowU(text, high) if bytes[at] == b'u' => {
                    (State::unicode(text, high), at + 1)
                }
                State::LowBackslash(..) | State::LowU(..) => (State::Failed, at),
                State::Number(num) => self.number(num, bytes, at),
                State::Literal(word, read) => self.literal(word, read, bytes, at),
                State::Done => match token(bytes, at) {
                    Some(at) => (State::Failed, at),
                    None => break,
                },
            };
        }
        self.state = state;
    }

    fn in_object(&self) -> bool {
        self.objects & 1 != 0
    }

    /// The value starting at `at` (not whitespace).
    #[inline(always)]
    fn value(&mut self, bytes: &[u8], at: usize) -> (State, usize) {
        // Which pointers end at this value, and which go on inside it.
        let (ends, deeper) = match self.depth {
            0 => (0, self.all()),
            depth => match self.levels.get(depth - 1) {
                Some(level) => (
                    level.current & level.ends_here,
                    level.current & level.goes_deeper,
                ),
                None => (0, 0),
            },
        };
        let byte = bytes[at];
        match byte {
            b'{' | b'[' => {
                self.record(ends, Reading::Malformed);
                if self.depth == MAX_DEPTH {
                    return (State::Failed, at);
                }
                self.depth += 1;
                self.objects = (self.objects << 1) | u128::from(byte == b'{');
                if let Some(level) = self.levels.get_mut(self.depth - 1) {
                    level.candidates = deeper;
                    level.current = 0;
                    level.index = 0;
                }
                if byte == b'{' {
                    (State::FirstKey, at + 1)
                } else {
                    (State::FirstElement, at + 1)
                }
            }
            b'"' => {
                self.scalar_for = ends;
                self.string(Text::Value, bytes, at + 1)
            }
            b'-' | b'0'..=b'9' => {
                self.scalar_for = ends;
                let num = match byte {
                    b'-' => Num::Minus,
                    b'0' => Num::Zero,
                    _ => Num::Int,
                };
                if ends != 0 {
                    self.number = Digits::default();
                    self.number.push(num, byte);
                }
                self.number(num, bytes, at + 1)
            }
            b't' | b'f' | b'n' => {
                self.scalar_for = ends;
                let word = match byte {
                    b't' => 0,
                    b'f' => 1,
                    _ => 2,
                };
                self.literal(word, 1, bytes, at + 1)
            }
            _ => (State::Failed, at),
        }
    }

    fn all(&self) -> u16 {
        ((1u32 << self.pointers) - 1) as u16
    }

    /// After a value in a container, the byte at `at` (not whitespace).
    #[inline(always)]
    fn next(&mut self, bytes: &[u8], at: usize) -> (State, usize) {
        let in_object = self.in_object();
        match bytes[at] {
            b',' if in_object => match token(bytes, at + 1) {
                Some(at) if bytes[at] == b'"' => self.member(bytes, at + 1),
                Some(at) => (State::Failed, at),
                None => (State::Key, bytes.len()),
            },
            b',' => {
                if let Some(level) = self.levels.get_mut(self.depth - 1) {
                    level.index = level.index.saturating_add(1);
                }
                self.element();
                match token(bytes, at + 1) {
                    Some(at) => self.value(bytes, at),
                    None => (State::Value, bytes.len()),
                }
            }
            b'}' if in_object => self.close(at),
            b']' if !in_object => self.close(at),
            _ => (State::Failed, at),
        }
    }

    /// A new element of the array at the top of the stack starts.
    fn element(&mut self) {
        let Some(level) = self.levels.get(self.depth - 1) else {
            return;
        };
        if level.candidates == 0 {
            return;
        }
        let (mut candidates, index) = (level.candidates, level.index);
        let row = (self.depth - 1) * self.pointers;
        let mut current = 0;
        while candidates != 0 {
            let p = candidates.trailing_zeros() as usize;
            candidates &= candidates - 1;
            if self.segments[row + p].index == Some(index) {
                current |= 1 << p;
            }
        }
        self.levels[self.depth - 1].current = current;
    }

    /// A member starts at `at` (after its name's `"`): its name, and its
    /// value when the name and colon are all here and the value follows
    /// at once (as in compact JSON).
    #[inline(always)]
    fn member(&mut self, bytes: &[u8], at: usize) -> (State, usize) {
        match self.key(bytes, at) {
            (State::Value, at) if bytes.get(at).is_some_and(|&byte| !is_whitespace(byte)) => {
                self.value(bytes, at)
            }
            after => after,
        }
    }

    /// A member name starts at `at` (after its `"`).
    #[inline(always)]
    fn key(&mut self, bytes: &[u8], at: usize) -> (State, usize) {
        let candidates = self
            .levels
            .get(self.depth - 1)
            .map_or(0, |level| level.candidates);
        if candidates == 0 {
            self.string(Text::SkippedKey, bytes, at)
        } else {
            self.key_len = 0;
            self.key_match = candidates;
            self.string(Text::ComparedKey, bytes, at)
        }
    }

    /// Compares the next bytes of a member name with the candidates'
    /// segments.
    #[inline(always)]
    fn compare_key(&mut self, piece: &[u8]) {
        let row = (self.depth - 1) * self.pointers;
        let (start, end) = (self.key_len, self.key_len + piece.len());
        let mut matching = self.key_match;
        while matching != 0 {
            let p = matching.trailing_zeros() as usize;
            matching &= matching - 1;
            let slot = &self.segments[row + p];
            // Most names differ in length: no bytes compared.
            // (A byte loop: names are short, a call to memcmp costs more.)
            if slot.len < end || !slot.key[start..end].iter().zip(piece).all(|(a, b)| a == b) {
                self.key_match &= !(1 << p);
            }
        }
        self.key_len = end;
    }

    /// The closing `"` of a member name that was compared.
    fn key_end(&mut self) {
        let row = (self.depth - 1) * self.pointers;
        let mut matching = self.key_match;
        let mut current = 0;
        while matching != 0 {
            let p = matching.trailing_zeros() as usize;
            matching &= matching - 1;
            if self.segments[row + p].len == self.key_len {
                current |= 1 << p;
                // A repeated name replaces what its earlier value held
                // (the last one wins, as in serde_json's `Value`).
                self.found[p] = Reading::Missing;
            }
        }
        self.levels[self.depth - 1].current = current;
    }

    /// Inside a string, from `at`: skips (or compares) to its end, reading
    /// escapes that are all in this piece on the way.
    #[inline(always)]
    fn string(&mut self, text: Text, bytes: &[u8], mut at: usize) -> (State, usize) {
        let compared = text == Text::ComparedKey;
        loop {
            let rest = &bytes[at..];
            let Some(end) = string_stop(rest) else {
                if compared {
                    self.compare_key(rest);
                }
                return (State::Str(text), bytes.len());
            };
            if compared {
                self.compare_key(&rest[..end]);
            }
            at += end + 1;
            match rest[end] {
                b'"' => return self.string_end(text, bytes, at),
                b'\\' => {}
                // A raw control character is not allowed in a JSON string.
                _ => return (State::Failed, at),
            }
            let Some(&escaped) = bytes.get(at) else {
                return (State::Escape(text), at);
            };
            match unescape(escaped) {
                Some(byte) => {
                    if compared {
                        self.compare_key(&[byte]);
                    }
                    at += 1;
                }
                None if escaped == b'u' => return (State::unicode(text, 0), at + 1),
                None => return (State::Failed, at),
            }
        }
    }

    /// A string ended just before `at`.
    #[inline(always)]
    fn string_end(&mut self, text: Text, bytes: &[u8], at: usize) -> (State, usize) {
        match text {
            Text::Value => {
                self.record(self.scalar_for, Reading::Malformed);
                (self.value_end(), at)
            }
            Text::SkippedKey | Text::ComparedKey => {
                if text == Text::ComparedKey {
                    self.key_end();
                }
                // The colon, most often right there.
                if bytes.get(at) == Some(&b':') {
                    (State::Value, at + 1)
                } else {
                    (State::Colon, at)
                }
            }
        }
    }

    fn unicode(
        &mut self,
        text: Text,
        high: u16,
        code: u16,
        digits: u8,
        byte: u8,
        at: usize,
    ) -> (State, usize) {
        let Some(digit) = (byte as char).to_digit(16) else {
            return (State::Failed, at);
        };
        let code = (code << 4) | digit as u16;
        if digits < 3 {
            let state = State::Unicode {
                text,
                high,
                code,
                digits: digits + 1,
            };
            return (state, at + 1);
        }
        let scalar = match (high, code) {
            (0, 0xD800..=0xDBFF) => return (State::LowBackslash(text, code), at + 1),
            (0, 0xDC00..=0xDFFF) => return (State::Failed, at),
            (0, _) => u32::from(code),
            (_, 0xDC00..=0xDFFF) => {
                0x1_0000 + (((u32::from(high) - 0xD800) << 10) | (u32::from(code) - 0xDC00))
            }
            _ => return (State::Failed, at),
        };
        if text == Text::ComparedKey {
            let mut utf8 = [0; 4];
            // Every value here is a scalar value (surrogates were paired).
            let encoded = char::from_u32(scalar)
                .unwrap_or('\u{FFFD}')
                .encode_utf8(&mut utf8);
            self.compare_key(encoded.as_bytes());
        }
        (State::Str(text), at + 1)
    }

    #[inline(always)]
    fn number(&mut self, mut num: Num, bytes: &[u8], mut at: usize) -> (State, usize) {
        let reading = self.scalar_for != 0;
        while let Some(&byte) = bytes.get(at) {
            let next = match (num, byte) {
                (Num::Minus, b'0') => Num::Zero,
                (Num::Minus, b'1'..=b'9') => Num::Int,
                (Num::Int, b'0'..=b'9') => Num::Int,
                (Num::Zero | Num::Int, b'.') => Num::Dot,
                (Num::Dot | Num::Frac, b'0'..=b'9') => Num::Frac,
                (Num::Zero | Num::Int | Num::Frac, b'e' | b'E') => Num::E,
                (Num::E, b'+' | b'-') => Num::ESign,
                (Num::E | Num::ESign | Num::Exp, b'0'..=b'9') => Num::Exp,
                (
                    Num::Zero | Num::Int | Num::Frac | Num::Exp,
                    b' ' | b'\t' | b'\n' | b'\r' | b',' | b']' | b'}',
                ) => {
                    // The number ended; this byte is the next token's (a
                    // number counts only once something may follow it:
                    // `0x10` is not 0).
                    if reading {
                        self.record(self.scalar_for, self.number.reading());
                    }
                    return (self.value_end(), at);
                }
                _ => return (State::Failed, at),
            };
            if reading {
                self.number.push(next, byte);
            }
            num = next;
            at += 1;
        }
        (State::Number(num), at)
    }

    /// Inside `LITERALS[word]`, `read` bytes of it read.
    #[inline(always)]
    fn literal(&mut self, word: u8, read: u8, bytes: &[u8], at: usize) -> (State, usize) {
        let rest = &LITERALS[usize::from(word)][usize::from(read)..];
        let here = &bytes[at..];
        let common = rest.len().min(here.len());
        if rest[..common] != here[..common] {
            return (State::Failed, at);
        }
        if common == rest.len() {
            self.record(self.scalar_for, Reading::Malformed);
            (self.value_end(), at + common)
        } else {
            (State::Literal(word, read + common as u8), at + common)
        }
    }

    /// The container on top of the stack ends with the byte at `at`.
    #[inline(always)]
    fn close(&mut self, at: usize) -> (State, usize) {
        self.depth -= 1;
        self.objects >>= 1;
        (self.value_end(), at + 1)
    }

    /// The state after a value.
    fn value_end(&self) -> State {
        if self.depth == 0 {
            State::Done
        } else {
            State::Next
        }
    }

    #[inline(always)]
    fn record(&mut self, pointers: u16, reading: Reading) {
        if pointers == 0 {
            return;
        }
        let mut pointers = pointers;
        self.found_any |= pointers;
        while pointers != 0 {
            self.found[pointers.trailing_zeros() as usize] = reading;
            pointers &= pointers - 1;
        }
    }
}

impl State {
    fn unicode(text: Text, high: u16) -> State {
        State::Unicode {
            text,
            high,
            code: 0,
            digits: 0,
        }
    }
}

fn is_whitespace(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

/// Where the next token starts, past whitespace; `None` at the end.
fn token(bytes: &[u8], mut at: usize) -> Option<usize> {
    while let Some(&byte) = bytes.get(at) {
        if !is_whitespace(byte) {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// The byte a one-character escape (`\n`) stands for.
fn unescape(byte: u8) -> Option<u8> {
    match byte {
        b'"' | b'\\' | b'/' => Some(byte),
        b'b' => Some(0x08),
        b'f' => Some(0x0c),
        b'n' => Some(b'\n'),
        b'r' => Some(b'\r'),
        b't' => Some(b'\t'),
        _ => None,
    }
}

const ONES: u64 = u64::from_le_bytes([0x01; 8]);
const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);

/// The bytes of `word` below `bound` (≤ 0x80), flagged by their high bit;
/// the lowest flag is exact (a borrow may flag bytes above it).
fn below(word: u64, bound: u8) -> u64 {
    word.wrapping_sub(ONES * u64::from(bound)) & !word & HIGHS
}

/// The bytes of `word` equal to `byte`, flagged as [`below`] flags them.
fn equal(word: u64, byte: u8) -> u64 {
    below(word ^ (ONES * u64::from(byte)), 1)
}

/// The first eight bytes of `bytes` (which has them) as one word.
fn word(bytes: &[u8]) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(word)
}

/// Where a string's text stops in `bytes`: at the first `"`, `\` or raw
/// control character (which is not allowed); `None` when all of it is
/// text. Most strings end within a few words, read eight bytes at a time
/// here (a call into `memchr2` costs more); a longer one is searched with
/// `memchr2`, and what it skipped checked for control characters.
#[inline(always)]
fn string_stop(bytes: &[u8]) -> Option<usize> {
    const SHORT: usize = 32;
    let mut at = 0;
    for chunk in bytes[..bytes.len().min(SHORT)].chunks_exact(8) {
        let word = word(chunk);
        let stops = equal(word, b'"') | equal(word, b'\\') | below(word, 0x20);
        if stops != 0 {
            return Some(at + stops.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    if bytes.len() < SHORT {
        let tail = bytes[at..]
            .iter()
            .position(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20);
        return tail.map(|stop| at + stop);
    }
    let rest = &bytes[at..];
    let end = memchr2(b'"', b'\\', rest);
    let text = &rest[..end.unwrap_or(rest.len())];
    match first_control(text) {
        Some(control) => Some(at + control),
        None => end.map(|end| at + end),
    }
}

/// Where the first byte below 0x20 in `text` is, eight bytes at a time.
fn first_control(text: &[u8]) -> Option<usize> {
    let mut words = text.chunks_exact(8);
    for (index, chunk) in (&mut words).enumerate() {
        let controls = below(word(chunk), 0x20);
        if controls != 0 {
            return Some(index * 8 + controls.trailing_zeros() as usize / 8);
        }
    }
    let tail = words.remainder();
    let start = text.len() - tail.len();
    tail.iter()
        .position(|&byte| byte < 0x20)
        .map(|stop| start + stop)
}

/// A number read at a pointer, kept in bounded space: its first
/// [`SIGNIFICANT`] significant digits, whether a later one is not zero,
/// and the power of ten they are scaled by.
#[derive(Debug, Clone, Copy, Default)]
struct Digits {
    negative: bool,
    digits: [u8; SIGNIFICANT],
    len: usize,
    /// A non-zero digit was dropped.
    sticky: bool,
    /// The value is `digits × 10^(scale ± exponent)`.
    scale: i64,
    exponent: i64,
    exponent_negative: bool,
}

impl Digits {
    /// `byte` took the number to `state`.
    fn push(&mut self, state: Num, byte: u8) {
        match state {
            Num::Minus => self.negative = true,
            Num::Zero | Num::Int => {
                if self.len == 0 && byte == b'0' {
                    // 0 before the point: nothing to keep.
                } else if self.len < SIGNIFICANT {
                    self.digits[self.len] = byte;
                    self.len += 1;
                } else {
                    self.scale += 1;
                    self.sticky |= byte != b'0';
                }
            }
            Num::Frac => {
                if self.len == 0 && byte == b'0' {
                    self.scale -= 1;
                } else if self.len < SIGNIFICANT {
                    self.digits[self.len] = byte;
                    self.len += 1;
                    self.scale -= 1;
                } else {
                    self.sticky |= byte != b'0';
                }
            }
            Num::ESign => self.exponent_negative = byte == b'-',
            // Far beyond any f64 either way, and no overflow.
            Num::Exp => self.exponent = (self.exponent * 10 + i64::from(byte - b'0')).min(1 << 40),
            Num::Dot | Num::E => {}
        }
    }

    /// What the number is as a charge.
    fn reading(&self) -> Reading {
        if self.len == 0 {
            return Reading::Number(0.0);
        }
        // digits, [1], e, exponent: at most 32 + 1 + 1 + 15 bytes.
        let mut text = [0u8; SIGNIFICANT + 24];
        text[..self.len].copy_from_slice(&self.digits[..self.len]);
        let mut end = self.len;
        let mut exponent = self.scale;
        if self.sticky {
            text[end] = b'1';
            end += 1;
            exponent -= 1;
        }
        exponent += if self.exponent_negative {
            -self.exponent
        } else {
            self.exponent
        };
        text[end] = b'e';
        end += 1;
        if exponent < 0 {
            text[end] = b'-';
            end += 1;
        }
        let mut magnitude = exponent.unsigned_abs();
        let start = end;
        loop {
            text[end] = b'0' + (magnitude % 10) as u8;
            end += 1;
            magnitude /= 10;
            if magnitude == 0 {
                break;
            }
        }
        text[start..end].reverse();
        let value: f64 = std::str::from_utf8(&text[..end])
            .ok()
            .and_then(|text| text.parse().ok())
            .unwrap_or(f64::INFINITY);
        if self.negative || !value.is_finite() {
            // -0 was caught above (no significant digit); anything else
            // negative is malformed.
            Reading::Malformed
        } else {
            Reading::Number(value)
        }
    }
}
