//! A fast reading of the lines sluice itself writes: a JSON object whose
//! members are strings without escapes, numbers, `null` and one object of
//! such strings (`keys`), found by `memchr` rather than byte by byte. Any
//! other line (an escaped string, a `true`, spaces between tokens) is left
//! to `serde_json` ([`super::line`]), which reads every JSON; both give the
//! same [`Members`]. A replay's time goes mostly into reading lines
//! (docs/benchmarks-history.md, "Replaying recorded traffic").

use std::borrow::Cow;

use smallvec::SmallVec;

/// The members a replay reads, borrowed from the line where it can.
#[derive(Debug, Default)]
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

/// The members of `line`, or `None` when it is not of the simple shape
/// this reads (the caller then parses it in full).
pub fn scan(line: &str) -> Option<Members<'_>> {
    let mut at = Cursor { text: line, at: 0 };
    at.expect(b'{')?;
    let mut members = Members::default();
    if at.peek()? == b'}' {
        return Some(members);
    }
    loop {
        let name = at.string()?;
        at.expect(b':')?;
        if name == "keys" && at.peek()? == b'{' {
            members.keys = Some(at.pairs()?);
        } else {
            let value = at.value()?;
            members.take(name, value)?;
        }
        match at.next()? {
            b',' => continue,
            b'}' if at.at == line.len() => return Some(members),
            _ => return None,
        }
    }
}

impl<'a> Members<'a> {
    fn take(&mut self, name: &str, value: Value<'a>) -> Option<()> {
        let text = |value: Value<'a>| match value {
            Value::Text(text) => Some(Some(Cow::Borrowed(text))),
            Value::Null => Some(None),
            Value::Number(_) => None,
        };
        match name {
            "time" => self.time = text(value)?,
            "client" => self.client = text(value)?,
            "method" => self.method = text(value)?,
            "host" => self.host = text(value)?,
            "path" => self.path = text(value)?,
            "outcome" => self.outcome = text(value)?,
            "rule" => self.rule = text(value)?,
            "duration_ms" => match value {
                Value::Number(number) => self.duration_ms = Some(number.parse().ok()?),
                _ => return None,
            },
            "delay_ms" => match value {
                Value::Number(number) => self.delay_ms = number.parse().ok()?,
                _ => return None,
            },
            "keys" => match value {
                Value::Null => self.keys = None,
                _ => return None,
            },
            _ => {}
        }
        Some(())
    }
}

struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then_some(())
    }

    /// A string without escapes.
    fn string(&mut self) -> Option<&'a str> {
        self.expect(b'"')?;
        let rest = &self.text.as_bytes()[self.at..];
        let end = memchr::memchr2(b'"', b'\\', rest)?;
        if rest[end] != b'"' {
            return None;
        }
        let text = &self.text[self.at..self.at + end];
        self.at += end + 1;
        Some(text)
    }

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
            b'-' | b'0'..=b'9' => {
                let start = self.at;
                let rest = &self.text.as_bytes()[start..];
                let length = rest
                    .iter()
                    .position(|b| !matches!(b, b'0'..=b'9' | b'.' | b'-' | b'+' | b'e' | b'E'))
                    .unwrap_or(rest.len());
                self.at += length;
                Some(Value::Number(&self.text[start..start + length]))
            }
            _ => None,
        }
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
        let members = scan(line).expect("scanned");
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
            assert!(scan(other).is_none(), "{other}");
        }
    }
}
