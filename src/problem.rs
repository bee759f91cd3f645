//! Problem documents (RFC 9457): the JSON body of every error response
//! sluice writes itself, whether the proxy answers it, the admin listener,
//! or the connection code straight onto the socket. Titles, member order
//! and JSON escaping are decided here; what goes wrong, with which status
//! and detail, is decided where it goes wrong.
//!
//! Each surface writes its members in the order it always has, so that a
//! response is byte for byte what clients have seen before: see [`Layout`].
//!
//! A 429 is written on every rejection, so its body is assembled from
//! pieces built once per rule when the policy is compiled
//! ([`quota_exceeded_head`], [`json_string`]): [`quota_exceeded_body`]
//! then only copies bytes and prints three numbers.

use http::{HeaderValue, StatusCode};
use serde_json::Value;

use crate::request_id::{MadeId, RequestId, MADE_LEN};

/// The media type of a problem document.
pub const MEDIA_TYPE: &str = "application/problem+json";

/// [`MEDIA_TYPE`] as a `Content-Type` value.
pub static CONTENT_TYPE: HeaderValue = HeaderValue::from_static(MEDIA_TYPE);

/// The problem type of an answer to a caller over its limit or banned
/// (IANA's HTTP Problem Types registry).
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// The problem type of an answer to a request an `adaptive` rule shed: the
/// upstream is saturated, which is not the caller's fault (a tag URI,
/// RFC 4151: a name, not a page; docs/adaptive.md).
pub const OVERLOADED: &str = "tag:sluice,2026:problems/overloaded";

/// The problem type of a refusal by a `cost = "graphql"` rule that cannot
/// read the request's cost (docs/conversation.md, "No query is free").
pub const UNREADABLE_QUERY: &str = "tag:sluice,2026:problems/unreadable-query";

/// The problem type of a refusal of a GraphQL query sent with a persisted
/// query's hash that is not its own.
pub const PERSISTED_QUERY_MISMATCH: &str = "tag:sluice,2026:problems/persisted-query-mismatch";
/// The problem type of a 400 to a request that carries a field a rule reads
/// to decide more than once (docs/configuration.md, "Keys").
pub const AMBIGUOUS_FIELD: &str = "tag:sluice,2026:problems/ambiguous-field";
/// The problem type of a 400 to a request whose body a rule reads, which
/// sluice cannot read but a lenient server would (docs/conversation.md, "A
/// body sluice cannot read").
pub const UNREADABLE_BODY: &str = "tag:sluice,2026:problems/unreadable-body";

/// The order a document's members are written in. Clients read members by
/// name; the order differs between surfaces only because each kept the one
/// it was first written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `type` (when not `about:blank`), `title`, `status`, `detail`, then
    /// the extension members as added: the proxy's refusals and 429s, and
    /// the 503 for a connection over `max_connections`.
    Standard,
    /// Every member sorted by name: the admin listener's errors, a banned
    /// caller's 429, a retired route's 410, and the answers to request heads
    /// hyper could not parse. (`request_id`, which every document of the
    /// proxy port carries, is added last in either layout:
    /// [`with_request_id`].)
    ByName,
}

/// A problem document: its type, title, status, detail and any extension
/// members (RFC 9457 §3).
#[derive(Debug, Clone)]
pub struct Problem<'a> {
    /// `None`: `about:blank`, which is not written.
    kind: Option<&'a str>,
    title: &'a str,
    status: u16,
    detail: &'a str,
    extensions: Vec<(&'a str, Value)>,
}

