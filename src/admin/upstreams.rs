//! `GET /admin/upstreams` (docs/upstreams.md, "Seeing it"): every pool and
//! route, and each server's state and why, requests in flight, requests
//! and failures so far. Server addresses belong here, never in a metric
//! label.

use serde_json::{json, Value};

use crate::clock::Nanos;
use crate::config::{describe_match, describe_upstream, UpstreamsConfig};
use crate::proxy::upstream::Upstream;
use crate::proxy::Routes;

/// The pools and routes of `routes` (built from `config`) at `now`.
pub fn upstreams(routes: &Routes, config: &UpstreamsConfig, now: Nanos) -> Value {
    let pools: Vec<Value> = routes
        .pools()
        .iter()
        .map(|pool| {
            // The config may be a reload ahead of the pools for a moment.
            let described = config
                .pools
                .iter()
                .find(|written| written.name == **pool.name())
                .map(describe_upstream)
                .unwrap_or_default();
            pool_json(pool, &described, now)
        })
        .collect();
    let route_list: Vec<Value> = config
        .routes
        .iter()
        .map(|route| {
            json!({
                "match": describe_match(&route.matcher),
                "upstream": config.pools[route.upstream].name,
            })
        })
        .collect();
    json!({
        "upstreams": pools,
        "routes": route_list,
        "default": config.default_pool().name,
    })
}

/// One pool: its settings as `check` prints them, whether it is in panic,
/// and its servers.
pub fn pool_json(pool: &Upstream, described: &str, now: Nanos) -> Value {
    let (servers_in, servers_out, panic) = pool.state(now);
    let servers: Vec<Value> = pool
        .members()
        .iter()
        .map(|member| {
            let server = &member.server;
            let mut reasons = Vec::new();
            if let Some(out) = server.out(now) {
                if let Some(until) = out.ejected_until {
                    reasons.push(json!({
                        "reason": "ejected",
                        "until": until / 1_000_000_000,
                        "remaining_secs": until.saturating_sub(now).div_ceil(1_000_000_000),
                    }));
                }
                if out.failing_checks {
                    reasons.push(json!({ "reason": "failing_checks" }));
                }
            }
            json!({
                "url": &**server.url(),
                "address": server.address().to_string(),
                "weight": member.weight,
                "state": if reasons.is_empty() { "in" } else { "out" },
                "out_because": reasons,
                "in_flight": server.pool().in_flight(),
                "requests": server.requests(),
                "failures": server.failures(),
            })
        })
        .collect();
    json!({
        "name": &**pool.name(),
        "described": described,
        "servers_in": servers_in,
        "servers_out": servers_out,
        "panic": panic,
        "servers": servers,
    })
}
