//! `unit`: what a rule counts. A `unit = "message"` rule counts the
//! messages clients send on the WebSocket tunnels its handshakes open
//! (docs/conversation.md, "WebSocket messages") and on the gRPC calls it
//! matches (docs/streams.md), so it keeps to what a
//! message can mean: it is counted as it starts and answered by closing
//! the connection, so nothing is in flight to hold a permit for, no answer
//! comes to charge or refund by, and no request is refused for it (a ban,
//! a sunset's 410); a handshake is a `GET` without a body, proxied, never
//! a rate limit service call.

use super::raw::{RawRule, Start};
use super::rules::RuleContext;
use super::validate::Validator;
use super::{RuleConfig, Unit};

impl Validator<'_> {
    /// `rule`'s `unit` (written as `raw`, in `context`), and
    /// for a message rule every field that cannot work with it.
    pub(super) fn unit(&mut self, context: &RuleContext, raw: &RawRule, rule: &RuleConfig) -> Unit {
        let (index, at) = (context.index, context.at);
        let unit = self.choice(
            raw.unit.as_ref(),
            &format!("rule[{index}].unit"),
            &[("request", Unit::Request), ("message", Unit::Message)],
            Unit::Request,
        );
        if unit == Unit::Message {
            self.message_rule(index, at, raw, rule);
        }
        unit
    }

    /// A message rule's fields that cannot work with messages, each an
    /// error.
    fn message_rule(&mut self, index: usize, at: usize, raw: &RawRule, rule: &RuleConfig) {
        let path = |field: &str| format!("rule[{index}].{field}");
        if rule.algorithm.counts_in_flight() {
            self.error(
                raw.algorithm.start_or(at),
                &path("algorithm"),
                format!(
                    "a message is counted as it starts and holds nothing while it passes, so \
                     unit = \"message\" takes a rate, not {}; bound open connections with a \
                     concurrency rule on the handshake (unit = \"request\")",
                    rule.algorithm.name()
                ),
            );
        }
        if let Some(domain) = raw.matcher.as_ref().and_then(|m| m.domain.as_ref()) {
            self.error(
                domain.span().start,
                &path("match.domain"),
                "a rate limit service call opens no WebSocket or gRPC stream, so unit = \
                 \"message\" cannot apply to it; remove match.domain, or count requests",
            );
        }
        if let Some(method) = raw.matcher.as_ref().and_then(|m| m.method.as_ref()) {
            let methods = &rule.matcher.method;
            if !methods.contains(&http::Method::GET) && !methods.contains(&http::Method::POST) {
                self.error(
                    method.span().start,
                    &path("match.method"),
                    "a WebSocket handshake is a GET and a gRPC call a POST, so this rule would \
                     never count a message; add \"GET\" or \"POST\", or remove match.method",
                );
            }
        }
        if let Some(source) = rule.key.iter().find(|source| source.reads_body()) {
            self.error(
                raw.key.start_or(at),
                &path("key"),
                format!(
                    "\"{source}\" reads a request body, and a WebSocket handshake has none; key \
                     a message rule on the handshake's ip, path, headers, query or token"
                ),
            );
        }
        if rule.graphql_cost {
            self.error(
                raw.cost.start_or(at),
                &path("cost"),
                "a WebSocket message is not a GraphQL request; cost is the whole number of \
                 units each message takes",
            );
        }
        self.message_unanswered(index, at, raw);
    }

    /// A message gets no answer: nothing charges or refunds it, no ban or
    /// sunset refuses it.
    fn message_unanswered(&mut self, index: usize, at: usize, raw: &RawRule) {
        let path = |field: &str| format!("rule[{index}].{field}");
        let no_answer = "a message gets no answer to charge or refund by";
        for (field, where_) in [
            ("charge", raw.charge.as_ref().map(|c| c.start_or(at))),
            ("charge_missing", raw.charge_missing.start()),
            ("reserve", raw.reserve.as_ref().map(|r| r.start_or(at))),
            ("reserve_missing", raw.reserve_missing.start()),
            ("refund_on", raw.refund_on.start()),
        ] {
            if let Some(field_at) = where_ {
                self.error(
                    field_at,
                    &path(field),
                    format!("{no_answer}; remove {field}, or charge on a request rule"),
                );
            }
        }
        if let Some(ban) = &raw.ban {
            self.error(
                ban.start_or(at),
                &path("ban"),
                "a ban refuses requests, and a message over its budget closes its connection \
                 instead; ban with a rule on the handshake (unit = \"request\")",
            );
        }
        if let Some(sunset) = &raw.sunset {
            self.error(
                sunset.start_or(at),
                &path("sunset"),
                "a sunset retires requests (Deprecation and Sunset headers, then 410), which a \
                 message has none of; retire the handshake's route with a request rule",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::testing::*;
    use crate::config::Unit;

    #[test]
    fn a_rule_counts_requests_unless_it_says_messages() {
        let config = valid(&rule_a("rate = \"1/s\"\n"));
        assert_eq!(config.rules[0].unit, Unit::Request);
        assert_eq!(config.server.max_message_bytes, 1 << 20);
        let config = valid(&rule_a(
            "rate = \"10/s\"\nunit = \"message\"\non_limit = \"delay\"\n\
             match = { path_prefix = \"/ws\", method = [\"GET\"] }\nkey = [\"header:x-user\"]\n\
             tiers = { by = \"header:x-plan\", pro = { rate = \"100/s\" } }\nshadow = true\n",
        ));
        assert_eq!(config.rules[0].unit, Unit::Message);
        let config =
            valid("[server]\nupstream = \"http://127.0.0.1:3000\"\nmax_message_bytes = 65536\n");
        assert_eq!(config.server.max_message_bytes, 65_536);
    }

    #[test]
    fn check_refuses_an_unknown_unit_and_a_message_limit_of_zero() {
        assert_eq!(
            only_error(&rule_a("rate = \"1/s\"\nunit = \"frame\"\n")),
            "test.toml:6:8: rule[0].unit: \"frame\" is not allowed; use one of \"request\", \
             \"message\""
        );
        assert_eq!(
            only_error("[server]\nupstream = \"http://127.0.0.1:3000\"\nmax_message_bytes = 0\n"),
            "test.toml:3:21: server.max_message_bytes: 0 is out of range: must be at least 1 \
             (default 1048576)"
        );
    }

    #[test]
    fn a_message_rule_refuses_what_a_message_cannot_mean() {
        assert_eq!(
            errors(&rule_a(
                "unit = \"message\"\nalgorithm = \"concurrency\"\nmatch = { method = \"PUT\" }\n",
            )),
            vec![
                "test.toml:6:13: rule[0].algorithm: a message is counted as it starts and holds \
                 nothing while it passes, so unit = \"message\" takes a rate, not concurrency; \
                 bound open connections with a concurrency rule on the handshake (unit = \
                 \"request\")",
                "test.toml:7:20: rule[0].match.method: a WebSocket handshake is a GET and a \
                 gRPC call a POST, so this rule would never count a message; add \"GET\" or \
                 \"POST\", or remove match.method",
            ]
        );
        assert_eq!(
            errors(&rule_a(
                "unit = \"message\"\nrate = \"5/s\"\nrefund_on = [\"5xx\"]\n\
                 ban = { after = 3, within = \"1m\", for = \"5m\" }\n",
            )),
            vec![
                "test.toml:7:13: rule[0].refund_on: a message gets no answer to charge or refund \
                 by; remove refund_on, or charge on a request rule",
                "test.toml:8:7: rule[0].ban: a ban refuses requests, and a message over its \
                 budget closes its connection instead; ban with a rule on the handshake (unit = \
                 \"request\")",
            ]
        );
    }

    #[test]
    fn a_message_rule_takes_no_charge_sunset_domain_body_key_or_graphql_cost() {
        let lines = errors(&rule_a(
            "unit = \"message\"\nrate = \"10/s\"\ncharge = \"elapsed_ms\"\n\
             sunset = { start = 2026-01-01T00:00:00Z, end = 2026-02-01T00:00:00Z, to = \"0/d\" }\n",
        ));
        assert!(
            lines.iter().any(|line| line.starts_with(
                "test.toml:7:10: rule[0].charge: a message gets no answer to charge or refund by"
            )),
            "{lines:#?}"
        );
        assert!(
            lines.iter().any(|line| line
                == "test.toml:8:10: rule[0].sunset: a sunset retires requests (Deprecation and \
                    Sunset headers, then 410), which a message has none of; retire the \
                    handshake's route with a request rule"),
            "{lines:#?}"
        );

        let lines = errors(&rule_a(
            "unit = \"message\"\nrate = \"10/s\"\nmatch = { domain = \"edge\" }\n\
             key = [\"descriptor:user\"]\n",
        ));
        assert!(
            lines.iter().any(|line| line
                == "test.toml:7:20: rule[0].match.domain: a rate limit service call opens no \
                    WebSocket or gRPC stream, so unit = \"message\" cannot apply to it; remove \
                    match.domain, or count requests"),
            "{lines:#?}"
        );

        assert_eq!(
            only_error(&rule_a(
                "unit = \"message\"\nrate = \"10/s\"\nkey = [\"body:/user\"]\n"
            )),
            "test.toml:7:7: rule[0].key: \"body:/user\" reads a request body, and a WebSocket \
             handshake has none; key a message rule on the handshake's ip, path, headers, query \
             or token"
        );
        assert_eq!(
            only_error(&rule_a(
                "unit = \"message\"\nrate = \"100/s\"\ncost = \"graphql\"\n"
            )),
            "test.toml:7:8: rule[0].cost: a WebSocket message is not a GraphQL request; cost is \
             the whole number of units each message takes"
        );
        // A whole number is each message's cost.
        assert_eq!(
            valid(&rule_a("unit = \"message\"\nrate = \"100/s\"\ncost = 5\n")).rules[0].cost,
            5
        );
    }
}