impl<'a> Problem<'a> {
    /// A problem of the default type, titled with `status`'s reason phrase
    /// (`Error` for a code without one).
    pub fn new(status: StatusCode, detail: &'a str) -> Problem<'a> {
        Problem {
            kind: None,
            title: status.canonical_reason().unwrap_or("Error"),
            status: status.as_u16(),
            detail,
            extensions: Vec::new(),
        }
    }

    /// A caller over its limit or banned: the quota-exceeded type, answered
    /// with `response.status` and titled with its reason phrase (`Too Many
    /// Requests` for a code without one).
    pub fn quota_exceeded(status: StatusCode, detail: &'a str) -> Problem<'a> {
        Problem {
            kind: Some(QUOTA_EXCEEDED),
            title: status.canonical_reason().unwrap_or("Too Many Requests"),
            ..Problem::new(status, detail)
        }
    }

    /// A request shed because the upstream is saturated: the overloaded
    /// type, answered 503.
    pub fn overloaded(detail: &'a str) -> Problem<'a> {
        Problem {
            kind: Some(OVERLOADED),
            ..Problem::new(StatusCode::SERVICE_UNAVAILABLE, detail)
        }
    }

    /// Of the problem type `kind` (a URI) rather than `about:blank`.
    pub fn typed(mut self, kind: &'a str) -> Problem<'a> {
        self.kind = Some(kind);
        self
    }

    /// Replaces the reason-phrase title.
    pub fn titled(mut self, title: &'a str) -> Problem<'a> {
        self.title = title;
        self
    }

    /// Adds an extension member (RFC 9457 §3.2), which clients may rely on.
    pub fn with(mut self, name: &'a str, value: impl Into<Value>) -> Problem<'a> {
        self.extensions.push((name, value.into()));
        self
    }

    /// The document as JSON, its members in `layout`'s order.
    pub fn to_json(&self, layout: Layout) -> Vec<u8> {
        let mut out = Vec::with_capacity(96 + self.detail.len());
        match layout {
            Layout::Standard => {
                self.push_standard_start(&mut out);
                for (name, value) in &self.extensions {
                    out.push(b',');
                    push_member(&mut out, name, Member::Json(value));
                }
            }
            Layout::ByName => {
                let mut members = vec![
                    ("title", Member::Text(self.title)),
                    ("status", Member::Number(u64::from(self.status))),
                    ("detail", Member::Text(self.detail)),
                ];
                if let Some(kind) = self.kind {
                    members.push(("type", Member::Text(kind)));
                }
                members.extend(
                    self.extensions
                        .iter()
                        .map(|(name, value)| (*name, Member::Json(value))),
                );
                members.sort_by_key(|(name, _)| *name);
                out.push(b'{');
                for (index, (name, value)) in members.into_iter().enumerate() {
                    if index > 0 {
                        out.push(b',');
                    }
                    push_member(&mut out, name, value);
                }
            }
        }
        out.push(b'}');
        out
    }

    /// `{"type":…,"title":…,"status":…,"detail":…` — the standard layout up
    /// to the extension members, without the closing brace.
    fn push_standard_start(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        if let Some(kind) = self.kind {
            push_member(out, "type", Member::Text(kind));
            out.push(b',');
        }
        push_member(out, "title", Member::Text(self.title));
        out.push(b',');
        push_member(out, "status", Member::Number(u64::from(self.status)));
        out.push(b',');
        push_member(out, "detail", Member::Text(self.detail));
    }
}

/// A member's value as it is written.
enum Member<'v> {
    Text(&'v str),
    Number(u64),
    Json(&'v Value),
}

fn push_member(out: &mut Vec<u8>, name: &str, value: Member<'_>) {
    push_json_str(out, name);
    out.push(b':');
    match value {
        Member::Text(text) => push_json_str(out, text),
        Member::Number(n) => push_u64(out, n),
        // Writing into a Vec cannot fail.
        Member::Json(value) => {
            let _ = serde_json::to_writer(&mut *out, value);
        }
    }
}

/// The fixed start of a rule's 429 body, up to the list of violated
/// policies; built once per rule when the policy is compiled.
pub fn quota_exceeded_head(status: StatusCode, detail: &str) -> String {
    let mut out = Vec::with_capacity(128 + QUOTA_EXCEEDED.len() + detail.len());
    Problem::quota_exceeded(status, detail).push_standard_start(&mut out);
    out.extend_from_slice(b",\"violated-policies\":[");
    String::from_utf8(out).unwrap_or_default()
}

/// `text` as a JSON string literal (quoted, escaped); built once per rule.
pub fn json_string(text: &str) -> String {
    let mut out = Vec::with_capacity(text.len() + 2);
    push_json_str(&mut out, text);
    String::from_utf8(out).unwrap_or_default()
}

/// The 429 body: the quota-exceeded problem with sluice's extension members
/// `violated-policies`, `rule`, `limit`, `remaining` and `retry_after_secs`
/// (`null`: never), in the standard layout. Everything that depends only on
/// the rule comes prebuilt: `head` from [`quota_exceeded_head`], the names
/// from [`json_string`].
pub fn quota_exceeded_body<'n>(
    head: &str,
    violated_json: impl Iterator<Item = &'n str>,
    rule_json: &str,
    limit: u64,
    remaining: u64,
    retry_after_secs: Option<u64>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len() + 4 * rule_json.len() + 96);
    out.extend_from_slice(head.as_bytes());
    for (index, name) in violated_json.enumerate() {
        if index > 0 {
            out.push(b',');
        }
        out.extend_from_slice(name.as_bytes());
    }
    out.extend_from_slice(b"],\"rule\":");
    out.extend_from_slice(rule_json.as_bytes());
    out.extend_from_slice(b",\"limit\":");
    push_u64(&mut out, limit);
    out.extend_from_slice(b",\"remaining\":");
    push_u64(&mut out, remaining);
    out.extend_from_slice(b",\"retry_after_secs\":");
    match retry_after_secs {
        Some(secs) => push_u64(&mut out, secs),
        None => out.extend_from_slice(b"null"),
    }
    out.push(b'}');
    out
}

/// `document` with the member `"request_id":"<id>"` added last, whatever
/// its layout: the id is the one thing that differs between two answers
/// that are otherwise the same, so it is added as a document leaves, after
/// the rest was built (or sent again, `proxy/respond/last_refusal.rs`).
pub fn with_request_id(document: &[u8], id: &RequestId) -> Vec<u8> {
    let mut out = Vec::with_capacity(with_request_id_len(document, id));
    push_with_request_id(&mut out, document, id);
    out
}

/// Appends [`with_request_id`]'s document to `out`: sluice's own HTTP/1
/// server writes it straight behind the response's head, with no document
/// of its own made per answer.
pub fn push_with_request_id(out: &mut Vec<u8>, document: &[u8], id: &RequestId) {
    let Some(open) = document.strip_suffix(b"}") else {
        // Not an object: nothing sluice writes.
        out.extend_from_slice(document);
        return;
    };
    if let RequestId::Made(made) = id {
        // The common case (an id sluice made: every request but those a
        // trusted proxy named) as two copies: the document's opening, then
        // the member and the closing brace, put together on the stack.
        let tail = made_member(made);
        let tail = if open == b"{" { &tail[1..] } else { &tail[..] };
        out.reserve(open.len() + tail.len());
        out.extend_from_slice(open);
        out.extend_from_slice(tail);
        return;
    }
    out.reserve(with_request_id_len(document, id));
    out.extend_from_slice(open);
    if open != b"{" {
        out.push(b',');
    }
    out.extend_from_slice(REQUEST_ID_MEMBER);
    id.write_json(out);
    out.push(b'}');
}

/// The length of [`with_request_id`]'s document.
pub fn with_request_id_len(document: &[u8], id: &RequestId) -> usize {
    match document.strip_suffix(b"}") {
        Some(open) => {
            let comma = usize::from(open != b"{");
            document.len() + comma + REQUEST_ID_MEMBER.len() + id.json_len()
        }
        None => document.len(),
    }
}

const REQUEST_ID_MEMBER: &[u8] = br#""request_id":"#;

/// `,"request_id":"<id>"}`: a made id's member, with the comma before it
/// and the document's closing brace.
const MADE_MEMBER_LEN: usize = 1 + REQUEST_ID_MEMBER.len() + MADE_LEN + 3;

#[inline]
fn made_member(id: &MadeId) -> [u8; MADE_MEMBER_LEN] {
    let mut member = [0u8; MADE_MEMBER_LEN];
    let (comma, rest) = member.split_at_mut(1);
    comma[0] = b',';
    let (name, rest) = rest.split_at_mut(REQUEST_ID_MEMBER.len());
    name.copy_from_slice(REQUEST_ID_MEMBER);
    rest[0] = b'"';
    rest[1..=MADE_LEN].copy_from_slice(id.as_bytes());
    rest[MADE_LEN + 1..].copy_from_slice(b"\"}");
    member
}

/// A whole HTTP/1.1 answer with a problem document, that closes the
/// connection, for a connection answered before (or instead of) any
/// request: a request id of its own, as no request was read to keep one
/// from, on the head and in the document.
pub fn closing_answer(status: StatusCode, detail: &str, layout: Layout) -> Vec<u8> {
    let title = status.canonical_reason().unwrap_or("Error");
    let id = MadeId::next();
    let body = with_request_id(
        &Problem::new(status, detail).to_json(layout),
        &RequestId::Made(id),
    );
    let mut answer = format!(
        "HTTP/1.1 {} {title}\r\ncontent-type: {MEDIA_TYPE}\r\n\
         content-length: {}\r\nconnection: close\r\nx-request-id: {}\r\n\r\n",
        status.as_u16(),
        body.len(),
        id.as_str(),
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    answer
}

/// Appends `text` as a JSON string, byte for byte what `serde_json` writes.
pub fn push_json_str(out: &mut Vec<u8>, text: &str) {
    // Without an early exit, so that the test runs on many bytes at once.
    let plain = text.bytes().fold(true, |plain, b| {
        plain & (b >= 0x20) & (b != b'"') & (b != b'\\')
    });
    if plain {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        // Escaping is rare (names and details come from the config): let
        // serde_json do it. Writing into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, text);
    }
}

/// Appends `n` in decimal.
fn push_u64(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Serialize;
    use serde_json::json;

    use super::*;

    /// Details and names that need escaping, and some that do not.
    const TEXTS: &[&str] = &[
        "rule 'per-ip' allows 1 requests per 1m",
        "",
        "quote \" back\\ tab\t nl\n ctl\u{1} del\u{7f} é ✓",
    ];

    /// Statuses with a reason phrase, and one without.
    fn statuses() -> [StatusCode; 4] {
        [
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::SERVICE_UNAVAILABLE,
            StatusCode::BAD_REQUEST,
            StatusCode::from_u16(599).unwrap(),
        ]
    }

    /// A document as sorted JSON writes it: the reference for
    /// [`Layout::ByName`].
    fn sorted(members: &[(&str, Value)]) -> String {
        let map: BTreeMap<&str, &Value> = members.iter().map(|(n, v)| (*n, v)).collect();
        serde_json::to_string(&map).unwrap()
    }

    #[test]
    fn the_standard_layout_is_what_serialising_the_members_in_order_gives() {
        #[derive(Serialize)]
        struct Plain<'a> {
            title: &'a str,
            status: u16,
            detail: &'a str,
        }
        for status in statuses() {
            for detail in TEXTS {
                let reference = serde_json::to_string(&Plain {
                    title: status.canonical_reason().unwrap_or("Error"),
                    status: status.as_u16(),
                    detail,
                })
                .unwrap();
                let ours = Problem::new(status, detail).to_json(Layout::Standard);
                assert_eq!(String::from_utf8(ours).unwrap(), reference);
            }
        }
    }

    #[test]
    fn the_by_name_layout_sorts_every_member() {
        for status in statuses() {
            for text in TEXTS {
                let plain = Problem::new(status, text).to_json(Layout::ByName);
                let title = status.canonical_reason().unwrap_or("Error");
                let reference = sorted(&[
                    ("title", json!(title)),
                    ("status", json!(status.as_u16())),
                    ("detail", json!(text)),
                ]);
                assert_eq!(String::from_utf8(plain).unwrap(), reference);

                let banned = Problem::quota_exceeded(status, text)
                    .with("violated-policies", vec![*text])
                    .with("rule", *text)
                    .with("banned", true)
                    .with("retry_after_secs", 7u64)
                    .to_json(Layout::ByName);
                let title = status.canonical_reason().unwrap_or("Too Many Requests");
                let reference = sorted(&[
                    ("type", json!(QUOTA_EXCEEDED)),
                    ("title", json!(title)),
                    ("status", json!(status.as_u16())),
                    ("detail", json!(text)),
                    ("violated-policies", json!([text])),
                    ("rule", json!(text)),
                    ("banned", json!(true)),
                    ("retry_after_secs", json!(7)),
                ]);
                assert_eq!(String::from_utf8(banned).unwrap(), reference);
            }
        }
        let gone = Problem::new(StatusCode::GONE, "retired")
            .with("rule", "v1")
            .with("link", None::<String>)
            .to_json(Layout::ByName);
        assert_eq!(
            String::from_utf8(gone).unwrap(),
            r#"{"detail":"retired","link":null,"rule":"v1","status":410,"title":"Gone"}"#
        );
    }

    #[test]
    fn the_request_id_is_the_last_member_escaped_as_json() {
        let document = Problem::new(StatusCode::BAD_REQUEST, "bad").to_json(Layout::ByName);
        let kept = |text: &str| RequestId::Kept(HeaderValue::from_str(text).unwrap());
        let stamped = with_request_id(&document, &kept("abc-123"));
        let text = String::from_utf8(stamped).unwrap();
        assert!(text.ends_with(r#","request_id":"abc-123"}"#), "{text}");
        let json: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["request_id"], "abc-123");
        assert_eq!(json["status"], 400);
        // A trusted proxy's id may hold quotes and backslashes.
        let odd = r#"a"b\c"#;
        let json: Value = serde_json::from_slice(&with_request_id(&document, &kept(odd))).unwrap();
        assert_eq!(json["request_id"], odd);
        assert_eq!(with_request_id(b"{}", &kept("x")), br#"{"request_id":"x"}"#);
        // A made id, written from its own fast path.
        let made_id = crate::request_id::MadeId::next();
        let made = RequestId::Made(made_id);
        let json: Value = serde_json::from_slice(&with_request_id(&document, &made)).unwrap();
        assert_eq!(json["request_id"], made_id.as_str());
        assert_eq!(json["status"], 400);
        assert_eq!(
            with_request_id(b"{}", &made),
            format!(r#"{{"request_id":"{}"}}"#, made_id.as_str()).as_bytes()
        );
        assert_eq!(with_request_id(b"[]", &made), b"[]");
        // The length declared before the document is written is its length.
        for id in [kept("abc-123"), kept(odd), kept(r#"\\""#), made] {
            for document in [&document[..], b"{}", b"[]"] {
                let written = with_request_id(document, &id);
                assert_eq!(with_request_id_len(document, &id), written.len(), "{id:?}");
            }
        }
    }

    #[test]
    fn quota_exceeded_body_matches_the_problem_it_abbreviates() {
        /// The 429 body's members, in the order clients have always seen.
        #[derive(Serialize)]
        struct QuotaExceeded<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            title: &'a str,
            status: u16,
            detail: &'a str,
            #[serde(rename = "violated-policies")]
            violated_policies: Vec<&'a str>,
            rule: &'a str,
            limit: u64,
            remaining: u64,
            retry_after_secs: Option<u64>,
        }
        /// detail, violated policies, rule, limit, remaining, retry-after.
        type Case = (
            &'static str,
            &'static [&'static str],
            &'static str,
            u64,
            u64,
            Option<u64>,
        );
        let cases: &[Case] = &[
            (TEXTS[0], &["per-ip"], "per-ip", 1, 0, Some(60)),
            ("d", &["a", "b", "c"], "a", u64::MAX, 7, None),
            (TEXTS[2], &["n\"a", "ü"], "n\"a", 0, 0, Some(1)),
            ("", &[], "", 5, 5, Some(u64::MAX)),
        ];
        for status in statuses() {
            for &(detail, violated, rule, limit, remaining, retry) in cases {
                let violated_json: Vec<String> =
                    violated.iter().map(|name| json_string(name)).collect();
                let ours = quota_exceeded_body(
                    &quota_exceeded_head(status, detail),
                    violated_json.iter().map(String::as_str),
                    &json_string(rule),
                    limit,
                    remaining,
                    retry,
                );
                let reference = serde_json::to_vec(&QuotaExceeded {
                    kind: QUOTA_EXCEEDED,
                    title: status.canonical_reason().unwrap_or("Too Many Requests"),
                    status: status.as_u16(),
                    detail,
                    violated_policies: violated.to_vec(),
                    rule,
                    limit,
                    remaining,
                    retry_after_secs: retry,
                })
                .unwrap();
                let built = Problem::quota_exceeded(status, detail)
                    .with("violated-policies", violated.to_vec())
                    .with("rule", rule)
                    .with("limit", limit)
                    .with("remaining", remaining)
                    .with("retry_after_secs", retry)
                    .to_json(Layout::Standard);
                let ours = String::from_utf8(ours).unwrap();
                assert_eq!(ours, String::from_utf8(reference).unwrap());
                assert_eq!(ours, String::from_utf8(built).unwrap());
            }
        }
    }
}
