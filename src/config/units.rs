//! The small value languages of the config file: durations (`"250ms"`,
//! `"2s"`, `"1m"`, `"1h"`, `"1d"`), rates (`"COUNT/PERIOD"`, e.g. `"100/m"`
//! or `"5/15m"`, and the calendar units `"10000/mo"`, `"w"`, `"y"`) and
//! timestamps (RFC 3339, `"2026-12-01T00:00:00Z"`).
//!
//! Pure string → value functions; they know nothing about positions.
//! Their `Err` strings are sentences meant to follow `path:` in an error line,
//! so they say what is wrong and what is allowed.

use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::Timestamp;
use toml::value::{Datetime, Offset};

use super::Rate;
use crate::limiter::calendar::Unit;

/// The units a duration may end in, with their length in milliseconds.
/// `ms` comes before `m` and `s` so the longest suffix wins.
const UNITS: [(&str, u64); 5] = [
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

const DURATION_HELP: &str =
    "write a whole number followed by a unit: ms, s, m, h or d (for example \"250ms\", \"2s\", \"1m\")";

/// Parses a duration such as `"250ms"`, `"2s"`, `"1m"`, `"1h"` or `"1d"`: a
/// whole, non-negative number immediately followed by one unit. `"0s"` is
/// accepted here; callers that need a positive duration check for zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if text.is_empty() {
        return Err(format!("the duration is empty; {DURATION_HELP}"));
    }
    if text.starts_with('-') {
        return Err(format!("a duration cannot be negative; {DURATION_HELP}"));
    }
    if text.contains(char::is_whitespace) {
        return Err(format!("\"{text}\" contains a space; {DURATION_HELP}"));
    }
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    if number.is_empty() {
        return Err(format!(
            "\"{text}\" does not start with a number; {DURATION_HELP}"
        ));
    }
    if unit.is_empty() {
        return Err(format!("\"{text}\" has no unit; {DURATION_HELP}"));
    }
    let Some(&(_, unit_ms)) = UNITS.iter().find(|(name, _)| *name == unit) else {
        return Err(format!(
            "\"{text}\" has an unknown unit \"{unit}\"; {DURATION_HELP}"
        ));
    };
    let too_long = || format!("\"{text}\" is too long a duration; {DURATION_HELP}");
    let count: u64 = number.parse().map_err(|_| too_long())?;
    let millis = count.checked_mul(unit_ms).ok_or_else(too_long)?;
    Ok(Duration::from_millis(millis))
}

const RATE_HELP: &str = "write COUNT/PERIOD with a whole COUNT (0 closes the route) and a PERIOD \
     that is a unit s, m, h or d or a duration such as 15m, 2s or 500ms (for example \"100/m\" or \"5/15m\"); \
     with calendar, d, w, mo or y";

/// Parses a rate `"COUNT/PERIOD"`: COUNT is a whole number (0 means the route
/// is closed); PERIOD is a bare unit (`s`, `m`, `h`, `d`, meaning one of it)
/// or a duration (`15m`, `2s`, `500ms`) and must be longer than zero. The
/// calendar units `w`, `mo` and `y` (bare or after a number) parse to their
/// nominal lengths ([`Unit::nominal`]); whether the rule may use them, and
/// how, is the rule's check ([`calendar_period`], docs/configuration.md).
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let Some((count, period)) = text.split_once('/') else {
        return Err(format!("\"{text}\" is not a rate; {RATE_HELP}"));
    };
    if count.is_empty() {
        return Err(format!(
            "\"{text}\" has no COUNT before the '/'; {RATE_HELP}"
        ));
    }
    if count.starts_with('-') {
        return Err(format!("a rate's COUNT cannot be negative; {RATE_HELP}"));
    }
    if !count.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("\"{count}\" is not a whole number; {RATE_HELP}"));
    }
    let count: u64 = count
        .parse()
        .map_err(|_| format!("the COUNT {count} is too large; {RATE_HELP}"))?;
    let period = match period {
        "s" | "m" | "h" | "d" => parse_duration(&format!("1{period}"))?,
        "" => {
            return Err(format!(
                "\"{text}\" has no PERIOD after the '/'; {RATE_HELP}"
            ))
        }
        _ => match calendar_period(text) {
            Some((n, unit)) if unit != Unit::Day => unit
                .nominal()
                .checked_mul(u32::try_from(n).unwrap_or(u32::MAX))
                .ok_or_else(|| format!("\"{period}\" is too long a PERIOD; {RATE_HELP}"))?,
            _ => parse_duration(period)
                .map_err(|_| format!("\"{period}\" is not a valid PERIOD; {RATE_HELP}"))?,
        },
    };
    if period.is_zero() {
        return Err(format!(
            "the PERIOD of \"{text}\" must be longer than zero; {RATE_HELP}"
        ));
    }
    Ok(Rate { count, period })
}

