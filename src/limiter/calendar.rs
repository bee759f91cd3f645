//! Calendar windows: a time zone's days, weeks, months or years, for a
//! `fixed_window` rule with `calendar = "<IANA zone>"`
//! (docs/configuration.md, docs/charging.md "Calendar quotas").
//!
//! A [`Calendar`] numbers its windows and says where each starts, in Unix
//! nanoseconds:
//!
//! - `d`: window `i` is the local date `i` days after 1970-01-01;
//! - `w`: the week starting on the Monday `7 × i − 3` days after 1970-01-01
//!   (1969-12-29 was a Monday);
//! - `mo`: `year × 12 + month − 1`;
//! - `y`: the year.
//!
//! Each starts at 00:00 local time on its first date, or, where the zone
//! skips midnight (a DST change at 24:00, as America/Santiago's), at the
//! first instant of that date. So a day lasts 23 or 25 hours across a DST
//! change, and windows follow each other without a hole: window `i` is
//! `[start(i), start(i + 1))`. The zone's rules come from the IANA database
//! bundled into the binary (jiff's `tzdb-bundle-always`), never from the
//! machine's `/usr/share/zoneinfo`: instances sharing a Redis place the
//! same boundaries whatever their host has installed, and no DST rule is
//! written here.
//!
//! The request path must stay O(1): a time zone lookup takes a binary search
//! over the zone's transitions and a civil conversion. Each calendar caches
//! the window the clock is in (its index, start and end, and the next
//! window's end) behind a sequence counter: a reader takes the snapshot
//! with a handful of atomic loads, no lock and no allocation, and only a
//! `now` outside the two cached windows computes (and, once per boundary,
//! stores the new ones). Calendars are interned: one per zone and unit for
//! the life of the process (a few thousand at most, as many as the database
//! has zones), so a limit holds a `Copy` handle and reloads share the cache.

use std::fmt;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use jiff::civil::Date;
use jiff::tz::{AmbiguousOffset, TimeZone, TimeZoneDatabase};
use jiff::Timestamp;

use crate::clock::Nanos;

/// The unit of a calendar window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// `d`: from local midnight to local midnight.
    Day,
    /// `w`: from Monday 00:00 local.
    Week,
    /// `mo`: from the 1st of the month, 00:00 local.
    Month,
    /// `y`: from 1 January, 00:00 local.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 4] = [Unit::Day, Unit::Week, Unit::Month, Unit::Year];

    /// The unit as a rate writes it: `d`, `w`, `mo`, `y`.
    pub fn symbol(self) -> &'static str {
        match self {
            Unit::Day => "d",
            Unit::Week => "w",
            Unit::Month => "mo",
            Unit::Year => "y",
        }
    }

    /// The unit written as a rate's `PERIOD`.
    pub fn from_symbol(symbol: &str) -> Option<Unit> {
        Unit::ALL.into_iter().find(|unit| unit.symbol() == symbol)
    }

    /// A nominal length, for what needs one duration per limit (ordering a
    /// rule's limits, the period config values carry): a day, 7 days, and
    /// the Gregorian calendar's mean month and year (30.436875 and
    /// 365.2425 days, lengths no other period is written as). The windows
    /// themselves last what the calendar says.
    pub fn nominal(self) -> Duration {
        Duration::from_secs(match self {
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 2_629_746,
            Unit::Year => 31_556_952,
        })
    }

    /// At least the length of any window of the unit in any zone (DST
    /// moves a day by up to 2 hours, Antarctica/Troll's; 3 hours of
    /// margin): what a networked store extrapolates windows it was not told
    /// with, so that they reset later, never earlier.
    pub fn longest(self) -> Duration {
        const MARGIN: u64 = 3 * 3_600;
        Duration::from_secs(
            match self {
                Unit::Day => 86_400,
                Unit::Week => 7 * 86_400,
                Unit::Month => 31 * 86_400,
                Unit::Year => 366 * 86_400,
            } + MARGIN,
        )
    }

    /// At most the length of any window of the unit (see [`Unit::longest`];
    /// a zone that skipped a whole day, as Pacific/Apia did on 2011-12-30,
    /// is past).
    pub fn shortest(self) -> Duration {
        const MARGIN: u64 = 3 * 3_600;
        Duration::from_secs(
            match self {
                Unit::Day => 86_400,
                Unit::Week => 7 * 86_400,
                Unit::Month => 28 * 86_400,
                Unit::Year => 365 * 86_400,
            } - MARGIN,
        )
    }
}

