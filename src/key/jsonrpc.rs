//! `jsonrpc:method` and `mcp:tool` keys: the calls of a JSON-RPC 2.0
//! request body (docs/ai-budgets.md, "JSON-RPC and MCP"). A body is one
//! call (an object) or a batch (an array of them); a call is an object with
//! `"jsonrpc": "2.0"` and a string `method`, and for an MCP `tools/call`
//! its `params.name` names the tool.
//!
//! The body is read in one pass over its bytes, building nothing but what
//! a call names: values no key reads (a tool's arguments, mostly) are
//! skipped by their structure alone (strings by `memchr` to their closing
//! quote), with no UTF-8 check and no number parsed, so a long argument
//! costs little more than a copy of it (docs/benchmarks-history.md,
//! "Budgets for AI traffic"). The reader is lenient where that cannot be
//! used to dodge a limit, never where it could: a member written twice
//! counts as its last, as servers' parsers read it; names and values with
//! escapes (`"meth\u006fd"`) are read unescaped; a body that is not JSON
//! at all, or has anything after its value, is no call (a server refuses
//! it whole). `fuzz/fuzz_targets/jsonrpc.rs` holds it to serde_json's
//! reading of every body serde_json can read.

use std::borrow::Cow;

use memchr::memchr2;

/// What a request body says of its calls.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Calls<'a> {
    /// The body is not a JSON-RPC request (not JSON, not an object or a
    /// non-empty array, or not POSTed).
    #[default]
    None,
    /// One call.
    One(Call<'a>),
    /// A batch: its calls, in order, and how many of its elements are not
    /// calls (counted, not kept: a body of `[0,0,…]` holds no more than
    /// its bytes).
    Batch(Batch<'a>),
}

/// The elements of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Batch<'a> {
    pub calls: Vec<Call<'a>>,
    pub others: usize,
}

/// One element of a JSON-RPC request body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Call<'a> {
    /// The `method` (unescaped), when the element is a call.
    pub method: Option<Cow<'a, [u8]>>,
    /// A `tools/call`'s `params.name` (unescaped), when it is a string.
    pub tool: Option<Cow<'a, [u8]>>,
    /// The JSON text of a call's `id`, as written; `None` for a
    /// notification (or an element that is not a call).
    pub id: Option<&'a [u8]>,
}

impl Calls<'_> {
    /// Whether the body holds a call: what a refusal answers as JSON-RPC.
    pub fn any(&self) -> bool {
        match self {
            Calls::None => false,
            Calls::One(call) => call.is_call(),
            Calls::Batch(batch) => !batch.calls.is_empty(),
        }
    }
}

impl Call<'_> {
    /// Whether the element is a call (a request or a notification).
    pub fn is_call(&self) -> bool {
        self.method.is_some()
    }
}

/// The calls of `body`, a request's whole body.
pub fn read(body: &[u8]) -> Calls<'_> {
    let mut reader = Reader { body, at: 0 };
    reader.calls().unwrap_or_default()
}

/// A position in the body, read forward.
struct Reader<'a> {
    body: &'a [u8],
    at: usize,
}

/// The body is not JSON where the reader is.
struct Malformed;

/// An object member's name as written (quotes included), compared with
/// the names a call is read by as bytes; a name with escapes is unescaped
/// once, when it is read.
struct Name<'a> {
    quoted: &'a [u8],
    unescaped: Option<Vec<u8>>,
}

impl Name<'_> {
    /// Whether it is `name` once unescaped.
    #[inline]
    fn is(&self, name: &[u8]) -> bool {
        match &self.unescaped {
            Some(unescaped) => unescaped == name,
            None => &self.quoted[1..self.quoted.len() - 1] == name,
        }
    }
}

type Read<T> = Result<T, Malformed>;

/// The `method` a call names for an MCP tool.
const TOOLS_CALL: &[u8] = b"tools/call";

/// How many bytes of a string are looked at a word at a time for its end.
const SHORT: usize = 32;