/// The PERIOD of the rate `text` when it is written in a calendar unit:
/// how many (`d` and `1d` are one) and which. `"24h"` is not: a calendar
/// rule's period names its unit.
pub fn calendar_period(text: &str) -> Option<(u64, Unit)> {
    let (_, period) = text.split_once('/')?;
    let digits = period
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(period.len());
    let (number, symbol) = period.split_at(digits);
    let unit = Unit::from_symbol(symbol)?;
    let n = if number.is_empty() {
        1
    } else {
        number.parse().ok()?
    };
    Some((n, unit))
}

const TIMESTAMP_HELP: &str = "write an RFC 3339 timestamp with a date, a time and an offset, \
     such as \"2026-12-01T00:00:00Z\" or \"2026-12-01T09:00:00+09:00\" (a TOML datetime \
     2026-12-01T00:00:00Z works too)";

/// Nanoseconds per second.
const NANOS: u64 = 1_000_000_000;

/// Parses an RFC 3339 timestamp (`"2026-12-01T00:00:00Z"`,
/// `"2026-12-01T09:00:00.5+09:00"`) into Unix time in nanoseconds.
pub fn parse_timestamp(text: &str) -> Result<u64, String> {
    let datetime: Datetime = text
        .parse()
        .map_err(|_| format!("\"{text}\" is not a timestamp; {TIMESTAMP_HELP}"))?;
    datetime_to_unix_nanos(&datetime)
}

/// A TOML datetime (or a parsed RFC 3339 string) → Unix time in nanoseconds.
/// It must have a date, a time and an offset: a local date or time names a
/// different instant on every server, so it is refused rather than guessed
/// as UTC. Instants before 1970 or after 2554 (the `u64` nanosecond range)
/// are refused too. A leap second (`:60`) reads as the next second, as Unix
/// time does.
pub fn datetime_to_unix_nanos(datetime: &Datetime) -> Result<u64, String> {
    let (Some(date), Some(time)) = (datetime.date, datetime.time) else {
        return Err(format!(
            "{datetime} has no {}; {TIMESTAMP_HELP}",
            if datetime.date.is_none() {
                "date"
            } else {
                "time of day"
            }
        ));
    };
    let Some(offset) = datetime.offset else {
        return Err(format!(
            "{datetime} has no offset, so it would mean a different instant on each server; \
             add Z for UTC or an offset such as +01:00 (\"{datetime}Z\")"
        ));
    };
    let offset_minutes = match offset {
        Offset::Z => 0,
        Offset::Custom { minutes } => i64::from(minutes),
    };
    // The Unix time of the date's midnight, a date the (proleptic Gregorian)
    // calendar has; TOML's years, months and days have four and two digits.
    let midnight = jiff::civil::Date::new(date.year as i16, date.month as i8, date.day as i8)
        .and_then(|date| date.to_zoned_datetime(TimeZone::UTC))
        .map(|midnight| midnight.timestamp().as_second())
        .map_err(|_| format!("{datetime} is not a calendar date; {TIMESTAMP_HELP}"))?;
    let seconds = midnight
        + i64::from(time.hour) * 3_600
        + i64::from(time.minute) * 60
        + i64::from(time.second)
        - offset_minutes * 60;
    let out_of_range = || {
        format!(
            "{datetime} is outside the range sluice can count (1970-01-01T00:00:00Z to \
             2554-07-21T23:34:33Z)"
        )
    };
    let seconds = u64::try_from(seconds).map_err(|_| out_of_range())?;
    seconds
        .checked_mul(NANOS)
        .and_then(|nanos| nanos.checked_add(u64::from(time.nanosecond)))
        .ok_or_else(out_of_range)
}

