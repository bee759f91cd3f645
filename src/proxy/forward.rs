//! Talking to the upstream: rewriting a client request into the request the
//! upstream receives (normalised path, hop-by-hop headers stripped,
//! `X-Forwarded-*` set), sending it over a pooled keep-alive client, and
//! cleaning the response (hop-by-hop headers, ambiguous framing, WebSocket
//! switch). Bodies are passed through as streams in both directions; nothing
//! here buffers a body.
//!
//! Framing: the upstream only ever receives framing sluice wrote itself.
//! hyper parses the client's request (it rejects invalid or conflicting
//! `Content-Length`, a `Transfer-Encoding` not ending in `chunked`, TE on
//! HTTP/1.0, bad chunk sizes); the checks (`super::checks`) reject what hyper lets
//! through but a proxy must not guess at (`chunked` applied twice, or with
//! another coding), and hyper's client re-frames the body it forwards. A
//! response that carries both `Transfer-Encoding` and `Content-Length` is
//! framed by TE, its CL dropped, and its connection never reused; one with a
//! `Transfer-Encoding` other than exactly `chunked` is a 502. A response is
//! relayed as HTTP/1.1, whatever version the upstream spoke.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http::{Request, Response, StatusCode, Uri, Version};
use smallvec::SmallVec;

use super::bill::Failure;
use super::checks::Checked;
use super::client_request::{ClientBody, ClientRequest};
use super::deadline::{self, BodyLimits, BodyWatch};
use super::fields;
use super::messages::{self, Metered};
use super::out_of_line::OutOfLine;
use super::pool::{AddedFields, ForwardError, PooledBody, RequestBody};
use super::recent_value::{recent_value, RecentValue};
use super::refusal::Refusal;
use super::respond::grpc::CallEnd;
use super::respond::{self, ProxyBody};
use super::ruling::Ruling;
use super::settle::{ChargingWhile, RequestBytes, Settlement};
use super::upgrade;
pub use super::upstream::Outbound;
use super::upstream::Upstream;
use super::{AnswerWritten, Context};
use crate::clock::{Clock, Nanos, ProxyClock};
use crate::config::Propagators;
use crate::http1::framing;
use crate::key::client_ip::{self, ForwardedHeader, IPV4_TEXT_MAX};
use crate::key::RequestFacts;
use crate::limiter::adaptive::Sample;
use crate::metrics::{seconds, Metrics};
use crate::policy::Policy;
use crate::request_id::{self, RequestId};
use crate::trace;
use crate::trace::tracer::Span;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// The RFC 9110 §7.6.1 fields other than `Connection` and `TE`.
const FIXED_HOP_BY_HOP: [HeaderName; 6] = [
    KEEP_ALIVE,
    PROXY_CONNECTION,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
];

static HTTP: HeaderValue = HeaderValue::from_static("http");
static HTTPS: HeaderValue = HeaderValue::from_static("https");

/// What the proxy knows about the client when rewriting its request.
#[derive(Debug, Clone, Copy)]
pub struct ClientHop {
    /// The TCP peer.
    pub peer: IpAddr,
    /// Whether the peer is in `trusted_proxies` (its forwarding headers are
    /// kept and extended; an untrusted peer's are replaced).
    pub trusted: bool,
    /// `server.forwarded_header = "forwarded"`: the RFC 7239 `Forwarded`
    /// header is extended (or replaced) too.
    pub rfc7239: bool,
    /// The client spoke TLS to sluice (`[server.tls]`).
    pub https: bool,
}

/// Turns the client's request into the upstream's, in place, but for the
/// forwarding fields of an untrusted peer's request and a request id sluice
/// made: those go into `added` (empty before), to be added as the request is
/// written (filled in place: it is large, and a move copies it).
/// `handshake`: the request is a WebSocket handshake
/// ([`upgrade::is_websocket_handshake`]), whose `Connection` and `Upgrade`
/// go on to the upstream. A kept `request_id` is the request's own
/// `X-Request-Id`, which stays; any other the client sent goes, so the
/// upstream sees one id, sluice's.
pub fn prepare_request(
    request: &mut Request<ClientBody>,
    upstream: &Upstream,
    path_and_query: PathAndQuery,
    hop: ClientHop,
    handshake: bool,
    request_id: &RequestId,
    added: &mut AddedFields,
) {
    let host = original_host(request);
    // An absolute-form target or HTTP/2's `:authority` names the host;
    // otherwise the client's own Host header does.
    let host_from_target = request.uri().authority().is_some();
    // Origin-form: the connection already goes to the upstream.
    *request.uri_mut() = Uri::from(path_and_query);
    // The pool speaks HTTP/1.1 to the upstream whatever the client spoke.
    *request.version_mut() = Version::HTTP_11;
    let headers = request.headers_mut();
    // Strip first, then add our own: a client naming X-Forwarded-For in
    // Connection must not be able to delete what sluice sets.
    strip_hop_by_hop(headers, true);
    if handshake {
        upgrade::restore_handshake_fields(headers);
    }
    forwarding_fields(headers, hop, host.as_ref(), request_id, added);
    set_host(headers, host, host_from_target, upstream);
}

