//! The value at a JSON pointer in a whole JSON text, read in one pass that
//! also checks the whole text is one JSON value (RFC 8259), as serde_json
//! would: a `body:` key must not come from a body the upstream will refuse,
//! and a repeated member counts as its last, as most JSON readers take it
//! (so a client cannot show sluice one value and the upstream another).
//!
//! Hand-written for speed (docs/conversation.md, "What it costs"): a JSON
//! body is mostly strings, and here a string is found with `memchr` (a
//! short one byte by byte) and checked for control characters and, only
//! when it has a byte that is not ASCII, for UTF-8, with min and max
//! reductions rather than byte by byte. Nothing is allocated unless the
//! value or a member name on the pointer's path has escapes. Iterative,
//! with the nesting bounded as serde_json bounds it ([`MAX_DEPTH`]). The
//! serde_json walk it replaced is its oracle in the tests (`super::tests`).

use std::borrow::Cow;

use smallvec::SmallVec;

/// Bytes of a string looked at one by one before memchr takes over.
const SHORT: usize = 24;

/// Most containers open at once, as serde_json allows (its recursion
/// limit of 128 counts the container being entered).
pub const MAX_DEPTH: usize = 127;

/// One reference token: a member name, and the array index it matches.
pub type Token<'p> = (&'p [u8], Option<usize>);

/// The key text of the value at `tokens` in `text`, or `None` when the text
/// is not one JSON value, or the value there is missing, `null`, an object
/// or an array (docs/conversation.md, "Keys from the request body").
pub fn value_at<'b>(text: &'b [u8], tokens: &[Token<'_>]) -> Option<Cow<'b, str>> {
    let mut scan = Scan { text, at: 0 };
    scan.document(tokens).ok()?
}

/// Not JSON.
struct Invalid;

/// An open container: whether it is an array, whether its path so far
/// follows the pointer, and the index of its current element.
struct Open {
    array: bool,
    on_path: bool,
    index: usize,
}

struct Scan<'b> {
    text: &'b [u8],
    at: usize,
}

