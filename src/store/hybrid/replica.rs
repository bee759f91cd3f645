//! A shared bucket's state, as Redis answers it after a sync, made this
//! instance's own: Redis reports what a request of cost 1 would be told
//! (`remaining`, `reset_after`, durations from its own clock), and the
//! local bucket becomes a fresh one with as many units spent as that view
//! implies ([`spent`]), charged at the local `now`. Durations need no
//! common clock, so instances whose clocks disagree still agree on how
//! much of a token or leaky bucket is left; a window is aligned to the
//! local clock, so near a window's end they disagree for their skew.

use crate::clock::Nanos;
use crate::limiter::{Algorithm, BucketState, FixedWindow, Limiter};

/// The units spent from a full bucket of `limiter` that leave it looking
/// like `view` at `now`:
///
/// - token and leaky buckets: `reset_after` is the time until the bucket is
///   full (empty) again, `T` per unit, debts included: ⌈reset_after / T⌉;
/// - windows: the current window's count is COUNT − `remaining`; a window
///   with nothing left whose reset lies beyond the current window (beyond
///   the next one, for a sliding window, whose count fades out over it)
///   carries a debt into the next ones, COUNT per window.
///
/// Rounded towards more spent, so a replica never lets more through than
/// the view it came from. 0 for limits that are not synced.
pub fn spent(limiter: &Limiter, view: BucketState, now: Nanos) -> u64 {
    let per_unit = match limiter {
        Limiter::TokenBucket(bucket) => bucket.intervals().0,
        Limiter::LeakyBucket(bucket) => bucket.interval().0,
        Limiter::FixedWindow(window) if window.calendar().is_some() => {
            return calendar_spent(window, view, now)
        }
        Limiter::FixedWindow(window) => return window_spent(window.window(), 0, view, now),
        Limiter::SlidingWindow(window) => {
            // A sliding window is full again one period after its count
            // stops: the count fades out over the next window.
            let (period, _) = window.window();
            return window_spent(window.window(), period, view, now);
        }
        Limiter::SlidingLog(_) | Limiter::Concurrency(_) => return 0,
    };
    if per_unit == 0 {
        return 0;
    }
    view.reset_after.div_ceil(per_unit)
}

fn window_spent((period, count): (Nanos, u64), fade: Nanos, view: BucketState, now: Nanos) -> u64 {
    let spent = count.saturating_sub(view.remaining);
    if view.remaining > 0 || period == 0 {
        return spent;
    }
    let to_end = (period - now % period).saturating_add(fade);
    let later_windows = view.reset_after.saturating_sub(to_end).div_ceil(period);
    spent.saturating_add(count.saturating_mul(later_windows))
}

/// [`window_spent`] of a calendar window (docs/charging.md, "Calendar
/// quotas"): the windows are the calendar's, placed by the local clock, and
/// a reset beyond the current window counts COUNT for each window up to
/// the one it ends.
fn calendar_spent(window: &FixedWindow, view: BucketState, now: Nanos) -> u64 {
    let count = window.capacity();
    let spent = count.saturating_sub(view.remaining);
    let (index, _, end) = window.window_at(now);
    let Some(calendar) = window.calendar() else {
        return spent;
    };
    if view.remaining > 0 || now.saturating_add(view.reset_after) <= end {
        return spent;
    }
    let last = calendar.index_of(now.saturating_add(view.reset_after) - 1);
    spent.saturating_add(count.saturating_mul(last.saturating_sub(index)))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::limiter::{Algorithm, FixedWindow, Gcra, LeakyBucket, Rate, SlidingWindow};

    const SEC: Nanos = 1_000_000_000;
    /// 10.25 s into a minute: windows are part spent.
    const NOW: Nanos = 1_800_000_000 * SEC + 10 * SEC + SEC / 4;

    fn rate(count: u64) -> Rate {
        Rate {
            count,
            period: Duration::from_secs(60),
        }
    }

    /// Spends `units` from a full bucket of `algorithm` (a debt beyond its
    /// capacity included), then checks that a replica made from what a
    /// request of cost 1 is told never decides more generously, now or
    /// later, and decides the same when `exact`.
    fn round_trip<A: Algorithm>(algorithm: A, limiter: Limiter, units: u64, exact: bool) {
        let mut original = A::State::default();
        algorithm.charge(&mut original, NOW, units);
        let view = algorithm.peek(&original, NOW, 1).state();
        let mut replica = A::State::default();
        algorithm.charge(&mut replica, NOW, spent(&limiter, view, NOW));
        for later in [0, SEC / 3, 7 * SEC, 55 * SEC, 130 * SEC] {
            let at = NOW + later;
            let copied = algorithm.peek(&replica, at, 1).state().remaining;
            let real = algorithm.peek(&original, at, 1).state().remaining;
            let what = format!("{limiter:?} with {units} spent, {later} ns later");
            assert!(copied <= real, "{what}: {copied} left, more than {real}");
            if exact {
                assert_eq!(copied, real, "{what}");
            }
        }
    }

    #[test]
    fn a_replica_decides_like_the_bucket_it_was_told_about() {
        for units in [0, 1, 7, 30, 60, 95, 250] {
            let token = Gcra::new(rate(60), 60);
            round_trip(token, Limiter::TokenBucket(token), units, true);
            // A window's debt is known from its view in whole windows only.
            let fixed = FixedWindow::new(rate(60));
            round_trip(fixed, Limiter::FixedWindow(fixed), units, units <= 60);
            let sliding = SlidingWindow::new(rate(60));
            round_trip(sliding, Limiter::SlidingWindow(sliding), units, units <= 60);
        }
        for units in [0, 1, 4] {
            let leaky = LeakyBucket::new(rate(60), 5);
            round_trip(leaky, Limiter::LeakyBucket(leaky), units, true);
        }
    }

    #[test]
    fn a_calendar_replica_counts_its_debt_in_the_calendar_s_windows() {
        use crate::limiter::calendar::{Calendar, Unit};
        // 23:00 on 2026-10-24 in Berlin: the next day lasts 25 hours.
        let now = 1_792_875_600 * SEC;
        let day = FixedWindow::on_calendar(
            Rate {
                count: 10,
                period: Unit::Day.nominal(),
            },
            Calendar::new("Europe/Berlin", Unit::Day).unwrap(),
        );
        for units in [0, 3, 10, 15, 25, 31] {
            let mut original = Default::default();
            day.charge(&mut original, now, units);
            let view = day.peek(&original, now, 1).state();
            let mut replica = Default::default();
            day.charge(
                &mut replica,
                now,
                spent(&Limiter::FixedWindow(day), view, now),
            );
            for later in [0, 3_599, 3_600, 90_000 + 3_599, 90_000 + 3_600, 200_000] {
                let at = now + later * SEC;
                let copied = day.peek(&replica, at, 1).state().remaining;
                let real = day.peek(&original, at, 1).state().remaining;
                // Never more generous; a debt is known in whole windows,
                // placed at the calendar's boundaries.
                assert!(copied <= real, "{units} spent, {later} s later");
                if units % 10 == 0 || units < 10 {
                    assert_eq!(copied, real, "{units} spent, {later} s later");
                }
            }
        }
    }
}