/// A zone's windows of one unit: a handle to the process's one instance
/// for that zone and unit (see the module docs). Equal handles are the same
/// calendar.
#[derive(Clone, Copy)]
pub struct Calendar(&'static Inner);

struct Inner {
    /// The database's own spelling of the zone (`Europe/Berlin`).
    zone: Box<str>,
    unit: Unit,
    tz: TimeZone,
    cache: Cache,
}

impl PartialEq for Calendar {
    fn eq(&self, other: &Calendar) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl Eq for Calendar {}

impl fmt::Debug for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Calendar({} {})", self.0.zone, self.0.unit.symbol())
    }
}

/// The bundled IANA database (see the module docs).
fn database() -> &'static TimeZoneDatabase {
    static DATABASE: OnceLock<TimeZoneDatabase> = OnceLock::new();
    DATABASE.get_or_init(TimeZoneDatabase::bundled)
}

/// The database's spelling of the zone `name` (looked up without regard to
/// ASCII case), if it has one.
pub fn zone_named(name: &str) -> Option<String> {
    let tz = database().get(name).ok()?;
    Some(tz.iana_name().unwrap_or(name).to_owned())
}

/// The zones whose names are closest to `name` (at most `n`), for an error
/// message about a misspelt zone: the same last part in another region
/// first, then the fewest edits (Levenshtein distance).
pub fn zones_like(name: &str, n: usize) -> Vec<String> {
    let wanted = name.to_ascii_lowercase();
    let city = |zone: &str| zone.rsplit('/').next().unwrap_or(zone).to_ascii_lowercase();
    let wanted_city = city(&wanted);
    let mut scored: Vec<(usize, String)> = database()
        .available()
        .map(|zone| {
            let text = zone.as_str().to_owned();
            let score = if city(&text) == wanted_city {
                0
            } else {
                1 + strsim::levenshtein(&wanted, &text.to_ascii_lowercase())
            };
            (score, text)
        })
        .filter(|(score, _)| *score <= 3)
        .collect();
    scored.sort();
    scored.into_iter().take(n).map(|(_, zone)| zone).collect()
}

