//! The document parsed within limits, and the operation a request runs.
//!
//! A hand-written parser of GraphQL's executable documents (the September
//! 2025 grammar: operations and fragments; any other definition makes the
//! document unreadable, as a GraphQL server refuses to run it). It keeps
//! only what a key and a cost read, in one flat list of [`Node`]s (the
//! document's arena): each operation's and fragment's selection sets as
//! `Open`/`Close` pairs, the `first`/`last` arguments of fields, and
//! fragment spreads. Names are slices of the source.
//!
//! A document is read only when it parses without a single error (a
//! GraphQL server refuses a document with any syntax error without running
//! anything, so neither its name nor its cost would be what runs). The
//! limits are those of `apollo-parser`, which the fuzz target
//! (`fuzz/fuzz_targets/graphql.rs`) runs beside this parser as a
//! reference: [`RECURSION_LIMIT`] levels of nesting, counted as it counts
//! them, and [`TOKEN_LIMIT`] tokens, counted as its lexer counts them.
//!
//! Selection sets are read by a loop, not by recursion; values and list
//! types recurse once per level, at most [`RECURSION_LIMIT`] levels, so no
//! document can overflow the stack of a request's task.

use std::ops::Range;

use super::variables::{int_count, Count};
use super::OperationType;

/// The deepest nesting read: selection sets, list and object values, and
/// list types, inside one another (a list's or an object's members count
/// one level below it, an empty one none). A body of nothing but `{` stops
/// here; queries in the wild nest a few tens of levels.
pub const RECURSION_LIMIT: usize = 128;

/// The most tokens (whitespace, commas and comments included, a run of
/// whitespace as one, and the end of the document) read: one per byte of a
/// 64 KiB body, so the work a document can ask stays bounded even where
/// the body bound is raised.
pub const TOKEN_LIMIT: usize = 65_536;

/// What the cost reads of a document, in the order written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Node {
    /// A `first`/`last` argument of the field whose `Connection` follows,
    /// written as a value: its count.
    Count(Count),
    /// A `first`/`last` argument given as a variable: where its name
    /// (without `$`) is in the source.
    Variable(Range<usize>),
    /// A field with a `first` or `last` argument: a connection, sized by
    /// the `Count`s and `Variable`s just before it.
    Connection,
    /// A selection set opens. `scaled`: it is the selection set of the
    /// `Connection` just before it.
    Open {
        scaled: bool,
    },
    Close,
    /// A fragment spread: where the fragment's name is in the source.
    Spread(Range<usize>),
}

/// An operation or a fragment.
#[derive(Debug)]
pub(super) enum Definition {
    Operation {
        kind: OperationType,
        /// Where its name is in the source (`None`: anonymous).
        name: Option<Range<usize>>,
        /// Its selection set's `Open` in [`Document::nodes`].
        open: usize,
        /// Its variables' defaults, in [`Document::defaults`].
        defaults: Range<usize>,
    },
    Fragment {
        name: Range<usize>,
        open: usize,
    },
}

/// A document parsed.
#[derive(Debug)]
pub(super) struct Document<'s> {
    pub source: &'s str,
    pub definitions: Vec<Definition>,
    pub nodes: Vec<Node>,
    /// The defaults of the operations' variables: a name (without `$`) and
    /// the count of its default.
    pub defaults: Vec<(&'s str, Count)>,
}

impl Document<'_> {
    /// The source text at `range` (a range the parser took from it).
    pub fn text(&self, range: &Range<usize>) -> &str {
        self.source.get(range.clone()).unwrap_or_default()
    }
}

/// The document in `source`, or `None` when it does not parse: a syntax
/// error, a definition that is not executable, or more nesting or tokens
/// than the limits.
pub(super) fn parse(source: &str) -> Option<Document<'_>> {
    let mut parser = Parser {
        bytes: source.as_bytes(),
        pos: 0,
        tokens: 0,
        kind: Token::Eof,
        start: 0,
        depth: 0,
        document: Document {
            source,
            definitions: Vec::new(),
            // About one node per 16 bytes of a typical query.
            nodes: Vec::with_capacity(source.len() / 16 + 4),
            defaults: Vec::new(),
        },
    };
    parser.advance()?;
    parser.document()?;
    Some(parser.document)
}

/// The operation a request runs.
pub(super) struct Selected {
    /// Its selection set's `Open` in [`Document::nodes`].
    pub open: usize,
    /// Where its name is in the source (`None`: anonymous).
    pub name: Option<Range<usize>>,
    pub kind: OperationType,
    /// Its variables' defaults, in [`Document::defaults`].
    pub defaults: Range<usize>,
}

