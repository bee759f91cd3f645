//! `calendar`: a `fixed_window` rule whose windows are a time zone's days,
//! weeks, months or years (docs/configuration.md, docs/charging.md
//! "Calendar quotas"). The zone must be in the IANA database sluice
//! carries; with it, each of the rule's periods (its tiers' and overrides'
//! too) is exactly one calendar unit, and without it the units `w`, `mo`
//! and `y` mean nothing.

use super::limits::WrittenLimit;
use super::raw::RawRule;
use super::units::calendar_period;
use super::validate::Validator;
use super::{joined, AlgorithmKind, LimitConfig};
use crate::limiter::calendar::{zone_named, zones_like, Calendar, Unit};

/// A rule's `calendar`, as far as its limits are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RuleCalendar {
    /// Not written: the windows are Unix-aligned.
    Absent,
    /// Written on another algorithm (already reported): the limits'
    /// periods are not judged against it.
    Refused,
    /// An unknown zone on a fixed window (already reported): the periods
    /// are still judged, as a calendar's.
    Unknown,
    /// The zone, as the database spells it.
    Zone(String),
}

impl Validator<'_> {
    /// The rule's `calendar`: an IANA zone, on a `fixed_window` rule.
    pub(super) fn calendar(
        &mut self,
        index: usize,
        raw: &RawRule,
        algorithm: Option<AlgorithmKind>,
    ) -> RuleCalendar {
        let Some(field) = &raw.calendar else {
            return RuleCalendar::Absent;
        };
        let (at, path) = (field.span().start, format!("rule[{index}].calendar"));
        let name = field.get_ref();
        let zone = zone_named(name);
        if zone.is_none() {
            let like = zones_like(name, 3);
            let hint = if like.is_empty() {
                String::new()
            } else {
                let quoted = like.iter().map(|zone| format!("\"{zone}\""));
                format!("did you mean {}? ", joined(quoted, " or "))
            };
            self.error(
                at,
                &path,
                format!(
                    "unknown time zone \"{name}\"; {hint}write an IANA time zone name such as \
                     \"Europe/Berlin\", \"America/New_York\" or \"UTC\" (the TZ identifiers \
                     listed at https://en.wikipedia.org/wiki/List_of_tz_database_time_zones, or \
                     by `timedatectl list-timezones`)"
                ),
            );
        }
        match algorithm {
            Some(AlgorithmKind::FixedWindow) => {}
            Some(kind) => {
                self.error(
                    at,
                    &path,
                    format!(
                        "only algorithm = \"fixed_window\" follows a calendar (its windows start \
                         at local midnight, on Monday, on the 1st or on 1 January); a {} limit \
                         has no windows to align, so set algorithm = \"fixed_window\" or remove \
                         calendar",
                        kind.name()
                    ),
                );
                return RuleCalendar::Refused;
            }
            // The algorithm is invalid (already reported).
            None => return RuleCalendar::Refused,
        }
        zone.map_or(RuleCalendar::Unknown, RuleCalendar::Zone)
    }

    /// One limit's period against the rule's calendar: with one, exactly
    /// one calendar unit; without one, no unit that only a calendar has.
    pub(super) fn calendar_period(&mut self, calendar: &RuleCalendar, limit: &WrittenLimit) {
        let period = calendar_period(&limit.text);
        match (calendar, period) {
            (RuleCalendar::Refused, _) => {}
            (RuleCalendar::Absent, Some((_, unit))) if unit != Unit::Day => {
                let name = match unit {
                    Unit::Week => "week (from Monday)",
                    Unit::Month => "month",
                    _ => "year",
                };
                self.error(
                    limit.at,
                    &limit.path,
                    format!(
                        "\"{}\" counts per calendar {name}, whose start and length depend on a \
                         time zone; add calendar = \"UTC\" (or your zone, such as \
                         \"Europe/Berlin\") with algorithm = \"fixed_window\", or write a fixed \
                         period such as \"{}/{}d\"",
                        limit.text,
                        limit.rate.count,
                        match unit {
                            Unit::Week => 7,
                            Unit::Month => 30,
                            _ => 365,
                        }
                    ),
                );
            }
            (RuleCalendar::Absent, _)
            | (RuleCalendar::Zone(_) | RuleCalendar::Unknown, Some((1, _))) => {}
            (RuleCalendar::Zone(_) | RuleCalendar::Unknown, _) => {
                let (_, period) = limit.text.split_once('/').unwrap_or(("", &limit.text));
                self.error(
                    limit.at,
                    &limit.path,
                    format!(
                        "with calendar, a period is one calendar unit: d (a local day), w (a \
                         week from Monday), mo (a month from the 1st) or y (a year from 1 \
                         January), such as \"{}/d\"; \"{period}\" is not one",
                        limit.rate.count
                    ),
                );
            }
        }
    }
}

