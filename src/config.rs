//! Configuration: the TOML file as written by the operator ([`raw`]) and the
//! validated domain types the rest of sluice is built from (this module).
//!
//! Loading is split load → parse → validate. [`Config::from_toml`] touches
//! the filesystem and the environment only for `[identity.jwt]`'s key
//! material and tracing's `OTEL_*` variables, so tests feed it strings. Every problem found is
//! reported at once, each with the line and column of the offending value
//! ([`ConfigErrors`]). This module must not know about requests or stores; the
//! proxy compiles a [`Config`] into its own request-path snapshot.

mod ban;
mod calendar;
mod calls;
mod charge;
mod describe;
mod errors;
mod identity;
mod keys;
mod limits;
mod matching;
mod on_limit;
pub mod raw;
mod reserve;
mod rules;
mod server;
mod service;
mod startup;
mod store;
mod sunset;
#[cfg(test)]
mod testing;
mod trace;
mod unit;
mod units;
mod upstreams;
mod validate;
mod variants;
mod weights;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Uri};
use ipnet::IpNet;

pub use crate::key::client_ip::ForwardedHeader;
pub use crate::key::fold::PathsAlike;
pub use crate::key::jwt::{ClaimPath, JwtAlgorithm, JwtConfig, JwtKey};
pub use crate::key::KeySource;
pub use crate::limiter::Rate;
pub use describe::{
    describe_capacity, describe_limits, describe_match, describe_upstream, format_limit,
    format_limit_period, format_period, format_rate, joined,
};
pub use errors::{ConfigError, ConfigErrors};
pub use startup::keep_startup_settings;
pub use store::shown_redis_url;
pub use trace::{ParentRule, Propagators, Shown, Tracing, TracingConfig, TracingExport};
pub use units::{format_timestamp, parse_duration, parse_rate, parse_timestamp};

/// The whole validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerConfig,
    pub admin: AdminConfig,
    pub store: StoreConfig,
    pub response: ResponseConfig,
    pub access: AccessConfig,
    /// `[identity]`: how callers prove who they are (JWT).
    pub identity: IdentityConfig,
    /// Rules in file order.
    pub rules: Vec<RuleConfig>,
    /// The pools requests are forwarded to, and the routes between them.
    pub upstreams: UpstreamsConfig,
    /// `[rls]`: where Envoy's rate limit service is answered, if anywhere.
    pub rls: Option<RlsConfig>,
    /// `[tracing]` and the `OTEL_*` variables, resolved.
    pub tracing: Tracing,
    /// Non-fatal findings (`check` prints them to stderr).
    pub warnings: Vec<String>,
}

/// A `cost = "graphql"` rule's `unreadable`: what a request whose cost
/// cannot be read gets (docs/conversation.md, "No query is free").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unreadable {
    /// Answered 400, nothing taken.
    #[default]
    Refuse,
    /// Charged this many units (for each operation of a batch that cannot
    /// be read).
    Charge(u64),
}

/// `[server]`.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// Runtime worker threads; 0 = one per CPU.
    pub workers: usize,
    pub trusted_proxies: Vec<IpNet>,
    pub connect_timeout: Duration,
    pub upstream_timeout: Duration,
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    pub shutdown_grace: Duration,
    /// `shutdown_delay`: how long a SIGTERM keeps the listener serving with
    /// `/readyz` at 503 before the drain, so that load balancers stop
    /// sending first (docs/operations.md, "Shutting down").
    pub shutdown_delay: Duration,
    pub normalize_path: bool,
    /// `paths_alike`: what the upstream serves alike, folded in the paths
    /// rules match and `path` keys are built on (docs/configuration.md,
    /// "Paths an upstream treats alike").
    pub paths_alike: PathsAlike,
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub max_uri_bytes: usize,
    /// 0 = no limit.
    pub max_body_bytes: u64,
    /// The most of a request body read for `body:` and `graphql:` keys
    /// (docs/conversation.md); a longer body's such keys are missing.
    pub max_key_body_bytes: usize,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
    pub send_timeout: Duration,
    /// `tunnel_idle_timeout`: an upgraded connection (a WebSocket tunnel)
    /// silent both ways this long is closed, with a Close frame 1001 to
    /// each side (docs/conversation.md, "WebSocket messages").
    pub tunnel_idle_timeout: Duration,
    /// `max_requests_per_connection`: requests a client connection carries
    /// at most; the last one's answer says `Connection: close`, an HTTP/2
    /// connection is sent GOAWAY (docs/edge-behaviour.md, "Slow clients and
    /// deadlines").
    pub max_requests_per_connection: u32,
    /// `max_message_bytes`: the largest WebSocket message (payload bytes
    /// across its fragments) a tunnel a `unit = "message"` rule applies to
    /// passes; a larger one closes the connection with 1009.
    pub max_message_bytes: u64,
    /// `max_persisted_queries`: GraphQL persisted-query documents learned
    /// from requests, at most (docs/conversation.md, "No query is free").
    pub max_persisted_queries: usize,
    /// `persisted_queries`: the documents of an Apollo persisted query
    /// manifest, by hash (empty without one).
    pub persisted_queries: std::sync::Arc<crate::key::graphql::persisted::Manifest>,
    pub forwarded_header: ForwardedHeader,
    pub ipv6_prefix: u8,
    /// `proxy_protocol`: every connection opens with a PROXY protocol header
    /// from a trusted proxy (docs/edge.md, "Behind a load balancer").
    pub proxy_protocol: bool,
    /// `upstream_ca`: the authorities an https upstream is verified
    /// against; `None` = the system's roots. Pools inherit it.
    pub upstream_ca: Option<PathBuf>,
    /// `access_log`: where each request's line goes.
    pub access_log: AccessLogTarget,
    /// `access_log_keys`: key sources each access log line records in its
    /// `keys` besides those the rules key and tier on (docs/replay.md).
    pub access_log_keys: Vec<KeySource>,
    /// `[server.tls]`: HTTPS on `listen`.
    pub tls: Option<TlsListenerConfig>,
}