/// The operation named `operation_name`, or the only one when no name is
/// given. `None`, as GraphQL servers refuse to run anything, when no
/// operation fits, when several do (several operations and no name; two
/// operations of that name), or when an anonymous operation is not alone.
pub(super) fn select(document: &Document<'_>, operation_name: Option<&str>) -> Option<Selected> {
    let mut chosen: Option<Selected> = None;
    let mut operations = 0usize;
    let mut anonymous = false;
    for definition in &document.definitions {
        let Definition::Operation {
            kind,
            name,
            open,
            defaults,
        } = definition
        else {
            continue;
        };
        operations += 1;
        anonymous |= name.is_none();
        let fits = match operation_name {
            Some(wanted) => name
                .as_ref()
                .is_some_and(|name| document.text(name) == wanted),
            None => true,
        };
        if fits {
            if chosen.is_some() {
                return None;
            }
            chosen = Some(Selected {
                open: *open,
                name: name.clone(),
                kind: *kind,
                defaults: defaults.clone(),
            });
        }
    }
    if anonymous && operations > 1 {
        return None;
    }
    chosen
}

/// A significant token (whitespace, commas and comments are skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// One of `{ } ( ) [ ] : = ! $ @`.
    Punct(u8),
    Spread,
    Name,
    Int,
    /// A float or a string: a value that is never a count.
    Other,
    Eof,
}

const fn is_name_start(byte: u8) -> bool {
    byte.is_ascii_alphabetic() || byte == b'_'
}

const fn is_name_continue(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

const BOM: &[u8] = "\u{feff}".as_bytes();

struct Parser<'s> {
    bytes: &'s [u8],
    /// Where the lexer is: the end of the current token.
    pos: usize,
    /// Tokens lexed so far, ignored ones included.
    tokens: usize,
    /// The current token, and where it starts.
    kind: Token,
    start: usize,
    /// The nesting the current token is in, counted as [`RECURSION_LIMIT`]
    /// says.
    depth: usize,
    document: Document<'s>,
}

impl<'s> Parser<'s> {
    // ---- lexer ----

    /// Counts one token; `None` past [`TOKEN_LIMIT`].
    fn count(&mut self) -> Option<()> {
        self.tokens += 1;
        (self.tokens <= TOKEN_LIMIT).then_some(())
    }

    fn peek(&self, offset: usize) -> Option<u8> {
        self.bytes.get(self.pos + offset).copied()
    }

    /// Moves to the next significant token; `None` on a lexical error or
    /// past the token limit.
    fn advance(&mut self) -> Option<()> {
        loop {
            self.count()?;
            self.start = self.pos;
            let Some(byte) = self.peek(0) else {
                self.kind = Token::Eof;
                return Some(());
            };
            match byte {
                b'\t' | b' ' | b'\n' | b'\r' | 0xEF => {
                    // A run of whitespace (the BOM included) is one token.
                    let mut any = false;
                    loop {
                        match self.peek(0) {
                            Some(b'\t' | b' ' | b'\n' | b'\r') => self.pos += 1,
                            Some(0xEF) if self.bytes[self.pos..].starts_with(BOM) => {
                                self.pos += BOM.len()
                            }
                            _ => break,
                        }
                        any = true;
                    }
                    if !any {
                        return None;
                    }
                }
                b',' => self.pos += 1,
                b'#' => {
                    // To the end of the line, the terminator excluded.
                    let rest = &self.bytes[self.pos..];
                    self.pos += rest
                        .iter()
                        .position(|&b| b == b'\n' || b == b'\r')
                        .unwrap_or(rest.len());
                }
                b'{' | b'}' | b'(' | b')' | b'[' | b']' | b':' | b'=' | b'!' | b'$' | b'@' => {
                    self.pos += 1;
                    self.kind = Token::Punct(byte);
                    return Some(());
                }
                b'.' => {
                    if self.bytes[self.pos..].starts_with(b"...") {
                        self.pos += 3;
                        self.kind = Token::Spread;
                        return Some(());
                    }
                    return None;
                }
                b'"' => {
                    self.string()?;
                    self.kind = Token::Other;
                    return Some(());
                }
                b'-' | b'0'..=b'9' => {
                    self.kind = self.number()?;
                    return Some(());
                }
                byte if is_name_start(byte) => {
                    self.pos += 1;
                    while self.peek(0).is_some_and(is_name_continue) {
                        self.pos += 1;
                    }
                    self.kind = Token::Name;
                    return Some(());
                }
                // `&`, `|` (type system only), and any other character.
                _ => return None,
            }
        }
    }