/// Unix nanoseconds as the config would write them: a bare date
/// (`2026-12-01`) at midnight UTC, else RFC 3339 in UTC
/// (`2026-12-01T12:30:00Z`, with a fraction only when there is one).
pub fn format_timestamp(nanos: u64) -> String {
    // Within jiff's range: u64 nanoseconds end in 2554.
    let at = Timestamp::from_nanosecond(i128::from(nanos)).unwrap_or_default();
    if nanos.is_multiple_of(86_400 * NANOS) {
        at.to_zoned_datetime(TimeZone::UTC).date().to_string()
    } else {
        at.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_duration_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
    }

    #[test]
    fn rejects_malformed_durations_saying_what_is_allowed() {
        for bad in [
            "", "-1s", "s", "10", "1.5s", "1 s", " 1s", "1S", "1w", "1sec", "ms",
        ] {
            let err = parse_duration(bad).expect_err(bad);
            assert!(err.contains("ms, s, m, h or d"), "{bad}: {err}");
        }
        assert!(parse_duration("").unwrap_err().contains("empty"));
        assert!(parse_duration("-5m").unwrap_err().contains("negative"));
    }

    #[test]
    fn rejects_durations_that_overflow() {
        let err = parse_duration("99999999999999999999s").unwrap_err();
        assert!(err.contains("too long"), "{err}");
        let err = parse_duration("18446744073709551615d").unwrap_err();
        assert!(err.contains("too long"), "{err}");
    }

    #[test]
    fn reads_rates_with_a_unit_or_a_duration_as_period() {
        let rate = |count, secs| Rate {
            count,
            period: Duration::from_secs(secs),
        };
        assert_eq!(parse_rate("100/m"), Ok(rate(100, 60)));
        assert_eq!(parse_rate("10/s"), Ok(rate(10, 1)));
        assert_eq!(parse_rate("1000/h"), Ok(rate(1000, 3600)));
        assert_eq!(parse_rate("5/d"), Ok(rate(5, 86_400)));
        assert_eq!(parse_rate("5/15m"), Ok(rate(5, 900)));
        assert_eq!(parse_rate("3/2s"), Ok(rate(3, 2)));
        assert_eq!(
            parse_rate("1/500ms"),
            Ok(Rate {
                count: 1,
                period: Duration::from_millis(500)
            })
        );
    }

    #[test]
    fn a_count_of_zero_closes_the_route() {
        assert_eq!(parse_rate("0/m").map(|r| r.count), Ok(0));
    }

    #[test]
    fn rejects_malformed_rates_saying_what_is_allowed() {
        for bad in [
            "",
            "100",
            "/m",
            "100/",
            "-1/m",
            "1.5/m",
            "ten/m",
            "10/x",
            "10/ms",
            "10/1.5s",
            "10 / m",
            "10/m/s",
            "18446744073709551616/m",
        ] {
            let err = parse_rate(bad).expect_err(bad);
            assert!(err.contains("COUNT/PERIOD"), "{bad}: {err}");
        }
    }

    #[test]
    fn rejects_a_zero_period() {
        let err = parse_rate("5/0s").unwrap_err();
        assert!(err.contains("longer than zero"), "{err}");
    }

    #[test]
    fn reads_rfc_3339_timestamps_with_an_offset() {
        assert_eq!(parse_timestamp("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(
            parse_timestamp("2026-12-01T00:00:00Z"),
            Ok(1_796_083_200 * NANOS)
        );
        // The same instant written in Tokyo time, and with a space.
        assert_eq!(
            parse_timestamp("2026-12-01T09:00:00+09:00"),
            Ok(1_796_083_200 * NANOS)
        );
        assert_eq!(
            parse_timestamp("2026-12-01 00:00:00z"),
            Ok(1_796_083_200 * NANOS)
        );
        assert_eq!(
            parse_timestamp("2024-02-29T23:59:59.25Z"),
            Ok(1_709_251_199 * NANOS + 250_000_000)
        );
        // A leap second reads as the next second, like Unix time.
        assert_eq!(
            parse_timestamp("2016-12-31T23:59:60Z"),
            parse_timestamp("2017-01-01T00:00:00Z")
        );
    }

    #[test]
    fn refuses_local_dates_and_times_and_out_of_range_instants() {
        let err = parse_timestamp("2026-12-01T00:00:00").unwrap_err();
        assert!(
            err.contains("no offset") && err.contains("\"2026-12-01T00:00:00Z\""),
            "{err}"
        );
        let err = parse_timestamp("2026-12-01").unwrap_err();
        assert!(err.contains("no time of day"), "{err}");
        let err = parse_timestamp("12:00:00").unwrap_err();
        assert!(err.contains("no date"), "{err}");
        for bad in [
            "",
            "tomorrow",
            "2026-13-01T00:00:00Z",
            "2026-12-01T25:00:00Z",
            "2025-02-29T00:00:00Z",
        ] {
            let err = parse_timestamp(bad).expect_err(bad);
            assert!(err.contains("RFC 3339"), "{bad}: {err}");
        }
        let err = parse_timestamp("1969-12-31T23:59:59Z").unwrap_err();
        assert!(err.contains("outside the range"), "{err}");
        let err = parse_timestamp("2600-01-01T00:00:00Z").unwrap_err();
        assert!(err.contains("outside the range"), "{err}");
        assert!(parse_timestamp("2554-07-21T23:34:33Z").is_ok());
    }

    #[test]
    fn formats_timestamps_as_dates_when_they_are_midnight_utc() {
        assert_eq!(format_timestamp(0), "1970-01-01");
        assert_eq!(format_timestamp(1_796_083_200 * NANOS), "2026-12-01");
        assert_eq!(
            format_timestamp(1_709_251_199 * NANOS + 250_000_000),
            "2024-02-29T23:59:59.25Z"
        );
        assert_eq!(
            format_timestamp(1_796_083_200 * NANOS + 45_296 * NANOS),
            "2026-12-01T12:34:56Z"
        );
        // Round trip over several eras of the calendar.
        for days in [0_i64, 59, 60, 365, 10_957, 11_016, 20_000, 212_000] {
            let nanos = days as u64 * 86_400 * NANOS;
            let text = format!("{}T00:00:00Z", format_timestamp(nanos));
            assert_eq!(parse_timestamp(&text), Ok(nanos), "{text}");
        }
    }
}
