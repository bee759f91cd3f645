//! A fast reading of the lines sluice itself writes: a JSON object whose
//! members are strings without escapes, numbers, `null` and one object of
//! such strings (`keys`). A line with no `\` and no control character
//! anywhere has a `"` only where a string opens or closes, so each
//! string's end is the next `"`, found eight bytes at a time. Any other
//! line (an escaped string, a `true`, spaces between tokens, a member
//! twice) is left to `serde_json` ([`super::line`]), which reads every
//! JSON; both give the same [`Members`], and a line one rejects the other
//! rejects too (the tests compare them). A replay's time goes mostly into
//! reading lines (docs/benchmarks-history.md, "Replaying recorded
//! traffic").

use std::borrow::Cow;

use smallvec::SmallVec;

/// The members a replay reads, borrowed from the line where it can.
#[derive(Debug, Default, PartialEq)]
pub struct Members<'a> {
    pub time: Option<Cow<'a, str>>,
    pub client: Option<Cow<'a, str>>,
    pub method: Option<Cow<'a, str>>,
    pub host: Option<Cow<'a, str>>,
    pub path: Option<Cow<'a, str>>,
    pub duration_ms: Option<f64>,
    pub delay_ms: u64,
    pub outcome: Option<Cow<'a, str>>,
    pub rule: Option<Cow<'a, str>>,
    /// `None`: no `keys`, or `null`.
    pub keys: Option<Pairs<'a>>,
}

/// A `keys` object's members.
pub type Pairs<'a> = SmallVec<[(Cow<'a, str>, Option<Cow<'a, str>>); 4]>;

/// One value as the scan meets it.
enum Value<'a> {
    Text(&'a str),
    Number(&'a str),
    Null,
}

/// The members of `line` into `members` (filled in place: they are a few
/// hundred bytes), or `None` when it is not of the simple shape this
/// reads (the caller then parses it in full).
pub fn scan<'a>(line: &'a str, members: &mut Members<'a>) -> Option<()> {
    if !plain(line.as_bytes()) {
        return None;
    }
    let mut at = Cursor { text: line, at: 0 };
    at.expect(b'{')?;
    if at.peek()? == b'}' {
        at.at += 1;
        return (at.at == line.len()).then_some(());
    }
    let mut seen = 0u16;
    loop {
        let name = at.string()?;
        at.expect(b':')?;
        let value = if at.peek()? == b'{' {
            (name == "keys").then_some(())?;
            Err(at.pairs()?)
        } else {
            Ok(at.value()?)
        };
        let known = members.take(name, value)?;
        // serde_json refuses a member it reads given twice.
        if seen & known != 0 {
            return None;
        }
        seen |= known;
        match at.next()? {
            b',' => continue,
            b'}' if at.at == line.len() => return Some(()),
            _ => return None,
        }
    }
}

/// Whether `line` has no `\` and no control character: then its strings
/// have no escapes and its tokens no space between them. Chunk by chunk,
/// each folded without a branch (the compiler makes it vector code).
fn plain(line: &[u8]) -> bool {
    line.chunks(32).all(|chunk| {
        let odd = chunk.iter().fold(0u8, |odd, &b| {
            odd | u8::from(b < 0x20) | u8::from(b == b'\\')
        });
        odd == 0
    })
}

