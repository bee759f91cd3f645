//! Who a rule decides for: proxied requests, or, with `match.domain`, the
//! descriptors of rate limit service calls of that domain
//! (docs/rate-limit-service.md). Each kind keeps to what it can mean: a
//! service call has no path, method, host or client address, nothing is
//! held or settled after an answer it does not have, and a request has no
//! descriptor. Also `[rls]`, the service's listener.

use std::net::SocketAddr;

use super::raw::{RawConfig, RawRule, Start};
use super::rules::RuleContext;
use super::validate::Validator;
use super::{AlgorithmKind, KeySource, RlsConfig, RuleConfig};

impl Validator<'_> {
    /// Checks that `rule` (written as `raw`, in `context`) says
    /// only what the kind of caller it decides for can mean.
    pub(super) fn who_decides(&mut self, context: &RuleContext, raw: &RawRule, rule: &RuleConfig) {
        if !rule.matcher.is_service() {
            return self.proxied_only(context, raw, rule);
        }
        self.service_match(context, raw);
        self.service_key(context, raw, rule);
        self.service_unwritable(context, raw, rule);
        if let Some(tiers) = &rule.tiers {
            let names_an_entry = match &tiers.by {
                KeySource::Descriptor(key) => {
                    rule.key.contains(&tiers.by)
                        || rule.matcher.descriptor.iter().any(|(k, _)| k == key)
                }
                _ => false,
            };
            if !names_an_entry {
                self.error(
                    tier_at(raw, context.at),
                    &format!("rule[{}].tiers.by", context.index),
                    format!(
                        "\"{}\" is not an entry this rule's descriptors carry; pick the tier by \
                         one of its \"descriptor:<entry key>\" sources",
                        tiers.by
                    ),
                );
            }
        }
    }

    /// A rule for proxied requests reads no descriptor.
    fn proxied_only(&mut self, context: &RuleContext, raw: &RawRule, rule: &RuleConfig) {
        let (index, at) = (context.index, context.at);
        if let Some(source) = rule
            .key
            .iter()
            .find(|s| matches!(s, KeySource::Descriptor(_)))
        {
            self.error(
                raw.key.start_or(at),
                &format!("rule[{index}].key"),
                format!(
                    "\"{source}\" reads a rate limit service descriptor, which only a rule \
                     with match.domain decides; add match.domain, or key on the request"
                ),
            );
        }
        if let Some(tiers) = &rule.tiers {
            if matches!(tiers.by, KeySource::Descriptor(_)) {
                self.error(
                    tier_at(raw, at),
                    &format!("rule[{index}].tiers.by"),
                    "a proxied request has no rate limit service descriptor; pick the tier \
                     by a source of the request, such as by = \"header:x-plan\"",
                );
            }
        }
    }

    /// A rule for service calls matches on none of a request's parts.
    fn service_match(&mut self, context: &RuleContext, raw: &RawRule) {
        let (index, at) = (context.index, context.at);
        let path = |field: &str| format!("rule[{index}].{field}");
        if let Some(matcher) = &raw.matcher {
            for (name, field) in [
                ("path", &matcher.path),
                ("path_prefix", &matcher.path_prefix),
                ("path_glob", &matcher.path_glob),
                ("method", &matcher.method),
                ("host", &matcher.host),
                ("client", &matcher.client),
            ] {
                if let Some(field) = field {
                    self.error(
                        field.span().start,
                        &path(&format!("match.{name}")),
                        format!(
                            "a rule with match.domain decides rate limit service calls, which \
                             have no {name}; match on match.descriptor, or write a rule without \
                             domain for proxied requests"
                        ),
                    );
                }
            }
            if let Some(header) = &matcher.header {
                let first = header.value.values().next().map(|first| first.span().start);
                self.error(
                    header.start().or(first).unwrap_or(at),
                    &path("match.header"),
                    "a rule with match.domain decides rate limit service calls, which have no \
                     headers (Envoy puts what it read from them in descriptor entries); match \
                     on match.descriptor, or write a rule without domain for proxied requests",
                );
            }
        }
    }

    /// A rule for service calls keys on descriptor entries only, and names
    /// one (by its key or its match).
    fn service_key(&mut self, context: &RuleContext, raw: &RawRule, rule: &RuleConfig) {
        let (index, at) = (context.index, context.at);
        let path = |field: &str| format!("rule[{index}].{field}");
        for source in &rule.key {
            if !matches!(source, KeySource::Descriptor(_) | KeySource::Global) {
                self.error(
                    raw.key.start_or(at),
                    &path("key"),
                    format!(
                        "\"{source}\" is a source of proxied requests; a rule with match.domain \
                         keys on descriptor entries (\"descriptor:<entry key>\") or \"global\""
                    ),
                );
            }
        }
        let keyed = rule
            .key
            .iter()
            .any(|source| matches!(source, KeySource::Descriptor(_)));
        if !keyed && rule.matcher.descriptor.is_empty() {
            let domain_at = raw
                .matcher
                .as_ref()
                .and_then(|m| m.domain.start())
                .unwrap_or(at);
            self.error(
                domain_at,
                &path("match.domain"),
                "the rule names no descriptor entry, and every descriptor has one: key on \
                 \"descriptor:<entry key>\" or add match.descriptor = { <entry key> = \"<value>\" }",
            );
        }
    }

    /// A rule for service calls counts no permits, holds nothing and
    /// settles nothing.
    fn service_unwritable(&mut self, context: &RuleContext, raw: &RawRule, rule: &RuleConfig) {
        let (index, at) = (context.index, context.at);
        let path = |field: &str| format!("rule[{index}].{field}");
        if rule.algorithm.counts_in_flight() {
            self.error(
                raw.algorithm.start_or(at),
                &path("algorithm"),
                format!(
                    "a rate limit service call ends when it is answered, so nothing could give \
                     {kind} permit back; use a rate, or {kind} rule for proxied requests",
                    kind = if rule.algorithm == AlgorithmKind::Adaptive {
                        "an adaptive"
                    } else {
                        "a concurrency"
                    },
                ),
            );
        }
        let answered_at_once = "a rate limit service call is answered at once (Envoy, not \
                                sluice, refuses or passes the request)";
        let settled_after = "it is settled after a response, and sluice answers only the call";
        let unwritable = [
            (raw.on_limit.start(), "on_limit", answered_at_once),
            (raw.max_delay.start(), "max_delay", answered_at_once),
            (raw.max_queue.start(), "max_queue", answered_at_once),
            (
                raw.charge.as_ref().map(|c| c.start_or(at)),
                "charge",
                settled_after,
            ),
            (raw.charge_missing.start(), "charge_missing", settled_after),
            (
                raw.reserve.as_ref().map(|r| r.start_or(at)),
                "reserve",
                settled_after,
            ),
            (
                raw.reserve_missing.start(),
                "reserve_missing",
                settled_after,
            ),
            (raw.refund_on.start(), "refund_on", settled_after),
            (
                raw.missing.start(),
                "missing",
                "a descriptor is decided by this rule only when it carries every entry the \
                 rule names, so none is ever missing",
            ),
            (
                raw.sunset.as_ref().map(|s| s.start_or(at)),
                "sunset",
                "a retired route is answered 410, and a service call has no route; lower the \
                 rate instead",
            ),
            (
                raw.cost
                    .as_ref()
                    .filter(|_| rule.graphql_cost)
                    .map(|c| c.span().start),
                "cost",
                "\"graphql\" reads a request's GraphQL query, and a service call carries none; \
                 a descriptor's hits_addend is its cost",
            ),
        ];
        for (written, field, why) in unwritable {
            if let Some(written) = written {
                self.error(
                    written,
                    &path(field),
                    format!("a rule with match.domain takes no {field}: {why}"),
                );
            }
        }
    }

    /// `[rls]`: the listener, which must not be one of `taken` (the proxy's
    /// and the admin's); a warning when rules decide service calls but
    /// nothing listens for them.
    pub(super) fn rls(
        &mut self,
        raw: &RawConfig,
        taken: &[SocketAddr],
        rules: &[RuleConfig],
    ) -> Option<RlsConfig> {
        let Some(section) = &raw.rls else {
            if let Some(index) = rules.iter().position(|r| r.matcher.is_service()) {
                self.warn(
                    0,
                    &format!("rule[{index}].match.domain"),
                    "rules decide rate limit service calls, but no [rls] listen is configured, \
                     so nothing asks them; add [rls] listen = \"127.0.0.1:8081\"",
                );
            }
            return None;
        };
        let Some(field) = &section.listen else {
            let at = self.table_position("[rls]", &[]);
            return self.invalid(
                at,
                "rls.listen",
                "is required: the address Envoy's rate_limit_service cluster points at, such as \
                 \"127.0.0.1:8081\"",
            );
        };
        let listen = self.socket_addr(Some(field), "rls.listen", "127.0.0.1:8081");
        if listen.port() != 0 && taken.contains(&listen) {
            self.error(
                field.span().start,
                "rls.listen",
                format!(
                    "{listen} is also server.listen or admin.listen; the rate limit service \
                     needs its own address"
                ),
            );
        }
        Some(RlsConfig { listen })
    }
}

