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
    // Where in sluice's order the next member should be.
    let mut next = 0;
    loop {
        let member = match ORDER
            .get(next)
            .filter(|one| one.starts(line.as_bytes(), at.at))
        {
            Some(expected) => {
                at.at += expected.len;
                next += 1;
                expected.member
            }
            None => {
                let member = Member::named(at.string()?);
                at.expect(b':')?;
                // Back in step after a member out of place (any other is
                // skipped over: the next is still expected).
                let known = ORDER.iter().position(|one| one.member == member);
                if let (Some(known), false) = (known, member == Member::Other) {
                    next = known + 1;
                }
                member
            }
        };
        let value = if at.peek()? == b'{' {
            (member == Member::Keys).then_some(())?;
            Err(at.pairs()?)
        } else {
            Ok(at.value()?)
        };
        let known = members.take(member, value)?;
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

/// The members a replay reads; `Other` for the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    Time,
    Client,
    Method,
    Host,
    Path,
    DurationMs,
    DelayMs,
    Outcome,
    Rule,
    Keys,
    Other,
}

impl Member {
    fn named(name: &str) -> Member {
        match name {
            "time" => Member::Time,
            "client" => Member::Client,
            "method" => Member::Method,
            "host" => Member::Host,
            "path" => Member::Path,
            "duration_ms" => Member::DurationMs,
            "delay_ms" => Member::DelayMs,
            "outcome" => Member::Outcome,
            "rule" => Member::Rule,
            "keys" => Member::Keys,
            _ => Member::Other,
        }
    }
}

/// A member's name as a line writes it, `"name":`, held in a `u128`
/// (little-endian, the rest zero): compared with the line's next bytes in
/// one masked comparison rather than by finding the name's end and
/// matching it.
struct Expected {
    word: u128,
    mask: u128,
    len: usize,
    member: Member,
}

impl Expected {
    /// `name` (at most 13 bytes, without quotes: what fits in 16).
    const fn new(name: &[u8], member: Member) -> Expected {
        let mut bytes = [0u8; 16];
        bytes[0] = b'"';
        let mut at = 0;
        while at < name.len() {
            bytes[at + 1] = name[at];
            at += 1;
        }
        bytes[name.len() + 1] = b'"';
        bytes[name.len() + 2] = b':';
        let len = name.len() + 3;
        let mask = if len == 16 {
            u128::MAX
        } else {
            (1 << (8 * len)) - 1
        };
        Expected {
            word: u128::from_le_bytes(bytes),
            mask,
            len,
            member,
        }
    }

    /// Whether `bytes` from `at` start with this name.
    #[inline(always)]
    fn starts(&self, bytes: &[u8], at: usize) -> bool {
        match bytes.get(at..at + 16) {
            Some(next) => {
                let next = u128::from_le_bytes(next.try_into().unwrap_or_default());
                next & self.mask == self.word
            }
            None => bytes.get(at..at + self.len) == Some(&self.word.to_le_bytes()[..self.len]),
        }
    }
}

/// The members sluice writes, in the order it writes them (src/access_log:
/// a line of another order or with other members is read all the same,
/// by name).
const ORDER: [Expected; 17] = [
    Expected::new(b"time", Member::Time),
    Expected::new(b"request_id", Member::Other),
    Expected::new(b"client", Member::Client),
    Expected::new(b"method", Member::Method),
    Expected::new(b"host", Member::Host),
    Expected::new(b"path", Member::Path),
    Expected::new(b"protocol", Member::Other),
    Expected::new(b"status", Member::Other),
    Expected::new(b"bytes_out", Member::Other),
    Expected::new(b"duration_ms", Member::DurationMs),
    Expected::new(b"upstream_ms", Member::Other),
    Expected::new(b"delay_ms", Member::DelayMs),
    Expected::new(b"outcome", Member::Outcome),
    Expected::new(b"rule", Member::Rule),
    Expected::new(b"key", Member::Other),
    Expected::new(b"cost", Member::Other),
    Expected::new(b"keys", Member::Keys),
];

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

/// Where the ASCII digits of `bytes` from `at` end.
#[inline(always)]
fn digits(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(u8::is_ascii_digit) {
        at += 1;
    }
    at
}

