//! Window counters: `fixed_window` and `sliding_window`.
//!
//! Windows are aligned to Unix-time multiples of the period (`now` is Unix
//! nanoseconds): a `100/m` window starts at :00, `1/15m` at :00/:15/:30/:45,
//! `1/d` at 00:00 UTC. Both algorithms keep one [`WindowCounts`] per key.
//!
//! - Fixed window: at most COUNT units per aligned window. Across a boundary a
//!   client can get COUNT at the end of one window and COUNT at the start of
//!   the next: at most 2 × COUNT in any period-long interval.
//! - Sliding window: the two-window weighted counter. The estimate at `now`
//!   is `previous × (P − elapsed) / P + current`, where `elapsed` is the time
//!   since the current window began; a request is admitted while the
//!   estimate plus its cost stays within COUNT. It smooths the fixed window's
//!   boundary burst on typical traffic, but its guarantee is the same: any
//!   period-long interval overlaps at most two windows, each holding at most
//!   COUNT, so at most 2 × COUNT (approached only when the previous window's
//!   requests all came at its very end).
//!
//! Arithmetic is exact integer arithmetic (u128 for the weighted sums), so
//! `Retry-After` is never earlier than the moment the request would pass.

use super::{Algorithm, BucketState, Decision};
use crate::clock::Nanos;
use crate::config::Rate;

/// Per-key state of both window algorithms: the index of the window
/// `current` counts (`now / period`), and the count of the window before it.
/// The default (window 0, nothing counted) is a fresh bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowCounts {
    pub window: u64,
    pub current: u32,
    pub previous: u32,
}

/// `fixed_window`: at most COUNT units per aligned window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindow {
    period: Nanos,
    count: u64,
}

/// `sliding_window`: the two-window weighted counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindow {
    period: Nanos,
    count: u64,
}

/// The period in nanoseconds, never zero (config forbids zero periods; this
/// keeps the division safe regardless).
fn period_nanos(rate: Rate) -> Nanos {
    (rate.period.as_nanos().min(u128::from(u64::MAX)) as u64).max(1)
}

/// Window counts never exceed COUNT, which config bounds to `u32`.
fn count_u32(count: u64) -> u32 {
    count.min(u64::from(u32::MAX)) as u32
}

/// The window `now` falls in, never before the state's own window (a `now`
/// read slightly earlier by another thread is treated as the later time),
/// and `state` shifted to it.
#[inline]
fn align(state: &WindowCounts, now: Nanos, period: Nanos) -> WindowCounts {
    let window = (now / period).max(state.window);
    let (current, previous) = if window == state.window {
        (state.current, state.previous)
    } else if window == state.window + 1 {
        (0, state.current)
    } else {
        (0, 0)
    };
    WindowCounts {
        window,
        current,
        previous,
    }
}

/// Nanoseconds from `now` to the start of window `index`.
#[inline]
fn until_window(index: u64, period: Nanos, now: Nanos) -> Nanos {
    index.saturating_mul(period).saturating_sub(now)
}

const CLOSED: Decision = Decision::Deny {
    state: BucketState {
        remaining: 0,
        reset_after: 0,
    },
    retry_after: None,
};

impl FixedWindow {
    /// At most `rate.count` units per aligned window of `rate.period`.
    pub fn new(rate: Rate) -> FixedWindow {
        FixedWindow {
            period: period_nanos(rate),
            count: rate.count.min(u64::from(u32::MAX)),
        }
    }

    /// The decision for `cost` units against `state` (already aligned), and
    /// whether they fit.
    #[inline]
    fn decide(&self, state: &WindowCounts, now: Nanos, cost: u64) -> (Decision, bool) {
        if self.count == 0 {
            return (CLOSED, false);
        }
        let used = u64::from(state.current);
        let window_end = until_window(state.window + 1, self.period, now);
        if used + cost <= self.count {
            let decision = Decision::Allow(BucketState {
                remaining: self.count - used - cost,
                reset_after: window_end,
            });
            return (decision, true);
        }
        let decision = Decision::Deny {
            state: BucketState {
                remaining: self.count.saturating_sub(used),
                reset_after: if used > 0 { window_end } else { 0 },
            },
            // The next window starts empty; a cost above COUNT never fits.
            retry_after: (cost <= self.count).then_some(window_end),
        };
        (decision, false)
    }
}

