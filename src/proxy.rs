//! The request path, in named phases: body keys → checks → identify →
//! admit → forward → decorate → answered.
//!
//! [`Proxy::handle`] reads the current snapshot once, opens the request's
//! [`Context`], and calls each phase in turn with it; a phase either hands
//! the request on or writes its answer and ends it ([`AnswerWritten`]):
//! - **body keys** read the body a matching rule keys on (`key_body`);
//! - **checks** refuse what must not reach any limiter (framing, Host, sizes,
//!   a path that cannot be normalised);
//! - **identify** resolves the client IP, applies the access lists, finds
//!   the applicable rules with their keys, limits and costs, and the
//!   message rules a WebSocket handshake's tunnel is held to;
//! - **admit** asks the store once for everything (`admit`: bans, rates,
//!   permits, shadow rules), holds the request when a delay-mode rule says
//!   so, and answers a banned or limited caller;
//! - **forward** sends the request upstream ([`forward`]) with the
//!   admission's [`settle::Settlement`] riding on the response body, so what
//!   the request took is settled as the exchange unfolds and when it ends
//!   (`bill`), and the switch an HTTP/2 client's WebSocket (an extended
//!   `CONNECT`) asked for is checked ([`upgrade::over_h2::confirm`]);
//! - **decorate** adds sluice's headers to the upstream's answer
//!   ([`respond`]) and opens a WebSocket tunnel's message gate;
//! - **answered** gives a gRPC call its answer in gRPC's terms, and hands
//!   the access log line and the span to the response body.
//!
//! What decided the request goes into its span and its access log line
//! once ([`Context::note`]). Nothing here blocks: the store call is `async`,
//! and a hold waits on the proxy's clock. [`Proxy::reload`] swaps the
//! policy in atomically.

mod access;
mod admit;
mod batch;
pub mod bill;
mod checks;
mod client_request;
pub mod deadline;
mod decorate;
pub mod fields;
pub mod forward;
mod handshake;
mod identify;
mod key_body;
mod messages;
mod out_of_line;
pub mod pool;
mod recent_value;
mod refusal;
mod refusal_log;
mod reload;
pub mod respond;
mod routes;
mod ruling;
pub mod settle;
mod shared;
mod standing;
pub mod ticker;
mod traced;
pub mod upgrade;
pub mod upstream;
#[cfg(any(test, feature = "differential"))]
#[doc(hidden)]
pub mod upstream_differential;

use std::cell::OnceCell;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::{Request, Response};

use crate::access_log::Line;
use crate::clock::{Clock, Nanos, ProxyClock};
use crate::config::{AccessLogTarget, Config};
use crate::key::RequestFacts;
use crate::policy::Policy;
use crate::request_id::RequestId;
use crate::store::{OnError, Store};
use crate::trace::tracer::Span;
use access::Record;
pub use admit::Admitter;
pub use checks::{check, facts_of, host_of, Checked};
pub use client_request::{BodyFailure, ClientBody, ClientRequest, StreamedBody};
pub use identify::identify;
use key_body::Readings;
use messages::Metered;
pub use messages::{carrier_of, Carrier};
pub use refusal::Refusal;
use respond::ProxyBody;
pub use routes::{Routes, Upstreams};
use ruling::Ruling;
use shared::{Shared, Snapshot};
pub use standing::{Applicability, Applicable, Standing, Uncosted, Unidentified, Witness};

/// Rules a request can match before the bookkeeping spills to the heap.
const INLINE_RULES: usize = 4;

/// The proxy service, cheap to clone (one `Arc`).
#[derive(Debug, Clone)]
pub struct Proxy {
    shared: Arc<Shared>,
}

impl Proxy {
    /// Builds the proxy for a validated config.
    pub fn new(config: Config) -> Proxy {
        Proxy::with_clock(config, ProxyClock::default())
    }

    /// Builds the proxy on `clock` (tests hold and release requests on a
    /// [`crate::clock::RuntimeClock`]).
    pub fn with_clock(config: Config, clock: ProxyClock) -> Proxy {
        let (store, on_error) = crate::store::open(&config.store, &clock);
        Proxy::with_store(config, clock, store, on_error)
    }

    fn with_store(config: Config, clock: ProxyClock, store: Store, on_error: OnError) -> Proxy {
        let proxy = Proxy {
            shared: Arc::new(Shared::new(config, clock, store, on_error)),
        };
        let weak = Arc::downgrade(&proxy.shared);
        proxy.shared.upstreams.start(Box::new(move |routes| {
            if let Some(shared) = weak.upgrade() {
                shared.publish_routes(routes);
            }
        }));
        proxy
    }