    fn digits(&mut self) -> usize {
        let from = self.pos;
        while self.peek(0).is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
        self.pos - from
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, not followed by a
    /// digit after a leading zero, nor by `.` or a name's first character.
    fn number(&mut self) -> Option<Token> {
        if self.peek(0) == Some(b'-') {
            self.pos += 1;
        }
        match self.peek(0) {
            Some(b'0') => {
                self.pos += 1;
                if self.peek(0).is_some_and(|b| b.is_ascii_digit()) {
                    return None;
                }
            }
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return None,
        }
        let mut kind = Token::Int;
        if self.peek(0) == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return None;
            }
            kind = Token::Other;
        }
        if matches!(self.peek(0), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(0), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return None;
            }
            kind = Token::Other;
        }
        match self.peek(0) {
            Some(b'.') => None,
            Some(byte) if is_name_start(byte) => None,
            _ => Some(kind),
        }
    }

    /// A string or a block string, at its first `"`.
    fn string(&mut self) -> Option<()> {
        if self.bytes[self.pos..].starts_with(b"\"\"\"") {
            self.pos += 3;
            loop {
                let rest = &self.bytes[self.pos..];
                let at = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
                self.pos += at;
                let rest = &rest[at..];
                if rest.starts_with(b"\"\"\"") {
                    self.pos += 3;
                    return Some(());
                }
                self.pos += if rest.starts_with(b"\\\"\"\"") { 4 } else { 1 };
            }
        }
        self.pos += 1;
        loop {
            let rest = &self.bytes[self.pos..];
            let at = rest
                .iter()
                .position(|&b| matches!(b, b'"' | b'\\' | b'\n' | b'\r'))?;
            self.pos += at + 1;
            match rest[at] {
                b'"' => return Some(()),
                b'\\' => self.escape()?,
                _ => return None,
            }
        }
    }

    /// What follows a `\` in a string.
    fn escape(&mut self) -> Option<()> {
        let byte = self.peek(0)?;
        self.pos += 1;
        match byte {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(()),
            b'u' if self.peek(0) == Some(b'{') => {
                // `\u{...}`: hex digits naming a Unicode scalar value.
                self.pos += 1;
                let mut value = 0u32;
                let mut any = false;
                loop {
                    match self.peek(0)? {
                        b'}' => break,
                        digit => {
                            let digit = char::from(digit).to_digit(16)?;
                            value = value.saturating_mul(16).saturating_add(digit);
                            any = true;
                        }
                    }
                    self.pos += 1;
                }
                self.pos += 1;
                (any && char::from_u32(value).is_some()).then_some(())
            }
            b'u' => match self.hex4()? {
                // A leading surrogate needs a trailing one at once.
                0xD800..=0xDBFF => {
                    if self.peek(0) != Some(b'\\') || self.peek(1) != Some(b'u') {
                        return None;
                    }
                    self.pos += 2;
                    (0xDC00..=0xDFFF).contains(&self.hex4()?).then_some(())
                }
                0xDC00..=0xDFFF => None,
                _ => Some(()),
            },
            _ => None,
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let hex = self.bytes.get(self.pos..self.pos + 4)?;
        let mut value = 0;
        for &digit in hex {
            value = value * 16 + char::from(digit).to_digit(16)?;
        }
        self.pos += 4;
        Some(value)
    }

    // ---- parser ----

    fn text(&self) -> &'s str {
        self.document
            .source
            .get(self.start..self.pos)
            .unwrap_or_default()
    }

    fn is(&self, byte: u8) -> bool {
        self.kind == Token::Punct(byte)
    }

    /// Expects the punctuator `byte` and moves past it.
    fn expect(&mut self, byte: u8) -> Option<()> {
        if !self.is(byte) {
            return None;
        }
        self.advance()
    }

    /// Expects a name and moves past it: where it is.
    fn name(&mut self) -> Option<Range<usize>> {
        if self.kind != Token::Name {
            return None;
        }
        let range = self.start..self.pos;
        self.advance()?;
        Some(range)
    }

    /// One level deeper; `None` past the limit.
    fn deeper(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= RECURSION_LIMIT).then_some(())
    }

    fn document(&mut self) -> Option<()> {
        if self.kind == Token::Eof {
            return None;
        }
        while self.kind != Token::Eof {
            let kind = match (self.kind, self.text()) {
                (Token::Punct(b'{'), _) => {
                    let open = self.document.nodes.len();
                    self.selection_set(false)?;
                    let at = self.document.defaults.len();
                    self.document.definitions.push(Definition::Operation {
                        kind: OperationType::Query,
                        name: None,
                        open,
                        defaults: at..at,
                    });
                    continue;
                }
                (Token::Name, "query") => OperationType::Query,
                (Token::Name, "mutation") => OperationType::Mutation,
                (Token::Name, "subscription") => OperationType::Subscription,
                (Token::Name, "fragment") => {
                    self.advance()?;
                    if self.text() == "on" {
                        return None;
                    }
                    let name = self.name()?;
                    self.type_condition()?;
                    self.directives(false)?;
                    let open = self.document.nodes.len();
                    self.selection_set(false)?;
                    self.document
                        .definitions
                        .push(Definition::Fragment { name, open });
                    continue;
                }
                // A type system definition, or not a definition.
                _ => return None,
            };
            self.advance()?;
            let name = match self.kind {
                Token::Name => Some(self.name()?),
                _ => None,
            };
            let first_default = self.document.defaults.len();
            if self.is(b'(') {
                self.variable_definitions()?;
            }
            self.directives(false)?;
            let open = self.document.nodes.len();
            self.selection_set(false)?;
            let defaults = first_default..self.document.defaults.len();
            self.document.definitions.push(Definition::Operation {
                kind,
                name,
                open,
                defaults,
            });
        }
        Some(())
    }

    /// `on Type`.
    fn type_condition(&mut self) -> Option<()> {
        if self.kind != Token::Name || self.text() != "on" {
            return None;
        }
        self.advance()?;
        self.name().map(drop)
    }

    /// `($a: Type = default @directive ...)`, at its `(`.
    fn variable_definitions(&mut self) -> Option<()> {
        self.advance()?;
        if !self.is(b'$') {
            return None;
        }
        while self.is(b'$') {
            self.advance()?;
            let name = self.name()?;
            self.expect(b':')?;
            self.ty()?;
            if self.is(b'=') {
                self.advance()?;
                let count = match self.value(true)? {
                    Value::Count(count) => count,
                    Value::Variable(_) => return None,
                };
                let name = self.document.source.get(name).unwrap_or_default();
                self.document.defaults.push((name, count));
            }
            self.directives(true)?;
        }
        self.expect(b')')
    }

    /// `Name`, `[Type]`, either followed by `!`.
    fn ty(&mut self) -> Option<()> {
        if self.is(b'[') {
            self.deeper()?;
            self.advance()?;
            self.ty()?;
            self.expect(b']')?;
            self.depth -= 1;
        } else {
            self.name()?;
        }
        if self.is(b'!') {
            self.advance()?;
        }
        Some(())
    }

    /// Any number of `@name(arguments)`.
    fn directives(&mut self, constant: bool) -> Option<()> {
        while self.is(b'@') {
            self.advance()?;
            self.name()?;
            if self.is(b'(') {
                self.arguments(false, constant)?;
            }
        }
        Some(())
    }

    /// `(name: value ...)`, at its `(`; a field's `first` and `last` are
    /// recorded (`field`). Whether it recorded any.
    fn arguments(&mut self, field: bool, constant: bool) -> Option<bool> {
        self.advance()?;
        if self.kind != Token::Name {
            return None;
        }
        let mut sized = false;
        while self.kind == Token::Name {
            let counts = field && matches!(self.text(), "first" | "last");
            self.advance()?;
            self.expect(b':')?;
            let value = self.value(constant)?;
            if counts {
                sized = true;
                self.document.nodes.push(match value {
                    Value::Count(count) => Node::Count(count),
                    Value::Variable(name) => Node::Variable(name),
                });
            }
        }
        self.expect(b')')?;
        Some(sized)
    }

    /// A value (`constant`: no variables), and what it counts as.
    fn value(&mut self, constant: bool) -> Option<Value> {
        let value = match self.kind {
            Token::Punct(b'$') if !constant => {
                self.advance()?;
                return self.name().map(Value::Variable);
            }
            Token::Int => Value::Count(int_count(self.text())),
            Token::Name | Token::Other => Value::Count(None),
            Token::Punct(b'[') => {
                self.advance()?;
                while !self.is(b']') {
                    self.deeper()?;
                    self.value(constant)?;
                    self.depth -= 1;
                }
                Value::Count(None)
            }
            Token::Punct(b'{') => {
                self.advance()?;
                while self.kind == Token::Name {
                    self.advance()?;
                    self.expect(b':')?;
                    self.deeper()?;
                    self.value(constant)?;
                    self.depth -= 1;
                }
                if !self.is(b'}') {
                    return None;
                }
                Value::Count(None)
            }
            _ => return None,
        };
        self.advance()?;
        Some(value)
    }

    /// A selection set and every one nested in it, at its `{`: a loop over
    /// the tokens, each `{` one level deeper (`scaled`: it belongs to the
    /// connection just recorded).
    fn selection_set(&mut self, scaled: bool) -> Option<()> {
        let base = self.depth;
        self.open(scaled)?;
        // Whether the innermost open selection set holds no selection yet.
        let mut empty = true;
        loop {
            match self.kind {
                Token::Punct(b'}') => {
                    if empty {
                        return None;
                    }
                    self.document.nodes.push(Node::Close);
                    self.depth -= 1;
                    self.advance()?;
                    if self.depth == base {
                        return Some(());
                    }
                    continue;
                }
                Token::Name => {
                    self.advance()?;
                    if self.is(b':') {
                        // An alias: the field's name follows.
                        self.advance()?;
                        self.name()?;
                    }
                    let connection = self.is(b'(') && self.arguments(true, false)?;
                    self.directives(false)?;
                    if connection {
                        self.document.nodes.push(Node::Connection);
                    }
                    if self.is(b'{') {
                        self.open(connection)?;
                        empty = true;
                        continue;
                    }
                }
                Token::Spread => {
                    self.advance()?;
                    match self.kind {
                        Token::Name if self.text() != "on" => {
                            let name = self.name()?;
                            self.document.nodes.push(Node::Spread(name));
                            self.directives(false)?;
                        }
                        _ => {
                            if self.kind == Token::Name {
                                self.type_condition()?;
                            }
                            self.directives(false)?;
                            self.open(false)?;
                            empty = true;
                            continue;
                        }
                    }
                }
                _ => return None,
            }
            empty = false;
        }
    }

    /// Opens a selection set at its `{`.
    fn open(&mut self, scaled: bool) -> Option<()> {
        if !self.is(b'{') {
            return None;
        }
        self.deeper()?;
        self.document.nodes.push(Node::Open { scaled });
        self.advance()
    }
}