impl<'a> Reader<'a> {
    fn calls(&mut self) -> Read<Calls<'a>> {
        let calls = match self.peek()? {
            b'{' => Calls::One(self.call()?),
            b'[' => {
                self.at += 1;
                let mut batch = Batch::default();
                if self.peek()? != b']' {
                    loop {
                        let call = match self.peek()? {
                            b'{' => self.call()?,
                            _ => {
                                self.skip_value()?;
                                Call::default()
                            }
                        };
                        if call.is_call() {
                            batch.calls.push(call);
                        } else {
                            batch.others += 1;
                        }
                        if !self.comma_or(b']')? {
                            break;
                        }
                    }
                } else {
                    self.at += 1;
                }
                if batch.calls.is_empty() && batch.others == 0 {
                    return Ok(Calls::None);
                }
                Calls::Batch(batch)
            }
            _ => return Ok(Calls::None),
        };
        // One JSON value and nothing after it.
        self.skip_whitespace();
        if self.at != self.body.len() {
            return Err(Malformed);
        }
        Ok(calls)
    }

    /// One element that is an object: a call, or not one.
    fn call(&mut self) -> Read<Call<'a>> {
        let mut version = false;
        let mut method = None;
        let mut name = None;
        let mut id = None;
        self.members(|reader, member| {
            if member.is(b"method") {
                method = reader.string()?;
            } else if member.is(b"params") {
                name = reader.params_name()?;
            } else if member.is(b"jsonrpc") {
                version = reader.string()?.is_some_and(|v| &*v == b"2.0");
            } else if member.is(b"id") {
                let start = reader.at;
                reader.skip_value()?;
                id = Some(&reader.body[start..reader.at]);
            } else {
                reader.skip_value()?;
            }
            Ok(())
        })?;
        if !version || method.is_none() {
            return Ok(Call::default());
        }
        let tool = name.filter(|_| method.as_deref() == Some(TOOLS_CALL));
        Ok(Call { method, tool, id })
    }

    /// `params`: its `name` when it is an object with a string `name`.
    fn params_name(&mut self) -> Read<Option<Cow<'a, [u8]>>> {
        if self.peek()? != b'{' {
            self.skip_value()?;
            return Ok(None);
        }
        let mut name = None;
        self.members(|reader, member| {
            if member.is(b"name") {
                name = reader.string()?;
            } else {
                reader.skip_value()?;
            }
            Ok(())
        })?;
        Ok(name)
    }

    /// Reads the object here, calling `each` with every member's name and
    /// the reader at its value, which `each` reads.
    #[inline]
    fn members(&mut self, mut each: impl FnMut(&mut Self, Name<'a>) -> Read<()>) -> Read<()> {
        self.at += 1; // `{`
        if self.peek()? == b'}' {
            self.at += 1;
            return Ok(());
        }
        loop {
            if self.peek()? != b'"' {
                return Err(Malformed);
            }
            let start = self.at;
            let escaped = self.skip_string()?;
            let quoted = &self.body[start..self.at];
            let name = Name {
                quoted,
                unescaped: if escaped {
                    Some(unescape(quoted)?)
                } else {
                    None
                },
            };
            if self.peek()? != b':' {
                return Err(Malformed);
            }
            self.at += 1;
            self.peek()?;
            each(self, name)?;
            if !self.comma_or(b'}')? {
                return Ok(());
            }
        }
    }

    /// The string value here (unescaped), or `None` when the value is not
    /// a string (it is skipped).
    #[inline]
    fn string(&mut self) -> Read<Option<Cow<'a, [u8]>>> {
        if self.peek()? != b'"' {
            self.skip_value()?;
            return Ok(None);
        }
        self.string_here().map(Some)
    }

    /// The string starting here, unescaped: borrowed from the body unless
    /// it has escapes.
    #[inline]
    fn string_here(&mut self) -> Read<Cow<'a, [u8]>> {
        let start = self.at;
        let escaped = self.skip_string()?;
        let inner = &self.body[start + 1..self.at - 1];
        if !escaped {
            return Ok(Cow::Borrowed(inner));
        }
        unescape(&self.body[start..self.at]).map(Cow::Owned)
    }

    /// Skips the string starting here (at its `"`); whether it has
    /// escapes.
    #[inline]
    fn skip_string(&mut self) -> Read<bool> {
        // A member's name, a method, a tool: short strings, whose end a
        // look at eight bytes at a time finds before `memchr2` would have
        // set up its search.
        let start = self.at + 1;
        let short = &self.body[start..self.body.len().min(start + SHORT)];
        match quote_or_escape(short) {
            Some(offset) if short[offset] == b'"' => {
                self.at = start + offset + 1;
                Ok(false)
            }
            Some(offset) => self.skip_long_string(start + offset),
            None => self.skip_long_string(start + short.len()),
        }
    }

    /// [`Reader::skip_string`] from `from`, where its first bytes held no
    /// quote or escape: by `memchr2` to the closing quote, escapes and all.
    fn skip_long_string(&mut self, from: usize) -> Read<bool> {
        let mut at = from;
        let mut escaped = false;
        loop {
            let found = memchr2(b'"', b'\\', &self.body[at..]).ok_or(Malformed)?;
            at += found;
            if self.body[at] == b'"' {
                self.at = at + 1;
                return Ok(escaped);
            }
            // A backslash and the byte it escapes.
            escaped = true;
            at += 2;
            if at > self.body.len() {
                return Err(Malformed);
            }
        }
    }

    /// Skips the value here, whatever it is: by its structure alone.
    #[inline]
    fn skip_value(&mut self) -> Read<()> {
        match self.peek()? {
            b'"' => self.skip_string().map(drop),
            b'{' | b'[' => self.skip_nested(),
            _ => {
                // A number or a literal: up to the next delimiter.
                let start = self.at;
                while let Some(&byte) = self.body.get(self.at) {
                    if matches!(byte, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    self.at += 1;
                }
                if self.at == start {
                    return Err(Malformed);
                }
                Ok(())
            }
        }
    }

    /// Skips the object or array starting here, and all it holds.
    fn skip_nested(&mut self) -> Read<()> {
        let mut depth = 0usize;
        while let Some(&byte) = self.body.get(self.at) {
            match byte {
                b'"' => {
                    self.skip_string()?;
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        self.at += 1;
                        return Ok(());
                    }
                }
                _ => {}
            }
            self.at += 1;
        }
        Err(Malformed)
    }

    /// After a member or an element: `true` past a comma (another
    /// follows), `false` past `close` (the end).
    #[inline]
    fn comma_or(&mut self, close: u8) -> Read<bool> {
        match self.peek()? {
            b',' => {
                self.at += 1;
                Ok(true)
            }
            byte if byte == close => {
                self.at += 1;
                Ok(false)
            }
            _ => Err(Malformed),
        }
    }

    /// The next byte that is not whitespace (the reader moves to it).
    #[inline]
    fn peek(&mut self) -> Read<u8> {
        self.skip_whitespace();
        self.body.get(self.at).copied().ok_or(Malformed)
    }

    #[inline]
    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.body.get(self.at) {
            self.at += 1;
        }
    }
}

