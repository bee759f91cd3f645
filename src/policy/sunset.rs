//! A rule retiring its API version (`sunset`): its schedule, the headers
//! that announce it, and the falling limit of each step.

use http::HeaderValue;

use super::limit::{compile_limit, limiter, Limit};
use crate::clock::Nanos;
use crate::config::{LimitConfig, RuleConfig};
use crate::limiter::SunsetSchedule;
use crate::store::BucketTable;

/// A rule retiring its API version: the schedule, the headers that announce
/// it, and the limit in force at each step, compiled when the step is first
/// reached (same bucket table, so a caller's spent units carry from step to
/// step).
#[derive(Debug)]
pub struct Sunset {
    pub schedule: SunsetSchedule,
    deprecation: HeaderValue,
    sunset: HeaderValue,
    link: Option<HeaderValue>,
    steps: Box<[std::sync::OnceLock<Vec<Limit>>]>,
    /// What each step's limit is compiled from.
    rule: RuleConfig,
    table: BucketTable,
    status: http::StatusCode,
}

impl Sunset {
    pub(super) fn new(
        rule: &RuleConfig,
        config: &crate::config::SunsetConfig,
        base: &Limit,
        status: http::StatusCode,
    ) -> Sunset {
        let schedule = config.schedule(&rule.limits[0]);
        // Step indexes run from 0 (before start) to n + 1 (from end on).
        let slots = schedule.steps().min(crate::limiter::sunset::MAX_STEPS) as usize + 2;
        let deprecation = format!("@{}", schedule.start() / 1_000_000_000);
        let sunset = httpdate::fmt_http_date(
            std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(schedule.end()),
        );
        Sunset {
            schedule,
            deprecation: HeaderValue::from_str(&deprecation)
                .expect("digits are a valid header value"),
            sunset: HeaderValue::from_str(&sunset).expect("an HTTP-date is a valid header value"),
            // Validation made the link an absolute URI, so a valid header value.
            link: config
                .link
                .as_ref()
                .and_then(|link| HeaderValue::from_str(&format!("<{link}>; rel=\"sunset\"")).ok()),
            steps: (0..slots).map(|_| std::sync::OnceLock::new()).collect(),
            rule: rule.clone(),
            table: base.table.clone(),
            status,
        }
    }

    /// `Deprecation: @<start as Unix seconds>` (RFC 9745).
    pub fn deprecation(&self) -> &HeaderValue {
        &self.deprecation
    }

    /// `Sunset: <end as HTTP-date>` (RFC 8594).
    pub fn sunset(&self) -> &HeaderValue {
        &self.sunset
    }

    /// `Link: <link>; rel="sunset"`, when a link was configured.
    pub fn link(&self) -> Option<&HeaderValue> {
        self.link.as_ref()
    }

    /// The limit in force at `now`.
    #[inline]
    pub fn limits_at(&self, now: Nanos) -> &[Limit] {
        let index = (self.schedule.step_index(now) as usize).min(self.steps.len() - 1);
        self.steps[index].get_or_init(|| {
            let written = self.rule.limits[0];
            let limit = LimitConfig {
                rate: crate::config::Rate {
                    count: self.schedule.count_at(now),
                    period: written.rate.period,
                },
                capacity: self.schedule.capacity_at(now),
                calendar: written.calendar,
            };
            let limiter = limiter(self.rule.algorithm, &limit);
            vec![compile_limit(
                &self.rule,
                &limit,
                1,
                limiter,
                self.table.clone(),
                self.status,
            )]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::compile;

    #[test]
    fn a_sunset_rule_takes_the_limit_of_each_step_and_shares_one_table() {
        // 2026-12-01 to 2026-12-05, daily steps, 100/d → 20/d, burst 50:
        // n = 4, COUNT 100, 80, 60, 40, 20; capacity 50, 40, 30, 20, 10.
        let policy = compile(
            r#"
[[rule]]
name = "v0"
rate = "100/d"
burst = 50
sunset = { start = 2026-12-01T00:00:00Z, end = 2026-12-05T00:00:00Z, to = "20/d" }
"#,
        );
        let rule = &policy.rules[0];
        let sunset = rule.sunset.as_ref().expect("a sunset");
        const DAY: Nanos = 86_400_000_000_000;
        let start = crate::config::parse_timestamp("2026-12-01T00:00:00Z").unwrap();
        let at = |t: Nanos| {
            let limits = sunset.limits_at(t);
            assert_eq!(limits.len(), 1);
            assert!(limits[0].table.same(&rule.limits[0].table));
            (
                limits[0].count,
                limits[0].limiter.capacity(),
                limits[0].policy_item.clone(),
            )
        };
        assert_eq!(at(start - 1), (100, 50, "\"v0\";q=100;w=86400".to_owned()));
        assert_eq!(at(start).0, 80);
        assert_eq!(at(start + DAY - 1).0, 80);
        assert_eq!(at(start + DAY).0, 60);
        assert_eq!(
            at(start + 2 * DAY + DAY / 2),
            (40, 20, "\"v0\";q=40;w=86400".to_owned())
        );
        assert_eq!(
            at(start + 3 * DAY),
            (20, 10, "\"v0\";q=20;w=86400".to_owned())
        );
        assert_eq!(at(start + 4 * DAY).0, 20);
        assert!(!sunset.schedule.is_gone(start + 10 * DAY));
        // The limit of a step is compiled once and reused.
        assert!(std::ptr::eq(
            sunset.limits_at(start),
            sunset.limits_at(start + 1)
        ));
    }
}
