//! `sunset`: a rule's limit falling step by step to retire an API version.
//! The schedule itself is the limiter's ([`SunsetSchedule`]); this checks
//! what it is built from.

use std::time::Duration;

use http::Uri;
use toml::Spanned;

use super::raw::{Located, RawRule, RawSunset, Start};
use super::rules::RuleContext;
use super::units::{datetime_to_unix_nanos, parse_rate, parse_timestamp};
use super::validate::Validator;
use super::{AlgorithmKind, LimitConfig, SunsetConfig};
use crate::limiter::SunsetSchedule;

impl SunsetConfig {
    /// The schedule of this sunset on the rule's single limit.
    pub fn schedule(&self, limit: &LimitConfig) -> SunsetSchedule {
        SunsetSchedule::new(
            limit.rate.count,
            limit.capacity,
            self.to,
            self.start,
            self.end,
            self.step,
        )
    }
}

impl Validator<'_> {
    /// `sunset = { start, end, to, step, link }`.
    pub(super) fn sunset(
        &mut self,
        rule: &RuleContext,
        raw: &Located<RawSunset>,
        raw_rule: &RawRule,
    ) -> Option<SunsetConfig> {
        let index = rule.index;
        let path = |key: &str| format!("rule[{index}].sunset.{key}");
        let at = raw.start_or(rule.at);
        if rule.algorithm.is_some_and(AlgorithmKind::counts_in_flight) {
            self.not_for_concurrency(index, at, "sunset");
            return None;
        }
        let mut valid = self.sunset_alone(rule, raw_rule, at);
        let sunset = &raw.value;
        let present = [
            ("start", sunset.start.is_some()),
            ("end", sunset.end.is_some()),
            ("to", sunset.to.is_some()),
        ];
        let example = "sunset = { start = 2026-12-01T00:00:00Z, end = 2027-01-01T00:00:00Z, \
                       to = \"0/d\" } (step defaults to \"1d\"; link is optional)";
        valid &= self.require(at, &format!("rule[{index}].sunset"), &present, example);
        let start = (sunset.start.as_ref()).and_then(|field| self.timestamp(field, &path("start")));
        let end = (sunset.end.as_ref()).and_then(|field| self.timestamp(field, &path("end")));
        if let (Some(start), Some(end), Some(field)) = (start, end, &sunset.end) {
            if end <= start {
                let line = sunset
                    .start
                    .as_ref()
                    .map_or(0, |s| self.source.position(s.span().start).0);
                self.error(
                    field.span().start,
                    &path("end"),
                    format!("must be after start (line {line}): the limit falls from start to end"),
                );
                valid = false;
            }
        }
        let to = sunset
            .to
            .as_ref()
            .and_then(|field| self.sunset_to(rule, field));
        let step = match &sunset.step {
            None => Some(Duration::from_secs(86_400)),
            Some(field) => self.positive_duration(field, &path("step"), " (default \"1d\")"),
        };
        let link = match &sunset.link {
            None => Some(None),
            Some(field) => {
                let checked = check_link(field.get_ref()).map(|()| Some(field.get_ref().clone()));
                self.ok(field.span().start, &path("link"), checked)
            }
        };
        valid &= self.sunset_steps(index, sunset, start.zip(end), step);
        if !valid {
            return None;
        }
        Some(SunsetConfig {
            start: start?,
            end: end?,
            to: to?,
            step: step?,
            link: link?,
        })
    }

    /// A sunset lowers the rule's one rate for every caller: no more rates,
    /// no tiers, no overrides.
    fn sunset_alone(&mut self, rule: &RuleContext, raw_rule: &RawRule, at: usize) -> bool {
        let index = rule.index;
        let mut valid = true;
        if let (Some(written), Some(limits)) = (rule.written, &raw_rule.limits) {
            if written.len() > 1 {
                let (line, _) = self.source.position(limits.span().start);
                self.error(
                    at,
                    &format!("rule[{index}].sunset"),
                    format!(
                        "lowers one rate step by step, so the rule needs exactly one, but limits \
                         (line {line}) lists {}; keep one limit, or put the others in a rule of \
                         their own",
                        written.len()
                    ),
                );
                valid = false;
            }
        }
        for (key, written) in [
            ("tiers", raw_rule.tiers.as_ref().map(Start::start)),
            ("overrides", raw_rule.overrides.as_ref().map(Start::start)),
        ] {
            if let Some(start) = written {
                let line = start.map_or(String::new(), |start| {
                    format!(" (line {})", self.source.position(start).0)
                });
                self.error(
                    at,
                    &format!("rule[{index}].sunset"),
                    format!(
                        "cannot be combined with {key}{line}: a sunset lowers the rule's one rate \
                         for every caller; retire the old API version in a rule without {key}"
                    ),
                );
                valid = false;
            }
        }
        valid
    }

    /// `to`: a rate no higher than the rule's, as a count per its period.
    fn sunset_to(&mut self, rule: &RuleContext, field: &Spanned<String>) -> Option<u64> {
        let path = format!("rule[{}].sunset.to", rule.index);
        let rate = rule
            .written
            .filter(|written| written.len() == 1)
            .map(|written| &written[0]);
        let to = self.ok(field.span().start, &path, parse_rate(field.get_ref()))?;
        // `None`: the rule's own rate is invalid (already reported).
        let from = rate?;
        let converted = u128::from(to.count) * from.rate.period.as_nanos() / to.period.as_nanos();
        match u64::try_from(converted) {
            Ok(converted) if converted <= from.rate.count => Some(converted),
            _ => self.invalid(
                field.span().start,
                &path,
                format!(
                    "\"{}\" is {converted} per period of the rule's {} \"{}\", more than its \
                     COUNT {}: a sunset only lowers a limit",
                    field.get_ref(),
                    from.key,
                    from.text,
                    from.rate.count
                ),
            ),
        }
    }

    /// At most [`MAX_STEPS`](crate::limiter::sunset::MAX_STEPS) steps from
    /// start to end.
    fn sunset_steps(
        &mut self,
        index: usize,
        sunset: &RawSunset,
        span: Option<(u64, u64)>,
        step: Option<Duration>,
    ) -> bool {
        let step_at = sunset
            .step
            .as_ref()
            .map(Spanned::span)
            .or_else(|| sunset.end.as_ref().map(Spanned::span));
        if let (Some((start, end)), Some(step_len), Some(at)) = (span, step, step_at) {
            let steps = u128::from(end.saturating_sub(start)).div_ceil(step_len.as_nanos().max(1));
            if steps > u128::from(crate::limiter::sunset::MAX_STEPS) {
                self.error(
                    at.start,
                    &format!("rule[{index}].sunset.step"),
                    format!(
                        "makes {steps} steps from start to end; at most {} are allowed, so use a \
                         longer step",
                        crate::limiter::sunset::MAX_STEPS
                    ),
                );
                return false;
            }
        }
        true
    }

    /// A timestamp: an RFC 3339 string or a TOML offset datetime.
    fn timestamp(&mut self, field: &Spanned<toml::Value>, path: &str) -> Option<u64> {
        let parsed = match field.get_ref() {
            toml::Value::String(text) => parse_timestamp(text),
            toml::Value::Datetime(datetime) => datetime_to_unix_nanos(datetime),
            other => Err(format!(
                "must be a timestamp, not {} {other}; write an RFC 3339 timestamp such as \
                 2026-12-01T00:00:00Z (bare or quoted)",
                match other {
                    toml::Value::Integer(_) | toml::Value::Float(_) => "the number",
                    toml::Value::Boolean(_) => "the boolean",
                    _ => "the value",
                }
            )),
        };
        self.ok(field.span().start, path, parsed)
    }
}

