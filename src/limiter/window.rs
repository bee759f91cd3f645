//! Window counters: `fixed_window` and `sliding_window`.
//!
//! Windows are aligned to Unix-time multiples of the period (`now` is Unix
//! nanoseconds): a `100/m` window starts at :00, `1/15m` at :00/:15/:30/:45,
//! `1/d` at 00:00 UTC. A fixed window may follow a time zone's calendar
//! instead (`calendar`, docs/configuration.md): its windows are the
//! [`Calendar`]'s days, weeks, months or years, of uneven lengths, numbered
//! by the calendar; everything below holds with "window `w + 1`" meaning
//! the calendar's next window. Both algorithms keep one [`WindowCounts`]
//! per key.
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
//!
//! Debts ([`Algorithm::charge`]): a window's count may exceed COUNT, and the
//! excess is carried into the next windows, COUNT per window: unit `k` of the
//! count of window `w` (from its start) is in window `w + k / COUNT`. The
//! fixed window counts the units from the window `now` falls in, and admits
//! when they leave room; a debt of 1,500 units on a `1000/s` window leaves
//! the next window full and the one after it with 500 counted. The sliding
//! window carries the same way: at a boundary, at most COUNT of a window's
//! count becomes the previous window (weighted as it fades out), and the
//! excess is the new window's count. Without a charge no count exceeds COUNT
//! (fixed-window reservations aside), and carrying changes nothing.
//!
//! Refunds ([`Algorithm::refund`]) go back to the window the units were
//! taken in. Units taken before the current window count only as far as they
//! are carried into it (or, for the sliding window, sit in the previous
//! window); where in their window's count they were is not kept, so they are
//! taken to have been its first units, the least that can still count.
//!
//! Delay mode, fixed window: reservations spill into later windows. The
//! count may exceed COUNT: unit `k` of window `w`'s count is in window
//! `w + k / COUNT`, and aligning the state to a later window drops COUNT per
//! window passed (saturating) instead of resetting. A request that does not
//! fit in what is left of a window goes whole into the next one, the rest of
//! the window being padded (counted, never used); it passes when that window
//! starts. Padding only happens below a reservation, and `previous`, unused
//! by the fixed window otherwise, remembers the padding below the newest
//! reservation so that cancelling it restores the count exactly.
//!
//! The sliding window has no delay mode: `reserve` and `cancel` are the
//! defaults (`acquire` and `refund`), and config refuses
//! `on_limit = "delay"` with it.

use std::marker::PhantomData;

use super::calendar::Calendar;
use super::{scale_up, Algorithm, BucketState, Carry, Decision, HoldLimits, Rate};
use crate::clock::Nanos;

/// Per-key state of both window algorithms: the index of the window
/// `current` counts (`now / period`, or the calendar's), and the count of
/// the window before it.
/// The default (window 0, nothing counted) is a fresh bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowCounts {
    pub window: u64,
    pub current: u32,
    pub previous: u32,
}

/// COUNT units per aligned window of a period, counted as `K` says: the
/// configuration both window algorithms share (the algorithms themselves
/// are [`FixedWindow`] and [`SlidingWindow`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window<K> {
    period: Nanos,
    count: u64,
    /// The calendar a fixed window follows instead of Unix multiples of
    /// the period (which is then the calendar unit's nominal length).
    calendar: Option<Calendar>,
    counting: PhantomData<K>,
}

/// How [`FixedWindow`] counts: each aligned window on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fixed {}

/// How [`SlidingWindow`] counts: the previous window, weighted, and the
/// current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sliding {}

/// `fixed_window`: at most COUNT units per aligned window.
pub type FixedWindow = Window<Fixed>;

/// `sliding_window`: the two-window weighted counter.
pub type SlidingWindow = Window<Sliding>;

impl<K> Window<K> {
    /// At most `rate.count` units per window of `rate.period` (as `K`
    /// counts them).
    pub fn new(rate: Rate) -> Window<K> {
        Window {
            period: period_nanos(rate),
            count: rate.count.min(u64::from(u32::MAX)),
            calendar: None,
            counting: PhantomData,
        }
    }

    /// The calendar the windows follow, if any.
    pub fn calendar(&self) -> Option<Calendar> {
        self.calendar
    }

    /// The period in nanoseconds and COUNT: what a networked store's script
    /// steps with.
    pub fn window(&self) -> (Nanos, u64) {
        (self.period, self.count)
    }

    /// One of `instances` equal shares: COUNT divided, rounded up.
    pub fn share(&self, instances: u64) -> Window<K> {
        Window {
            count: self.count.div_ceil(instances.max(1)),
            ..*self
        }
    }
}

/// The period in nanoseconds, never zero (config forbids zero periods; this
/// keeps the division safe regardless).
fn period_nanos(rate: Rate) -> Nanos {
    (rate.period.as_nanos().min(u128::from(u64::MAX)) as u64).max(1)
}

/// A count stored in 32 bits (COUNT is at most `u32::MAX`, config checks it),
/// saturating: a debt beyond that many units is not kept.
fn count_u32(count: u64) -> u32 {
    count.min(u64::from(u32::MAX)) as u32
}

