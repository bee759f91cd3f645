//! Whether a request body is JSON sluice reads, JSON only a lenient server
//! would still read, or not JSON at all (docs/conversation.md, "A body
//! sluice cannot read"). A rule that keys on the body must never pass a
//! body it could not read to an upstream that reads it anyway: Python's
//! `json.loads(bytes)` takes UTF-16 and a byte-order mark, Node's
//! `TextDecoder` replaces invalid UTF-8, Go's `json.Decoder` and Jackson
//! stop after the first value, Python takes `NaN` and unpaired
//! surrogates, and every one of them nests deeper than serde_json's 128
//! levels. Such a body is refused (400), whatever the rule's `missing`;
//! one that no reader takes (not JSON, cut short) leaves `missing` to
//! decide.
//!
//! One pass over the bytes, holding no value: a bit per open container.
//! It reads the JSON grammar (RFC 8259) and notes each place where
//! serde_json's reading into a `Value` (what sluice's readers build on)
//! would stop but a lenient reader goes on; the fuzz target `body_json`
//! checks [`judge`] against serde_json and a lenient reader built on it.

/// What a body is to JSON readers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonText {
    /// Exactly one JSON value, which serde_json reads.
    Strict,
    /// An object or an array a lenient reader would still read, which
    /// sluice cannot: why.
    Lenient(UnreadableBody),
    /// Not JSON to any reader (or a lenient reading of a lone scalar, which
    /// holds no key).
    NotJson,
}

/// Why a body a rule reads cannot be read by sluice, although a lenient
/// server would read it; each is a 400 of type
/// `tag:sluice,2026:problems/unreadable-body`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnreadableBody {
    /// A `Content-Encoding` sluice does not decode, or a body that does not
    /// decode as its coding says.
    Coding,
    /// A UTF-8 byte-order mark before the value.
    ByteOrderMark,
    /// UTF-16 text (with or without its byte-order mark).
    Utf16,
    /// UTF-32 text (with or without its byte-order mark).
    Utf32,
    /// Bytes other than whitespace after the value.
    AfterValue,
    /// A string holding bytes that are not UTF-8.
    InvalidUtf8,
    /// A `\u` escape of half a surrogate pair.
    LoneSurrogate,
    /// `NaN`, `Infinity` or `-Infinity`.
    NonFinite,
    /// A number beyond a 64-bit float.
    OutOfRange,
    /// Containers nested deeper than serde_json reads.
    TooDeep,
}

impl UnreadableBody {
    /// Why, in words a client can act on.
    pub fn reason(self) -> &'static str {
        match self {
            UnreadableBody::Coding => {
                "its Content-Encoding is not one sluice decodes (gzip, deflate, br, zstd), or it \
                 does not decode as that coding"
            }
            UnreadableBody::ByteOrderMark => "it starts with a byte-order mark",
            UnreadableBody::Utf16 => "it is UTF-16 text; send UTF-8",
            UnreadableBody::Utf32 => "it is UTF-32 text; send UTF-8",
            UnreadableBody::AfterValue => "it has bytes after its JSON value",
            UnreadableBody::InvalidUtf8 => "a string in it is not valid UTF-8",
            UnreadableBody::LoneSurrogate => "a string in it escapes half a surrogate pair",
            UnreadableBody::NonFinite => "it holds NaN or Infinity, which JSON does not allow",
            UnreadableBody::OutOfRange => "a number in it is beyond a 64-bit float",
            UnreadableBody::TooDeep => "it nests containers deeper than 127 levels",
        }
    }
}

/// The deepest nesting serde_json reads: its 128th open container fails.
pub const MAX_DEPTH: usize = 127;

/// What `body` is to JSON readers (see the module docs).
pub fn judge(body: &[u8]) -> JsonText {
    match encoding(body) {
        Encoding::Utf8 { bom } => {
            let text = if bom { &body[3..] } else { body };
            let first = bom.then_some(UnreadableBody::ByteOrderMark);
            judged(Skim::new(text).read(), first)
        }
        Encoding::Wide { width, big_endian } => {
            let why = if width == 2 {
                UnreadableBody::Utf16
            } else {
                UnreadableBody::Utf32
            };
            let text = transcode(body, width, big_endian);
            judged(Skim::new(&text).read(), Some(why))
        }
    }
}

/// The verdict on a skim, given a fault found before it (the encoding).
fn judged(skim: Option<Skimmed>, before: Option<UnreadableBody>) -> JsonText {
    let Some(skimmed) = skim else {
        return JsonText::NotJson;
    };
    match before.or(skimmed.fault) {
        None => JsonText::Strict,
        Some(why) if skimmed.container => JsonText::Lenient(why),
        Some(_) => JsonText::NotJson,
    }
}