/// Sets the forwarding fields (`X-Forwarded-*`, `Forwarded`, the request
/// id): a trusted peer's are extended in the map, an untrusted peer's
/// removed and sluice's put in `added`, to be added as the request is
/// written.
fn forwarding_fields(
    headers: &mut HeaderMap,
    hop: ClientHop,
    host: Option<&HeaderValue>,
    request_id: &RequestId,
    added: &mut AddedFields,
) {
    // The peer's address is written out only where it is not already the
    // thread's last value of X-Forwarded-For (a keep-alive client's).
    let mut buf = [0u8; IPV4_TEXT_MAX];
    let proto = if hop.https { &HTTPS } else { &HTTP };
    added.request_id = request_id.made();
    if hop.trusted {
        append_forwarded_for(headers, &ip_text(hop.peer, &mut buf));
        if added.request_id.is_some() {
            // The trusted proxy's id was not one to keep: sluice's replaces it.
            headers.remove(request_id::HEADER);
        }
    } else {
        // An untrusted peer's forwarding fields and request id are
        // replaced, never believed: the client's go now (one look over the
        // names present first, as almost no client sends them), and
        // sluice's are added as the request is written, straight into its
        // head (four header-map inserts spared).
        let replaced = [
            &X_FORWARDED_FOR,
            &X_FORWARDED_PROTO,
            &X_FORWARDED_HOST,
            &request_id::HEADER,
        ];
        if headers.keys().any(|name| replaced.contains(&name)) {
            for name in replaced {
                headers.remove(name);
            }
        }
        let fields = &mut added.fields;
        fields.push((X_FORWARDED_FOR, peer_value(hop.peer)));
        fields.push((X_FORWARDED_PROTO, proto.clone()));
        if let Some(host) = host {
            fields.push((X_FORWARDED_HOST, host.clone()));
        }
    }
    if hop.rfc7239 {
        let peer = ip_text(hop.peer, &mut buf);
        set_forwarded(headers, hop.peer, &peer, hop.trusted, hop.https);
    }
    if hop.trusted {
        // A trusted proxy's own forwarding fields stay as it set them.
        if !headers.contains_key(&X_FORWARDED_PROTO) {
            headers.insert(X_FORWARDED_PROTO, proto.clone());
        }
        if let Some(host) = host {
            if !headers.contains_key(&X_FORWARDED_HOST) {
                headers.insert(X_FORWARDED_HOST, host.clone());
            }
        }
    }
}

/// `Host` as the upstream gets it: the host the client asked for
/// (`host_from_target`: named by an absolute-form target or HTTP/2's
/// `:authority`), else the pool's own.
fn set_host(
    headers: &mut HeaderMap,
    host: Option<HeaderValue>,
    host_from_target: bool,
    upstream: &Upstream,
) {
    match host {
        // The client's Host header is already the host it asked for
        // (unless `Connection` named it and it was stripped).
        Some(_) if !host_from_target && fields::has(headers, &header::HOST) => {}
        // HTTP/2 clients send :authority instead of Host, and an
        // absolute-form target wins over Host: the upstream gets the host
        // the client asked for, as with HTTP/1.1 clients.
        Some(host) => {
            headers.insert(header::HOST, host);
        }
        // An HTTP/1.0 client may name no host; HTTP/1.1 requires one.
        None => {
            headers.insert(header::HOST, upstream.host().clone());
        }
    }
}

/// Turns the upstream's response into the client's: hop-by-hop fields
/// stripped, ambiguous framing resolved, and a WebSocket switch turned into
/// a tunnel. `settlement` (what the admission took: units, permits) is
/// held until the response body ends (or the tunnel closes), then settled. An upstream switching protocols the client did not ask for is a
/// failed exchange (502).
pub fn prepare_response(
    response: &mut Response<PooledBody>,
    handshake: bool,
    settlement: Option<Box<Settlement>>,
) -> Result<(), ForwardError> {
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        // The connection belongs to the tunnel now, never to the pool: the
        // client's server takes it from the body once the `101` is written.
        response.body_mut().discard_connection();
        if !handshake || !upgrade::is_switching_to_websocket(response) {
            return Err(ForwardError::Other);
        }
        let headers = response.headers_mut();
        strip_hop_by_hop(headers, false);
        upgrade::restore_handshake_fields(headers);
        response.body_mut().hold_settlement(settlement);
        return Ok(());
    }
    // A proxy answers in its own version (RFC 9110 §6.2): the client's
    // server frames the body for HTTP/1.1 (sluice's HTTP/1.1 exchange's heads
    // already say so).
    *response.version_mut() = Version::HTTP_11;
    let headers = response.headers_mut();
    if fields::has(headers, &header::TRANSFER_ENCODING) {
        // A coding other than one `chunked` (`gzip`, `gzip, chunked`,
        // `chunked, chunked`): hyper's client decoded at most the chunked
        // layer, and sluice offered none other and cannot pass one on
        // (docs/edge-behaviour.md, "Reading the upstream's answer"). The
        // HTTP/1.1 exchange (`pool/exchange.rs`) refuses the same while
        // reading the head; this holds the oracle it is checked against
        // (hyper's client, `upstream_differential.rs`) to the same.
        if !fields::only_chunked(headers) {
            // Not even an answer without a body (a `HEAD`'s) leaves its
            // connection to the pool: the HTTP/1.1 exchange drops it too.
            response.body_mut().discard_connection();
            return Err(ForwardError::Other);
        }
        if fields::has(headers, &header::CONTENT_LENGTH) {
            // hyper framed the body by TE (RFC 9112 §6.3); the CL must not
            // reach the client, and whatever follows on the connection is
            // suspect (response splitting, hostile-input row F4 in
            // docs/edge-behaviour.md).
            headers.remove(header::CONTENT_LENGTH);
            response.body_mut().discard_connection();
        }
    }
    strip_hop_by_hop(response.headers_mut(), false);
    response.body_mut().hold_settlement(settlement);
    Ok(())
}

