//! A rule's rates (`rate` or `limits`), `burst` and `cost`: the limits with
//! their capacities, checked against the algorithm. Tiers and overrides
//! build theirs the same way.

use std::time::Duration;

use toml::Spanned;

use super::raw::OneOrMany;
use super::units::parse_rate;
use super::validate::Validator;
use super::{AlgorithmKind, LimitConfig, Rate};

/// Above this COUNT a `sliding_log` limit draws a warning (not an error): the
/// log keeps one 8-byte timestamp per admitted unit, so each key may hold
/// COUNT of them — 80 KB per key at 10 000, 80 GB for a million such keys.
const SLIDING_LOG_WARN_COUNT: u64 = 10_000;

/// One limit as the operator wrote it (`rate`, or one element of `limits`),
/// kept with its position for the checks that need the whole rule.
#[derive(Clone)]
pub(super) struct WrittenLimit {
    pub(super) rate: Rate,
    /// The rate string as written, for messages.
    pub(super) text: String,
    /// Byte offset of the value.
    pub(super) at: usize,
    /// `rate`, `limits[1]` or `tiers.free.rate`: how messages about other
    /// keys name it.
    pub(super) key: String,
    /// Full path for its own messages: `rule[0].limits[1]`.
    pub(super) path: String,
}

/// The limits of a rule or of one of its tiers or overrides.
pub(super) struct BuiltLimits {
    /// Never empty except for `concurrency`; placeholders when the rates
    /// were invalid (already reported).
    pub(super) limits: Vec<LimitConfig>,
    /// The index of the limit whose capacity is the written `burst`.
    pub(super) burst_sized: Option<usize>,
}