/// Where requests go (docs/upstreams.md): the pools, `[server] upstream`'s
/// URL among them as the pool `default`, and the routes between them.
#[derive(Debug, Clone)]
pub struct UpstreamsConfig {
    /// Every pool, in file order; a URL in `[server] upstream` is the pool
    /// [`DEFAULT_POOL`], first.
    pub pools: Vec<UpstreamConfig>,
    /// `[[route]]`s in file order: the first whose match fits wins.
    pub routes: Vec<RouteConfig>,
    /// The index in `pools` of the pool no route takes the requests of.
    pub default: usize,
    /// `server.paths_alike`: routes match on the folded path, as rules do.
    pub paths_alike: PathsAlike,
}

/// The name of the pool `[server] upstream = "<URL>"` makes.
pub const DEFAULT_POOL: &str = "default";

impl UpstreamsConfig {
    /// The pool requests go to when no route fits.
    pub fn default_pool(&self) -> &UpstreamConfig {
        &self.pools[self.default]
    }
}

/// One `[[upstream]]`: a pool of servers.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    pub name: String,
    /// In file order; all `http://` or all `https://`.
    pub servers: Vec<ServerUrl>,
    pub protocol: UpstreamProtocol,
    pub balance: Balance,
    /// Host names are resolved again this often.
    pub resolve_every: Duration,
    /// Further attempts, each on another server.
    pub retries: u32,
    /// Active checks; `None`: off.
    pub health: Option<HealthCheck>,
    /// Passive checks; `None`: `eject = false`.
    pub eject: Option<Eject>,
    /// More than this share of the servers out: send to all (panic).
    pub max_share: f64,
    pub connect_timeout: Duration,
    pub upstream_timeout: Duration,
    /// `upstream_ca` (the pool's own, or `[server]`'s).
    pub upstream_ca: Option<PathBuf>,
    /// The authorities its https servers are verified against, loaded when
    /// the config was validated; `None` for http:// servers.
    pub roots: Option<Arc<rustls::RootCertStore>>,
}

impl UpstreamConfig {
    /// Whether its servers speak TLS.
    pub fn https(&self) -> bool {
        self.servers.first().is_some_and(ServerUrl::https)
    }
}

/// One entry of `servers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUrl {
    /// Scheme and authority, path `/`.
    pub url: Uri,
    /// At least 1.
    pub weight: u32,
}

impl ServerUrl {
    /// The URL's host, as a URL writes it (an IPv6 address in brackets).
    pub fn host(&self) -> &str {
        self.url.host().unwrap_or("127.0.0.1")
    }

    /// Whether it is an `https://` URL.
    pub fn https(&self) -> bool {
        self.url.scheme_str() == Some("https")
    }

    /// The URL's port, or its scheme's.
    pub fn port(&self) -> u16 {
        let default = if self.https() { 443 } else { 80 };
        self.url.port_u16().unwrap_or(default)
    }

    /// `host:port` as written (the `Host` of a request that named none).
    pub fn authority(&self) -> String {
        self.url.authority().map_or_else(
            || format!("{}:{}", self.host(), self.port()),
            |a| a.as_str().to_owned(),
        )
    }

    /// The URL without the path sluice adds: `http://10.0.0.1:3000`.
    pub fn written(&self) -> String {
        format!(
            "{}://{}",
            self.url.scheme_str().unwrap_or("http"),
            self.authority()
        )
    }
}