impl Calendar {
    /// The calendar of `unit` in the zone `zone` (an IANA name, any ASCII
    /// case); `None` when the database has no such zone. Interned: called
    /// when a config is compiled, never on the request path.
    pub fn new(zone: &str, unit: Unit) -> Option<Calendar> {
        static INTERNED: Mutex<Vec<&'static Inner>> = Mutex::new(Vec::new());
        let tz = database().get(zone).ok()?;
        let name = tz.iana_name().unwrap_or(zone).to_owned();
        let mut interned = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(inner) = interned
            .iter()
            .find(|inner| inner.unit == unit && *inner.zone == *name)
        {
            return Some(Calendar(inner));
        }
        let inner: &'static Inner = Box::leak(Box::new(Inner {
            zone: name.into_boxed_str(),
            unit,
            tz,
            cache: Cache::default(),
        }));
        interned.push(inner);
        Some(Calendar(inner))
    }

    /// The zone's name as the database spells it.
    pub fn zone(&self) -> &'static str {
        &self.0.zone
    }

    pub fn unit(&self) -> Unit {
        self.0.unit
    }

    /// `t` as RFC 3339 with the zone's offset then
    /// (`2026-11-01T00:00:00+01:00`), for admin views.
    pub fn rfc3339(&self, t: Nanos) -> String {
        let timestamp = timestamp(t);
        let offset = self.0.tz.to_offset(timestamp);
        timestamp.display_with_offset(offset).to_string()
    }

    /// The window `now` falls in, as (index, start, end): the request
    /// path's question, answered from the cache with five loads when `now`
    /// is in the cached window (returned in registers, where a whole
    /// [`Frame`] goes through memory).
    #[inline(always)]
    pub fn current(&self, now: Nanos) -> (u64, Nanos, Nanos) {
        if let Some((index, start, end)) = self.0.cache.read_current() {
            if start <= now && now < end {
                return (index, start, end);
            }
        }
        self.current_computed(now)
    }

    #[cold]
    #[inline(never)]
    fn current_computed(&self, now: Nanos) -> (u64, Nanos, Nanos) {
        let frame = self.frame(now);
        (frame.index, frame.start, frame.end)
    }

    /// The windows around `now`: the one it falls in and the next, from the
    /// cache when `now` is in one of them (the request path), else computed
    /// (and cached when `now` is later than the cached windows).
    #[inline]
    pub fn frame(&self, now: Nanos) -> Frame {
        if let Some(frame) = self.0.cache.read() {
            if frame.start <= now && now < frame.end {
                return frame;
            }
            if frame.end <= now && now < frame.next_end {
                return self.advance(frame, now);
            }
        }
        self.compute(now)
    }

    /// `now` reached the cached next window: it becomes the current one.
    #[cold]
    fn advance(&self, frame: Frame, now: Nanos) -> Frame {
        let next = Frame {
            index: frame.index + 1,
            previous_start: frame.start,
            start: frame.end,
            end: frame.next_end,
            next_end: self.start_of(frame.index + 3),
        };
        self.0.cache.write(next, now);
        next
    }

    #[cold]
    fn compute(&self, now: Nanos) -> Frame {
        let index = self.index_of(now);
        let frame = Frame {
            index,
            previous_start: self.start_of(index.saturating_sub(1)),
            start: self.start_of(index),
            end: self.start_of(index + 1),
            next_end: self.start_of(index + 2),
        };
        self.0.cache.write(frame, now);
        frame
    }

    /// The window `t` falls in, from the cached windows when they hold it,
    /// else computed. Never moves the cache: `t` may be ahead of the clock
    /// (a reservation's instant).
    pub fn index_near(&self, t: Nanos) -> u64 {
        if let Some(frame) = self.0.cache.read() {
            if frame.previous_start <= t && t < frame.start {
                return frame.index.saturating_sub(1);
            }
            if frame.start <= t && t < frame.next_end {
                return frame.index + u64::from(t >= frame.end);
            }
        }
        self.index_of(t)
    }

    /// Where window `index` starts, from the cached windows when they hold
    /// it, else computed; never moves the cache.
    pub fn start_near(&self, index: u64) -> Nanos {
        match self.0.cache.read() {
            Some(frame) => match index.wrapping_sub(frame.index) {
                0 => frame.start,
                1 => frame.end,
                2 => frame.next_end,
                u64::MAX => frame.previous_start,
                _ => self.start_of(index),
            },
            None => self.start_of(index),
        }
    }

    /// The window `t` falls in, computed ([`Calendar::current`] is the fast
    /// way).
    pub fn index_of(&self, t: Nanos) -> u64 {
        let timestamp = timestamp(t);
        let date = self.0.tz.to_datetime(timestamp).date();
        let mut index = self.index_of_date(date);
        // The local date decides, but where the zone steps back over
        // midnight, a few instants of one date follow the next date's
        // start: the boundaries decide then, so windows never overlap.
        for _ in 0..2 {
            if index > 0 && t < self.start_of(index) {
                index -= 1;
            } else if t >= self.start_of(index + 1) {
                index += 1;
            } else {
                break;
            }
        }
        index
    }

    /// The first instant of window `index`, in Unix nanoseconds (0 before
    /// 1970, saturating past 2554).
    pub fn start_of(&self, index: u64) -> Nanos {
        let date = self.first_date(index);
        let midnight = date.to_datetime(jiff::civil::Time::midnight());
        let instant = match self.0.tz.to_ambiguous_timestamp(midnight).offset() {
            // The common case, and a midnight that comes twice (the zone
            // steps back across it): the first one.
            AmbiguousOffset::Unambiguous { offset }
            | AmbiguousOffset::Fold { before: offset, .. } => offset.to_timestamp(midnight).ok(),
            // Midnight is skipped: the day starts at the transition, the
            // first instant after midnight read with the offset after it.
            AmbiguousOffset::Gap { after, .. } => after
                .to_timestamp(midnight)
                .ok()
                .and_then(|before_gap| self.0.tz.following(before_gap).next())
                .map(|transition| transition.timestamp()),
        };
        instant.map_or(0, nanos)
    }

    fn index_of_date(&self, date: Date) -> u64 {
        let (year, month) = (i64::from(date.year()), i64::from(date.month()));
        let index = match self.0.unit {
            Unit::Day => days_from_civil(date),
            Unit::Week => (days_from_civil(date) + 3).div_euclid(7),
            Unit::Month => year * 12 + month - 1,
            Unit::Year => year,
        };
        u64::try_from(index).unwrap_or(0)
    }

    fn first_date(&self, index: u64) -> Date {
        // Far beyond any instant a u64 of nanoseconds reaches (2554).
        let index = index.min(1 << 40) as i64;
        match self.0.unit {
            Unit::Day => civil_from_days(index),
            Unit::Week => civil_from_days(index * 7 - 3),
            Unit::Month => date((index / 12).min(9999), (index % 12 + 1) as i8, 1),
            Unit::Year => date(index.min(9999), 1, 1),
        }
    }
}

