//! sluice as its users meet it: the library's public store API, the server
//! in-process and the real binary over HTTP. One test binary, one module per
//! area, so the crate and the harness are linked once rather than once per
//! file; the modules' tests run in parallel, each against its own sluice and
//! upstream on ephemeral ports.
//!
//! Hostile inputs are `tests/hostile`; the limiter properties
//! (`tests/algorithms.rs`) and the held-requests load (`tests/hold_load.rs`,
//! which needs the test process's descriptors and both cores to itself) are
//! binaries of their own.

#[path = "../support/mod.rs"]
mod support;

mod access_log;
mod adaptive;
mod admin_views;
mod ai_budgets;
mod algorithms_http;
mod bans;
mod body_keys_by_value;
mod budget_api;
mod byte_quota;
mod calendar;
mod callers;
mod charging;
mod charging_answer;
mod charging_clock;
mod cheap_refusals;
mod cli;
mod conversation;
mod deploy_assets;
mod forwarding;
mod grpc;
mod grpc_messages;
mod hold;
mod hold_clock;
mod http3;
mod hybrid;
mod import;
mod jsonrpc;
mod jwt;
mod keys_are_secrets;
mod kubernetes;
mod lifecycle;
mod limits;
mod memory_store;
mod metrics_exact;
mod no_query_is_free;
mod one_clock;
mod one_decider;
mod operations;
mod paths_alike;
mod pools;
mod proxy_protocol;
mod read_once;
mod redis_store;
mod redis_tls;
mod refusal_log;
mod reload;
mod replay;
mod request_size;
mod rls;
mod settlements;
mod shared_bans;
mod shutdown_delay;
mod status;
mod status_browser;
mod tls;
mod top;
mod tracing;
mod tunnel_ends;
mod unreadable_body;
mod upstream_pool;
mod upstream_tls;
mod websocket_h2;
mod websocket_messages;