/// How many windows lie between the one `taken_at` fell in and `window`
/// (0 for a `taken_at` in it, or after `now`).
#[inline]
fn windows_since(window: u64, taken_at: Nanos, now: Nanos, period: Nanos) -> u64 {
    window.saturating_sub(taken_at.min(now) / period)
}

/// Counts carried over a reload (see [`Algorithm::carry_from`]): spent
/// units stay as they are, or scale with the COUNT to keep the share; the
/// state moves to the window `now` falls in under the new period.
fn carry_counts(
    aligned: WindowCounts,
    window: u64,
    from_count: u64,
    to_count: u64,
    carry: Carry,
) -> WindowCounts {
    let scale = |units: u32| match carry {
        Carry::KeepSpent => units,
        Carry::KeepShare => count_u32(scale_up(u64::from(units), to_count, from_count)),
    };
    WindowCounts {
        window,
        current: scale(aligned.current),
        previous: scale(aligned.previous),
    }
}

/// Nanoseconds from `now` to the start of window `index`.
#[inline]
fn until_window(index: u64, period: Nanos, now: Nanos) -> Nanos {
    index.saturating_mul(period).saturating_sub(now)
}

/// Where a fixed window's windows lie, as seen from one `now`: Unix
/// multiples of the period, or a calendar's window around `now` (so that
/// the request path asks the calendar's cache once). Small and passed by
/// value, so that it stays in registers: copies of a whole calendar frame
/// through the stack (stores read back as wider loads) were the calendar
/// decision's hottest instructions under `perf` in the
/// `decision/calendar_window` benchmark (benches/decision.rs).
#[derive(Clone, Copy)]
enum Windows {
    Unix(Nanos),
    Calendar {
        calendar: Calendar,
        index: u64,
        start: Nanos,
        end: Nanos,
    },
}

impl Windows {
    /// The window `t` falls in.
    #[inline(always)]
    fn index(self, t: Nanos) -> u64 {
        match self {
            Windows::Unix(period) => t / period,
            Windows::Calendar {
                calendar,
                index,
                start,
                end,
            } => {
                if start <= t && t < end {
                    index
                } else {
                    calendar.index_near(t)
                }
            }
        }
    }

    /// Nanoseconds from `now` to the start of window `index`.
    #[inline(always)]
    fn until(self, index: u64, now: Nanos) -> Nanos {
        match self {
            Windows::Unix(period) => until_window(index, period, now),
            Windows::Calendar {
                calendar,
                index: current,
                start,
                end,
            } => {
                let at = match index.wrapping_sub(current) {
                    0 => start,
                    1 => end,
                    _ => calendar.start_near(index),
                };
                at.saturating_sub(now)
            }
        }
    }
}

const CLOSED: Decision = Decision::Deny {
    state: BucketState {
        remaining: 0,
        reset_after: 0,
    },
    retry_after: None,
};

impl FixedWindow {
    /// COUNT units per window of `calendar` (a [`Rate`] whose period is the
    /// calendar unit's nominal length).
    pub fn on_calendar(rate: Rate, calendar: Calendar) -> FixedWindow {
        FixedWindow {
            calendar: Some(calendar),
            ..FixedWindow::new(rate)
        }
    }

    /// The window `now` falls in: its index, start and end (Unix
    /// nanoseconds). What headers and admin views show of it.
    pub fn window_at(&self, now: Nanos) -> (u64, Nanos, Nanos) {
        match self.calendar {
            None => {
                let index = now / self.period;
                let start = index.saturating_mul(self.period);
                (index, start, start.saturating_add(self.period))
            }
            Some(calendar) => {
                let frame = calendar.frame(now);
                (frame.index, frame.start, frame.end)
            }
        }
    }

    /// Where the windows lie around `now`.
    #[inline(always)]
    fn windows(&self, now: Nanos) -> Windows {
        match self.calendar {
            None => Windows::Unix(self.period),
            Some(calendar) => {
                let (index, start, end) = calendar.current(now);
                Windows::Calendar {
                    calendar,
                    index,
                    start,
                    end,
                }
            }
        }
    }

    /// `state` aligned to `now`: the window `now` falls in (never before the
    /// state's own), and the units counted from that window's start (beyond
    /// COUNT: reserved in the windows after it).
    #[inline]
    fn shift(&self, windows: Windows, state: &WindowCounts, now: Nanos) -> (u64, u64) {
        let window = windows.index(now).max(state.window);
        let passed = window - state.window;
        let used = u64::from(state.current).saturating_sub(passed.saturating_mul(self.count));
        (window, used)
    }

    /// Where `cost` more units go on top of `used` (counted from the start
    /// of the aligned window): how many windows after it, and the padding
    /// that fills the rest of the window before it when they do not fit in
    /// what is left of it. `cost ≤ COUNT`, COUNT > 0.
    #[inline]
    fn place(&self, used: u64, cost: u64) -> (u64, u64) {
        let offset = used % self.count;
        let pad = if offset + cost > self.count {
            self.count - offset
        } else {
            0
        };
        ((used + pad) / self.count, pad)
    }

