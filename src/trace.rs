//! Distributed traces (OpenTelemetry): the trace a request carries is read
//! ([`context`]), sampling is decided before anything is allocated
//! ([`sample`]), a sampled request's spans are recorded ([`span`]) and
//! exported off the request path ([`export`]). docs/observability.md is the
//! operator's side.

pub mod context;
pub mod export;
pub mod ids;
pub mod otlp;
pub mod propagate;
pub mod sample;
pub mod span;
pub mod tracer;
