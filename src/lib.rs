//! sluice: a rate-limiting reverse proxy.
//!
//! # Layout
//!
//! The modules follow the life of a request:
//!
//! - [`cli`]: the command line (`run`, `check`, `demo`, `import`, `replay`, `suggest`).
//! - [`config`]: the TOML file → validated domain types, errors with line and column.
//! - [`policy`]: a config compiled into the immutable snapshot the request path reads.
//! - [`server`]: listeners, the accept loop, connection limits, graceful shutdown.
//! - [`http1`]: HTTP/1.1 on the wire (framing, chunked, bodies out and in), which
//!   sluice's own server and its upstream client both speak.
//! - [`decider`]: one way to decide for every way in (requests, messages, the rate
//!   limit service, `/v1/check`, `/admin/spend`): asks → store → `on_error` → counting.
//! - [`proxy`]: identify → limit (`proxy::admit`) → forward ([`proxy::forward`]) →
//!   respond ([`proxy::respond`]) → settle deferred charges ([`proxy::settle`]).
//! - [`websocket`]: after a handshake's `101`, the tunnel; with a
//!   `unit = "message"` rule, each message the client sends counted as its
//!   first frame arrives (RFC 6455 frames read as they stream).
//! - [`key`]: path normalisation, client IP, JWT claims, request → bucket key, and
//!   the labels that stand for credential keys outside the request path.
//! - [`limiter`]: the pure, clock-injected algorithms (token bucket as GCRA,
//!   leaky bucket, fixed and sliding windows, sliding log).
//! - [`store`]: where bucket state lives: the sharded in-memory table, or Redis
//!   shared by several instances; bans beside it.
//! - [`heavy_hitters`]: the keys each rule sees and limits most, in bounded memory.
//! - [`log_gate`]: how many refusal lines a rule may log per second.
//! - [`clock`]: monotonic time for the limiter, and a manual clock for tests.
//! - [`timer`]: a deadline timer that is cheap to move later (connection and upstream clocks).
//! - [`reload`]: hot reload (SIGHUP, `POST /admin/reload`, the file watch).
//! - [`rls`]: Envoy's rate limit service (gRPC `ShouldRateLimit`) on the same
//!   rules and stores, for the descriptors of rules with `match.domain`.
//! - [`metrics`], [`admin`]: Prometheus metrics and the admin listener.
//! - [`access_log`]: one JSON line per request, written off the request path.
//! - [`request_id`]: `X-Request-Id`, kept from a trusted proxy or made per request.
//! - [`problem`]: the problem documents (RFC 9457) of every error sluice answers itself.
//! - [`demo`]: the self-contained tour behind `sluice demo`.
//! - [`import`]: other rate limiters' configs as sluice rules (`sluice import`).
//! - [`replay`]: recorded traffic decided with another config, offline (`sluice replay`,
//!   `sluice suggest`).
//! - [`trace`]: OpenTelemetry spans of sampled requests, exported over OTLP off the request path.
//! - [`tls`]: the crypto provider and PEM files every TLS side shares.
#![forbid(unsafe_code)]

pub mod access_log;
pub mod admin;
pub mod body_scan;
pub mod cli;
pub mod clock;
pub mod config;
pub mod decider;
pub mod demo;
pub mod heavy_hitters;
pub mod histogram;
pub mod http1;
pub mod import;
pub mod key;
pub mod limiter;
pub mod log_gate;
pub mod metrics;
pub mod policy;
pub mod problem;
pub mod proxy;
pub mod reload;
pub mod replay;
pub mod request_id;
pub mod rls;
pub mod server;
pub mod store;
#[cfg(test)]
mod testing;
pub mod timer;
pub mod tls;
pub mod trace;
pub mod websocket;
