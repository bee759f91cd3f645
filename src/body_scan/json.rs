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
//! Numbers at a pointer keep their first [`SIGNIFICANT`] significant digits
//! (and whether any later digit is non-zero), so a longer number is
//! rounded to the nearest `f64` except in ties decided past that digit;
//! serde_json's own parser (without `float_roundtrip`) may differ from the
//! correctly rounded value by one unit in the last place too.

use memchr::memchr2;
use smallvec::SmallVec;

use super::{Pointer, Reading};

/// How many containers may be open at once: serde_json's recursion limit
/// (its 128th nested container is an error), which a body deeper than this
/// is not JSON for.
pub(crate) const MAX_DEPTH: usize = 127;

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
    /// Inside `true`, `false` or `null`: the bytes still expected.
    Literal(&'static [u8]),
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
    /// (an empty segment where pointer `p` is shorter than the level).
    segments: Vec<super::pointer::Segment>,
    pointers: usize,
    /// Levels 1..=the longest pointer's length (deeper ones need nothing).
    levels: SmallVec<[Level; 4]>,
    state: State,
    /// Containers open.
    depth: usize,
    /// Bit `level - 1` set: that container is an object.
    objects: u128,
    /// Pointers whose value is the scalar being read.
    scalar_for: u16,
    /// Bytes of the key being compared so far, and the pointers whose
    /// segment they still match.
    key_len: usize,
    key_match: u16,
    number: Digits,
    /// What each pointer's value is, as last seen in this value.
    found: SmallVec<[Reading; 4]>,
    /// Pointers with something in `found`.
    found_any: u16,
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
        let mut levels = SmallVec::with_capacity(longest);
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
                    Some(segment) => segment.clone(),
                    None => super::pointer::Segment {
                        key: SmallVec::new(),
                        index: None,
                    },
                });
            }
            levels.push(this);
        }
        Walker {
            segments,
            pointers: count,
            levels,
            state: State::Value,
            depth: 0,
            objects: 0,
            scalar_for: 0,
            key_len: 0,
            key_match: 0,
            number: Digits::default(),
            found: SmallVec::from_elem(Reading::Missing, count),
            found_any: 0,
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
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        let mut at = 0;
        while at < bytes.len() {
            at = match self.state {
                State::Failed => return,
                State::Value => {
                    at = skip_whitespace(bytes, at);
                    match bytes.get(at) {
                        Some(&byte) => self.value(byte, at),
                        None => at,
                    }
                }
                State::FirstElement => {
                    at = skip_whitespace(bytes, at);
                    match bytes.get(at) {
                        Some(b']') => self.close(at),
                        Some(&byte) => {
                            self.element();
                            self.value(byte, at)
                        }
                        None => at,
                    }
                }
                State::FirstKey | State::Key => {
                    at = skip_whitespace(bytes, at);
                    match bytes.get(at) {
                        Some(b'}') if self.state == State::FirstKey => self.close(at),
                        Some(b'"') => {
                            self.key();
                            at + 1
                        }
                        Some(_) => self.fail(),
                        None => at,
                    }
                }
                State::Colon => {
                    at = skip_whitespace(bytes, at);
                    match bytes.get(at) {
                        Some(b':') => {
                            self.state = State::Value;
                            at + 1
                        }
                        Some(_) => self.fail(),
                        None => at,
                    }
                }
                State::Next => {
                    at = skip_whitespace(bytes, at);
                    let in_object = self.in_object();
                    match bytes.get(at) {
                        Some(b',') if in_object => {
                            self.state = State::Key;
                            at + 1
                        }
                        Some(b',') => {
                            if let Some(level) = self.levels.get_mut(self.depth - 1) {
                                level.index = level.index.saturating_add(1);
                            }
                            self.element();
                            self.state = State::Value;
                            at + 1
                        }
                        Some(b'}') if in_object => self.close(at),
                        Some(b']') if !in_object => self.close(at),
                        Some(_) => self.fail(),
                        None => at,
                    }
                }
                State::Str(text) => self.string(text, bytes, at),
                State::Escape(text) => self.escape(text, bytes[at], at),
                State::Unicode {
                    text,
                    high,
                    code,
                    digits,
                } => self.unicode(text, high, code, digits, bytes[at], at),
                State::LowBackslash(text, high) => {
                    self.state = if bytes[at] == b'\\' {
                        State::LowU(text, high)
                    } else {
                        State::Failed
                    };
                    at + 1
                }
                State::LowU(text, high) => {
                    self.state = if bytes[at] == b'u' {
                        State::Unicode {
                            text,
                            high,
                            code: 0,
                            digits: 0,
                        }
                    } else {
                        State::Failed
                    };
                    at + 1
                }
                State::Number(num) => self.number(num, bytes, at),
                State::Literal(rest) => self.literal(rest, bytes, at),
                State::Done => {
                    at = skip_whitespace(bytes, at);
                    if at < bytes.len() {
                        self.fail()
                    } else {
                        at
                    }
                }
            };
        }
    }

    fn fail(&mut self) -> usize {
        self.state = State::Failed;
        usize::MAX
    }

    fn in_object(&self) -> bool {
        self.objects & (1u128 << (self.depth - 1)) != 0
    }

    /// The value starting with `byte` at `at`; returns where to go on.
    fn value(&mut self, byte: u8, at: usize) -> usize {
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
        match byte {
            b'{' | b'[' => {
                self.record(ends, Reading::Malformed);
                if self.depth == MAX_DEPTH {
                    return self.fail();
                }
                self.depth += 1;
                let bit = 1u128 << (self.depth - 1);
                if byte == b'{' {
                    self.objects |= bit;
                    self.state = State::FirstKey;
                } else {
                    self.objects &= !bit;
                    self.state = State::FirstElement;
                }
                if let Some(level) = self.levels.get_mut(self.depth - 1) {
                    level.candidates = deeper;
                    level.current = 0;
                    level.index = 0;
                }
            }
            b'"' => {
                self.scalar_for = ends;
                self.state = State::Str(Text::Value);
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
                self.state = State::Number(num);
            }
            b't' => self.literal_start(ends, b"rue"),
            b'f' => self.literal_start(ends, b"alse"),
            b'n' => self.literal_start(ends, b"ull"),
            _ => return self.fail(),
        }
        at + 1
    }

    fn all(&self) -> u16 {
        ((1u32 << self.pointers) - 1) as u16
    }

    fn literal_start(&mut self, ends: u16, rest: &'static [u8]) {
        self.scalar_for = ends;
        self.state = State::Literal(rest);
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

    /// A member name starts (after its `"`).
    fn key(&mut self) {
        let candidates = self
            .levels
            .get(self.depth - 1)
            .map_or(0, |level| level.candidates);
        if candidates == 0 {
            self.state = State::Str(Text::SkippedKey);
        } else {
            self.key_len = 0;
            self.key_match = candidates;
            self.state = State::Str(Text::ComparedKey);
        }
    }

    /// Compares the next bytes of a member name with the candidates'
    /// segments.
    fn compare_key(&mut self, piece: &[u8]) {
        let row = (self.depth - 1) * self.pointers;
        let (start, end) = (self.key_len, self.key_len + piece.len());
        let mut matching = self.key_match;
        while matching != 0 {
            let p = matching.trailing_zeros() as usize;
            matching &= matching - 1;
            if self.segments[row + p].key.get(start..end) != Some(piece) {
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
            if self.segments[row + p].key.len() == self.key_len {
                current |= 1 << p;
                // A repeated name replaces what its earlier value held
                // (the last one wins, as in serde_json's `Value`).
                self.found[p] = Reading::Missing;
            }
        }
        self.levels[self.depth - 1].current = current;
    }

    fn string(&mut self, text: Text, bytes: &[u8], at: usize) -> usize {
        let rest = &bytes[at..];
        let (span, stop) = match memchr2(b'"', b'\\', rest) {
            Some(end) => (&rest[..end], Some(rest[end])),
            None => (rest, None),
        };
        // A raw control character is not allowed in a JSON string.
        if span.iter().fold(false, |seen, &byte| seen | (byte < 0x20)) {
            return self.fail();
        }
        if text == Text::ComparedKey {
            self.compare_key(span);
        }
        match stop {
            None => bytes.len(),
            Some(b'\\') => {
                self.state = State::Escape(text);
                at + span.len() + 1
            }
            Some(_) => {
                match text {
                    Text::Value => {
                        self.record(self.scalar_for, Reading::Malformed);
                        self.value_end();
                    }
                    Text::SkippedKey => self.state = State::Colon,
                    Text::ComparedKey => {
                        self.key_end();
                        self.state = State::Colon;
                    }
                }
                at + span.len() + 1
            }
        }
    }

    fn escape(&mut self, text: Text, byte: u8, at: usize) -> usize {
        let unescaped = match byte {
            b'"' | b'\\' | b'/' => byte,
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                self.state = State::Unicode {
                    text,
                    high: 0,
                    code: 0,
                    digits: 0,
                };
                return at + 1;
            }
            _ => return self.fail(),
        };
        if text == Text::ComparedKey {
            self.compare_key(&[unescaped]);
        }
        self.state = State::Str(text);
        at + 1
    }

    fn unicode(
        &mut self,
        text: Text,
        high: u16,
        code: u16,
        digits: u8,
        byte: u8,
        at: usize,
    ) -> usize {
        let Some(digit) = (byte as char).to_digit(16) else {
            return self.fail();
        };
        let code = (code << 4) | digit as u16;
        if digits < 3 {
            self.state = State::Unicode {
                text,
                high,
                code,
                digits: digits + 1,
            };
            return at + 1;
        }
        let scalar = match (high, code) {
            (0, 0xD800..=0xDBFF) => {
                self.state = State::LowBackslash(text, code);
                return at + 1;
            }
            (0, 0xDC00..=0xDFFF) => return self.fail(),
            (0, _) => u32::from(code),
            (_, 0xDC00..=0xDFFF) => {
                0x1_0000 + (((u32::from(high) - 0xD800) << 10) | (u32::from(code) - 0xDC00))
            }
            _ => return self.fail(),
        };
        if text == Text::ComparedKey {
            let mut utf8 = [0; 4];
            // Every value here is a scalar value (surrogates were paired).
            let encoded = char::from_u32(scalar)
                .unwrap_or('\u{FFFD}')
                .encode_utf8(&mut utf8);
            self.compare_key(encoded.as_bytes());
        }
        self.state = State::Str(text);
        at + 1
    }

    fn number(&mut self, mut num: Num, bytes: &[u8], mut at: usize) -> usize {
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
                    // number is counted only once something may follow it:
                    // `0x10` is not 0).
                    if reading {
                        self.record(self.scalar_for, self.number.reading());
                    }
                    self.value_end();
                    return at;
                }
                _ => return self.fail(),
            };
            if reading {
                self.number.push(next, byte);
            }
            num = next;
            at += 1;
        }
        self.state = State::Number(num);
        at
    }

    fn literal(&mut self, mut rest: &'static [u8], bytes: &[u8], mut at: usize) -> usize {
        while let (Some(&want), Some(&byte)) = (rest.first(), bytes.get(at)) {
            if want != byte {
                return self.fail();
            }
            rest = &rest[1..];
            at += 1;
        }
        if rest.is_empty() {
            self.record(self.scalar_for, Reading::Malformed);
            self.value_end();
        } else {
            self.state = State::Literal(rest);
        }
        at
    }

    /// The container on top of the stack ends with the byte at `at`.
    fn close(&mut self, at: usize) -> usize {
        self.depth -= 1;
        self.value_end();
        at + 1
    }

    /// A value ended.
    fn value_end(&mut self) {
        self.state = if self.depth == 0 {
            State::Done
        } else {
            State::Next
        };
    }

    fn record(&mut self, pointers: u16, reading: Reading) {
        let mut pointers = pointers;
        self.found_any |= pointers;
        while pointers != 0 {
            self.found[pointers.trailing_zeros() as usize] = reading;
            pointers &= pointers - 1;
        }
    }
}

fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(at) {
        at += 1;
    }
    at
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