/// How the body's text is encoded, as Python's `json.detect_encoding` tells
/// (byte-order marks, then where the first characters' zero bytes are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Utf8 {
        bom: bool,
    },
    /// UTF-16 (`width` 2) or UTF-32 (4), after any byte-order mark.
    Wide {
        width: usize,
        big_endian: bool,
    },
}

fn encoding(body: &[u8]) -> Encoding {
    let wide = |width, big_endian| Encoding::Wide { width, big_endian };
    match body {
        [0, 0, 0xFE, 0xFF, ..] => wide(4, true),
        [0xFF, 0xFE, 0, 0, ..] => wide(4, false),
        [0xFE, 0xFF, ..] => wide(2, true),
        [0xFF, 0xFE, ..] => wide(2, false),
        [0xEF, 0xBB, 0xBF, ..] => Encoding::Utf8 { bom: true },
        [0, second, _, _, ..] => wide(if *second != 0 { 2 } else { 4 }, true),
        [_, 0, third, fourth, ..] => wide(if *third != 0 || *fourth != 0 { 2 } else { 4 }, false),
        [0, _] => wide(2, true),
        [_, 0] => wide(2, false),
        _ => Encoding::Utf8 { bom: false },
    }
}

/// UTF-16 or UTF-32 text as UTF-8, its byte-order mark dropped and what
/// does not decode replaced (U+FFFD), as a lenient reader decodes it.
fn transcode(body: &[u8], width: usize, big_endian: bool) -> Vec<u8> {
    let unit = |chunk: &[u8]| -> u32 {
        let mut value = 0u32;
        for index in 0..width {
            let byte = if big_endian {
                chunk[index]
            } else {
                chunk[width - 1 - index]
            };
            value = (value << 8) | u32::from(byte);
        }
        value
    };
    let units = body.chunks_exact(width).map(unit);
    let mut text = String::with_capacity(body.len() / width);
    if width == 2 {
        let units = units.map(|unit| unit as u16);
        for decoded in char::decode_utf16(units) {
            text.push(decoded.unwrap_or(char::REPLACEMENT_CHARACTER));
        }
    } else {
        for unit in units {
            text.push(char::from_u32(unit).unwrap_or(char::REPLACEMENT_CHARACTER));
        }
    }
    let text = text.strip_prefix('\u{FEFF}').unwrap_or(&text);
    text.as_bytes().to_vec()
}

/// A lenient reading of the first value of a text: where serde_json would
/// first have stopped, if it would, and whether the value is a container.
#[derive(Debug)]
struct Skimmed {
    fault: Option<UnreadableBody>,
    container: bool,
}

/// The reader: a position in the text, and a bit per open container (set
/// for an object).
struct Skim<'t> {
    text: &'t [u8],
    at: usize,
    open: Vec<u64>,
    depth: usize,
    fault: Option<UnreadableBody>,
}

