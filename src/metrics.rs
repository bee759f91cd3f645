//! Prometheus metrics (the series docs/operations.md lists under `GET /metrics`). Every
//! series a request touches is resolved to a handle when the policy is
//! compiled ([`Metrics::rule_counters`]) or here at start-up, so the request
//! path never looks up labels. Labels are `&'static str` or rule names from
//! the config — never a caller's key.
//!
//! Series that mirror state kept elsewhere (bans in force, tracked keys,
//! evictions) are set when `/metrics` is scraped, by the admin listener that
//! reads that state ([`Metrics::set_rule_state`],
//! [`Metrics::set_store_state`]): this module knows nothing of policies or
//! stores.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::clock::Nanos;
use crate::histogram::{PerThreadHistogram, PerThreadHistograms};
use crate::log_gate::LogGate;

/// Nanoseconds as the seconds Prometheus histograms take.
#[inline]
pub fn seconds(nanos: Nanos) -> f64 {
    nanos as f64 / 1e9
}

/// `sluice_decision_seconds`: a decision in memory takes a few hundred
/// nanoseconds, so the buckets start at 100 ns; a shared store's round trip
/// (milliseconds) is the top of what a decision can cost.
const DECISION_BUCKETS: &[f64] = &[
    100e-9, 250e-9, 500e-9, 1e-6, 2.5e-6, 5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3,
    2.5e-3, 5e-3, 10e-3,
];

/// `sluice_overhead_seconds`: parsing, deciding and rewriting a request is
/// tens of microseconds; a slow store or a starved core pushes it towards a
/// second, which is where an operator stops caring about the exact value.
const OVERHEAD_BUCKETS: &[f64] = &[
    10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3,
    250e-3, 500e-3, 1.0,
];

/// `sluice_store_seconds`: a Redis round trip on a LAN is 100 µs – a few
/// ms; the store's `timeout` (a second at most in practice) caps it.
const STORE_BUCKETS: &[f64] = &[
    10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3,
    250e-3, 500e-3, 1.0,
];

/// `sluice_upstream_seconds` and `sluice_delay_seconds`: an upstream answers
/// in milliseconds or, for long requests, minutes; a hold lasts up to the
/// rule's `max_delay`, which may be minutes for a daily budget.
const LONG_BUCKETS: &[f64] = &[
    1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0, 300.0,
];

/// Per-rule `sluice_requests_total` children, resolved once.
#[derive(Debug, Clone)]
pub struct RuleCounters {
    pub allowed: IntCounter,
    pub limited: IntCounter,
    /// Held in delay mode, then admitted.
    pub delayed: IntCounter,
    pub shadow_limited: IntCounter,
    pub denied: IntCounter,
    pub missing_key: IntCounter,
    /// `sluice_delay_seconds{rule}`.
    pub delay_seconds: Histogram,
    /// `sluice_queue_depth{rule}`.
    pub queue_depth: IntGauge,
    /// `sluice_bans_total{rule}`.
    pub bans_started: IntCounter,
    /// `sluice_banned_requests_total{rule}`.
    pub banned: IntCounter,
    /// `sluice_budget_charged_total{rule}`: units charged beyond admission
    /// (deferred charges, `/admin/spend`).
    pub charged: IntCounter,
    /// `sluice_budget_refunded_total{rule}`: admission units given back
    /// (`refund_on`).
    pub refunded: IntCounter,
    /// `sluice_charge_errors_total{rule}`: charge values that never arrived
    /// or did not read as a non-negative number.
    pub charge_errors: IntCounter,
    /// `sluice_budget_reserved_units{rule}`: units reserved by requests in
    /// flight (`reserve`).
    pub reserved: IntGauge,
    /// `sluice_budget_overrun_total{rule}`: units charged beyond their
    /// reservations.
    pub overrun: IntCounter,
}