impl<'b> Scan<'b> {
    fn document(&mut self, tokens: &[Token<'_>]) -> Result<Option<Cow<'b, str>>, Invalid> {
        let mut open: SmallVec<[Open; 8]> = SmallVec::new();
        let mut found = None;
        // The top-level value is on the path (the pointer starts there).
        let mut on_path = true;
        'values: loop {
            // A value, `on_path` saying whether it is where the pointer
            // leads (or on the way there).
            let depth = open.len();
            let target = on_path && depth == tokens.len();
            if on_path {
                // A later value on the path supersedes what an earlier one
                // held (a repeated member counts as its last, all the way
                // down, as serde_json's own walk takes it).
                found = None;
            }
            self.skip_space();
            match self.peek()? {
                byte @ (b'{' | b'[') => {
                    self.at += 1;
                    if open.len() == MAX_DEPTH {
                        return Err(Invalid);
                    }
                    let array = byte == b'[';
                    open.push(Open {
                        array,
                        on_path: on_path && !target,
                        index: 0,
                    });
                    self.skip_space();
                    let close = if array { b']' } else { b'}' };
                    if self.peek()? == close {
                        self.at += 1;
                        open.pop();
                    } else {
                        on_path = self.entry(&open, tokens)?;
                        continue 'values;
                    }
                }
                b'"' => {
                    let start = self.at;
                    self.at += 1;
                    let escaped = self.string()?;
                    let inner = &self.text[start + 1..self.at - 1];
                    if target {
                        found = leaf_string(inner, escaped);
                    } else if on_path && escaped && unescape(inner).is_none() {
                        // On the way to the pointer a string is read, as
                        // serde_json reads it: an escape making no text is
                        // an error there (only a skipped one may be).
                        return Err(Invalid);
                    }
                }
                _ => {
                    let start = self.at;
                    let null = self.scalar()?;
                    if target {
                        found = (!null).then(|| text(&self.text[start..self.at]));
                    }
                }
            }
            // After a value: the next entry of its container, or the
            // container's end, or the end of the text.
            loop {
                self.skip_space();
                let Some(container) = open.last_mut() else {
                    return if self.at == self.text.len() {
                        Ok(found)
                    } else {
                        Err(Invalid)
                    };
                };
                let close = if container.array { b']' } else { b'}' };
                match self.peek()? {
                    b',' => {
                        self.at += 1;
                        container.index += 1;
                        on_path = self.entry(&open, tokens)?;
                        continue 'values;
                    }
                    byte if byte == close => {
                        self.at += 1;
                        open.pop();
                    }
                    _ => return Err(Invalid),
                }
            }
        }
    }

    /// Reads the start of the innermost container's next entry (an
    /// object's member name and colon; nothing for an array's element),
    /// and says whether its value is on the pointer's path.
    fn entry(&mut self, open: &[Open], tokens: &[Token<'_>]) -> Result<bool, Invalid> {
        let depth = open.len();
        let container = &open[depth - 1];
        let token = tokens.get(depth - 1).filter(|_| container.on_path);
        if container.array {
            return Ok(token.is_some_and(|(_, index)| *index == Some(container.index)));
        }
        self.skip_space();
        if self.peek()? != b'"' {
            return Err(Invalid);
        }
        self.at += 1;
        let start = self.at;
        let escaped = self.string()?;
        let name = &self.text[start..self.at - 1];
        // A name on the pointer's path is read as serde_json reads one (an
        // escape that makes no text is refused); any other is only skipped.
        let matches = match (escaped, token) {
            (_, None) => false,
            (false, Some((key, _))) => *key == name,
            (true, Some((key, _))) => *key == unescape(name).ok_or(Invalid)?.as_bytes(),
        };
        self.skip_space();
        if self.peek()? != b':' {
            return Err(Invalid);
        }
        self.at += 1;
        Ok(matches)
    }

    fn peek(&self) -> Result<u8, Invalid> {
        self.text.get(self.at).copied().ok_or(Invalid)
    }

    fn skip_space(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.text.get(self.at) {
            self.at += 1;
        }
    }

    /// Skips a string's rest, after its opening quote, through its closing
    /// quote; whether it has escapes. Its bytes must be UTF-8 (outside
    /// strings, a byte that is not ASCII is no JSON at all, so checking
    /// strings checks the text).
    fn string(&mut self) -> Result<bool, Invalid> {
        let opened = self.at;
        let mut escaped = false;
        let mut wide = false;
        loop {
            let rest = &self.text[self.at..];
            // Most strings of a JSON body are short (member names, ids):
            // looked at byte by byte; a long one (a query, a text) goes to
            // memchr, whose setup pays off only past a few words.
            let near = &rest[..rest.len().min(SHORT)];
            let stop = match near.iter().position(|&byte| byte == b'"' || byte == b'\\') {
                Some(stop) => stop,
                None if near.len() < SHORT => return Err(Invalid),
                None => SHORT + memchr::memchr2(b'"', b'\\', &rest[SHORT..]).ok_or(Invalid)?,
            };
            let (lowest, highest) = extremes(&rest[..stop]);
            if lowest < 0x20 {
                return Err(Invalid);
            }
            wide |= highest >= 0x80;
            self.at += stop + 1;
            if rest[stop] == b'"' {
                if wide && std::str::from_utf8(&self.text[opened..self.at - 1]).is_err() {
                    return Err(Invalid);
                }
                return Ok(escaped);
            }
            escaped = true;
            match self.peek()? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 1,
                b'u' => {
                    let digits = self.text.get(self.at + 1..self.at + 5).ok_or(Invalid)?;
                    if !digits.iter().all(u8::is_ascii_hexdigit) {
                        return Err(Invalid);
                    }
                    self.at += 5;
                }
                _ => return Err(Invalid),
            }
        }
    }

    /// Skips a number, `true`, `false` or `null`; whether it was `null`.
    fn scalar(&mut self) -> Result<bool, Invalid> {
        for (word, null) in [(&b"true"[..], false), (b"false", false), (b"null", true)] {
            if self.text[self.at..].starts_with(word) {
                self.at += word.len();
                return Ok(null);
            }
        }
        self.number()?;
        Ok(false)
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Result<(), Invalid> {
        if self.text.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return Err(Invalid),
        }
        if self.text.get(self.at) == Some(&b'.') {
            self.at += 1;
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.text.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.text.get(self.at) {
                self.at += 1;
            }
            self.some_digits()?;
        }
        Ok(())
    }

    fn digits(&mut self) {
        while self.text.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
    }

    fn some_digits(&mut self) -> Result<(), Invalid> {
        let start = self.at;
        self.digits();
        if self.at == start {
            Err(Invalid)
        } else {
            Ok(())
        }
    }
}

/// The lowest and the highest byte of `bytes`: below 0x20 is a control
/// character, which a JSON string may not hold; from 0x80 on, UTF-8 to
/// check. Min and max without an early exit compile to a few instructions
/// per 16 or 32 bytes, where a search would take a few per byte.
fn extremes(bytes: &[u8]) -> (u8, u8) {
    let lowest = bytes.iter().copied().fold(u8::MAX, u8::min);
    let highest = bytes.iter().copied().fold(0, u8::max);
    (lowest, highest)
}

/// A number's or boolean's text (ASCII: the whole text is UTF-8).
fn text(bytes: &[u8]) -> Cow<'_, str> {
    Cow::Borrowed(std::str::from_utf8(bytes).unwrap_or_default())
}

/// A string value's key text: borrowed without escapes, else unescaped
/// (`None` when an escape makes no text: a lone surrogate).
fn leaf_string(inner: &[u8], escaped: bool) -> Option<Cow<'_, str>> {
    if !escaped {
        return Some(text(inner));
    }
    unescape(inner).map(Cow::Owned)
}

/// A string's text with its escapes resolved (the escapes are known to be
/// well formed); `None` for a `\u` escape that is not a character (a
/// surrogate without its pair), which serde_json refuses too.
fn unescape(inner: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(inner).ok()?;
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(slash) = rest.find('\\') {
        out.push_str(&rest[..slash]);
        let escape = &rest[slash + 1..];
        let (decoded, used) = match escape.as_bytes()[0] {
            b'"' => ('"', 1),
            b'\\' => ('\\', 1),
            b'/' => ('/', 1),
            b'b' => ('\u{8}', 1),
            b'f' => ('\u{c}', 1),
            b'n' => ('\n', 1),
            b'r' => ('\r', 1),
            b't' => ('\t', 1),
            _ => {
                let unit = u32::from_str_radix(&escape[1..5], 16).ok()?;
                match unit {
                    0xD800..=0xDBFF => {
                        let low = escape.get(5..11).filter(|low| low.starts_with("\\u"))?;
                        let low = u32::from_str_radix(&low[2..], 16).ok()?;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return None;
                        }
                        let code = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                        (char::from_u32(code)?, 11)
                    }
                    _ => (char::from_u32(unit)?, 5),
                }
            }
        };
        out.push(decoded);
        rest = &escape[used..];
    }
    out.push_str(rest);
    Some(out)
}
