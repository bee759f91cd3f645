//! Message limits (`unit = "message"`; docs/conversation.md, "WebSocket
//! messages", and docs/streams.md). A message rule never counts a
//! request, the one that opens the conversation included: when a
//! WebSocket handshake or a gRPC call over HTTP/2 is identified, each
//! message rule its `match` fits stands on it as a request rule would (the
//! bucket key, tiers and overrides from the request; `missing` as usual, a
//! refusal answered 400), and those that apply are what its client's
//! messages are held to ([`Metered`]). A gRPC call's body is metered as it
//! is forwarded (`messages/grpc.rs`). Once the upstream answers a
//! handshake `101`, the tunnel gets a [`MessageGate`]: the tunnel reads the client's
//! frames (`websocket/pump.rs`) and, before each data message passes, asks
//! the gate, which asks the store once for every limit of every rule, as a
//! request's admission does: enforced rules all or nothing, then shadow
//! rules; a delay-mode rule holds the message (the client is not read
//! meanwhile), a refusal closes the tunnel with 1008.
//!
//! The gate decides through the decider, as every way in does
//! ([`crate::decider`]): each message counts in
//! `sluice_requests_total{rule,outcome}` and in the rule's heavy hitters,
//! and a refused one in its refusal log; a ban set on a message rule's key
//! by hand refuses its messages, and none is struck (a message rule has no
//! `ban`).

use std::cell::OnceCell;
use std::net::IpAddr;
use std::sync::Arc;

use http::{Response, StatusCode};
use smallvec::SmallVec;

use super::admit::HoldGauges;
use super::respond::ProxyBody;
use super::settle::Settlement;
use super::standing::{self, Standing, Unidentified};
use super::upgrade::{self, Metering};
use crate::clock::{Clock, Nanos, ProxyClock};
use crate::decider::{
    self, fill_asks, Answered, Applicable, Caller, Decided, Decider, Holds, StoreUnavailable,
    Verdict,
};
use crate::key::jwt::Claims;
use crate::key::{KeyText, RequestFacts};
use crate::limiter::Decision;
use crate::log_gate::truncated;
use crate::metrics::Metrics;
use crate::policy::{Limit, Policy, Rule};
use crate::store::admission::Receipts;
use crate::store::{Admission as Answer, Asks, BucketKey, OnError, Outcome, Store, UNASKED};
use crate::websocket::frames::rsv_for_extensions;
use crate::websocket::pump::{Admission, Admitting, Gate};

pub mod grpc;

/// What carries a request's messages, when it carries any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    /// A WebSocket handshake's tunnel, once the upstream answers `101`.
    WebSocket,
    /// A gRPC call's request body (over HTTP/2).
    Grpc,
}

/// What carries the messages of `request`, if anything does: a WebSocket
/// handshake's tunnel, or the call itself when `grpc_call` (a gRPC call
/// over HTTP/2).
pub fn carrier_of<B>(request: &http::Request<B>, grpc_call: bool) -> Option<Carrier> {
    if upgrade::is_websocket_handshake(request) {
        Some(Carrier::WebSocket)
    } else if grpc_call {
        Some(Carrier::Grpc)
    } else {
        None
    }
}

/// The message rules a handshake's tunnel or a gRPC call is held to,
/// found as the request is identified; boxed, and only then (a request
/// carries `None`: its future stays as small as it was).
#[derive(Debug)]
pub struct Metered {
    rules: SmallVec<[Counted; 1]>,
    client_ip: Option<IpAddr>,
    carrier: Carrier,
}

/// One message rule that applies to a tunnel.
#[derive(Debug)]
struct Counted {
    /// The rule's index in the policy.
    index: usize,
    key: BucketKey,
    /// The caller's tier or override (an index into the rule's variants),
    /// else `None`: the rule's own limits.
    variant: Option<usize>,
    /// The key as text, for the rule's heavy hitters and refusal log
    /// (the handshake's facts are gone once the tunnel runs).
    text: KeyText,
}

impl Counted {
    fn rule<'p>(&self, policy: &'p Policy) -> &'p Rule {
        &policy.rules[self.index]
    }

    fn limits<'p>(&self, rule: &'p Rule) -> &'p [Limit] {
        match self.variant {
            Some(variant) => &rule.variants[variant].limits,
            None => &rule.limits,
        }
    }
}