/// All of sluice's metrics and the registry that exports them.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    responses: [IntCounter; 5],
    pub decision_seconds: PerThreadHistogram,
    pub overhead_seconds: PerThreadHistogram,
    /// The upstream pools' series, labelled with each pool's name.
    pub upstreams: UpstreamSeries,
    tracked_keys: IntGaugeVec,
    /// `sluice_adaptive_limit{rule}`.
    adaptive_limit: IntGaugeVec,
    delay_seconds: HistogramVec,
    queue_depth: IntGaugeVec,
    evictions_idle: IntCounter,
    evictions_overflow: IntCounter,
    /// `sluice_store_errors_total{backend,kind}`.
    store_errors: IntCounterVec,
    /// Whether the store is out (did not answer) since it last answered:
    /// an outage is logged when it starts and when it ends.
    store_outage: Arc<AtomicBool>,
    /// Lines for store calls answered with an error (not an outage: one
    /// key's, perhaps, between good answers), at most ten a second.
    store_error_lines: Arc<LogGate>,
    /// `sluice_store_seconds{backend}`: every call to the store.
    store_seconds: PerThreadHistograms,
    /// The one backend's `sluice_store_seconds` child, once a call named it.
    store_seconds_resolved: Arc<OnceLock<(&'static str, PerThreadHistogram)>>,
    store_fallback_active: IntGauge,
    /// `sluice_store_settlements_pending`: kept by the store's settler.
    store_settlements_pending: IntGauge,
    /// `sluice_store_settlements_dropped_total`: kept by the store's
    /// settler.
    store_settlements_dropped: IntCounter,
    /// Hybrid mode's sync (set when scraped, from the store's own counts).
    sync: SyncSeries,
    pub config_reloads_ok: IntCounter,
    pub config_reloads_error: IntCounter,
    /// `sluice_tls_handshakes_total{result="ok"}`.
    pub tls_handshakes_ok: IntCounter,
    /// `sluice_tls_handshakes_total{result="error"}`: failed or timed out.
    pub tls_handshakes_error: IntCounter,
    /// `sluice_access_log_dropped_total`: lines the access log's buffers
    /// had no room for (its writer was behind), or that its target lost.
    pub access_log_dropped: IntCounter,
    /// `sluice_trace_spans_total{result}`.
    pub trace_spans: TraceSpans,
    /// `sluice_websocket_connections`: tunnels open ([`Counted`]).
    websocket_connections: IntGauge,
    /// `sluice_grpc_streams`: gRPC calls open under a message rule.
    grpc_streams: IntGauge,
    /// `sluice_connections{protocol}`.
    pub connections: ConnectionGauges,
    /// `sluice_quic_retries_total`: Retry packets sent to prove a QUIC
    /// client's address.
    pub quic_retries: IntCounter,
    /// `sluice_persisted_queries`: GraphQL persisted-query documents known
    /// (the manifest's and those learned).
    pub persisted_queries: IntGauge,
    bans_started: IntCounterVec,
    banned_requests: IntCounterVec,
    bans_active: IntGaugeVec,
    budget_charged: IntCounterVec,
    budget_refunded: IntCounterVec,
    charge_errors: IntCounterVec,
    budget_reserved: IntGaugeVec,
    budget_overrun: IntCounterVec,
}

/// Something open, counted in its gauge until dropped: a WebSocket tunnel
/// (`sluice_websocket_connections`), a gRPC call under a message rule
/// (`sluice_grpc_streams`), a client connection (`sluice_connections`).
#[derive(Debug)]
pub struct Counted(IntGauge);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// What a client connection speaks, as `sluice_connections` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    H2,
    H3,
}

/// `sluice_connections{protocol}`: client connections open, by protocol.
#[derive(Debug, Clone)]
pub struct ConnectionGauges([IntGauge; 3]);

impl ConnectionGauges {
    /// A connection opened: counted under `protocol` until the guard
    /// returned is dropped.
    pub fn opened(&self, protocol: Protocol) -> Counted {
        let gauge = self.gauge(protocol);
        gauge.inc();
        Counted(gauge.clone())
    }

    /// A connection counted under `from` found to speak `to` (an HTTP/1
    /// connection that opened with HTTP/2's preface): counted under `to`
    /// instead until the guard returned is dropped.
    pub fn moved(&self, from: Protocol, to: Protocol) -> Moved {
        self.gauge(from).dec();
        self.gauge(to).inc();
        Moved {
            from: self.gauge(from).clone(),
            to: self.gauge(to).clone(),
        }
    }

    /// How many are open under `protocol`.
    pub fn open(&self, protocol: Protocol) -> i64 {
        self.gauge(protocol).get()
    }

    fn gauge(&self, protocol: Protocol) -> &IntGauge {
        &self.0[protocol as usize]
    }
}