/// `sunset.link`: an absolute URI, sent in `Link: <...>; rel="sunset"`.
fn check_link(text: &str) -> Result<(), String> {
    let help = "write an absolute URI such as \"https://api.example.com/docs/migrate-to-v2\"";
    let uri: Uri = text
        .parse()
        .map_err(|_| format!("\"{text}\" is not a URI; {help}"))?;
    if uri.scheme().is_none() || uri.authority().is_none_or(|a| a.host().is_empty()) {
        return Err(format!("\"{text}\" is not an absolute URI; {help}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::*;

    const SUNSET_START: u64 = 1_796_083_200_000_000_000;
    const DAY_NANOS: u64 = 86_400_000_000_000;

    #[test]
    fn sunset_reads_timestamps_and_converts_to_to_the_rule_period() {
        let config = valid(&rule_a(
            "rate = \"100/d\"\nsunset = { start = 2026-12-01T00:00:00Z, end = \"2027-01-01T01:00:00+01:00\", to = \"1/h\", link = \"https://api.example.com/v2\" }\n",
        ));
        assert_eq!(
            config.rules[0].sunset,
            Some(SunsetConfig {
                start: SUNSET_START,
                end: SUNSET_START + 31 * DAY_NANOS,
                to: 24,
                step: Duration::from_secs(86_400),
                link: Some("https://api.example.com/v2".into()),
            })
        );
        let config = valid(&rule_a(
            "rate = \"100/d\"\n[rule.sunset]\nstart = \"2026-12-01T00:00:00Z\"\nend = 2026-12-02T00:00:00Z\nto = \"0/d\"\nstep = \"1h\"\n",
        ));
        let sunset = config.rules[0].sunset.clone().unwrap();
        assert_eq!(
            (sunset.to, sunset.step, sunset.link),
            (0, Duration::from_secs(3600), None)
        );
    }

    #[test]
    fn sunset_errors_point_at_the_value() {
        let lines = errors(&rule_a(
            "rate = \"100/d\"\nsunset = { start = 2026-12-01T00:00:00, end = \"2026-11-01\", to = \"5/h\", step = \"0s\", link = \"/v2\" }\n",
        ));
        assert_eq!(
            lines,
            vec![
                "test.toml:6:20: rule[0].sunset.start: 2026-12-01T00:00:00 has no offset, so it would mean a different instant on each server; add Z for UTC or an offset such as +01:00 (\"2026-12-01T00:00:00Z\")",
                "test.toml:6:47: rule[0].sunset.end: 2026-11-01 has no time of day; write an RFC 3339 timestamp with a date, a time and an offset, such as \"2026-12-01T00:00:00Z\" or \"2026-12-01T09:00:00+09:00\" (a TOML datetime 2026-12-01T00:00:00Z works too)",
                "test.toml:6:66: rule[0].sunset.to: \"5/h\" is 120 per period of the rule's rate \"100/d\", more than its COUNT 100: a sunset only lowers a limit",
                "test.toml:6:80: rule[0].sunset.step: must be longer than zero (default \"1d\")",
                "test.toml:6:93: rule[0].sunset.link: \"/v2\" is not an absolute URI; write an absolute URI such as \"https://api.example.com/docs/migrate-to-v2\"",
            ]
        );
        let lines = errors(&rule_a(
            "limits = [\"100/d\", \"10/m\"]\nsunset = { start = 2026-12-01T00:00:00Z, end = 2026-11-01T00:00:00Z }\n",
        ));
        assert_eq!(
            lines,
            vec![
                "test.toml:6:10: rule[0].sunset: lowers one rate step by step, so the rule needs exactly one, but limits (line 5) lists 2; keep one limit, or put the others in a rule of their own",
                "test.toml:6:10: rule[0].sunset: needs to: sunset = { start = 2026-12-01T00:00:00Z, end = 2027-01-01T00:00:00Z, to = \"0/d\" } (step defaults to \"1d\"; link is optional)",
                "test.toml:6:48: rule[0].sunset.end: must be after start (line 6): the limit falls from start to end",
            ]
        );
        let line = only_error(&rule_a(
            "rate = \"1/s\"\nsunset = { start = 1, end = 2026-11-01T00:00:00Z, to = \"0/s\" }\n",
        ));
        assert!(
            line.starts_with(
                "test.toml:6:20: rule[0].sunset.start: must be a timestamp, not the number 1"
            ),
            "{line}"
        );
    }
}
