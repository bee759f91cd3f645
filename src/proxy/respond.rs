//! Every response the proxy writes itself, and the rate-limit headers it
//! adds to forwarded ones. Each refusal's status and detail is decided here,
//! in one place; [`crate::problem`] writes them as problem documents
//! (RFC 9457).

pub mod grpc;
pub mod jsonrpc;
mod last_refusal;
mod own_fields;

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};
use hyper::body::{Body, Frame, SizeHint};
use smallvec::SmallVec;

use super::pool::{BoxError, PooledBody};
use super::refusal::Refusal;
use super::upgrade::{Metering, Upgraded};
use crate::access_log;
use crate::clock::Nanos;
use crate::config::HeaderStyle;
use crate::decider::Applicable;
pub use crate::decider::Verdict;
use crate::limiter::Decision;
use crate::metrics::Counted;
use crate::policy::{Limit, Policy, Rule, Sunset};
use crate::problem::{self, Layout, Problem};
use crate::request_id::RequestId;
use crate::store::PERMIT_RETRY;
use crate::trace::tracer::Span;
use last_refusal::RefusalKey;
pub use own_fields::{OwnFields, OwnName};

/// The body of every response the proxy sends (the upstream's, streamed, or
/// one sluice wrote), and the fields sluice adds to the response's head
/// ([`OwnFields`]). They travel with the body because the other places cost
/// more: a response's extensions allocate, and its header map hashes. So
/// does the request's access log line, when there is one: the body knows
/// when the response ends and how much of it was sent.
#[derive(Debug)]
pub struct ProxyBody {
    body: Inner,
    fields: OwnFields,
    /// Written when the body is dropped (sent, or the client gone);
    /// [`access_log::Line::none`] when the log is off.
    access: access_log::Line,
    /// The request's span, ended when the body is sent or dropped;
    /// [`Span::none`] unless the request was sampled.
    span: Span,
    /// The protocol an answer sluice writes here is given in.
    speaks: Speaking,
}

/// The protocol a refusal is rendered in ([`Said`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Speaking {
    /// A problem document (RFC 9457) with sluice's fields, over HTTP/1 or
    /// HTTP/2.
    Http,
    /// A trailers-only gRPC answer (`respond/grpc.rs`).
    Grpc,
}

/// A refusal as the typed parts every protocol's answer is rendered from:
/// a problem document over HTTP, a gRPC status over gRPC (and, next, a
/// JSON-RPC error), each with the same fields ([`OwnFields`]).
#[derive(Debug, Clone, Copy)]
pub struct Said<'d> {
    /// The HTTP status; gRPC's code is mapped from it.
    pub status: StatusCode,
    /// Why, in words a client can act on: the document's `detail`,
    /// gRPC's `grpc-message`.
    pub detail: &'d str,
    /// When to try again, if ever: `Retry-After`, gRPC's pushback.
    pub retry_after_secs: Option<u64>,
}

#[derive(Debug)]
enum Inner {
    /// The upstream's body, streamed.
    Upstream(PooledBody),
    /// A body sluice wrote, until it is sent.
    Written(Bytes),
    /// A problem document sluice wrote, until it is sent, and the id its
    /// `request_id` member will carry once [`ProxyBody::identify`] named
    /// it. The member is added as the document is written out
    /// ([`ProxyBody::write_whole`]), so that a refusal sent again
    /// (`respond/last_refusal.rs`) is not copied into a new document for
    /// each request.
    Problem {
        document: Bytes,
        id: Option<RequestId>,
    },
    /// No body, or one already sent (nothing to drop).
    Empty,
    /// A `101`'s: the tunnel it opened, ready for the client's connection
    /// ([`ProxyBody::open_tunnel`]).
    Tunnel(Box<Upgraded>),
    /// A gRPC answer sluice wrote (trailers only: no body), and the HTTP
    /// status it stands for, which the access log and metrics count.
    Grpc(StatusCode),
    /// The server's answer to a call a message rule applies to, which
    /// sluice may end (`respond/grpc.rs`).
    Call(Box<grpc::CallAnswer>),
}

impl ProxyBody {
    /// The upstream's body, streamed.
    pub fn upstream(body: PooledBody) -> ProxyBody {
        ProxyBody {
            body: Inner::Upstream(body),
            fields: OwnFields::default(),
            access: access_log::Line::none(),
            span: Span::none(),
            speaks: Speaking::Http,
        }
    }

    /// No body: a [`vacant`] answer's.
    #[inline]
    fn empty() -> ProxyBody {
        ProxyBody {
            body: Inner::Empty,
            fields: OwnFields::default(),
            access: access_log::Line::none(),
            span: Span::none(),
            speaks: Speaking::Http,
        }
    }

    /// A body sluice wrote.
    pub fn written(body: Bytes) -> ProxyBody {
        ProxyBody {
            body: if body.is_empty() {
                Inner::Empty
            } else {
                Inner::Written(body)
            },
            fields: OwnFields::default(),
            access: access_log::Line::none(),
            span: Span::none(),
            speaks: Speaking::Http,
        }
    }

    /// The fields sluice adds to the head.
    pub fn own_fields_mut(&mut self) -> &mut OwnFields {
        &mut self.fields
    }

    /// Takes the fields sluice adds to the head, for the server to write.
    pub fn take_own_fields(&mut self) -> OwnFields {
        std::mem::take(&mut self.fields)
    }

    /// Marks the answer with the request's id: `X-Request-Id` on the head
    /// and, when sluice wrote a problem document, its `request_id` member.
    pub fn identify(&mut self, id: &RequestId) {
        self.fields.push_request_id(id);
        if let Inner::Problem { id: member, .. } = &mut self.body {
            *member = Some(id.clone());
        }
    }

    /// Makes a refusal written into this (vacant) answer a gRPC one: the
    /// request is a gRPC call.
    pub fn speak_grpc(&mut self) {
        self.speaks = Speaking::Grpc;
    }