/// `ip` as text (what `ip.to_string()` gives); IPv4 is formatted on the stack.
fn ip_text(ip: IpAddr, buf: &mut [u8; IPV4_TEXT_MAX]) -> std::borrow::Cow<'_, str> {
    match ip {
        IpAddr::V4(v4) => std::borrow::Cow::Borrowed(client_ip::ipv4_text(v4, buf)),
        IpAddr::V6(_) => std::borrow::Cow::Owned(ip.to_string()),
    }
}

/// The Host the client addressed: the absolute-form or `:authority` URI wins
/// over the Host header (RFC 9112 §3.2.2).
fn original_host(request: &Request<ClientBody>) -> Option<HeaderValue> {
    match request.uri().authority() {
        Some(authority) => HeaderValue::from_str(authority.as_str()).ok(),
        None => request.headers().get(header::HOST).cloned(),
    }
}

fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

thread_local! {
    /// The last client address this thread wrote as `X-Forwarded-For`: a
    /// keep-alive connection's requests all come from one.
    static LAST_PEER: RecentValue<IpAddr> = const { std::cell::RefCell::new(None) };
}

/// `ip` written out as a header value, the thread's last one while `ip`
/// repeats.
fn peer_value(ip: IpAddr) -> HeaderValue {
    recent_value(&LAST_PEER, ip, || {
        let mut buf = [0u8; IPV4_TEXT_MAX];
        header_value(&ip_text(ip, &mut buf))
    })
}

fn append_forwarded_for(headers: &mut HeaderMap, peer: &str) {
    let mut joined = String::with_capacity(64);
    for value in headers.get_all(&X_FORWARDED_FOR) {
        if let Ok(text) = value.to_str() {
            if !joined.is_empty() {
                joined.push_str(", ");
            }
            joined.push_str(text.trim());
        }
    }
    if !joined.is_empty() {
        joined.push_str(", ");
    }
    joined.push_str(peer);
    headers.insert(X_FORWARDED_FOR, header_value(&joined));
}

/// RFC 7239: a trusted peer's `Forwarded` elements are kept and this hop's
/// `for=` appended after them (several field lines joined into one list);
/// an untrusted peer's are replaced by this hop alone, so a client cannot
/// pass forged elements to the upstream. An IPv6 node is quoted and
/// bracketed (RFC 7239 §6).
fn set_forwarded(headers: &mut HeaderMap, ip: IpAddr, text: &str, trusted: bool, https: bool) {
    let mut joined = String::with_capacity(64);
    if trusted {
        for value in headers.get_all(header::FORWARDED) {
            if let Ok(elements) = value.to_str() {
                joined.push_str(elements.trim());
                joined.push_str(", ");
            }
        }
    }
    match ip {
        IpAddr::V4(_) => {
            joined.push_str("for=");
            joined.push_str(text);
        }
        IpAddr::V6(_) => {
            joined.push_str("for=\"[");
            joined.push_str(text);
            joined.push_str("]\"");
        }
    }
    if https {
        joined.push_str(";proto=https");
    }
    headers.insert(header::FORWARDED, header_value(&joined));
}

/// Removes hop-by-hop fields: those named in `Connection`, then the fixed
/// list of RFC 9110 §7.6.1. On requests `TE: trailers` survives (gRPC needs
/// it).
pub fn strip_hop_by_hop(headers: &mut HeaderMap, is_request: bool) {
    // One pass over the names present instead of a hashed lookup per
    // hop-by-hop name: most messages carry none of them.
    let mut connection = false;
    let mut fixed = false;
    let mut te = false;
    for name in headers.keys() {
        if name == header::CONNECTION {
            connection = true;
        } else if name == header::TE {
            te = true;
        } else if is_fixed_hop_by_hop(name) {
            fixed = true;
        }
    }
    if connection && !fixed && names_no_field(headers) {
        // What browsers send: the general case below would find nothing
        // to remove but `Connection` itself.
        headers.remove(header::CONNECTION);
    } else if connection {
        (fixed, te) = remove_listed_fields(headers);
    }
    if fixed {
        for name in FIXED_HOP_BY_HOP {
            headers.remove(name);
        }
    }
    if te {
        keep_only_trailers(headers, is_request);
    }
}