/// See [`ConnectionGauges::moved`].
#[derive(Debug)]
pub struct Moved {
    from: IntGauge,
    to: IntGauge,
}

impl Drop for Moved {
    fn drop(&mut self) {
        self.to.dec();
        self.from.inc();
    }
}

/// `sluice_trace_spans_total`'s series, each there from start.
#[derive(Debug, Clone)]
pub struct TraceSpans {
    pub exported: IntCounter,
    pub dropped: IntCounter,
    pub failed: IntCounter,
}

impl Metrics {
    /// Registers every metric of the minimum set that exists in this release.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let new = Families(&registry);
        let (requests, responses, decision_seconds, overhead_seconds) = new.requests();
        let (tracked_keys, adaptive_limit, delay_seconds, queue_depth) = new.held();
        let [evictions_idle, evictions_overflow] = new.evictions();
        let (store_errors, store_seconds, store_fallback_active) = new.store();
        let (store_settlements_pending, store_settlements_dropped) = new.settlements();
        let ([config_reloads_ok, config_reloads_error], access_log_dropped, trace_spans) =
            new.operations();
        let (bans_started, banned_requests, bans_active) = new.bans();
        let (budget_charged, budget_refunded, charge_errors) = new.budgets();
        let (budget_reserved, budget_overrun) = new.reservations();
        let [tls_handshakes_ok, tls_handshakes_error] = new.tls_handshakes();
        new.process();
        let sync = SyncSeries::new(&registry);
        let upstreams = UpstreamSeries::new(&registry);
        let (websocket_connections, grpc_streams, persisted_queries) = new.connections();
        let (connections, quic_retries) = new.clients();
        Metrics {
            connections,
            quic_retries,
            registry,
            requests,
            websocket_connections,
            grpc_streams,
            persisted_queries,
            responses,
            decision_seconds,
            overhead_seconds,
            upstreams,
            tracked_keys,
            adaptive_limit,
            delay_seconds,
            queue_depth,
            evictions_idle,
            evictions_overflow,
            store_errors,
            store_outage: Arc::default(),
            store_error_lines: Arc::default(),
            store_seconds,
            store_seconds_resolved: Arc::default(),
            store_fallback_active,
            store_settlements_pending,
            store_settlements_dropped,
            sync,
            config_reloads_ok,
            config_reloads_error,
            tls_handshakes_ok,
            tls_handshakes_error,
            access_log_dropped,
            trace_spans,
            bans_started,
            banned_requests,
            bans_active,
            budget_charged,
            budget_refunded,
            charge_errors,
            budget_reserved,
            budget_overrun,
        }
    }

    /// A tunnel opened: counted in `sluice_websocket_connections` until
    /// the guard returned is dropped.
    pub fn tunnel_opened(&self) -> Counted {
        self.websocket_connections.inc();
        Counted(self.websocket_connections.clone())
    }

    /// A gRPC call a message rule applies to opened: counted in
    /// `sluice_grpc_streams` until the guard returned is dropped.
    pub fn grpc_stream_opened(&self) -> Counted {
        self.grpc_streams.inc();
        Counted(self.grpc_streams.clone())
    }

    /// The per-rule request counters; creating them makes every outcome's
    /// series exist at 0 from start.
    pub fn rule_counters(&self, rule: &str) -> RuleCounters {
        let counter = |outcome| self.requests.with_label_values(&[rule, outcome]);
        RuleCounters {
            allowed: counter("allowed"),
            limited: counter("limited"),
            delayed: counter("delayed"),
            shadow_limited: counter("shadow_limited"),
            denied: counter("denied"),
            missing_key: counter("missing_key"),
            delay_seconds: self.delay_seconds.with_label_values(&[rule]),
            queue_depth: self.queue_depth.with_label_values(&[rule]),
            bans_started: self.bans_started.with_label_values(&[rule]),
            banned: self.banned_requests.with_label_values(&[rule]),
            charged: self.budget_charged.with_label_values(&[rule]),
            refunded: self.budget_refunded.with_label_values(&[rule]),
            charge_errors: self.charge_errors.with_label_values(&[rule]),
            reserved: self.budget_reserved.with_label_values(&[rule]),
            overrun: self.budget_overrun.with_label_values(&[rule]),
        }
    }

    /// Counts a failed store call, an error of `kind`; `on_error` decides
    /// (the fallback is active) until a call succeeds again. `outage`: the
    /// store did not answer. Whether this starts an outage (what the caller
    /// logs: once per outage, not once per request).
    pub fn store_failed(&self, backend: &str, kind: &'static str, outage: bool) -> bool {
        // Only during failures, so the label lookup is not on the common
        // path.
        self.store_errors.with_label_values(&[backend, kind]).inc();
        // Set before the outage flag (and on every failure), so a racing
        // recovery can leave the gauge at 0 only until the next failure.
        self.store_fallback_active.set(1);
        outage && !self.store_outage.swap(true, Ordering::Relaxed)
    }

    /// The series a shared store's settlements count in, its errors and
    /// calls under `backend` (docs/operations.md): handed to the store once
    /// ([`crate::store::Store::count_settlements`]).
    pub fn settle_series(&self, backend: &str) -> crate::store::SettleSeries {
        let errors = |kind| self.store_errors.with_label_values(&[backend, kind]);
        crate::store::SettleSeries {
            pending: self.store_settlements_pending.clone(),
            dropped: self.store_settlements_dropped.clone(),
            unavailable: errors("unavailable"),
            script: errors("script"),
            seconds: self.store_seconds.with_label_values(&[backend]),
        }
    }

    /// Whether a line about a store call answered with an error may be
    /// logged at `now`, as [`LogGate::let_through`] says.
    pub fn store_error_line(&self, now: Nanos) -> Option<u64> {
        self.store_error_lines.let_through(now)
    }

    /// How long one call to the store took. Every request that asks a
    /// limit calls the store, so the backend's series is resolved once and
    /// kept, not looked up by label each time.
    #[inline]
    pub fn store_call(&self, backend: &'static str, seconds: f64) {
        match self.store_seconds_resolved.get() {
            Some((name, series)) if *name == backend => series.observe(seconds),
            _ => self.store_call_resolving(backend, seconds),
        }
    }

    /// [`Metrics::store_call`] before the series is resolved, or for
    /// another backend (the local fallback), out of the inlined path.
    #[cold]
    fn store_call_resolving(&self, backend: &'static str, seconds: f64) {
        let series = self.store_seconds.with_label_values(&[backend]);
        series.observe(seconds);
        let _ = self.store_seconds_resolved.set((backend, series));
    }

    /// A store call succeeded: the fallback (if any) is over. Whether an
    /// outage ended (what the caller logs).
    #[inline]
    pub fn store_recovered(&self) -> bool {
        // One load on every request while the store answers.
        self.store_fallback_active.get() != 0 && {
            self.store_fallback_active.set(0);
            self.store_outage.swap(false, Ordering::Relaxed)
        }
    }

    /// Whether the shared store is down and local limiting is used
    /// (`sluice_store_fallback_active`), for the status page.
    pub fn store_fallback_active(&self) -> bool {
        self.store_fallback_active.get() != 0
    }

    /// Counts one response sent to a client.
    #[inline]
    pub fn count_response(&self, status: http::StatusCode) {
        let class = (status.as_u16() / 100).clamp(1, 5) as usize - 1;
        self.responses[class].inc();
    }

    /// Sets `sluice_adaptive_limit{rule}`.
    pub fn set_adaptive_limit(&self, rule: &str, limit: u64) {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.adaptive_limit.with_label_values(&[rule]).set(limit);
    }

    /// Sets a rule's series that mirror its state: `sluice_bans_active`
    /// (bans in force) and `sluice_tracked_keys` (buckets in all its tables).
    pub fn set_rule_state(&self, rule: &str, bans_active: usize, tracked_keys: usize) {
        self.bans_active
            .with_label_values(&[rule])
            .set(bans_active as i64);
        self.tracked_keys
            .with_label_values(&[rule])
            .set(tracked_keys as i64);
    }

    /// Sets the store's series: the evictions it counts (totals since start)
    /// and its backend's error series, one per kind of error it can report
    /// (`error_kinds`), which exist at 0. The fallback gauge is kept by the
    /// request path ([`Metrics::store_failed`]).
    pub fn set_store_state(
        &self,
        backend: &str,
        error_kinds: &[&str],
        evicted_idle: u64,
        overflow: u64,
    ) {
        catch_up(&self.evictions_idle, evicted_idle);
        catch_up(&self.evictions_overflow, overflow);
        for kind in error_kinds {
            self.store_errors.with_label_values(&[backend, kind]);
        }
        self.store_seconds.with_label_values(&[backend]);
    }

    /// Sets hybrid mode's series from the store's sync (and the fallback
    /// gauge: a sync that failed means every limit is at its share).
    pub fn set_sync_state(&self, sync: &crate::store::SyncStats) {
        let series = &self.sync;
        // Before the first sync: 0, as the age of a sync that just ran.
        series.age.set(seconds(sync.age.unwrap_or(0)));
        series.took.set(seconds(sync.took));
        series.pending.set(sync.pending as i64);
        catch_up(&series.rounds, sync.rounds);
        catch_up(&series.calls, sync.calls);
        catch_up(&series.errors, sync.errors);
        catch_up(&series.dropped, sync.dropped);
        self.store_fallback_active.set(i64::from(sync.failing));
    }

    /// The text exposition of every series.
    pub fn render(&self) -> String {
        let mut out = Vec::with_capacity(8 * 1024);
        // Encoding our own registry into a Vec cannot fail.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// The upstream pools' series (docs/upstreams.md), each labelled with a
/// pool's name, never a server's address.
#[derive(Debug, Clone)]
pub struct UpstreamSeries {
    seconds: PerThreadHistograms,
    errors: IntCounterVec,
    retries: IntCounterVec,
    ejections: IntCounterVec,
    servers: IntGaugeVec,
    panic: IntGaugeVec,
}

/// One pool's series, resolved once when the pool is built.
#[derive(Debug, Clone)]
pub struct PoolSeries {
    /// `sluice_upstream_seconds{upstream}`: each attempt, to its response
    /// head or failure.
    pub seconds: PerThreadHistogram,
    /// `sluice_upstream_errors_total{upstream,kind}`.
    pub errors_connect: IntCounter,
    pub errors_timeout: IntCounter,
    pub errors_other: IntCounter,
    pub errors_tls: IntCounter,
    /// `sluice_upstream_retries_total{upstream}`.
    pub retries: IntCounter,
    /// `sluice_upstream_ejections_total{upstream}`.
    pub ejections: IntCounter,
}

impl UpstreamSeries {
    fn new(registry: &Registry) -> UpstreamSeries {
        let families = Families(registry);
        UpstreamSeries {
            seconds: families.per_thread_histograms(
                "sluice_upstream_seconds",
                "Upstream request out to response head in, per attempt.",
                LONG_BUCKETS,
                &["upstream"],
            ),
            errors: families.counters(
                "sluice_upstream_errors_total",
                "Failed upstream attempts (a failure a retry hid included).",
                &["upstream", "kind"],
            ),
            retries: families.counters(
                "sluice_upstream_retries_total",
                "Further attempts made on another server.",
                &["upstream"],
            ),
            ejections: families.counters(
                "sluice_upstream_ejections_total",
                "Servers taken out by passive checks.",
                &["upstream"],
            ),
            servers: families.gauges(
                "sluice_upstream_servers",
                "Servers of a pool, in or out.",
                &["upstream", "state"],
            ),
            panic: families.gauges(
                "sluice_upstream_panic",
                "1 while too many of a pool's servers are out and requests go to all of them.",
                &["upstream"],
            ),
        }
    }

    /// The series of the pool `name`, at 0 until counted.
    pub fn pool(&self, name: &str) -> PoolSeries {
        let error = |kind| self.errors.with_label_values(&[name, kind]);
        PoolSeries {
            seconds: self.seconds.with_label_values(&[name]),
            errors_connect: error("connect"),
            errors_timeout: error("timeout"),
            errors_other: error("other"),
            errors_tls: error("tls"),
            retries: self.retries.with_label_values(&[name]),
            ejections: self.ejections.with_label_values(&[name]),
        }
    }

    /// Sets a pool's gauges (when `/metrics` is scraped): servers in and
    /// out, and whether it is in panic.
    pub fn set_state(&self, name: &str, servers_in: usize, servers_out: usize, panic: bool) {
        self.servers
            .with_label_values(&[name, "in"])
            .set(servers_in as i64);
        self.servers
            .with_label_values(&[name, "out"])
            .set(servers_out as i64);
        self.panic.with_label_values(&[name]).set(i64::from(panic));
    }
}

/// Hybrid mode's series (docs/operations.md).
#[derive(Debug, Clone)]
struct SyncSeries {
    /// `sluice_store_sync_age_seconds`.
    age: Gauge,
    /// `sluice_store_sync_seconds`: how long the last sync took.
    took: Gauge,
    /// `sluice_store_sync_pending`: buckets whose deltas wait.
    pending: IntGauge,
    /// `sluice_store_syncs_total`.
    rounds: IntCounter,
    /// `sluice_store_sync_calls_total`: calls to Redis the syncs made.
    calls: IntCounter,
    /// `sluice_store_sync_errors_total`.
    errors: IntCounter,
    /// `sluice_store_sync_dropped_total`: deltas never sent.
    dropped: IntCounter,
}

impl SyncSeries {
    fn new(registry: &Registry) -> SyncSeries {
        let gauge = |name, help| registered(registry, Gauge::new(name, help));
        let counter = |name, help| registered(registry, IntCounter::new(name, help));
        SyncSeries {
            age: gauge(
                "sluice_store_sync_age_seconds",
                "Hybrid mode: time since the last completed sync with Redis.",
            ),
            took: gauge(
                "sluice_store_sync_seconds",
                "Hybrid mode: how long the last completed sync took.",
            ),
            pending: Families(registry).int_gauge(
                "sluice_store_sync_pending",
                "Hybrid mode: buckets whose deltas wait for the next sync.",
            ),
            rounds: counter(
                "sluice_store_syncs_total",
                "Hybrid mode: syncs tried (one per sync_interval).",
            ),
            calls: counter(
                "sluice_store_sync_calls_total",
                "Hybrid mode: calls to Redis made by completed syncs.",
            ),
            errors: counter(
                "sluice_store_sync_errors_total",
                "Hybrid mode: syncs that Redis did not answer.",
            ),
            dropped: counter(
                "sluice_store_sync_dropped_total",
                "Hybrid mode: deltas never sent (too many keys, or Redis down too long).",
            ),
        }
    }
}

/// `metric` (as its constructor returned it), registered in `registry`.
fn registered<M>(registry: &Registry, metric: prometheus::Result<M>) -> M
where
    M: prometheus::core::Collector + Clone + 'static,
{
    let metric = metric.expect("a valid metric name and help");
    registry
        .register(Box::new(metric.clone()))
        .expect("metric names are unique");
    metric
}

/// A labelled family's children, one per label value.
fn children<const N: usize>(family: &IntCounterVec, values: [&str; N]) -> [IntCounter; N] {
    values.map(|value| family.with_label_values(&[value]))
}

/// [`Metrics::new`]'s series, registered in one registry as they are made,
/// by family.
struct Families<'r>(&'r Registry);