/// Where each message rule stands on the request `facts` describe, when
/// it carries messages (`carrier`); those that apply into `metered`. A
/// message rule whose key source is missing refuses the request under
/// `missing = "reject"`, as a request rule would.
#[inline(never)]
pub fn identify<'r, 'p>(
    carrier: Option<Carrier>,
    facts: &mut RequestFacts<'r>,
    token_claims: &'r OnceCell<Option<Claims>>,
    policy: &'p Policy,
    started: Nanos,
    metered: &mut Option<Box<Metered>>,
) -> Result<(), Unidentified<'p>> {
    let Some(carrier) = carrier else {
        return Ok(());
    };
    for &index in &policy.message_rules {
        let rule = &policy.rules[index];
        match standing::stand_handshake(rule, facts, token_claims, policy, started) {
            Standing::MissingKey => return Err(Unidentified::MissingKey(rule)),
            Standing::Ambiguous(at) => return Err(Unidentified::Ambiguous(rule, at)),
            Standing::Applies { key, limits, .. } => {
                let metered = metered.get_or_insert_with(|| {
                    Box::new(Metered {
                        rules: SmallVec::new(),
                        client_ip: None,
                        carrier,
                    })
                });
                metered.rules.push(Counted {
                    index,
                    key,
                    variant: rule
                        .variants
                        .iter()
                        .position(|variant| std::ptr::eq(variant.limits.as_slice(), limits)),
                    text: policy.keys.key_text(&rule.key, facts),
                })
            }
            // A message rule has no sunset and no computed cost (config
            // check): nothing else refuses.
            _ => {}
        }
    }
    if let Some(metered) = metered {
        metered.client_ip = Some(facts.client_ip);
    }
    Ok(())
}

/// What a tunnel's gate decides with: the proxy's store, clock and
/// metrics, and the policy the handshake ran under (a tunnel keeps it for
/// its life, as a request does).
#[derive(Debug, Clone)]
pub struct Deciding {
    pub store: Arc<Store>,
    pub clock: ProxyClock,
    pub on_error: OnError,
    pub metrics: Arc<Metrics>,
    pub policy: Arc<Policy>,
}

