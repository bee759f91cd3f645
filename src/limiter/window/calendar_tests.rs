//! The fixed window on a calendar (docs/configuration.md, `calendar`): the
//! same counting as on Unix-aligned windows, across boundaries of uneven
//! windows, on an injected clock.

use super::*;
use crate::limiter::calendar::Unit;

// Not `crate::testing`'s: a test module of the limiter layer takes nothing
// from the layers above it (ARCHITECTURE.md, "Layers").
const SEC: Nanos = 1_000_000_000;
const HOUR: Nanos = 3_600 * SEC;

/// How many of `n` requests of cost 1 `limit` admits at `now`.
fn admitted(limit: &FixedWindow, state: &mut WindowCounts, now: Nanos, n: u64) -> u64 {
    (0..n)
        .filter(|_| limit.acquire(state, now, 1).is_allowed())
        .count() as u64
}

/// Unix nanoseconds of an RFC 3339 instant.
fn at(text: &str) -> Nanos {
    let timestamp: jiff::Timestamp = text.parse().unwrap();
    timestamp.as_nanosecond() as Nanos
}

fn quota(count: u64, zone: &str, unit: Unit) -> FixedWindow {
    let rate = Rate {
        count,
        period: unit.nominal(),
    };
    FixedWindow::on_calendar(rate, Calendar::new(zone, unit).unwrap())
}

