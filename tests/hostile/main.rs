//! Hostile clients and failing upstreams, one module per group of rows of
//! the "Hostile inputs" table of docs/edge-behaviour.md (each test named after its row), sending
//! raw bytes to the real server. One test binary so that the crate and the
//! harness are linked once; the tests run in parallel, each against its own
//! sluice and upstream on ephemeral ports, and those that read RSS,
//! descriptors or CPU time read the spawned sluice's (`/proc/<pid>`), never
//! this process's.

#[path = "../support/mod.rs"]
mod support;
#[path = "../wire/mod.rs"]
mod wire;

mod hostile;
mod hostile_framing;
mod hostile_keys;
mod hostile_ops;
mod hostile_slow;
mod own_server;
mod upstream_faults;
mod upstream_framing;
mod upstream_responses;

use support::Sluice;
use wire::{Action, RawRequest, RawUpstream};

/// sluice in front of a scripted raw upstream on ephemeral ports; `rest`
/// follows the `upstream` line of `[server]` (more server keys, then
/// rules).
async fn behind(
    rest: &str,
    script: impl Fn(&RawRequest) -> Action + Send + Sync + 'static,
) -> (RawUpstream, Sluice) {
    let upstream = RawUpstream::start(script).await;
    let config = format!("[server]\nupstream = \"http://{{upstream}}\"\n{rest}\n");
    let sluice = Sluice::start(&config, upstream.addr).await;
    (upstream, sluice)
}