/// The offset of the first `"` or `\\` in `bytes`, looked for eight bytes
/// at a time (a byte equal to either leaves a zero byte in the word xored
/// with it; the lowest such byte is exact, whatever the borrows above it).
#[inline]
fn quote_or_escape(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGHS: u64 = ONES << 7;
    let has_zero = |word: u64| word.wrapping_sub(ONES) & !word & HIGHS;
    let mut words = bytes.chunks_exact(8);
    let mut offset = 0;
    for word in &mut words {
        let word = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        let found =
            has_zero(word ^ (ONES * u64::from(b'"'))) | has_zero(word ^ (ONES * u64::from(b'\\')));
        if found != 0 {
            return Some(offset + found.trailing_zeros() as usize / 8);
        }
        offset += 8;
    }
    let rest = words.remainder();
    rest.iter()
        .position(|&byte| byte == b'"' || byte == b'\\')
        .map(|at| offset + at)
}

/// A JSON string with escapes (`quoted`, quotes included), unescaped as
/// its bytes: serde_json's unescaping, without its UTF-8 check of the rest.
#[cold]
fn unescape(quoted: &[u8]) -> Read<Vec<u8>> {
    let mut out = Vec::with_capacity(quoted.len());
    let inner = &quoted[1..quoted.len() - 1];
    let mut at = 0;
    while let Some(found) = memchr::memchr(b'\\', &inner[at..]) {
        out.extend_from_slice(&inner[at..at + found]);
        at += found;
        let escape = *inner.get(at + 1).ok_or(Malformed)?;
        at += 2;
        match escape {
            b'"' | b'\\' | b'/' => out.push(escape),
            b'b' => out.push(0x08),
            b'f' => out.push(0x0c),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'u' => {
                let mut code = hex4(inner, at)?;
                at += 4;
                if (0xD800..0xDC00).contains(&code) {
                    // A surrogate pair: `\uD83D\uDE00`; a lone one is U+FFFD.
                    if inner.get(at..at + 2) == Some(b"\\u") {
                        let low = hex4(inner, at + 2)?;
                        if (0xDC00..0xE000).contains(&low) {
                            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                            at += 6;
                        }
                    }
                }
                let c = char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER);
                out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
            }
            _ => return Err(Malformed),
        }
    }
    out.extend_from_slice(&inner[at..]);
    Ok(out)
}