/// What a value counts as.
enum Value {
    Count(Count),
    /// A variable: where its name is.
    Variable(Range<usize>),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selected(source: &str, name: Option<&str>) -> Option<(Option<String>, OperationType)> {
        let document = parse(source)?;
        let selected = select(&document, name)?;
        Some((selected.name.map(|r| source[r].to_owned()), selected.kind))
    }

    #[test]
    fn the_only_operation_is_selected_without_a_name() {
        assert_eq!(
            selected("query A { a }", None),
            Some((Some("A".into()), OperationType::Query))
        );
        assert_eq!(selected("{ a }", None), Some((None, OperationType::Query)));
        assert_eq!(
            selected("query { a }", None),
            Some((None, OperationType::Query))
        );
        assert_eq!(
            selected("mutation M { a }", None),
            Some((Some("M".into()), OperationType::Mutation))
        );
        assert_eq!(
            selected("subscription { a }", None),
            Some((None, OperationType::Subscription))
        );
        assert_eq!(
            selected("fragment F on T { a } query Q { ...F }", None),
            Some((Some("Q".into()), OperationType::Query))
        );
    }

    #[test]
    fn the_named_operation_is_selected() {
        let source = "query A { a } mutation B { b }";
        assert_eq!(
            selected(source, Some("B")),
            Some((Some("B".into()), OperationType::Mutation))
        );
        assert_eq!(selected(source, None), None);
        assert_eq!(selected(source, Some("C")), None);
        assert_eq!(selected("{ a }", Some("A")), None);
    }