/// Removes the fields `Connection` names, then `Connection` itself.
/// Whether a fixed hop-by-hop field, and `TE`, remain.
fn remove_listed_fields(headers: &mut HeaderMap) -> (bool, bool) {
    // The values are cloned (a reference count, no copy) so the names
    // they list can be removed by `&str`, which needs no allocation.
    let listed: SmallVec<[HeaderValue; 2]> = headers
        .get_all(header::CONNECTION)
        .iter()
        .cloned()
        .collect();
    // Same removal order as always (listed names, then Connection):
    // removal reorders the map, and the order is what goes on the wire.
    for value in &listed {
        let Ok(text) = value.to_str() else { continue };
        for name in text.split(',') {
            let name = name.trim();
            // Most listed options (`keep-alive`, `close`) name no field
            // that is present: a look over the few names present is
            // cheaper than parsing and hashing the option as a name.
            // (Not a valid field name: nothing present matches.)
            if headers
                .keys()
                .any(|present| present.as_str().eq_ignore_ascii_case(name))
            {
                headers.remove(name);
            }
        }
    }
    headers.remove(header::CONNECTION);
    // Connection may have named TE or a fixed field: look again.
    let (mut fixed, mut te) = (false, false);
    for name in headers.keys() {
        if name == header::TE {
            te = true;
        } else if is_fixed_hop_by_hop(name) {
            fixed = true;
        }
    }
    (fixed, te)
}

/// `TE` is hop-by-hop; of a request's, only `trailers` is passed on (it
/// tells the upstream the client reads trailer fields).
fn keep_only_trailers(headers: &mut HeaderMap, is_request: bool) {
    let trailers = is_request
        && headers
            .get_all(header::TE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .any(|item| item.trim().eq_ignore_ascii_case("trailers"));
    headers.remove(header::TE);
    if trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

/// Whether the `Connection` fields list nothing but `keep-alive` and
/// `close` while no field called `Close` is present (`Keep-Alive` is looked
/// for with the fixed fields): then they name no field to strip.
fn names_no_field(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .all(framing::only_persistence_options)
        && !headers.keys().any(|name| name.as_str() == "close")
}

/// Whether `name` is one of [`FIXED_HOP_BY_HOP`], compared with each in
/// turn (every request's every field is asked).
#[inline]
fn is_fixed_hop_by_hop(name: &HeaderName) -> bool {
    name == header::TRAILER
        || name == header::TRANSFER_ENCODING
        || name == header::UPGRADE
        || name == header::PROXY_AUTHORIZATION
        || name == KEEP_ALIVE
        || name == PROXY_CONNECTION
}

/// What forwarding works with.
#[derive(Debug, Clone, Copy)]
pub struct Forwarder<'a> {
    /// The pool the request's route names.
    pub upstream: &'a Upstream,
    /// The request's key for the pool's `hash:` balancing, if it has one.
    pub hash: Option<u64>,
    /// Times sluice's overhead and the upstream's answer.
    pub clock: &'a ProxyClock,
    pub metrics: &'a Metrics,
    /// The policy the request was admitted under: who is trusted to name
    /// the client, and which forwarding header carries it.
    pub policy: &'a Policy,
    /// The request's id, sent on as `X-Request-Id`.
    pub request_id: &'a RequestId,
    /// Who sent it: named to the upstream as the forwarding headers say.
    pub peer: SocketAddr,
    /// When it arrived, on `clock`: the start of sluice's overhead.
    pub started: Nanos,
}

/// A sampled request's trace, carried on to the upstream: the client's
/// trace fields of `propagators` give way to sluice's, which each attempt
/// writes with its own span id (`trace/propagate.rs`).
#[cold]
fn carry_trace(
    span: &mut Span,
    propagators: Propagators,
    client: &mut ClientRequest,
) -> Option<Box<trace::propagate::Outgoing>> {
    let trace_id = span.recording()?.trace_id;
    let headers = client.get_mut().headers_mut();
    Some(Box::new(trace::propagate::Outgoing::new(
        trace_id,
        propagators,
        headers,
    )))
}

/// Where an admitted request goes: the path and query the upstream
/// receives, the pool its route names, and its key for the pool's `hash:`
/// balancing, if it has one.
pub struct Destination<'a> {
    path_and_query: PathAndQuery,
    upstream: &'a Upstream,
    hash: Option<u64>,
}

/// Where the request `facts` describe goes, as its checks found it
/// (`checked`): found before the forward phase, while the facts may still
/// borrow the request's head (that phase takes the request's body).
pub fn destination<'a>(
    cx: &Context<'a, '_>,
    request: &Request<ClientBody>,
    checked: &Checked<'_>,
    facts: &RequestFacts<'_>,
) -> Destination<'a> {
    let policy = cx.policy;
    let snapshot: &'a super::shared::Snapshot = cx.snapshot;
    let upstream = snapshot.routes.route(facts);
    let hash = upstream.hash_source().and_then(|source| {
        let sources = std::slice::from_ref(source);
        policy.keys.derive(sources, facts, false).ok()
    });
    Destination {
        path_and_query: forwarded_path(request, checked, policy),
        upstream,
        hash,
    }
}

