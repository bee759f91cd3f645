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

mod admit;
pub mod bill;
mod client_request;
pub mod deadline;
pub mod fields;
pub mod forward;
pub mod pool;
mod recent_value;
mod refusal_log;
pub mod respond;
pub mod settle;
pub mod ticker;
pub mod upgrade;

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use http::uri::PathAndQuery;
use http::{Request, Response};
use smallvec::SmallVec;

use crate::clock::{Clock, Nanos, ProxyClock};
use crate::config::{Config, MissingPolicy, StoreBackend};
use crate::key::client_ip::ForwardedHeader;
use crate::key::{path, RequestFacts};
use crate::limiter::Decision;
use crate::metrics::Metrics;
use crate::policy::{Policy, Rule, Sunset};
use crate::store::{MemoryStore, OnError, Outcome, RedisSettings, RedisStore, Store};
use admit::Admission;
pub use admit::{fill_asks, Applicable};
use bill::Failure;
pub use client_request::{ClientBody, ClientRequest};
use deadline::{BodyWatch, GuardedBody};
use forward::{ClientHop, Outbound, Upstream};
use pool::{ForwardError, PooledBody};
use refusal_log::Refused;
use respond::{ProxyBody, Refusal, Verdict};
use settle::Settlement;
use upgrade::ClientUpgrade;

/// Rules a request can match before the bookkeeping spills to the heap.
const INLINE_RULES: usize = 4;

/// The proxy service, cheap to clone (one `Arc`).
#[derive(Debug, Clone)]
pub struct Proxy {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    policy: ArcSwap<Policy>,
    store: Arc<Store>,
    /// What to do when the store fails (`store.redis.on_error`).
    on_error: OnError,
    upstream: Upstream,
    metrics: Metrics,
    /// Every decision, hold and settlement reads and waits on this clock.
    clock: ProxyClock,
    /// Wakes exchanges that charge upstream time, once a second.
    ticker: Arc<ticker::Ticker>,
    /// Set when shutdown begins: `/readyz` turns 503.
    draining: AtomicBool,
    /// Serialises reloads: each compiles against the policy it replaces.
    reloading: std::sync::Mutex<()>,
}

impl Proxy {
    /// Builds the proxy for a validated config.
    pub fn new(config: Config) -> Proxy {
        Proxy::with_clock(config, ProxyClock::default())
    }

    /// Builds the proxy on `clock` (tests hold and release requests on a
    /// [`crate::clock::ManualClock`]).
    pub fn with_clock(config: Config, clock: ProxyClock) -> Proxy {
        let max_keys = config.store.max_keys;
        let (store, on_error) = match &config.store.backend {
            StoreBackend::Memory => (Store::Memory(MemoryStore::new(max_keys)), OnError::Local),
            StoreBackend::Redis(redis) => {
                let settings = RedisSettings {
                    urls: redis.urls.clone(),
                    cluster: redis.cluster,
                    timeout: redis.timeout,
                    prefix: "sluice".into(),
                    instances: redis.instances,
                };
                match RedisStore::new(settings, max_keys) {
                    Ok(store) => (Store::Redis(store), redis.on_error),
                    // `check` validated the URL as the client reads it; a
                    // client that still refuses it leaves the fallback.
                    Err(error) => {
                        tracing::error!(%error, "the Redis store cannot be used; deciding in memory");
                        (Store::Memory(MemoryStore::new(max_keys)), OnError::Local)
                    }
                }
            }
        };
        if let Store::Redis(store) = &store {
            store.start();
        }
        Proxy::with_store(config, clock, store, on_error)
    }

    fn with_store(config: Config, clock: ProxyClock, store: Store, on_error: OnError) -> Proxy {
        let metrics = Metrics::new();
        let config = Arc::new(config);
        let upstream = Upstream::new(&config.server);
        let policy = Policy::compile(config, &metrics, &store);
        Proxy {
            shared: Arc::new(Shared {
                policy: ArcSwap::from_pointee(policy),
                store: Arc::new(store),
                on_error,
                upstream,
                metrics,
                ticker: ticker::Ticker::new(clock.clone()),
                clock,
                draining: AtomicBool::new(false),
                reloading: std::sync::Mutex::new(()),
            }),
        }
    }

    /// The current policy snapshot.
    pub fn policy(&self) -> Arc<Policy> {
        self.shared.policy.load_full()
    }