    #[test]
    fn ambiguous_or_invalid_documents_select_nothing() {
        assert_eq!(selected("query A { a } query A { b }", Some("A")), None);
        assert_eq!(selected("{ a } query B { b }", Some("B")), None);
        assert_eq!(selected("type T { a: Int } query A { a }", Some("A")), None);
        assert_eq!(selected("fragment F on T { a }", None), None);
        assert_eq!(selected("", None), None);
    }

    #[test]
    fn a_document_with_any_error_does_not_parse() {
        for source in [
            "{ a",
            "query A { a } }",
            "{ a(first: ) }",
            "query A { a } \u{7}",
            "{ a(first: \"x) }",
            // What some parsers let through.
            "{ a(first) }",
            "{ a(x: {b}) }",
            "{ }",
            "{ a() }",
            "query () { a }",
            "query ($n: Int = $m) { a }",
            "fragment on on T { a } { ...on }",
            "{ a(x: 1a) }",
            "{ a(x: 01) }",
            "{ a(x: 1.) }",
            "{ a(x: \"\\ud800\") }",
            "{ a(x: \"\\u{110000}\") }",
            "{ a } \u{c}",
            "\"description\" { a }",
        ] {
            assert!(parse(source).is_none(), "{source:?}");
        }
    }

    #[test]
    fn every_executable_form_parses() {
        for source in [
            "\u{feff}{ a }",
            "query Q($a: [Int!]! = [1, 2] @d(x: 1), $b: In = {x: {y: [ENUM]}}) @o(x: $a) { ...F @s, ... on T @i { b } ... @i { c } ... { d } x: a(first: 1, last: $b, y: -1.5e3) @f(first: 2) { e } }
             fragment F on T @d { f(s: \"\\\"{\", t: \"\"\" { \\\"\"\" \"\" \"\"\", u: \"\\u{1F600}\\ud83d\\ude00\") }",
            "# a comment with { and \"\n{ a } # { ( [",
            "{ a(x: []) { b(y: {}) } }",
            "mutation query { on }",
        ] {
            assert!(parse(source).is_some(), "{source:?}");
        }
    }

    #[test]
    fn braces_in_strings_and_comments_do_not_nest() {
        let brackets = "{[(".repeat(100);
        let source =
            format!("{{ a(x: \"{brackets}\", y: \"\"\"{brackets}\"\"\") # {brackets}\n }}");
        assert!(parse(&source).is_some());
    }

    #[test]
    fn nesting_beyond_the_limit_does_not_parse() {
        let nested = |depth: usize| format!("{}a{}", "{a".repeat(depth), "}".repeat(depth));
        assert!(parse(&nested(RECURSION_LIMIT)).is_some());
        assert!(parse(&nested(RECURSION_LIMIT + 1)).is_none());
        // Values and list types nest as deep as selection sets, and count
        // one level per member inside a list or an object.
        let list =
            |depth: usize| format!("{{ a(x: {}1{}) }}", "[".repeat(depth), "]".repeat(depth));
        assert!(parse(&list(RECURSION_LIMIT - 1)).is_some());
        assert!(parse(&list(RECURSION_LIMIT)).is_none());
        let object =
            |depth: usize| format!("{{ a(x: {}1{}) }}", "{b: ".repeat(depth), "}".repeat(depth));
        assert!(parse(&object(RECURSION_LIMIT - 1)).is_some());
        assert!(parse(&object(RECURSION_LIMIT)).is_none());
        let ty = |depth: usize| {
            format!(
                "query($a: {}Int{}) {{ a }}",
                "[".repeat(depth),
                "]!".repeat(depth)
            )
        };
        assert!(parse(&ty(RECURSION_LIMIT)).is_some());
        assert!(parse(&ty(RECURSION_LIMIT + 1)).is_none());
        // A 64 KiB body of `{`, `[` or `(`, or of all of them, parses to an
        // error, on a small stack.
        for body in [
            "{".repeat(65_536),
            format!("{{ a(x: {})", "[".repeat(65_536)),
            format!("query($a: {}", "[".repeat(65_536)),
            format!("{{ a(x: {})", "{a: [".repeat(10_000)),
        ] {
            let handle = std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || parse(&body).is_none())
                .unwrap();
            assert!(handle.join().unwrap());
        }
    }

    #[test]
    fn tokens_beyond_the_limit_do_not_parse() {
        let fields = |count: usize| format!("{{{}}}", "a ".repeat(count));
        // `{`, `}`, a name and a space per field, and the end.
        assert!(parse(&fields((TOKEN_LIMIT - 3) / 2)).is_some());
        assert!(parse(&fields(TOKEN_LIMIT / 2)).is_none());
        // Exactly at the limit: `{`, `a`, then 65,532 commas, `}`, the end.
        let commas = |count: usize| format!("{{a{}}}", ",".repeat(count));
        assert!(parse(&commas(TOKEN_LIMIT - 4)).is_some());
        assert!(parse(&commas(TOKEN_LIMIT - 3)).is_none());
    }
}
