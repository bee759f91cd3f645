//! One `[[rule]]`: its name, algorithm and the keys that only some
//! algorithms take, put together from the checks of its parts (match, key,
//! limits, on_limit, tiers, overrides, sunset, ban).

use std::collections::HashMap;

use toml::Spanned;

use super::calendar::RuleCalendar;
use super::limits::{BuiltLimits, WrittenLimit};
use super::raw::{RawCost, RawRule, Start};
use super::validate::Validator;
use super::{AlgorithmKind, KeySource, MissingPolicy, OnChange, RuleConfig, Unit, Unreadable};

/// What tiers, overrides, sunset and ban need to know about their rule.
pub(super) struct RuleContext<'r> {
    pub(super) index: usize,
    /// Where the rule starts, for errors about tables without a span.
    pub(super) at: usize,
    /// `None` when invalid (already reported).
    pub(super) algorithm: Option<AlgorithmKind>,
    /// The rule's own rates; `None` when missing or invalid (already reported).
    pub(super) written: Option<&'r [WrittenLimit]>,
    /// The rule's cost when written.
    pub(super) cost: Option<u64>,
    /// The rule's `calendar`, which its tiers' and overrides' rates follow.
    pub(super) calendar: &'r RuleCalendar,
}

impl Validator<'_> {
    pub(super) fn rules(&mut self, raw: &[RawRule], ipv6_prefix: u8) -> Vec<RuleConfig> {
        if raw.is_empty() {
            self.warn(
                0,
                "rule",
                "no [[rule]] is configured, so every request is forwarded without a limit",
            );
        }
        // Where each rule starts, for errors about the rule as a whole. Only
        // trusted when every rule was written as a `[[rule]]` header.
        let headers = self.source.headers("[[rule]]");
        let headers = (headers.len() == raw.len()).then_some(headers);
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut rules = Vec::with_capacity(raw.len());
        for (index, rule) in raw.iter().enumerate() {
            let first = [rule.name.start(), rule.rate.start(), rule.limits.start()];
            let at = match headers.as_ref().and_then(|h| h.get(index)) {
                Some(&header) => header,
                None => first.into_iter().flatten().min().unwrap_or(0),
            };
            let validated = self.rule(index, at, rule, ipv6_prefix);
            if let Some(field) = &rule.name {
                let name = field.get_ref();
                if let Some(first) = names.get(name) {
                    self.error(
                        field.span().start,
                        &format!("rule[{index}].name"),
                        format!("\"{name}\" is already the name of rule[{first}]; rule names must be unique"),
                    );
                } else {
                    names.insert(name.clone(), index);
                }
            }
            rules.push(validated);
        }
        rules
    }

    fn rule(&mut self, index: usize, at: usize, raw: &RawRule, ipv6_prefix: u8) -> RuleConfig {
        let name = self.rule_name(index, at, raw);
        // `None` when the algorithm is invalid (already reported), so that
        // nothing is judged against a made-up algorithm.
        let algorithm = match &raw.algorithm {
            None => Some(AlgorithmKind::TokenBucket),
            Some(field) => self.algorithm(&format!("rule[{index}].algorithm"), field),
        };
        let matcher = raw
            .matcher
            .as_ref()
            .map(|m| self.matcher(&format!("rule[{index}].match"), m))
            .unwrap_or_default();
        let key = self.rule_key(index, raw, matcher.is_service());
        let missing = self.missing(index, raw);
        let (written, calendar, built) = self.rule_limits(index, at, raw, algorithm);
        let (cost, graphql_cost, units) =
            self.rule_cost(index, raw, algorithm, written.as_deref(), &built);
        let context = RuleContext {
            index,
            at,
            algorithm,
            written: written.as_deref(),
            cost: units.then_some(cost),
            calendar: &calendar,
        };
        let unreadable = self.unreadable(&context, raw, graphql_cost, &built);
        let reserve = self.reserve(&context, raw, &built);
        let limits = built.limits;
        let tiers = raw.tiers.as_ref().and_then(|t| self.tiers(&context, t));
        let overrides = match &raw.overrides {
            Some(o) => self.overrides(&context, o, &key, ipv6_prefix),
            None => Vec::new(),
        };
        let sunset = raw
            .sunset
            .as_ref()
            .and_then(|s| self.sunset(&context, s, raw));
        let ban = raw.ban.as_ref().and_then(|b| self.ban(&context, b, raw));
        let on_change = self.on_change(index, raw);
        // A leaky bucket's queue is its capacity: how many may wait.
        let queue = limits.first().map_or(1, |limit| limit.capacity);
        let on_limit = self.on_limit(&context, raw, queue);
        let max_in_flight = self.max_in_flight(&context, raw);
        let min_in_flight = self.min_in_flight(&context, raw, max_in_flight);
        let mut rule = RuleConfig {
            name,
            matcher,
            key,
            missing,
            algorithm: algorithm.unwrap_or(AlgorithmKind::TokenBucket),
            limits,
            cost,
            graphql_cost,
            unreadable,
            shadow: raw.shadow.as_ref().is_some_and(|v| *v.get_ref()),
            on_limit,
            max_in_flight,
            min_in_flight,
            tiers,
            overrides,
            sunset,
            ban,
            on_change,
            charge: self.charge(&context, raw),
            reserve,
            refund_on: self.refund_on(&context, raw),
            unit: Unit::Request,
        };
        self.who_decides(&context, raw, &rule);
        self.keyed_on_calls(&context, raw, &rule);
        rule.unit = self.unit(&context, raw, &rule);
        rule
    }

    /// `name`: required, and a name a metric label and a log line can carry.
    fn rule_name(&mut self, index: usize, at: usize, raw: &RawRule) -> String {
        match &raw.name {
            None => self.invalid(
                at,
                &format!("rule[{index}]"),
                "name is required: a unique name such as name = \"per-ip\"",
            ),
            Some(field) => {
                let name = field.get_ref();
                if let Err(message) = check_rule_name(name) {
                    self.error(field.span().start, &format!("rule[{index}].name"), message);
                }
                name.clone()
            }
        }
    }

    /// `cost`, and whether it is units written (which must fit the
    /// rule's limits).
    fn rule_cost(
        &mut self,
        index: usize,
        raw: &RawRule,
        algorithm: Option<AlgorithmKind>,
        written: Option<&[WrittenLimit]>,
        built: &BuiltLimits,
    ) -> (u64, bool, bool) {
        let concurrency = algorithm.is_some_and(AlgorithmKind::counts_in_flight);
        let (cost, graphql_cost) = self.cost(index, raw.cost.as_ref(), concurrency);
        let units = raw.cost.as_ref().filter(|_| !graphql_cost);
        if let (Some(field), Some(written)) = (units, written) {
            if let Some((_, message)) =
                self.cost_misfit(&cost.to_string(), cost, algorithm, written, built)
            {
                self.error(field.span().start, &format!("rule[{index}].cost"), message);
            }
        }
        (cost, graphql_cost, units.is_some())
    }

    /// `key`, by default the client's address (a service call has none:
    /// one bucket for the descriptors the rule decides).
    fn rule_key(&mut self, index: usize, raw: &RawRule, service: bool) -> Vec<KeySource> {
        match &raw.key {
            None if service => vec![KeySource::Global],
            None => vec![KeySource::Ip],
            Some(field) => self.key(index, field),
        }
    }

    /// `missing`: what a request without a key source gets.
    fn missing(&mut self, index: usize, raw: &RawRule) -> MissingPolicy {
        self.choice(
            raw.missing.as_ref(),
            &format!("rule[{index}].missing"),
            &[
                ("shared", MissingPolicy::Shared),
                ("skip", MissingPolicy::Skip),
                ("reject", MissingPolicy::Reject),
            ],
            MissingPolicy::Shared,
        )
    }

    /// `on_change`: what a reload does to the rule's buckets.
    fn on_change(&mut self, index: usize, raw: &RawRule) -> OnChange {
        self.choice(
            raw.on_change.as_ref(),
            &format!("rule[{index}].on_change"),
            &[
                ("keep", OnChange::Keep),
                ("proportional", OnChange::Proportional),
                ("reset", OnChange::Reset),
            ],
            OnChange::Proportional,
        )
    }

    /// The rule's limits as written (`None` when missing or invalid, already
    /// reported, so that `burst` and `cost` are not judged against made-up
    /// ones; a concurrency rule has none: it counts requests in flight), its
    /// calendar, and its limits as built.
    fn rule_limits(
        &mut self,
        index: usize,
        at: usize,
        raw: &RawRule,
        algorithm: Option<AlgorithmKind>,
    ) -> (Option<Vec<WrittenLimit>>, RuleCalendar, BuiltLimits) {
        let base = format!("rule[{index}]");
        let written = if algorithm.is_some_and(AlgorithmKind::counts_in_flight) {
            for (key, written) in [("rate", raw.rate.start()), ("limits", raw.limits.start())] {
                if let Some(at) = written {
                    self.not_for_concurrency(index, at, key);
                }
            }
            None
        } else {
            self.written_limits(&base, "", at, raw.rate.as_ref(), raw.limits.as_ref())
        };
        let written = self.one_rate_if_leaky(&base, algorithm, written, raw.limits.as_ref(), at);
        let calendar = self.calendar(index, raw, algorithm);
        for limit in written.iter().flatten() {
            self.check_limit(algorithm, limit);
            self.calendar_period(&calendar, limit);
        }
        let default_burst = if raw.rate.is_none() && raw.limits.is_some() {
            "the COUNT of the shortest-period limit"
        } else {
            "the rate's COUNT"
        };
        let mut built = self.build_limits(
            index,
            &base,
            written.as_deref(),
            raw.burst.as_ref(),
            algorithm,
            default_burst,
        );
        calendar.attach(&mut built.limits, written.as_deref());
        (written, calendar, built)
    }

    /// `max_in_flight`: for concurrency, and an adaptive rule's ceiling.
    fn max_in_flight(&mut self, rule: &RuleContext, raw: &RawRule) -> Option<u64> {
        let (index, algorithm) = (rule.index, rule.algorithm);
        let path = format!("rule[{index}].max_in_flight");
        match (&raw.max_in_flight, algorithm) {
            (field, Some(kind)) if kind.counts_in_flight() => {
                Some(self.int(field.as_ref(), &path, 100, 1..=i64::MAX as u64))
            }
            (Some(field), Some(kind)) => self.invalid(
                field.span().start,
                &path,
                format!(
                    "only algorithm = \"concurrency\" and \"adaptive\" take max_in_flight: a \
                         {} rule is bounded by its rate; remove max_in_flight, or use algorithm = \
                         \"concurrency\" to bound requests in flight",
                    kind.name()
                ),
            ),
            (Some(field), None) => {
                // The algorithm is invalid (already reported): still check the value.
                self.int(Some(field), &path, 100, 1..=i64::MAX as u64);
                None
            }
            (None, _) => None,
        }
    }

    /// `min_in_flight`: an adaptive rule's floor, at most its ceiling.
    fn min_in_flight(
        &mut self,
        rule: &RuleContext,
        raw: &RawRule,
        ceiling: Option<u64>,
    ) -> Option<u64> {
        let (index, algorithm) = (rule.index, rule.algorithm);
        let path = format!("rule[{index}].min_in_flight");
        let field = raw.min_in_flight.as_ref();
        match (field, algorithm) {
            (_, Some(AlgorithmKind::Adaptive)) => {
                let floor = self.int(field, &path, 1, 1..=i64::MAX as u64);
                let ceiling = ceiling.unwrap_or(100);
                if let (Some(field), true) = (field, floor > ceiling) {
                    self.error(
                        field.span().start,
                        &path,
                        format!(
                            "{floor} is above max_in_flight {ceiling}: the limit it learns moves \
                             between min_in_flight and max_in_flight; lower min_in_flight or raise \
                             max_in_flight"
                        ),
                    );
                }
                Some(floor.min(ceiling))
            }
            (Some(field), Some(kind)) => self.invalid(
                field.span().start,
                &path,
                format!(
                    "only algorithm = \"adaptive\" takes min_in_flight (the floor of the limit \
                         it learns); a {} rule has no learned limit, so remove min_in_flight",
                    kind.name()
                ),
            ),
            (Some(field), None) => {
                self.int(Some(field), &path, 1, 1..=i64::MAX as u64);
                None
            }
            (None, _) => None,
        }
    }

    /// `rate`, `limits`, `burst` or `cost` written on a concurrency rule.
    /// A rule's `cost`: the units each request takes (1 when unset), and
    /// whether they are its GraphQL query's cost (`"graphql"`, which takes 1
    /// when the query cannot be read).
    fn cost(
        &mut self,
        index: usize,
        field: Option<&Spanned<RawCost>>,
        concurrency: bool,
    ) -> (u64, bool) {
        let Some(field) = field else {
            return (1, false);
        };
        let path = format!("rule[{index}].cost");
        let at = field.span().start;
        if concurrency {
            self.not_for_concurrency(index, at, "cost");
            return (1, false);
        }
        match field.get_ref() {
            RawCost::Units(units) => {
                let units = Spanned::new(field.span(), *units);
                (self.int(Some(&units), &path, 1, 1..=i64::MAX as u64), false)
            }
            RawCost::Named(name) if name == "graphql" => (1, true),
            RawCost::Named(name) => {
                self.error(
                    at,
                    &path,
                    format!(
                        "\"{name}\" is not a cost; write a whole number of units (cost = 5) or \
                         \"graphql\" for the query's cost"
                    ),
                );
                (1, false)
            }
        }
    }

    /// `unreadable`, beside `cost = "graphql"` only: `"refuse"` (the
    /// default) or a whole number of units that fits the rule's limits.
    fn unreadable(
        &mut self,
        rule: &RuleContext,
        raw: &RawRule,
        graphql_cost: bool,
        built: &BuiltLimits,
    ) -> Unreadable {
        let (index, algorithm, written) = (rule.index, rule.algorithm, rule.written);
        let Some(field) = &raw.unreadable else {
            return Unreadable::Refuse;
        };
        let path = format!("rule[{index}].unreadable");
        let at = field.span().start;
        if !graphql_cost {
            self.error(
                at,
                &path,
                "unreadable says what a request whose GraphQL cost cannot be read is charged, \
                 so it needs cost = \"graphql\"",
            );
            return Unreadable::Refuse;
        }
        match field.get_ref() {
            RawCost::Named(name) if name == "refuse" => Unreadable::Refuse,
            RawCost::Units(units) => {
                let units = Spanned::new(field.span(), *units);
                let units = self.int(Some(&units), &path, 1, 1..=i64::MAX as u64);
                if let Some(written) = written {
                    let subject = format!("unreadable = {units}");
                    if let Some((_, message)) =
                        self.cost_misfit(&subject, units, algorithm, written, built)
                    {
                        self.error(at, &path, message);
                    }
                }
                Unreadable::Charge(units)
            }
            RawCost::Named(name) => self.invalid(
                at,
                &path,
                format!(
                    "\"{name}\" is not what an unreadable query gets; write \"refuse\" (400, \
                         nothing taken) or a whole number of units to charge (unreadable = 100)"
                ),
            ),
        }
    }

    pub(super) fn not_for_concurrency(&mut self, index: usize, at: usize, key: &str) {
        let hint = match key {
            "burst" => "max_in_flight (default 100) is how many may be in flight at once",
            "cost" => "each request holds one permit while it is in flight",
            "tiers" | "overrides" | "sunset" => {
                "they change a rate, and a concurrency rule has none; write a separate rule \
                 (with its own match or key) for callers that need another max_in_flight"
            }
            _ => "bound them with max_in_flight (default 100), or choose another algorithm for a rate",
        };
        self.error(
            at,
            &format!("rule[{index}].{key}"),
            format!("concurrency counts requests in flight, so it takes no {key}; {hint}"),
        );
    }

    fn algorithm(&mut self, path: &str, field: &Spanned<String>) -> Option<AlgorithmKind> {
        const ALL: [AlgorithmKind; 7] = [
            AlgorithmKind::TokenBucket,
            AlgorithmKind::LeakyBucket,
            AlgorithmKind::FixedWindow,
            AlgorithmKind::SlidingWindow,
            AlgorithmKind::SlidingLog,
            AlgorithmKind::Concurrency,
            AlgorithmKind::Adaptive,
        ];
        let name = field.get_ref().as_str();
        if let Some(kind) = ALL.iter().find(|kind| kind.name() == name) {
            return Some(*kind);
        }
        let allowed = super::joined(ALL.iter().map(|kind| format!("\"{}\"", kind.name())), ", ");
        self.invalid(
            field.span().start,
            path,
            format!("unknown algorithm \"{name}\"; allowed: {allowed}"),
        )
    }
}