/// An upstream's `protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamProtocol {
    Http1,
    /// HTTP/2 with prior knowledge, over TCP.
    H2c,
    /// HTTP/2 over TLS.
    H2,
    /// https: ALPN decides; http: HTTP/1.1.
    Auto,
}

/// An upstream's `balance`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Balance {
    /// Two random choices, weighted; fewer in flight wins.
    LeastRequest,
    /// Weighted, in turn.
    RoundRobin,
    /// The same value of the key source to the same server (rendezvous).
    Hash(KeySource),
}

/// An upstream's `health`: active checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// Origin-form, starting with `/`.
    pub path: String,
    pub interval: Duration,
    pub timeout: Duration,
    /// Failures in a row that take a server out.
    pub fails: u32,
    /// Passes in a row that bring it back.
    pub passes: u32,
    /// `Host` of a check; `None`: the server URL's host and port.
    pub host: Option<String>,
}

/// An upstream's `eject`: passive checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eject {
    /// Failures in a row that take a server out.
    pub after: u32,
    /// How long, the first time (doubled when taken out again).
    pub duration: Duration,
}

/// One `[[route]]`.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    pub matcher: MatchConfig,
    /// The index in [`UpstreamsConfig::pools`] of the pool it sends to.
    pub upstream: usize,
}

/// `[server.tls]` (docs/edge.md, "TLS").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsListenerConfig {
    /// `certs`, in file order: the first is served when SNI picks none.
    pub certs: Vec<CertPair>,
    /// `http3`: HTTP/3 over QUIC on the listener's UDP port too.
    pub http3: bool,
    /// `quic_retry`: when a QUIC client's address is proved by a Retry
    /// before its handshake.
    pub quic_retry: QuicRetry,
}

/// `server.tls.quic_retry` (docs/edge.md, "HTTP/3"): when a QUIC client
/// whose address is not proved yet is sent a Retry (RFC 9000 §8.1) rather
/// than a handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuicRetry {
    /// `"always"`.
    Always,
    /// `"never"`: a completed handshake proves the address.
    Never,
    /// A number: once at least this many handshakes are in progress.
    Busy(u32),
}

impl Default for QuicRetry {
    fn default() -> QuicRetry {
        QuicRetry::Busy(100)
    }
}

/// A certificate chain and its private key, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// `server.access_log` (docs/edge.md, "The access log").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AccessLogTarget {
    /// `"off"`, the default.
    #[default]
    Off,
    /// `"stdout"`.
    Stdout,
    /// A file path, appended to and reopened on every reload.
    File(PathBuf),
}

/// `[rls]`: the rate limit service (docs/rate-limit-service.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RlsConfig {
    /// gRPC over h2c: `envoy.service.ratelimit.v3.RateLimitService` and
    /// `grpc.health.v1.Health`.
    pub listen: SocketAddr,
}

/// `[admin]`.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    pub listen: SocketAddr,
    /// Name of the environment variable holding the admin bearer token.
    pub token_env: String,
    /// Show credential keys in clear in logs and admin views
    /// (docs/operations.md, "Keys in logs and admin views").
    pub reveal_keys: bool,
}

impl AdminConfig {
    /// The admin token, from the variable `token_env` names (unset or
    /// empty: no token).
    pub fn token(&self) -> Option<String> {
        std::env::var(&self.token_env)
            .ok()
            .filter(|token| !token.is_empty())
    }
}

/// `[store]`.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub backend: StoreBackend,
    /// Bound on tracked buckets, all rules together.
    pub max_keys: usize,
}

/// `store.backend`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreBackend {
    Memory,
    /// `backend = "redis"`, with `[store.redis]`.
    Redis(RedisConfig),
}