impl Validator<'_> {
    /// A leaky bucket takes a single rate; several are reported (at `limits`)
    /// and dropped.
    pub(super) fn one_rate_if_leaky(
        &mut self,
        base: &str,
        algorithm: Option<AlgorithmKind>,
        written: Option<Vec<WrittenLimit>>,
        limits: Option<&Spanned<OneOrMany>>,
        at: usize,
    ) -> Option<Vec<WrittenLimit>> {
        match written {
            Some(written) if algorithm == Some(AlgorithmKind::LeakyBucket) && written.len() > 1 => {
                let at = limits.map_or(at, |field| field.span().start);
                self.invalid(
                    at,
                    &format!("{base}.limits"),
                    "a leaky bucket lets requests leave at one constant rate, so it takes a single \
                     rate such as rate = \"10/s\"; use token_bucket for several limits that must \
                     all hold",
                )
            }
            written => written,
        }
    }

    /// The limits (with capacities) of `written` and `burst`, checking the
    /// burst; the same for a rule and for each of its tiers and overrides.
    /// `default_burst` says what the burst defaults to, for messages.
    pub(super) fn build_limits(
        &mut self,
        index: usize,
        base: &str,
        written: Option<&[WrittenLimit]>,
        burst_field: Option<&Spanned<i64>>,
        algorithm: Option<AlgorithmKind>,
        default_burst: &str,
    ) -> BuiltLimits {
        let path = format!("{base}.burst");
        let leaky = algorithm == Some(AlgorithmKind::LeakyBucket);
        // The shortest-period limit is the one `burst` sizes.
        let shortest =
            written.and_then(|limits| (0..limits.len()).min_by_key(|&i| limits[i].rate.period));
        let count = written
            .zip(shortest)
            .map(|(limits, i)| limits[i].rate.count);

        let burst = match (burst_field, algorithm) {
            (None, _) => None,
            (Some(field), Some(kind)) if kind.counts_in_flight() => {
                self.not_for_concurrency(index, field.span().start, "burst");
                None
            }
            (Some(field), Some(kind))
                if !matches!(
                    kind,
                    AlgorithmKind::TokenBucket | AlgorithmKind::LeakyBucket
                ) =>
            {
                self.invalid(
                    field.span().start,
                    &path,
                    format!(
                        "only algorithm = \"token_bucket\" (its capacity) and \"leaky_bucket\" \
                         (how many may wait) take a burst: the capacity of a {} limit is its \
                         COUNT; remove burst, or change the COUNT",
                        kind.name()
                    ),
                )
            }
            (Some(field), _) => Some(self.burst(field, &path, count, leaky, default_burst)),
        };

        let limits = limit_configs(written, algorithm, burst, shortest);
        BuiltLimits {
            limits,
            burst_sized: burst.and(shortest),
        }
    }

    /// A token or leaky bucket's `burst`: at least 1 when the COUNT is (else
    /// an error, and 1), warned when a COUNT of 0 makes it meaningless.
    fn burst(
        &mut self,
        field: &Spanned<i64>,
        path: &str,
        count: Option<u64>,
        leaky: bool,
        default_burst: &str,
    ) -> u64 {
        let value = *field.get_ref();
        let min = i64::from(count.is_some_and(|count| count > 0));
        if value < min {
            let why = if min == 1 {
                "must be at least 1, or no request could ever pass"
            } else {
                "cannot be negative"
            };
            self.error(
                field.span().start,
                path,
                format!("{value} {why}; it defaults to {default_burst}"),
            );
            1
        } else {
            let burst = u64::try_from(value).unwrap_or(0);
            if count == Some(0) && burst > 0 {
                let message = if leaky {
                    "with a COUNT of 0 nothing ever leaves a leaky bucket, so no request \
                     is admitted whatever the burst"
                        .to_owned()
                } else {
                    format!(
                        "with a COUNT of 0 the bucket never refills: each key gets {burst} \
                         request(s) in total"
                    )
                };
                self.warn(field.span().start, path, message);
            }
            burst
        }
    }

    /// The first open limit whose capacity cannot hold `cost` (its index and
    /// the sentence saying so), if any. A leaky bucket holds a request until
    /// its cost has leaked out, so any cost fits it; it only waits longer.
    pub(super) fn cost_misfit(
        &self,
        subject: &str,
        cost: u64,
        algorithm: Option<AlgorithmKind>,
        written: &[WrittenLimit],
        built: &BuiltLimits,
    ) -> Option<(usize, String)> {
        if algorithm == Some(AlgorithmKind::LeakyBucket) {
            return None;
        }
        let (i, (written, limit)) = written
            .iter()
            .zip(&built.limits)
            .enumerate()
            .find(|(_, (written, limit))| written.rate.count > 0 && limit.capacity < cost)?;
        let (what, raise) = if built.burst_sized == Some(i) {
            ("its burst", "burst")
        } else {
            ("its COUNT", "that COUNT")
        };
        // `subject` names the field it was written as (`reserve = 5000`),
        // else it is the cost.
        let field = subject.split_once(" = ").map_or("cost", |(field, _)| field);
        Some((
            i,
            format!(
                "{subject} can never fit in {} \"{}\", whose capacity is {} ({what}): such a \
                 request would never be admitted; lower {field} or raise {raise}",
                written.key, written.text, limit.capacity
            ),
        ))
    }

    /// The rule's `rate` or `limits`, parsed, in file order; `None` (with the
    /// problem reported) when neither, both, or an invalid one was written.
    /// `base` is the path of the table holding them (`rule[0]`,
    /// `rule[0].tiers.premium`) and `prefix` how other keys' messages name
    /// them relative to the rule (`""`, `"tiers.premium."`).
    pub(super) fn written_limits(
        &mut self,
        base: &str,
        prefix: &str,
        at: usize,
        rate: Option<&Spanned<String>>,
        limits: Option<&Spanned<OneOrMany>>,
    ) -> Option<Vec<WrittenLimit>> {
        match (rate, limits) {
            (None, None) => self.invalid(
                at,
                base,
                "rate is required: COUNT/PERIOD such as rate = \"100/m\", or \
                     limits = [\"100/m\", \"1000/h\"] for several limits that must all hold",
            ),
            (Some(rate), None) => self.rate(base, prefix, rate).map(|limit| vec![limit]),
            (None, Some(limits)) => self.limit_list(base, prefix, limits),
            (Some(rate), Some(limits)) => {
                // Each is still read, so its own mistakes are reported too.
                self.rate(base, prefix, rate);
                self.limit_list(base, prefix, limits);
                let (later, key, earlier, other) = if limits.span().start > rate.span().start {
                    (limits.span().start, "limits", rate.span().start, "rate")
                } else {
                    (rate.span().start, "rate", limits.span().start, "limits")
                };
                let (line, _) = self.source.position(earlier);
                self.invalid(
                    later,
                    &format!("{base}.{key}"),
                    format!(
                        "cannot be used together with {other} (line {line}); write one limit as \
                         rate = \"100/m\" or several as limits = [\"100/m\", \"1000/h\"]"
                    ),
                )
            }
        }
    }

    fn rate(&mut self, base: &str, prefix: &str, field: &Spanned<String>) -> Option<WrittenLimit> {
        let path = format!("{base}.rate");
        let rate = self.ok(field.span().start, &path, parse_rate(field.get_ref()))?;
        Some(WrittenLimit {
            rate,
            text: field.get_ref().clone(),
            at: field.span().start,
            key: format!("{prefix}rate"),
            path,
        })
    }

    fn limit_list(
        &mut self,
        base: &str,
        prefix: &str,
        field: &Spanned<OneOrMany>,
    ) -> Option<Vec<WrittenLimit>> {
        let path = format!("{base}.limits");
        let items = match field.get_ref() {
            OneOrMany::Many(items) => items,
            OneOrMany::One(text) => {
                return self.invalid(
                    field.span().start,
                    &path,
                    format!(
                        "must be a list of rates, such as limits = [\"{text}\"]; for a single \
                         limit rate = \"{text}\" works too"
                    ),
                )
            }
        };
        if items.is_empty() {
            return self.invalid(
                field.span().start,
                &path,
                "must list at least one rate, such as limits = [\"100/m\", \"1000/h\"]",
            );
        }
        let mut limits: Vec<WrittenLimit> = Vec::with_capacity(items.len());
        let mut valid = true;
        for (i, item) in items.iter().enumerate() {
            let key = format!("{prefix}limits[{i}]");
            let path = format!("{base}.limits[{i}]");
            let text = item.get_ref();
            let Some(rate) = self.ok(item.span().start, &path, parse_rate(text)) else {
                valid = false;
                continue;
            };
            if let Some(first) = limits.iter().find(|l| l.rate.period == rate.period) {
                let message = format!(
                    "\"{text}\" has the same period as {} \"{}\"; each limit needs its own \
                     period, so keep only one of them",
                    first.key, first.text
                );
                self.error(item.span().start, &path, message);
                continue;
            }
            limits.push(WrittenLimit {
                rate,
                text: text.clone(),
                at: item.span().start,
                key,
                path,
            });
        }
        valid.then_some(limits)
    }

    /// The checks of one limit that depend on the algorithm, and the warnings.
    pub(super) fn check_limit(&mut self, algorithm: Option<AlgorithmKind>, limit: &WrittenLimit) {
        let count = limit.rate.count;
        if count == 0 {
            self.warn(
                limit.at,
                &limit.path,
                format_args!(
                    "\"{}\" closes the route: every matching request is limited",
                    limit.text
                ),
            );
        }
        let Some(kind) = algorithm else {
            return;
        };
        let counts_in_32_bits = !matches!(
            kind,
            AlgorithmKind::TokenBucket | AlgorithmKind::LeakyBucket
        );
        if counts_in_32_bits && count > u64::from(u32::MAX) {
            self.error(
                limit.at,
                &limit.path,
                format!(
                    "the COUNT {count} is too large for {}, which counts in 32 bits; at most {}",
                    kind.name(),
                    u32::MAX
                ),
            );
        } else if kind == AlgorithmKind::SlidingLog && count > SLIDING_LOG_WARN_COUNT {
            self.warn(
                limit.at,
                &limit.path,
                format_args!(
                    "sliding_log keeps one 8-byte timestamp per admitted unit, so each key may \
                     hold {count} of them ({} per key); algorithm = \"sliding_window\" keeps two \
                     counters per key instead",
                    format_bytes(count.saturating_mul(8))
                ),
            );
        }
    }
}