    /// The metrics registry, for the admin listener.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// The bucket store.
    pub fn store(&self) -> &Store {
        &self.shared.store
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
        let old = shared.policy.load_full();
        let mut config = config;
        let ignored = crate::config::keep_startup_settings(&old.config, &mut config);
        let policy = Policy::recompile(
            Arc::new(config),
            &shared.metrics,
            &shared.store,
            Some(&old),
            shared.clock.now(),
        );
        shared.policy.store(Arc::new(policy));
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
        let old = shared.policy.load_full();
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
        shared.policy.store(Arc::new(policy));
        tracing::info!("bucket keys derived with the seed the instances share");
    }

    /// The shared store's key seeds as they arrive (`None` for the memory
    /// store).
    pub fn store_seeds(&self) -> Option<tokio::sync::watch::Receiver<Option<crate::store::Seed>>> {
        match &*self.shared.store {
            Store::Redis(store) => Some(store.link().seeds()),
            _ => None,
        }
    }

    /// Serialises reloads and reseeds: each compiles against the policy it
    /// replaces.
    fn recompiling(&self) -> std::sync::MutexGuard<'_, ()> {
        self.shared
            .reloading
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Now, by the limiter's clock (Unix nanoseconds).
    pub fn now(&self) -> Nanos {
        self.shared.clock.now()
    }