    /// Requests of `cost` waiting in the windows after the aligned one, in
    /// units: the padding is not counted, so that with one cost per bucket
    /// this is `cost ×` the held requests, whatever COUNT is.
    #[inline]
    fn queued(&self, used: u64, cost: u64) -> u64 {
        let cost = cost.max(1);
        let later = used.saturating_sub(self.count);
        let whole_windows = later / self.count;
        let per_window = self.count / cost;
        let requests = whole_windows * per_window + (later % self.count).div_ceil(cost);
        requests.saturating_mul(cost)
    }

    /// Nanoseconds from `now` to the end of the last window holding units.
    #[inline]
    fn until_empty(&self, windows: Windows, window: u64, used: u64, now: Nanos) -> Nanos {
        if used == 0 {
            return 0;
        }
        let last = window.saturating_add((used - 1) / self.count);
        windows.until(last.saturating_add(1), now)
    }

    /// The decision for `cost` units against an aligned state, and whether
    /// they fit in the aligned window.
    #[inline]
    fn decide(
        &self,
        windows: Windows,
        window: u64,
        used: u64,
        now: Nanos,
        cost: u64,
    ) -> (Decision, bool) {
        if self.count == 0 {
            return (CLOSED, false);
        }
        if used + cost <= self.count {
            let decision = Decision::Allow(BucketState {
                remaining: self.count - used - cost,
                reset_after: windows.until(window + 1, now),
            });
            return (decision, true);
        }
        let decision = Decision::Deny {
            state: BucketState {
                remaining: self.count.saturating_sub(used),
                reset_after: self.until_empty(windows, window, used, now),
            },
            // The first window with room, behind whatever is reserved (the
            // next one when nothing is); a cost above COUNT never fits.
            retry_after: (cost <= self.count).then(|| {
                let (later, _) = self.place(used, cost);
                windows.until(window.saturating_add(later), now)
            }),
        };
        (decision, false)
    }
}

impl Algorithm for FixedWindow {
    type State = WindowCounts;

    #[inline]
    fn acquire(&self, state: &mut WindowCounts, now: Nanos, cost: u64) -> Decision {
        let windows = self.windows(now);
        let (window, used) = self.shift(windows, state, now);
        let (decision, fits) = self.decide(windows, window, used, now, cost);
        if fits {
            *state = WindowCounts {
                window,
                current: count_u32(used + cost),
                previous: 0,
            };
        }
        decision
    }

    fn peek(&self, state: &WindowCounts, now: Nanos, cost: u64) -> Decision {
        let windows = self.windows(now);
        let (window, used) = self.shift(windows, state, now);
        match self.decide(windows, window, used, now, cost) {
            (Decision::Allow(_), _) => Decision::Allow(BucketState {
                remaining: self.count - used,
                reset_after: self.until_empty(windows, window, used, now),
            }),
            (deny, _) => deny,
        }
    }

    /// Counts the units from the window `now` falls in (a debt when that
    /// goes beyond COUNT). The padding memory of a reservation is dropped (a
    /// later cancel then gives back less, never more).
    fn charge(&self, state: &mut WindowCounts, now: Nanos, units: u64) {
        if self.count == 0 || units == 0 {
            return;
        }
        let windows = self.windows(now);
        let (window, used) = self.shift(windows, state, now);
        *state = WindowCounts {
            window,
            current: count_u32(used.saturating_add(units)),
            previous: 0,
        };
    }

    /// Units taken `n` windows before the current one, counted from the
    /// start of their window, still count for all but `n × COUNT` of them:
    /// that part comes off the top of the count (so it is exact in the
    /// window they were taken in, and gives nothing back for a request
    /// admitted in an earlier window). Taking units off the top moves what
    /// was counted after them down: right for a debt, but a reservation in
    /// a later window (delay mode) would lose its place, so held requests
    /// are given back with [`Algorithm::cancel`].
    fn refund(&self, state: &mut WindowCounts, now: Nanos, units: u64, taken_at: Nanos) {
        let windows = self.windows(now);
        let (window, used) = self.shift(windows, state, now);
        let passed = window.saturating_sub(windows.index(taken_at.min(now)));
        let back = units
            .saturating_sub(passed.saturating_mul(self.count))
            .min(used);
        if back == 0 {
            return;
        }
        *state = WindowCounts {
            window,
            current: (used - back) as u32,
            previous: 0,
        };
    }

    #[inline]
    fn is_fresh(&self, state: &WindowCounts, now: Nanos) -> bool {
        self.shift(self.windows(now), state, now).1 == 0
    }

    fn capacity(&self) -> u64 {
        self.count
    }

    /// The units counted from the current window on (reservations in later
    /// windows included) are carried into the window `now` falls in under
    /// the new period; the padding memory is dropped (a later cancel then
    /// gives back less, never more).
    fn carry_from(&self, from: &FixedWindow, state: &mut WindowCounts, now: Nanos, carry: Carry) {
        let (_, units) = from.shift(from.windows(now), state, now);
        let aligned = WindowCounts {
            window: 0,
            current: count_u32(units),
            previous: 0,
        };
        let window = self.windows(now).index(now);
        *state = carry_counts(aligned, window, from.count, self.count, carry);
    }