/// A size in the largest decimal unit that keeps it at least 1: "80 KB",
/// "8 MB", "1.5 GB" (one decimal below 10, whole numbers above).
fn format_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("GB", 1_000_000_000),
        ("MB", 1_000_000),
        ("KB", 1_000),
        ("bytes", 1),
    ];
    let (unit, size) = UNITS
        .into_iter()
        .find(|&(_, size)| bytes >= size)
        .unwrap_or(("bytes", 1));
    let value = bytes as f64 / size as f64;
    if value < 10.0 && size > 1 {
        let text = format!("{value:.1}");
        format!("{} {unit}", text.trim_end_matches(".0"))
    } else {
        format!("{value:.0} {unit}")
    }
}

/// The limits of `written`, the shortest-period one's capacity its `burst`
/// if any (none for a concurrency rule; one of 1/s when none are written).
fn limit_configs(
    written: Option<&[WrittenLimit]>,
    algorithm: Option<AlgorithmKind>,
    burst: Option<u64>,
    shortest: Option<usize>,
) -> Vec<LimitConfig> {
    match written {
        _ if algorithm.is_some_and(AlgorithmKind::counts_in_flight) => Vec::new(),
        Some(written) if !written.is_empty() => written
            .iter()
            .enumerate()
            .map(|(i, limit)| LimitConfig {
                rate: limit.rate,
                capacity: match burst {
                    Some(burst) if Some(i) == shortest => burst,
                    _ => limit.rate.count,
                },
                // Set by the rule's `calendar` once it is read
                // (config/calendar.rs).
                calendar: None,
            })
            .collect(),
        _ => vec![LimitConfig {
            rate: Rate {
                count: 1,
                period: Duration::from_secs(1),
            },
            capacity: burst.unwrap_or(1),
            calendar: None,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::*;

    #[test]
    fn burst_defaults_to_the_count_and_may_be_zero_only_for_a_closed_route() {
        let config = valid(&format!(
            "{UPSTREAM}[[rule]]\nname = \"closed\"\nrate = \"0/m\"\n[[rule]]\nname = \"z\"\nrate = \"0/m\"\nburst = 0\n"
        ));
        assert_eq!(config.rules[0].limits[0].capacity, 0);
        assert_eq!(config.rules[1].limits[0].capacity, 0);
        assert_eq!(config.warnings.len(), 2, "{:?}", config.warnings);
        assert!(
            config.warnings[0].starts_with("test.toml:5:8: rule[0].rate: \"0/m\" closes the route"),
            "{:?}",
            config.warnings
        );
    }

    #[test]
    fn limits_are_kept_in_file_order_each_with_its_count_as_capacity() {
        let config = valid(&rule_a(
            "algorithm = \"fixed_window\"\nlimits = [\"1000/h\", \"100/m\"]\n",
        ));
        assert_eq!(
            config.rules[0].limits,
            vec![limit(1000, 3600, 1000), limit(100, 60, 100)]
        );
        let config = valid(&rule_a("limits = [\"5/15m\"]\n"));
        assert_eq!(config.rules[0].limits, vec![limit(5, 900, 5)]);
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    }

    #[test]
    fn burst_sizes_the_shortest_period_limit_even_when_it_is_listed_second() {
        let config = valid(&rule_a(
            "limits = [\"1000/h\", \"100/m\", \"10000/d\"]\nburst = 20\n",
        ));
        assert_eq!(
            config.rules[0].limits,
            vec![
                limit(1000, 3600, 1000),
                limit(100, 60, 20),
                limit(10_000, 86_400, 10_000)
            ]
        );
        assert_eq!(
            only_error(&rule_a("limits = [\"1000/h\", \"100/m\"]\nburst = 0\n")),
            "test.toml:6:9: rule[0].burst: 0 must be at least 1, or no request could ever pass; \
             it defaults to the COUNT of the shortest-period limit"
        );
    }

    #[test]
    fn a_rule_needs_exactly_one_of_rate_and_limits() {
        assert_eq!(
            only_error(&rule_a("")),
            "test.toml:3:1: rule[0]: rate is required: COUNT/PERIOD such as rate = \"100/m\", \
             or limits = [\"100/m\", \"1000/h\"] for several limits that must all hold"
        );
        assert_eq!(
            only_error(&rule_a("rate = \"1/s\"\nlimits = [\"100/m\"]\n")),
            "test.toml:6:10: rule[0].limits: cannot be used together with rate (line 5); write \
             one limit as rate = \"100/m\" or several as limits = [\"100/m\", \"1000/h\"]"
        );
        // Reported at whichever comes second, and each is still checked.
        assert_eq!(
            errors(&rule_a("limits = [\"1/x\"]\nrate = \"1/s\"\n")),
            vec![
                "test.toml:5:11: rule[0].limits[0]: \"x\" is not a valid PERIOD; write \
                 COUNT/PERIOD with a whole COUNT (0 closes the route) and a PERIOD that is a unit \
                 s, m, h or d or a duration such as 15m, 2s or 500ms (for example \"100/m\" or \
                 \"5/15m\"); with calendar, d, w, mo or y",
                "test.toml:6:8: rule[0].rate: cannot be used together with limits (line 5); write \
                 one limit as rate = \"100/m\" or several as limits = [\"100/m\", \"1000/h\"]",
            ]
        );
    }

    #[test]
    fn limits_must_be_a_non_empty_list_of_valid_rates() {
        assert_eq!(
            only_error(&rule_a("limits = []\n")),
            "test.toml:5:10: rule[0].limits: must list at least one rate, such as \
             limits = [\"100/m\", \"1000/h\"]"
        );
        assert_eq!(
            only_error(&rule_a("limits = \"100/m\"\n")),
            "test.toml:5:10: rule[0].limits: must be a list of rates, such as \
             limits = [\"100/m\"]; for a single limit rate = \"100/m\" works too"
        );
        let line = only_error(&rule_a("limits = [\"100/m\", \"5/x\"]\nburst = 0\n"));
        assert!(
            line.starts_with("test.toml:5:20: rule[0].limits[1]: \"x\" is not a valid PERIOD"),
            "{line}"
        );
    }

    #[test]
    fn two_limits_with_the_same_period_are_an_error_at_the_second() {
        assert_eq!(
            only_error(&rule_a("limits = [\"100/m\", \"1000/h\", \"60/60s\"]\n")),
            "test.toml:5:30: rule[0].limits[2]: \"60/60s\" has the same period as limits[0] \
             \"100/m\"; each limit needs its own period, so keep only one of them"
        );
    }

    #[test]
    fn burst_is_only_for_the_token_and_leaky_buckets() {
        for kind in ["fixed_window", "sliding_window", "sliding_log"] {
            assert_eq!(
                only_error(&rule_a(&format!(
                    "algorithm = \"{kind}\"\nrate = \"10/s\"\nburst = 20\n"
                ))),
                format!(
                    "test.toml:7:9: rule[0].burst: only algorithm = \"token_bucket\" (its capacity) \
                     and \"leaky_bucket\" (how many may wait) take a burst: the capacity of a \
                     {kind} limit is its COUNT; remove burst, or change the COUNT"
                )
            );
        }
    }

    #[test]
    fn window_and_log_counts_must_fit_in_32_bits() {
        for kind in ["fixed_window", "sliding_window", "sliding_log"] {
            assert_eq!(
                only_error(&rule_a(&format!(
                    "algorithm = \"{kind}\"\nlimits = [\"4294967295/h\", \"4294967296/d\"]\n"
                ))),
                format!(
                    "test.toml:6:27: rule[0].limits[1]: the COUNT 4294967296 is too large for \
                     {kind}, which counts in 32 bits; at most 4294967295"
                )
            );
        }
        let config = valid(&rule_a("rate = \"4294967296/d\"\n"));
        assert_eq!(config.rules[0].limits[0].capacity, 4_294_967_296);
    }

    #[test]
    fn cost_defaults_to_one_and_must_be_a_whole_number_of_at_least_one() {
        assert_eq!(valid(&rule_a("rate = \"1/s\"\n")).rules[0].cost, 1);
        assert_eq!(
            valid(&rule_a("rate = \"10/s\"\ncost = 10\n")).rules[0].cost,
            10
        );
        assert_eq!(
            only_error(&rule_a("rate = \"10/s\"\ncost = 0\n")),
            "test.toml:6:8: rule[0].cost: 0 is out of range: must be at least 1 (default 1)"
        );
        assert_eq!(
            only_error(&rule_a("rate = \"10/s\"\ncost = -2\n")),
            "test.toml:6:8: rule[0].cost: -2 is out of range: must be at least 1 (default 1)"
        );
        let line = only_error(&rule_a("rate = \"10/s\"\ncost = 1.5\n"));
        assert!(
            line.starts_with("test.toml:6:8: invalid type: floating point `1.5`"),
            "{line}"
        );
    }

    #[test]
    fn cost_must_fit_in_the_capacity_of_every_open_limit() {
        assert_eq!(
            only_error(&rule_a("limits = [\"10/s\", \"5/m\"]\ncost = 6\n")),
            "test.toml:6:8: rule[0].cost: 6 can never fit in limits[1] \"5/m\", whose capacity is \
             5 (its COUNT): such a request would never be admitted; lower cost or raise that COUNT"
        );
        assert_eq!(
            only_error(&rule_a("rate = \"100/m\"\nburst = 3\ncost = 4\n")),
            "test.toml:7:8: rule[0].cost: 4 can never fit in rate \"100/m\", whose capacity is 3 \
             (its burst): such a request would never be admitted; lower cost or raise burst"
        );
        // A limit with a COUNT of 0 closes the route whatever the cost.
        let config = valid(&rule_a("limits = [\"0/s\", \"10/m\"]\ncost = 10\n"));
        assert_eq!(config.rules[0].cost, 10);
        assert_eq!(
            config.warnings,
            vec![
                "test.toml:5:11: rule[0].limits[0]: \"0/s\" closes the route: every matching \
                 request is limited"
            ]
        );
    }

    #[test]
    fn a_sliding_log_with_a_large_count_is_a_warning_at_that_limit() {
        let config = valid(&rule_a(
            "algorithm = \"sliding_log\"\nlimits = [\"10000/m\", \"50000/h\"]\n",
        ));
        assert_eq!(
            config.warnings,
            vec![
                "test.toml:6:22: rule[0].limits[1]: sliding_log keeps one 8-byte timestamp per \
                 admitted unit, so each key may hold 50000 of them (400 KB per key); \
                 algorithm = \"sliding_window\" keeps two counters per key instead"
            ]
        );
        let config = valid(&rule_a(
            "algorithm = \"sliding_log\"\nrate = \"2000000/d\"\n",
        ));
        assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
        assert!(
            config.warnings[0].starts_with("test.toml:6:8: rule[0].rate: sliding_log keeps"),
            "{:?}",
            config.warnings
        );
        assert!(
            config.warnings[0].contains("(16 MB per key)"),
            "{:?}",
            config.warnings
        );
        // The counters of the other algorithms do not grow with the COUNT.
        let config = valid(&rule_a(
            "algorithm = \"sliding_window\"\nrate = \"2000000/d\"\n",
        ));
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    }

    #[test]
    fn a_leaky_bucket_takes_one_rate_and_a_burst_of_at_least_one() {
        assert_eq!(
            only_error(&rule_a(
                "algorithm = \"leaky_bucket\"\nlimits = [\"10/s\", \"100/m\"]\nburst = 5\n"
            )),
            "test.toml:6:10: rule[0].limits: a leaky bucket lets requests leave at one constant \
             rate, so it takes a single rate such as rate = \"10/s\"; use token_bucket for several \
             limits that must all hold"
        );
        assert_eq!(
            only_error(&rule_a("algorithm = \"leaky_bucket\"\n")),
            "test.toml:3:1: rule[0]: rate is required: COUNT/PERIOD such as rate = \"100/m\", \
             or limits = [\"100/m\", \"1000/h\"] for several limits that must all hold"
        );
        assert_eq!(
            only_error(&rule_a(
                "algorithm = \"leaky_bucket\"\nrate = \"10/s\"\nburst = 0\n"
            )),
            "test.toml:7:9: rule[0].burst: 0 must be at least 1, or no request could ever pass; \
             it defaults to the rate's COUNT"
        );
    }

    #[test]
    fn a_leaky_bucket_takes_any_cost_of_at_least_one_and_counts_in_64_bits() {
        let config = valid(&rule_a(
            "algorithm = \"leaky_bucket\"\nrate = \"10/s\"\nburst = 2\ncost = 5\n",
        ));
        assert_eq!(config.rules[0].cost, 5);
        assert_eq!(
            only_error(&rule_a(
                "algorithm = \"leaky_bucket\"\nrate = \"10/s\"\ncost = 0\n"
            )),
            "test.toml:7:8: rule[0].cost: 0 is out of range: must be at least 1 (default 1)"
        );
        let config = valid(&rule_a(
            "algorithm = \"leaky_bucket\"\nrate = \"4294967296/d\"\n",
        ));
        assert_eq!(config.rules[0].limits[0].capacity, 4_294_967_296);
    }

    #[test]
    fn sizes_are_shown_in_their_largest_decimal_unit() {
        assert_eq!(format_bytes(999), "999 bytes");
        assert_eq!(format_bytes(80_008), "80 KB");
        assert_eq!(format_bytes(1_500_000), "1.5 MB");
        assert_eq!(format_bytes(16_000_000), "16 MB");
        assert_eq!(format_bytes(34_359_738_360), "34 GB");
    }
}
