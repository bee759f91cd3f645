//! The request path, in named phases: checks → identify → admit → forward
//! → settle → decorate.
//!
//! [`Proxy::handle`] reads the current [`Policy`] snapshot once; then
//! - **checks** refuse what must not reach any limiter (framing, Host, sizes,
//!   a path that cannot be normalised);
//! - **identify** resolves the client IP, applies the access lists, finds
//!   the applicable rules, their keys (JWT claims verified lazily, once, for
//!   the first rule that keys on one) and each caller's limits (tier,
//!   override or sunset step), and answers a retired route;
//! - **admit** asks the store once for everything (`admit`: bans, rates,
//!   permits, shadow rules), holds the request when a delay-mode rule says
//!   so, and answers a banned or limited caller;
//! - **forward** sends the request upstream ([`forward`]) with the
//!   admission's [`settle::Settlement`] riding on the response body, so what
//!   the request took is **settled** as the exchange unfolds and when it
//!   ends (permits returned; upstream time charged every second and at the
//!   end, a reported cost charged and a failed exchange refunded at the
//!   response head — `bill`);
//! - **decorate** adds sluice's headers to the upstream's answer
//!   ([`respond`]).
//!
//! Nothing here blocks: the store call is `async` (the memory store
//! completes at once; Redis will await), and a hold waits on the proxy's
//! clock. [`Proxy::reload`] swaps the policy in atomically.

mod access;
mod admit;
pub mod bill;
mod checks;
mod client_request;
pub mod deadline;
mod decorate;
pub mod fields;
pub mod forward;
mod identify;
mod key_body;
mod messages;
mod out_of_line;
pub mod pool;
mod recent_value;
mod refusal;
mod refusal_log;
pub mod respond;
mod routes;
mod ruling;
pub mod settle;
mod tally;
pub mod ticker;
mod traced;
pub mod upgrade;
pub mod upstream;
#[cfg(any(test, feature = "differential"))]
#[doc(hidden)]
pub mod upstream_differential;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use http::{Request, Response};

use crate::access_log::{AccessLog, Line, Parts};
use crate::clock::{Clock, Nanos, ProxyClock};
use crate::config::{AccessLogTarget, Config, Tracing};
use crate::key::body::BodyFacts;
use crate::key::graphql::persisted::{Learned, Persisted};
use crate::metrics::Metrics;
use crate::policy::Policy;
use crate::request_id::RequestId;
use crate::store::{OnError, Store};
use crate::trace::tracer::{Span, Tracer};
use access::Record;
pub use admit::{fill_asks, Admitter, Answered, StoreUnavailable};
pub use checks::{check, host_of, Checked};
pub use client_request::{ClientBody, ClientRequest};
pub use identify::{
    facts_of, identify, Applicability, Applicable, Standing, Uncosted, Unidentified, Witness,
};
pub use refusal::Refusal;
use respond::ProxyBody;
pub use routes::{Routes, Upstreams};
use ruling::Ruling;

/// The snapshot a request runs against, borrowed.
#[derive(Debug, Clone, Copy)]
struct Serving<'s> {
    policy: &'s Policy,
    /// The same policy, shared: a WebSocket tunnel keeps it for its life.
    shared_policy: &'s Arc<Policy>,
    routes: &'s Routes,
}

impl Shared {
    /// See [`Proxy::persisted`].
    fn persisted<'a>(&'a self, policy: &'a Policy, learns: bool) -> Persisted<'a> {
        Persisted {
            manifest: &policy.config.server.persisted_queries,
            learned: &self.persisted_queries,
            learns,
        }
    }

    /// What a WebSocket tunnel's message gate decides with, under the
    /// policy its handshake ran under.
    fn deciding(&self, serving: Serving<'_>) -> messages::Deciding {
        messages::Deciding {
            store: Arc::clone(&self.store),
            clock: self.clock.clone(),
            on_error: self.on_error,
            metrics: Arc::clone(&self.metrics),
            policy: Arc::clone(serving.shared_policy),
        }
    }

    /// Requests from now on run under `policy`, traced by `tracer`, with
    /// the pools as they are.
    fn publish_policy(&self, policy: Arc<Policy>, tracer: Option<Arc<Tracer>>) {
        self.current.rcu(|current| Snapshot {
            policy: Arc::clone(&policy),
            routes: Arc::clone(&current.routes),
            tracer: tracer.clone(),
        });
    }