/// `[store.redis]`. Its `Debug` masks the URLs' passwords.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// `mode`: how decisions use Redis.
    pub mode: RedisMode,
    /// `url` (one entry: `redis://[user:password@]host:port[/db]`, or
    /// `rediss://` for TLS), or `urls`: some nodes of a Redis Cluster.
    pub urls: Vec<String>,
    /// `cluster`: the nodes are a Redis Cluster's.
    pub cluster: bool,
    /// `timeout`: the longest a decision waits for Redis.
    pub timeout: Duration,
    /// `on_error`: what decides while Redis fails.
    pub on_error: OnError,
    /// `settle_retry_for`: how long a settlement (or a hybrid sync) Redis
    /// does not take is retried before it is given up.
    pub settle_retry_for: Duration,
    /// `instances`: how many sluice instances share this Redis (each
    /// enforces its share of every limit while Redis is down); 0 = learn
    /// it from the instances' heartbeats.
    pub instances: u64,
    /// `password_env`: the variable holding the password for AUTH (it
    /// wins over a password in the URLs).
    pub password_env: Option<String>,
    /// `ca`: the authorities a `rediss://` server is verified against;
    /// `None` = the system's roots.
    pub ca: Option<PathBuf>,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let RedisConfig {
            mode,
            urls,
            cluster,
            timeout,
            on_error,
            settle_retry_for,
            instances,
            password_env,
            ca,
        } = self;
        let urls: Vec<_> = urls.iter().map(|url| shown_redis_url(url)).collect();
        f.debug_struct("RedisConfig")
            .field("mode", mode)
            .field("urls", &urls)
            .field("cluster", cluster)
            .field("timeout", timeout)
            .field("on_error", on_error)
            .field("settle_retry_for", settle_retry_for)
            .field("instances", instances)
            .field("password_env", password_env)
            .field("ca", ca)
            .finish()
    }
}

/// `store.redis.mode` (docs/multi-instance.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisMode {
    /// `"strict"`: every decision is one atomic call in Redis.
    Strict,
    /// `"hybrid"`: every decision is made in memory; consumption is
    /// exchanged with Redis every `sync_interval`, off the request path.
    Hybrid { sync_interval: Duration },
}

/// `store.redis.on_error`: what the proxy does when the store fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnError {
    /// `"local"`: decide with the in-memory store instead, each instance
    /// enforcing its share of every limit.
    #[default]
    Local,
    /// `"allow"`: forward every request unlimited.
    Allow,
    /// `"deny"`: answer 503.
    Deny,
}

/// `[response]`.
#[derive(Debug, Clone)]
pub struct ResponseConfig {
    /// Status for limited requests (default 429).
    pub status: http::StatusCode,
    pub headers: HeaderStyle,
    /// Also add the rate-limit headers to forwarded responses.
    pub on_success: bool,
}

/// `response.headers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderStyle {
    /// `X-RateLimit-*` only.
    Legacy,
    /// `RateLimit-Policy` / `RateLimit` only.
    Ietf,
    Both,
    None,
}

/// `[access]`.
#[derive(Debug, Clone, Default)]
pub struct AccessConfig {
    pub allow: Vec<IpNet>,
    pub deny: Vec<IpNet>,
}

/// One `[[rule]]`.
#[derive(Debug, Clone)]
pub struct RuleConfig {
    pub name: String,
    pub matcher: MatchConfig,
    /// Key sources, joined in this order into one bucket key. Never empty.
    pub key: Vec<KeySource>,
    pub missing: MissingPolicy,
    pub algorithm: AlgorithmKind,
    /// Every limit that must hold, in file order. Never empty, except for
    /// `concurrency`, which has no rate: its bound is `max_in_flight`.
    pub limits: Vec<LimitConfig>,
    /// Units taken per request; at least 1. At most every open limit's
    /// capacity, except for `leaky_bucket` (a larger cost just takes longer to
    /// leave); always 1 for `concurrency`.
    pub cost: u64,
    /// `cost = "graphql"`: each request takes its GraphQL query's cost
    /// (docs/conversation.md); `cost` is then 1 and unused: a query whose
    /// cost cannot be read gets `unreadable`.
    pub graphql_cost: bool,
    /// With `graphql_cost`: what a request whose cost cannot be read gets.
    pub unreadable: Unreadable,
    pub shadow: bool,
    /// What happens to a request over its budget. Always `Delay` for
    /// `leaky_bucket`, whose `max_queue` is its `burst` (the limit's capacity;
    /// 0 only for a closed route, a COUNT of 0).
    pub on_limit: OnLimit,
    /// `concurrency`: requests in flight per key; `adaptive`: the ceiling
    /// of the limit it learns (default 100 for both); `None` for other
    /// algorithms.
    pub max_in_flight: Option<u64>,
    /// `adaptive` only: the floor of the limit it learns (default 1), at
    /// most `max_in_flight`.
    pub min_in_flight: Option<u64>,
    /// `tiers`: limits chosen by the value of one key source.
    pub tiers: Option<Tiers>,
    /// `overrides`: limits for individual bucket keys (checked before tiers).
    pub overrides: Vec<Override>,
    /// `sunset`: the limit falls step by step to retire an API version.
    pub sunset: Option<SunsetConfig>,
    /// `ban`: callers limited too often are refused for a while.
    pub ban: Option<BanConfig>,
    /// What a reload that changes this rule's limits does to its buckets.
    pub on_change: OnChange,
    /// `charge`: units taken after the response, on top of `cost`.
    pub charge: Option<Charge>,
    /// `reserve`: with a `charge`, units taken at admission in place of
    /// `cost` and settled against the charge.
    pub reserve: Option<Reserve>,
    /// `refund_on`: when the admission cost is given back.
    pub refund_on: RefundOn,
    /// `unit`: what the rule counts, requests or the WebSocket messages
    /// clients send on the tunnels its handshakes open.
    pub unit: Unit,
}

