//! `tiers` and `overrides`: limits for some callers instead of the rule's
//! own, and the bucket-key text an override is keyed by.

use std::net::IpAddr;

use ipnet::IpNet;

use super::keys::parse_key_source;
use super::limits::{BuiltLimits, WrittenLimit};
use super::raw::{Key, Located, RawOverrides, RawTiers, RawVariant, Start};
use super::rules::RuleContext;
use super::validate::Validator;
use super::weights::number;
use super::{AlgorithmKind, KeySource, Tiers, Variant};

impl Validator<'_> {
    /// `tiers = { by = "<key source>", <value> = { rate, limits, burst }, ... }`.
    pub(super) fn tiers(&mut self, rule: &RuleContext, raw: &Located<RawTiers>) -> Option<Tiers> {
        let index = rule.index;
        let at = raw.start_or(rule.at);
        if rule.algorithm == Some(AlgorithmKind::Concurrency) {
            self.not_for_concurrency(index, at, "tiers");
            return None;
        }
        let adaptive = rule.algorithm == Some(AlgorithmKind::Adaptive);
        let path = format!("rule[{index}].tiers");
        let by = match &raw.value.by {
            None => self.invalid(
                at,
                &path,
                "needs by = \"<key source>\", the source whose value picks the tier, such as \
                     by = \"header:x-plan\" or by = \"jwt:plan\"",
            ),
            Some(field) => match parse_key_source(field.get_ref()) {
                Ok(source) => Some(source),
                Err(message) => self.invalid(field.span().start, &format!("{path}.by"), message),
            },
        };
        if raw.value.tiers.is_empty() {
            return self.invalid(
                at,
                &path,
                if adaptive {
                    "lists no tier: add a table per tier value next to by, such as free = { share \
                     = 0.5 }"
                } else {
                    "lists no tier: add a table per tier value next to by, such as premium = { rate \
                     = \"100/s\" }"
                },
            );
        }
        let mut tiers = Vec::with_capacity(raw.value.tiers.len());
        for (name, table) in &raw.value.tiers {
            let relative = format!("tiers.{}", key_in_path(&name.text));
            tiers.push(if adaptive {
                self.adaptive_tier(rule, &relative, name, table)
            } else {
                self.variant(rule, &relative, name, table)
            });
        }
        let tiers = tiers.into_iter().collect::<Option<Vec<_>>>()?;
        Some(Tiers { by: by?, tiers })
    }

    /// `overrides = { "<bucket key>" = { rate, limits, burst }, ... }`.
    pub(super) fn overrides(
        &mut self,
        rule: &RuleContext,
        raw: &Located<RawOverrides>,
        key: &[KeySource],
        ipv6_prefix: u8,
    ) -> Vec<Variant> {
        let index = rule.index;
        if rule.algorithm.is_some_and(AlgorithmKind::counts_in_flight) {
            let at = raw.start_or(rule.at);
            self.not_for_concurrency(index, at, "overrides");
            return Vec::new();
        }
        let mut overrides = Vec::with_capacity(raw.value.0.len());
        for (name, table) in &raw.value.0 {
            // A key with a caller's credential in it is not repeated in
            // full (docs/operations.md, "Keys in logs and admin views").
            let shown = match crate::key::label::elided_override(key, &name.text) {
                Some(elided) => format!("{elided:?}"),
                None => key_in_path(&name.text),
            };
            let relative = format!("overrides.{shown}");
            if let Err(message) = check_bucket_key(&name.text, key, ipv6_prefix) {
                let (path, at) = place(rule, &relative, name, table);
                self.error(at, &path, message);
            }
            if let Some(variant) = self.variant(rule, &relative, name, table) {
                overrides.push(variant);
            }
        }
        overrides
    }

    /// One tier of an `adaptive` rule: its share of the learned limit.
    fn adaptive_tier(
        &mut self,
        rule: &RuleContext,
        relative: &str,
        name: &Key,
        table: &Located<RawVariant>,
    ) -> Option<Variant> {
        let (base, at) = place(rule, relative, name, table);
        let raw = &table.value;
        let rates = [
            ("rate", raw.rate.start()),
            ("limits", raw.limits.start()),
            ("burst", raw.burst.start()),
        ];
        let named = raw.unknown.iter().map(|key| {
            let at = key.start_or(at);
            (key.text.as_str(), Some(at))
        });
        for (key, field_at) in rates.into_iter().chain(named) {
            if let Some(field_at) = field_at {
                self.error(
                    field_at,
                    &format!("{base}.{}", key_in_path(key)),
                    "an adaptive rule's tier sets only share, its part of the learned limit \
                     (free = { share = 0.5 } sheds free callers first)",
                );
            }
        }
        let Some(field) = &raw.share else {
            return self.invalid(
                at,
                &base,
                "needs share, the part of the learned limit this tier may use: free = { share = \
                 0.5 } sheds free callers once half the limit is in flight",
            );
        };
        let share = number(field.get_ref()).filter(|share| *share > 0.0 && *share <= 1.0);
        let Some(share) = share else {
            return self.invalid(
                field.span().start,
                &format!("{base}.share"),
                "must be a number above 0 and at most 1: the part of the learned limit this tier \
                 may use",
            );
        };
        Some(Variant {
            name: name.text.clone(),
            limits: Vec::new(),
            share: Some(((share * 1000.0).round() as u16).max(1)),
        })
    }

    /// One tier or override: its limits, computed like the rule's own. One
    /// that sets only `burst` keeps the rule's rates; one that sets `rate`
    /// or `limits` takes its own COUNT as the default burst.
    fn variant(
        &mut self,
        rule: &RuleContext,
        relative: &str,
        name: &Key,
        table: &Located<RawVariant>,
    ) -> Option<Variant> {
        let (base, at) = place(rule, relative, name, table);
        let raw = &table.value;
        self.variant_sets(&base, at, raw)?;
        let errors_before = self.errors.len();
        let own_rates = raw.rate.is_some() || raw.limits.is_some();
        let written = if own_rates {
            self.variant_rates(rule, relative, &base, at, raw)
        } else {
            rule.written.map(<[WrittenLimit]>::to_vec)
        };
        let default_burst = match (&raw.rate, &raw.limits) {
            (None, Some(_)) => "the COUNT of its shortest-period limit",
            _ => "its rate's COUNT",
        };
        let mut built = self.build_limits(
            rule.index,
            &base,
            written.as_deref(),
            raw.burst.as_ref(),
            rule.algorithm,
            default_burst,
        );
        rule.calendar.attach(&mut built.limits, written.as_deref());
        let written = written?;
        // A table already refused for its own values is not judged further.
        if let Some(cost) = rule.cost.filter(|_| self.errors.len() == errors_before) {
            self.variant_cost(rule, &base, raw, own_rates, cost, (&written, &built));
        }
        Some(Variant {
            name: name.text.clone(),
            limits: built.limits,
            share: None,
        })
    }

    /// The keys a tier or override may not set (an error each); `None`
    /// when it sets nothing it may.
    fn variant_sets(&mut self, base: &str, at: usize, raw: &RawVariant) -> Option<()> {
        if let Some(field) = &raw.share {
            self.error(
                field.span().start,
                &format!("{base}.share"),
                "only a tier of an adaptive rule takes share (its part of the learned limit); \
                 a tier or override here sets rate, limits and/or burst",
            );
        }
        for key in &raw.unknown {
            let at = key.start_or(at);
            self.error(
                at,
                &format!("{base}.{}", key_in_path(&key.text)),
                format!(
                    "unknown key \"{}\"; a tier or override sets rate, limits and/or burst",
                    key.text
                ),
            );
        }
        if raw.rate.is_none() && raw.limits.is_none() && raw.burst.is_none() {
            if raw.unknown.is_empty() && raw.share.is_none() {
                self.error(
                    at,
                    base,
                    "sets nothing: give rate, limits and/or burst, such as { rate = \"100/s\" } \
                     (one that sets only burst keeps the rule's rates)",
                );
            }
            return None;
        }
        Some(())
    }

    /// A tier's or override's own `rate` or `limits`, checked as the rule's.
    fn variant_rates(
        &mut self,
        rule: &RuleContext,
        relative: &str,
        base: &str,
        at: usize,
        raw: &RawVariant,
    ) -> Option<Vec<WrittenLimit>> {
        let prefix = format!("{relative}.");
        let written =
            self.written_limits(base, &prefix, at, raw.rate.as_ref(), raw.limits.as_ref());
        let written =
            self.one_rate_if_leaky(base, rule.algorithm, written, raw.limits.as_ref(), at);
        for limit in written.iter().flatten() {
            self.check_limit(rule.algorithm, limit);
            self.calendar_period(rule.calendar, limit);
        }
        written
    }

    /// The rule's `cost` against a tier's or override's limits (`written`
    /// and as built): an error at this table's own values that cannot hold
    /// it.
    fn variant_cost(
        &mut self,
        rule: &RuleContext,
        base: &str,
        raw: &RawVariant,
        own_rates: bool,
        cost: u64,
        (written, built): (&[WrittenLimit], &BuiltLimits),
    ) {
        let subject = format!("the rule's cost {cost}");
        if let Some((i, message)) = self.cost_misfit(&subject, cost, rule.algorithm, written, built)
        {
            // An inherited rate that cannot hold the cost was reported
            // at the rule already; only this table's own values are new.
            match (&raw.burst, built.burst_sized == Some(i)) {
                (Some(burst), true) => {
                    self.error(burst.span().start, &format!("{base}.burst"), message)
                }
                _ if own_rates => self.error(written[i].at, &written[i].path, message),
                _ => {}
            }
        }
    }
}