impl Algorithm for FixedWindow {
    type State = WindowCounts;

    #[inline]
    fn acquire(&self, state: &mut WindowCounts, now: Nanos, cost: u64) -> Decision {
        let aligned = align(state, now, self.period);
        let (decision, fits) = self.decide(&aligned, now, cost);
        if fits {
            *state = WindowCounts {
                window: aligned.window,
                current: count_u32(u64::from(aligned.current) + cost),
                previous: 0,
            };
        }
        decision
    }

    fn peek(&self, state: &WindowCounts, now: Nanos, cost: u64) -> Decision {
        let aligned = align(state, now, self.period);
        match self.decide(&aligned, now, cost) {
            (Decision::Allow(_), _) => {
                let used = u64::from(aligned.current);
                Decision::Allow(BucketState {
                    remaining: self.count - used,
                    reset_after: if used > 0 {
                        until_window(aligned.window + 1, self.period, now)
                    } else {
                        0
                    },
                })
            }
            (deny, _) => deny,
        }
    }

    fn refund(&self, state: &mut WindowCounts, now: Nanos, cost: u64) {
        if state.window == (now / self.period).max(state.window) {
            state.current = state.current.saturating_sub(count_u32(cost));
        }
    }

    #[inline]
    fn is_fresh(&self, state: &WindowCounts, now: Nanos) -> bool {
        state.current == 0 || state.window < now / self.period
    }

    fn capacity(&self) -> u64 {
        self.count
    }
}

impl SlidingWindow {
    /// At most `rate.count` units in the weighted two-window estimate.
    pub fn new(rate: Rate) -> SlidingWindow {
        SlidingWindow {
            period: period_nanos(rate),
            count: rate.count.min(u64::from(u32::MAX)),
        }
    }

    /// `estimate × P` for an aligned state at `now`: the previous window's
    /// count weighted by the share of it still inside the sliding period,
    /// plus the current count, all scaled by P to stay in integers.
    #[inline]
    fn scaled_estimate(&self, state: &WindowCounts, now: Nanos) -> u128 {
        let period = u128::from(self.period);
        let elapsed =
            u128::from(now.saturating_sub(state.window.saturating_mul(self.period))).min(period);
        u128::from(state.previous) * (period - elapsed) + u128::from(state.current) * period
    }

    /// Whole units available at `now`.
    #[inline]
    fn remaining(&self, state: &WindowCounts, now: Nanos) -> u64 {
        let capacity = u128::from(self.count) * u128::from(self.period);
        let free = capacity.saturating_sub(self.scaled_estimate(state, now));
        (free / u128::from(self.period)) as u64
    }

    /// Time until the estimate is back to zero (the bucket full again).
    #[inline]
    fn reset_after(&self, state: &WindowCounts, now: Nanos) -> Nanos {
        if state.current > 0 {
            // `current` becomes the previous window, and fades out over it.
            until_window(state.window + 2, self.period, now)
        } else if state.previous > 0 {
            until_window(state.window + 1, self.period, now)
        } else {
            0
        }
    }