/// A calendar's window at some instant and the ones around it: `index` is
/// `[start, end)`, `index + 1` is `[end, next_end)`, `index − 1` starts at
/// `previous_start` (what a networked store needs to place its own clock
/// among them, `store/redis/script.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub index: u64,
    pub previous_start: Nanos,
    pub start: Nanos,
    pub end: Nanos,
    pub next_end: Nanos,
}

impl Frame {
    /// The length of the window the frame is in.
    pub fn length(&self) -> Nanos {
        self.end.saturating_sub(self.start)
    }
}

/// The cached [`Frame`], as a sequence lock over atomics: a writer makes the
/// sequence odd, writes, and makes it even again; a reader that saw an odd
/// sequence, or a different one after reading, does not use what it read
/// (and computes instead). Writers never wait: one that finds another
/// writing leaves the cache to it.
#[derive(Default)]
struct Cache {
    sequence: AtomicU64,
    index: AtomicU64,
    previous_start: AtomicU64,
    start: AtomicU64,
    end: AtomicU64,
    next_end: AtomicU64,
}

impl Cache {
    #[inline]
    fn read(&self) -> Option<Frame> {
        let before = self.sequence.load(Ordering::Acquire);
        if before & 1 == 1 || before == 0 {
            // Being written, or never written.
            return None;
        }
        let frame = Frame {
            index: self.index.load(Ordering::Relaxed),
            previous_start: self.previous_start.load(Ordering::Relaxed),
            start: self.start.load(Ordering::Relaxed),
            end: self.end.load(Ordering::Relaxed),
            next_end: self.next_end.load(Ordering::Relaxed),
        };
        fence(Ordering::Acquire);
        (self.sequence.load(Ordering::Relaxed) == before).then_some(frame)
    }

    /// The cached window alone: [`Cache::read`]'s index, start and end.
    #[inline(always)]
    fn read_current(&self) -> Option<(u64, Nanos, Nanos)> {
        let before = self.sequence.load(Ordering::Acquire);
        let index = self.index.load(Ordering::Relaxed);
        let start = self.start.load(Ordering::Relaxed);
        let end = self.end.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let after = self.sequence.load(Ordering::Relaxed);
        // Odd: being written; 0: never written.
        (before == after && before & 1 == 0 && before != 0).then_some((index, start, end))
    }