/// Forward, the request path's phase: the admitted request goes to its
/// `destination` ([`Forwarder::forward`]); the upstream's answer, or the
/// answer to its failure, goes into the context's response.
pub async fn phase(
    cx: &mut Context<'_, '_>,
    client: &mut ClientRequest,
    destination: Destination<'_>,
) -> Result<(), AnswerWritten> {
    let shared = cx.shared;
    let forwarder = Forwarder {
        upstream: destination.upstream,
        hash: destination.hash,
        clock: &shared.clock,
        metrics: &shared.metrics,
        policy: cx.policy,
        request_id: &cx.id,
        peer: cx.peer,
        started: cx.started,
    };
    let path_and_query = destination.path_and_query;
    // A gRPC call a message rule applies to: its messages are metered as
    // they are forwarded (`proxy/messages/grpc.rs`).
    let call = match cx.grpc {
        true => cx
            .metered
            .take()
            .map(|metered| meter_call(cx, client, *metered)),
        false => None,
    };
    let ruling = &mut cx.ruling;
    let forwarding = forwarder.forward(client, path_and_query, &mut cx.span, ruling, cx.response);
    let forwarded = forwarding.await;
    if let Some(end) = call {
        return call_answered(end, forwarded, cx.response);
    }
    if forwarded {
        Ok(())
    } else {
        Err(AnswerWritten)
    }
}

/// Meters the messages of `client`'s call under `metered`'s rules.
#[cold]
#[inline(never)]
fn meter_call(cx: &Context<'_, '_>, client: &mut ClientRequest, metered: Metered) -> Arc<CallEnd> {
    let shared = cx.shared;
    let body = client.get_mut().body_mut();
    let deciding = shared.deciding(&cx.snapshot.policy);
    let unmetered = std::mem::replace(body, ClientBody::Empty);
    let (metered, end) = messages::grpc::meter(unmetered, metered, deciding, &shared.metrics);
    *body = metered;
    end
}

/// The answer to a metered call (`forwarded`: the server answered it):
/// ended with the call's status should sluice end the call first, or,
/// when the server had not answered yet, that status alone.
#[cold]
#[inline(never)]
fn call_answered(
    end: Arc<CallEnd>,
    forwarded: bool,
    response: &mut Response<ProxyBody>,
) -> Result<(), AnswerWritten> {
    if forwarded {
        response.body_mut().end_call_with(end);
        return Ok(());
    }
    if let Some(ending) = end.ending() {
        respond::grpc::answer_ended(response, ending);
    }
    Err(AnswerWritten)
}

