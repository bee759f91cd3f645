//! A replay's times: a line's `time` read from RFC 3339, the years a
//! replay takes (1970 to 9999), and the simulated clock's reach.
//!
//! sluice's clock counts nanoseconds since 1970 in 64 bits ([`Nanos`]), as
//! far as 2554. A log of later years is replayed on a clock shifted back by
//! whole 400-year cycles of the Gregorian calendar, which repeat exactly
//! (146,097 days, a whole number of weeks): window boundaries, months and a
//! time zone's days fall as they did. The shift is chosen once, by the
//! log's first time; a line more than a clock's reach (about 290 years)
//! from it is skipped (docs/replay.md, "Time").

use std::cell::Cell;

use crate::access_log::rfc3339;
use crate::clock::Nanos;

const DAY: i64 = 86_400;

/// Seconds in 400 years of the Gregorian calendar.
const CYCLE: i64 = 146_097 * DAY;

/// The earliest second a replay takes: 1970-01-01T00:00:00Z.
const FIRST: i64 = 0;

/// The first second it does not: 10000-01-01T00:00:00Z.
const PAST_LAST: i64 = 2_932_897 * DAY;

/// The middle of the clock's reach (2262-04-11), where a shifted log's
/// first time lands within 200 years.
const MIDDLE: i64 = (Nanos::MAX / 2 / 1_000_000_000) as i64;

/// A UTC time to the nanosecond, as read from a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Time {
    pub seconds: i64,
    pub nanos: u32,
}

/// Why a line's `time` is not replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadTime {
    /// Not an RFC 3339 time.
    Unreadable,
    /// Before 1970 or after 9999 (UTC).
    OutOfRange,
    /// More than the clock's reach from the log's first time.
    OutOfReach,
}

impl BadTime {
    /// The `--strict` sentence for the line's time `text`.
    pub fn sentence(self, text: &str) -> String {
        match self {
            BadTime::Unreadable => format!(
                "its time {text:?} is not an RFC 3339 time in UTC (2026-11-28T11:31:05.123456Z)"
            ),
            BadTime::OutOfRange => {
                format!("its time {text:?} is outside 1970–9999, the years a replay takes")
            }
            BadTime::OutOfReach => format!(
                "its time {text:?} is too far from the log's first time: a replay's clock \
                 spans 584 years"
            ),
        }
    }
}

/// How a replay's clock holds times: shifted back by `cycles` 400-year
/// cycles (0 for any log of years before 2462).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Epoch {
    cycles: i64,
}

impl Epoch {
    /// The epoch of a log whose first time is `first`.
    pub fn around(first: Time) -> Epoch {
        let cycles = (first.seconds - MIDDLE + CYCLE / 2).div_euclid(CYCLE);
        Epoch {
            cycles: cycles.max(0),
        }
    }

    /// `time` on the replay's clock.
    pub fn nanos(self, time: Time) -> Result<Nanos, BadTime> {
        let seconds = time.seconds - self.cycles * CYCLE;
        let nanos = u64::try_from(seconds)
            .ok()
            .and_then(|seconds| seconds.checked_mul(1_000_000_000))
            .and_then(|nanos| nanos.checked_add(u64::from(time.nanos)));
        nanos.ok_or(BadTime::OutOfReach)
    }

    /// A Unix time (a config's, such as a sunset's) on the replay's clock;
    /// 0 when before its start.
    pub fn shift(self, unix: Nanos) -> Nanos {
        let shift = (self.cycles * CYCLE) as u64;
        unix.saturating_sub(shift.saturating_mul(1_000_000_000))
    }

    /// A time of the replay's clock as the access log writes times.
    pub fn show(self, at: Nanos) -> String {
        let shown = rfc3339(at);
        if self.cycles == 0 {
            return shown;
        }
        let year: i64 = shown[..4].parse().unwrap_or(0);
        format!("{:04}{}", year + 400 * self.cycles, &shown[4..])
    }
}

/// `2026-11-28T11:31:05.123456Z` (any number of decimals, or none; `Z` or
/// an offset such as `+01:00`), between 1970 and 9999 in UTC.
pub fn parse_time(text: &str) -> Result<Time, BadTime> {
    let bytes = text.as_bytes();
    // A year of more than four digits is read too, to say it is too late.
    let year_digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    if !(4..=6).contains(&year_digits) {
        return Err(BadTime::Unreadable);
    }
    let (year, rest) = bytes.split_at(year_digits);
    let year = digits(year).ok_or(BadTime::Unreadable)?;
    in_range(after_year(year, rest).ok_or(BadTime::Unreadable)?)
}

/// `-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` of `year`.
fn after_year(year: i64, bytes: &[u8]) -> Option<Time> {
    let local = local_seconds(year, bytes)?;
    after_second(local, bytes.get(15..)?)
}

/// `[.fraction](Z|±HH:MM)` after the second `local` (seconds since 1970
/// as if in UTC).
fn after_second(local: i64, bytes: &[u8]) -> Option<Time> {
    let (nanos, at) = fraction(bytes, 0)?;
    let seconds = local - offset(&bytes[at..])?;
    Some(Time { seconds, nanos })
}