    /// Counts a reload refused because the new config was invalid.
    pub fn reload_failed(&self) {
        self.shared.metrics.config_reloads_error.inc();
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
    /// `response`, which is [`respond::vacant`]. The request is taken from
    /// `request` if it is handed to hyper's client (a body, an upgrade), and
    /// left there if sluice answers it or forwards it as a plain exchange.
    pub async fn handle(
        &self,
        request: &mut ClientRequest,
        peer: SocketAddr,
        response: &mut Response<ProxyBody>,
    ) {
        // All of a request's timings come from the limiter's clock (a TSC
        // read, far cheaper than `Instant::now()` on this kind of VM).
        let started = self.shared.clock.now();
        let policy = self.shared.policy.load_full();
        self.process(request, peer, &policy, started, response)
            .await;
        self.shared.metrics.count_response(response.status());
    }

    /// The phases of one request: checks → identify → admit → forward
    /// (settling rides on the response body) → decorate.
    async fn process(
        &self,
        client: &mut ClientRequest,
        peer: SocketAddr,
        policy: &Policy,
        started: Nanos,
        response: &mut Response<ProxyBody>,
    ) {
        let request = client.get();
        // Checks: what must be refused before any limiter work.
        let checked = match checks(request, policy) {
            Ok(checked) => checked,
            Err(refusal) => {
                *response = respond::refusal(refusal, None);
                return;
            }
        };
        // Identify: the client, the rules that apply and each one's key.
        let token_claims = std::cell::OnceCell::new();
        let mut applicable = Applicability::default();
        let identified = identify(
            request,
            &checked,
            &token_claims,
            peer,
            policy,
            started,
            &mut applicable,
        );
        let facts = match identified {
            Ok(facts) => facts,
            Err(Unidentified::Refused(refusal, rule)) => {
                *response = respond::refusal(refusal, rule);
                return;
            }
            Err(Unidentified::Gone(rule, sunset)) => {
                *response = respond::gone(rule, sunset);
                return;
            }
        };
        let Applicability {
            enforced,
            shadowed,
            retiring,
        } = &applicable;
        let retiring = *retiring;
        // Admit: one store call, and the hold.
        let mut admission = Admission::default();
        let admitted = self
            .admit(
                policy,
                &facts,
                enforced,
                shadowed,
                retiring,
                &mut admission,
                response,
            )
            .await;
        if !admitted {
            return;
        }
        // Forward: the admission's settlement rides on the response body.
        let rewritten = match &checked.path {
            Cow::Owned(path) if policy.normalize_path => Some(path.as_str()),
            _ => None,
        };
        let path_and_query = forwarded_path(request, rewritten);
        let mut outgoing = self.outgoing(
            client,
            path_and_query,
            peer,
            policy,
            started,
            admission.held,
        );
        let mut settlement = admission.settlement.take();
        if let Some(settlement) = &mut settlement {
            settlement.forwarded(outgoing.sent);
        }
        let upstream = &self.shared.upstream;
        let outbound = match &mut outgoing.streamed {
            Some(streamed) => Outbound::Streamed(streamed),
            None => Outbound::Plain(client.get()),
        };
        let result = match settlement.as_deref_mut() {
            // Upstream time is charged every second while the answer is awaited.
            Some(settlement) if settlement.charges_elapsed() => {
                settle::ChargingWhile::new(upstream.send(outbound, &outgoing.added), settlement)
                    .await
            }
            _ => upstream.send(outbound, &outgoing.added).await,
        };
        let incoming = self.incoming(result, outgoing.sent, outgoing.client_upgrade, settlement);
        let mut forwarded = match incoming {
            Ok(forwarded) => forwarded,
            // A body cut off by its deadline or size cap is the client's fault.
            Err(error) => {
                *response = match outgoing.body_watch.cut_off() {
                    Some(cut_off) => respond::refusal(
                        Refusal::BodyCutOff(cut_off, outgoing.body_watch.version()),
                        None,
                    ),
                    None => self.upstream_failed(error),
                };
                return;
            }
        };
        // Decorate the upstream's answer.
        decorate(&mut forwarded, policy, &admission, retiring);
        *response = forwarded;
    }

    /// Admission (see [`admit`]) into `admission`, and the decision
    /// metrics. Whether the request may pass; when it may not, its answer is
    /// written into `response`.
    #[allow(clippy::too_many_arguments)]
    async fn admit<'p>(
        &self,
        policy: &'p Policy,
        facts: &RequestFacts<'_>,
        enforced: &[Applicable<'p>],
        shadowed: &[Applicable<'p>],
        retiring: Option<&Sunset>,
        admission: &mut Admission<'p>,
        response: &mut Response<ProxyBody>,
    ) -> bool {
        let shared = &*self.shared;
        let admitter = admit::Admitter {
            store: &shared.store,
            clock: &shared.clock,
            on_error: shared.on_error,
            metrics: &shared.metrics,
            ticker: policy.bills.then_some(&shared.ticker),
        };
        let admitted = admit::admit(admitter, enforced, shadowed, admission).await;
        // A request no rule applies to was not decided: timing it would
        // drag the quantiles towards zero.
        if !(enforced.is_empty() && shadowed.is_empty()) {
            shared.metrics.decision_seconds.observe(seconds(
                shared
                    .clock
                    .now()
                    // On this instance's clock: `decided_at` may be a
                    // shared store's, which another machine keeps.
                    .saturating_sub(admission.asked_at)
                    .saturating_sub(admission.held),
            ));
        }
        if admitted.is_err() {
            *response = respond::refusal(Refusal::StoreUnavailable, None);
            return false;
        }
        count_hitters(policy, facts, enforced, shadowed, admission);
        match admission.outcome {
            Outcome::Admitted => {
                count_outcomes(&admission.verdicts);
                return true;
            }
            Outcome::Banned { rule, left } => {
                let Applicable { rule, limits, .. } = enforced[rule];
                rule.counters.limited.inc();
                rule.counters.banned.inc();
                *response = respond::banned(rule, limits, left, policy.response.status);
            }
            Outcome::Limited => {
                count_outcomes(&admission.verdicts);
                for &index in &admission.bans_started {
                    let Applicable { rule, key, .. } = enforced[index];
                    let text = policy.keys.key_text(&rule.key, facts);
                    rule.ban_started(key, text, &policy.labels);
                }
                let decided_at = Duration::from_nanos(admission.decided_at);
                respond::limited(response, policy, &admission.verdicts, decided_at);
            }
        }
        respond::add_sunset_headers(response.headers_mut(), retiring);
        false
    }

    /// The admitted request rewritten for the upstream, in place
    /// (normalised path, hop-by-hop fields stripped, forwarding headers
    /// set); taken, with its body put under its deadline and size cap, only
    /// when it is not a plain exchange.
    fn outgoing(
        &self,
        client: &mut ClientRequest,
        path_and_query: PathAndQuery,
        peer: SocketAddr,
        policy: &Policy,
        started: Nanos,
        held: Nanos,
    ) -> Outgoing {
        let shared = &*self.shared;
        let hop = ClientHop {
            peer: peer.ip(),
            trusted: policy.client_ip.is_trusted(peer.ip()),
            rfc7239: policy.client_ip.header() == ForwardedHeader::Forwarded,
        };
        let request = client.get_mut();
        let handshake = upgrade::is_websocket_handshake(request);
        let client_upgrade = if handshake {
            upgrade::take_client_side(request)
        } else {
            None
        };
        let added =
            forward::prepare_request(request, &shared.upstream, path_and_query, hop, handshake);
        // One clock read ends the overhead span and starts the upstream one.
        // The overhead excludes the intentional hold: it is the latency
        // sluice adds to requests that were within their limits.
        let sent = shared.clock.now();
        shared
            .metrics
            .overhead_seconds
            .observe(seconds(sent.saturating_sub(started).saturating_sub(held)));
        let (streamed, body_watch) = if pool::is_plain(request) {
            (None, BodyWatch::no_body(request.version()))
        } else {
            let (request, body_watch) = deadline::guard(client.take());
            (Some(ClientRequest::new(request)), body_watch)
        };
        Outgoing {
            streamed,
            added,
            body_watch,
            client_upgrade,
            sent,
        }
    }

    /// The upstream's answer made the client's, carrying what the admission
    /// took (`settlement`): it is settled when the body has been sent or
    /// dropped (or a WebSocket tunnel closed), and permits return then. Its
    /// bill sees the response head first: a reported cost is charged and
    /// stripped, a 5xx or a failed exchange refunded where `refund_on` says.
    fn incoming(
        &self,
        mut result: Result<Response<PooledBody>, ForwardError>,
        sent: Nanos,
        client_upgrade: Option<ClientUpgrade>,
        mut settlement: Option<Box<Settlement>>,
    ) -> Result<Response<ProxyBody>, ForwardError> {
        let shared = &*self.shared;
        shared
            .metrics
            .upstream_seconds
            .observe(seconds(shared.clock.now().saturating_sub(sent)));
        if let Some(bill) = &mut settlement {
            match &mut result {
                Ok(response) => bill.response_began(response.status(), response.headers_mut()),
                Err(ForwardError::ClientBody) => bill.exchange_failed(Failure::ClientLeft),
                Err(_) => bill.exchange_failed(Failure::Upstream),
            }
            if !bill.needed_after_response() {
                // Nothing rides on the body: settled now (units kept).
                settlement = None;
            }
        }
        result
            .and_then(|response| forward::prepare_response(response, client_upgrade, settlement))
            .map(|response| response.map(ProxyBody::upstream))
    }

    /// Counts, logs and answers an upstream failure.
    fn upstream_failed(&self, error: ForwardError) -> Response<ProxyBody> {
        let metrics = &self.shared.metrics;
        let refusal = match error {
            ForwardError::Connect => {
                metrics.upstream_errors_connect.inc();
                Refusal::UpstreamUnreachable
            }
            ForwardError::Timeout => {
                metrics.upstream_errors_timeout.inc();
                Refusal::UpstreamTimeout
            }
            ForwardError::Other => {
                metrics.upstream_errors_other.inc();
                Refusal::UpstreamFailed
            }
            ForwardError::ClientBody => {
                return respond::refusal(Refusal::BadFraming("the request body is malformed"), None)
            }
        };
        tracing::warn!(%error, "upstream request failed");
        respond::refusal(refusal, None)
    }
}

/// The rules that apply to a request, as [`identify`] found them.
#[derive(Default)]
struct Applicability<'p> {
    enforced: SmallVec<[Applicable<'p>; INLINE_RULES]>,
    shadowed: SmallVec<[Applicable<'p>; INLINE_RULES]>,
    /// The first applicable rule being retired: its responses say so.
    retiring: Option<&'p Sunset>,
}

/// An admitted request on its way upstream.
struct Outgoing {
    /// The request taken for hyper's client, with its body guarded; `None`
    /// for a plain exchange, which is written from the client's request
    /// where it is.
    streamed: Option<ClientRequest<GuardedBody>>,
    /// Fields added as it is written (see [`pool::AddedFields`]).
    added: pool::AddedFields,
    /// Tells a body cut off by its deadline or size cap from an upstream
    /// failure.
    body_watch: BodyWatch,
    client_upgrade: Option<ClientUpgrade>,
    /// When it was sent (the end of sluice's overhead).
    sent: Nanos,
}

/// What [`checks`] found in a request it lets through.
pub struct Checked<'r> {
    /// The normalised path.
    pub path: Cow<'r, str>,
    /// The host the client addressed ([`host_of`]), read once with Host's
    /// check.
    pub host: Option<&'r str>,
}

/// Refuses what must not reach any limiter: broken framing, a bad Host, an
/// oversized target or body, a path that cannot be normalised. Returns the
/// normalised path and the host. Shared with `POST /admin/explain`, which
/// answers with [`refused`] what it would refuse.
pub fn checks<'r, B>(request: &'r Request<B>, policy: &Policy) -> Result<Checked<'r>, Refusal> {
    if let Some(refusal) = forward::bad_framing(request) {
        return Err(refusal);
    }
    let host_field = checked_host(request)?;
    if let Some(refusal) = oversized(request, policy) {
        return Err(refusal);
    }
    let path = path::normalize(request.uri().path()).map_err(Refusal::BadPath)?;
    let host = addressed_host(request, host_field);
    Ok(Checked { path, host })
}