/// The decision's `retry_after`, which must be a denial's.
fn retry_after(decision: Decision) -> Option<Nanos> {
    match decision {
        Decision::Deny { retry_after, .. } => retry_after,
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[test]
fn a_monthly_quota_refuses_until_local_midnight_on_the_first() {
    let limit = quota(2, "Europe/Berlin", Unit::Month);
    // 2026-11-01 00:00 in Berlin (CET, +1).
    let boundary = at("2026-10-31T23:00:00Z");
    let mut state = WindowCounts::default();
    assert_eq!(
        admitted(&limit, &mut state, at("2026-10-03T09:00:00Z"), 2),
        2
    );
    let before = boundary - SEC;
    let denied = limit.acquire(&mut state, before, 1);
    assert_eq!(retry_after(denied), Some(SEC));
    assert_eq!(denied.state().reset_after, SEC);
    // A request a moment before the boundary is still October's.
    assert_eq!(admitted(&limit, &mut state, boundary - 1, 1), 0);
    assert_eq!(admitted(&limit, &mut state, boundary, 1), 1);
    // The reset is the end of November, local: 30 days of CET.
    let allowed = limit.acquire(&mut state, boundary, 1);
    assert_eq!(allowed.state().reset_after, 30 * 24 * HOUR);
    assert_eq!(limit.window_at(boundary).1, boundary);
    assert_eq!(limit.window_at(boundary).2, at("2026-11-30T23:00:00Z"));
}

#[test]
fn a_daily_quota_follows_berlin_days_of_23_and_25_hours() {
    let limit = quota(1, "Europe/Berlin", Unit::Day);
    // 2026-03-29: 00:00 CET to 00:00 CEST, 23 hours.
    let (start, end) = (at("2026-03-28T23:00:00Z"), at("2026-03-29T22:00:00Z"));
    let mut state = WindowCounts::default();
    assert_eq!(admitted(&limit, &mut state, start - 1, 1), 1);
    assert_eq!(admitted(&limit, &mut state, start, 1), 1);
    let denied = limit.acquire(&mut state, start, 1);
    assert_eq!(retry_after(denied), Some(23 * HOUR));
    assert_eq!(admitted(&limit, &mut state, end - 1, 1), 0);
    assert_eq!(admitted(&limit, &mut state, end, 1), 1);
    // 2026-10-25: 00:00 CEST to 00:00 CET, 25 hours.
    let (start, end) = (at("2026-10-24T22:00:00Z"), at("2026-10-25T23:00:00Z"));
    let mut state = WindowCounts::default();
    assert_eq!(admitted(&limit, &mut state, start, 1), 1);
    assert_eq!(
        retry_after(limit.acquire(&mut state, start, 1)),
        Some(25 * HOUR)
    );
    // The hour that comes twice is one day's.
    assert_eq!(
        admitted(&limit, &mut state, at("2026-10-25T01:30:00Z"), 1),
        0
    );
    assert_eq!(admitted(&limit, &mut state, end - 1, 1), 0);
    assert_eq!(admitted(&limit, &mut state, end, 1), 1);
}

#[test]
fn a_weekly_quota_starts_again_on_monday() {
    let limit = quota(3, "America/New_York", Unit::Week);
    // Sunday 2026-11-29 23:59:59 EST, then Monday 00:00.
    let monday = at("2026-11-30T05:00:00Z");
    let mut state = WindowCounts::default();
    assert_eq!(
        admitted(&limit, &mut state, at("2026-11-23T05:00:00Z"), 3),
        3
    );
    assert_eq!(
        retry_after(limit.acquire(&mut state, monday - SEC, 1)),
        Some(SEC)
    );
    assert_eq!(admitted(&limit, &mut state, monday, 5), 3);
}

#[test]
fn a_yearly_quota_starts_again_on_the_first_of_january() {
    let limit = quota(1, "Asia/Tokyo", Unit::Year);
    // 2027-01-01 00:00 JST (+9).
    let new_year = at("2026-12-31T15:00:00Z");
    let mut state = WindowCounts::default();
    assert_eq!(
        admitted(&limit, &mut state, at("2026-01-01T00:00:00Z"), 1),
        1
    );
    assert_eq!(admitted(&limit, &mut state, new_year - 1, 1), 0);
    assert_eq!(admitted(&limit, &mut state, new_year, 1), 1);
    assert_eq!(state.window, 2027);
}

#[test]
fn where_midnight_is_skipped_the_day_starts_at_its_first_instant() {
    // America/Santiago, 2026-09-06: 00:00 (-4) is 01:00 (-3).
    let limit = quota(1, "America/Santiago", Unit::Day);
    let first = at("2026-09-06T04:00:00Z");
    let mut state = WindowCounts::default();
    assert_eq!(admitted(&limit, &mut state, first - 2 * HOUR, 1), 1);
    assert_eq!(
        retry_after(limit.acquire(&mut state, first - HOUR, 1)),
        Some(HOUR)
    );
    assert_eq!(admitted(&limit, &mut state, first, 1), 1);
    // That day lasts 23 hours.
    assert_eq!(
        retry_after(limit.acquire(&mut state, first, 1)),
        Some(23 * HOUR)
    );
}

#[test]
fn a_debt_is_carried_into_the_next_months_count_per_month() {
    let limit = quota(10, "Europe/Berlin", Unit::Month);
    let october = at("2026-10-15T12:00:00Z");
    let (november, december) = (at("2026-10-31T23:00:00Z"), at("2026-11-30T23:00:00Z"));
    let mut state = WindowCounts::default();
    assert_eq!(admitted(&limit, &mut state, october, 4), 4);
    // 25 counted: 15 carried into November (full), 5 into December.
    limit.charge(&mut state, october, 21);
    let denied = limit.acquire(&mut state, october, 1);
    assert_eq!(retry_after(denied), Some(december - october));
    assert_eq!(
        denied.state().reset_after,
        at("2026-12-31T23:00:00Z") - october
    );
    assert_eq!(admitted(&limit, &mut state, november, 1), 0);
    assert_eq!(admitted(&limit, &mut state, december - 1, 1), 0);
    assert!(!limit.is_fresh(&state, december));
    assert_eq!(admitted(&limit, &mut state, december, 10), 5);
    // A late refund in November of October's charge lowers the carry.
    let mut state = WindowCounts::default();
    limit.charge(&mut state, october, 25);
    limit.refund(&mut state, november + HOUR, 25, october);
    assert!(limit.is_fresh(&state, november + HOUR));
}

#[test]
fn delay_mode_holds_a_request_until_the_next_window_starts() {
    let limit = quota(1, "Europe/Berlin", Unit::Day);
    let hold = HoldLimits {
        max_wait: 48 * HOUR,
        max_queued: 10,
    };
    // 23:00 local on 2026-10-24; the next day lasts 25 hours.
    let now = at("2026-10-24T21:00:00Z");
    let mut state = WindowCounts::default();
    assert_eq!(limit.reserve(&mut state, now, 1, hold).wait(), 0);
    assert_eq!(limit.reserve(&mut state, now, 1, hold).wait(), HOUR);
    assert_eq!(limit.reserve(&mut state, now, 1, hold).wait(), 26 * HOUR);
    // Cancelling the last gives its place back.
    limit.cancel(&mut state, now, 1, now + 26 * HOUR);
    assert_eq!(state.current, 2);
}

#[test]
fn a_reload_onto_a_calendar_keeps_the_spent_units() {
    let plain = FixedWindow::new(Rate {
        count: 10,
        period: std::time::Duration::from_secs(86_400),
    });
    let calendar = quota(10, "Europe/Berlin", Unit::Day);
    let now = at("2026-06-10T12:00:00Z");
    let mut state = WindowCounts::default();
    assert_eq!(admitted(&plain, &mut state, now, 4), 4);
    calendar.carry_from(&plain, &mut state, now, Carry::KeepSpent);
    assert_eq!(calendar.peek(&state, now, 1).state().remaining, 6);
    // Berlin's next midnight, not UTC's.
    let midnight = at("2026-06-10T22:00:00Z");
    assert_eq!(calendar.peek(&state, midnight - 1, 1).state().remaining, 6);
    assert_eq!(calendar.peek(&state, midnight, 1).state().remaining, 10);
}