impl<'a> Members<'a> {
    /// Takes `member`'s value (`Err`: an object, `keys`); `None`
    /// when it is not what the member holds. The member's bit, if it is
    /// one a replay reads (0 for others).
    fn take(&mut self, member: Member, value: Result<Value<'a>, Pairs<'a>>) -> Option<u16> {
        let text = |value| match value {
            Ok(Value::Text(text)) => Some(Some(Cow::Borrowed(text))),
            Ok(Value::Null) => Some(None),
            _ => None,
        };
        let (slot, bit) = match member {
            Member::Time => (&mut self.time, 1),
            Member::Client => (&mut self.client, 2),
            Member::Method => (&mut self.method, 4),
            Member::Host => (&mut self.host, 8),
            Member::Path => (&mut self.path, 16),
            Member::Outcome => (&mut self.outcome, 32),
            Member::Rule => (&mut self.rule, 64),
            Member::DurationMs => {
                let Ok(Value::Number(number)) = value else {
                    return None;
                };
                self.duration_ms = Some(millis(number)?);
                return Some(128);
            }
            Member::DelayMs => {
                let Ok(Value::Number(number)) = value else {
                    return None;
                };
                self.delay_ms = number.parse().ok()?;
                return Some(256);
            }
            Member::Keys => {
                match value {
                    Err(pairs) => self.keys = Some(pairs),
                    Ok(Value::Null) => self.keys = None,
                    Ok(_) => return None,
                }
                return Some(512);
            }
            Member::Other => {
                // An object other than `keys`: serde_json reads it.
                return value.is_ok().then_some(0);
            }
        };
        *slot = text(value)?;
        Some(bit)
    }
}

/// A `duration_ms` as `serde_json` reads it into an `f64`, for the plain
/// decimals sluice writes (`1.250`); `None` for any other number (the
/// caller then parses the line in full). Fifteen digits at most are exact
/// in an `f64`, as is a power of ten up to 10⁶: their quotient is the
/// decimal rounded once, as `serde_json` and `str::parse` give it, without
/// the cost of a general parse.
fn millis(number: &str) -> Option<f64> {
    const TENS: [f64; 7] = [1.0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6];
    let bytes = number.as_bytes();
    let point = bytes.iter().position(|&b| b == b'.');
    let (whole, decimals) = match point {
        Some(point) => (&bytes[..point], &bytes[point + 1..]),
        None => (bytes, &[][..]),
    };
    if whole.is_empty() || whole.len() > 9 || decimals.len() > 6 {
        return None;
    }
    let mut units = 0u64;
    for &digit in whole.iter().chain(decimals) {
        if !digit.is_ascii_digit() {
            return None;
        }
        units = units * 10 + u64::from(digit - b'0');
    }
    Some(units as f64 / TENS[decimals.len()])
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

    /// A number as sluice writes one, `-?(0|[1-9][0-9]*)(\.[0-9]+)?`, in
    /// one pass over its bytes; `None` for any other (an exponent, `01`):
    /// the caller then leaves the line to `serde_json`, which reads every
    /// JSON number.
    #[inline(always)]
    fn number(&mut self) -> Option<&'a str> {
        let start = self.at;
        let bytes = self.text.as_bytes().get(start..)?;
        let negative = usize::from(bytes.first() == Some(&b'-'));
        let whole = digits(bytes, negative);
        let leading_zero = bytes.get(negative) == Some(&b'0') && whole > negative + 1;
        if whole == negative || leading_zero {
            return None;
        }
        let mut end = whole;
        if bytes.get(end) == Some(&b'.') {
            end = digits(bytes, end + 1);
            if end == whole + 1 {
                return None;
            }
        }
        if matches!(bytes.get(end), Some(b'e' | b'E')) {
            return None;
        }
        self.at = start + end;
        self.text.get(start..start + end)
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

    /// A line as sluice writes it now (with `protocol`) and as it wrote
    /// it before: read alike.
    #[test]
    fn lines_with_and_without_the_protocol_are_read_alike() {
        let before = r#"{"time":"t","request_id":"0","client":"10.0.0.1","method":"GET","host":"h","path":"/p","status":200,"bytes_out":1,"duration_ms":1.5,"upstream_ms":null,"delay_ms":2,"outcome":"allowed","rule":null,"key":null,"cost":null,"keys":null}"#;
        let now = before.replace(r#""path":"/p","#, r#""path":"/p","protocol":"HTTP/3","#);
        for line in [before, now.as_str()] {
            let mut members = Members::default();
            scan(line, &mut members).expect("scanned");
            assert_eq!(members.client.as_deref(), Some("10.0.0.1"), "{line}");
            assert_eq!(members.duration_ms, Some(1.5), "{line}");
            assert_eq!(members.delay_ms, 2, "{line}");
            assert_eq!(members.outcome.as_deref(), Some("allowed"), "{line}");
        }
    }

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