impl Forwarder<'_> {
    /// Forward: the admitted request, rewritten, goes upstream with the
    /// admission's settlement (`ruling.settlement`) riding on the
    /// response body, so what the request took is settled as the exchange
    /// unfolds and when it ends. Writes the upstream's answer, made the
    /// client's, into `response` and returns `true`; or writes the answer
    /// to its failure (502, 504, or 408/413 for a request body cut off by
    /// its deadline or size cap) and returns `false`. Written in place, not
    /// returned, because a response is large and every move of it is a copy
    /// on each request.
    pub async fn forward(
        self,
        client: &mut ClientRequest,
        path_and_query: PathAndQuery,
        span: &mut Span,
        ruling: &mut Ruling<'_>,
        response: &mut Response<ProxyBody>,
    ) -> bool {
        let mut added = AddedFields::default();
        let mut outgoing = self.outgoing(client, path_and_query, ruling.held, &mut added);
        if let Some(propagators) = span.propagators() {
            added.trace = carry_trace(span, propagators, client);
        }
        let mut settlement = ruling.settlement.take();
        if let Some(settlement) = &mut settlement {
            let body = &mut outgoing.body;
            settlement.forwarded(outgoing.sent, || request_bytes(body));
        }
        let upstream = self.upstream;
        let outbound = Outbound {
            request: client.get(),
            body: &mut outgoing.body,
            handshake: outgoing.handshake,
        };
        let mut ended = outgoing.sent;
        let (added, sent, clock) = (&added, outgoing.sent, self.clock);
        // Upstream time and body bytes are charged every second while the
        // answer is awaited.
        let charging = settlement.as_deref_mut().filter(|s| s.charges_as_it_runs());
        // Two awaits, not one future that could be either: a pool of one
        // server's exchange is then moved about at its own size.
        let result = match upstream.only() {
            Some(server) => {
                if let Some(trace) = &added.trace {
                    trace.begin_attempt(server.address(), sent);
                }
                let sending =
                    upstream.send_to_one(server, outbound, added, sent, clock, &mut ended);
                let result = ChargingWhile::new(sending, charging).await;
                if let Some(trace) = &added.trace {
                    trace.end_attempt(super::upstream::attempt_outcome(&result), ended);
                }
                result
            }
            None => {
                // Out of line: a pool of several servers, with its retries,
                // is most of this future's code, and the request's future
                // stays small enough to be inlined whole
                // (`proxy/out_of_line.rs`).
                let sending =
                    upstream.send_to_any(outbound, added, self.hash, sent, clock, &mut ended);
                ChargingWhile::new(OutOfLine::new(sending), charging).await
            }
        };
        if let (Some(trace), Some(recording)) = (&added.trace, span.recording()) {
            trace.add_spans(recording, client.get().method(), upstream.name());
        }
        // Until the head arrived, or the last attempt failed.
        ruling.upstream_took = Some(ended.saturating_sub(outgoing.sent));
        let answered = Answered {
            handshake: outgoing.handshake,
            took: ended.saturating_sub(outgoing.upstream_from()),
            ended,
        };
        match self.incoming(result, answered, settlement, response) {
            Ok(()) if outgoing.handshake => upgrade::over_h2::confirm(client.get(), response),
            Ok(()) => true,
            Err(error) => {
                self.failed(&outgoing, error, response);
                false
            }
        }
    }

    /// The answer to a failed exchange: a body cut off by its deadline or
    /// size cap is the client's fault, anything else the upstream's.
    fn failed(self, outgoing: &Outgoing, error: ForwardError, response: &mut Response<ProxyBody>) {
        let watch = &outgoing.body_watch;
        match watch.cut_off() {
            Some(cut_off) => {
                let refusal = Refusal::BodyCutOff(cut_off, watch.version());
                respond::refusal(response, refusal, None)
            }
            None => self.upstream_failed(error, response),
        }
    }

    /// The admitted request rewritten for the upstream, in place
    /// (normalised path, hop-by-hop fields stripped, forwarding headers
    /// set, or put in `added`), and its body taken out of it, under its
    /// deadline and size cap unless it is already here whole (and within the
    /// cap: one over it is guarded, and cut off at its first frame, as a
    /// streamed one). `held`: how long admission held the request.
    fn outgoing(
        self,
        client: &mut ClientRequest,
        path_and_query: PathAndQuery,
        held: Nanos,
        added: &mut AddedFields,
    ) -> Outgoing {
        let (policy, peer) = (self.policy, self.peer);
        let hop = ClientHop {
            peer: peer.ip(),
            trusted: policy.client_ip.is_trusted(peer.ip()),
            rfc7239: policy.client_ip.header() == ForwardedHeader::Forwarded,
            https: policy.config.server.tls.is_some(),
        };
        let request = client.get_mut();
        let handshake = upgrade::is_websocket_handshake(request);
        prepare_request(
            request,
            self.upstream,
            path_and_query,
            hop,
            handshake,
            self.request_id,
            added,
        );
        let version = request.version();
        let server = &policy.config.server;
        let limits = BodyLimits {
            timeout: server.body_timeout,
            max_bytes: server.max_body_bytes,
        };
        let within =
            |bytes: &bytes::Bytes| limits.max_bytes == 0 || bytes.len() as u64 <= limits.max_bytes;
        let (body, body_watch) = match std::mem::replace(request.body_mut(), ClientBody::Empty) {
            ClientBody::Empty => (RequestBody::None, BodyWatch::no_body(version)),
            ClientBody::Read(bytes) if within(&bytes) => {
                (RequestBody::Whole(bytes), BodyWatch::no_body(version))
            }
            streamed => {
                // A metered call is a stream as long as its messages are
                // admitted: `body_timeout` does not end it.
                let limits = match streamed {
                    ClientBody::Metered(_) => limits.without_deadline(),
                    _ => limits,
                };
                let (guarded, watch) = deadline::guard(streamed, limits, version, self.clock);
                (RequestBody::Streamed(guarded), watch)
            }
        };
        // One clock read ends the overhead span and starts the upstream one.
        // The overhead excludes the intentional hold: it is the latency
        // sluice adds to requests that were within their limits.
        let sent = self.clock.now();
        self.metrics.overhead_seconds.observe(seconds(
            sent.saturating_sub(self.started).saturating_sub(held),
        ));
        Outgoing {
            body,
            body_watch,
            handshake,
            sent,
        }
    }

    /// The upstream's answer made the client's, carrying what the admission
    /// took (`settlement`): it is settled when the body has been sent or
    /// dropped (or a WebSocket tunnel closed), and permits return then. Its
    /// bill sees the response head first: a reported cost is charged and
    /// stripped, a 5xx or a failed exchange refunded where `refund_on` says.
    /// Adaptive rules learn from the time to the head ([`Answered`]), or
    /// from the failure. The answer is written into `response` (in place:
    /// every move of a response copies it).
    fn incoming(
        self,
        mut result: Result<Response<PooledBody>, ForwardError>,
        answered: Answered,
        mut settlement: Option<Box<Settlement>>,
        response: &mut Response<ProxyBody>,
    ) -> Result<(), ForwardError> {
        let Answered {
            handshake,
            took,
            ended,
        } = answered;
        if let Some(bill) = &mut settlement {
            match &mut result {
                Ok(response) => {
                    let status = response.status();
                    bill.learn(
                        if status.is_server_error() {
                            Sample::Failed
                        } else {
                            Sample::Answered(took)
                        },
                        ended,
                    );
                    bill.response_began(status, response.headers_mut())
                }
                // The client's body broke off: nothing about the upstream.
                Err(ForwardError::ClientBody) => bill.exchange_failed(Failure::ClientLeft),
                Err(error) => {
                    bill.learn(Sample::Failed, ended);
                    bill.exchange_failed(Failure::Upstream(error.status()))
                }
            }
            if !bill.needed_after_response() {
                // Nothing rides on the body: settled now (units kept).
                settlement = None;
            }
        }
        let mut answer = result?;
        prepare_response(&mut answer, handshake, settlement)?;
        *response = answer.map(ProxyBody::upstream);
        Ok(())
    }

    /// Logs and answers an upstream failure (each attempt's failure was
    /// counted in the pool's series as it happened).
    fn upstream_failed(self, error: ForwardError, response: &mut Response<ProxyBody>) {
        let pool = self.upstream.name();
        let refusal = match error {
            ForwardError::Connect => Refusal::UpstreamUnreachable,
            // Logged where the handshake failed, with rustls' reason.
            ForwardError::Tls => {
                return respond::refusal(response, Refusal::UpstreamUnreachable, None)
            }
            ForwardError::Timeout => Refusal::UpstreamTimeout,
            ForwardError::Other => Refusal::UpstreamFailed,
            ForwardError::NoExtendedConnect => Refusal::WebSocketUpstream(
                "the upstream's HTTP/2 connection does not advertise extended CONNECT \
                 (RFC 8441), so a WebSocket cannot be opened on it",
            ),
            ForwardError::NoServer => {
                tracing::warn!(upstream = %pool, "no server of the pool is known: its names have not resolved");
                return respond::no_server(response, pool);
            }
            ForwardError::ClientBody => {
                let malformed = Refusal::BadFraming("the request body is malformed");
                return respond::refusal(response, malformed, None);
            }
        };
        tracing::warn!(upstream = %pool, %error, "upstream request failed");
        respond::refusal(response, refusal, None)
    }
}