impl<'t> Skim<'t> {
    fn new(text: &'t [u8]) -> Skim<'t> {
        Skim {
            text,
            at: 0,
            open: Vec::new(),
            depth: 0,
            fault: None,
        }
    }

    /// Reads the text's first value leniently, then what follows it:
    /// `None` when even a lenient reader finds no value.
    fn read(mut self) -> Option<Skimmed> {
        self.whitespace();
        let container = matches!(self.peek(), Some(b'{' | b'['));
        self.value()?;
        self.whitespace();
        if self.at < self.text.len() {
            self.found(UnreadableBody::AfterValue);
        }
        Some(Skimmed {
            fault: self.fault,
            container,
        })
    }

    /// Notes where serde_json would stop (the first such place counts).
    fn found(&mut self, why: UnreadableBody) {
        self.fault.get_or_insert(why);
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// Skips `byte` (after whitespace), or fails.
    fn expect(&mut self, byte: u8) -> Option<()> {
        self.whitespace();
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// One whole value, containers walked without recursion.
    fn value(&mut self) -> Option<()> {
        let floor = self.depth;
        loop {
            self.whitespace();
            match self.peek()? {
                b'{' => {
                    self.enter(true);
                    self.whitespace();
                    if self.peek()? == b'}' {
                        self.at += 1;
                        self.leave();
                    } else {
                        self.member_name()?;
                        continue;
                    }
                }
                b'[' => {
                    self.enter(false);
                    self.whitespace();
                    if self.peek()? == b']' {
                        self.at += 1;
                        self.leave();
                    } else {
                        continue;
                    }
                }
                _ => self.scalar()?,
            }
            // A value ended: close what it ends, or go on to the next.
            loop {
                if self.depth == floor {
                    return Some(());
                }
                self.whitespace();
                let in_object = self.in_object();
                match (self.peek()?, in_object) {
                    (b',', true) => {
                        self.at += 1;
                        self.member_name()?;
                        break;
                    }
                    (b',', false) => {
                        self.at += 1;
                        break;
                    }
                    (b'}', true) | (b']', false) => {
                        self.at += 1;
                        self.leave();
                    }
                    _ => return None,
                }
            }
        }
    }

    /// An object member's name and its colon.
    fn member_name(&mut self) -> Option<()> {
        self.whitespace();
        if self.peek()? != b'"' {
            return None;
        }
        self.string()?;
        self.expect(b':')
    }

    fn enter(&mut self, object: bool) {
        self.at += 1;
        let (word, bit) = (self.depth / 64, self.depth % 64);
        if word == self.open.len() {
            self.open.push(0);
        }
        if object {
            self.open[word] |= 1 << bit;
        } else {
            self.open[word] &= !(1 << bit);
        }
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            self.found(UnreadableBody::TooDeep);
        }
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn in_object(&self) -> bool {
        let below = self.depth - 1;
        self.open[below / 64] & (1 << (below % 64)) != 0
    }

    fn scalar(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string(),
            b'-' | b'0'..=b'9' => self.number(),
            b't' => self.word(b"true"),
            b'f' => self.word(b"false"),
            b'n' => self.word(b"null"),
            b'N' => self.non_finite(b"NaN"),
            b'I' => self.non_finite(b"Infinity"),
            _ => None,
        }
    }

    fn word(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.text.get(self.at..end)? == word).then(|| self.at = end)
    }

    fn non_finite(&mut self, word: &[u8]) -> Option<()> {
        self.word(word)?;
        self.found(UnreadableBody::NonFinite);
        Some(())
    }

    /// A number as JSON writes it (or `-Infinity`); one too large for a
    /// float is noted.
    fn number(&mut self) -> Option<()> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
            if self.peek() == Some(b'I') {
                return self.non_finite(b"Infinity");
            }
        }
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        let mut scaled = false;
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            scaled = true;
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            self.some_digits()?;
        }
        // Only an exponent or more digits than a float's range holds can
        // overflow one: such a number is read as serde_json reads it.
        let written = &self.text[start..self.at];
        if scaled || written.len() > 300 {
            let value: f64 = std::str::from_utf8(written).ok()?.parse().ok()?;
            if value.is_infinite() {
                self.found(UnreadableBody::OutOfRange);
            }
        }
        Some(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.at;
        self.digits();
        (self.at > start).then_some(())
    }

    /// A string: any bytes but controls (invalid UTF-8 noted), and escapes
    /// (half a surrogate pair noted). A run between escapes is found with
    /// `memchr2` and checked whole, as a body of long strings is the common
    /// case (a byte at a time, judging a 1 KiB call took longer than
    /// serde_json's reading of it).
    fn string(&mut self) -> Option<()> {
        self.at += 1;
        // A high surrogate whose low half must come next.
        let mut pending_high = false;
        loop {
            let rest = &self.text[self.at..];
            let end = memchr::memchr2(b'"', b'\\', rest)?;
            let run = &rest[..end];
            let bytes = Run::of(run);
            if bytes.control {
                return None;
            }
            if pending_high && !run.is_empty() {
                self.found(UnreadableBody::LoneSurrogate);
                pending_high = false;
            }
            if !bytes.ascii && std::str::from_utf8(run).is_err() {
                self.found(UnreadableBody::InvalidUtf8);
            }
            self.at += end + 1;
            if rest[end] == b'"' {
                if pending_high {
                    self.found(UnreadableBody::LoneSurrogate);
                }
                return Some(());
            }
            pending_high = self.escape(pending_high)?;
        }
    }

    /// The escape after a backslash; whether it leaves a high surrogate
    /// waiting for its low half.
    fn escape(&mut self, pending_high: bool) -> Option<bool> {
        let byte = self.peek()?;
        self.at += 1;
        if byte != b'u' {
            if pending_high {
                self.found(UnreadableBody::LoneSurrogate);
            }
            return matches!(byte, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't')
                .then_some(false);
        }
        let hex = std::str::from_utf8(self.text.get(self.at..self.at + 4)?).ok()?;
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let unit = u16::from_str_radix(hex, 16).ok()?;
        self.at += 4;
        Some(match unit {
            0xD800..=0xDBFF => {
                if pending_high {
                    self.found(UnreadableBody::LoneSurrogate);
                }
                true
            }
            0xDC00..=0xDFFF => {
                if !pending_high {
                    self.found(UnreadableBody::LoneSurrogate);
                }
                false
            }
            _ => {
                if pending_high {
                    self.found(UnreadableBody::LoneSurrogate);
                }
                false
            }
        })
    }
}