    /// The status the answer `status` stands for: a gRPC answer sluice
    /// wrote is a 200 that stands for the refusal's status.
    pub fn stands_for(&self, status: StatusCode) -> StatusCode {
        match self.body {
            Inner::Grpc(refused) => refused,
            _ => status,
        }
    }

    /// Writes a body sluice wrote into `out` whole, as sluice's own HTTP/1
    /// server sends it (behind the head, in one write); false, writing
    /// nothing, for the upstream's body, which is streamed.
    pub fn write_whole(&mut self, out: &mut Vec<u8>) -> bool {
        // Asked first, by reference: moving the upstream's body out and
        // back would copy it twice on every forwarded response.
        if let Inner::Upstream(_) | Inner::Tunnel(_) | Inner::Call(_) = self.body {
            return false;
        }
        let before = out.len();
        match std::mem::replace(&mut self.body, Inner::Empty) {
            Inner::Written(bytes) => out.extend_from_slice(&bytes),
            Inner::Problem { document, id } => match &id {
                Some(id) => problem::push_with_request_id(out, &document, id),
                None => out.extend_from_slice(&document),
            },
            Inner::Empty
            | Inner::Upstream(_)
            | Inner::Tunnel(_)
            | Inner::Grpc(_)
            | Inner::Call(_) => {}
        }
        if let Some(line) = self.access.parts() {
            line.bytes_out += (out.len() - before) as u64;
        }
        true
    }

    /// The upstream's side of a WebSocket tunnel its `101` opened, with
    /// the request's settlement (see `proxy/upgrade.rs`), and what
    /// [`ProxyBody::open_tunnel`] gave it.
    pub fn take_tunnel(&mut self) -> Option<Upgraded> {
        match std::mem::replace(&mut self.body, Inner::Empty) {
            Inner::Tunnel(upgraded) => Some(*upgraded),
            Inner::Upstream(mut body) => {
                let tunnel = body.take_tunnel();
                self.body = Inner::Upstream(body);
                let (upstream, settlement) = tunnel?;
                Some(Upgraded {
                    upstream,
                    settlement,
                    open: None,
                    messages: None,
                })
            }
            other => {
                self.body = other;
                None
            }
        }
    }

    /// Makes the tunnel of a `101` (the upstream's switched connection)
    /// ready for the client's connection, counted by `open` and held to
    /// `messages`. Nothing for any other body.
    pub fn open_tunnel(&mut self, open: Counted, messages: Option<Metering>) {
        if let Some(mut upgraded) = self.take_tunnel() {
            upgraded.open = Some(open);
            upgraded.messages = messages;
            self.body = Inner::Tunnel(Box::new(upgraded));
        }
    }

    /// Makes the upstream's answer to a call a message rule applies to
    /// end as `end` says, should sluice end the call first.
    pub fn end_call_with(&mut self, end: std::sync::Arc<grpc::CallEnd>) {
        self.body = match std::mem::replace(&mut self.body, Inner::Empty) {
            Inner::Upstream(body) => Inner::Call(Box::new(grpc::CallAnswer::new(body, end))),
            other => other,
        };
    }

    /// Carries the request's access log `line` until the body is sent or
    /// dropped, counting the bytes sent.
    pub fn carry_access(&mut self, line: access_log::Line) {
        self.access = line;
    }

    /// Carries the request's span until the body is sent or dropped.
    #[inline]
    pub fn carry_span(&mut self, span: Span) {
        // The body carried none (a body gets one span, once): nothing to
        // drop, and no drop to call on every request.
        let none = std::mem::replace(&mut self.span, span);
        debug_assert!(none.is_none());
        std::mem::forget(none);
    }
}

impl Inner {
    /// The body sluice wrote, taken to be sent as one frame (`None`: none,
    /// or sent; the upstream's stays).
    fn take_written(&mut self) -> Option<Bytes> {
        match std::mem::replace(self, Inner::Empty) {
            Inner::Written(bytes) => Some(bytes),
            Inner::Problem { document, id } => Some(match &id {
                Some(id) => Bytes::from(problem::with_request_id(&document, id)),
                None => document,
            }),
            upstream @ (Inner::Upstream(_) | Inner::Tunnel(_) | Inner::Call(_)) => {
                *self = upstream;
                None
            }
            Inner::Empty | Inner::Grpc(_) => None,
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    #[inline]
    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        use std::task::Poll;
        let this = self.get_mut();
        let Some(line) = this.access.parts() else {
            // No access log: the frame goes as it comes.
            return match &mut this.body {
                Inner::Upstream(body) => std::pin::Pin::new(body).poll_frame(cx),
                Inner::Call(call) => call.poll_frame(cx),
                written => Poll::Ready(written.take_written().map(|bytes| Ok(Frame::data(bytes)))),
            };
        };
        let polled = match &mut this.body {
            Inner::Upstream(body) => std::pin::Pin::new(body).poll_frame(cx),
            Inner::Call(call) => call.poll_frame(cx),
            written => Poll::Ready(written.take_written().map(|bytes| Ok(Frame::data(bytes)))),
        };
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                line.bytes_out += data.len() as u64;
            }
        }
        polled
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        match &self.body {
            Inner::Upstream(body) => body.is_end_stream(),
            Inner::Call(call) => call.is_end_stream(),
            Inner::Written(bytes) => bytes.is_empty(),
            Inner::Problem { .. } => false,
            Inner::Empty | Inner::Tunnel(_) | Inner::Grpc(_) => true,
        }
    }

    #[inline]
    fn size_hint(&self) -> SizeHint {
        match &self.body {
            Inner::Upstream(body) => body.size_hint(),
            Inner::Written(bytes) => SizeHint::with_exact(bytes.len() as u64),
            Inner::Problem { document, id } => SizeHint::with_exact(match id {
                Some(id) => problem::with_request_id_len(document, id),
                None => document.len(),
            } as u64),
            Inner::Empty | Inner::Tunnel(_) | Inner::Grpc(_) => SizeHint::with_exact(0),
            Inner::Call(_) => SizeHint::default(),
        }
    }
}