    /// `Allow` exactly when [`Algorithm::acquire`] admits (the units fit in
    /// the current window). Otherwise the units go on top of the count,
    /// whole into the first window with room after the current one, and the
    /// request waits until that window starts. A `Hold` needs that wait
    /// `≤ max_wait` and `queued + cost ≤ max_queued`, where `queued` counts
    /// the units of the requests already held in later windows, padding
    /// excluded (per window of COUNT, `⌊COUNT / cost⌋` requests of `cost`).
    /// A `Deny` is [`Algorithm::peek`]'s: its `retry_after` is the start of
    /// that same window.
    fn reserve(
        &self,
        state: &mut WindowCounts,
        now: Nanos,
        cost: u64,
        limits: HoldLimits,
    ) -> Decision {
        let windows = self.windows(now);
        let (window, used) = self.shift(windows, state, now);
        let (decision, fits) = self.decide(windows, window, used, now, cost);
        if fits {
            *state = WindowCounts {
                window,
                current: count_u32(used + cost),
                previous: 0,
            };
            return decision;
        }
        if cost > self.count || self.count == 0 {
            return decision;
        }
        let (later, pad) = self.place(used, cost);
        let wait = windows.until(window.saturating_add(later), now);
        let current = used + pad + cost;
        if wait > limits.max_wait
            || self.queued(used, cost).saturating_add(cost) > limits.max_queued
            || current > u64::from(u32::MAX)
        {
            return decision;
        }
        *state = WindowCounts {
            window,
            current: current as u32,
            previous: pad as u32,
        };
        Decision::Hold {
            state: BucketState {
                remaining: 0,
                reset_after: self.until_empty(windows, window, current, now),
            },
            wait,
        }
    }

    /// A window's count is all that limits it, so the `cost` units can be
    /// taken off the top of the count whenever the top of the count lies in
    /// the reservation's window (`at`'s) and that window has not passed:
    /// nothing is reserved in a later window, and the requests reserved in
    /// the same window keep their instant (its start). That covers the last
    /// reservation, exactly, padding included. Otherwise (something was
    /// reserved in a later window, or the window is over) nothing is given
    /// back. Once `now` is past `at` nothing is either.
    fn cancel(&self, state: &mut WindowCounts, now: Nanos, cost: u64, at: Nanos) {
        if self.count == 0 || now > at {
            return;
        }
        let windows = self.windows(now);
        let (window, used) = self.shift(windows, state, now);
        let Some(later) = windows.index(at).checked_sub(window) else {
            return;
        };
        let floor = later.saturating_mul(self.count);
        let top = floor.saturating_add(self.count);
        if used > top || used < floor.saturating_add(cost) {
            return;
        }
        let mut current = used - cost;
        if current == floor {
            // It opened its window: the padding below it is its own.
            current = current.saturating_sub(u64::from(state.previous));
        }
        *state = WindowCounts {
            window,
            current: current as u32,
            previous: 0,
        };
    }
}