    /// Requests from now on are forwarded by `routes`, under the policy as
    /// it is.
    fn publish_routes(&self, routes: Arc<Routes>) {
        self.current.rcu(|current| Snapshot {
            policy: Arc::clone(&current.policy),
            routes: Arc::clone(&routes),
            tracer: current.tracer.clone(),
        });
    }

    /// The tracer `config` asks for, keeping the exporter of `previous`
    /// where it can (`trace::tracer::Tracer::new`).
    fn tracer(&self, config: &Config, previous: Option<&Tracer>) -> Option<Arc<Tracer>> {
        tracer_for(config, previous, &self.metrics, &self.clock)
    }
}

/// The tracer `config` asks for: `None` when tracing is off.
fn tracer_for(
    config: &Config,
    previous: Option<&Tracer>,
    metrics: &Metrics,
    clock: &ProxyClock,
) -> Option<Arc<Tracer>> {
    match &config.tracing {
        Tracing::Off(_) => None,
        Tracing::On(on) => Some(Arc::new(Tracer::new(
            on,
            previous,
            &metrics.trace_spans,
            clock.clone(),
        ))),
    }
}

/// Rules a request can match before the bookkeeping spills to the heap.
const INLINE_RULES: usize = 4;

/// The proxy service, cheap to clone (one `Arc`).
#[derive(Debug, Clone)]
pub struct Proxy {
    shared: Arc<Shared>,
}

/// What a request runs against, loaded once per request: the policy and
/// the pools and routes (one load, not one each).
#[derive(Debug)]
struct Snapshot {
    policy: Arc<Policy>,
    routes: Arc<Routes>,
    /// `None` when tracing is off.
    tracer: Option<Arc<Tracer>>,
}