    /// Handles one client request end to end, writing its answer into
    /// `response`, which is [`respond::vacant`], with `Connection: close`
    /// while draining. The request stays in `request`; only its body is
    /// taken, when it is forwarded.
    pub async fn handle(
        &self,
        request: &mut ClientRequest,
        peer: SocketAddr,
        response: &mut Response<ProxyBody>,
    ) {
        let snapshot = self.shared.current.load_full();
        // Built in place in the request's future and lent to its context:
        // they hold inline arrays, which a move would copy whole.
        let mut applicable = Applicability::default();
        let mut metered = None;
        let mut ruling = Ruling::default();
        let found = Findings {
            applicable: &mut applicable,
            metered: &mut metered,
            ruling: &mut ruling,
        };
        let shared = &*self.shared;
        let mut context = Context::open(shared, &snapshot, request.get(), peer, response, found);
        // However far the request went, it is answered the same way.
        let (Ok(()) | Err(AnswerWritten)) = phases(&mut context, request).await;
        context.answered();
    }
}

/// A request's phases, in order, each in its module: each hands the
/// request on, or writes its answer and ends it. The request's facts
/// borrow its head, what its checks found and what identification read
/// of it, so they live here, found once, from the checks to the route,
/// and not in the context. A body a rule reads is taken out of the
/// request for the body-keys phase to read while the head is lent, and
/// put back for the forward phase, which sends it.
async fn phases(cx: &mut Context<'_, '_>, client: &mut ClientRequest) -> Result<(), AnswerWritten> {
    let token_claims = OnceCell::new();
    let mut body = key_body::take(cx.policy, client);
    let request = client.get();
    let checked = checks::phase(cx, request)?;
    let mut facts = checks::facts_of(request, &checked, cx.peer.ip(), cx.policy);
    let to_read = key_body::look(cx, &mut facts, &token_claims)?;
    let readings: Readings<'_> = key_body::phase(cx, request, to_read, &mut body).await?;
    identify::phase(cx, request, &mut facts, &token_claims, &readings)?;
    admit::phase(cx, &facts).await?;
    let destination = forward::destination(cx, request, &checked, &facts);
    key_body::put_back(cx.policy, client, body);
    forward::phase(cx, client, destination).await?;
    decorate::phase(cx);
    Ok(())
}

/// The access log line of a request that arrived at `started`, saying
/// which protocol the client spoke.
#[inline(never)]
fn begin_line(shared: &Shared, started: Nanos, id: &RequestId, version: http::Version) -> Line {
    let mut line = shared.access_log.begin(started, id);
    if let Some(parts) = line.parts() {
        parts.protocol = match version {
            http::Version::HTTP_2 => "HTTP/2",
            http::Version::HTTP_3 => "HTTP/3",
            http::Version::HTTP_10 => "HTTP/1.0",
            _ => "HTTP/1.1",
        };
    }
    line
}

/// A phase wrote the request's answer into its context's response: the
/// request goes no further.
#[derive(Debug)]
pub struct AnswerWritten;

/// What one request gathers on its way through the phases, from its
/// arrival to its answer: when it came and from where, its id, the
/// snapshot it runs under, its span and access log line, the rules that
/// apply to it, what admission ruled, and the answer being built.
pub struct Context<'a, 'f> {
    shared: &'a Shared,
    snapshot: &'a Snapshot,
    /// The snapshot's policy, borrowed for as long as the request runs.
    policy: &'a Policy,
    /// When the request arrived, on the limiter's clock.
    started: Nanos,
    peer: SocketAddr,
    version: http::Version,
    id: RequestId,
    /// A gRPC call: sluice's own answers are given in gRPC's terms.
    grpc: bool,
    /// The request's span: a null pointer when it is not sampled.
    span: Span,
    /// Written when dropped: with the response body once it is sent or
    /// dropped, or when the request's future is, if the client leaves
    /// before its answer (status 499, as nginx logs it).
    line: Line,
    response: &'a mut Response<ProxyBody>,
    /// The rules that apply, as identify found them.
    applicable: &'f mut Applicability<'a>,
    /// The message rules a WebSocket handshake's tunnel is held to.
    metered: &'f mut Option<Box<Metered>>,
    /// What admission ruled, and what the request must settle.
    ruling: &'f mut Ruling<'a>,
}

/// Where a request's context keeps what the phases find out about it: the
/// rules that apply, the message rules its tunnel is held to, and what
/// admission ruled.
struct Findings<'a, 'f> {
    applicable: &'f mut Applicability<'a>,
    metered: &'f mut Option<Box<Metered>>,
    ruling: &'f mut Ruling<'a>,
}