/// `unit`: what a rule counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unit {
    /// Each request its `match` fits.
    #[default]
    Request,
    /// Each data message a client sends on a WebSocket tunnel opened by a
    /// handshake its `match` fits; never the handshake itself.
    Message,
}

impl Unit {
    /// As the config writes it.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Request => "request",
            Unit::Message => "message",
        }
    }
}

/// `charge`: what a request costs beyond its admission, known only once
/// the exchange is under way (docs/charging.md).
#[derive(Debug, Clone, PartialEq)]
pub struct Charge {
    /// Each source with its weight, in the order written (a lone source
    /// weighs 1). Never empty.
    pub sources: Vec<Weighted>,
    /// What each source whose value never arrives costs.
    pub missing: MissingCharge,
}

/// What a charge source whose value never arrives costs (the client left,
/// the stream broke, the field was absent or malformed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingCharge {
    /// `charge_missing` units for each such source (not weighted); 0 on a
    /// rule that neither reserves nor sets it.
    Units(u64),
    /// A rule with `reserve` and no `charge_missing`: the whole
    /// reservation is kept, nothing given back, so hanging up before the
    /// usage is reported is never cheaper than waiting for it
    /// (docs/ai-budgets.md, "Nothing is free by hanging up").
    KeepReservation,
}

/// One source of a charge (or of a reservation) and what each of its
/// units weighs.
#[derive(Debug, Clone, PartialEq)]
pub struct Weighted<S = ChargeSource> {
    pub source: S,
    /// Finite, at least 0.
    pub weight: f64,
}

/// `reserve` and `reserve_missing`: what a request with a `charge` takes at
/// admission in place of `cost`, settled against the charge when it is
/// known (docs/ai-budgets.md).
#[derive(Debug, Clone, PartialEq)]
pub struct Reserve {
    pub amount: Reservation,
    /// `reserve_missing`: the reservation of a request one of whose sources
    /// is missing or malformed; `None`: the smallest capacity of the
    /// caller's limits, the most it could take.
    pub missing: Option<u64>,
}

/// How many units a request reserves.
#[derive(Debug, Clone, PartialEq)]
pub enum Reservation {
    /// The same number for every request.
    Units(u64),
    /// The weighted sum of what the request says of itself, rounded up.
    /// Never empty.
    Sources(Vec<Weighted<ReserveSource>>),
}

/// What a reservation is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReserveSource {
    /// `"body:<pointer>"`: a non-negative number in the JSON request body.
    Body(crate::body_scan::Pointer),
    /// `"request_bytes"`: the request body's length.
    RequestBytes,
}

impl Reserve {
    /// Whether the reservation is read from the request's body (a
    /// `body:` value, or a length that may have to be counted).
    pub fn reads_body(&self) -> bool {
        matches!(self.amount, Reservation::Sources(_))
    }

    /// Whether a `body:` value is among its sources (not the length alone).
    pub fn reads_values(&self) -> bool {
        match &self.amount {
            Reservation::Units(_) => false,
            Reservation::Sources(sources) => sources
                .iter()
                .any(|weighted| matches!(weighted.source, ReserveSource::Body(_))),
        }
    }

    /// The most a request can reserve within `capacity` (a larger one is
    /// refused): what a held request may take.
    pub fn most(&self, capacity: u64) -> u64 {
        match self.amount {
            Reservation::Units(units) => units,
            Reservation::Sources(_) => capacity,
        }
    }
}

/// Where a charge's units come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChargeSource {
    /// `"elapsed_ms"`: milliseconds from forwarding the request (after any
    /// hold) to the end of the response body.
    ElapsedMs,
    /// `"header:<name>"`: units the upstream reports in this response
    /// header or trailer (stripped before the client sees it).
    Header(http::HeaderName),
    /// `"json:<pointer>"`: a number at this pointer in the response body,
    /// read as it streams.
    Json(crate::body_scan::Pointer),
    /// `"request_bytes"`: the bytes of the request body as it is forwarded
    /// to the upstream (not its head, not its chunk framing).
    RequestBytes,
    /// `"response_bytes"`: the bytes of the response body as it passes to
    /// the client (not its head, not its chunk framing).
    ResponseBytes,
}

