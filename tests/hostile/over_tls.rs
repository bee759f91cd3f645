//! The framing and smuggling rows (`hostile_framing.rs`) again, with the
//! client speaking TLS to sluice: both of sluice's HTTP/1 servers run over
//! TLS through the same code as over plain TCP (docs/edge.md), and these
//! rows check that nothing about the framing changed.

const TRANSPORT: crate::Transport = crate::Transport::Tls;

// Loaded twice on purpose: once at the crate's root over plain TCP, once
// here over TLS, each reading its own `TRANSPORT`.
#[allow(clippy::duplicate_mod)]
#[path = "hostile_framing.rs"]
mod hostile_framing;