/// The status and problem detail a request refused by [`checks`] gets, for
/// `POST /admin/explain`: read from the very response the proxy sends.
pub async fn refused(refusal: Refusal) -> (http::StatusCode, Option<String>) {
    use http_body_util::BodyExt;
    let response = respond::refusal(refusal, None);
    let status = response.status();
    let detail = match response.into_body().collect().await {
        Ok(body) => serde_json::from_slice::<serde_json::Value>(&body.to_bytes())
            .ok()
            .and_then(|problem| problem.get("detail")?.as_str().map(str::to_owned)),
        Err(_) => None,
    };
    (status, detail)
}

/// Why [`identify`] refused a request.
enum Unidentified<'p> {
    /// A denied address, or a missing key under `missing = "reject"`.
    Refused(Refusal, Option<&'p Rule>),
    /// The rule's route is retired (410).
    Gone(&'p Rule, &'p Sunset),
}

/// Who is calling (the client IP, the access lists), which rules apply and
/// each one's bucket key and limits, into `applicable` (JWT claims verified
/// lazily, once, for the first rule that keys on one, into
/// `token_claims`). Refuses a denied address, a missing key under `missing
/// = "reject"` and a retired route.
fn identify<'r, 'p>(
    request: &'r Request<ClientBody>,
    checked: &'r Checked<'r>,
    token_claims: &'r std::cell::OnceCell<Option<crate::key::jwt::Claims>>,
    peer: SocketAddr,
    policy: &'p Policy,
    started: Nanos,
    applicable: &mut Applicability<'p>,
) -> Result<RequestFacts<'r>, Unidentified<'p>> {
    let mut facts = facts_of(request, checked, peer.ip(), policy);
    let client_ip = facts.client_ip;
    if policy.deny.iter().any(|net| net.contains(&client_ip)) {
        for rule in policy.rules.iter().filter(|r| r.matcher.matches(&facts)) {
            rule.counters.denied.inc();
        }
        let gate = &policy.denied_log;
        refusal_log::log(gate, started, None, Refused::Denied, &facts, String::new);
        return Err(Unidentified::Refused(Refusal::Denied, None));
    }
    let bypass = policy.allow.iter().any(|net| net.contains(&client_ip));
    for rule in policy.rules.iter().filter(|_| !bypass) {
        match stand(rule, &mut facts, token_claims, policy, started) {
            Standing::Unmatched | Standing::Skipped => {}
            Standing::MissingKey => {
                rule.counters.missing_key.inc();
                let name = Some(&*rule.name);
                let gate = &rule.log_gate;
                refusal_log::log(gate, started, name, Refused::MissingKey, &facts, || {
                    let text = policy.keys.key_text(&rule.key, &facts);
                    policy.labels.show(&rule.key, &text)
                });
                return Err(Unidentified::Refused(Refusal::MissingKey, Some(rule)));
            }
            Standing::Gone(sunset) => {
                rule.counters.limited.inc();
                return Err(Unidentified::Gone(rule, sunset));
            }
            Standing::Applies { key, limits } => {
                if let Some(sunset) = &rule.sunset {
                    applicable.retiring.get_or_insert(sunset);
                }
                let one = Applicable { rule, key, limits };
                if rule.shadow {
                    applicable.shadowed.push(one);
                } else {
                    applicable.enforced.push(one);
                }
            }
        }
    }
    Ok(facts)
}