impl ChargeSource {
    /// Whether sluice measures this source itself as the exchange runs
    /// (upstream time, body bytes): its value always arrives, so
    /// `charge_missing` never applies to it.
    pub fn is_measured(&self) -> bool {
        matches!(
            self,
            ChargeSource::ElapsedMs | ChargeSource::RequestBytes | ChargeSource::ResponseBytes
        )
    }
}

impl Charge {
    /// Whether a source charges upstream time (so the bill runs until the
    /// response body ends, ticking).
    pub fn charges_elapsed(&self) -> bool {
        self.charges(&ChargeSource::ElapsedMs)
    }

    /// Whether `source` is one of this charge's sources.
    pub fn charges(&self, source: &ChargeSource) -> bool {
        self.sources
            .iter()
            .any(|weighted| weighted.source == *source)
    }
}

impl<S> Weighted<S> {
    /// The units charged for `value` of this source: value × weight,
    /// rounded up to a whole unit (a product within a billionth of a whole
    /// number is that number, so `10 × 0.3` is 3, not 4), saturating.
    pub fn units(&self, value: f64) -> u64 {
        round_up(value * self.weight)
    }

    /// The units charged for a whole `value` (a header's): exact while the
    /// weight is whole.
    pub fn whole_units(&self, value: u64) -> u64 {
        if self.weight.fract() == 0.0 && self.weight < u64::MAX as f64 {
            value.saturating_mul(self.weight as u64)
        } else {
            self.units(value as f64)
        }
    }
}

/// A weighted measure as whole units: rounded up (a product within a
/// billionth of a whole number is that number, so `10 × 0.3` is 3, not
/// 4), saturating.
pub fn round_up(product: f64) -> u64 {
    let nearest = product.round();
    let units = if (product - nearest).abs() <= 1e-9 * nearest.max(1.0) {
        nearest
    } else {
        product.ceil()
    };
    // `as` saturates (and maps NaN, impossible here, to 0).
    units as u64
}

/// `refund_on`: the ends of an exchange that give the admission cost back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RefundOn {
    /// `"upstream_error"`: sluice could not get an answer (connect error,
    /// timeout, a broken exchange).
    pub upstream_error: bool,
    /// `"client_abort"`: the client left before the response began.
    pub client_abort: bool,
    /// Status classes (`"5xx"`) and codes (`"404"`), judged by the status
    /// the client got.
    pub statuses: StatusSet,
}

/// A set of HTTP status codes (100–599): a bit each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatusSet([u64; 8]);

impl StatusSet {
    /// Adds `code` (100–599; others are ignored).
    pub fn insert(&mut self, code: u16) {
        if let Some(bit) = code.checked_sub(100).filter(|bit| *bit < 500) {
            self.0[usize::from(bit / 64)] |= 1 << (bit % 64);
        }
    }

    /// Whether `code` is in the set.
    #[inline]
    pub fn contains(&self, code: u16) -> bool {
        code.checked_sub(100)
            .filter(|bit| *bit < 500)
            .is_some_and(|bit| self.0[usize::from(bit / 64)] & (1 << (bit % 64)) != 0)
    }

    /// Whether no code is in the set.
    pub fn is_empty(&self) -> bool {
        self.0 == [0; 8]
    }

    /// The set as the config writes it: a whole class as `"5xx"`, other
    /// codes one by one, ascending.
    pub fn names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for class in 1..=5u16 {
            let codes = class * 100..class * 100 + 100;
            if codes.clone().all(|code| self.contains(code)) {
                names.push(format!("{class}xx"));
            } else {
                names.extend(
                    codes
                        .filter(|&code| self.contains(code))
                        .map(|c| c.to_string()),
                );
            }
        }
        names
    }
}

impl RefundOn {
    /// Whether no end of an exchange refunds anything.
    pub fn is_empty(&self) -> bool {
        *self == RefundOn::default()
    }

    /// Whether an answer of `status` gives the cost back.
    #[inline]
    pub fn refunds_status(&self, status: http::StatusCode) -> bool {
        self.statuses.contains(status.as_u16())
    }

    /// The cases as the config writes them (docs/charging.md): statuses,
    /// then `upstream_error` and `client_abort`.
    pub fn names(&self) -> Vec<String> {
        let mut names = self.statuses.names();
        for (on, name) in [
            (self.upstream_error, "upstream_error"),
            (self.client_abort, "client_abort"),
        ] {
            if on {
                names.push(name.to_owned());
            }
        }
        names
    }
}

impl std::fmt::Display for ChargeSource {
    /// As the config writes it: `elapsed_ms`, `header:x-cost`,
    /// `json:/usage/total_tokens`, `response_bytes`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChargeSource::ElapsedMs => f.write_str("elapsed_ms"),
            ChargeSource::Header(name) => write!(f, "header:{name}"),
            ChargeSource::Json(pointer) => write!(f, "json:{pointer}"),
            ChargeSource::RequestBytes => f.write_str("request_bytes"),
            ChargeSource::ResponseBytes => f.write_str("response_bytes"),
        }
    }
}