impl<'a, 'f> Context<'a, 'f> {
    /// The context of `request` from `peer`, which runs under `snapshot`
    /// and is answered in `response`; what the phases find goes in `found`.
    #[inline(always)]
    fn open(
        shared: &'a Shared,
        snapshot: &'a Snapshot,
        request: &Request<ClientBody>,
        peer: SocketAddr,
        response: &'a mut Response<ProxyBody>,
        found: Findings<'a, 'f>,
    ) -> Context<'a, 'f> {
        // All of a request's timings come from the limiter's clock (a TSC
        // read, cheaper than `Instant::now()` on a VM).
        let started = shared.clock.now();
        let policy = &*snapshot.policy;
        let trusted = policy.client_ip.is_trusted(peer.ip());
        let id = RequestId::for_request(request.headers(), trusted);
        let span = match &snapshot.tracer {
            None => Span::none(),
            Some(tracer) => tracer.begin(request, trusted, started),
        };
        let line = match policy.config.server.access_log {
            AccessLogTarget::Off => Line::none(),
            _ => begin_line(shared, started, &id, request.version()),
        };
        // gRPC calls are POSTs: a GET costs one comparison here.
        let grpc =
            request.method() == http::Method::POST && respond::grpc::is_grpc(request.headers());
        if grpc {
            // sluice's own answers to it are given in gRPC's terms.
            response.body_mut().speak_grpc();
        }
        Context {
            shared,
            snapshot,
            policy,
            started,
            peer,
            version: request.version(),
            id,
            grpc,
            span,
            line,
            response,
            applicable: found.applicable,
            metered: found.metered,
            ruling: found.ruling,
        }
    }

    /// Writes what `record` says into the request's span, when sampled
    /// (`proxy/traced.rs`), and its access log line (`proxy/access.rs`).
    fn note(&mut self, record: Record<'_, '_, '_>) {
        let store = &self.shared.store;
        traced::note(self.span.recording(), &record, self.snapshot, store);
        access::note(self.line.parts(), record, self.policy);
    }

    /// [`Context::note`] of what admission ruled on the request `facts`
    /// describe (`admitted`: it passes, to be forwarded).
    fn note_ruled(&mut self, facts: &RequestFacts<'_>, admitted: bool) {
        let record = Record::Ruled {
            facts,
            admitted,
            ruling: self.ruling,
            enforced: &self.applicable.enforced,
        };
        let store = &self.shared.store;
        traced::note(self.span.recording(), &record, self.snapshot, store);
        access::note(self.line.parts(), record, self.policy);
    }

    /// Answers `request` with `refusal` before it was identified (a body or
    /// a request line its checks refuse), and records it: rare, so out of
    /// the phases' line.
    #[cold]
    #[inline(never)]
    fn refuse_unchecked(
        &mut self,
        request: &Request<ClientBody>,
        refusal: Refusal,
    ) -> AnswerWritten {
        let peer = self.peer;
        self.note(Record::Unchecked { request, peer });
        respond::refusal(self.response, refusal, None);
        AnswerWritten
    }

    /// Answered, the last phase: counted and logged as what sluice decided
    /// (a 429 is a 429, given in gRPC's terms or not).
    /// The access log line and the span ride on the response body, which
    /// writes and ends them when it is sent.
    fn answered(self) {
        let Context {
            shared,
            version,
            id,
            grpc,
            span,
            mut line,
            ruling,
            response,
            ..
        } = self;
        let mut status = response.status();
        if grpc {
            // Counted and logged as the refusal it stands for.
            status = response.body().stands_for(status);
        }
        if let Some(parts) = line.parts() {
            parts.status = status.as_u16();
            parts.upstream = ruling.upstream_took;
            response.body_mut().carry_access(line);
        }
        response.body_mut().identify(&id);
        if !span.is_none() {
            traced::answered(span, status, &id, response);
        } else {
            // Not dropped here: an unsampled span is a null pointer, and
            // handing it over keeps its drop out of the request's future.
            response.body_mut().carry_span(span);
        }
        shared.metrics.count_response(status);
        if let Some(alt_svc) = shared.alt_svc.get() {
            // HTTP/3 is there too (docs/edge.md, "HTTP/3"): said on the
            // answers over TCP.
            if version != http::Version::HTTP_3 {
                response
                    .headers_mut()
                    .insert(http::header::ALT_SVC, alt_svc.clone());
            }
        }
        if shared.draining.load(Ordering::SeqCst) && version < http::Version::HTTP_2 {
            // Draining: this is the connection's last exchange, and the
            // client should know before it sends another (nginx does the
            // same on a graceful stop). HTTP/2 clients are told by GOAWAY.
            response.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
        }
    }
}
