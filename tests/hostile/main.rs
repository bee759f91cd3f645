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
mod hostile_streams;
mod http1_engine;
mod over_tls;
mod own_server;
mod upstream_faults;
mod upstream_framing;
mod upstream_responses;

use support::Sluice;
use wire::{Action, RawRequest, RawUpstream};

/// How the raw-wire client reaches sluice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Plain,
    Tls,
}

/// The transport of the modules at the crate's root.
const TRANSPORT: Transport = Transport::Plain;

/// [`behind`], with sluice's listener speaking `transport`: over TLS, it
/// serves a certificate for `localhost` from a test CA, and the raw-wire
/// client connects through TLS ([`wire::serve_tls_at`]).
async fn behind_over(
    transport: Transport,
    rest: &str,
    script: impl Fn(&RawRequest) -> Action + Send + Sync + 'static,
) -> (RawUpstream, Sluice) {
    if transport == Transport::Plain {
        return behind(rest, script).await;
    }
    let ca = support::certs::TestCa::new("sluice raw-wire CA");
    // Kept for the whole test run: the listener reads them on reloads.
    let dir = tempfile::tempdir().unwrap().keep();
    let (cert, key) = ca.write_leaf(&dir, "localhost", &["localhost"]);
    // `rest` may open with more [server] keys: the TLS table goes last.
    let config = format!(
        "[server]\nupstream = \"http://{{upstream}}\"\n{rest}\n[server.tls]\ncerts = [{{ cert = \"{}\", key = \"{}\" }}]\n",
        cert.display(),
        key.display()
    );
    let upstream = RawUpstream::start(script).await;
    let sluice = Sluice::start(&config, upstream.addr).await;
    wire::serve_tls_at(
        sluice.addr,
        support::tls_client::verifying(ca.pem(), support::tls_client::H1),
    );
    (upstream, sluice)
}

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
    wire::serve_plain_at(sluice.addr);
    (upstream, sluice)
}