/// Where `tiers` is written, else the rule.
fn tier_at(raw: &RawRule, at: usize) -> usize {
    raw.tiers
        .as_ref()
        .and_then(|t| t.span.as_ref())
        .map_or(at, |span| span.start)
}

#[cfg(test)]
mod tests {
    use crate::config::testing::*;
    use crate::config::KeySource;

    const RLS: &str = "[rls]\nlisten = \"127.0.0.1:8081\"\n";

    #[test]
    fn a_domain_rule_keys_on_descriptor_entries_and_defaults_to_one_bucket() {
        let config = valid(&format!(
            "{UPSTREAM}{RLS}[[rule]]\nname = \"a\"\nrate = \"1/s\"\n\
             match = {{ domain = \"edge\", descriptor = {{ generic_key = \"slow\", b = \"x\" }} }}\n\
             [[rule]]\nname = \"b\"\nrate = \"1/s\"\nmatch.domain = \"edge\"\n\
             key = [\"descriptor:remote_address\", \"global\"]\n"
        ));
        assert_eq!(config.rls.unwrap().listen.port(), 8081);
        let a = &config.rules[0];
        assert_eq!(a.matcher.domain.as_deref(), Some("edge"));
        assert_eq!(
            a.matcher.descriptor,
            vec![
                ("b".to_owned(), "x".to_owned()),
                ("generic_key".to_owned(), "slow".to_owned())
            ]
        );
        assert_eq!(a.key, vec![KeySource::Global]);
        assert_eq!(
            config.rules[1].key,
            vec![
                KeySource::Descriptor("remote_address".to_owned()),
                KeySource::Global
            ]
        );
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    }

