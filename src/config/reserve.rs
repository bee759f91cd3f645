//! Reservations: `reserve` (what a request with a `charge` takes at
//! admission in place of `cost`: a number of units, or a weighted sum of
//! what its body says of it) and `reserve_missing` (the reservation of a
//! request that says nothing of its size). See docs/ai-budgets.md.

use toml::Spanned;

use super::limits::BuiltLimits;
use super::raw::{RawReserve, RawRule, Start};
use super::rules::RuleContext;
use super::validate::Validator;
use super::{Reservation, Reserve, ReserveSource};
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
                let units = self.int(
                    Some(&Spanned::new(at..at, *units)),
                    &path,
                    1,
                    1..=i64::MAX as u64,
                );
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
        if let Some(kind) = rule.algorithm.filter(|kind| !kind.settles()) {
            self.error(
                at,
                path,
                format!(
                    "a {} rule cannot give back part of what it took; reserve with algorithm = \
                     \"token_bucket\", \"fixed_window\" or \"sliding_window\"",
                    kind.name()
                ),
            );
            valid = false;
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
    Err(format!(
        "unknown reserve source \"{text}\"; {RESERVE_ALLOWED}"
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{errors, only_error, rule_a, valid};
    use super::super::Weighted;
    use super::*;

    const CHARGED: &str = "rate = \"10000/d\"\ncharge = \"json:/usage/total_tokens\"\n";

    #[test]
    fn a_number_or_a_table_of_request_sources_is_read() {
        let config = valid(&rule_a(&format!("{CHARGED}reserve = 4000\n")));
        let reserve = config.rules[0].reserve.clone().expect("a reservation");
        assert_eq!(reserve.amount, Reservation::Units(4000));
        assert_eq!((reserve.missing, reserve.reads_body()), (None, false));
        let config = valid(&rule_a(&format!(
            "{CHARGED}reserve = {{ \"body:/max_tokens\" = 4, request_bytes = 0.25 }}\n\
             reserve_missing = 5000\n"
        )));
        let reserve = config.rules[0].reserve.clone().expect("a reservation");
        let max_tokens = Pointer::parse("/max_tokens").unwrap();
        assert_eq!(
            reserve.amount,
            Reservation::Sources(vec![
                Weighted {
                    source: ReserveSource::Body(max_tokens),
                    weight: 4.0
                },
                Weighted {
                    source: ReserveSource::RequestBytes,
                    weight: 0.25
                },
            ])
        );
        assert_eq!((reserve.missing, reserve.reads_body()), (Some(5000), true));
        assert_eq!(
            reserve.amount.to_string(),
            "{ \"body:/max_tokens\" = 4, \"request_bytes\" = 0.25 }"
        );
        // Without reserve, nothing is reserved.
        assert_eq!(valid(&rule_a(CHARGED)).rules[0].reserve, None);
    }

    #[test]
    fn reserve_needs_a_charge_no_cost_and_a_balance() {
        assert_eq!(
            only_error(&rule_a("rate = \"100/m\"\nreserve = 10\n")),
            "test.toml:6:11: rule[0].reserve: a reservation is settled against the rule's \
             charge when the answer ends, and this rule has none; add one, such as charge = \
             \"json:/usage/total_tokens\", or write cost = N for a price known at admission"
        );
        assert_eq!(
            only_error(&rule_a(&format!("{CHARGED}cost = 2\nreserve = 10\n"))),
            "test.toml:7:8: rule[0].cost: reserve is taken at admission in place of cost; \
             remove cost (a request reserves what reserve says, then pays what its charge says)"
        );
        let lines = errors(&rule_a(
            "algorithm = \"sliding_log\"\nrate = \"100/m\"\ncharge = \"elapsed_ms\"\nreserve = 10\n",
        ));
        assert!(
            lines.iter().any(|line| line.starts_with(
                "test.toml:8:11: rule[0].reserve: a sliding_log rule cannot give back part of \
                 what it took"
            )),
            "{lines:#?}"
        );
        assert_eq!(
            only_error(&rule_a("rate = \"100/m\"\nreserve_missing = 10\n")),
            "test.toml:6:19: rule[0].reserve_missing: reserve_missing is the reservation of a \
             request whose reserve sources are missing, and this rule reserves nothing; add \
             reserve, such as reserve = { \"body:/max_tokens\" = 1 }"
        );
    }

    #[test]
    fn a_reservation_that_can_never_fit_or_a_wrong_source_is_refused_where_written() {
        assert_eq!(
            only_error(&rule_a(&format!("{CHARGED}reserve = 20000\n"))),
            "test.toml:7:11: rule[0].reserve: reserve = 20000 can never fit in rate \"10000/d\", \
             whose capacity is 10000 (its COUNT): such a request would never be admitted; lower \
             reserve or raise that COUNT"
        );
        assert_eq!(
            only_error(&rule_a(&format!(
                "{CHARGED}reserve = {{ \"body:/max_tokens\" = 1 }}\nreserve_missing = 10001\n"
            ))),
            "test.toml:8:19: rule[0].reserve_missing: reserve_missing = 10001 can never fit in \
             rate \"10000/d\", whose capacity is 10000 (its COUNT): such a request would never be \
             admitted; lower reserve_missing or raise that COUNT"
        );
        assert_eq!(
            only_error(&rule_a(&format!(
                "{CHARGED}reserve = {{ \"json:/usage/total_tokens\" = 1 }}\n"
            ))),
            "test.toml:7:13: rule[0].reserve.\"json:/usage/total_tokens\": \
             \"json:/usage/total_tokens\" is known only from the answer, and a reservation is \
             taken before the request is forwarded; reserve by what the request says \
             (\"body:/max_tokens\"), and charge by the answer; allowed: \"body:<pointer>\" (a \
             number in the JSON request body, such as \"body:/max_tokens\") and \"request_bytes\" \
             (the request body's length)"
        );
        let weight = only_error(&rule_a(&format!(
            "{CHARGED}reserve = {{ \"body:/max_tokens\" = -1 }}\n"
        )));
        assert!(
            weight.starts_with(
                "test.toml:7:34: rule[0].reserve.\"body:/max_tokens\": the weight -1 is not a \
                 number of at least 0: each unit the source reports is reserved this many times"
            ),
            "{weight}"
        );
        for (written, column) in [("\"max_tokens\"", 11), ("2.5", 11), ("0", 11), ("{}", 11)] {
            let line = only_error(&rule_a(&format!("{CHARGED}reserve = {written}\n")));
            assert!(
                line.starts_with(&format!("test.toml:7:{column}: rule[0].reserve: ")),
                "{written}: {line}"
            );
        }
        // A fixed reservation is never missing.
        let config = crate::config::Config::from_toml(
            &rule_a(&format!("{CHARGED}reserve = 10\nreserve_missing = 20\n")),
            "test.toml",
        )
        .unwrap();
        assert_eq!(
            config.warnings,
            ["test.toml:8:19: rule[0].reserve_missing: has no effect: a reservation of a number \
              of units is never missing; reserve_missing is for a table of sources, such as \
              reserve = { \"body:/max_tokens\" = 1 }"]
        );
    }

    #[test]
    fn messages_and_service_calls_reserve_nothing() {
        let lines = errors(&rule_a(&format!(
            "unit = \"message\"\n{CHARGED}reserve = 10\n"
        )));
        assert!(
            lines.iter().any(|line| line
                .starts_with("test.toml:8:11: rule[0].reserve: a message gets no answer")),
            "{lines:#?}"
        );
        let lines = errors(&rule_a(&format!(
            "match = {{ domain = \"d\" }}\nkey = [\"descriptor:k\"]\n{CHARGED}reserve = 10\n"
        )));
        assert!(
            lines.iter().any(|line| line.starts_with(
                "test.toml:9:11: rule[0].reserve: a rule with match.domain takes no reserve"
            )),
            "{lines:#?}"
        );
    }
}
