//! `on_limit`: what happens to a request over its budget (reject at once, or
//! delay it within `max_delay` and `max_queue`).

use std::time::Duration;

use super::raw::RawRule;
use super::rules::RuleContext;
use super::validate::Validator;
use super::{AlgorithmKind, OnLimit};

impl Validator<'_> {
    /// `on_limit` with its `max_delay` and `max_queue`. `queue` is a leaky
    /// bucket's capacity, which is its queue.
    pub(super) fn on_limit(&mut self, rule: &RuleContext, raw: &RawRule, queue: u64) -> OnLimit {
        let (index, algorithm) = (rule.index, rule.algorithm);
        let path = |field: &str| format!("rule[{index}].{field}");
        let leaky = algorithm == Some(AlgorithmKind::LeakyBucket);
        // Whether the rule holds requests; `None` when that is unknown (an
        // invalid on_limit or algorithm, already reported), so that
        // max_delay and max_queue are not judged against a guess.
        let delay = self.holds(index, algorithm, raw);
        let default_delay = Duration::from_secs(30);
        let max_delay = match &raw.max_delay {
            Some(field) if delay == Some(false) => {
                self.needs_delay(index, field.span().start, "max_delay", raw);
                default_delay
            }
            field => self.timeout(field.as_ref(), &path("max_delay"), default_delay),
        };
        let max_queue = match &raw.max_queue {
            Some(field) if leaky => {
                self.error(
                    field.span().start,
                    &path("max_queue"),
                    "a leaky bucket's queue is its burst: how many requests may wait (default \
                     the rate's COUNT); remove max_queue and set burst instead",
                );
                queue
            }
            Some(field) if delay == Some(false) => {
                self.needs_delay(index, field.span().start, "max_queue", raw);
                1000
            }
            _ if leaky => queue,
            field => self.int(
                field.as_ref(),
                &path("max_queue"),
                1000,
                1..=i64::MAX as u64,
            ),
        };
        match delay {
            Some(true) => OnLimit::Delay {
                max_delay,
                max_queue,
            },
            _ => OnLimit::Reject,
        }
    }

    /// `on_limit`: whether the rule holds requests (a leaky bucket always
    /// does), `None` when that is unknown.
    fn holds(
        &mut self,
        index: usize,
        algorithm: Option<AlgorithmKind>,
        raw: &RawRule,
    ) -> Option<bool> {
        let path = format!("rule[{index}].on_limit");
        let mut delay = Some(false);
        if let Some(field) = &raw.on_limit {
            let at = field.span().start;
            match (field.get_ref().as_str(), algorithm) {
                ("reject", Some(AlgorithmKind::LeakyBucket)) => self.error(
                    at,
                    &path,
                    "a leaky bucket always holds requests until they can leave at its rate, so \
                     it cannot reject at once; remove on_limit, or use algorithm = \
                     \"token_bucket\" to answer at once",
                ),
                ("reject", _) => {}
                ("delay", Some(AlgorithmKind::SlidingWindow)) => {
                    self.error(
                        at,
                        &path,
                        "delay is not supported with sliding_window; use token_bucket, \
                         leaky_bucket, fixed_window or sliding_log",
                    );
                    delay = Some(true);
                }
                ("delay", _) => delay = Some(true),
                (other, _) => {
                    self.error(
                        at,
                        &path,
                        format!("unknown on_limit \"{other}\"; allowed: \"reject\" or \"delay\""),
                    );
                    delay = None;
                }
            }
        }
        if algorithm == Some(AlgorithmKind::LeakyBucket) {
            delay = Some(true);
        } else if algorithm.is_none() && delay == Some(false) {
            delay = None;
        }
        delay
    }

    /// `max_delay` or `max_queue` written on a rule that rejects at once.
    fn needs_delay(&mut self, index: usize, at: usize, key: &str, raw: &RawRule) {
        let message = match &raw.on_limit {
            Some(field) => {
                let (line, _) = self.source.position(field.span().start);
                format!(
                    "needs on_limit = \"delay\": with on_limit = \"reject\" (line {line}) a limited \
                     request is answered at once and never waits; set on_limit = \"delay\", or \
                     remove {key}"
                )
            }
            None => format!(
                "needs on_limit = \"delay\": by default (on_limit = \"reject\") a limited request \
                 is answered at once and never waits; add on_limit = \"delay\", or remove {key}"
            ),
        };
        self.error(at, &format!("rule[{index}].{key}"), message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::*;

    #[test]
    fn on_limit_defaults_to_reject_and_delay_defaults_to_30s_and_a_queue_of_1000() {
        let config = valid(&rule_a("rate = \"10/s\"\non_limit = \"reject\"\n"));
        assert_eq!(config.rules[0].on_limit, OnLimit::Reject);
        for kind in ["token_bucket", "fixed_window", "sliding_log"] {
            let config = valid(&rule_a(&format!(
                "algorithm = \"{kind}\"\nrate = \"10/s\"\non_limit = \"delay\"\n"
            )));
            assert_eq!(config.rules[0].on_limit, delay(30, 1000), "{kind}");
            assert_eq!(config.rules[0].max_in_flight, None);
        }
    }

    #[test]
    fn delay_reads_max_delay_and_max_queue() {
        let config = valid(&rule_a(
            "rate = \"10/s\"\non_limit = \"delay\"\nmax_delay = \"1500ms\"\nmax_queue = 5\n",
        ));
        assert_eq!(
            config.rules[0].on_limit,
            OnLimit::Delay {
                max_delay: Duration::from_millis(1500),
                max_queue: 5
            }
        );
        assert_eq!(
            errors(&rule_a(
                "rate = \"10/s\"\non_limit = \"delay\"\nmax_delay = \"0s\"\nmax_queue = 0\n"
            )),
            vec![
                "test.toml:7:13: rule[0].max_delay: must be longer than zero (default \"30s\")",
                "test.toml:8:13: rule[0].max_queue: 0 is out of range: must be at least 1 \
                 (default 1000)",
            ]
        );
        let line = only_error(&rule_a(
            "rate = \"10/s\"\non_limit = \"delay\"\nmax_delay = \"soon\"\n",
        ));
        assert!(
            line.starts_with(
                "test.toml:7:13: rule[0].max_delay: \"soon\" does not start with a number"
            ),
            "{line}"
        );
        let line = only_error(&rule_a(
            "rate = \"10/s\"\non_limit = \"delay\"\nmax_delay = 30\n",
        ));
        assert!(
            line.starts_with("test.toml:7:13: invalid type: integer `30`"),
            "{line}"
        );
    }

    #[test]
    fn max_delay_and_max_queue_need_on_limit_delay() {
        assert_eq!(
            errors(&rule_a(
                "rate = \"10/s\"\nmax_delay = \"5s\"\nmax_queue = 10\n"
            )),
            vec![
                "test.toml:6:13: rule[0].max_delay: needs on_limit = \"delay\": by default \
                 (on_limit = \"reject\") a limited request is answered at once and never waits; \
                 add on_limit = \"delay\", or remove max_delay",
                "test.toml:7:13: rule[0].max_queue: needs on_limit = \"delay\": by default \
                 (on_limit = \"reject\") a limited request is answered at once and never waits; \
                 add on_limit = \"delay\", or remove max_queue",
            ]
        );
        assert_eq!(
            only_error(&rule_a(
                "rate = \"10/s\"\non_limit = \"reject\"\nmax_queue = 10\n"
            )),
            "test.toml:7:13: rule[0].max_queue: needs on_limit = \"delay\": with on_limit = \
             \"reject\" (line 6) a limited request is answered at once and never waits; set \
             on_limit = \"delay\", or remove max_queue"
        );
        // Not judged against an invalid on_limit or algorithm.
        assert_eq!(
            only_error(&rule_a(
                "rate = \"10/s\"\non_limit = \"wait\"\nmax_delay = \"5s\"\n"
            )),
            "test.toml:6:12: rule[0].on_limit: unknown on_limit \"wait\"; allowed: \"reject\" or \
             \"delay\""
        );
        let line = only_error(&rule_a(
            "rate = \"10/s\"\nalgorithm = \"leaky\"\nmax_queue = 10\n",
        ));
        assert!(
            line.starts_with("test.toml:6:13: rule[0].algorithm: unknown algorithm \"leaky\""),
            "{line}"
        );
    }

    #[test]
    fn sliding_window_cannot_delay() {
        assert_eq!(
            only_error(&rule_a(
                "algorithm = \"sliding_window\"\nrate = \"10/s\"\non_limit = \"delay\"\n\
                 max_queue = 10\n"
            )),
            "test.toml:7:12: rule[0].on_limit: delay is not supported with sliding_window; use \
             token_bucket, leaky_bucket, fixed_window or sliding_log"
        );
        let config = valid(&rule_a(
            "algorithm = \"sliding_window\"\nrate = \"10/s\"\non_limit = \"reject\"\n",
        ));
        assert_eq!(config.rules[0].on_limit, OnLimit::Reject);
    }

    #[test]
    fn a_shadow_rule_may_delay() {
        let config = valid(&rule_a(
            "rate = \"10/s\"\non_limit = \"delay\"\nshadow = true\n",
        ));
        assert!(config.rules[0].shadow);
        assert_eq!(config.rules[0].on_limit, delay(30, 1000));
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    }

    #[test]
    fn a_leaky_bucket_always_delays_and_its_burst_is_the_queue() {
        let config = valid(&rule_a("algorithm = \"leaky_bucket\"\nrate = \"10/s\"\n"));
        let rule = &config.rules[0];
        assert_eq!(rule.algorithm, AlgorithmKind::LeakyBucket);
        assert_eq!(rule.limits, vec![limit(10, 1, 10)]);
        assert_eq!(rule.on_limit, delay(30, 10));
        assert_eq!(rule.max_in_flight, None);
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
        // on_limit = "delay" is redundant but allowed; max_delay applies.
        let config = valid(&rule_a(
            "algorithm = \"leaky_bucket\"\nrate = \"10/s\"\nburst = 3\non_limit = \"delay\"\n\
             max_delay = \"2s\"\n",
        ));
        assert_eq!(config.rules[0].limits, vec![limit(10, 1, 3)]);
        assert_eq!(config.rules[0].on_limit, delay(2, 3));
        // A list of one rate is one rate.
        let config = valid(&rule_a(
            "algorithm = \"leaky_bucket\"\nlimits = [\"100/m\"]\n",
        ));
        assert_eq!(config.rules[0].limits, vec![limit(100, 60, 100)]);
        assert_eq!(config.rules[0].on_limit, delay(30, 100));
    }

    #[test]
    fn a_leaky_bucket_cannot_reject_at_once_or_take_max_queue() {
        assert_eq!(
            errors(&rule_a(
                "algorithm = \"leaky_bucket\"\nrate = \"10/s\"\non_limit = \"reject\"\n\
                 max_queue = 50\nmax_delay = \"1s\"\n"
            )),
            vec![
                "test.toml:7:12: rule[0].on_limit: a leaky bucket always holds requests until \
                 they can leave at its rate, so it cannot reject at once; remove on_limit, or use \
                 algorithm = \"token_bucket\" to answer at once",
                "test.toml:8:13: rule[0].max_queue: a leaky bucket's queue is its burst: how many \
                 requests may wait (default the rate's COUNT); remove max_queue and set burst \
                 instead",
            ]
        );
    }

    #[test]
    fn a_closed_leaky_bucket_holds_nobody() {
        let config = valid(&rule_a("algorithm = \"leaky_bucket\"\nrate = \"0/m\"\n"));
        assert_eq!(config.rules[0].limits, vec![limit(0, 60, 0)]);
        assert_eq!(config.rules[0].on_limit, delay(30, 0));
        assert_eq!(
            config.warnings,
            vec![
                "test.toml:6:8: rule[0].rate: \"0/m\" closes the route: every matching request \
                 is limited"
            ]
        );
        let config = valid(&rule_a(
            "algorithm = \"leaky_bucket\"\nrate = \"0/m\"\nburst = 4\n",
        ));
        assert_eq!(config.warnings.len(), 2, "{:?}", config.warnings);
        assert_eq!(
            config.warnings[1],
            "test.toml:7:9: rule[0].burst: with a COUNT of 0 nothing ever leaves a leaky bucket, \
             so no request is admitted whatever the burst"
        );
    }
}
