//! WebSocket message limits (`unit = "message"`; docs/conversation.md,
//! "WebSocket messages"). A message rule never counts a request, its
//! handshake included: when a WebSocket handshake is identified, each
//! message rule its `match` fits stands on it as a request rule would (the
//! bucket key, tiers and overrides from the handshake; `missing` as
//! usual, a refusal answered 400), and those that apply are what the
//! tunnel's client is held to ([`Metered`]). Once the upstream answers
//! `101`, the tunnel gets a [`MessageGate`]: the tunnel reads the client's
//! frames (`websocket/pump.rs`) and, before each data message passes, asks
//! the gate, which asks the store once for every limit of every rule, as a
//! request's admission does: enforced rules all or nothing, then shadow
//! rules; a delay-mode rule holds the message (the client is not read
//! meanwhile), a refusal closes the tunnel with 1008.
//!
//! Each message counts in `sluice_requests_total{rule,outcome}` and in the
//! rule's heavy hitters, and a refused one in its refusal log; no ban is
//! asked or struck (a message rule has none).

use std::cell::OnceCell;
use std::net::IpAddr;
use std::sync::Arc;

use http::{Response, StatusCode};
use smallvec::SmallVec;

use super::admit::{Admitter, Answered, HoldGauges};
use super::respond::{ProxyBody, Verdict};
use super::settle::Settlement;
use super::standing::{self, Standing, Unidentified};
use super::tally;
use super::upgrade::Metering;
use crate::clock::{Clock, Nanos, ProxyClock};
use crate::key::jwt::Claims;
use crate::key::{KeyText, RequestFacts};
use crate::log_gate::truncated;
use crate::metrics::Metrics;
use crate::policy::{Limit, Policy, Rule};
use crate::store::admission::Receipts;
use crate::store::{Admission as Answer, Ask, Asks, BucketKey, OnError, Outcome, Store, UNASKED};
use crate::websocket::frames::rsv_for_extensions;
use crate::websocket::pump::{Admission, Admitting, Gate};