    #[test]
    fn a_domain_rule_says_only_what_a_service_call_can_mean() {
        let lines = errors(&format!(
            "{UPSTREAM}{RLS}[[rule]]\nname = \"a\"\nrate = \"1/s\"\n\
             match = {{ domain = \"edge\", path = \"/a\" }}\nkey = [\"ip\"]\n\
             on_limit = \"delay\"\ncharge = \"elapsed_ms\"\nmissing = \"skip\"\n"
        ));
        assert_eq!(lines.len(), 6, "{lines:#?}");
        for (line, want) in lines.iter().zip([
            "test.toml:8:20: rule[0].match.domain: the rule names no descriptor entry",
            "test.toml:8:35: rule[0].match.path: a rule with match.domain decides rate limit \
             service calls, which have no path",
            "test.toml:9:7: rule[0].key: \"ip\" is a source of proxied requests",
            "test.toml:10:12: rule[0].on_limit: a rule with match.domain takes no on_limit",
            "test.toml:11:10: rule[0].charge: a rule with match.domain takes no charge",
            "test.toml:12:11: rule[0].missing: a rule with match.domain takes no missing",
        ]) {
            assert!(line.starts_with(want), "{line}");
        }
        let line = only_error(&format!(
            "{UPSTREAM}{RLS}[[rule]]\nname = \"a\"\nalgorithm = \"concurrency\"\n\
             match.domain = \"edge\"\nkey = [\"descriptor:k\"]\n"
        ));
        assert!(line.starts_with("test.toml:7:13: rule[0].algorithm: a rate limit service call ends when it is answered"), "{line}");
        let line = only_error(&format!(
            "{UPSTREAM}{RLS}[[rule]]\nname = \"a\"\nalgorithm = \"adaptive\"\n\
             match.domain = \"edge\"\nkey = [\"descriptor:k\"]\n"
        ));
        assert_eq!(
            line,
            "test.toml:7:13: rule[0].algorithm: a rate limit service call ends when it is \
             answered, so nothing could give an adaptive permit back; use a rate, or an adaptive \
             rule for proxied requests"
        );
    }

