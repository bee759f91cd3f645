//! Active checks (docs/upstreams.md, "Active checks"): every `interval`,
//! each server of the pool gets `GET <path>` with `Host` set to the server
//! URL's host and port (or `health.host`), on its own connections; a 2xx
//! within `timeout` passes. `fails` failures in a row take the server out,
//! `passes` passes bring it back. Checks are not requests: they count
//! neither in a server's requests nor in its passive checks.

use std::sync::Arc;

use http::{header, HeaderValue, Request};
use tokio::time::{Instant, MissedTickBehavior};

use super::Routes;
use crate::config::HealthCheck;
use crate::proxy::pool::{AddedFields, RequestBody, Sent};
use crate::proxy::upstream::Server;

/// Checks pool `name`'s servers every `check.interval` while `routes`
/// gives a snapshot (the proxy lives), starting at once.
pub(super) async fn keep_checking(
    routes: impl Fn() -> Option<Arc<Routes>>,
    name: String,
    check: HealthCheck,
) {
    let mut ticks = tokio::time::interval(check.interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(current) = routes() else { return };
        let Some(pool) = current.pool(&name) else {
            return;
        };
        let servers: Vec<Arc<Server>> = pool
            .members()
            .iter()
            .map(|member| Arc::clone(&member.server))
            .collect();
        drop(current);
        let checks = servers.iter().map(|server| async {
            let passed = check_once(server, &check).await;
            if server.checked(passed, check.fails, check.passes) {
                if passed {
                    tracing::info!(upstream = %name, server = %server.address(), "server back in: its health checks pass");
                } else {
                    tracing::warn!(upstream = %name, server = %server.address(), "server taken out: its health checks fail");
                }
            }
        });
        futures_util::future::join_all(checks).await;
    }
}

/// One check of `server`: whether it answered 2xx within the timeout.
async fn check_once(server: &Server, check: &HealthCheck) -> bool {
    let host = match &check.host {
        Some(host) => HeaderValue::from_str(host),
        None => HeaderValue::from_str(&authority_of(server)),
    };
    let Ok(host) = host else { return false };
    let Ok(request) = Request::get(check.path.as_str())
        .header(header::HOST, host)
        .header(header::USER_AGENT, "sluice-health-check")
        .body(())
    else {
        return false;
    };
    let deadline = Instant::now() + check.timeout;
    let added = AddedFields::default();
    let sent = Sent {
        body: &mut RequestBody::None,
        handshake: false,
    };
    match server.pool().send(&request, &added, sent, deadline).await {
        // The body is dropped unread: a check's connection closes.
        Ok(response) => response.status().is_success(),
        Err(_) => false,
    }
}

/// The server URL's host and port (`api.internal:3000`).
fn authority_of(server: &Server) -> String {
    let url = server.url();
    url.split_once("://")
        .map_or(url.as_ref(), |(_, authority)| authority)
        .to_owned()
}
