//! Rules keyed on JSON-RPC calls (`jsonrpc:method`, `mcp:tool`, in `key`
//! or `tiers.by`): each call of a batch stands on its own, so what a rule
//! settles after one answer (a `charge`, a `reserve`) or reads of the whole
//! body (`cost = "graphql"`) cannot be split among them; and a call in a
//! body sluice does not read skips a `missing = "skip"` rule, which a body
//! bound closes. See docs/ai-budgets.md, "JSON-RPC and MCP".

use super::raw::{RawRule, Start};
use super::rules::RuleContext;
use super::validate::Validator;
use super::{KeySource, MissingPolicy, RuleConfig, ServerConfig};

impl Validator<'_> {
    /// What a rule keyed on calls cannot take.
    pub(super) fn keyed_on_calls(
        &mut self,
        context: &RuleContext,
        raw: &RawRule,
        rule: &RuleConfig,
    ) {
        let Some(source) = calls_source(rule) else {
            return;
        };
        let (index, at) = (context.index, context.at);
        let why = format!(
            "a batch's calls are counted one by one in the buckets of their own \"{source}\", and \
             one answer cannot be split among them"
        );
        let unwritable = [
            ("charge", raw.charge.as_ref().map(|c| c.start_or(at))),
            ("reserve", raw.reserve.as_ref().map(|r| r.start_or(at))),
            (
                "cost",
                raw.cost
                    .as_ref()
                    .filter(|_| rule.graphql_cost)
                    .map(|c| c.span().start),
            ),
        ];
        for (field, written) in unwritable {
            if let Some(written) = written {
                self.error(
                    written,
                    &format!("rule[{index}].{field}"),
                    format!(
                        "a rule keyed on JSON-RPC calls takes no {field}: {why}; charge with a \
                         rule of its own, keyed on the caller"
                    ),
                );
            }
        }
    }

    /// A warning for each `missing = "skip"` rule keyed on calls while a
    /// body longer than sluice reads may be sent: its calls are unread, so
    /// they skip the rule.
    pub(super) fn calls_unread_past_the_bound(
        &mut self,
        raw: &[RawRule],
        rules: &[RuleConfig],
        server: &ServerConfig,
    ) {
        let bound = server.max_key_body_bytes as u64;
        if server.max_body_bytes != 0 && server.max_body_bytes <= bound {
            return;
        }
        for (index, (rule, written)) in rules.iter().zip(raw).enumerate() {
            let Some(source) = calls_source(rule) else {
                continue;
            };
            if rule.missing != MissingPolicy::Skip {
                continue;
            }
            let at = written.missing.start().unwrap_or(0);
            self.warn(
                at,
                &format!("rule[{index}].missing"),
                format!(
                    "a body over server.max_key_body_bytes ({bound}) is not read, so its calls \
                     have no \"{source}\" and skip this rule; set server.max_body_bytes to at \
                     most {bound} (a longer body is then refused 413), or missing = \"shared\""
                ),
            );
        }
    }
}

/// The first source of the rule's key or `tiers.by` that reads a call.
fn calls_source(rule: &RuleConfig) -> Option<&KeySource> {
    rule.key
        .iter()
        .chain(rule.tiers.as_ref().map(|tiers| &tiers.by))
        .find(|source| source.reads_call())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{errors, rule_a, valid, UPSTREAM};
    use super::*;

    #[test]
    fn call_sources_are_read_and_key_a_rule_or_its_tiers() {
        let config = valid(&rule_a(
            "key = [\"jsonrpc:method\", \"mcp:tool\"]\nrate = \"10/m\"\nrefund_on = \"5xx\"\n",
        ));
        assert_eq!(
            config.rules[0].key,
            [KeySource::JsonrpcMethod, KeySource::McpTool]
        );
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
        let config = valid(&rule_a(
            "key = [\"header:x-api-key\"]\nrate = \"10/m\"\ntiers = { by = \"mcp:tool\", search = { rate = \"2/m\" } }\n",
        ));
        assert_eq!(calls_source(&config.rules[0]), Some(&KeySource::McpTool));
        let lines = errors(&rule_a("key = [\"jsonrpc:id\"]\nrate = \"10/m\"\n"));
        assert_eq!(
            lines,
            [
                "test.toml:5:8: rule[0].key[0]: \"jsonrpc:id\" is not a JSON-RPC key; use \
              jsonrpc:method (each call's method) or mcp:tool (the tool an MCP tools/call calls)"
            ]
        );
    }

    #[test]
    fn a_rule_keyed_on_calls_takes_no_charge_reserve_or_graphql_cost() {
        let lines = errors(&rule_a(
            "key = [\"mcp:tool\"]\nrate = \"1000/m\"\ncharge = \"elapsed_ms\"\nreserve = 10\n",
        ));
        let why = "a rule keyed on JSON-RPC calls takes no";
        assert!(
            lines
                .iter()
                .any(|line| line
                    .starts_with(&format!("test.toml:7:10: rule[0].charge: {why} charge"))),
            "{lines:#?}"
        );
        assert!(
            lines
                .iter()
                .any(|line| line
                    .starts_with(&format!("test.toml:8:11: rule[0].reserve: {why} reserve"))),
            "{lines:#?}"
        );
        let lines = errors(&rule_a(
            "key = [\"jsonrpc:method\"]\nrate = \"1000/m\"\ncost = \"graphql\"\n",
        ));
        assert!(
            lines
                .iter()
                .any(|line| line.starts_with(&format!("test.toml:7:8: rule[0].cost: {why} cost"))),
            "{lines:#?}"
        );
    }

    #[test]
    fn a_skip_rule_keyed_on_calls_is_warned_of_bodies_past_the_bound() {
        let rule =
            "[[rule]]\nname = \"a\"\nkey = [\"mcp:tool\"]\nmissing = \"skip\"\nrate = \"1/s\"\n";
        let config = valid(&format!("{UPSTREAM}{rule}"));
        assert_eq!(
            config.warnings,
            ["test.toml:6:11: rule[0].missing: a body over server.max_key_body_bytes (65536) is \
              not read, so its calls have no \"mcp:tool\" and skip this rule; set \
              server.max_body_bytes to at most 65536 (a longer body is then refused 413), or \
              missing = \"shared\""]
        );
        let bounded = format!("{UPSTREAM}max_body_bytes = 65536\n{rule}");
        assert!(valid(&bounded).warnings.is_empty());
    }
}