/// The index of the first `"` of `bytes` from `from`, eight bytes at a
/// time: a word's bytes that equal `"` become zero, and the lowest zero
/// byte is the lowest whose high bit `(x - 0x01…) & !x & 0x80…` sets (a
/// borrow can mark bytes above it, never below).
#[inline(always)]
fn find_quote(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut at = from;
    while let Some(word) = bytes.get(at..at + 8) {
        let word = u64::from_le_bytes(word.try_into().ok()?);
        let quotes = word ^ (ONES * u64::from(b'"'));
        let found = quotes.wrapping_sub(ONES) & !quotes & HIGHS;
        if found != 0 {
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let rest = bytes.get(at..)?;
    rest.iter().position(|&b| b == b'"').map(|end| at + end)
}

impl<'a> Members<'a> {
    /// Takes member `name`'s value (`Err`: an object, `keys`); `None`
    /// when it is not what the member holds. The member's bit, if it is
    /// one a replay reads (0 for others).
    fn take(&mut self, name: &str, value: Result<Value<'a>, Pairs<'a>>) -> Option<u16> {
        let text = |value| match value {
            Ok(Value::Text(text)) => Some(Some(Cow::Borrowed(text))),
            Ok(Value::Null) => Some(None),
            _ => None,
        };
        let bit = match name {
            "time" => {
                self.time = text(value)?;
                1
            }
            "client" => {
                self.client = text(value)?;
                2
            }
            "method" => {
                self.method = text(value)?;
                4
            }
            "host" => {
                self.host = text(value)?;
                8
            }
            "path" => {
                self.path = text(value)?;
                16
            }
            "outcome" => {
                self.outcome = text(value)?;
                32
            }
            "rule" => {
                self.rule = text(value)?;
                64
            }
            "duration_ms" => {
                let Ok(Value::Number(number)) = value else {
                    return None;
                };
                self.duration_ms = Some(millis(number)?);
                128
            }
            "delay_ms" => {
                let Ok(Value::Number(number)) = value else {
                    return None;
                };
                self.delay_ms = number.parse().ok()?;
                256
            }
            "keys" => {
                match value {
                    Err(pairs) => self.keys = Some(pairs),
                    Ok(Value::Null) => self.keys = None,
                    Ok(_) => return None,
                }
                512
            }
            _ => match value {
                Ok(_) => 0,
                // An object other than `keys`: serde_json reads it.
                Err(_) => return None,
            },
        };
        Some(bit)
    }
}

/// A `duration_ms` as `serde_json` reads it into an `f64`, for the plain
/// decimals sluice writes (`1.250`); `None` for any other number (the
/// caller then parses the line in full).
fn millis(number: &str) -> Option<f64> {
    let (whole, decimals) = number.split_once('.').unwrap_or((number, ""));
    let plain = |digits: &str| digits.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || whole.len() > 9 || decimals.len() > 6 {
        return None;
    }
    if !plain(whole) || !plain(decimals) {
        return None;
    }
    // Fifteen digits at most: exact in an f64, as serde_json reads them.
    number.parse().ok()
}

struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    #[inline(always)]
    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    #[inline(always)]
    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then_some(())
    }

    /// A string (the line is [`plain`]: it has no escapes).
    #[inline(always)]
    fn string(&mut self) -> Option<&'a str> {
        self.expect(b'"')?;
        let end = find_quote(self.text.as_bytes(), self.at)?;
        let text = self.text.get(self.at..end)?;
        self.at = end + 1;
        Some(text)
    }

    #[inline(always)]
    fn value(&mut self) -> Option<Value<'a>> {
        match self.peek()? {
            b'"' => self.string().map(Value::Text),
            b'n' => {
                let rest = &self.text.as_bytes()[self.at..];
                if !rest.starts_with(b"null") {
                    return None;
                }
                self.at += 4;
                Some(Value::Null)
            }
            b'-' | b'0'..=b'9' => self.number().map(Value::Number),
            _ => None,
        }
    }

    /// A number as JSON writes one:
    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    fn number(&mut self) -> Option<&'a str> {
        let start = self.at;
        let bytes = self.text.as_bytes();
        let digits = |at: &mut usize| {
            let from = *at;
            while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            *at > from
        };
        let mut at = start;
        if bytes.get(at) == Some(&b'-') {
            at += 1;
        }
        if bytes.get(at) == Some(&b'0') {
            at += 1;
        } else if !digits(&mut at) {
            return None;
        }
        if bytes.get(at) == Some(&b'.') {
            at += 1;
            digits(&mut at).then_some(())?;
        }
        if matches!(bytes.get(at), Some(b'e' | b'E')) {
            at += 1;
            if matches!(bytes.get(at), Some(b'+' | b'-')) {
                at += 1;
            }
            digits(&mut at).then_some(())?;
        }
        self.at = at;
        Some(&self.text[start..at])
    }

    /// An object of strings or nulls.
    fn pairs(&mut self) -> Option<Pairs<'a>> {
        self.expect(b'{')?;
        let mut pairs = Pairs::new();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(pairs);
        }
        loop {
            let name = self.string()?;
            self.expect(b':')?;
            let value = match self.value()? {
                Value::Text(text) => Some(Cow::Borrowed(text)),
                Value::Null => None,
                Value::Number(_) => return None,
            };
            pairs.push((Cow::Borrowed(name), value));
            match self.next()? {
                b',' => continue,
                b'}' => return Some(pairs),
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sluice_s_own_lines_are_scanned() {
        let line = r#"{"time":"2026-11-27T00:00:00.000000Z","request_id":"0","client":"10.0.0.1","method":"GET","host":null,"path":"/v1/orders","status":200,"bytes_out":512,"duration_ms":1.250,"upstream_ms":null,"delay_ms":3,"outcome":"allowed","rule":"per-key","key":"sk_l…#000000000001","cost":1,"keys":{"ip":"10.0.0.1","header:x-api-key":"sk_l…#000000000001","jwt:plan":null}}"#;
        let mut members = Members::default();
        scan(line, &mut members).expect("scanned");
        assert_eq!(members.time.as_deref(), Some("2026-11-27T00:00:00.000000Z"));
        assert_eq!(members.client.as_deref(), Some("10.0.0.1"));
        assert_eq!(members.host, None);
        assert_eq!(members.duration_ms, Some(1.25));
        assert_eq!(members.delay_ms, 3);
        assert_eq!(members.outcome.as_deref(), Some("allowed"));
        let keys = members.keys.expect("keys");
        assert_eq!(keys.len(), 3);
        assert_eq!(keys[1].1.as_deref(), Some("sk_l…#000000000001"));
        assert_eq!(keys[2].1, None);
        // What it leaves to serde_json.
        for other in [
            r#"{"time":"a\"b"}"#,
            r#"{ "time":"a"}"#,
            r#"{"time":true}"#,
            r#"{"time":"a"} x"#,
            r#"{"keys":{"a":1}}"#,
        ] {
            assert!(scan(other, &mut Members::default()).is_none(), "{other}");
        }
    }
}