    /// The earliest time from `now` at which `cost` units fit, if nothing
    /// else arrives; `None` when they never will.
    fn retry_after(&self, state: &WindowCounts, now: Nanos, cost: u64) -> Option<Nanos> {
        if cost > self.count {
            return None;
        }
        let period = u128::from(self.period);
        let window_start = state.window.saturating_mul(self.period);
        // Later in this window: previous × (P − e) ≤ (COUNT − current − cost) × P,
        // so e ≥ P − ⌊(COUNT − current − cost) × P / previous⌋.
        if let Some(room) = self
            .count
            .checked_sub(u64::from(state.current) + cost)
            .filter(|_| state.previous > 0)
        {
            let needed =
                period - (u128::from(room) * period / u128::from(state.previous)).min(period);
            if needed < period {
                let at = window_start.saturating_add(needed as Nanos);
                return Some(at.saturating_sub(now));
            }
        }
        // In the next window, where this window's count is the previous one:
        // current × (P − e) ≤ (COUNT − cost) × P.
        let room = u128::from(self.count - cost);
        let needed = if state.current == 0 {
            0
        } else {
            period - (room * period / u128::from(state.current)).min(period)
        };
        let at = window_start
            .saturating_add(self.period)
            .saturating_add(needed as Nanos);
        Some(at.saturating_sub(now))
    }

    /// The decision for `cost` units against an aligned state.
    #[inline]
    fn decide(&self, state: &WindowCounts, now: Nanos, cost: u64) -> (Decision, bool) {
        if self.count == 0 {
            return (CLOSED, false);
        }
        let period = u128::from(self.period);
        let after = self.scaled_estimate(state, now) + u128::from(cost) * period;
        if after <= u128::from(self.count) * period {
            let taken = WindowCounts {
                current: count_u32(u64::from(state.current) + cost),
                ..*state
            };
            let decision = Decision::Allow(BucketState {
                remaining: self.remaining(&taken, now),
                reset_after: self.reset_after(&taken, now),
            });
            return (decision, true);
        }
        let decision = Decision::Deny {
            state: BucketState {
                remaining: self.remaining(state, now),
                reset_after: self.reset_after(state, now),
            },
            retry_after: self.retry_after(state, now, cost),
        };
        (decision, false)
    }
}

impl Algorithm for SlidingWindow {
    type State = WindowCounts;

    #[inline]
    fn acquire(&self, state: &mut WindowCounts, now: Nanos, cost: u64) -> Decision {
        let aligned = align(state, now, self.period);
        let (decision, fits) = self.decide(&aligned, now, cost);
        if fits {
            *state = WindowCounts {
                current: count_u32(u64::from(aligned.current) + cost),
                ..aligned
            };
        }
        decision
    }

    fn peek(&self, state: &WindowCounts, now: Nanos, cost: u64) -> Decision {
        let aligned = align(state, now, self.period);
        match self.decide(&aligned, now, cost) {
            (Decision::Allow(_), _) => Decision::Allow(BucketState {
                remaining: self.remaining(&aligned, now),
                reset_after: self.reset_after(&aligned, now),
            }),
            (deny, _) => deny,
        }
    }

    fn refund(&self, state: &mut WindowCounts, now: Nanos, cost: u64) {
        if state.window == (now / self.period).max(state.window) {
            state.current = state.current.saturating_sub(count_u32(cost));
        }
    }

    #[inline]
    fn is_fresh(&self, state: &WindowCounts, now: Nanos) -> bool {
        let window = now / self.period;
        if state.window >= window {
            state.current == 0 && state.previous == 0
        } else if state.window + 1 == window {
            // Its current count is the previous window's from now on.
            state.current == 0
        } else {
            true
        }
    }