    #[test]
    fn descriptors_belong_to_domain_rules_only() {
        let lines = errors(&format!(
            "{UPSTREAM}[[rule]]\nname = \"a\"\nrate = \"1/s\"\nkey = [\"descriptor:k\"]\n\
             match.descriptor = {{ k = \"v\" }}\n"
        ));
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(lines[0].starts_with("test.toml:6:7: rule[0].key: \"descriptor:k\" reads a rate limit service descriptor"), "{}", lines[0]);
        assert!(lines[1].starts_with("test.toml:7:20: rule[0].match.descriptor: only a rule for rate limit service calls has descriptors"), "{}", lines[1]);
        let line = only_error(&format!(
            "{UPSTREAM}[[route]]\nmatch = {{ domain = \"edge\" }}\nupstream = \"default\"\n"
        ));
        assert!(
            line.starts_with(
                "test.toml:4:20: route[0].match.domain: a route sends proxied requests"
            ),
            "{line}"
        );
    }

    #[test]
    fn the_service_needs_its_own_address_and_rules_without_it_are_a_warning() {
        let line = only_error(&format!(
            "{UPSTREAM}listen = \"127.0.0.1:8080\"\n[rls]\nlisten = \"127.0.0.1:8080\"\n"
        ));
        assert!(
            line.starts_with(
                "test.toml:5:10: rls.listen: 127.0.0.1:8080 is also server.listen or admin.listen"
            ),
            "{line}"
        );
        let line = only_error(&format!("{UPSTREAM}[rls]\n"));
        assert!(line.contains("rls.listen: is required"), "{line}");
        let config = valid(&format!(
            "{UPSTREAM}[[rule]]\nname = \"a\"\nrate = \"1/s\"\nmatch.domain = \"edge\"\n\
             key = [\"descriptor:k\"]\n"
        ));
        assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
        assert!(
            config.warnings[0].contains("no [rls] listen is configured"),
            "{:?}",
            config.warnings
        );
    }

    #[test]
    fn a_domain_rule_picks_tiers_by_one_of_its_entries() {
        valid(&format!(
            "{UPSTREAM}{RLS}[[rule]]\nname = \"a\"\nrate = \"1/s\"\nmatch.domain = \"edge\"\n\
             key = [\"descriptor:user\", \"descriptor:plan\"]\n\
             tiers = {{ by = \"descriptor:plan\", gold = {{ rate = \"5/s\" }} }}\n"
        ));
        let line = only_error(&format!(
            "{UPSTREAM}{RLS}[[rule]]\nname = \"a\"\nrate = \"1/s\"\nmatch.domain = \"edge\"\n\
             key = [\"descriptor:user\"]\ntiers = {{ by = \"header:x-plan\", gold = {{ rate = \"5/s\" }} }}\n"
        ));
        assert!(
            line.contains(
                "rule[0].tiers.by: \"header:x-plan\" is not an entry this rule's descriptors carry"
            ),
            "{line}"
        );
    }
}