/// The four hexadecimal digits at `at` of `text`.
fn hex4(text: &[u8], at: usize) -> Read<u32> {
    let digits = text.get(at..at + 4).ok_or(Malformed)?;
    let digits = std::str::from_utf8(digits).map_err(|_| Malformed)?;
    u32::from_str_radix(digits, 16).map_err(|_| Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(body: &str) -> Call<'_> {
        match read(body.as_bytes()) {
            Calls::One(call) => call,
            other => panic!("not one call: {other:?}"),
        }
    }

    fn text(value: &Option<Cow<'_, [u8]>>) -> Option<String> {
        value
            .as_deref()
            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
    }

    #[test]
    fn a_call_names_its_method_tool_and_id() {
        let call = one(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call",
                "params":{"arguments":{"q":"a \"quoted\" word","n":[1,{"x":null}]},"name":"search"}}"#);
        assert_eq!(text(&call.method).as_deref(), Some("tools/call"));
        assert_eq!(text(&call.tool).as_deref(), Some("search"));
        assert_eq!(call.id, Some(&b"7"[..]));
        assert!(matches!(call.method, Some(Cow::Borrowed(_))));
        // Any other method names no tool; a notification has no id.
        let call = one(
            r#" { "method" : "tools/list" , "jsonrpc" : "2.0" , "params" : { "name" : "x" } } "#,
        );
        assert_eq!(text(&call.method).as_deref(), Some("tools/list"));
        assert_eq!((call.tool, call.id), (None, None));
        let call = one(r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":7},"id":"a-1"}"#);
        assert_eq!((call.tool, call.id), (None, Some(&br#""a-1""#[..])));
    }

    #[test]
    fn what_a_server_reads_is_what_counts() {
        // The last of a member written twice, as servers' parsers read it.
        let call = one(
            r#"{"jsonrpc":"2.0","method":"cheap","method":"tools/call","params":{"name":"a","name":"b"}}"#,
        );
        assert_eq!(text(&call.method).as_deref(), Some("tools/call"));
        assert_eq!(text(&call.tool).as_deref(), Some("b"));
        // Escapes in names and values are read unescaped.
        let call = one(
            r#"{"jsonrpc":"2.0","meth\u006fd":"tools\/call","params":{"n\u0061me":"s\u00e9arch \ud83d\ude00"}}"#,
        );
        assert_eq!(text(&call.method).as_deref(), Some("tools/call"));
        assert_eq!(text(&call.tool).as_deref(), Some("séarch 😀"));
        // A method that is not a string, or no "2.0", is no call.
        for body in [
            r#"{"jsonrpc":"2.0","method":5}"#,
            r#"{"jsonrpc":"1.0","method":"m"}"#,
            r#"{"method":"m"}"#,
            r#"{"jsonrpc":"2.0","method":"m","method":null}"#,
            r#"{}"#,
        ] {
            assert!(!one(body).is_call(), "{body}");
        }
    }

    #[test]
    fn a_batch_is_its_calls_and_a_count_of_the_rest() {
        let Calls::Batch(batch) = read(
            br#"[{"jsonrpc":"2.0","method":"a","id":1}, 3, {"jsonrpc":"2.0","method":"b"},
                 {"method":"c"}, {"jsonrpc":"2.0","method":"tools/call","params":{"name":"t"},"id":null}]"#,
        ) else {
            panic!("a batch")
        };
        let methods: Vec<_> = batch.calls.iter().map(|c| text(&c.method)).collect();
        assert_eq!(
            methods,
            [
                Some("a".into()),
                Some("b".into()),
                Some("tools/call".into())
            ]
        );
        assert_eq!(batch.others, 2);
        assert_eq!(text(&batch.calls[2].tool).as_deref(), Some("t"));
        assert_eq!(batch.calls[2].id, Some(&b"null"[..]));
        assert!(Calls::Batch(batch).any());
        // Elements that are no calls are only counted.
        let Calls::Batch(batch) = read(b"[0, {}, []]") else {
            panic!("a batch")
        };
        assert_eq!((batch.calls.len(), batch.others), (0, 3));
        assert!(!Calls::Batch(batch).any());
    }

    #[test]
    fn the_first_quote_or_escape_is_found_in_any_word() {
        let mut bytes = vec![b'a'; 40];
        assert_eq!(quote_or_escape(&bytes), None);
        for at in 0..40 {
            for found in [b'"', b'\\'] {
                let mut with = bytes.clone();
                with[at] = found;
                // A later one, and a byte whose borrow could mislead.
                if at + 1 < 40 {
                    with[at + 1] = b'"';
                }
                assert_eq!(quote_or_escape(&with), Some(at), "{at}");
            }
        }
        bytes[3] = 0x21;
        bytes[4] = 0x5d;
        assert_eq!(quote_or_escape(&bytes), None);
    }

    #[test]
    fn anything_else_is_no_call() {
        for body in [
            "",
            "[]",
            " [ ] ",
            "\"text\"",
            "42",
            "tenant=acme",
            r#"{"jsonrpc":"2.0","method":"m"} trailing"#,
            r#"{"jsonrpc":"2.0","method":"m""#,
            r#"{"jsonrpc":"2.0","method":"m\"}"#,
            r#"[{"jsonrpc":"2.0","method":"m"},]"#,
            r#"{"jsonrpc":"2.0","method":"bad \x escape"}"#,
            r#"{"jsonrpc":"2.0","method":"cut \u00"}"#,
            r#"{"jsonrpc" "2.0"}"#,
        ] {
            assert_eq!(read(body.as_bytes()), Calls::None, "{body}");
        }
        // Deep nesting is skipped without recursion.
        let deep = format!(
            r#"{{"jsonrpc":"2.0","method":"m","params":{}1{}}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert!(one(&deep).is_call());
        let unclosed = format!(
            r#"{{"jsonrpc":"2.0","method":"m","params":{}"#,
            "[".repeat(1000)
        );
        assert_eq!(read(unclosed.as_bytes()), Calls::None);
    }
}
