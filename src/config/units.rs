//! The two small value languages of the config file: durations (`"250ms"`,
//! `"2s"`, `"1m"`, `"1h"`, `"1d"`) and rates (`"COUNT/PERIOD"`, e.g. `"100/m"`
//! or `"5/15m"`).
//!
//! Pure string → value functions; they know nothing about TOML or positions.
//! Their `Err` strings are sentences meant to follow `path:` in an error line,
//! so they say what is wrong and what is allowed.

use std::time::Duration;

use super::Rate;

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
     that is a unit s, m, h or d or a duration such as 15m, 2s or 500ms (for example \"100/m\" or \"5/15m\")";

/// Parses a rate `"COUNT/PERIOD"`: COUNT is a whole number (0 means the route
/// is closed); PERIOD is a bare unit (`s`, `m`, `h`, `d`, meaning one of it)
/// or a duration (`15m`, `2s`, `500ms`) and must be longer than zero.
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
        _ => parse_duration(period)
            .map_err(|_| format!("\"{period}\" is not a valid PERIOD; {RATE_HELP}"))?,
    };
    if period.is_zero() {
        return Err(format!(
            "the PERIOD of \"{text}\" must be longer than zero; {RATE_HELP}"
        ));
    }
    Ok(Rate { count, period })
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
}