impl Families<'_> {
    fn counters(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        registered(self.0, IntCounterVec::new(Opts::new(name, help), labels))
    }

    fn gauges(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        registered(self.0, IntGaugeVec::new(Opts::new(name, help), labels))
    }

    fn histograms(&self, name: &str, help: &str, buckets: &[f64], labels: &[&str]) -> HistogramVec {
        let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
        registered(self.0, HistogramVec::new(opts, labels))
    }

    /// A family of histograms observed without atomic read-modify-writes
    /// (`histogram.rs`): those a request observes.
    fn per_thread_histograms(
        &self,
        name: &str,
        help: &str,
        buckets: &[f64],
        labels: &[&str],
    ) -> PerThreadHistograms {
        let family = PerThreadHistograms::new(name, help, buckets, labels);
        registered(self.0, family)
    }

    /// The one series of an unlabelled [`Families::per_thread_histograms`].
    fn per_thread_histogram(&self, name: &str, help: &str, buckets: &[f64]) -> PerThreadHistogram {
        self.per_thread_histograms(name, help, buckets, &[])
            .with_label_values(&[])
    }

    fn counter(&self, name: &str, help: &str) -> IntCounter {
        registered(self.0, IntCounter::new(name, help))
    }

    fn int_gauge(&self, name: &str, help: &str) -> IntGauge {
        registered(self.0, IntGauge::new(name, help))
    }

    /// Requests per rule and outcome, responses by class, and the time a
    /// request takes to decide and to pass through.
    fn requests(
        &self,
    ) -> (
        IntCounterVec,
        [IntCounter; 5],
        PerThreadHistogram,
        PerThreadHistogram,
    ) {
        let requests = self.counters(
            "sluice_requests_total",
            "Requests per rule and outcome.",
            &["rule", "outcome"],
        );
        let responses = self.counters(
            "sluice_responses_total",
            "Responses sent to clients, by class.",
            &["code_class"],
        );
        let decision_seconds = self.per_thread_histogram(
            "sluice_decision_seconds",
            "Time to decide a request, all its rules (requests no rule applies to are not counted).",
            DECISION_BUCKETS,
        );
        let overhead_seconds = self.per_thread_histogram(
            "sluice_overhead_seconds",
            "Request head in to upstream request out, minus intentional delay.",
            OVERHEAD_BUCKETS,
        );
        let responses = children(&responses, ["1xx", "2xx", "3xx", "4xx", "5xx"]);
        (requests, responses, decision_seconds, overhead_seconds)
    }

    /// What each rule holds: buckets tracked, an adaptive limit, requests
    /// held and how long.
    fn held(&self) -> (IntGaugeVec, IntGaugeVec, HistogramVec, IntGaugeVec) {
        let tracked_keys = self.gauges(
            "sluice_tracked_keys",
            "Buckets tracked per rule.",
            &["rule"],
        );
        let adaptive_limit = self.gauges(
            "sluice_adaptive_limit",
            "The limit an adaptive rule has learned: requests in flight it admits now.",
            &["rule"],
        );
        let delay_seconds = self.histograms(
            "sluice_delay_seconds",
            "Time requests were held (delay mode) before being forwarded, per rule.",
            LONG_BUCKETS,
            &["rule"],
        );
        let queue_depth = self.gauges(
            "sluice_queue_depth",
            "Requests held right now (delay mode: waiting for budget or a permit), per rule.",
            &["rule"],
        );
        (tracked_keys, adaptive_limit, delay_seconds, queue_depth)
    }

    /// The store's errors, call times and fallback.
    fn store(&self) -> (IntCounterVec, PerThreadHistograms, IntGauge) {
        let store_errors = self.counters(
            "sluice_store_errors_total",
            "Store errors per backend and kind (unavailable: no answer; script: an answer that is an error).",
            &["backend", "kind"],
        );
        let store_seconds = self.per_thread_histograms(
            "sluice_store_seconds",
            "Time of one call to the store (for a shared store, one round trip), per backend.",
            STORE_BUCKETS,
            &["backend"],
        );
        let store_fallback_active = self.int_gauge(
            "sluice_store_fallback_active",
            "1 while the shared store is down and local limiting is used.",
        );
        (store_errors, store_seconds, store_fallback_active)
    }

    /// The store's settler: settlements waiting and given up.
    fn settlements(&self) -> (IntGauge, IntCounter) {
        let pending = self.int_gauge(
            "sluice_store_settlements_pending",
            "Settlements (charges, give-backs, permits returned) waiting for the shared store to take them.",
        );
        let dropped = self.counter(
            "sluice_store_settlements_dropped_total",
            "Settlements given up: not taken within settle_retry_for, pushed out of a full \
             queue, or refused by the store.",
        );
        (pending, dropped)
    }

    /// `idle` and `overflow` evictions.
    fn evictions(&self) -> [IntCounter; 2] {
        let evictions = self.counters(
            "sluice_evictions_total",
            "idle: a fresh-equivalent bucket dropped; overflow: a decision made \
             through the overflow sketch because the store was full.",
            &["reason"],
        );
        children(&evictions, ["idle", "overflow"])
    }

    /// TLS handshakes on the listener, `ok` and `error`.
    fn tls_handshakes(&self) -> [IntCounter; 2] {
        let tls_handshakes = self.counters(
            "sluice_tls_handshakes_total",
            "TLS handshakes on the listener, by result (error: failed or timed out).",
            &["result"],
        );
        children(&tls_handshakes, ["ok", "error"])
    }

    /// RSS, open descriptors, CPU seconds, threads and start time of this
    /// process, read from /proc at each scrape (Linux only).
    fn process(&self) {
        #[cfg(target_os = "linux")]
        self.0
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))
            .expect("process metric names are unique");
    }

    /// Config reloads (`ok`, `error`), access log lines dropped and trace
    /// spans.
    fn operations(&self) -> ([IntCounter; 2], IntCounter, TraceSpans) {
        let reloads = self.counters(
            "sluice_config_reloads_total",
            "Config reloads by result.",
            &["result"],
        );
        let access_log_dropped = self.counter(
            "sluice_access_log_dropped_total",
            "Access log lines dropped because the writer was behind (or its target failed).",
        );
        let trace_spans = self.counters(
            "sluice_trace_spans_total",
            "Spans by what became of them: exported, dropped (the queue was full), \
             failed (the collector refused or did not answer).",
            &["result"],
        );
        let [exported, dropped, failed] = children(&trace_spans, ["exported", "dropped", "failed"]);
        let trace_spans = TraceSpans {
            exported,
            dropped,
            failed,
        };
        (
            children(&reloads, ["ok", "error"]),
            access_log_dropped,
            trace_spans,
        )
    }

    /// Bans started, requests they refused and bans in force, per rule.
    fn bans(&self) -> (IntCounterVec, IntCounterVec, IntGaugeVec) {
        let bans_started = self.counters(
            "sluice_bans_total",
            "Bans started, per rule (a key limited `after` times `within` the period).",
            &["rule"],
        );
        let banned_requests = self.counters(
            "sluice_banned_requests_total",
            "Requests refused because their key was banned, per rule (also counted limited).",
            &["rule"],
        );
        let bans_active = self.gauges("sluice_bans_active", "Bans in force, per rule.", &["rule"]);
        (bans_started, banned_requests, bans_active)
    }

    /// Units charged after admission, given back, and charges that failed,
    /// per rule.
    fn budgets(&self) -> (IntCounterVec, IntCounterVec, IntCounterVec) {
        let charged = self.counters(
            "sluice_budget_charged_total",
            "Units charged after admission (deferred charges and /admin/spend), per rule.",
            &["rule"],
        );
        let refunded = self.counters(
            "sluice_budget_refunded_total",
            "Admission units given back (refund_on), per rule.",
            &["rule"],
        );
        let errors = self.counters(
            "sluice_charge_errors_total",
            "Charge values that never arrived or were malformed (charged charge_missing), per rule.",
            &["rule"],
        );
        (charged, refunded, errors)
    }

    /// Units reserved by requests in flight and charged beyond them, per
    /// rule.
    fn reservations(&self) -> (IntGaugeVec, IntCounterVec) {
        let reserved = self.gauges(
            "sluice_budget_reserved_units",
            "Units reserved by requests in flight (reserve), per rule.",
            &["rule"],
        );
        let overrun = self.counters(
            "sluice_budget_overrun_total",
            "Units charged beyond their reservations (reserve), per rule.",
            &["rule"],
        );
        (reserved, overrun)
    }

    /// WebSocket tunnels open, gRPC calls open under a message rule, and
    /// persisted queries known.
    fn connections(&self) -> (IntGauge, IntGauge, IntGauge) {
        let websocket_connections = self.int_gauge(
            "sluice_websocket_connections",
            "WebSocket tunnels open (a handshake the upstream answered 101).",
        );
        let grpc_streams = self.int_gauge(
            "sluice_grpc_streams",
            "gRPC calls open that a unit = \"message\" rule applies to.",
        );
        let persisted_queries = self.int_gauge(
            "sluice_persisted_queries",
            "GraphQL persisted-query hashes known: a manifest's and those learned from requests.",
        );
        (websocket_connections, grpc_streams, persisted_queries)
    }

    /// Client connections by protocol, and the Retries sent to QUIC ones.
    fn clients(&self) -> (ConnectionGauges, IntCounter) {
        let connections = registered(
            self.0,
            IntGaugeVec::new(
                Opts::new(
                    "sluice_connections",
                    "Client connections open, by protocol (http1 | h2 | h3).",
                ),
                &["protocol"],
            ),
        );
        let gauge = |protocol| connections.with_label_values(&[protocol]);
        let gauges = ConnectionGauges([gauge("http1"), gauge("h2"), gauge("h3")]);
        let retries = self.counter(
            "sluice_quic_retries_total",
            "Retry packets sent to prove a QUIC client's address before its handshake.",
        );
        (gauges, retries)
    }
}

/// Advances a Prometheus counter to a total kept elsewhere.
fn catch_up(counter: &IntCounter, total: u64) {
    let current = counter.get();
    if total > current {
        counter.inc_by(total - current);
    }
}