/// An admitted request on its way upstream (its head stays where the
/// client's request is).
struct Outgoing {
    /// Its body, taken out of the request.
    body: RequestBody,
    /// Tells a body cut off by its deadline or size cap from an upstream
    /// failure.
    body_watch: BodyWatch,
    /// A WebSocket handshake: a `101` opens a tunnel.
    handshake: bool,
    /// When it was sent (the end of sluice's overhead).
    sent: Nanos,
}

/// Where the bytes of a request `body` being forwarded are known, for
/// the rules that charge them.
fn request_bytes(body: &mut RequestBody) -> RequestBytes {
    match body {
        RequestBody::None | RequestBody::Taken => RequestBytes::None,
        RequestBody::Whole(bytes) => RequestBytes::Whole(bytes.len() as u64),
        RequestBody::Streamed(streamed) => RequestBytes::Streamed(streamed.count_bytes()),
    }
}

impl Outgoing {
    /// Where the upstream's own time starts, as adaptive rules learn it:
    /// at the end of a body the client was still sending.
    fn upstream_from(&self) -> Nanos {
        self.body_watch.ended_at().unwrap_or(0).max(self.sent)
    }
}

/// How an upstream answered: for a WebSocket `handshake`, `took` (its own
/// time to the head, or to the failure), and when that `ended`.
#[derive(Debug, Clone, Copy)]
struct Answered {
    handshake: bool,
    took: Nanos,
    ended: Nanos,
}