/// A tier's or an override's path in errors (`rule[0].tiers.free`) and
/// where it starts.
fn place(
    rule: &RuleContext,
    relative: &str,
    name: &Key,
    table: &Located<RawVariant>,
) -> (String, usize) {
    let at = name.start().or(table.start()).unwrap_or(rule.at);
    (format!("rule[{}].{relative}", rule.index), at)
}

/// A tier value or bucket key as it appears in an error path: bare when
/// it is a bare TOML key, else quoted.
fn key_in_path(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
    {
        text.to_owned()
    } else {
        format!("{text:?}")
    }
}

/// Sources whose value never contains `|`, so that the parts of a bucket
/// key next to them can be told apart.
fn never_holds_a_bar(source: &KeySource) -> bool {
    matches!(source, KeySource::Ip | KeySource::Host | KeySource::Global)
}

/// An `overrides` key against the rule's `key`: the sources' values joined
/// by `|` (docs/configuration.md, "Keys"). Checked as far as that is decidable: a header,
/// query, path, method or JWT value may itself contain `|`, so parts are
/// only matched to sources before the first and after the last such source.
fn check_bucket_key(text: &str, sources: &[KeySource], ipv6_prefix: u8) -> Result<(), String> {
    let parts: Vec<&str> = text.split('|').collect();
    let any_free = sources.iter().any(|s| !never_holds_a_bar(s));
    if parts.len() < sources.len() || (parts.len() > sources.len() && !any_free) {
        let key = super::joined(sources, "|");
        return Err(format!(
            "the key has {} part(s) but the rule's key has {} source(s) ({key}); a bucket key \
             is the sources' values joined by '|' in the order of key",
            parts.len(),
            sources.len()
        ));
    }
    let first_free = sources
        .iter()
        .position(|s| !never_holds_a_bar(s))
        .unwrap_or(sources.len());
    let last_free = sources.iter().rposition(|s| !never_holds_a_bar(s));
    for (i, source) in sources.iter().enumerate() {
        let part = if i < first_free {
            parts[i]
        } else if last_free.is_some_and(|last| i > last) {
            parts[parts.len() - (sources.len() - i)]
        } else {
            continue;
        };
        match source {
            KeySource::Ip => check_ip_part(part, ipv6_prefix)?,
            KeySource::Global if !part.is_empty() => {
                return Err(format!(
                    "the part of the global source is always empty (\"{part}\" given); a \
                     bucket key is the sources' values joined by '|' in the order of key"
                ))
            }
            KeySource::Host if part.contains(':') || part != part.to_ascii_lowercase() => {
                return Err(format!(
                    "the host part is lower-case and without a port, such as \"{}\"",
                    part.split(':').next().unwrap_or("").to_ascii_lowercase()
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The client-IP part of a bucket key, in the text the runtime keys by:
/// IPv4 dotted, IPv6 as its `server.ipv6_prefix` network.
fn check_ip_part(part: &str, ipv6_prefix: u8) -> Result<(), String> {
    let key_text = |ip: IpAddr| {
        let mut text = String::new();
        crate::key::client_ip::write_key(ip, ipv6_prefix, &mut text);
        text
    };
    let ip = match (part.parse::<IpAddr>(), part.parse::<IpNet>()) {
        (Ok(ip), _) => Some(ip),
        (_, Ok(IpNet::V6(net))) => Some(IpAddr::V6(net.addr())),
        (_, Ok(IpNet::V4(net))) => Some(IpAddr::V4(net.addr())),
        _ => None,
    };
    let Some(ip) = ip else {
        return Err(format!(
            "\"{part}\" is not a client IP; the ip part of a bucket key is an IPv4 address such as \
             \"203.0.113.7\" or an IPv6 network such as \"2001:db8:1:2::/{ipv6_prefix}\""
        ));
    };
    let want = key_text(ip);
    if want == part {
        return Ok(());
    }
    let why = match crate::key::client_ip::canonical(ip) {
        IpAddr::V6(_) if ipv6_prefix < 128 => {
            format!(" (IPv6 clients are keyed by their /{ipv6_prefix} network, server.ipv6_prefix)")
        }
        _ => String::new(),
    };
    Err(format!(
        "\"{part}\" is not how that client appears in a bucket key; write \"{want}\"{why}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::*;
    use http::HeaderName;

    fn header(name: &str) -> KeySource {
        KeySource::Header(HeaderName::from_bytes(name.as_bytes()).unwrap())
    }

    const PLAN: &str = "key = [\"header:x-api-key\"]\nrate = \"20/s\"\nburst = 10\n";

    #[test]
    fn tiers_compute_their_limits_like_the_rule() {
        let config = valid(&rule_a(&format!(
            "{PLAN}tiers = {{ by = \"header:x-plan\", premium = {{ rate = \"100/s\" }}, free = {{ limits = [\"10/s\", \"1000/d\"], burst = 5 }}, gold = {{ burst = 50 }} }}\n"
        )));
        let tiers = config.rules[0].tiers.clone().expect("tiers");
        assert_eq!(tiers.by, header("x-plan"));
        assert_eq!(
            tiers.tiers,
            vec![
                // Its own rate: the burst defaults to its own COUNT.
                Variant {
                    name: "premium".into(),
                    limits: vec![limit(100, 1, 100)],
                    share: None,
                },
                Variant {
                    name: "free".into(),
                    limits: vec![limit(10, 1, 5), limit(1000, 86_400, 1000)],
                    share: None,
                },
                // Only a burst: the rule's rate.
                Variant {
                    name: "gold".into(),
                    limits: vec![limit(20, 1, 50)],
                    share: None,
                },
            ]
        );
        assert_eq!(config.rules[0].limits, vec![limit(20, 1, 10)]);
    }

    #[test]
    fn tiers_may_be_written_as_tables_or_dotted_keys() {
        for fields in [
            "rate = \"20/s\"\n[rule.tiers]\nby = \"header:x-plan\"\n[rule.tiers.premium]\nrate = \"100/s\"\n",
            "rate = \"20/s\"\ntiers.by = \"header:x-plan\"\ntiers.premium.rate = \"100/s\"\n",
            "rate = \"20/s\"\n[rule.tiers]\nby = \"header:x-plan\"\npremium = { rate = \"100/s\" }\n",
        ] {
            let config = valid(&rule_a(fields));
            let tiers = config.rules[0].tiers.clone().expect(fields);
            assert_eq!(tiers.by, header("x-plan"), "{fields}");
            assert_eq!(
                tiers.tiers,
                vec![Variant {
                    name: "premium".into(),
                    limits: vec![limit(100, 1, 100)],
                    share: None,
                }],
                "{fields}"
            );
        }
    }

    #[test]
    fn tier_errors_point_at_the_value() {
        // b and c are refused for their own reasons, so cost is not judged there.
        let lines = errors(&rule_a(
            "rate = \"20/s\"\ncost = 3\n\
             tiers = { by = \"cookie:plan\", a = {}, b = { limits = [\"1/s\", \"2/s\"] }, c = { burst = 0 }, d = { burst = 2 }, e = { rate = \"2/m\" } }\n",
        ));
        assert_eq!(
            lines,
            vec![
                "test.toml:7:16: rule[0].tiers.by: unknown key source \"cookie:plan\"; allowed: ip, path, method, host, global, header:<name>, query:<name>, jwt:<claim>, body:<JSON pointer>, graphql:operation, graphql:type, jsonrpc:method, mcp:tool, descriptor:<entry key>",
                "test.toml:7:31: rule[0].tiers.a: sets nothing: give rate, limits and/or burst, such as { rate = \"100/s\" } (one that sets only burst keeps the rule's rates)",
                "test.toml:7:62: rule[0].tiers.b.limits[1]: \"2/s\" has the same period as tiers.b.limits[0] \"1/s\"; each limit needs its own period, so keep only one of them",
                "test.toml:7:86: rule[0].tiers.c.burst: 0 must be at least 1, or no request could ever pass; it defaults to its rate's COUNT",
                "test.toml:7:105: rule[0].tiers.d.burst: the rule's cost 3 can never fit in rate \"20/s\", whose capacity is 2 (its burst): such a request would never be admitted; lower cost or raise burst",
                "test.toml:7:123: rule[0].tiers.e.rate: the rule's cost 3 can never fit in tiers.e.rate \"2/m\", whose capacity is 2 (its COUNT): such a request would never be admitted; lower cost or raise that COUNT",
            ]
        );
    }

    #[test]
    fn an_unknown_key_in_a_tier_lists_the_allowed_ones() {
        let line = only_error(&rule_a(
            "rate = \"20/s\"\n[rule.tiers]\nby = \"header:x-plan\"\npremium = { rte = \"100/s\" }\n",
        ));
        assert_eq!(
            line,
            "test.toml:8:13: rule[0].tiers.premium.rte: unknown key \"rte\"; a tier or override sets rate, limits and/or burst"
        );
    }

    #[test]
    fn tiers_need_by_and_at_least_one_tier() {
        assert_eq!(
            only_error(&rule_a("rate = \"1/s\"\ntiers = { premium = { rate = \"2/s\" } }\n")),
            "test.toml:6:9: rule[0].tiers: needs by = \"<key source>\", the source whose value picks the tier, such as by = \"header:x-plan\" or by = \"jwt:plan\""
        );
        assert_eq!(
            only_error(&rule_a("rate = \"1/s\"\ntiers = { by = \"header:x-plan\" }\n")),
            "test.toml:6:9: rule[0].tiers: lists no tier: add a table per tier value next to by, such as premium = { rate = \"100/s\" }"
        );
    }

    #[test]
    fn tiers_follow_the_algorithm_rules() {
        // Windows count in 32 bits and take no burst; a leaky bucket takes one rate.
        let lines = errors(&rule_a(
            "algorithm = \"fixed_window\"\nrate = \"1/s\"\ntiers = { by = \"ip\", a = { rate = \"5000000000/s\" }, b = { burst = 3 } }\n",
        ));
        assert_eq!(
            lines,
            vec![
                "test.toml:7:35: rule[0].tiers.a.rate: the COUNT 5000000000 is too large for fixed_window, which counts in 32 bits; at most 4294967295",
                "test.toml:7:67: rule[0].tiers.b.burst: only algorithm = \"token_bucket\" (its capacity) and \"leaky_bucket\" (how many may wait) take a burst: the capacity of a fixed_window limit is its COUNT; remove burst, or change the COUNT",
            ]
        );
        let line = only_error(&rule_a(
            "algorithm = \"leaky_bucket\"\nrate = \"1/s\"\ntiers = { by = \"ip\", a = { limits = [\"1/s\", \"5/m\"] } }\n",
        ));
        assert!(line.starts_with("test.toml:7:37: rule[0].tiers.a.limits: a leaky bucket lets requests leave at one constant rate"), "{line}");
        // A leaky tier's burst is its queue.
        let config = valid(&rule_a(
            "algorithm = \"leaky_bucket\"\nrate = \"1/s\"\ntiers = { by = \"ip\", a = { rate = \"5/s\", burst = 8 } }\n",
        ));
        assert_eq!(
            config.rules[0].tiers.as_ref().unwrap().tiers[0].limits,
            vec![limit(5, 1, 8)]
        );
    }

    #[test]
    fn overrides_are_keyed_by_bucket_key_text() {
        let config = valid(&rule_a(
            "key = [\"ip\", \"header:x-seller\"]\nrate = \"10/s\"\n\
             overrides = { \"203.0.113.7|seller-42\" = { rate = \"1000/s\" }, \"2001:db8:1:2::/64|a|b\" = { burst = 20 } }\n",
        ));
        assert_eq!(
            config.rules[0].overrides,
            vec![
                Variant {
                    name: "203.0.113.7|seller-42".into(),
                    limits: vec![limit(1000, 1, 1000)],
                    share: None,
                },
                Variant {
                    name: "2001:db8:1:2::/64|a|b".into(),
                    limits: vec![limit(10, 1, 20)],
                    share: None,
                },
            ]
        );
        // The default key is the client IP.
        let config = valid(&rule_a(
            "rate = \"10/s\"\n[rule.overrides]\n\"198.51.100.1\" = { rate = \"1/s\" }\n",
        ));
        assert_eq!(config.rules[0].overrides[0].name, "198.51.100.1");
    }

    #[test]
    fn override_keys_must_match_the_rule_key_where_that_is_decidable() {
        let lines = errors(&rule_a(
            "key = [\"ip\", \"host\"]\nrate = \"10/s\"\n\
             overrides = { \"seller-42\" = { rate = \"1/s\" }, \"1.2.3.4|a.example|x\" = { rate = \"1/s\" }, \"2001:DB8::1|a.example\" = { rate = \"1/s\" }, \"::ffff:1.2.3.4|a.example\" = { rate = \"1/s\" }, \"1.2.3.4|A.example:80\" = { rate = \"1/s\" } }\n",
        ));
        assert_eq!(
            lines,
            vec![
                "test.toml:7:15: rule[0].overrides.seller-42: the key has 1 part(s) but the rule's key has 2 source(s) (ip|host); a bucket key is the sources' values joined by '|' in the order of key",
                "test.toml:7:47: rule[0].overrides.\"1.2.3.4|a.example|x\": the key has 3 part(s) but the rule's key has 2 source(s) (ip|host); a bucket key is the sources' values joined by '|' in the order of key",
                "test.toml:7:89: rule[0].overrides.\"2001:DB8::1|a.example\": \"2001:DB8::1\" is not how that client appears in a bucket key; write \"2001:db8::/64\" (IPv6 clients are keyed by their /64 network, server.ipv6_prefix)",
                "test.toml:7:133: rule[0].overrides.\"::ffff:1.2.3.4|a.example\": \"::ffff:1.2.3.4\" is not how that client appears in a bucket key; write \"1.2.3.4\"",
                "test.toml:7:180: rule[0].overrides.\"1.2.3.4|A.example:80\": the host part is lower-case and without a port, such as \"a.example\"",
            ]
        );
        // A header value may contain '|': only the IP at the front is checked.
        let line = only_error(&rule_a(
            "key = [\"ip\", \"header:x-a\"]\nrate = \"10/s\"\noverrides = { \"nope|a|b\" = { rate = \"1/s\" } }\n",
        ));
        assert!(
            line.starts_with(
                "test.toml:7:15: rule[0].overrides.\"no…\": \"nope\" is not a client IP"
            ),
            "{line}"
        );
    }
}