/// The facts rules match and key on, read from `request` (what
/// [`checks`] found in it: `checked`) sent by `peer`: the client IP is
/// resolved through the trusted proxies. Shared with `POST /admin/explain`,
/// which builds a request from its body and must see it as the proxy would.
pub fn facts_of<'r, B>(
    request: &'r Request<B>,
    checked: &'r Checked<'r>,
    peer: std::net::IpAddr,
    policy: &Policy,
) -> RequestFacts<'r> {
    RequestFacts {
        method: request.method(),
        path: &checked.path,
        query: request.uri().query(),
        host: checked.host,
        headers: request.headers(),
        client_ip: policy.client_ip.resolve(peer, request.headers()),
        claims: None,
    }
}

/// Where one rule stands on a request ([`stand`]).
#[derive(Debug, Clone, Copy)]
pub enum Standing<'p> {
    /// Its `match` does not fit the request.
    Unmatched,
    /// A key source is missing and `missing = "skip"`: the rule does not
    /// apply.
    Skipped,
    /// A key source is missing and `missing = "reject"`: the request is
    /// answered 400.
    MissingKey,
    /// Its route is retired: the request is answered 410.
    Gone(&'p Sunset),
    /// It applies, with the caller's bucket key and the limits it is held
    /// to (its tier, override or sunset step).
    Applies {
        key: crate::store::BucketKey,
        limits: &'p [crate::policy::Limit],
    },
}

