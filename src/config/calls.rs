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
    pub(super) fn keyed_on_calls(&mut self, context: &RuleContext, raw: &RawRule, rule: &RuleConfig) {
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