/// The message rules a handshake's tunnel is held to, found as the
/// handshake is identified; boxed, and only then (a request carries
/// `None`: its future stays as small as it was).
#[derive(Debug, Default)]
pub struct Metered {
    rules: SmallVec<[Counted; 1]>,
    client_ip: Option<IpAddr>,
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
/// it is a WebSocket `handshake`; those that apply into `metered`. A
/// message rule whose key source is missing refuses the handshake under
/// `missing = "reject"`, as a request rule would.
#[inline(never)]
pub fn identify<'r, 'p>(
    handshake: bool,
    facts: &mut RequestFacts<'r>,
    token_claims: &'r OnceCell<Option<Claims>>,
    policy: &'p Policy,
    started: Nanos,
    metered: &mut Option<Box<Metered>>,
) -> Result<(), Unidentified<'p>> {
    if !handshake {
        return Ok(());
    }
    for &index in &policy.message_rules {
        let rule = &policy.rules[index];
        match standing::stand_handshake(rule, facts, token_claims, policy, started) {
            Standing::MissingKey => return Err(Unidentified::MissingKey(rule)),
            Standing::Ambiguous(at) => return Err(Unidentified::Ambiguous(rule, at)),
            Standing::Applies { key, limits, .. } => {
                metered.get_or_insert_default().rules.push(Counted {
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

/// What the store is asked for one message ([`MessageGate::asking`]):
/// the asks, a verdict for each enforced limit, and the rules in the
/// store's order.
#[derive(Default)]
struct Asking<'a> {
    asks: Asks<'a>,
    verdicts: SmallVec<[Verdict<'a>; 4]>,
    order: SmallVec<[&'a Counted; 2]>,
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
        let Metered { rules, client_ip } = *metered;
        let deciding = deciding();
        let extensions = response.headers().get_all("sec-websocket-extensions");
        Metering {
            max_message_bytes: deciding.policy.config.server.max_message_bytes,
            rsv_allowed: rsv_for_extensions(extensions.iter().map(|value| value.as_bytes())),
            gate: Box::new(MessageGate {
                deciding,
                client_ip,
                rules,
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
}

impl Gate for MessageGate {
    fn admit(&self) -> Admitting<'_> {
        Box::pin(self.decide())
    }
}

impl MessageGate {
    /// One message: every limit of every rule asked at once (enforced
    /// rules first, then shadow ones), counted, and held while a
    /// delay-mode rule says so.
    async fn decide(&self) -> Admission {
        let Deciding {
            store,
            clock,
            on_error,
            metrics,
            policy,
        } = &self.deciding;
        let admitter = Admitter {
            store,
            clock,
            on_error: *on_error,
            metrics,
            ticker: None,
        };
        let now = clock.now();
        let Asking {
            asks,
            mut verdicts,
            order,
        } = self.asking(policy);
        let mut answer = Answer::default();
        let asked = admitter.store.admit(&asks, now, &mut answer).await;
        let local = match admitter.answered(asked, &asks, now, &mut answer) {
            Err(_) => return Admission::Unavailable,
            Ok(Answered::Unlimited) => return Admission::Pass,
            Ok(Answered::Locally) => true,
            Ok(Answered::ByStore) => false,
        };
        let at = answer.at;
        let mut wait = 0;
        for (verdict, decision) in verdicts.iter_mut().zip(&answer.decisions) {
            verdict.decision = *decision;
            wait = wait.max(decision.wait());
        }
        tally::count_outcomes(&verdicts);
        let admitted = answer.outcome == Outcome::Admitted;
        let refused_by = self.count(policy, &order, &verdicts, &answer);
        if let Some(rule) = refused_by {
            return Admission::Refused(Arc::clone(&rule.name));
        }
        if !admitted {
            // Refused by a rule whose verdict could not be told apart:
            // the first enforced one answers for it.
            return match verdicts.first() {
                Some(verdict) => Admission::Refused(Arc::clone(&verdict.rule.name)),
                None => Admission::Pass,
            };
        }
        if wait > 0 {
            // Held: what was reserved is given back if the tunnel ends
            // first (the settlement is dropped unpassed).
            let mut settlement =
                Settlement::new(Arc::clone(store), clock.clone(), local, Receipts::new());
            settlement.take_receipts(&mut answer.receipts);
            drop(answer);
            let holding = HoldGauges::new(&verdicts, clock, at);
            clock.sleep_until(at + wait).await;
            drop(holding);
            settlement.passed();
        }
        Admission::Pass
    }

    /// What the store is asked for one message: every limit of every
    /// rule, enforced rules first, then shadow ones.
    fn asking<'a>(&'a self, policy: &'a Policy) -> Asking<'a> {
        let mut asking = Asking::default();
        for shadow in [false, true] {
            for counted in self.rules.iter() {
                let rule = counted.rule(policy);
                if rule.shadow != shadow {
                    continue;
                }
                let limits = counted.limits(rule);
                asking.asks.push_rule(
                    counted.key,
                    shadow,
                    None,
                    limits.iter().map(|limit| Ask {
                        table: &limit.table,
                        key: counted.key,
                        limiter: &limit.limiter,
                        cost: rule.cost,
                        hold: rule.hold,
                    }),
                );
                if !shadow {
                    asking.verdicts.extend(limits.iter().map(|limit| Verdict {
                        rule,
                        limit,
                        decision: UNASKED,
                    }));
                }
                asking.order.push(counted);
            }
        }
        asking
    }

    /// Counts the store's `answer` in each rule asked (in `order`), and
    /// logs a refusal: the first enforced rule that refused, if one did.
    fn count<'p>(
        &self,
        policy: &'p Policy,
        order: &[&Counted],
        verdicts: &[Verdict<'_>],
        answer: &Answer,
    ) -> Option<&'p Rule> {
        let (at, admitted) = (answer.at, answer.outcome == Outcome::Admitted);
        let mut refused_by = None;
        for (index, counted) in order.iter().enumerate() {
            let rule = counted.rule(policy);
            let refused = !rule.shadow
                && !admitted
                && verdicts
                    .iter()
                    .any(|v| std::ptr::eq(v.rule, rule) && !v.decision.is_allowed());
            if rule.shadow && admitted {
                if answer.shadow_limited.contains(&index) {
                    rule.counters.shadow_limited.inc();
                } else {
                    rule.counters.allowed.inc();
                }
            }
            rule.hitters
                .count(counted.key, refused, at, || counted.text.clone());
            if refused {
                self.log_refusal(rule, counted, at);
                refused_by.get_or_insert(rule);
            }
        }
        refused_by
    }

    /// Logs a refused message within the rule's lines a second.
    fn log_refusal(&self, rule: &Rule, counted: &Counted, now: Nanos) {
        let Some(suppressed) = rule.log_gate.let_through(now) else {
            return;
        };
        let policy = &self.deciding.policy;
        let key = policy.labels.show(&rule.key, &counted.text);
        let client_ip = self.client_ip.map(|ip| ip.to_string()).unwrap_or_default();
        tracing::info!(
            rule = &*rule.name,
            outcome = "limited",
            key = %truncated(&key),
            client_ip,
            suppressed,
            "websocket message refused"
        );
    }
}

#[cfg(test)]
mod tests;