/// What a run of a string's bytes between escapes holds.
struct Run {
    /// A control character (below U+0020), which no JSON string may hold
    /// raw.
    control: bool,
    /// Only ASCII, so UTF-8 without a check.
    ascii: bool,
}

impl Run {
    /// The run's least and greatest bytes, a fold the compiler turns into
    /// vector compares (asking each byte with `any` took twice as long).
    fn of(run: &[u8]) -> Run {
        let (least, greatest) = run.iter().fold((u8::MAX, 0u8), |(least, greatest), &byte| {
            (least.min(byte), greatest.max(byte))
        });
        Run {
            control: least < 0x20,
            ascii: greatest < 0x80,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use UnreadableBody::*;

    fn strict_per_serde(body: &[u8]) -> bool {
        serde_json::from_slice::<serde_json::Value>(body).is_ok()
    }

    #[test]
    fn what_serde_json_reads_is_strict_and_nothing_else_is() {
        for body in [
            &br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t"},"id":1}"#[..],
            b" [1, -0, 2.5e-3, 1E+2, true, false, null, \"\\u00e9\\ud83d\\ude00\"] \n",
            b"42",
            b"\"caf\xc3\xa9\"",
            b"{}",
            b"[]",
        ] {
            assert_eq!(
                judge(body),
                JsonText::Strict,
                "{}",
                String::from_utf8_lossy(body)
            );
            assert!(strict_per_serde(body));
        }
    }

    #[test]
    fn each_way_a_lenient_server_reads_what_sluice_cannot_is_named() {
        let call = br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t"},"id":1}"#;
        let utf16le: Vec<u8> = String::from_utf8_lossy(call)
            .encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect();
        let utf16be_bom: Vec<u8> = "\u{FEFF}{\"a\":1}"
            .encode_utf16()
            .flat_map(u16::to_be_bytes)
            .collect();
        let utf32le: Vec<u8> = "{\"a\":1}"
            .chars()
            .flat_map(|c| (c as u32).to_le_bytes())
            .collect();
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let just_deep_enough = format!("{}{}", "[".repeat(127), "]".repeat(127));
        let cases: Vec<(Vec<u8>, UnreadableBody)> = vec![
            ([&b"\xEF\xBB\xBF"[..], call].concat(), ByteOrderMark),
            (utf16le, Utf16),
            (utf16be_bom, Utf16),
            (utf32le, Utf32),
            ([&call[..], b" x"].concat(), AfterValue),
            ([&call[..], b"{}"].concat(), AfterValue),
            (b"{\"name\":\"t\xff\"}".to_vec(), InvalidUtf8),
            (br#"{"name":"\ud800"}"#.to_vec(), LoneSurrogate),
            (br#"{"name":"\udc00x"}"#.to_vec(), LoneSurrogate),
            (br#"{"name":"\ud800\u0041"}"#.to_vec(), LoneSurrogate),
            (br#"{"id":NaN}"#.to_vec(), NonFinite),
            (br#"[-Infinity]"#.to_vec(), NonFinite),
            (br#"{"max_tokens":1e400}"#.to_vec(), OutOfRange),
            (deep.into_bytes(), TooDeep),
        ];
        for (body, why) in cases {
            assert_eq!(
                judge(&body),
                JsonText::Lenient(why),
                "{}",
                String::from_utf8_lossy(&body)
            );
            assert!(!strict_per_serde(&body));
        }
        assert_eq!(judge(just_deep_enough.as_bytes()), JsonText::Strict);
        assert!(strict_per_serde(just_deep_enough.as_bytes()));
    }

    #[test]
    fn what_no_reader_takes_or_what_holds_no_key_is_not_json() {
        for body in [
            &b""[..],
            b"   ",
            b"{\"a\":",
            b"{\"a\" 1}",
            b"{\"a\":1,}",
            b"[1 2]",
            b"{'a':1}",
            b"a=1&b=2",
            b"{\"a\":\"\x01\"}",
            b"{\"a\":\"\\x41\"}",
            b"[01]",
            b"42 is the answer",
            b"\xEF\xBB\xBF42",
            b"\"\xff\"",
            b"NaN",
            b"[1.]",
            b"[.5]",
            b"[+1]",
            b"{\"a\":tru}",
        ] {
            assert_eq!(
                judge(body),
                JsonText::NotJson,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn the_first_fault_is_the_one_named() {
        assert_eq!(
            judge(b"{\"a\":NaN,\"b\":\"\xff\"} x"),
            JsonText::Lenient(NonFinite)
        );
        assert_eq!(
            judge(b"\xEF\xBB\xBF{\"a\":NaN}"),
            JsonText::Lenient(ByteOrderMark)
        );
    }
}