impl std::fmt::Display for Charge {
    /// As the config writes it: one source of weight 1 as itself
    /// (`elapsed_ms`), otherwise the table
    /// (`{ "json:/a" = 1, "json:/b" = 4 }`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let [lone] = self.sources.as_slice() {
            if lone.weight == 1.0 {
                return write!(f, "{}", lone.source);
            }
        }
        write_weights(f, &self.sources)
    }
}

impl std::fmt::Display for ReserveSource {
    /// As the config writes it: `body:/max_tokens`, `request_bytes`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReserveSource::Body(pointer) => write!(f, "body:{pointer}"),
            ReserveSource::RequestBytes => f.write_str("request_bytes"),
        }
    }
}

impl std::fmt::Display for Reservation {
    /// As the config writes it: `4000`, or
    /// `{ "body:/max_tokens" = 4, "request_bytes" = 0.25 }`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reservation::Units(units) => write!(f, "{units}"),
            Reservation::Sources(sources) => write_weights(f, sources),
        }
    }
}

/// A table of sources to weights, as the config writes it:
/// `{ "json:/a" = 1, "json:/b" = 4 }`.
fn write_weights<S: std::fmt::Display>(
    f: &mut std::fmt::Formatter<'_>,
    sources: &[Weighted<S>],
) -> std::fmt::Result {
    f.write_str("{ ")?;
    for (index, weighted) in sources.iter().enumerate() {
        if index > 0 {
            f.write_str(", ")?;
        }
        write!(f, "\"{}\" = {}", weighted.source, weighted.weight)?;
    }
    f.write_str(" }")
}

/// `tiers = { by = "jwt:plan", premium = { rate = "100/s" }, ... }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tiers {
    /// The source whose value picks the tier (any key source).
    pub by: KeySource,
    /// One entry per tier value, in file order.
    pub tiers: Vec<Variant>,
}

/// `overrides = { "seller-42" = { rate = "1000/s" } }`: `name` is a bucket
/// key as docs/configuration.md's "Keys" writes it (sources' values joined by `|`).
pub type Override = Variant;

/// A tier or an override: the value it applies to and the limits it sets
/// instead of the rule's own (same algorithm, same cost; a variant that
/// gives only `burst` keeps the rule's rates; one that gives a rate takes its
/// own COUNT as default burst). For `leaky_bucket` the single limit's
/// capacity is the variant's queue, as for the rule. A request whose tier
/// value is missing or names no tier gets the rule's own limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    /// The tier value (`"premium"`) or the bucket key (`"seller-42"`).
    pub name: String,
    /// Never empty (but for an `adaptive` rule's tier, which has none);
    /// validated like the rule's own `limits`.
    pub limits: Vec<LimitConfig>,
    /// An `adaptive` rule's tier: its share of the learned limit, per
    /// mille (1 to 1000).
    pub share: Option<u16>,
}

/// `sunset = { start, end, to, step, link }` (docs/identity-and-policy.md's "sunset" formula; the
/// maths is [`crate::limiter::SunsetSchedule`]). The rule has exactly one
/// rate limit, no tiers and no overrides when this is set, and is not
/// `concurrency`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SunsetConfig {
    /// Unix time in nanoseconds.
    pub start: u64,
    /// Unix time in nanoseconds; after `start`.
    pub end: u64,
    /// The COUNT reached at the last step, converted to the rule's period.
    pub to: u64,
    /// Default one day; never zero.
    pub step: Duration,
    /// Where clients should go (`Link: <link>; rel="sunset"`); an absolute
    /// URI, so a valid header value.
    pub link: Option<String>,
}

/// `ban = { after = 20, within = "1m", for = "10m" }`; never on a shadow
/// rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BanConfig {
    /// Limited answers within `within` that trigger a ban; at least 1.
    pub after: u64,
    /// Longer than zero.
    pub within: Duration,
    /// How long the ban lasts (`for`); longer than zero.
    pub duration: Duration,
}

/// `on_change`: what a reload that changes a rule's limits does to the
/// buckets it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnChange {
    /// Units already spent stay spent (4/h → 8/h with 2 spent leaves 6).
    Keep,
    /// The remaining share is kept (2 of 4 left → 4 of 8).
    #[default]
    Proportional,
    /// Every bucket starts full.
    Reset,
}

/// `on_limit`: what happens to a request over its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLimit {
    /// 429 at once.
    Reject,
    /// Hold it until it fits: at most `max_delay`, at most `max_queue` requests
    /// waiting per bucket.
    Delay { max_delay: Duration, max_queue: u64 },
}