fn check_rule_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty; it appears in headers, metrics and logs".to_owned());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "\"{name}\" contains {bad:?}; a rule name may use only letters, digits, '_', '.' and '-' \
             because it appears in headers"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::config::testing::*;
    use crate::config::{LimitConfig, OnLimit, Rate};

    #[test]
    fn a_rule_with_only_name_and_rate_takes_the_defaults() {
        let config = valid(&format!(
            "{UPSTREAM}[[rule]]\nname = \"per-ip\"\nrate = \"100/m\"\n"
        ));
        let rule = &config.rules[0];
        assert_eq!(rule.name, "per-ip");
        assert_eq!(rule.key, vec![KeySource::Ip]);
        assert_eq!(rule.missing, MissingPolicy::Shared);
        assert_eq!(rule.algorithm, AlgorithmKind::TokenBucket);
        assert_eq!(
            rule.limits,
            vec![LimitConfig {
                rate: Rate {
                    count: 100,
                    period: Duration::from_secs(60)
                },
                capacity: 100,
                calendar: None,
            }]
        );
        assert_eq!(rule.cost, 1);
        assert!(!rule.shadow);
        assert_eq!(rule.on_limit, OnLimit::Reject);
        assert_eq!(rule.max_in_flight, None);
        assert!(rule.matcher.path.is_empty() && rule.matcher.method.is_empty());
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    }

    #[test]
    fn algorithm_defaults_to_the_token_bucket_and_takes_the_windows_and_the_log() {
        let config = valid(&rule_a("rate = \"100/m\"\n"));
        assert_eq!(config.rules[0].algorithm, AlgorithmKind::TokenBucket);
        for kind in [
            AlgorithmKind::TokenBucket,
            AlgorithmKind::FixedWindow,
            AlgorithmKind::SlidingWindow,
            AlgorithmKind::SlidingLog,
        ] {
            let config = valid(&rule_a(&format!(
                "algorithm = \"{}\"\nrate = \"100/m\"\n",
                kind.name()
            )));
            let rule = &config.rules[0];
            assert_eq!(rule.algorithm, kind);
            assert_eq!(rule.limits, vec![limit(100, 60, 100)], "{kind:?}");
            assert_eq!(rule.cost, 1);
        }
    }

    #[test]
    fn an_unknown_algorithm_lists_all_seven() {
        assert_eq!(
            only_error(&rule_a("rate = \"1/s\"\nalgorithm = \"gcra\"\n")),
            "test.toml:6:13: rule[0].algorithm: unknown algorithm \"gcra\"; allowed: \
             \"token_bucket\", \"leaky_bucket\", \"fixed_window\", \"sliding_window\", \
             \"sliding_log\", \"concurrency\", \"adaptive\""
        );
    }

    #[test]
    fn adaptive_learns_between_min_and_max_in_flight() {
        let config = valid(&rule_a("algorithm = \"adaptive\"\n"));
        let rule = &config.rules[0];
        assert_eq!(rule.algorithm, AlgorithmKind::Adaptive);
        assert_eq!(
            (rule.min_in_flight, rule.max_in_flight),
            (Some(1), Some(100))
        );
        assert!(rule.limits.is_empty(), "{:?}", rule.limits);
        let config = valid(&rule_a(
            "algorithm = \"adaptive\"\nmin_in_flight = 4\nmax_in_flight = 400\n\
             on_limit = \"delay\"\nmax_delay = \"2s\"\nmax_queue = 50\nshadow = false\n",
        ));
        let rule = &config.rules[0];
        assert_eq!(
            (rule.min_in_flight, rule.max_in_flight),
            (Some(4), Some(400))
        );
        assert_eq!(rule.on_limit, delay(2, 50));
        // min_in_flight equal to max_in_flight: a fixed limit, allowed.
        valid(&rule_a(
            "algorithm = \"adaptive\"\nmin_in_flight = 8\nmax_in_flight = 8\n",
        ));
    }

    #[test]
    fn check_refuses_a_floor_above_the_ceiling_and_a_floor_without_adaptive() {
        assert_eq!(
            only_error(&rule_a(
                "algorithm = \"adaptive\"\nmin_in_flight = 50\nmax_in_flight = 10\n"
            )),
            "test.toml:6:17: rule[0].min_in_flight: 50 is above max_in_flight 10: the limit it \
             learns moves between min_in_flight and max_in_flight; lower min_in_flight or raise \
             max_in_flight"
        );
        assert_eq!(
            only_error(&rule_a("algorithm = \"adaptive\"\nmin_in_flight = 101\n")),
            "test.toml:6:17: rule[0].min_in_flight: 101 is above max_in_flight 100: the limit \
             it learns moves between min_in_flight and max_in_flight; lower min_in_flight or \
             raise max_in_flight"
        );
        assert_eq!(
            only_error(&rule_a("algorithm = \"adaptive\"\nmin_in_flight = 0\n")),
            "test.toml:6:17: rule[0].min_in_flight: 0 is out of range: must be at least 1 \
             (default 1)"
        );
        for (kind, rate) in [("concurrency", ""), ("token_bucket", "rate = \"1/s\"\n")] {
            assert_eq!(
                only_error(&rule_a(&format!(
                    "algorithm = \"{kind}\"\n{rate}min_in_flight = 2\n"
                ))),
                format!(
                    "test.toml:{}:17: rule[0].min_in_flight: only algorithm = \"adaptive\" takes \
                     min_in_flight (the floor of the limit it learns); a {kind} rule has no \
                     learned limit, so remove min_in_flight",
                    if rate.is_empty() { 6 } else { 7 }
                )
            );
        }
    }

    #[test]
    fn adaptive_takes_no_rate_cost_overrides_sunset_charge_or_ban() {
        let lines = errors(&rule_a(
            "algorithm = \"adaptive\"\nrate = \"10/s\"\ncost = 2\n\
             overrides = { \"1.2.3.4\" = { rate = \"1/s\" } }\n\
             refund_on = [\"5xx\"]\nban = { after = 3, within = \"1m\", for = \"5m\" }\n",
        ));
        assert_eq!(lines.len(), 5, "{lines:#?}");
        assert!(lines[0].starts_with("test.toml:6:8: rule[0].rate: concurrency counts requests in flight, so it takes no rate"), "{}", lines[0]);
        assert!(
            lines[1].starts_with("test.toml:7:8: rule[0].cost:"),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].starts_with("test.toml:8:13: rule[0].overrides:"),
            "{}",
            lines[2]
        );
        assert!(
            lines[3].starts_with("test.toml:9:13: rule[0].refund_on:"),
            "{}",
            lines[3]
        );
        assert_eq!(
            lines[4],
            "test.toml:10:7: rule[0].ban: an adaptive rule sheds what the upstream cannot take, \
             which is not the caller's fault, so it bans nobody; remove ban, or ban with a rate \
             rule"
        );
    }

    #[test]
    fn an_adaptive_rules_tiers_set_their_share() {
        let config = valid(&rule_a(
            "algorithm = \"adaptive\"\n\
             tiers = { by = \"header:x-plan\", free = { share = 0.25 }, pro = { share = 1 } }\n",
        ));
        let tiers = config.rules[0].tiers.clone().expect("tiers");
        let shares: Vec<_> = tiers
            .tiers
            .iter()
            .map(|t| (t.name.as_str(), t.share))
            .collect();
        assert_eq!(shares, [("free", Some(250)), ("pro", Some(1000))]);
        assert_eq!(
            errors(&rule_a(
                "algorithm = \"adaptive\"\n\
                 tiers = { by = \"header:x-plan\", a = { share = 1.5 }, b = { rate = \"1/s\" }, c = {}, d = { share = \"half\" } }\n",
            )),
            vec![
                "test.toml:6:47: rule[0].tiers.a.share: must be a number above 0 and at most 1: \
                 the part of the learned limit this tier may use",
                "test.toml:6:54: rule[0].tiers.b: needs share, the part of the learned limit this \
                 tier may use: free = { share = 0.5 } sheds free callers once half the limit is \
                 in flight",
                "test.toml:6:67: rule[0].tiers.b.rate: an adaptive rule's tier sets only share, \
                 its part of the learned limit (free = { share = 0.5 } sheds free callers first)",
                "test.toml:6:76: rule[0].tiers.c: needs share, the part of the learned limit this \
                 tier may use: free = { share = 0.5 } sheds free callers once half the limit is \
                 in flight",
                "test.toml:6:98: rule[0].tiers.d.share: must be a number above 0 and at most 1: \
                 the part of the learned limit this tier may use",
            ]
        );
        assert_eq!(
            only_error(&rule_a(
                "rate = \"1/s\"\ntiers = { by = \"header:x-plan\", free = { share = 0.5 } }\n"
            )),
            "test.toml:6:50: rule[0].tiers.free.share: only a tier of an adaptive rule takes \
             share (its part of the learned limit); a tier or override here sets rate, limits \
             and/or burst"
        );
    }

    #[test]
    fn concurrency_counts_requests_in_flight_100_by_default() {
        let config = valid(&rule_a("algorithm = \"concurrency\"\n"));
        let rule = &config.rules[0];
        assert_eq!(rule.algorithm, AlgorithmKind::Concurrency);
        assert_eq!(rule.max_in_flight, Some(100));
        assert!(rule.limits.is_empty(), "{:?}", rule.limits);
        assert_eq!(rule.cost, 1);
        assert_eq!(rule.on_limit, OnLimit::Reject);
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
        let config = valid(&rule_a(
            "algorithm = \"concurrency\"\nmax_in_flight = 8\non_limit = \"delay\"\n\
             max_delay = \"5s\"\nmax_queue = 20\n",
        ));
        assert_eq!(config.rules[0].max_in_flight, Some(8));
        assert_eq!(config.rules[0].on_limit, delay(5, 20));
        assert_eq!(
            only_error(&rule_a("algorithm = \"concurrency\"\nmax_in_flight = 0\n")),
            "test.toml:6:17: rule[0].max_in_flight: 0 is out of range: must be at least 1 \
             (default 100)"
        );
    }

    #[test]
    fn concurrency_takes_no_rate_limits_burst_or_cost() {
        assert_eq!(
            errors(&rule_a(
                "algorithm = \"concurrency\"\nrate = \"10/s\"\nlimits = [\"x\"]\nburst = 5\n\
                 cost = 2\n"
            )),
            vec![
                "test.toml:6:8: rule[0].rate: concurrency counts requests in flight, so it takes \
                 no rate; bound them with max_in_flight (default 100), or choose another \
                 algorithm for a rate",
                "test.toml:7:10: rule[0].limits: concurrency counts requests in flight, so it \
                 takes no limits; bound them with max_in_flight (default 100), or choose another \
                 algorithm for a rate",
                "test.toml:8:9: rule[0].burst: concurrency counts requests in flight, so it takes \
                 no burst; max_in_flight (default 100) is how many may be in flight at once",
                "test.toml:9:8: rule[0].cost: concurrency counts requests in flight, so it takes \
                 no cost; each request holds one permit while it is in flight",
            ]
        );
    }

    #[test]
    fn max_in_flight_is_only_for_concurrency() {
        for kind in [
            "token_bucket",
            "leaky_bucket",
            "fixed_window",
            "sliding_window",
            "sliding_log",
        ] {
            assert_eq!(
                only_error(&rule_a(&format!(
                    "algorithm = \"{kind}\"\nrate = \"10/s\"\nmax_in_flight = 5\n"
                ))),
                format!(
                    "test.toml:7:17: rule[0].max_in_flight: only algorithm = \"concurrency\" and \
                     \"adaptive\" take max_in_flight: a {kind} rule is bounded by its rate; remove \
                     max_in_flight, or use algorithm = \"concurrency\" to bound requests in flight"
                )
            );
        }
        let line = only_error(&rule_a("rate = \"10/s\"\nmax_in_flight = 5\n"));
        assert!(
            line.starts_with(
                "test.toml:6:17: rule[0].max_in_flight: only algorithm = \"concurrency\" and \
                 \"adaptive\" take max_in_flight: a token_bucket rule"
            ),
            "{line}"
        );
    }

    #[test]
    fn concurrency_rules_take_no_tiers_overrides_or_sunset() {
        let lines = errors(&rule_a(
            "algorithm = \"concurrency\"\ntiers = { by = \"ip\", a = { rate = \"1/s\" } }\noverrides = { \"1.2.3.4\" = { rate = \"1/s\" } }\nsunset = { start = 2026-01-01T00:00:00Z, end = 2026-02-01T00:00:00Z, to = \"0/d\" }\n",
        ));
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(lines[0].starts_with("test.toml:6:9: rule[0].tiers: concurrency counts requests in flight, so it takes no tiers; they change a rate"), "{}", lines[0]);
        assert!(lines[1].starts_with("test.toml:7:13: rule[0].overrides: concurrency counts requests in flight, so it takes no overrides"), "{}", lines[1]);
        assert!(lines[2].starts_with("test.toml:8:10: rule[0].sunset: concurrency counts requests in flight, so it takes no sunset"), "{}", lines[2]);
    }

    #[test]
    fn on_change_defaults_to_proportional() {
        assert_eq!(
            valid(&rule_a("rate = \"1/s\"\n")).rules[0].on_change,
            OnChange::Proportional
        );
        for (text, want) in [
            ("keep", OnChange::Keep),
            ("proportional", OnChange::Proportional),
            ("reset", OnChange::Reset),
        ] {
            let config = valid(&rule_a(&format!(
                "rate = \"1/s\"\non_change = \"{text}\"\n"
            )));
            assert_eq!(config.rules[0].on_change, want);
        }
        assert_eq!(
            only_error(&rule_a("rate = \"1/s\"\non_change = \"refill\"\n")),
            "test.toml:6:13: rule[0].on_change: \"refill\" is not allowed; use one of \"keep\", \"proportional\", \"reset\""
        );
    }
}