const X_SLUICE_WOULD_LIMIT: HeaderName = HeaderName::from_static("x-sluice-would-limit");
const X_SLUICE_DELAY_MS: HeaderName = HeaderName::from_static("x-sluice-delay-ms");
const DEPRECATION: HeaderName = HeaderName::from_static("deprecation");
const SUNSET: HeaderName = HeaderName::from_static("sunset");

/// The 502 of a pool with no server to send to: its names never resolved.
pub fn no_server(response: &mut Response<ProxyBody>, pool: &str) {
    let detail = format!(
        "the service behind this proxy could not be reached: no server of the pool '{pool}' \
         is known yet; try again later"
    );
    refuse(
        response,
        Said::new(StatusCode::BAD_GATEWAY, &detail),
        |said| Problem::new(said.status, said.detail).to_json(Layout::Standard),
    );
}

/// Writes a refusal whose only fields are its `Content-Type` and
/// `Retry-After`, and whose document `document` writes, into the
/// [`vacant`] `response`.
fn refuse(
    response: &mut Response<ProxyBody>,
    said: Said<'_>,
    document: impl FnOnce(&Said<'_>) -> Vec<u8>,
) {
    let mut fields = OwnFields::default();
    fields.push(OwnName::ContentType, &problem::CONTENT_TYPE);
    if let Some(secs) = said.retry_after_secs {
        fields.push_number(OwnName::RetryAfter, secs);
    }
    refuse_into(response, said, fields, |said| Bytes::from(document(said)));
}

impl<'d> Said<'d> {
    /// A refusal with `status` and `detail`, and no time to retry at.
    pub fn new(status: StatusCode, detail: &'d str) -> Said<'d> {
        Said {
            status,
            detail,
            retry_after_secs: None,
        }
    }
}

/// A response slot with nothing written in it yet: 200, no fields, an
/// empty body. A connection keeps one, and each exchange writes its answer
/// there ([`vacate`] empties it after): passed up by value through the
/// proxy's phases and the server, the 232-byte response was copied about a
/// dozen times per request.
pub fn vacant() -> Response<ProxyBody> {
    Response::new(ProxyBody::empty())
}

/// Makes a written `response` [`vacant`] again. Its body is dropped now,
/// which releases what it holds (an upstream connection, a settlement).
#[inline(always)]
pub fn vacate(response: &mut Response<ProxyBody>) {
    *response.status_mut() = StatusCode::OK;
    *response.version_mut() = http::Version::HTTP_11;
    // Almost always empty by now (sluice's own server gave the map back to
    // `spare_map`, hyper took it): clearing an empty map still walks it.
    if !response.headers().is_empty() {
        response.headers_mut().clear();
    }
    response.extensions_mut().clear();
    *response.body_mut() = ProxyBody::empty();
}

/// Writes the refusal `said`, with `fields`, into the [`vacant`]
/// `response`, in the protocol the request speaks: the one place every
/// refusal is rendered. Over HTTP it is the problem document `document`
/// writes, with `fields` as sluice's own (the map stays empty); over gRPC
/// the trailers-only answer `respond/grpc.rs` renders, and no document.
/// Always inlined: with two copies of the 429's builder (`limited`,
/// `beyond_capacity`) the compiler would call it and move the fields by
/// value, which a 429 pays for (docs/benchmarks-history.md, "Limits nobody
/// can dodge (issue 70)").
#[inline(always)]
fn refuse_into(
    response: &mut Response<ProxyBody>,
    said: Said<'_>,
    fields: OwnFields,
    document: impl FnOnce(&Said<'_>) -> Bytes,
) {
    if response.body().speaks == Speaking::Grpc {
        return grpc::answer(response, &said, fields);
    }
    *response.status_mut() = said.status;
    let body = document(&said);
    let written = response.body_mut();
    written.body = Inner::Problem {
        document: body,
        id: None,
    };
    std::mem::replace(&mut written.fields, fields).discard();
}

impl ProxyBody {
    /// The body of a gRPC answer sluice wrote for a refusal with `status`.
    fn grpc_answer(&mut self, status: StatusCode) {
        self.body = Inner::Grpc(status);
        self.fields = OwnFields::default();
    }
}

/// The answer to a request some rule rejected, written into the [`vacant`]
/// `response`.
#[inline]
pub fn limited(
    response: &mut Response<ProxyBody>,
    policy: &Policy,
    verdicts: &[Verdict<'_>],
    decided_at: Duration,
) {
    refuse_limited(response, policy, verdicts, decided_at, None);
}

/// [`limited`], for a request whose own cost (its GraphQL query's, its
/// reservation) is `cost`, more than the first refusing rule can ever hold:
/// its detail says so (waiting would not help, and it has no
/// `Retry-After`). Rare: out of the 429's line.
#[cold]
#[inline(never)]
pub fn beyond_capacity(
    response: &mut Response<ProxyBody>,
    policy: &Policy,
    verdicts: &[Verdict<'_>],
    decided_at: Duration,
    cost: u64,
) {
    refuse_limited(response, policy, verdicts, decided_at, Some(cost));
}

/// [`limited`] and [`beyond_capacity`]: `beyond` is the query's cost in the
/// latter, a constant `None` in the former's copy.
#[inline(always)]
fn refuse_limited(
    response: &mut Response<ProxyBody>,
    policy: &Policy,
    verdicts: &[Verdict<'_>],
    decided_at: Duration,
    beyond: Option<u64>,
) {
    let rejecting = || verdicts.iter().filter(|v| !v.decision.is_allowed());
    let first_rule = rejecting()
        .next()
        .expect("limited() is only called when a rule rejected")
        .rule;
    // The body names the first rejecting rule and its most constraining
    // rejecting limit (smallest remaining; ties: the earliest).
    let first = rejecting()
        .filter(|v| std::ptr::eq(v.rule, first_rule))
        .min_by_key(|v| v.decision.state().remaining)
        .expect("the first rejecting rule has a rejecting limit");
    if let Some(controller) = first.limit.adaptive() {
        return overloaded(response, first.rule, controller.limit());
    }
    let retry_after_secs = retry_after(verdicts).map(|nanos| ceil_secs(nanos).max(1));

    let status = policy.response.status;
    let style = policy.response.headers;
    // A refusal by a single limit is what a caller over its limit gets
    // again and again: send the same answer again while it applies.
    let key = match verdicts {
        [only] if beyond.is_none() => {
            let state = only.decision.state();
            Some(RefusalKey {
                limit: only.limit.serial,
                remaining: state.remaining,
                retry_after_secs,
                reset_at: reset_at(decided_at, state.reset_after),
                reset_in: ceil_secs(state.reset_after),
            })
        }
        _ => None,
    };
    let costly;
    let (head, detail) = match beyond {
        None => (first.limit.problem_head.as_str(), &*first.limit.detail),
        Some(cost) => {
            costly = beyond_capacity_head(first, cost, status);
            (costly.0.as_str(), costly.1.as_str())
        }
    };
    let said = Said {
        status,
        detail,
        retry_after_secs,
    };
    if let Some((fields, body)) = key.as_ref().and_then(last_refusal::replay) {
        return refuse_into(response, said, fields, |_| body);
    }
    let body = Bytes::from(problem::quota_exceeded_body(
        head,
        rejecting().map(|v| v.limit.name_json.as_str()),
        &first.limit.rule_json,
        first.limit.limiter.capacity(),
        first.decision.state().remaining,
        retry_after_secs,
    ));
    let mut fields = OwnFields::default();
    fields.push(OwnName::ContentType, &problem::CONTENT_TYPE);
    if let Some(secs) = retry_after_secs {
        fields.push_number(OwnName::RetryAfter, secs);
    }
    add_rate_limit_headers(&mut fields, style, verdicts, decided_at);
    if let Some(key) = key {
        last_refusal::remember(key, &mut fields, &body);
    }
    refuse_into(response, said, fields, |_| body)
}

/// The 429 body's head and detail for a request whose own cost (a query's,
/// a reservation) is `cost`, more than `first`'s limit can ever hold.
fn beyond_capacity_head(first: &Verdict<'_>, cost: u64, status: StatusCode) -> (String, String) {
    let (rule, capacity) = (&first.rule.name, first.limit.limiter.capacity());
    let detail = if first.rule.reserve.is_some() {
        format!(
            "this request reserves {cost} units and rule '{rule}' holds at most {capacity}, so it \
             can never be admitted: ask for less (a smaller max_tokens)"
        )
    } else {
        format!(
            "this query costs {cost} units and rule '{rule}' holds at most {capacity}, so it can \
             never be admitted: ask for fewer items (first/last)"
        )
    };
    (problem::quota_exceeded_head(status, &detail), detail)
}

/// The answer to a request an `adaptive` rule shed: 503, the overloaded
/// problem naming the rule and the limit in force, and `Retry-After: 1`
/// (permits free as requests end). No rate-limit fields: the limit is the
/// upstream's capacity, not the caller's quota.
fn overloaded(response: &mut Response<ProxyBody>, rule: &Rule, limit: u64) {
    let detail = format!(
        "the upstream is saturated: rule '{}' admits {limit} requests in flight now; try again \
         in a second",
        rule.name
    );
    let said = Said {
        status: StatusCode::SERVICE_UNAVAILABLE,
        detail: &detail,
        retry_after_secs: Some(ceil_secs(PERMIT_RETRY)),
    };
    refuse(response, said, |said| {
        Problem::overloaded(said.detail)
            .with("rule", &*rule.name)
            .with("limit", limit)
            .with("retry_after_secs", said.retry_after_secs)
            .to_json(Layout::Standard)
    });
}

/// How long until every limit that refused would admit; `None` when one
/// never will (a cost above its capacity, a COUNT of 0).
#[inline]
pub fn retry_after(verdicts: &[Verdict<'_>]) -> Option<Nanos> {
    verdicts
        .iter()
        .try_fold(0, |latest: Nanos, v| match v.decision {
            Decision::Deny { retry_after, .. } => retry_after.map(|r| latest.max(r)),
            Decision::Allow(_) | Decision::Hold { .. } => Some(latest),
        })
}

/// `Deprecation`, `Sunset` and `Link: <…>; rel="sunset"` for a response on
/// a rule being retired (RFC 9745, RFC 8594).
#[inline]
pub fn add_sunset_headers(headers: &mut HeaderMap, retiring: Option<&Sunset>) {
    let Some(sunset) = retiring else { return };
    headers.insert(DEPRECATION, sunset.deprecation().clone());
    headers.insert(SUNSET, sunset.sunset().clone());
    if let Some(link) = sunset.link() {
        headers.append(http::header::LINK, link.clone());
    }
}

/// The answer on a retired route (its sunset ended with a COUNT of 0): 410
/// with a problem document that says where to go.
pub fn gone(response: &mut Response<ProxyBody>, rule: &Rule, sunset: &Sunset) {
    let ended = sunset.sunset().to_str().unwrap_or("its sunset date");
    let mut detail = format!(
        "this API was retired on {ended} (rule '{}') and no longer answers",
        rule.name
    );
    let link = sunset
        .link()
        .and_then(|l| l.to_str().ok())
        .and_then(|l| l.strip_prefix('<'))
        .and_then(|l| l.split_once('>'))
        .map(|(target, _)| target.to_owned());
    if let Some(target) = &link {
        detail.push_str(&format!("; see {target}"));
    }
    refuse(response, Said::new(StatusCode::GONE, &detail), |said| {
        Problem::new(said.status, said.detail)
            .with("rule", &*rule.name)
            .with("link", link)
            .to_json(Layout::ByName)
    });
    add_sunset_headers(response.headers_mut(), Some(sunset));
}

/// The answer to a request whose key `rule` has banned for `left` more:
/// the quota-exceeded problem type, `Retry-After` the ban's remaining
/// seconds. The rule's buckets were not asked, so no rate-limit fields.
pub fn banned(
    response: &mut Response<ProxyBody>,
    rule: &Rule,
    limits: &[Limit],
    left: Nanos,
    status: StatusCode,
) {
    let secs = ceil_secs(left).max(1);
    let detail = match rule.ban {
        Some(ban) => format!(
            "this caller was limited by rule '{}' {} times within {} and is banned for {}; \
             {secs} s remain",
            rule.name,
            ban.after,
            crate::config::format_period(Duration::from_nanos(ban.within)),
            crate::config::format_period(Duration::from_nanos(ban.duration)),
        ),
        None => format!(
            "this caller is banned by rule '{}' by an operator; {secs} s remain",
            rule.name
        ),
    };
    let said = Said {
        status,
        detail: &detail,
        retry_after_secs: Some(secs),
    };
    refuse(response, said, |said| {
        Problem::quota_exceeded(said.status, said.detail)
            .with("violated-policies", vec![&*rule.name])
            .with("rule", &*rule.name)
            // Like every 429: the limit the caller is held to (its first,
            // in file order; the caller's tier or override if any), none
            // left.
            .with(
                "limit",
                limits.first().map_or(0, |limit| limit.limiter.capacity()),
            )
            .with("remaining", 0)
            .with("banned", true)
            .with("retry_after_secs", secs)
            .to_json(Layout::ByName)
    });
}

/// Adds `X-RateLimit-*` (the most constraining limit) and `RateLimit-Policy`
/// / `RateLimit` (one member per limit) as `style` asks. `decided_at` is the
/// Unix time the decisions were made at (their `now`), so that a reset at a
/// window's end prints as exactly that second.
pub fn add_rate_limit_headers(
    fields: &mut OwnFields,
    style: HeaderStyle,
    verdicts: &[Verdict<'_>],
    decided_at: Duration,
) {
    if verdicts.is_empty() || style == HeaderStyle::None {
        return;
    }
    if verdicts.iter().any(|v| v.limit.is_adaptive()) {
        // The upstream's capacity is no caller's quota: not reported.
        let quotas: SmallVec<[Verdict<'_>; 4]> = verdicts
            .iter()
            .filter(|v| !v.limit.is_adaptive())
            .copied()
            .collect();
        return add_rate_limit_headers(fields, style, &quotas, decided_at);
    }
    match verdicts {
        [only] if !only.limit.lines.ietf.is_empty() => {
            add_one_limit_lines(fields, style, only, decided_at)
        }
        _ => add_each_limit_fields(fields, style, verdicts, decided_at),
    }
}

/// [`add_rate_limit_headers`] for any number of limits, field by field.
fn add_each_limit_fields(
    fields: &mut OwnFields,
    style: HeaderStyle,
    verdicts: &[Verdict<'_>],
    decided_at: Duration,
) {
    if matches!(style, HeaderStyle::Legacy | HeaderStyle::Both) {
        // Smallest remaining; ties go to the earliest rule in the file.
        let tightest = verdicts
            .iter()
            .min_by_key(|v| v.decision.state().remaining)
            .expect("verdicts is not empty");
        let state = tightest.decision.state();
        fields.push(OwnName::XRateLimitLimit, &tightest.limit.limit_header);
        fields.push_number(OwnName::XRateLimitRemaining, state.remaining);
        // A concurrency limit has no reset: it frees when a request ends.
        if !tightest.limit.is_concurrency() {
            let reset_at = reset_at(decided_at, state.reset_after);
            fields.push_number(OwnName::XRateLimitReset, reset_at);
        }
    }
    if matches!(style, HeaderStyle::Ietf | HeaderStyle::Both) {
        match verdicts {
            [only] if only.limit.calendar().is_none() => {
                fields.push(OwnName::RateLimitPolicy, &only.limit.policy_header)
            }
            _ => fields.push_with(OwnName::RateLimitPolicy, |value| {
                for (index, v) in verdicts.iter().enumerate() {
                    if index > 0 {
                        value.extend_from_slice(b", ");
                    }
                    push_policy_item(value, v.limit, decided_at);
                }
            }),
        }
        // `"name";r=REMAINING;t=SECONDS`, one member per limit.
        fields.push_with(OwnName::RateLimit, |value| {
            for (index, v) in verdicts.iter().enumerate() {
                let state = v.decision.state();
                if index > 0 {
                    value.extend_from_slice(b", ");
                }
                value.push(b'"');
                value.extend_from_slice(v.limit.name.as_bytes());
                value.extend_from_slice(b"\";r=");
                push_u64(value, state.remaining);
                if !v.limit.is_concurrency() {
                    value.extend_from_slice(b";t=");
                    push_u64(value, ceil_secs(state.reset_after));
                }
            }
        });
    }
}

/// [`add_rate_limit_headers`] for the common response, on which one limit
/// applies: the same lines, from the limit's prebuilt parts
/// ([`crate::policy::FieldLines`]) and the request's numbers.
fn add_one_limit_lines(
    fields: &mut OwnFields,
    style: HeaderStyle,
    verdict: &Verdict<'_>,
    decided_at: Duration,
) {
    let state = verdict.decision.state();
    let prebuilt = &verdict.limit.lines;
    // A concurrency limit has no reset: it frees when a request ends.
    let resets = !verdict.limit.is_concurrency();
    let mut digits = itoa::Buffer::new();
    let remaining = digits.format(state.remaining).as_bytes();
    if matches!(style, HeaderStyle::Legacy | HeaderStyle::Both) {
        fields.push_lines(|lines| {
            let start = lines.len();
            lines.out().extend_from_slice(&prebuilt.legacy);
            lines.ended(OwnName::XRateLimitLimit, start + prebuilt.legacy_first);
            let out = lines.out();
            out.extend_from_slice(remaining);
            let remaining_end = out.len() + 2;
            if resets {
                out.extend_from_slice(b"\r\nx-ratelimit-reset: ");
                push_u64(out, reset_at(decided_at, state.reset_after));
                out.extend_from_slice(b"\r\n");
                let end = out.len();
                lines.ended(OwnName::XRateLimitRemaining, remaining_end);
                lines.ended(OwnName::XRateLimitReset, end);
            } else {
                out.extend_from_slice(b"\r\n");
                lines.ended(OwnName::XRateLimitRemaining, remaining_end);
            }
        });
    }
    if matches!(style, HeaderStyle::Ietf | HeaderStyle::Both) {
        fields.push_lines(|lines| {
            let start = lines.len();
            let out = lines.out();
            out.extend_from_slice(&prebuilt.ietf);
            out.extend_from_slice(remaining);
            if resets {
                out.extend_from_slice(b";t=");
                push_u64(out, ceil_secs(state.reset_after));
            }
            out.extend_from_slice(b"\r\n");
            let end = out.len();
            lines.ended(OwnName::RateLimitPolicy, start + prebuilt.ietf_first);
            lines.ended(OwnName::RateLimit, end);
        });
    }
}

/// `limit`'s `RateLimit-Policy` member. A calendar window's `w` is the
/// length of the window `decided_at` falls in (a month of 30 days and one
/// hour across a DST change; docs/charging.md, "Calendar quotas"), not a
/// fixed period.
fn push_policy_item(value: &mut Vec<u8>, limit: &Limit, decided_at: Duration) {
    let Some(calendar) = limit.calendar() else {
        value.extend_from_slice(limit.policy_item.as_bytes());
        return;
    };
    let now = u64::try_from(decided_at.as_nanos()).unwrap_or(u64::MAX);
    value.push(b'"');
    value.extend_from_slice(limit.name.as_bytes());
    value.extend_from_slice(b"\";q=");
    push_u64(value, limit.count);
    value.extend_from_slice(b";w=");
    push_u64(value, ceil_secs(calendar.frame(now).length()).max(1));
}

/// The Unix second a limit whose bucket refills in `reset_after` resets at,
/// counted from `decided_at` (Unix time), so that a reset at a window's end
/// prints as exactly that second.
fn reset_at(decided_at: Duration, reset_after: Nanos) -> u64 {
    decided_at.as_secs() + ceil_secs(reset_after + subsec_nanos(decided_at))
}

/// Marks a forwarded response that shadow rules would have limited:
/// `X-Sluice-Would-Limit: <rule>` (several rules joined by `, `).
pub fn add_would_limit_header(headers: &mut HeaderMap, rules: &[&str]) {
    // Rule names are validated tokens, so the value is always valid.
    if let Ok(value) = HeaderValue::from_str(&join(rules.iter())) {
        headers.insert(X_SLUICE_WOULD_LIMIT, value);
    }
}

/// Marks a forwarded response that was held in delay mode:
/// `X-Sluice-Delay-Ms: <milliseconds held>` (rounded to the nearest).
pub fn add_delay_header(headers: &mut HeaderMap, held: Nanos) {
    headers.insert(
        X_SLUICE_DELAY_MS,
        number_value((held + 500_000) / 1_000_000),
    );
}

/// Header values for the numbers most answers carry (remaining units,
/// Retry-After seconds), built once: cloning one is a reference-count
/// increment instead of an allocation.
const CACHED_NUMBERS: u64 = 1024;
static SMALL_NUMBERS: std::sync::OnceLock<Vec<HeaderValue>> = std::sync::OnceLock::new();

/// `n` in decimal as a header value (what `HeaderValue::from(u64)` gives):
/// from the cache below 1024, otherwise formatted on the stack.
fn number_value(n: u64) -> HeaderValue {
    if n < CACHED_NUMBERS {
        let cached = SMALL_NUMBERS.get_or_init(|| (0..CACHED_NUMBERS).map(format_value).collect());
        return cached[n as usize].clone();
    }
    format_value(n)
}

fn format_value(n: u64) -> HeaderValue {
    let mut digits = itoa::Buffer::new();
    HeaderValue::from_maybe_shared(Bytes::copy_from_slice(digits.format(n).as_bytes()))
        .expect("decimal digits are a valid header value")
}

#[inline]
fn push_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn join<S: AsRef<str>>(items: impl Iterator<Item = S>) -> String {
    let mut out = String::with_capacity(64);
    for (index, item) in items.enumerate() {
        if index > 0 {
            out.push_str(", ");
        }
        out.push_str(item.as_ref());
    }
    out
}

/// Apollo Server's answer to a persisted query's hash it does not know
/// (`200`, a GraphQL error `PERSISTED_QUERY_NOT_FOUND`), which makes an
/// Apollo client send the query with its hash: sluice gives it in the
/// upstream's place, with no rate-limit fields (nothing was decided).
pub fn persisted_query_not_found(response: &mut Response<ProxyBody>) {
    const BODY: &[u8] = br#"{"errors":[{"message":"PersistedQueryNotFound","extensions":{"code":"PERSISTED_QUERY_NOT_FOUND"}}]}"#;
    response.body_mut().body = Inner::Written(Bytes::from_static(BODY));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
}

/// Whole seconds, rounded up.
#[inline]
pub fn ceil_secs(nanos: Nanos) -> u64 {
    nanos.div_ceil(1_000_000_000)
}

fn subsec_nanos(time: Duration) -> Nanos {
    u64::from(time.subsec_nanos())
}

/// The problem document for a refusal: its status, detail and type
/// ([`Refusal::status`], [`Refusal::detail`], [`Refusal::problem_type`]),
/// the field it is about as `field` and `in`, and `Connection: close` when
/// the connection cannot carry another request.
pub fn refusal(response: &mut Response<ProxyBody>, refusal: Refusal, rule: Option<&Rule>) {
    let detail = refusal.detail(rule);
    refuse(response, Said::new(refusal.status(), &detail), |said| {
        let mut document = Problem::new(said.status, said.detail);
        if let Some(kind) = refusal.problem_type() {
            document = document.typed(kind);
        }
        if let Some(field) = refusal.field(rule) {
            document = document
                .with("field", field.name())
                .with("in", field.location());
        }
        document.to_json(Layout::Standard)
    });
    if refusal.closes_connection() {
        response
            .headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
}

/// `X-RateLimit-Cost`: the units a rule with a cost of the request's own
/// (`cost = "graphql"`, `reserve`) took for the request (or, on its 429,
/// would have taken), the first such rule that applied, when rate-limit
/// headers are sent (docs/conversation.md, docs/ai-budgets.md).
#[inline(never)]
pub fn add_cost(response: &mut Response<ProxyBody>, policy: &Policy, enforced: &[Applicable<'_>]) {
    if !policy.sends_headers() {
        return;
    }
    if let Some(applicable) = enforced.iter().find(|one| one.rule.variable_cost) {
        let fields = response.body_mut().own_fields_mut();
        fields.push_number(OwnName::XRateLimitCost, applicable.cost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_format_like_header_value_from() {
        for n in [0, 1, 9, 10, 99, 100, 12_345, 1_000_000_000, u64::MAX] {
            assert_eq!(number_value(n), HeaderValue::from(n), "{n}");
        }
    }

    /// A 429's status, headers in order, and body.
    async fn parts(response: Response<ProxyBody>) -> (StatusCode, Vec<(String, String)>, String) {
        use http_body_util::BodyExt;
        let (mut head, mut body) = response.into_parts();
        body.take_own_fields().into_map(&mut head.headers);
        let response = Response::from_parts(head, body);
        let status = response.status();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
            .collect();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, headers, String::from_utf8(body.to_vec()).unwrap())
    }

    /// A refusal by `policy`'s only limit: empty, full again in 30 s, to be
    /// retried in `retry_after_secs` (less when the request costs less).
    fn refusal(policy: &Policy, retry_after_secs: u64, at: Duration) -> Response<ProxyBody> {
        let mut response = vacant();
        refuse_by_only_limit(&mut response, policy, retry_after_secs, at);
        response
    }

    /// [`refusal`], written into `response`.
    fn refuse_by_only_limit(
        response: &mut Response<ProxyBody>,
        policy: &Policy,
        retry_after_secs: u64,
        at: Duration,
    ) {
        let rule = &policy.rules[0];
        let verdicts = [Verdict {
            rule,
            limit: &rule.limits[0],
            decision: Decision::Deny {
                state: crate::limiter::BucketState {
                    remaining: 0,
                    reset_after: 30_000_000_000,
                },
                retry_after: Some(retry_after_secs * 1_000_000_000),
            },
        }];
        limited(response, policy, &verdicts, at);
    }

    #[test]
    fn one_limit_s_prebuilt_lines_are_the_fields_written_one_by_one() {
        let rules = [
            "rate = \"100/m\"",
            "rate = \"5/s\"\nalgorithm = \"sliding_window\"",
            "algorithm = \"concurrency\"\nmax_in_flight = 7",
        ];
        let decisions = [
            Decision::Allow(crate::limiter::BucketState {
                remaining: 42,
                reset_after: 1_500_000_000,
            }),
            Decision::Deny {
                state: crate::limiter::BucketState {
                    remaining: 0,
                    reset_after: 59_000_000_001,
                },
                retry_after: Some(1_000_000_000),
            },
        ];
        let styles = [HeaderStyle::Legacy, HeaderStyle::Ietf, HeaderStyle::Both];
        let at = Duration::new(1_800_000_000, 250_000_000);
        for rule in rules {
            let policy = crate::policy::testing::compile(&format!(
                "[[rule]]\nname = \"per-ip\"\nkey = [\"ip\"]\n{rule}\n"
            ));
            let rule = &policy.rules[0];
            for decision in decisions {
                let verdicts = [Verdict {
                    rule,
                    limit: &rule.limits[0],
                    decision,
                }];
                for style in styles {
                    let (mut prebuilt, mut each) = (OwnFields::default(), OwnFields::default());
                    add_rate_limit_headers(&mut prebuilt, style, &verdicts, at);
                    add_each_limit_fields(&mut each, style, &verdicts, at);
                    let text =
                        |fields: &OwnFields| String::from_utf8_lossy(fields.lines()).into_owned();
                    assert_eq!(text(&prebuilt), text(&each), "{rule:?} {style:?}");
                    let pairs = |fields: &OwnFields| {
                        let pairs = fields.pairs().map(|(name, value)| (name.clone(), value));
                        pairs
                            .map(|(name, value)| {
                                format!("{name}: {}", String::from_utf8_lossy(value))
                            })
                            .collect::<Vec<_>>()
                    };
                    assert_eq!(pairs(&prebuilt), pairs(&each), "{rule:?} {style:?}");
                    // Each pair is its line, as written.
                    let lines: Vec<_> = text(&each)
                        .split_terminator("\r\n")
                        .map(str::to_owned)
                        .collect();
                    assert_eq!(pairs(&each), lines, "{rule:?} {style:?}");
                    assert!(!prebuilt.is_empty());
                    for name in ["x-ratelimit-limit", "ratelimit", "x-ratelimit-reset"] {
                        let name = HeaderName::from_static(name);
                        assert_eq!(prebuilt.replaces(&name), each.replaces(&name), "{name}");
                    }
                }
            }
        }
    }

    #[tokio::test]
    async fn a_calendar_window_s_policy_is_the_current_window_s_length() {
        // Europe/Berlin: 2026-10-25 lasts 25 hours, October 31 days and
        // one hour; 12:00 UTC on 2026-10-25.
        let at = Duration::from_secs(1_792_929_600);
        let policy = crate::policy::testing::compile(
            "[[rule]]\nname = \"quota\"\nalgorithm = \"fixed_window\"\n\
             calendar = \"Europe/Berlin\"\nlimits = [\"10/d\", \"100/mo\"]\n",
        );
        let (_, headers, body) = parts(refusal(&policy, 30, at)).await;
        let field = |name: &str| headers.iter().find(|(n, _)| n == name).unwrap().1.clone();
        assert_eq!(field("ratelimit-policy"), "\"quota-1d\";q=10;w=90000");
        assert!(body.contains("per 1d (Europe/Berlin calendar)"), "{body}");
        let rule = &policy.rules[0];
        let verdicts: Vec<Verdict<'_>> = rule
            .limits
            .iter()
            .map(|limit| Verdict {
                rule,
                limit,
                decision: Decision::Allow(crate::limiter::BucketState {
                    remaining: 1,
                    reset_after: 1,
                }),
            })
            .collect();
        let mut fields = OwnFields::default();
        add_rate_limit_headers(&mut fields, HeaderStyle::Ietf, &verdicts, at);
        let text = String::from_utf8_lossy(fields.lines()).into_owned();
        assert!(
            text.contains(
                "ratelimit-policy: \"quota-1d\";q=10;w=90000, \"quota-1mo\";q=100;w=2682000\r\n"
            ),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_repeated_refusal_is_the_answer_written_afresh() {
        let rules = |status: u16, rate: &str| {
            crate::policy::testing::compile(&format!(
                "[response]\nstatus = {status}\n\
                 [[rule]]\nname = \"per-ip\"\nkey = [\"ip\"]\nrate = \"{rate}\"\n"
            ))
        };
        let policy = rules(429, "1/m");
        let at = Duration::from_secs(1_800_000_000);
        let first = parts(refusal(&policy, 30, at)).await;
        assert_eq!(first.0, StatusCode::TOO_MANY_REQUESTS);
        assert!(first.2.contains("\"retry_after_secs\":30"), "{}", first.2);
        assert!(first
            .1
            .contains(&("x-ratelimit-reset".into(), "1800000030".into())));
        // The second is remembered, the later ones are replayed.
        let again = || async { parts(refusal(&policy, 30, at)).await };
        for _ in 0..3 {
            assert_eq!(again().await, first);
        }
        // Whatever differs from the remembered answer is written anew: the
        // second, the Retry-After (the bucket's state is the same, only the
        // cost differs), the limit, the status.
        let next_second = parts(refusal(&policy, 30, at + Duration::from_secs(1))).await;
        assert!(next_second
            .1
            .contains(&("x-ratelimit-reset".into(), "1800000031".into())));
        for _ in 0..3 {
            assert_eq!(again().await, first);
        }
        let sooner = parts(refusal(&policy, 29, at)).await;
        assert!(sooner.2.contains("\"retry_after_secs\":29"), "{}", sooner.2);
        assert!(sooner.1.contains(&("retry-after".into(), "29".into())));
        for _ in 0..3 {
            assert_eq!(again().await, first);
        }
        let reloaded = parts(refusal(&rules(429, "2/m"), 30, at)).await;
        assert!(reloaded
            .1
            .contains(&("x-ratelimit-limit".into(), "2".into())));
        for _ in 0..3 {
            assert_eq!(again().await, first);
        }
        let other_status = parts(refusal(&rules(503, "1/m"), 30, at)).await;
        assert_eq!(other_status.0, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(other_status.1, first.1);
        assert!(
            other_status.2.contains("\"status\":503"),
            "{}",
            other_status.2
        );
    }

    #[tokio::test]
    async fn an_ambiguous_field_is_a_typed_400_naming_it_and_invalid_argument_in_grpc() {
        let policy = crate::policy::testing::compile(
            "[[rule]]\nname = \"per-key\"\nkey = [\"header:x-api-key\"]\nrate = \"1/m\"\n",
        );
        let rule = &policy.rules[0];
        let mut twice = HeaderMap::new();
        twice.append("x-api-key", HeaderValue::from_static("a"));
        twice.append("x-api-key", HeaderValue::from_static("b"));
        let at = rule.reads.ambiguous(&twice, None).unwrap();
        let mut refused = vacant();
        super::refusal(&mut refused, Refusal::AmbiguousField(at), Some(rule));
        let (status, _, body) = parts(refused).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["type"], problem::AMBIGUOUS_FIELD);
        assert_eq!(body["field"], "x-api-key");
        assert_eq!(body["in"], "header");
        assert!(
            body["detail"].as_str().unwrap().contains("'per-key'"),
            "{body}"
        );

        let mut grpc = vacant();
        grpc.body_mut().speak_grpc();
        super::refusal(&mut grpc, Refusal::AmbiguousField(at), Some(rule));
        assert_eq!(grpc.status(), StatusCode::OK);
        assert_eq!(
            grpc.body().stands_for(grpc.status()),
            StatusCode::BAD_REQUEST
        );
        assert!(grpc.body().is_end_stream(), "trailers only");
        assert_eq!(grpc.headers()["grpc-status"], "3");
        let message = grpc.headers()["grpc-message"].to_str().unwrap();
        assert!(message.contains("header x-api-key"), "{message}");
    }

    #[tokio::test]
    async fn a_429_to_a_grpc_call_is_resource_exhausted_with_its_fields_and_pushback() {
        let policy = crate::policy::testing::compile(
            "[[rule]]\nname = \"per-ip\"\nkey = [\"ip\"]\nrate = \"1/m\"\n",
        );
        let rule = &policy.rules[0];
        let at = Duration::from_secs(1_800_000_000);
        // Twice and more, so that the remembered HTTP answer is replayed
        // too: a gRPC call still gets its own.
        for _ in 0..3 {
            let over = parts(refusal(&policy, 30, at)).await;
            let mut grpc = vacant();
            grpc.body_mut().speak_grpc();
            refuse_by_only_limit(&mut grpc, &policy, 30, at);
            assert_eq!(
                grpc.body().stands_for(grpc.status()),
                StatusCode::TOO_MANY_REQUESTS
            );
            let (status, headers, body) = parts(grpc).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(body, "", "trailers only");
            let field = |name: &str| {
                headers
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
            };
            assert_eq!(field("grpc-status").as_deref(), Some("8"));
            assert_eq!(field("grpc-retry-pushback-ms").as_deref(), Some("30000"));
            assert_eq!(field("content-type").as_deref(), Some("application/grpc"));
            assert_eq!(
                field("grpc-message").as_deref(),
                Some(&*rule.limits[0].detail),
            );
            // Every rate-limit field the HTTP answer has.
            for (name, value) in over.1.iter().filter(|(n, _)| n != "content-type") {
                assert_eq!(field(name).as_ref(), Some(value), "{name}");
            }
        }
    }
}
