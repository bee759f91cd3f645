//! What every request of a proxy shares: the snapshot it runs against
//! (policy, pools and routes, tracer; swapped whole by reloads and by new
//! DNS answers), the store, the clock, the metrics and the access log; and
//! the proxy's views of it for the admin API, the rate limit service and
//! shutdown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::admit::Admitter;
use super::messages;
use super::routes::{Routes, Upstreams};
use super::ticker::Ticker;
use super::upstream;
use super::Proxy;
use crate::access_log::AccessLog;
use crate::clock::{Clock, Nanos, ProxyClock};
use crate::config::{Config, Tracing};
use crate::decider::Decider;
use crate::key::graphql::persisted::{Learned, Persisted};
use crate::metrics::Metrics;
use crate::policy::Policy;
use crate::store::{OnError, Store};
use crate::trace::tracer::Tracer;

/// What a request runs against, loaded once per request: the policy and
/// the pools and routes (one load, not one each).
#[derive(Debug)]
pub struct Snapshot {
    pub policy: Arc<Policy>,
    pub routes: Arc<Routes>,
    /// `None` when tracing is off.
    pub tracer: Option<Arc<Tracer>>,
}

#[derive(Debug)]
pub struct Shared {
    /// Swapped by reloads (the policy, then the pools) and by new DNS
    /// answers (the pools).
    pub current: ArcSwap<Snapshot>,
    pub store: Arc<Store>,
    /// What to do when the store fails (`store.redis.on_error`).
    pub on_error: OnError,
    /// The pools and routes requests are forwarded by.
    pub upstreams: Upstreams,
    /// Shared with the tunnels whose messages a rule counts
    /// (`proxy/messages.rs`), which outlive their request.
    pub metrics: Arc<Metrics>,
    /// Every decision, hold and settlement reads and waits on this clock.
    pub clock: ProxyClock,
    /// Wakes exchanges that charge upstream time, once a second.
    pub ticker: Arc<Ticker>,
    /// Set when shutdown begins: `/readyz` turns 503.
    pub draining: AtomicBool,
    /// Serialises reloads: each compiles against the policy it replaces.
    pub reloading: std::sync::Mutex<()>,
    /// Where each request's line goes (`server.access_log`).
    pub access_log: AccessLog,
    /// GraphQL persisted queries learned from requests; kept across
    /// reloads, which resize it (`server.max_persisted_queries`).
    pub persisted_queries: Learned,
    /// `Alt-Svc` for the answers over TCP, once the HTTP/3 listener is
    /// bound (`Proxy::announce_http3`).
    pub alt_svc: std::sync::OnceLock<http::HeaderValue>,
}

impl Shared {
    /// Everything a proxy for the validated `config` shares, deciding on
    /// `store` with `clock`.
    pub fn new(config: Config, clock: ProxyClock, store: Store, on_error: OnError) -> Shared {
        let metrics = Metrics::new();
        store.count_settlements(metrics.settle_series(store.backend_name()));
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
        Shared {
            current: ArcSwap::from_pointee(snapshot),
            store: Arc::new(store),
            on_error,
            upstreams,
            metrics: Arc::new(metrics),
            ticker: Ticker::new(clock.clone()),
            clock,
            draining: AtomicBool::new(false),
            reloading: std::sync::Mutex::new(()),
            access_log,
            persisted_queries,
            alt_svc: std::sync::OnceLock::new(),
        }
    }

    /// What admission works with under `policy`: the ticker only when a
    /// rule of it charges or refunds.
    #[inline]
    pub fn admitter<'a>(&'a self, policy: &Policy) -> Admitter<'a> {
        Admitter {
            decider: self.decider(),
            ticker: policy.bills.then_some(&self.ticker),
        }
    }

    /// The decider every way in asks the store through.
    #[inline]
    pub fn decider(&self) -> Decider<'_> {
        Decider {
            store: &self.store,
            clock: &self.clock,
            on_error: self.on_error,
            metrics: &self.metrics,
        }
    }

    /// See [`super::Proxy::persisted`].
    pub fn persisted<'a>(&'a self, policy: &'a Policy, learns: bool) -> Persisted<'a> {
        Persisted {
            manifest: &policy.config.server.persisted_queries,
            learned: &self.persisted_queries,
            learns,
        }
    }

    /// What a WebSocket tunnel's message gate decides with, under the
    /// `policy` its handshake ran under.
    pub fn deciding(&self, policy: &Arc<Policy>) -> messages::Deciding {
        messages::Deciding {
            store: Arc::clone(&self.store),
            clock: self.clock.clone(),
            on_error: self.on_error,
            metrics: Arc::clone(&self.metrics),
            policy: Arc::clone(policy),
        }
    }

    /// Requests from now on run under `policy`, traced by `tracer`, with
    /// the pools as they are.
    pub fn publish_policy(&self, policy: Arc<Policy>, tracer: Option<Arc<Tracer>>) {
        self.current.rcu(|current| Snapshot {
            policy: Arc::clone(&policy),
            routes: Arc::clone(&current.routes),
            tracer: tracer.clone(),
        });
    }

    /// Requests from now on are forwarded by `routes`, under the policy as
    /// it is.
    pub fn publish_routes(&self, routes: Arc<Routes>) {
        self.current.rcu(|current| Snapshot {
            policy: Arc::clone(&current.policy),
            routes: Arc::clone(&routes),
            tracer: current.tracer.clone(),
        });
    }

    /// The tracer `config` asks for, keeping the exporter of `previous`
    /// where it can (`trace::tracer::Tracer::new`).
    pub fn tracer(&self, config: &Config, previous: Option<&Tracer>) -> Option<Arc<Tracer>> {
        tracer_for(config, previous, &self.metrics, &self.clock)
    }
}

impl Proxy {
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

    /// What deciding outside a request needs (messages, the rate limit
    /// service, `/v1/check`, `/admin/spend`): the store and its
    /// `on_error`, the clock, the metrics.
    pub fn decider(&self) -> Decider<'_> {
        self.shared.decider()
    }

    /// Now, by the limiter's clock (Unix nanoseconds).
    pub fn now(&self) -> Nanos {
        self.shared.clock.now()
    }

    /// Writes out the access log's buffered lines, waiting `within` at
    /// most: at shutdown.
    pub fn flush_access_log(&self, within: std::time::Duration) {
        self.shared.access_log.flush(within);
    }

    /// Waits until the store took the settlements still waiting, `within`
    /// at most: at shutdown. What it had not taken then is lost, and said.
    pub async fn flush_settlements(&self, within: std::time::Duration) {
        let store = &self.shared.store;
        let left = store.flush_settlements(within).await;
        if left > 0 {
            tracing::warn!(
                left,
                "shutdown: settlements (charges, give-backs) the store had not taken are lost"
            );
        }
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