/// The seconds since 1970 of `-MM-DDTHH:MM:SS` of `year`, as if in UTC.
fn local_seconds(year: i64, bytes: &[u8]) -> Option<i64> {
    if bytes.len() < 16 || bytes[0] != b'-' || bytes[3] != b'-' || bytes[9] != b':' {
        return None;
    }
    if !matches!(bytes[6], b'T' | b't' | b' ') || bytes[12] != b':' {
        return None;
    }
    let number = |at: usize| digits(bytes.get(at..at + 2)?);
    let (month, day) = (number(1)?, number(4)?);
    let (hour, minute, second) = (number(7)?, number(10)?, number(13)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(days * DAY + hour * 3_600 + minute * 60 + second)
}

/// The last time read to the minute (`YYYY-MM-DDTHH:MM`, a four-digit
/// year) and its seconds as if in UTC: the lines of a log mostly share it
/// with the line before, which then reads only its second and the rest.
/// (To the minute rather than the second: a day of 100,000 requests has a
/// new second every other line, but a new minute every seventieth.)
#[derive(Debug, Default, Clone, Copy)]
pub struct Times {
    minute: [u8; 16],
    local: i64,
}

impl Times {
    /// [`parse_time`], remembering the minute in `last`.
    pub fn parse(last: &Cell<Times>, text: &str) -> Result<Time, BadTime> {
        let bytes = text.as_bytes();
        let known = last.get();
        // A minute remembered starts with a digit; none is all zero bytes.
        match bytes.get(..16) {
            Some(minute) if *minute == known.minute && known.minute[0] != 0 => {
                let second = match bytes.get(16..19) {
                    Some([b':', second @ ..]) => digits(second).filter(|second| *second <= 60),
                    _ => None,
                };
                let second = second.ok_or(BadTime::Unreadable)?;
                let time = after_second(known.local + second, &bytes[19..]);
                in_range(time.ok_or(BadTime::Unreadable)?)
            }
            _ => {
                let time = parse_time(text)?;
                let minute = bytes.get(..16).and_then(|minute| minute.try_into().ok());
                let local = digits(&bytes[..4]).and_then(|year| local_seconds(year, &bytes[4..]));
                let second = bytes.get(17..19).and_then(digits);
                if let (Some(minute), Some(local), Some(second), b'-') =
                    (minute, local, second, bytes[4])
                {
                    last.set(Times {
                        minute,
                        local: local - second,
                    });
                }
                Ok(time)
            }
        }
    }
}

/// `time` if between 1970 and 9999.
fn in_range(time: Time) -> Result<Time, BadTime> {
    if (FIRST..PAST_LAST).contains(&time.seconds) {
        Ok(time)
    } else {
        Err(BadTime::OutOfRange)
    }
}

/// The decimals of a second from `at`, if any: nanoseconds (digits past
/// the ninth dropped), and where they end.
fn fraction(bytes: &[u8], mut at: usize) -> Option<(u32, usize)> {
    const TENS: [u32; 10] = [
        1_000_000_000,
        100_000_000,
        10_000_000,
        1_000_000,
        100_000,
        10_000,
        1_000,
        100,
        10,
        1,
    ];
    if bytes.get(at) != Some(&b'.') {
        return Some((0, at));
    }
    at += 1;
    let start = at;
    let mut nanos = 0;
    while let Some(digit) = bytes.get(at).filter(|b| b.is_ascii_digit()) {
        if at - start < 9 {
            nanos = nanos * 10 + u32::from(digit - b'0');
        }
        at += 1;
    }
    // Scaled once at the end (no division per digit).
    let read = (at - start).min(9);
    (at > start).then_some((nanos * TENS[read], at))
}

/// `Z`, or `±HH:MM` east of UTC, in seconds.
fn offset(bytes: &[u8]) -> Option<i64> {
    match bytes {
        b"Z" | b"z" => Some(0),
        [sign @ (b'+' | b'-'), hours @ .., b':', m1, m2] if hours.len() == 2 => {
            let seconds = digits(hours)? * 3_600 + digits(&[*m1, *m2])? * 60;
            Some(if *sign == b'+' { seconds } else { -seconds })
        }
        _ => None,
    }
}

/// ASCII digits as a number.
fn digits(bytes: &[u8]) -> Option<i64> {
    bytes.iter().try_fold(0i64, |sum, &b| {
        b.is_ascii_digit().then(|| sum * 10 + i64::from(b - b'0'))
    })
}

/// Days since 1970-01-01 of a date in the proleptic Gregorian calendar
/// (Howard Hinnant's `days_from_civil`, the inverse of the access log's).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` on the clock of a log that starts then.
    fn on_its_clock(text: &str) -> (Epoch, Nanos) {
        let time = parse_time(text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
        let epoch = Epoch::around(time);
        (epoch, epoch.nanos(time).unwrap())
    }

    #[test]
    fn times_read_back_as_the_log_writes_them() {
        for at in [
            0,
            951_782_400_123_456_000,
            1_795_000_060_999_999_000,
            4_107_542_399_001_002_000,
        ] {
            let (epoch, nanos) = on_its_clock(&rfc3339(at));
            assert_eq!((epoch, nanos), (Epoch::default(), at), "{}", rfc3339(at));
        }
        assert_eq!(
            parse_time("2026-11-28T12:00:00+01:00"),
            parse_time("2026-11-28T11:00:00Z")
        );
        let half = parse_time("2026-11-28T11:00:00.5Z").unwrap();
        assert_eq!(half.nanos, 500_000_000);
        for bad in [
            "",
            "yesterday",
            "2026-13-01T00:00:00Z",
            "2026-11-28T11:00:00",
            "2026-11-28T11:00:00.Z",
            "2026-11-28T11:00:00+1:00",
            "2026-11-28T11:00:00Zjunk",
            "999-11-28T11:00:00Z",
        ] {
            assert_eq!(parse_time(bad), Err(BadTime::Unreadable), "{bad}");
        }
    }

    #[test]
    fn a_replay_takes_1970_to_9999() {
        for (text, taken) in [
            ("1969-12-31T23:59:59.999999Z", false),
            ("1970-01-01T00:00:00Z", true),
            ("1970-01-01T00:30:00+01:00", false),
            ("9999-12-31T23:59:59.999999Z", true),
            ("9999-12-31T23:00:00-02:00", false),
            ("10000-01-01T00:00:00Z", false),
            ("0000-01-01T00:00:00Z", false),
        ] {
            let read = parse_time(text);
            assert_eq!(read.is_ok(), taken, "{text}: {read:?}");
            if !taken {
                assert_eq!(read, Err(BadTime::OutOfRange), "{text}");
            }
        }
        let sentence = BadTime::OutOfRange.sentence("1969-12-31T23:59:59Z");
        assert!(sentence.contains("\"1969-12-31T23:59:59Z\""), "{sentence}");
    }

    #[test]
    fn a_late_log_keeps_its_calendar_and_is_shown_as_it_was() {
        for text in [
            "2461-06-01T00:00:00.000001Z",
            "2554-07-22T00:00:00.000001Z",
            "2800-02-29T12:00:00.250000Z",
            "9999-12-31T23:59:59.999999Z",
        ] {
            let (epoch, nanos) = on_its_clock(text);
            assert_eq!(epoch.show(nanos), text);
            // The same day of the week and of the year, 400·k years back.
            let shifted = rfc3339(nanos);
            let year: i64 = shifted[..4].parse().unwrap();
            let back = parse_time(&shifted).unwrap().seconds;
            let days = (parse_time(text).unwrap().seconds - back) / DAY;
            assert_eq!(days % 146_097, 0, "{text} as {shifted}");
            assert!((2062..2462).contains(&year), "{text} as {shifted}");
            assert_eq!(shifted[4..], text[4..]);
        }
        // A log of 2026 reaches 2554 but not 2555; one of 9000, 200 years.
        let today = Epoch::around(parse_time("2026-11-28T00:00:00Z").unwrap());
        let far = parse_time("2554-07-21T23:34:33Z").unwrap();
        assert!(today.nanos(far).is_ok());
        let beyond = parse_time("2555-01-01T00:00:00Z").unwrap();
        assert_eq!(today.nanos(beyond), Err(BadTime::OutOfReach));
        let late = Epoch::around(parse_time("9000-01-01T00:00:00Z").unwrap());
        for (text, reached) in [
            ("8800-01-01T00:00:00Z", true),
            ("8700-01-01T00:00:00Z", false),
        ] {
            assert_eq!(
                late.nanos(parse_time(text).unwrap()).is_ok(),
                reached,
                "{text}"
            );
        }
        // A sunset of the config, on the shifted clock.
        assert_eq!(late.shift(1_795_000_000_000_000_000), 0);
        assert_eq!(
            today.shift(1_795_000_000_000_000_000),
            1_795_000_000_000_000_000
        );
    }

    #[test]
    fn a_second_read_before_reads_as_a_new_one() {
        let last = Cell::new(Times::default());
        for text in [
            "2026-11-28T11:31:05.1Z",
            "2026-11-28T11:31:05.2Z",
            "2026-11-28T11:31:05+01:00",
            "2026-11-28T11:31:05.Z",
            "2026-11-28T11:31:05",
            "2026-11-28T11:31:59.999999Z",
            "2026-11-28T11:31:60Z",
            "2026-11-28T11:31:61Z",
            "2026-11-28T11:31:6",
            "2026-11-28T11:31:6Z",
            "2026-11-28T11:31x05Z",
            "2026-11-28T11:31:0aZ",
            "2026-11-28T11:31:07-00:30",
            "2026-11-28T11:31",
            "1969-12-31T23:59:59Z",
            "1969-12-31T23:59:59.5Z",
            "1970-01-01T00:59:59.5+01:00",
            "1970-01-01T00:59:59.5+00:00",
            "10000-01-01T00:00:00Z",
            "9999-12-31T23:59:59.5-01:00",
            "9999-12-31T23:59:59.5Z",
        ] {
            assert_eq!(Times::parse(&last, text), parse_time(text), "{text}");
        }
    }
}