/// `algorithm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlgorithmKind {
    /// Capacity `burst`, refilled continuously at the rate (GCRA).
    TokenBucket,
    /// Requests leave at the constant rate; up to `burst` wait. Always delays.
    LeakyBucket,
    /// Counters aligned to Unix-time multiples of the period.
    FixedWindow,
    /// Two aligned windows, the previous one weighted by its part still inside
    /// the sliding period.
    SlidingWindow,
    /// Exact timestamps; memory O(COUNT) per key.
    SlidingLog,
    /// At most `max_in_flight` requests in flight per key; no rate.
    Concurrency,
    /// A concurrency limit learned from the upstream's latency and
    /// failures, between `min_in_flight` and `max_in_flight`.
    Adaptive,
}

impl AlgorithmKind {
    /// The spelling in the config file (`"token_bucket"`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            AlgorithmKind::TokenBucket => "token_bucket",
            AlgorithmKind::LeakyBucket => "leaky_bucket",
            AlgorithmKind::FixedWindow => "fixed_window",
            AlgorithmKind::SlidingWindow => "sliding_window",
            AlgorithmKind::SlidingLog => "sliding_log",
            AlgorithmKind::Concurrency => "concurrency",
            AlgorithmKind::Adaptive => "adaptive",
        }
    }

    /// Whether it bounds requests in flight (no rate, no cost).
    pub fn counts_in_flight(self) -> bool {
        matches!(self, AlgorithmKind::Concurrency | AlgorithmKind::Adaptive)
    }

    /// Whether its balance can be settled after admission: charged below
    /// zero (`charge`), and given back in part (`reserve`).
    pub fn settles(self) -> bool {
        matches!(
            self,
            AlgorithmKind::TokenBucket | AlgorithmKind::FixedWindow | AlgorithmKind::SlidingWindow
        )
    }
}

/// One limit of a rule: its rate and its capacity (X-RateLimit-Limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitConfig {
    pub rate: Rate,
    /// Token bucket: `burst` for the shortest-period limit, else the COUNT.
    /// Leaky bucket: `burst`, how many may wait (default the COUNT).
    /// Windows and logs: the COUNT.
    pub capacity: u64,
    /// `calendar`: the zone's calendar a fixed window follows, of the unit
    /// its period names (the rate's period is then that unit's nominal
    /// length; docs/configuration.md).
    pub calendar: Option<crate::limiter::calendar::Calendar>,
}

/// `match = { ... }`: every given field must fit. Empty lists mean "any".
#[derive(Debug, Clone, Default)]
pub struct MatchConfig {
    /// Exact, normalised paths.
    pub path: Vec<String>,
    pub path_prefix: Vec<String>,
    /// Globs: `*` is one segment, `**` zero or more segments.
    pub path_glob: Vec<String>,
    pub method: Vec<Method>,
    /// Lower-cased, without port.
    pub host: Vec<String>,
    /// `header`: each header, by name, and the values it may equal, sorted
    /// by name.
    pub header: Vec<(http::HeaderName, Vec<http::HeaderValue>)>,
    /// `client`: the networks the client IP (as keyed) must be in.
    pub client: Vec<ipnet::IpNet>,
    /// `domain`: the rule decides rate limit service descriptors of this
    /// domain, never proxied requests (docs/rate-limit-service.md).
    pub domain: Option<String>,
    /// `descriptor`: entry keys with the value each must have, sorted by
    /// key (only with `domain`).
    pub descriptor: Vec<(String, String)>,
}

impl MatchConfig {
    /// Whether the rule decides rate limit service calls (not requests).
    pub fn is_service(&self) -> bool {
        self.domain.is_some()
    }
}

/// `[identity]`.
#[derive(Debug, Clone, Default)]
pub struct IdentityConfig {
    /// `[identity.jwt]`; required when any rule keys on `jwt:<claim>`.
    pub jwt: Option<JwtConfig>,
}

/// `missing`: what to do when a key source is absent from the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingPolicy {
    /// One bucket for all requests missing that source.
    Shared,
    /// The rule does not apply.
    Skip,
    /// 400 with a problem document.
    Reject,
}

impl Config {
    /// Parses and validates a config held in memory. `origin` names the file in
    /// error messages (`origin:LINE:COLUMN: sentence`); a relative
    /// `public_key_file` is read from `origin`'s directory.
    pub fn from_toml(text: &str, origin: &str) -> Result<Config, ConfigErrors> {
        validate::from_toml(text, origin)
    }

    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let origin = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => Config::from_toml(&text, &origin),
            Err(err) => Err(ConfigErrors::io(&origin, err)),
        }
    }
}