impl RuleCalendar {
    /// Gives each limit built from `written` (in the same order) its
    /// calendar: the zone's, of the unit its period names.
    pub(super) fn attach(&self, limits: &mut [LimitConfig], written: Option<&[WrittenLimit]>) {
        let (RuleCalendar::Zone(zone), Some(written)) = (self, written) else {
            return;
        };
        for (limit, written) in limits.iter_mut().zip(written) {
            if let Some((1, unit)) = calendar_period(&written.text) {
                limit.calendar = Calendar::new(zone, unit);
                limit.rate.period = unit.nominal();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::*;
    use crate::config::{describe_limits, format_limit_period};

    fn fixed(fields: &str) -> String {
        rule_a(&format!("algorithm = \"fixed_window\"\n{fields}"))
    }

    #[test]
    fn a_calendar_rule_takes_d_w_mo_and_y() {
        let config = valid(&fixed(
            "calendar = \"europe/berlin\"\nlimits = [\"100/d\", \"500/1w\", \"1000/mo\", \"5000/y\"]\n",
        ));
        let rule = &config.rules[0];
        let units: Vec<_> = rule
            .limits
            .iter()
            .map(|limit| {
                let calendar = limit.calendar.unwrap();
                assert_eq!(calendar.zone(), "Europe/Berlin");
                assert_eq!(limit.rate.period, calendar.unit().nominal());
                format_limit_period(limit)
            })
            .collect();
        assert_eq!(units, ["1d", "1w", "1mo", "1y"]);
        assert_eq!(
            describe_limits(rule),
            "100/d, 500/w, 1000/mo, 5000/y (Europe/Berlin calendar)"
        );
        // "1d" is d; a tier's rates follow the rule's calendar.
        let config = valid(&fixed(
            "calendar = \"UTC\"\nrate = \"10/1d\"\ntiers = { by = \"header:x-plan\", pro = { rate = \"100/mo\" } }\n",
        ));
        let rule = &config.rules[0];
        assert_eq!(rule.limits[0].calendar.unwrap().unit(), Unit::Day);
        let tier = &rule.tiers.as_ref().unwrap().tiers[0];
        assert_eq!(tier.limits[0].calendar.unwrap().unit(), Unit::Month);
    }

    #[test]
    fn calendar_units_need_a_calendar() {
        assert_eq!(
            only_error(&fixed("rate = \"10000/mo\"\n")),
            "test.toml:6:8: rule[0].rate: \"10000/mo\" counts per calendar month, whose start \
             and length depend on a time zone; add calendar = \"UTC\" (or your zone, such as \
             \"Europe/Berlin\") with algorithm = \"fixed_window\", or write a fixed period such \
             as \"10000/30d\""
        );
        let errors = errors(&rule_a("limits = [\"1/s\", \"5/w\", \"9/2y\"]\n"));
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert!(
            errors[0]
                .starts_with("test.toml:5:18: rule[0].limits[1]: \"5/w\" counts per calendar week"),
            "{errors:#?}"
        );
        assert!(
            errors[1].starts_with(
                "test.toml:5:25: rule[0].limits[2]: \"9/2y\" counts per calendar year"
            ),
            "{errors:#?}"
        );
        // A day is a day without a calendar: Unix-aligned, as before.
        valid(&fixed("rate = \"10/d\"\n"));
    }

    #[test]
    fn a_calendar_is_for_the_fixed_window_only() {
        assert_eq!(
            only_error(&rule_a("calendar = \"UTC\"\nrate = \"10/d\"\n")),
            "test.toml:5:12: rule[0].calendar: only algorithm = \"fixed_window\" follows a \
             calendar (its windows start at local midnight, on Monday, on the 1st or on 1 \
             January); a token_bucket limit has no windows to align, so set algorithm = \
             \"fixed_window\" or remove calendar"
        );
    }

    #[test]
    fn an_unknown_zone_says_how_to_find_one() {
        assert_eq!(
            only_error(&fixed("calendar = \"Europe/Berln\"\nrate = \"10/mo\"\n")),
            "test.toml:6:12: rule[0].calendar: unknown time zone \"Europe/Berln\"; did you mean \
             \"Europe/Berlin\"? write an IANA time zone name such as \"Europe/Berlin\", \
             \"America/New_York\" or \"UTC\" (the TZ identifiers listed at \
             https://en.wikipedia.org/wiki/List_of_tz_database_time_zones, or by `timedatectl \
             list-timezones`)"
        );
    }

    #[test]
    fn an_unknown_zone_still_has_its_periods_checked() {
        let errors = errors(&fixed("calendar = \"Mars/Olympus\"\nrate = \"5/2d\"\n"));
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert!(
            errors[0].contains("unknown time zone \"Mars/Olympus\""),
            "{errors:#?}"
        );
        assert!(errors[1].ends_with("\"2d\" is not one"), "{errors:#?}");
    }

    #[test]
    fn with_a_calendar_a_period_is_exactly_one_unit() {
        let errors = errors(&fixed(
            "calendar = \"UTC\"\nlimits = [\"1/2d\", \"5/1h\", \"7/24h\", \"9/mo\"]\n",
        ));
        assert_eq!(errors.len(), 3, "{errors:#?}");
        assert_eq!(
            errors[0],
            "test.toml:7:11: rule[0].limits[0]: with calendar, a period is one calendar unit: d \
             (a local day), w (a week from Monday), mo (a month from the 1st) or y (a year from \
             1 January), such as \"1/d\"; \"2d\" is not one"
        );
        assert!(errors[1].starts_with("test.toml:7:19: rule[0].limits[1]: with calendar"));
        assert!(errors[2].ends_with("\"24h\" is not one"));
    }
}