#[derive(Debug)]
struct Shared {
    /// Swapped by reloads (the policy, then the pools) and by new DNS
    /// answers (the pools).
    current: ArcSwap<Snapshot>,
    store: Arc<Store>,
    /// What to do when the store fails (`store.redis.on_error`).
    on_error: OnError,
    /// The pools and routes requests are forwarded by.
    upstreams: Upstreams,
    /// Shared with the tunnels whose messages a rule counts
    /// (`proxy/messages.rs`), which outlive their request.
    metrics: Arc<Metrics>,
    /// Every decision, hold and settlement reads and waits on this clock.
    clock: ProxyClock,
    /// Wakes exchanges that charge upstream time, once a second.
    ticker: Arc<ticker::Ticker>,
    /// Set when shutdown begins: `/readyz` turns 503.
    draining: AtomicBool,
    /// Serialises reloads: each compiles against the policy it replaces.
    reloading: std::sync::Mutex<()>,
    /// Where each request's line goes (`server.access_log`).
    access_log: AccessLog,
    /// GraphQL persisted queries learned from requests; kept across
    /// reloads, which resize it (`server.max_persisted_queries`).
    persisted_queries: Learned,
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
        let metrics = Metrics::new();
        let config = Arc::new(config);
        let upstreams = Upstreams::new(
            &config.upstreams,
            Arc::new(upstream::resolve::SystemResolver),
            metrics.upstreams.clone(),
            clock.clone(),
        );
        let access_log = AccessLog::new(
            &config.server.access_log,
            clock.clone(),
            metrics.access_log_dropped.clone(),
        );
        let tracer = tracer_for(&config, None, &metrics, &clock);
        let persisted_queries = Learned::counted(
            config.server.max_persisted_queries,
            metrics.persisted_queries.clone(),
            &config.server.persisted_queries,
        );
        let policy = Arc::new(Policy::compile(config, &metrics, &store));
        let snapshot = Snapshot {
            policy,
            routes: upstreams.load(),
            tracer,
        };
        let proxy = Proxy {
            shared: Arc::new(Shared {
                current: ArcSwap::from_pointee(snapshot),
                store: Arc::new(store),
                on_error,
                upstreams,
                metrics: Arc::new(metrics),
                ticker: ticker::Ticker::new(clock.clone()),
                clock,
                draining: AtomicBool::new(false),
                reloading: std::sync::Mutex::new(()),
                access_log,
                persisted_queries,
            }),
        };
        let weak = Arc::downgrade(&proxy.shared);
        proxy.shared.upstreams.start(Box::new(move |routes| {
            if let Some(shared) = weak.upgrade() {
                shared.publish_routes(routes);
            }
        }));
        proxy
    }

    /// The current policy snapshot.
    pub fn policy(&self) -> Arc<Policy> {
        Arc::clone(&self.shared.current.load().policy)
    }

    /// The metrics registry, for the admin listener.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// The pools and routes requests are forwarded by.
    pub fn upstreams(&self) -> &Upstreams {
        &self.shared.upstreams
    }

    /// The bucket store.
    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// Where `policy`'s requests find GraphQL persisted queries by hash;
    /// `learns`: whether a query sent with its hash is learned (a question
    /// to `POST /admin/explain` teaches nothing).
    pub fn persisted<'a>(&'a self, policy: &'a Policy, learns: bool) -> Persisted<'a> {
        self.shared.persisted(policy, learns)
    }

    /// Replaces the policy with one compiled from `config`, atomically:
    /// requests in flight finish under the policy they started with. Rules
    /// whose name, key and algorithm are unchanged keep their buckets (a
    /// changed limit carries them over as the rule's `on_change` says).
    /// `config` must be valid; settings that only take effect at start
    /// (listen addresses, workers, ...) are returned, named, and not applied.
    /// Rebuilding may walk every bucket of a changed limit, so call it off
    /// the async workers (`spawn_blocking`).
    pub fn reload(&self, config: Config) -> Vec<&'static str> {
        let shared = &*self.shared;
        let _serialised = self.recompiling();
        let old = self.policy();
        let mut config = config;
        let ignored = crate::config::keep_startup_settings(&old.config, &mut config);
        shared.publish_routes(shared.upstreams.reload(&config.upstreams));
        // Opened (again) before requests see the new policy: a file renamed
        // by logrotate is written anew from here.
        shared.access_log.configure(&config.server.access_log);
        let tracer = shared.tracer(&config, shared.current.load().tracer.as_deref());
        let server = &config.server;
        shared
            .persisted_queries
            .serve(server.max_persisted_queries, &server.persisted_queries);
        let policy = Policy::recompile(
            Arc::new(config),
            &shared.metrics,
            &shared.store,
            Some(&old),
            shared.clock.now(),
        );
        shared.publish_policy(Arc::new(policy), tracer);
        shared.metrics.config_reloads_ok.inc();
        ignored
    }

    /// Derives bucket keys with `seed` from now on, the seed the instances
    /// sharing a store agree on: the policy is compiled again with fresh
    /// in-memory tables (a shared store keeps its buckets by name, so only
    /// the local fallback's counts start over). Nothing happens when the
    /// policy already uses it.
    pub fn reseed(&self, seed: crate::store::Seed) {
        let shared = &*self.shared;
        let _serialised = self.recompiling();
        let old = self.policy();
        if old.keys.seed() == Some(seed) {
            return;
        }
        let keys = crate::key::KeyHasher::with_seed(seed, old.config.server.ipv6_prefix);
        let policy = Policy::compile_with_keys(
            Arc::clone(&old.config),
            &shared.metrics,
            &shared.store,
            keys,
        );
        let tracer = shared.current.load().tracer.clone();
        shared.publish_policy(Arc::new(policy), tracer);
        tracing::info!("bucket keys derived with the seed the instances share");
    }

    /// The shared store's key seeds as they arrive (`None` for the memory
    /// store).
    pub fn store_seeds(&self) -> Option<tokio::sync::watch::Receiver<Option<crate::store::Seed>>> {
        self.shared.store.link().map(|link| link.seeds())
    }

    /// Serialises reloads and reseeds: each compiles against the policy it
    /// replaces.
    fn recompiling(&self) -> std::sync::MutexGuard<'_, ()> {
        self.shared
            .reloading
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What deciding outside a request needs (the rate limit service):
    /// the store and its `on_error`, the clock, the metrics; nothing
    /// decided so is ever settled after, so no ticker.
    pub fn admitter(&self) -> Admitter<'_> {
        let shared = &*self.shared;
        Admitter {
            store: &shared.store,
            clock: &shared.clock,
            on_error: shared.on_error,
            metrics: &shared.metrics,
            ticker: None,
        }
    }

    /// Now, by the limiter's clock (Unix nanoseconds).
    pub fn now(&self) -> Nanos {
        self.shared.clock.now()
    }

    /// Counts a reload refused because the new config was invalid.
    pub fn reload_failed(&self) {
        self.shared.metrics.config_reloads_error.inc();
    }

    /// Opens the access log again where it is, as every reload does (a
    /// refused one too: logrotate's SIGHUP must not leave it writing to
    /// the renamed file). Blocks briefly: call it off the async workers.
    pub fn reopen_access_log(&self) {
        let running = self.policy();
        self.shared
            .access_log
            .configure(&running.config.server.access_log);
    }

    /// Writes out the access log's buffered lines, waiting `within` at
    /// most: at shutdown.
    pub fn flush_access_log(&self, within: std::time::Duration) {
        self.shared.access_log.flush(within);
    }

    /// Exports the spans still queued, waiting `within` at most: at
    /// shutdown.
    pub async fn flush_traces(&self, within: std::time::Duration) {
        let tracer = self.shared.current.load().tracer.clone();
        if let Some(tracer) = tracer {
            tracer.flush(within).await;
        }
    }

    /// The tracer of the running config, `None` when tracing is off (the
    /// rate limit service records its calls with it).
    pub fn tracer(&self) -> Option<Arc<Tracer>> {
        self.shared.current.load().tracer.clone()
    }

    /// Marks the proxy as draining (`/readyz` answers 503).
    pub fn start_draining(&self) {
        self.shared.draining.store(true, Ordering::SeqCst);
    }

    /// Whether the proxy should receive traffic.
    pub fn is_ready(&self) -> bool {
        !self.shared.draining.load(Ordering::SeqCst)
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
        // All of a request's timings come from the limiter's clock (a TSC
        // read, far cheaper than `Instant::now()` on this kind of VM).
        let started = self.shared.clock.now();
        let version = request.get().version();
        let snapshot = self.shared.current.load_full();
        let policy = &*snapshot.policy;
        let trusted = policy.client_ip.is_trusted(peer.ip());
        let id = RequestId::for_request(request.get().headers(), trusted);
        let mut span = match &snapshot.tracer {
            None => Span::none(),
            Some(tracer) => tracer.begin(request.get(), trusted, started),
        };
        // Written when dropped: with the response body once it is sent or
        // dropped, or here if the client leaves before its answer (status
        // 499, as nginx logs it).
        let mut line = match policy.config.server.access_log {
            AccessLogTarget::Off => Line::none(),
            _ => self.shared.access_log.begin(started, &id),
        };
        // gRPC calls are POSTs: a GET costs one comparison here.
        let grpc = request.get().method() == http::Method::POST
            && respond::grpc::is_grpc(request.get().headers());
        let serving = Serving {
            policy,
            shared_policy: &snapshot.policy,
            routes: &snapshot.routes,
        };
        let upstream_took = self
            .process(
                request,
                peer,
                serving,
                (started, &id),
                (line.parts(), &mut span),
                response,
            )
            .await;
        // Counted and logged as what sluice decided (a 429 is a 429), and
        // then, for a gRPC call, answered in gRPC's terms.
        let status = response.status();
        if grpc && response.body().is_own() {
            respond::grpc::answer(response);
        }
        if let Some(parts) = line.parts() {
            parts.status = status.as_u16();
            parts.upstream = upstream_took;
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
        self.shared.metrics.count_response(status);
        if !self.is_ready() && version < http::Version::HTTP_2 {
            // Draining: this is the connection's last exchange, and the
            // client should know before it sends another (nginx does the
            // same on a graceful stop). HTTP/2 clients are told by GOAWAY.
            response.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
        }
    }

    /// The phases of one request, each in its file: checks → identify →
    /// admit → forward (settling rides on the response body) → decorate.
    /// Once its outcome is known, its record goes into the access log's
    /// `line`, once (`proxy/access.rs`), and into its span when sampled
    /// (`proxy/traced.rs`); how long the upstream took, once it was
    /// forwarded, is returned.
    async fn process(
        &self,
        client: &mut ClientRequest,
        peer: SocketAddr,
        serving: Serving<'_>,
        (started, request_id): (Nanos, &RequestId),
        (line, span): (Option<&mut Parts>, &mut Span),
        response: &mut Response<ProxyBody>,
    ) -> Option<Nanos> {
        let shared = &*self.shared;
        let policy = serving.policy;
        let mut body_read = false;
        if policy.reads_body {
            match key_body::read(client, peer.ip(), policy).await {
                Ok(read) => body_read = read,
                Err(refusal) => {
                    let request = client.get();
                    return self.refuse_unchecked(
                        request,
                        peer,
                        serving,
                        (line, span),
                        response,
                        refusal,
                    );
                }
            }
        }
        let request = client.get();
        let checked = match checks::check(request, policy) {
            Ok(checked) => checked,
            Err(refusal) => {
                return self.refuse_unchecked(
                    request,
                    peer,
                    serving,
                    (line, span),
                    response,
                    refusal,
                )
            }
        };
        let token_claims = std::cell::OnceCell::new();
        let readable;
        let body_facts;
        let mut facts = identify::facts_of(request, &checked, peer.ip(), policy);
        if body_read {
            readable = key_body::readable(request, policy);
            let persisted = shared.persisted(policy, true);
            body_facts = BodyFacts::of(request, readable.view(), persisted);
            facts.body = Some(&body_facts);
        }
        let mut applicable = Applicability::default();
        let identified = identify::identify(
            &mut facts,
            &token_claims,
            policy,
            started,
            &mut applicable,
            &mut (),
        );
        let mut metered = None;
        // A policy without message rules makes no call for them (the
        // request path's cost: docs/conversation.md, "What it costs").
        let identified = match identified {
            Ok(()) if !policy.message_rules.is_empty() => {
                let handshake = upgrade::is_websocket_handshake(request);
                messages::identify(
                    handshake,
                    &mut facts,
                    &token_claims,
                    policy,
                    started,
                    &mut metered,
                )
            }
            other => other,
        };
        if let Err(refused) = identified {
            identify::count_refusal(refused, &facts, policy, started);
            let record = Record::Refused {
                facts: &facts,
                refused,
            };
            traced::note(span.recording(), &record, serving, &shared.store);
            access::note(line, record, policy);
            *response = identify::answer(refused);
            return None;
        }
        let mut ruling = Ruling::default();
        let admitter = admit::Admitter {
            store: &shared.store,
            clock: &shared.clock,
            on_error: shared.on_error,
            metrics: &shared.metrics,
            ticker: policy.bills.then_some(&shared.ticker),
        };
        let admitted =
            admit::admit_request(admitter, policy, &facts, &applicable, &mut ruling, response)
                .await;
        let record = Record::Ruled {
            facts: &facts,
            admitted,
            ruling: &ruling,
            enforced: &applicable.enforced,
        };
        traced::note(span.recording(), &record, serving, &shared.store);
        access::note(line, record, policy);
        if !admitted {
            if policy.reads_body {
                decorate::add_cost(response, policy, &applicable.enforced);
            }
            return None;
        }
        let path_and_query = forward::forwarded_path(request, &checked, policy);
        let upstream = serving.routes.route(&facts);
        let hash = upstream.hash_source().and_then(|source| {
            let sources = std::slice::from_ref(source);
            policy.keys.derive(sources, &facts, false).ok()
        });
        let forwarder = forward::Forwarder {
            upstream,
            hash,
            clock: &shared.clock,
            metrics: &shared.metrics,
            policy,
            request_id,
        };
        let forwarding = forwarder.forward(
            client,
            path_and_query,
            peer,
            (started, span),
            &mut ruling,
            response,
        );
        let forwarded = forwarding.await;
        if forwarded {
            decorate::decorate(response, policy, &ruling, applicable.retiring);
            messages::open(
                response,
                metered,
                || shared.deciding(serving),
                &shared.metrics,
            );
            if policy.reads_body {
                decorate::add_cost(response, policy, &applicable.enforced);
            }
        }
        ruling.upstream_took
    }

    /// Answers `request` with `refusal` before it was identified (a body or
    /// a request line its checks refuse), and records it: rare, so out of
    /// [`Proxy::process`]'s line.
    #[cold]
    #[inline(never)]
    fn refuse_unchecked(
        &self,
        request: &Request<ClientBody>,
        peer: SocketAddr,
        serving: Serving<'_>,
        (line, span): (Option<&mut Parts>, &mut Span),
        response: &mut Response<ProxyBody>,
        refusal: Refusal,
    ) -> Option<Nanos> {
        let record = Record::Unchecked { request, peer };
        traced::note(span.recording(), &record, serving, &self.shared.store);
        access::note(line, record, serving.policy);
        *response = respond::refusal(refusal, None);
        None
    }
}