/// Where `rule` stands on the request `facts` describe at `started`: the
/// request path's test, rule by rule, without counting anything (the
/// caller counts; `POST /admin/explain` only reports). JWT claims are
/// verified lazily, once, into `token_claims`, for the first rule that
/// keys on one, and kept in `facts`.
#[inline]
pub fn stand<'r, 'p>(
    rule: &'p Rule,
    facts: &mut RequestFacts<'r>,
    token_claims: &'r std::cell::OnceCell<Option<crate::key::jwt::Claims>>,
    policy: &'p Policy,
    started: Nanos,
) -> Standing<'p> {
    if !rule.matcher.matches(facts) {
        return Standing::Unmatched;
    }
    if rule.uses_jwt && facts.claims.is_none() {
        let headers = facts.headers;
        facts.claims = token_claims
            .get_or_init(|| {
                let verifier = policy.jwt.as_ref()?;
                verifier.verify(headers, started / 1_000_000_000).ok()
            })
            .as_ref();
    }
    let allow_missing = rule.missing == MissingPolicy::Shared;
    let key = match policy.keys.derive(&rule.key, facts, allow_missing) {
        Ok(key) => key,
        Err(_) if rule.missing == MissingPolicy::Skip => return Standing::Skipped,
        Err(_) => return Standing::MissingKey,
    };
    if let Some(sunset) = &rule.sunset {
        if !rule.shadow && sunset.schedule.is_gone(started) {
            return Standing::Gone(sunset);
        }
    }
    Standing::Applies {
        key,
        limits: rule.limits_for(key, facts, &policy.keys, started),
    }
}

/// Adds what sluice says about an admitted request to the upstream's
/// answer: which shadow rules would have limited it, how long it was held,
/// a retiring route's sunset, and the rate-limit headers.
fn decorate(
    response: &mut Response<ProxyBody>,
    policy: &Policy,
    admission: &Admission<'_>,
    retiring: Option<&Sunset>,
) {
    let headers = response.headers_mut();
    if !admission.would_limit.is_empty() {
        respond::add_would_limit_header(headers, &admission.would_limit);
    }
    if admission.held > 0 {
        respond::add_delay_header(headers, admission.held);
    }
    respond::add_sunset_headers(headers, retiring);
    if policy.response.on_success && !admission.unlimited {
        respond::add_rate_limit_headers(
            response.body_mut().own_fields_mut(),
            policy.response.headers,
            &admission.verdicts,
            Duration::from_nanos(admission.decided_at),
        );
    }
}