impl SlidingWindow {
    /// `state` moved to the window `now` falls in (never before its own: a
    /// `now` read slightly earlier by another thread counts as the later
    /// time), carrying a debt: each window passed takes COUNT off the count,
    /// and the last window passed leaves at most COUNT as the previous one.
    #[inline]
    fn align(&self, state: &WindowCounts, now: Nanos) -> WindowCounts {
        let window = (now / self.period).max(state.window);
        let passed = window - state.window;
        if passed == 0 {
            return *state;
        }
        let total = u64::from(state.current);
        let (current, previous) = if total <= self.count {
            // No debt: nothing carried.
            (0, if passed == 1 { total } else { 0 })
        } else {
            (
                total.saturating_sub(passed.saturating_mul(self.count)),
                total
                    .saturating_sub((passed - 1).saturating_mul(self.count))
                    .min(self.count),
            )
        };
        WindowCounts {
            window,
            current: current as u32,
            previous: previous as u32,
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
        if u64::from(state.current) > self.count {
            return self.reset_after_debt(state, now);
        }
        if state.current > 0 {
            // `current` becomes the previous window, and fades out over it.
            until_window(state.window + 2, self.period, now)
        } else if state.previous > 0 {
            until_window(state.window + 1, self.period, now)
        } else {
            0
        }
    }

    /// [`SlidingWindow::reset_after`] of a count beyond COUNT: carried over
    /// as many windows as it holds COUNTs, then fading out as the previous
    /// window.
    #[cold]
    fn reset_after_debt(&self, state: &WindowCounts, now: Nanos) -> Nanos {
        let holding = u64::from(state.current).div_ceil(self.count.max(1));
        until_window(
            state.window.saturating_add(holding).saturating_add(1),
            self.period,
            now,
        )
    }

    /// The first instant in window `index` (whose previous window counted
    /// `previous`, and which counts `current`) at which `cost` more units
    /// fit: `previous × (P − e) ≤ (COUNT − current − cost) × P`, so
    /// `e ≥ P − ⌊(COUNT − current − cost) × P / previous⌋`. `None` when they
    /// do not fit before the window ends.
    fn fits_in(&self, index: u64, previous: u64, current: u64, cost: u64) -> Option<Nanos> {
        let room = self.count.checked_sub(current.checked_add(cost)?)?;
        let start = index.saturating_mul(self.period);
        if previous == 0 {
            return Some(start);
        }
        let period = u128::from(self.period);
        let needed = period - (u128::from(room) * period / u128::from(previous)).min(period);
        (needed < period).then(|| start.saturating_add(needed as Nanos))
    }

    /// The earliest time from `now` at which `cost` units fit, if nothing
    /// else arrives; `None` when they never will. Later in this window, or
    /// else in the first window whose carried count leaves room for them, or
    /// at the latest the one after it (where nothing is carried any more and
    /// the previous window holds at most `COUNT − cost`).
    fn retry_after(&self, state: &WindowCounts, now: Nanos, cost: u64) -> Option<Nanos> {
        if cost > self.count {
            return None;
        }
        let (previous, total) = (u64::from(state.previous), u64::from(state.current));
        if let Some(at) = self.fits_in(state.window, previous, total, cost) {
            return Some(at.saturating_sub(now));
        }
        // Window `w + j` counts `total − j × COUNT` (carried) and follows one
        // that counted `total − (j − 1) × COUNT`, at most COUNT of it.
        let first = (total + cost)
            .saturating_sub(self.count)
            .div_ceil(self.count)
            .max(1);
        let last = first.saturating_add(1);
        let at = (first..=last)
            .find_map(|j| {
                let carried_before = total.saturating_sub((j - 1).saturating_mul(self.count));
                self.fits_in(
                    state.window.saturating_add(j),
                    carried_before.min(self.count),
                    total.saturating_sub(j.saturating_mul(self.count)),
                    cost,
                )
            })
            .unwrap_or_else(|| {
                state
                    .window
                    .saturating_add(last)
                    .saturating_mul(self.period)
            });
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
        let capacity = u128::from(self.count) * period;
        if after <= capacity {
            let taken = WindowCounts {
                current: count_u32(u64::from(state.current) + cost),
                ..*state
            };
            let decision = Decision::Allow(BucketState {
                // `after` is the estimate with these units taken.
                remaining: ((capacity - after) / period) as u64,
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
        let aligned = self.align(state, now);
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
        let aligned = self.align(state, now);
        match self.decide(&aligned, now, cost) {
            (Decision::Allow(_), _) => Decision::Allow(BucketState {
                remaining: self.remaining(&aligned, now),
                reset_after: self.reset_after(&aligned, now),
            }),
            (deny, _) => deny,
        }
    }

    /// Counts the units in the current window (a debt when the estimate
    /// goes beyond COUNT; see the module doc for how it is carried).
    fn charge(&self, state: &mut WindowCounts, now: Nanos, units: u64) {
        if self.count == 0 || units == 0 {
            return;
        }
        let aligned = self.align(state, now);
        *state = WindowCounts {
            current: count_u32(u64::from(aligned.current).saturating_add(units)),
            ..aligned
        };
    }

    /// Units taken in the current window come off its count. Units taken
    /// `n ≥ 1` windows before it, counted from the start of their window,
    /// are at positions `0..units` of that window's count: the part of them
    /// at positions `(n − 1) × COUNT .. n × COUNT` is in the previous
    /// window's count, the part beyond is carried in the current one. Had
    /// they been later in their window's count, more of them would still
    /// count and less would sit in the fading previous window, so this
    /// never gives back more than they still weigh; it is exact for units
    /// admitted by `acquire` (a window's admissions fit in its first COUNT).
    fn refund(&self, state: &mut WindowCounts, now: Nanos, units: u64, taken_at: Nanos) {
        let aligned = self.align(state, now);
        let passed = windows_since(aligned.window, taken_at, now, self.period);
        let (from_previous, from_current) = if passed == 0 {
            (0, units)
        } else {
            let before = (passed - 1).saturating_mul(self.count);
            (
                units.saturating_sub(before).min(self.count),
                units.saturating_sub(passed.saturating_mul(self.count)),
            )
        };
        let current = u64::from(aligned.current).saturating_sub(from_current);
        let previous = u64::from(aligned.previous).saturating_sub(from_previous);
        *state = WindowCounts {
            window: aligned.window,
            current: current as u32,
            previous: previous as u32,
        };
    }

    #[inline]
    fn is_fresh(&self, state: &WindowCounts, now: Nanos) -> bool {
        let aligned = self.align(state, now);
        aligned.current == 0 && aligned.previous == 0
    }

    fn capacity(&self) -> u64 {
        self.count
    }

    /// Both windows' counts are carried; with a new period they weigh as
    /// the new period's current and previous windows (an approximation
    /// that keeps the estimate where it was at a window start).
    fn carry_from(&self, from: &SlidingWindow, state: &mut WindowCounts, now: Nanos, carry: Carry) {
        let aligned = from.align(state, now);
        *state = carry_counts(aligned, now / self.period, from.count, self.count, carry);
    }
}

#[cfg(test)]
mod calendar_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{admitted, rate, SEC};

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
        limit.refund(&mut state, now, 3, now);
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

    const MS: Nanos = 1_000_000;

    fn limits(max_wait: Nanos, max_queued: u64) -> HoldLimits {
        HoldLimits {
            max_wait,
            max_queued,
        }
    }

    #[test]
    fn fixed_window_holds_spill_into_the_next_windows_in_arrival_order() {
        // 3 per 10 s; 4 s into the window starting at 100 s.
        let limit = FixedWindow::new(rate(3, 10));
        let now = 104 * SEC;
        let hold = limits(60 * SEC, 100);
        let mut state = WindowCounts::default();
        let decisions: Vec<_> = (0..8)
            .map(|_| limit.reserve(&mut state, now, 1, hold))
            .collect();
        assert_eq!(
            decisions.iter().map(Decision::wait).collect::<Vec<_>>(),
            [0, 0, 0, 6 * SEC, 6 * SEC, 6 * SEC, 16 * SEC, 16 * SEC]
        );
        // Those passing at once decide as `acquire` does.
        let mut plain = WindowCounts::default();
        for decision in &decisions[..3] {
            assert_eq!(*decision, limit.acquire(&mut plain, now, 1));
        }
        assert_eq!(
            decisions[7],
            Decision::Hold {
                state: BucketState {
                    remaining: 0,
                    // Empty once the window starting at 120 s is over.
                    reset_after: 26 * SEC
                },
                wait: 16 * SEC
            }
        );
        // Nothing passes without waiting until the 130 s window, and the
        // state is not fresh before then.
        match limit.acquire(&mut state, 111 * SEC, 1) {
            Decision::Deny {
                state: s,
                retry_after,
            } => {
                assert_eq!(s.remaining, 0);
                assert_eq!(retry_after, Some(9 * SEC));
                assert_eq!(s.reset_after, 19 * SEC);
            }
            other => panic!("expected a denial, got {other:?}"),
        }
        assert!(!limit.is_fresh(&state, 130 * SEC - 1));
        assert!(limit.is_fresh(&state, 130 * SEC));
        // In the 120 s window, its two held units are counted: one more fits.
        assert_eq!(admitted(&limit, &mut state, 125 * SEC, 3), 1);
    }

    #[test]
    fn fixed_window_a_request_that_does_not_fit_goes_whole_into_the_next_window() {
        // 5 per 10 s, cost 2: two per window, the fifth unit is padding.
        let limit = FixedWindow::new(rate(5, 10));
        let now = 100 * SEC;
        // max_queue 3 of cost 2.
        let hold = limits(60 * SEC, 6);
        let mut state = WindowCounts::default();
        let waits: Vec<_> = (0..5)
            .map(|_| limit.reserve(&mut state, now, 2, hold))
            .take_while(Decision::is_allowed)
            .map(|d| d.wait())
            .collect();
        // Two at once, three held (two in the next window, one in the one
        // after): the padding is not counted as waiting.
        assert_eq!(waits, [0, 0, 10 * SEC, 10 * SEC, 20 * SEC]);
        match limit.reserve(&mut state, now, 2, hold) {
            Decision::Deny { retry_after, .. } => assert_eq!(retry_after, Some(20 * SEC)),
            other => panic!("expected a denial, got {other:?}"),
        }
        // Padded to 5, then 2 + 2 (+1 padding), then 2.
        assert_eq!(state.current, 12);
    }

    #[test]
    fn fixed_window_refuses_a_hold_beyond_max_wait_taking_nothing() {
        let limit = FixedWindow::new(rate(1, 10));
        let now = 101 * SEC;
        let hold = limits(15 * SEC, 100);
        let mut state = WindowCounts::default();
        assert!(limit.reserve(&mut state, now, 1, hold).is_allowed());
        assert_eq!(limit.reserve(&mut state, now, 1, hold).wait(), 9 * SEC);
        let before = state;
        let denied = limit.reserve(&mut state, now, 1, hold);
        assert_eq!(denied, limit.peek(&state, now, 1));
        assert_eq!(denied.state().remaining, 0);
        assert!(matches!(
            denied,
            Decision::Deny {
                retry_after: Some(r),
                ..
            } if r == 19 * SEC
        ));
        assert_eq!(state, before);
    }

    #[test]
    fn fixed_window_cancelling_the_last_restores_exactly_padding_included() {
        let limit = FixedWindow::new(rate(5, 10));
        let now = 100 * SEC;
        let hold = limits(60 * SEC, 100);
        let mut state = WindowCounts::default();
        // 3 units now, then a cost-3 request padded into the next window.
        limit.reserve(&mut state, now, 3, hold);
        let before = state;
        let wait = limit.reserve(&mut state, now, 3, hold).wait();
        assert_eq!((wait, state.current, state.previous), (10 * SEC, 8, 2));
        limit.cancel(&mut state, now + MS, 3, now + wait);
        assert_eq!(state.current, before.current);
        // Room again for two units now.
        assert!(limit.reserve(&mut state, now + MS, 2, hold).is_allowed());
        // Cancelling after the instant gives nothing back.
        let used = state;
        limit.cancel(&mut state, now + MS + 1, 2, now + MS);
        assert_eq!(state, used);
    }

    #[test]
    fn fixed_window_cancel_gives_back_only_from_the_last_reserved_window() {
        let limit = FixedWindow::new(rate(2, 10));
        let now = 100 * SEC;
        let hold = limits(60 * SEC, 100);
        let mut state = WindowCounts::default();
        limit.reserve(&mut state, now, 2, hold);
        let waits: Vec<_> = (0..3)
            .map(|_| limit.reserve(&mut state, now, 1, hold).wait())
            .collect();
        assert_eq!(waits, [10 * SEC, 10 * SEC, 20 * SEC]);
        let full = state;
        // One of the 110 s window, with a hold in the 120 s one after it:
        // giving its unit back would need a hole in the count.
        limit.cancel(&mut state, now, 1, now + waits[0]);
        assert_eq!(state, full);
        // The one in the 120 s window: exactly as before it.
        limit.cancel(&mut state, now, 1, now + waits[2]);
        assert_eq!(state.current, 4);
        // Now the 110 s window is the last: either of its holds can go (the
        // other keeps its instant), and the next request takes the place.
        limit.cancel(&mut state, now, 1, now + waits[0]);
        assert_eq!(state.current, 3);
        assert_eq!(limit.reserve(&mut state, now, 1, hold).wait(), 10 * SEC);
        assert_eq!(limit.reserve(&mut state, now, 1, hold).wait(), 20 * SEC);
    }

    #[test]
    fn fixed_window_reservations_count_down_by_count_per_window_passed() {
        let limit = FixedWindow::new(rate(2, 10));
        let hold = limits(60 * SEC, 100);
        let mut state = WindowCounts::default();
        for _ in 0..7 {
            limit.reserve(&mut state, 100 * SEC, 1, hold);
        }
        assert_eq!(state.current, 7);
        // At 120 s two windows have passed: 3 units left, 1 in the window
        // after.
        assert_eq!(limit.peek(&state, 120 * SEC, 1).state().remaining, 0);
        assert_eq!(
            limit.reserve(&mut state, 125 * SEC, 1, hold).wait(),
            5 * SEC
        );
        assert_eq!((state.window, state.current), (12, 4));
        assert!(limit.is_fresh(&state, 140 * SEC));
        assert!(!limit.is_fresh(&state, 140 * SEC - 1));
    }

    #[test]
    fn sliding_window_has_no_delay_mode() {
        let limit = SlidingWindow::new(rate(2, 10));
        let (mut held, mut plain) = (WindowCounts::default(), WindowCounts::default());
        for at in [100, 100, 100, 105, 111, 111] {
            assert_eq!(
                limit.reserve(&mut held, at * SEC, 1, limits(u64::MAX, u64::MAX)),
                limit.acquire(&mut plain, at * SEC, 1)
            );
        }
    }

    #[test]
    fn fixed_window_a_debt_carries_into_the_next_windows() {
        // 1000/s; 400 ms into the window starting at 100 s.
        let limit = FixedWindow::new(rate(1000, 1));
        let mut state = WindowCounts::default();
        let now = 100 * SEC + 400 * MS;
        assert!(limit.acquire(&mut state, now, 1).is_allowed());
        // 2,499 more: 2,500 counted, 1,500 of them beyond COUNT.
        limit.charge(&mut state, now, 2_499);
        let denied = Decision::Deny {
            state: BucketState {
                remaining: 0,
                // The window starting at 102 s still holds 500.
                reset_after: 2_600 * MS,
            },
            // 101 s starts with 1,500 counted, 102 s with 500.
            retry_after: Some(1_600 * MS),
        };
        assert_eq!(limit.peek(&state, now, 1), denied);
        assert_eq!(limit.acquire(&mut state, now, 1), denied);
        assert_eq!(admitted(&limit, &mut state, 101 * SEC + 500 * MS, 10), 0);
        assert!(!limit.is_fresh(&state, 103 * SEC - 1));
        assert!(limit.is_fresh(&state, 103 * SEC));
        assert_eq!(admitted(&limit, &mut state, 102 * SEC, 1_000), 500);
    }

    #[test]
    fn fixed_window_a_refund_goes_back_to_the_window_it_was_taken_in() {
        let limit = FixedWindow::new(rate(10, 10));
        let mut state = WindowCounts::default();
        assert_eq!(admitted(&limit, &mut state, 101 * SEC, 3), 3);
        // In the same window: exact.
        limit.refund(&mut state, 105 * SEC, 1, 101 * SEC);
        assert_eq!(limit.peek(&state, 105 * SEC, 1).state().remaining, 8);
        // In the next window those units no longer count: the new window
        // gets nothing back.
        assert_eq!(admitted(&limit, &mut state, 111 * SEC, 20), 10);
        limit.refund(&mut state, 112 * SEC, 2, 101 * SEC);
        assert!(!limit.peek(&state, 112 * SEC, 1).is_allowed());
    }

    #[test]
    fn fixed_window_a_late_refund_of_a_charge_reduces_the_carried_debt() {
        let limit = FixedWindow::new(rate(10, 10));
        let mut state = WindowCounts::default();
        assert_eq!(admitted(&limit, &mut state, 101 * SEC, 4), 4);
        // 25 counted: 15 carried into the 110 s window, 5 into 120 s.
        limit.charge(&mut state, 102 * SEC, 21);
        assert!(!limit.peek(&state, 119 * SEC, 1).is_allowed());
        assert_eq!(limit.peek(&state, 120 * SEC, 1).state().remaining, 5);
        // Given back at 111 s: taken as the first 21 units of their window,
        // 11 of them are carried into this one (they were units 4..25, so
        // 15 are; the 4 before them cannot be told apart).
        limit.refund(&mut state, 111 * SEC, 21, 102 * SEC);
        assert_eq!(limit.peek(&state, 111 * SEC, 1).state().remaining, 6);
        assert!(limit.is_fresh(&state, 120 * SEC));
        // The 4 admitted at 101 s: nothing left to give back.
        let before = state;
        limit.refund(&mut state, 111 * SEC, 4, 101 * SEC);
        assert_eq!(state, before);
    }

    #[test]
    fn window_charges_saturate_and_closed_windows_take_nothing() {
        let limit = FixedWindow::new(rate(10, 10));
        let mut state = WindowCounts::default();
        limit.charge(&mut state, 100 * SEC, u64::MAX);
        limit.charge(&mut state, 100 * SEC, u64::MAX);
        assert_eq!(state.current, u32::MAX);
        assert!(matches!(
            limit.acquire(&mut state, 100 * SEC, 1),
            Decision::Deny {
                retry_after: Some(_),
                ..
            }
        ));
        let limit = SlidingWindow::new(rate(10, 10));
        let mut state = WindowCounts::default();
        limit.charge(&mut state, 100 * SEC, u64::MAX);
        assert_eq!(state.current, u32::MAX);
        assert!(!limit.acquire(&mut state, 100 * SEC, 1).is_allowed());
        let (fixed, sliding) = (
            FixedWindow::new(rate(0, 10)),
            SlidingWindow::new(rate(0, 10)),
        );
        let mut state = WindowCounts::default();
        fixed.charge(&mut state, SEC, 5);
        sliding.charge(&mut state, SEC, 5);
        assert_eq!(state, WindowCounts::default());
    }

    #[test]
    fn sliding_window_a_debt_is_carried_then_fades() {
        let limit = SlidingWindow::new(rate(10, 10));
        let mut state = WindowCounts::default();
        limit.charge(&mut state, 100 * SEC, 25);
        // 110 s: 10 fade out over the window, 15 are carried; 120 s: 10
        // fade, 5 are carried: 10 × (P − e) / P + 5 + 1 ≤ 10 from e = 6 s.
        let denied = Decision::Deny {
            state: BucketState {
                remaining: 0,
                // 130 s: the last 5 fade out over the window.
                reset_after: 40 * SEC,
            },
            retry_after: Some(26 * SEC),
        };
        assert_eq!(limit.peek(&state, 100 * SEC, 1), denied);
        assert_eq!(limit.acquire(&mut state, 100 * SEC, 1), denied);
        assert!(!limit.peek(&state, 126 * SEC - 1, 1).is_allowed());
        assert!(limit.peek(&state, 126 * SEC, 1).is_allowed());
        // 135 s: 5 × 0.5 weigh 2.5.
        assert_eq!(limit.peek(&state, 135 * SEC, 1).state().remaining, 7);
        assert!(!limit.is_fresh(&state, 140 * SEC - 1));
        assert!(limit.is_fresh(&state, 140 * SEC));
    }

    #[test]
    fn sliding_window_a_refund_in_the_next_window_comes_out_of_the_previous_count() {
        let limit = SlidingWindow::new(rate(10, 10));
        let mut state = WindowCounts::default();
        assert_eq!(admitted(&limit, &mut state, 100 * SEC, 8), 8);
        // 112.5 s: the 8 weigh 6.
        let later = 112_500 * MS;
        assert_eq!(limit.peek(&state, later, 1).state().remaining, 4);
        limit.refund(&mut state, later, 3, 100 * SEC);
        // Exactly as if only 5 had been taken: they weigh 3.75.
        let mut never = WindowCounts::default();
        admitted(&limit, &mut never, 100 * SEC, 5);
        for t in [later, 115 * SEC, 120 * SEC - 1, 120 * SEC] {
            for cost in [1, 7] {
                assert_eq!(limit.peek(&state, t, cost), limit.peek(&never, t, cost));
            }
        }
        assert_eq!(limit.peek(&state, later, 1).state().remaining, 6);
        // Two windows on, nothing of them counts: nothing comes back.
        assert_eq!(admitted(&limit, &mut state, 125 * SEC, 20), 10);
        limit.refund(&mut state, 125 * SEC, 5, 100 * SEC);
        assert!(!limit.peek(&state, 125 * SEC, 1).is_allowed());
    }

    #[test]
    fn sliding_window_a_late_refund_of_a_charge_reduces_the_carried_debt() {
        let limit = SlidingWindow::new(rate(10, 10));
        let mut state = WindowCounts::default();
        limit.charge(&mut state, 100 * SEC, 25);
        let mut copy = state;
        // At 115 s the 25 are 10 fading and 15 carried: all come back.
        limit.refund(&mut copy, 115 * SEC, 25, 100 * SEC);
        assert!(limit.is_fresh(&copy, 115 * SEC));
        // At 125 s, 10 of 20 given back fade (all of what still fades),
        // none is carried: the 5 carried stay.
        limit.refund(&mut state, 125 * SEC, 20, 100 * SEC);
        assert_eq!((state.window, state.previous, state.current), (12, 0, 5));
        assert_eq!(limit.peek(&state, 125 * SEC, 1).state().remaining, 5);
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