    /// Stores `frame`, computed at `now`, unless the cache already holds a
    /// later window (a thread that read the clock earlier must not move it
    /// back) or another thread is writing.
    fn write(&self, frame: Frame, now: Nanos) {
        let sequence = self.sequence.load(Ordering::Acquire);
        if sequence & 1 == 1 {
            return;
        }
        if sequence != 0 && self.start.load(Ordering::Relaxed) > now {
            return;
        }
        if self
            .sequence
            .compare_exchange(sequence, sequence + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        fence(Ordering::Release);
        self.index.store(frame.index, Ordering::Relaxed);
        self.previous_start
            .store(frame.previous_start, Ordering::Relaxed);
        self.start.store(frame.start, Ordering::Relaxed);
        self.end.store(frame.end, Ordering::Relaxed);
        self.next_end.store(frame.next_end, Ordering::Relaxed);
        self.sequence.store(sequence + 2, Ordering::Release);
    }
}

fn timestamp(t: Nanos) -> Timestamp {
    // Every u64 of nanoseconds (up to 2554) is a valid timestamp.
    Timestamp::from_nanosecond(i128::from(t)).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn nanos(timestamp: Timestamp) -> Nanos {
    u64::try_from(timestamp.as_nanosecond().max(0)).unwrap_or(u64::MAX)
}

fn date(year: i64, month: i8, day: i8) -> Date {
    Date::new(year as i16, month, day).unwrap_or(Date::MAX)
}

/// 1970-01-01, day 0 of the day and week indexes.
const EPOCH: Date = Date::constant(1970, 1, 1);

/// Days from 1970-01-01 to `date`.
fn days_from_civil(date: Date) -> i64 {
    date.duration_since(EPOCH).as_secs().div_euclid(86_400)
}

/// The date `days` after 1970-01-01 (the last one jiff knows, past it).
fn civil_from_days(days: i64) -> Date {
    EPOCH
        .checked_add(jiff::SignedDuration::from_hours(days.saturating_mul(24)))
        .unwrap_or(Date::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Nanos = 3_600 * 1_000_000_000;

    /// Unix nanoseconds of an RFC 3339 instant.
    fn at(text: &str) -> Nanos {
        nanos(text.parse::<Timestamp>().unwrap())
    }

    fn calendar(zone: &str, unit: Unit) -> Calendar {
        Calendar::new(zone, unit).unwrap()
    }

    /// The window `t` is in, as (start, end), through the cache.
    fn window(calendar: Calendar, t: Nanos) -> (Nanos, Nanos) {
        let frame = calendar.frame(t);
        assert_eq!(frame.index, calendar.index_of(t), "at {t}");
        (frame.start, frame.end)
    }

    #[test]
    fn zones_are_found_in_any_case_and_interned() {
        assert_eq!(
            zone_named("europe/berlin").as_deref(),
            Some("Europe/Berlin")
        );
        assert_eq!(zone_named("Europe/Berln"), None);
        assert_eq!(zones_like("Europe/Berln", 1), ["Europe/Berlin"]);
        assert_eq!(zones_like("Asia/Berlin", 1), ["Europe/Berlin"]);
        let a = calendar("Europe/Berlin", Unit::Month);
        assert_eq!(a, calendar("EUROPE/BERLIN", Unit::Month));
        assert_ne!(a, calendar("Europe/Berlin", Unit::Day));
        assert_eq!(a.zone(), "Europe/Berlin");
    }

    #[test]
    fn a_month_starts_at_local_midnight_on_the_first() {
        let month = calendar("Europe/Berlin", Unit::Month);
        // 2026-11-01 00:00 in Berlin is 2026-10-31 23:00 UTC (CET, +1).
        let boundary = at("2026-10-31T23:00:00Z");
        let october = (at("2026-09-30T22:00:00Z"), boundary);
        let november = (boundary, at("2026-11-30T23:00:00Z"));
        assert_eq!(window(month, boundary - 1), october);
        assert_eq!(window(month, boundary), november);
        assert_eq!(month.index_of(boundary), 2026 * 12 + 10);
        // October has its DST change: 31 days and one hour.
        assert_eq!(october.1 - october.0, (31 * 24 + 1) * HOUR);
    }

    #[test]
    fn berlin_days_last_23_and_25_hours_across_dst() {
        let day = calendar("Europe/Berlin", Unit::Day);
        // 2026-03-29: 00:00 CET (+1) to 00:00 CEST (+2).
        let spring = (at("2026-03-28T23:00:00Z"), at("2026-03-29T22:00:00Z"));
        assert_eq!(window(day, spring.0), spring);
        assert_eq!(window(day, spring.1 - 1), spring);
        assert_eq!(window(day, spring.0 - 1).1, spring.0);
        assert_eq!(window(day, spring.1).0, spring.1);
        assert_eq!(spring.1 - spring.0, 23 * HOUR);
        // 2026-10-25: 00:00 CEST to 00:00 CET.
        let autumn = (at("2026-10-24T22:00:00Z"), at("2026-10-25T23:00:00Z"));
        assert_eq!(window(day, autumn.0), autumn);
        // 02:30 local comes twice; both are that day.
        assert_eq!(window(day, at("2026-10-25T00:30:00Z")), autumn);
        assert_eq!(window(day, at("2026-10-25T01:30:00Z")), autumn);
        assert_eq!(window(day, autumn.1 - 1), autumn);
        assert_eq!(window(day, autumn.1).0, autumn.1);
        assert_eq!(autumn.1 - autumn.0, 25 * HOUR);
    }

    #[test]
    fn weeks_start_on_monday_and_years_on_the_first_of_january() {
        let week = calendar("America/New_York", Unit::Week);
        // Monday 2026-11-30 00:00 EST (-5).
        let monday = at("2026-11-30T05:00:00Z");
        assert_eq!(window(week, monday - 1), (monday - 7 * 24 * HOUR, monday));
        assert_eq!(window(week, monday), (monday, monday + 7 * 24 * HOUR));
        // The week of the DST change lasts an hour more.
        let sunday = at("2026-11-01T06:00:00Z");
        assert_eq!(
            window(week, sunday),
            (at("2026-10-26T04:00:00Z"), at("2026-11-02T05:00:00Z"))
        );
        let year = calendar("America/New_York", Unit::Year);
        let new_year = at("2027-01-01T05:00:00Z");
        assert_eq!(
            window(year, new_year - 1),
            (at("2026-01-01T05:00:00Z"), new_year)
        );
        assert_eq!(window(year, new_year).0, new_year);
        assert_eq!(year.index_of(new_year), 2027);
    }

    #[test]
    fn where_midnight_is_skipped_the_day_starts_at_its_first_instant() {
        // America/Santiago moves to DST at 24:00 on the first Saturday of
        // September: 2026-09-06 has no 00:00, it starts at 01:00 (-3), the
        // instant 04:00 UTC that was 00:00 (-4) a moment before.
        let day = calendar("America/Santiago", Unit::Day);
        let start = at("2026-09-06T04:00:00Z");
        assert_eq!(window(day, start - 1).1, start);
        assert_eq!(window(day, start), (start, at("2026-09-07T03:00:00Z")));
        assert_eq!(window(day, start - 1), (at("2026-09-05T04:00:00Z"), start));
    }

    #[test]
    fn the_cache_moves_forward_and_never_back() {
        let day = calendar("Asia/Tokyo", Unit::Day);
        let midnight = at("2026-06-10T15:00:00Z");
        let today = day.frame(midnight);
        assert_eq!(today.length(), 24 * HOUR);
        // The next day comes from the cached frame, then becomes it.
        assert_eq!(day.frame(midnight + 24 * HOUR).start, midnight + 24 * HOUR);
        assert_eq!(day.0.cache.read().unwrap().start, midnight + 24 * HOUR);
        // An earlier instant is computed and leaves the cache alone.
        assert_eq!(day.frame(midnight).start, midnight);
        assert_eq!(day.0.cache.read().unwrap().start, midnight + 24 * HOUR);
        // So does a later one asked about without the clock there (a
        // reservation's instant).
        let tomorrow = midnight + 24 * HOUR;
        assert_eq!(
            day.index_near(tomorrow + 24 * HOUR),
            day.index_of(tomorrow) + 1
        );
        assert_eq!(
            day.start_near(day.index_of(tomorrow) + 2),
            tomorrow + 48 * HOUR
        );
        assert_eq!(day.start_near(day.index_of(tomorrow) - 1), midnight);
        assert_eq!(day.0.cache.read().unwrap().start, tomorrow);
        // Index and start agree far from the cache.
        for index in [0, 1, 20_000, 20_614, 30_000] {
            let start = day.start_of(index);
            assert_eq!(day.index_of(start), index);
            assert_eq!(
                day.index_of(start.saturating_sub(1)),
                index.saturating_sub(1)
            );
        }
    }

    #[test]
    fn civil_days_round_trip() {
        for days in [-800_000, -1, 0, 1, 59, 60, 365, 10_957, 20_000, 2_000_000] {
            assert_eq!(days_from_civil(civil_from_days(days)), days);
        }
        assert_eq!(civil_from_days(0), date(1970, 1, 1));
        assert_eq!(civil_from_days(-3).weekday(), jiff::civil::Weekday::Monday);
    }
}