/// Counts each enforced rule's outcome once: `limited` when one of its
/// limits refused, `delayed` when one held the request (a reservation for
/// later, or a queued permit), else `allowed`. A rule's verdicts are
/// adjacent.
fn count_outcomes(verdicts: &[Verdict<'_>]) {
    let mut rest = verdicts;
    while let [first, ..] = rest {
        let run = rest
            .iter()
            .take_while(|v| std::ptr::eq(v.rule, first.rule))
            .count();
        let (of_rule, after) = rest.split_at(run);
        if !of_rule.iter().all(|v| v.decision.is_allowed()) {
            first.rule.counters.limited.inc();
        } else if of_rule
            .iter()
            .any(|v| matches!(v.decision, Decision::Hold { .. }))
        {
            first.rule.counters.delayed.inc();
        } else {
            first.rule.counters.allowed.inc();
        }
        rest = after;
    }
}

/// Counts the request in each applicable rule's heavy hitters: its key's
/// requests, and its refusals by the rules that limited or banned it,
/// which also log it (within each rule's lines a second).
fn count_hitters(
    policy: &Policy,
    facts: &RequestFacts<'_>,
    enforced: &[Applicable<'_>],
    shadowed: &[Applicable<'_>],
    admission: &Admission<'_>,
) {
    let now = admission.decided_at;
    let text = |applicable: &Applicable<'_>| policy.keys.key_text(&applicable.rule.key, facts);
    let refused_by = |applicable: &Applicable<'_>| match admission.outcome {
        Outcome::Admitted => false,
        Outcome::Banned { rule, .. } => std::ptr::eq(enforced[rule].rule, applicable.rule),
        Outcome::Limited => admission
            .verdicts
            .iter()
            .any(|v| std::ptr::eq(v.rule, applicable.rule) && !v.decision.is_allowed()),
    };
    let refusal = match admission.outcome {
        Outcome::Banned { .. } => Refused::Banned,
        _ => Refused::Limited,
    };
    for (index, applicable) in enforced.iter().chain(shadowed).enumerate() {
        let rule = applicable.rule;
        let refused = index < enforced.len() && refused_by(applicable);
        let key = applicable.key;
        rule.hitters.count(key, refused, now, || text(applicable));
        if refused {
            let name = Some(&*rule.name);
            refusal_log::log(&rule.log_gate, now, name, refusal, facts, || {
                policy.labels.show(&rule.key, &text(applicable))
            });
        }
    }
}

/// Nanoseconds as the seconds Prometheus histograms take.
#[inline]
fn seconds(nanos: Nanos) -> f64 {
    nanos as f64 / 1e9
}

/// A request target longer than `max_uri_bytes` (414), or a declared body
/// larger than `max_body_bytes` (413), answered before any limiter work.
fn oversized<B>(request: &Request<B>, policy: &Policy) -> Option<Refusal> {
    let uri = request.uri();
    let target = uri.path_and_query().map_or(0, |pq| pq.as_str().len())
        + uri.authority().map_or(0, |a| a.as_str().len());
    if target > policy.max_uri_bytes {
        return Some(Refusal::UriTooLong);
    }
    if policy.max_body_bytes > 0 {
        // hyper has already rejected malformed or conflicting lengths.
        let declared = fields::get(request.headers(), &http::header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if declared.is_some_and(|length| length > policy.max_body_bytes) {
            return Some(Refusal::BodyTooLarge);
        }
    }
    None
}

/// RFC 9112 §3.2: an HTTP/1.1 request must carry exactly one Host line with
/// a valid value, else 400 (hyper does not check). HTTP/1.0 may omit it, and
/// HTTP/2 carries `:authority`. With an absolute-form target the target's
/// authority is what sluice routes and keys by ([`host_of`]); Host must
/// still be there.
fn checked_host<B>(request: &Request<B>) -> Result<Option<&http::HeaderValue>, Refusal> {
    let headers = request.headers();
    let host = fields::get(headers, &http::header::HOST);
    // A map in which no name repeats cannot hold two Host lines: the second
    // lookup is only needed when some name does.
    if headers.len() != headers.keys_len()
        && headers.get_all(http::header::HOST).iter().nth(1).is_some()
    {
        return Err(Refusal::BadHost(
            "the request carries more than one Host header",
        ));
    }
    match host {
        None if request.version() == http::Version::HTTP_11 => Err(Refusal::BadHost(
            "an HTTP/1.1 request must carry a Host header",
        )),
        Some(value) if !valid_host(value.as_bytes()) => Err(Refusal::BadHost(
            "the Host header is not a valid host or host:port",
        )),
        _ => Ok(host),
    }
}

/// `uri-host [ ":" port ]` (RFC 3986): an IP literal in brackets, or a
/// registered name or IPv4 address — but not the list separator `,` that
/// would make it several hosts — then digits after a colon. Empty is allowed
/// (for a target without an authority, RFC 9112 §3.2). Checked byte by byte
/// through a table: it runs on every request, and parsing an `Authority`
/// would copy.
fn valid_host(value: &[u8]) -> bool {
    let port = match value {
        [] => return true,
        [b'[', rest @ ..] => {
            let Some(end) = rest.iter().position(|&b| b == b']') else {
                return false;
            };
            let literal = &rest[..end];
            if literal.is_empty()
                || !literal
                    .iter()
                    .all(|b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.'))
            {
                return false;
            }
            &rest[end + 1..]
        }
        _ => {
            // `:` is not a reg-name byte, so the name ends at the port, or at
            // the first byte that makes the value invalid.
            let end = value
                .iter()
                .position(|&b| !REG_NAME[usize::from(b)])
                .unwrap_or(value.len());
            if end == 0 {
                return false;
            }
            &value[end..]
        }
    };
    match port {
        [] => true,
        [b':', digits @ ..] => digits.iter().all(u8::is_ascii_digit),
        _ => false,
    }
}

/// Which bytes a registered name may hold: unreserved / pct-encoded /
/// sub-delims of RFC 3986, without `,`.
static REG_NAME: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        let b = byte as u8;
        table[byte] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'%'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b';'
                    | b'='
            );
        byte += 1;
    }
    table
};

/// The host the client addressed, without port: the URI's authority
/// (absolute-form, HTTP/2 `:authority`) or the Host header.
pub fn host_of<B>(request: &Request<B>) -> Option<&str> {
    addressed_host(request, request.headers().get(http::header::HOST))
}

/// [`host_of`], given the request's Host field (which [`checks`] has
/// already looked up).
fn addressed_host<'r, B>(
    request: &'r Request<B>,
    host_field: Option<&'r http::HeaderValue>,
) -> Option<&'r str> {
    if let Some(host) = request.uri().host() {
        return Some(host);
    }
    Some(strip_port(host_field?.to_str().ok()?))
}