    fn capacity(&self) -> u64 {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const SEC: Nanos = 1_000_000_000;

    fn rate(count: u64, secs: u64) -> Rate {
        Rate {
            count,
            period: Duration::from_secs(secs),
        }
    }

    fn admitted<A: Algorithm>(limit: &A, state: &mut A::State, now: Nanos, n: u64) -> u64 {
        (0..n)
            .filter(|_| limit.acquire(state, now, 1).is_allowed())
            .count() as u64
    }

    #[test]
    fn fixed_windows_align_to_the_clock_and_reset_at_their_end() {
        let limit = FixedWindow::new(rate(100, 60));
        let mut state = WindowCounts::default();
        // 12:00:45 — 15 s before the minute ends.
        let now = 1_795_000_000 * SEC + 45 * SEC - (1_795_000_000 % 60) * SEC;
        assert_eq!(now % (60 * SEC), 45 * SEC);
        assert_eq!(admitted(&limit, &mut state, now, 150), 100);
        match limit.acquire(&mut state, now, 1) {
            Decision::Deny { state, retry_after } => {
                assert_eq!(state.remaining, 0);
                assert_eq!(state.reset_after, 15 * SEC);
                assert_eq!(retry_after, Some(15 * SEC));
            }
            other => panic!("expected a denial, got {other:?}"),
        }
        // The classic boundary burst: a full window again right after :00.
        assert_eq!(admitted(&limit, &mut state, now + 15 * SEC, 150), 100);
    }

    #[test]
    fn fixed_window_remaining_counts_down_by_cost() {
        let limit = FixedWindow::new(rate(10, 10));
        let mut state = WindowCounts::default();
        let now = 100 * SEC + 4 * SEC;
        assert_eq!(
            limit.acquire(&mut state, now, 3),
            Decision::Allow(BucketState {
                remaining: 7,
                reset_after: 6 * SEC
            })
        );
        assert!(!limit.peek(&state, now, 8).is_allowed());
        assert_eq!(limit.peek(&state, now, 7).state().remaining, 7);
        limit.refund(&mut state, now, 3);
        assert!(limit.is_fresh(&state, now));
    }

    #[test]
    fn sliding_window_weights_the_previous_window() {
        let limit = SlidingWindow::new(rate(10, 10));
        let mut state = WindowCounts::default();
        let start = 1_000 * SEC;
        assert_eq!(admitted(&limit, &mut state, start, 10), 10);
        // A quarter into the next window, 75% of the previous 10 still count:
        // 7.5, so two more fit (9.5), not three.
        let later = start + 12_500_000_000;
        assert_eq!(admitted(&limit, &mut state, later, 5), 2);
        match limit.peek(&state, later, 1) {
            Decision::Deny {
                state: s,
                retry_after,
            } => {
                assert_eq!(s.remaining, 0);
                // 10 × (P − e) + 3 × P ≤ 10 × P once e ≥ 3 s: at 1013 s.
                assert_eq!(retry_after, Some(1_013 * SEC - later));
                // Full again when the 2 current units have faded: at 1030 s.
                assert_eq!(s.reset_after, 1_030 * SEC - later);
            }
            other => panic!("expected a denial, got {other:?}"),
        }
        assert!(!limit.acquire(&mut state, 1_013 * SEC - 1, 1).is_allowed());
        assert!(limit.acquire(&mut state, 1_013 * SEC, 1).is_allowed());
    }

    #[test]
    fn sliding_window_freshness_means_nothing_counts_any_more() {
        let limit = SlidingWindow::new(rate(5, 10));
        let mut state = WindowCounts::default();
        limit.acquire(&mut state, 105 * SEC, 1);
        assert!(!limit.is_fresh(&state, 105 * SEC));
        assert!(!limit.is_fresh(&state, 115 * SEC));
        assert!(limit.is_fresh(&state, 120 * SEC));
    }

    #[test]
    fn closed_windows_never_admit_and_never_promise_a_retry() {
        for decision in [
            FixedWindow::new(rate(0, 60)).acquire(&mut WindowCounts::default(), SEC, 1),
            SlidingWindow::new(rate(0, 60)).acquire(&mut WindowCounts::default(), SEC, 1),
        ] {
            assert_eq!(decision, CLOSED);
        }
    }

    #[test]
    fn an_earlier_now_from_another_thread_never_lets_more_through() {
        let limit = FixedWindow::new(rate(2, 10));
        let mut state = WindowCounts::default();
        assert_eq!(admitted(&limit, &mut state, 20 * SEC, 2), 2);
        // A thread that read the clock just before the boundary.
        assert_eq!(admitted(&limit, &mut state, 20 * SEC - 1, 2), 0);
        let limit = SlidingWindow::new(rate(2, 10));
        let mut state = WindowCounts::default();
        assert_eq!(admitted(&limit, &mut state, 20 * SEC, 2), 2);
        assert_eq!(admitted(&limit, &mut state, 20 * SEC - 1, 2), 0);
    }
}
