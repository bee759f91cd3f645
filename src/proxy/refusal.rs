//! The answers sluice gives instead of forwarding, other than a 429: each
//! one's status, detail and problem type, as data. The request path writes them as problem
//! documents ([`super::respond::refusal`]); `POST /admin/explain` reports the
//! same status and detail without writing a response.

use std::borrow::Cow;

use http::StatusCode;

use super::deadline::CutOff;
use crate::key::graphql::Unread;
use crate::key::read_once::{Field, FieldAt};
use crate::key::unreadable_body::UnreadableBody;
use crate::policy::Rule;
use crate::problem;

/// Which synthetic answers exist, by blame: the client's fault is 4xx, the
/// upstream's 502/504.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// An HTTP/1.1 request without exactly one valid Host (RFC 9112 §3.2).
    BadHost(&'static str),
    /// The path could not be normalised.
    BadPath(crate::key::path::PathError),
    /// Request framing a proxy must not guess at (answered with
    /// `Connection: close`: the rest of the connection cannot be trusted).
    BadFraming(&'static str),
    /// The request target is longer than `server.max_uri_bytes`.
    UriTooLong,
    /// The declared body is larger than `server.max_body_bytes`.
    BodyTooLarge,
    /// The body was cut off while it streamed upstream, before the upstream
    /// answered; the request was made over this HTTP version.
    BodyCutOff(CutOff, http::Version),
    /// A rule with `missing = "reject"` lacked a key source.
    MissingKey,
    /// A `cost = "graphql"` rule cannot read the request's cost, and its
    /// `unreadable` is `"refuse"`.
    UnreadableQuery(Unread),
    /// A GraphQL query sent with a persisted query's hash that is not its
    /// SHA-256.
    PersistedQueryMismatch,
    /// The request carries a field the rule reads to decide more than once
    /// (which one: the rule's [`crate::key::read_once::FieldsRead`]).
    AmbiguousField(FieldAt),
    /// A rule reads the body, which sluice cannot read but a lenient server
    /// would.
    UnreadableBody(UnreadableBody),
    /// The client IP is on the deny list.
    Denied,
    /// The upstream could not be reached.
    UpstreamUnreachable,
    /// The upstream did not answer within `upstream_timeout`.
    UpstreamTimeout,
    /// The upstream failed mid-exchange.
    UpstreamFailed,
    /// The server's side of a WebSocket opened over HTTP/2 could not be
    /// opened as the server speaks (why, for the client): 502
    /// (docs/conversation.md, "WebSockets over HTTP/2").
    WebSocketUpstream(&'static str),
    /// An extended CONNECT for a protocol other than WebSocket: 501.
    UnknownProtocol,
    /// The store failed and `on_error = "deny"`.
    StoreUnavailable,
}

impl Refusal {
    /// The status it is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::BadHost(_) | Refusal::BadPath(_) | Refusal::BadFraming(_) => {
                StatusCode::BAD_REQUEST
            }
            Refusal::MissingKey
            | Refusal::AmbiguousField(_)
            | Refusal::UnreadableBody(_)
            | Refusal::UnreadableQuery(_)
            | Refusal::PersistedQueryMismatch => StatusCode::BAD_REQUEST,
            Refusal::UriTooLong => StatusCode::URI_TOO_LONG,
            Refusal::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Refusal::BodyCutOff(CutOff::Timeout, _) => StatusCode::REQUEST_TIMEOUT,
            Refusal::BodyCutOff(CutOff::TooLarge, _) => StatusCode::PAYLOAD_TOO_LARGE,
            Refusal::Denied => StatusCode::FORBIDDEN,
            Refusal::UpstreamUnreachable
            | Refusal::UpstreamFailed
            | Refusal::WebSocketUpstream(_) => StatusCode::BAD_GATEWAY,
            Refusal::UnknownProtocol => StatusCode::NOT_IMPLEMENTED,
            Refusal::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            Refusal::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The problem document's `detail`: why, in words a client can act on.
    /// `rule` is the rule that refused, when one did (a missing key).
    pub fn detail(&self, rule: Option<&Rule>) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            Refusal::BadHost(detail)
            | Refusal::BadFraming(detail)
            | Refusal::WebSocketUpstream(detail) => detail,
            Refusal::UnknownProtocol => {
                "this server opens only WebSockets with an extended CONNECT (:protocol websocket)"
            }
            Refusal::BadPath(error) => return Cow::Owned(error.to_string()),
            Refusal::UriTooLong => "the request target is longer than this server accepts",
            Refusal::BodyTooLarge => "the declared request body is larger than this server accepts",
            Refusal::BodyCutOff(CutOff::Timeout, _) => "the request body did not arrive in time",
            Refusal::BodyCutOff(CutOff::TooLarge, _) => {
                "the request body is larger than this server accepts"
            }
            Refusal::MissingKey => match rule {
                Some(rule) => {
                    let sources: Vec<String> = rule.key.iter().map(|s| s.to_string()).collect();
                    return Cow::Owned(format!(
                        "rule '{}' needs a value for every key source ({}) and this request lacks one",
                        rule.name,
                        sources.join(", ")
                    ));
                }
                None => "this request lacks a value a rule is keyed on",
            },
            Refusal::AmbiguousField(at) => match rule {
                Some(rule) => {
                    return Cow::Owned(format!(
                        "this request carries {} more than once and rule '{}' reads it to \
                         decide: which value counts is ambiguous; send it once",
                        rule.reads.field(*at),
                        rule.name
                    ))
                }
                None => "this request carries a field a rule reads more than once",
            },
            Refusal::UnreadableBody(why) => {
                let name = rule.map_or("", |rule| &*rule.name);
                return Cow::Owned(format!(
                    "rule '{name}' reads this request's body, and sluice cannot read it: {}; \
                     send one JSON value in UTF-8, uncompressed or in gzip, deflate, br or zstd",
                    why.reason()
                ));
            }
            Refusal::UnreadableQuery(why) => {
                let name = rule.map_or("", |rule| &*rule.name);
                return Cow::Owned(format!(
                    "rule '{name}' charges each GraphQL query its cost, and this request's cost \
                     cannot be read: {}",
                    why.reason()
                ));
            }
            Refusal::PersistedQueryMismatch => {
                "the persisted query's sha256Hash is not the SHA-256 of the query sent with it"
            }
            Refusal::Denied => "requests from this address are not accepted",
            Refusal::UpstreamUnreachable => {
                "the service behind this proxy could not be reached; try again later"
            }
            Refusal::UpstreamTimeout => "the service behind this proxy did not answer in time",
            Refusal::UpstreamFailed => "the service behind this proxy failed to answer",
            Refusal::StoreUnavailable => "rate limits cannot be checked right now; try again later",
        })
    }

    /// The problem document's `type`, when it is not `about:blank`.
    pub fn problem_type(&self) -> Option<&'static str> {
        match self {
            Refusal::AmbiguousField(_) => Some(problem::AMBIGUOUS_FIELD),
            Refusal::UnreadableBody(_) => Some(problem::UNREADABLE_BODY),
            Refusal::UnreadableQuery(_) => Some(problem::UNREADABLE_QUERY),
            Refusal::PersistedQueryMismatch => Some(problem::PERSISTED_QUERY_MISMATCH),
            _ => None,
        }
    }

    /// The field the refusal is about, named by `rule` (the one that
    /// refused): the document's `field` and `in` members.
    pub fn field<'r>(&self, rule: Option<&'r Rule>) -> Option<Field<'r>> {
        match (self, rule) {
            (Refusal::AmbiguousField(at), Some(rule)) => Some(rule.reads.field(*at)),
            _ => None,
        }
    }

    /// Whether the HTTP/1 connection must close after the answer: framing
    /// that cannot be trusted, or a body that is not going to be read to its
    /// end, leaves no request boundary to read the next one from.
    pub fn closes_connection(&self) -> bool {
        match self {
            Refusal::BadFraming(_) => true,
            Refusal::BodyCutOff(_, version) => *version < http::Version::HTTP_2,
            _ => false,
        }
    }
}
