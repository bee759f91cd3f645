//! One log line per refused request (limited, banned, denied, keyless,
//! ambiguous),
//! within each rule's [`LogGate`]: at most a few lines a second a rule, the
//! rest counted into the next line's `suppressed`.

use crate::clock::Nanos;
use crate::key::RequestFacts;
use crate::log_gate::{truncated, LogGate};

/// Why a request was refused, as the line says it.
#[derive(Debug, Clone, Copy)]
pub enum Refused {
    Limited,
    Banned,
    Denied,
    MissingKey,
    /// A field a rule reads was sent twice; the line's `key` names the field.
    AmbiguousField,
    /// A rule reads the body, which sluice cannot read; the line's `key`
    /// says why.
    UnreadableBody,
}

impl Refused {
    fn as_str(self) -> &'static str {
        match self {
            Refused::Limited => "limited",
            Refused::Banned => "banned",
            Refused::Denied => "denied",
            Refused::MissingKey => "missing_key",
            Refused::AmbiguousField => "ambiguous_field",
            Refused::UnreadableBody => "unreadable_body",
        }
    }
}

/// Logs the refusal of the request `facts` describe by `rule` (none: the
/// access list), if `gate` lets one more line through at `now`; `key`
/// writes the caller's key as it may be shown (credentials labelled,
/// [`crate::key::KeyLabels`]), only then.
#[inline]
pub fn log(
    gate: &LogGate,
    now: Nanos,
    rule: Option<&str>,
    refused: Refused,
    facts: &RequestFacts<'_>,
    key: impl FnOnce() -> String,
) {
    let Some(suppressed) = gate.let_through(now) else {
        return;
    };
    let key = key();
    tracing::info!(
        rule = rule.unwrap_or("-"),
        outcome = refused.as_str(),
        key = %truncated(&key),
        client_ip = %facts.client_ip,
        method = %facts.method,
        path = %truncated(facts.normalized_path),
        suppressed,
        "request refused"
    );
}