/// The rules one message stands under ([`MessageGate::asking`]): enforced
/// and shadow ones, a verdict for each enforced limit, and each rule's key
/// as text, in the store's order.
#[derive(Default)]
struct Asking<'a> {
    enforced: SmallVec<[Applicable<'a>; 1]>,
    shadowed: SmallVec<[Applicable<'a>; 1]>,
    verdicts: SmallVec<[Verdict<'a>; 2]>,
    texts: SmallVec<[&'a KeyText; 2]>,
}

/// When `response` is a `101` that opened a tunnel: counts it open
/// (`sluice_websocket_connections`) and, when message rules apply, gives
/// it the gate its client's messages pass.
#[inline]
pub fn open(
    response: &mut Response<ProxyBody>,
    metered: Option<Box<Metered>>,
    deciding: impl FnOnce() -> Deciding,
    metrics: &Metrics,
) {
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        open_tunnel(response, metered, deciding, metrics);
    }
}

/// [`open`] once the answer is a `101`: out of the request path's line.
#[inline(never)]
fn open_tunnel(
    response: &mut Response<ProxyBody>,
    metered: Option<Box<Metered>>,
    deciding: impl FnOnce() -> Deciding,
    metrics: &Metrics,
) {
    let metering = metered.map(|metered| {
        let Metered {
            rules,
            client_ip,
            carrier,
        } = *metered;
        let deciding = deciding();
        let extensions = response.headers().get_all("sec-websocket-extensions");
        Metering {
            max_message_bytes: deciding.policy.config.server.max_message_bytes,
            rsv_allowed: rsv_for_extensions(extensions.iter().map(|value| value.as_bytes())),
            gate: Box::new(MessageGate {
                deciding,
                client_ip,
                rules,
                carrier,
            }) as Box<dyn Gate>,
        }
    });
    let open = metrics.tunnel_opened();
    response.body_mut().open_tunnel(open, metering);
}

/// Admits each message of a tunnel's client under the message rules that
/// applied to its handshake.
#[derive(Debug)]
struct MessageGate {
    deciding: Deciding,
    rules: SmallVec<[Counted; 1]>,
    client_ip: Option<IpAddr>,
    carrier: Carrier,
}

impl Gate for MessageGate {
    fn admit(&self) -> Admitting<'_> {
        Box::pin(self.decide())
    }
}

impl MessageGate {
    /// One message: every limit of every rule asked at once by the
    /// decider (enforced rules first, then shadow ones), counted, and held
    /// while a delay-mode rule says so.
    async fn decide(&self) -> Admission {
        let Deciding {
            store,
            clock,
            on_error,
            metrics,
            policy,
        } = &self.deciding;
        let decider = Decider {
            store,
            clock,
            on_error: *on_error,
            metrics,
        };
        let now = clock.now();
        let mut asking = self.asking(policy);
        let mut asks = Asks::default();
        fill_asks(
            &mut asks,
            &asking.enforced,
            &asking.shadowed,
            Holds::AsRuled,
        );
        let mut answer = Answer::default();
        let local = match decider.admit(&asks, now, &mut answer).await {
            Err(StoreUnavailable) => return Admission::Unavailable,
            Ok(Answered::Unlimited) => return Admission::Pass,
            Ok(answered) => answered == Answered::Locally,
        };
        drop(asks);
        let at = answer.at;
        let mut wait = 0;
        for (verdict, decision) in asking.verdicts.iter_mut().zip(&answer.decisions) {
            verdict.decision = *decision;
            wait = wait.max(decision.wait());
        }
        let refused = {
            let first_shadow = asking.enforced.len();
            let shadow_limited = |index| answer.shadow_limited.contains(&(first_shadow + index));
            let decided = Decided {
                enforced: &asking.enforced,
                shadowed: &asking.shadowed,
                verdicts: &asking.verdicts,
                outcome: answer.outcome,
                shadow_limited: &shadow_limited,
                bans_started: &answer.bans_started,
                at,
            };
            let tunnel = Tunnel {
                gate: self,
                asking: &asking,
            };
            decider::count(store, policy, &decided, &tunnel);
            refused_by(&decided)
        };
        if let Some(rule) = refused {
            return Admission::Refused {
                rule: Arc::clone(&rule.name),
                retry_after: retry_after(&asking.verdicts),
            };
        }
        if wait > 0 {
            // Held: what was reserved is given back if the tunnel ends
            // first (the settlement is dropped unpassed).
            let mut settlement =
                Settlement::new(Arc::clone(store), clock.clone(), local, Receipts::new());
            settlement.take_receipts(&mut answer.receipts);
            drop(answer);
            let holding = HoldGauges::new(&asking.verdicts, clock, at);
            clock.sleep_until(at + wait).await;
            drop(holding);
            settlement.passed();
        }
        Admission::Pass
    }

    /// What the store is asked for one message: every rule, enforced
    /// rules first, then shadow ones, as the decider takes them.
    fn asking<'a>(&'a self, policy: &'a Policy) -> Asking<'a> {
        let mut asking = Asking::default();
        for shadow in [false, true] {
            for counted in self.rules.iter() {
                let rule = counted.rule(policy);
                if rule.shadow != shadow {
                    continue;
                }
                let limits = counted.limits(rule);
                let applicable = Applicable {
                    rule,
                    key: counted.key,
                    limits,
                    cost: rule.cost,
                };
                if shadow {
                    asking.shadowed.push(applicable);
                } else {
                    asking.enforced.push(applicable);
                    asking.verdicts.extend(limits.iter().map(|limit| Verdict {
                        rule,
                        limit,
                        decision: UNASKED,
                    }));
                }
                asking.texts.push(&counted.text);
            }
        }
        asking
    }
}

/// The rule a refused message is closed for: the banning one, the first
/// whose limit refused, or (a refusal that could not be told apart) the
/// first enforced one.
fn refused_by<'p>(decided: &Decided<'_, 'p>) -> Option<&'p Rule> {
    match decided.outcome {
        Outcome::Admitted => None,
        Outcome::Banned { rule, .. } => Some(decided.enforced[rule].rule),
        Outcome::Limited => decided
            .verdicts
            .iter()
            .find(|verdict| !verdict.decision.is_allowed())
            .or(decided.verdicts.first())
            .map(|verdict| verdict.rule),
    }
}

/// How long a refused message's client should wait before it tries
/// again: the longest any refusing limit says (0 when none can tell).
fn retry_after(verdicts: &[Verdict<'_>]) -> Nanos {
    verdicts
        .iter()
        .filter_map(|verdict| match verdict.decision {
            Decision::Deny { retry_after, .. } => retry_after,
            Decision::Allow(_) | Decision::Hold { .. } => None,
        })
        .max()
        .unwrap_or(0)
}

/// A tunnel's client as the decider's counting knows it.
struct Tunnel<'a, 'p> {
    gate: &'a MessageGate,
    asking: &'a Asking<'p>,
}

impl Caller for Tunnel<'_, '_> {
    fn key_text(&self, asked: usize, _: &Applicable<'_>) -> KeyText {
        self.asking.texts[asked].clone()
    }

    /// Logs a refused message within the rule's lines a second.
    fn log_refusal(&self, rule: &Rule, banned: bool, now: Nanos, key: &dyn Fn() -> String) {
        let Some(suppressed) = rule.log_gate.let_through(now) else {
            return;
        };
        let client_ip = self.gate.client_ip.map(|ip| ip.to_string());
        let outcome = if banned { "banned" } else { "limited" };
        let key = key();
        let key = truncated(&key);
        let client_ip = client_ip.unwrap_or_default();
        let on = match self.gate.carrier {
            Carrier::WebSocket => "websocket",
            Carrier::Grpc => "grpc",
        };
        tracing::info!(
            rule = &*rule.name,
            outcome,
            key = %key,
            client_ip,
            on,
            suppressed,
            "message refused"
        );
    }
}

#[cfg(test)]
mod tests;