/// The path and query the upstream receives: the normalised path, when
/// normalisation changed it and `normalize_path` is on, with the query
/// unchanged; otherwise what the client sent.
pub fn forwarded_path<B>(
    request: &Request<B>,
    checked: &Checked<'_>,
    policy: &Policy,
) -> PathAndQuery {
    let original = request
        .uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    match &checked.path {
        Cow::Owned(path) if policy.normalize_path => {
            // Only allocates when the client sent a non-normal path.
            let rebuilt = match request.uri().query() {
                Some(query) => format!("{path}?{query}"),
                None => path.to_owned(),
            };
            PathAndQuery::try_from(rebuilt).unwrap_or(original)
        }
        _ if original.path().is_empty() => PathAndQuery::from_static("/"),
        _ => original,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_remembered_peer_value_is_the_peer_asked_for() {
        let ips: [IpAddr; 4] = [
            "10.0.0.1".parse().unwrap(),
            "10.0.0.1".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
        ];
        for ip in ips.iter().cycle().take(12) {
            assert_eq!(peer_value(*ip), ip.to_string().as_str());
        }
    }

    #[test]
    fn ip_text_matches_display() {
        let ips: [IpAddr; 7] = [
            "0.0.0.0".parse().unwrap(),
            "127.0.0.1".parse().unwrap(),
            "255.255.255.255".parse().unwrap(),
            "10.20.100.9".parse().unwrap(),
            "1.99.200.50".parse().unwrap(),
            "::1".parse().unwrap(),
            "2001:db8::ff00:42:8329".parse().unwrap(),
        ];
        for ip in ips {
            let mut buf = [0u8; IPV4_TEXT_MAX];
            assert_eq!(ip_text(ip, &mut buf), ip.to_string());
        }
    }

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        headers
    }

    fn names(headers: &HeaderMap) -> Vec<(String, String)> {
        headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect()
    }

    /// The straightforward version (a hashed remove per hop-by-hop name):
    /// the optimised one must leave the same fields in the same order.
    fn reference_strip(headers: &mut HeaderMap, is_request: bool) {
        if headers.contains_key(header::CONNECTION) {
            let named: Vec<HeaderName> = headers
                .get_all(header::CONNECTION)
                .iter()
                .filter_map(|value| value.to_str().ok())
                .flat_map(|value| value.split(','))
                .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
                .collect();
            for name in named {
                headers.remove(name);
            }
            headers.remove(header::CONNECTION);
        }
        for name in FIXED_HOP_BY_HOP {
            headers.remove(name);
        }
        // `TE` is handled alike by both: `hop_by_hop_fields_are_stripped`
        // checks it against written-out answers.
        if headers.contains_key(header::TE) {
            keep_only_trailers(headers, is_request);
        }
    }

    #[test]
    fn the_fixed_hop_by_hop_test_knows_exactly_the_listed_fields() {
        for name in FIXED_HOP_BY_HOP {
            assert!(is_fixed_hop_by_hop(&name), "{name}");
        }
        for name in [header::CONNECTION, header::TE, header::HOST, header::ACCEPT] {
            assert!(!is_fixed_hop_by_hop(&name), "{name}");
        }
    }

    #[test]
    fn hop_by_hop_fields_are_stripped() {
        type Fields = &'static [(&'static str, &'static str)];
        let cases: &[(Fields, bool, Fields)] = &[
            (
                &[("host", "a"), ("accept", "*/*")],
                true,
                &[("host", "a"), ("accept", "*/*")],
            ),
            (
                &[
                    ("host", "a"),
                    ("keep-alive", "5"),
                    ("upgrade", "h2c"),
                    ("x", "1"),
                ],
                true,
                &[("host", "a"), ("x", "1")],
            ),
            (
                &[
                    ("connection", "close, X-Foo, te"),
                    ("x-foo", "1"),
                    ("te", "trailers"),
                    ("y", "2"),
                ],
                true,
                &[("y", "2")],
            ),
            (
                &[("te", "gzip, Trailers"), ("y", "2")],
                true,
                &[("y", "2"), ("te", "trailers")],
            ),
            (&[("te", "trailers"), ("y", "2")], false, &[("y", "2")]),
            (&[("te", "gzip")], true, &[]),
            (
                &[
                    ("transfer-encoding", "chunked"),
                    ("trailer", "x"),
                    ("proxy-authorization", "b"),
                    ("proxy-connection", "k"),
                ],
                false,
                &[],
            ),
        ];
        for (input, is_request, expected) in cases {
            let mut headers = map(input);
            strip_hop_by_hop(&mut headers, *is_request);
            let expected: Vec<(String, String)> = expected
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            assert_eq!(names(&headers), expected, "{input:?}");
        }
    }

    #[test]
    fn hop_by_hop_stripping_keeps_the_reference_order() {
        let cases: &[&[(&str, &str)]] = &[
            &[
                ("server", "n"),
                ("date", "d"),
                ("content-type", "t"),
                ("content-length", "64"),
                ("connection", "keep-alive"),
            ],
            &[
                ("a", "1"),
                ("connection", "x-b, keep-alive"),
                ("b", "2"),
                ("x-b", "3"),
                ("c", "4"),
                ("keep-alive", "t"),
                ("d", "5"),
            ],
            &[
                ("connection", "upgrade"),
                ("upgrade", "websocket"),
                ("a", "1"),
                ("te", "trailers"),
                ("b", "2"),
            ],
            &[
                ("connection", "a, , bad name, TE"),
                ("connection", "b"),
                ("a", "1"),
                ("b", "2"),
                ("c", "3"),
                ("te", "trailers, gzip"),
            ],
            &[
                ("a", "1"),
                ("transfer-encoding", "chunked"),
                ("b", "2"),
                ("trailer", "x"),
                ("c", "3"),
                ("te", "trailers"),
            ],
            &[
                ("connection", "connection, close"),
                ("close", "x"),
                ("z", "1"),
            ],
            // Persistence options only: the short way, unless a field
            // they could name is present.
            &[
                ("host", "h"),
                ("connection", "Keep-Alive"),
                ("accept", "*/*"),
                ("user-agent", "u"),
            ],
            &[
                ("connection", "close"),
                ("a", "1"),
                ("connection", "keep-alive, , Close"),
                ("b", "2"),
            ],
            &[
                ("a", "1"),
                ("connection", "close"),
                ("b", "2"),
                ("close", "x"),
                ("c", "3"),
            ],
            &[
                ("a", "1"),
                ("keep-alive", "timeout=5"),
                ("b", "2"),
                ("connection", "keep-alive"),
                ("c", "3"),
            ],
            &[
                ("x-1", "1"),
                ("x-2", "2"),
                ("proxy-connection", "k"),
                ("x-3", "3"),
                ("x-4", "4"),
                ("x-5", "5"),
            ],
        ];
        for input in cases {
            for is_request in [true, false] {
                let mut ours = map(input);
                let mut reference = map(input);
                strip_hop_by_hop(&mut ours, is_request);
                reference_strip(&mut reference, is_request);
                assert_eq!(
                    names(&ours),
                    names(&reference),
                    "{input:?} request={is_request}"
                );
            }
        }
    }
}