/// The host of a `Host` value: `[v6]` of `[v6]:port`, `name` of
/// `name:port`. By bytes: it runs on every request, and `str`'s pattern
/// search cost four times as much under callgrind.
fn strip_port(host: &str) -> &str {
    let bytes = host.as_bytes();
    let end = if bytes.first() == Some(&b'[') {
        bytes
            .iter()
            .position(|&b| b == b']')
            .map_or(bytes.len(), |close| close + 1)
    } else {
        bytes
            .iter()
            .rposition(|&b| b == b':')
            .unwrap_or(bytes.len())
    };
    // Both ends are at an ASCII byte or the end: a char boundary.
    &host[..end]
}

/// The path and query the upstream receives: `rewritten` (the normalised
/// path, when normalisation changed it and `normalize_path` is on) with the
/// query unchanged, otherwise what the client sent.
fn forwarded_path<B>(request: &Request<B>, rewritten: Option<&str>) -> PathAndQuery {
    let original = request
        .uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    match rewritten {
        Some(path) => {
            // Only allocates when the client sent a non-normal path.
            let rebuilt = match request.uri().query() {
                Some(query) => format!("{path}?{query}"),
                None => path.to_owned(),
            };
            PathAndQuery::try_from(rebuilt).unwrap_or(original)
        }
        None if original.path().is_empty() => PathAndQuery::from_static("/"),
        None => original,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_one_host_with_an_optional_port() {
        for good in [
            "example.com",
            "example.com:8080",
            "[::1]:80",
            "10.0.0.1",
            "a-b_c~d%20!$&'()*+;=",
            "a:",
            "",
        ] {
            assert!(valid_host(good.as_bytes()), "{good}");
        }
        for bad in [
            "a, b", "a,b", "a b", "user@a", "a/b", "a:port", "[::1", "a\tb", ":80", "a:1:2", "[]",
            "[::1]x", "[::1]:8x", "h\u{e9}",
        ] {
            assert!(!valid_host(bad.as_bytes()), "{bad}");
        }
    }

    #[test]
    fn ports_are_stripped_from_hosts() {
        assert_eq!(strip_port("example.com:8080"), "example.com");
        assert_eq!(strip_port("example.com"), "example.com");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
        assert_eq!(strip_port("[::1"), "[::1");
        assert_eq!(strip_port("a:b:8080"), "a:b");
        assert_eq!(strip_port(""), "");
    }
}
