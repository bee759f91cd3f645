//! Reservations: `reserve` (what a request with a `charge` takes at
//! admission in place of `cost`: a number of units, or a weighted sum of
//! what its body says of it) and `reserve_missing` (the reservation of a
//! request that says nothing of its size). See docs/ai-budgets.md.

use toml::Spanned;

use super::limits::BuiltLimits;
use super::raw::{RawReserve, RawRule, Start};
use super::rules::RuleContext;
use super::validate::Validator;
use super::{AlgorithmKind, Reservation, Reserve, ReserveSource};
use crate::body_scan::Pointer;

/// What a table of `reserve` sources accepts, for its error message.
const RESERVE_ALLOWED: &str = "allowed: \"body:<pointer>\" (a number in the JSON request \
     body, such as \"body:/max_tokens\") and \"request_bytes\" (the request body's length)";

impl Validator<'_> {
    /// `reserve` and `reserve_missing`: beside a `charge` and instead of
    /// `cost`, on an algorithm that carries a balance, within the rule's
    /// capacity.
    pub(super) fn reserve(
        &mut self,
        rule: &RuleContext,
        raw: &RawRule,
        built: &BuiltLimits,
    ) -> Option<Reserve> {
        let index = rule.index;
        let missing_path = format!("rule[{index}].reserve_missing");
        let Some(field) = &raw.reserve else {
            if let Some(missing) = &raw.reserve_missing {
                self.error(
                    missing.span().start,
                    &missing_path,
                    "reserve_missing is the reservation of a request whose reserve sources are \
                     missing, and this rule reserves nothing; add reserve, such as reserve = { \
                     \"body:/max_tokens\" = 1 }",
                );
            }
            return None;
        };
        let path = format!("rule[{index}].reserve");
        let at = field.start_or(rule.at);
        let mut valid = self.reserve_beside(rule, raw, &path, at);
        let amount = match &field.value {
            RawReserve::Units(units) => {
                let units = self.int(Some(&Spanned::new(at..at, *units)), &path, 1, 1..=i64::MAX as u64);
                self.fits(rule, built, &path, at, &format!("reserve = {units}"), units);
                Reservation::Units(units)
            }
            RawReserve::Other(text) => {
                return self.invalid(
                    at,
                    &path,
                    format!(
                        "{text} is not a reservation; write a whole number of units (reserve = \
                         4000) or a table of request sources to weights (reserve = {{ \
                         \"body:/max_tokens\" = 1 }})"
                    ),
                );
            }
            RawReserve::Table(entries) => {
                let empty = "write reserve = { \"body:/max_tokens\" = 1 }, or a whole number of \
                             units";
                match self.weights(at, &path, entries, empty, "reserved", parse_source) {
                    Some(sources) => Reservation::Sources(sources),
                    None => {
                        valid = false;
                        Reservation::Units(1)
                    }
                }
            }
        };
        let missing = raw.reserve_missing.as_ref().map(|written| {
            let units = self.int(Some(written), &missing_path, 1, 1..=i64::MAX as u64);
            let at = written.span().start;
            if matches!(amount, Reservation::Units(_)) {
                self.warn(
                    at,
                    &missing_path,
                    "has no effect: a reservation of a number of units is never missing; \
                     reserve_missing is for a table of sources, such as reserve = { \
                     \"body:/max_tokens\" = 1 }",
                );
            }
            let subject = format!("reserve_missing = {units}");
            self.fits(rule, built, &missing_path, at, &subject, units);
            units
        });
        valid.then_some(Reserve { amount, missing })
    }

    /// Whether the rule may reserve: it has a charge to settle against, no
    /// `cost` beside, and an algorithm whose balance a settlement can move.
    fn reserve_beside(&mut self, rule: &RuleContext, raw: &RawRule, path: &str, at: usize) -> bool {
        let mut valid = true;
        if raw.charge.is_none() {
            self.error(
                at,
                path,
                "a reservation is settled against the rule's charge when the answer ends, and \
                 this rule has none; add one, such as charge = \"json:/usage/total_tokens\", \
                 or write cost = N for a price known at admission",
            );
            valid = false;
        }
        if let Some(cost) = &raw.cost {
            self.error(
                cost.span().start,
                &format!("rule[{}].cost", rule.index),
                "reserve is taken at admission in place of cost; remove cost (a request \
                 reserves what reserve says, then pays what its charge says)",
            );
            valid = false;
        }
        match rule.algorithm {
            Some(
                AlgorithmKind::TokenBucket
                | AlgorithmKind::FixedWindow
                | AlgorithmKind::SlidingWindow,
            )
            | None => {}
            Some(kind) => {
                self.error(
                    at,
                    path,
                    format!(
                        "a {} rule cannot give back part of what it took; reserve with \
                         algorithm = \"token_bucket\", \"fixed_window\" or \"sliding_window\"",
                        kind.name()
                    ),
                );
                valid = false;
            }
        }
        valid
    }

    /// Reports `units` (what `subject` reserves) when it can never fit the
    /// rule's limits.
    fn fits(
        &mut self,
        rule: &RuleContext,
        built: &BuiltLimits,
        path: &str,
        at: usize,
        subject: &str,
        units: u64,
    ) {
        let Some(written) = rule.written else {
            return;
        };
        if let Some((_, message)) = self.cost_misfit(subject, units, rule.algorithm, written, built)
        {
            self.error(at, path, message);
        }
    }
}

/// `"body:<pointer>"` or `"request_bytes"`.
fn parse_source(text: &str) -> Result<ReserveSource, String> {
    if text == "request_bytes" {
        return Ok(ReserveSource::RequestBytes);
    }
    if let Some(pointer) = text.strip_prefix("body:") {
        return Pointer::parse(pointer).map(ReserveSource::Body);
    }
    if text.starts_with("json:") || text == "response_bytes" || text == "elapsed_ms" {
        return Err(format!(
            "\"{text}\" is known only from the answer, and a reservation is taken before the \
             request is forwarded; reserve by what the request says (\"body:/max_tokens\"), and \
             charge by the answer; {RESERVE_ALLOWED}"
        ));
    }
    Err(format!("unknown reserve source \"{text}\"; {RESERVE_ALLOWED}"))
}
