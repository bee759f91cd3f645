//! The `sunset` schedule: a rule's limit falls step by step from its COUNT
//! (`from`) to `to` between `start` and `end`, to retire an old API version
//! gently (docs/identity-and-policy.md, "`sunset`").
//!
//! With `n = ceil((end − start) / step)` steps and `k = floor((t − start) /
//! step) + 1` steps taken at `t ≥ start`:
//!
//! ```text
//! COUNT(t) = floor(from − (from − to) × min(k, n) / n)
//! ```
//!
//! The first step is taken at `start` itself and the last (`COUNT = to`) at
//! `start + (n − 1) × step`, which is before `end` unless `step` divides the
//! span into one step. Before `start` the limit is unchanged. The capacity
//! (`burst`) scales the same way: `floor(capacity × COUNT(t) / from)` (and
//! stays as it is when `from` is 0, a route already closed). From `end` on, a
//! COUNT of 0 means the route is gone: 410.
//!
//! Pure arithmetic on Unix nanoseconds, exact in integers (`u128` for the
//! products), so callers pass `now` and tests are exact. The response
//! headers that announce a sunset are built by the policy, not here.

use std::time::Duration;

use crate::clock::Nanos;

/// Most steps a schedule may have (config refuses more): the runtime keeps
/// one slot per step for the limits it compiles when that step is reached.
/// Daily steps for 27 years, hourly ones for a year.
pub const MAX_STEPS: u64 = 10_000;

/// A rule's sunset, ready to answer "what is the limit now".
#[derive(Debug, Clone)]
pub struct SunsetSchedule {
    start: Nanos,
    end: Nanos,
    /// Length of a step in nanoseconds; at least 1.
    step: u64,
    /// `n`: at least 1.
    steps: u64,
    /// The rule's COUNT before the sunset.
    from: u64,
    /// The COUNT reached at the last step; at most `from`.
    to: u64,
    /// The rule's capacity before the sunset.
    capacity: u64,
}

impl SunsetSchedule {
    /// The schedule of a limit of COUNT `from` and capacity `capacity`
    /// falling to COUNT `to` (in the limit's period) from `start` to `end`,
    /// one step every `step`. Validation guarantees `start < end`, a
    /// non-zero step and `to ≤ from`; anything else is clamped rather than
    /// trusted.
    pub fn new(
        from: u64,
        capacity: u64,
        to: u64,
        start: Nanos,
        end: Nanos,
        step: Duration,
    ) -> SunsetSchedule {
        let step = u64::try_from(step.as_nanos()).unwrap_or(u64::MAX).max(1);
        let end = end.max(start.saturating_add(1));
        let span = end - start;
        let steps = span.div_ceil(step).max(1);
        SunsetSchedule {
            start,
            end,
            step,
            steps,
            from,
            to: to.min(from),
            capacity,
        }
    }

    /// When the first step is taken (Unix nanoseconds).
    pub fn start(&self) -> Nanos {
        self.start
    }

    /// When the sunset ends (Unix nanoseconds): the route is gone from here
    /// on if `to` is 0. Always after [`start`](Self::start).
    pub fn end(&self) -> Nanos {
        self.end
    }

    /// `n`, the number of steps from `from` down to `to`.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// 0 before `start`; `k` (1..=`n`) while the steps are taken; `n + 1`
    /// from `end` on. It changes exactly when [`count_at`](Self::count_at),
    /// [`capacity_at`](Self::capacity_at) or [`is_gone`](Self::is_gone) may
    /// change, so a caller may cache those per index.
    pub fn step_index(&self, now: Nanos) -> u64 {
        if now < self.start {
            0
        } else if now >= self.end {
            self.steps + 1
        } else {
            ((now - self.start) / self.step + 1).min(self.steps)
        }
    }

    /// The rule's COUNT at `now`.
    pub fn count_at(&self, now: Nanos) -> u64 {
        let taken = self.step_index(now).min(self.steps);
        // floor(from − x) = from − ceil(x), x = (from − to) × taken / n.
        let drop =
            (u128::from(self.from - self.to) * u128::from(taken)).div_ceil(u128::from(self.steps));
        // drop ≤ from − to, so it fits and the subtraction cannot underflow.
        self.from - u64::try_from(drop).unwrap_or(self.from - self.to)
    }

    /// The limit's capacity at `now`: scaled like the COUNT.
    pub fn capacity_at(&self, now: Nanos) -> u64 {
        if self.from == 0 {
            return self.capacity;
        }
        let count = self.count_at(now);
        let scaled = u128::from(self.capacity) * u128::from(count) / u128::from(self.from);
        u64::try_from(scaled).unwrap_or(self.capacity)
    }

    /// Whether the route is gone at `now` (from `end` on, with a COUNT of 0):
    /// requests get 410.
    pub fn is_gone(&self, now: Nanos) -> bool {
        now >= self.end && self.to == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;
    const DAY: u64 = 86_400 * SEC;
    /// 2026-12-01T00:00:00Z.
    const START: u64 = 1_796_083_200 * SEC;

    fn schedule(from: u64, capacity: u64, to: u64, days: u64, step: Duration) -> SunsetSchedule {
        SunsetSchedule::new(from, capacity, to, START, START + days * DAY, step)
    }

    fn day() -> Duration {
        Duration::from_secs(86_400)
    }

    #[test]
    fn the_count_falls_one_step_a_day_from_start() {
        // 100/d → 10/d over 10 days: 9 a day.
        let s = schedule(100, 100, 10, 10, day());
        assert_eq!(s.steps(), 10);
        assert_eq!(s.count_at(0), 100);
        assert_eq!(s.count_at(START - 1), 100);
        assert_eq!(s.step_index(START - 1), 0);
        // The first step is taken at start itself.
        assert_eq!(s.count_at(START), 91);
        assert_eq!(s.step_index(START), 1);
        assert_eq!(s.count_at(START + DAY - 1), 91);
        assert_eq!(s.count_at(START + DAY), 82);
        assert_eq!(s.count_at(START + 4 * DAY + 7 * SEC), 55);
        // The last step, n − 1 days after start, reaches `to`.
        assert_eq!(s.count_at(START + 9 * DAY - 1), 19);
        assert_eq!(s.count_at(START + 9 * DAY), 10);
        assert_eq!(s.step_index(START + 9 * DAY), 10);
        assert_eq!(s.count_at(START + 10 * DAY - 1), 10);
        assert_eq!(s.step_index(START + 10 * DAY - 1), 10);
        // At and after end: still `to`, not gone since to > 0.
        assert_eq!(s.count_at(START + 10 * DAY), 10);
        assert_eq!(s.step_index(START + 10 * DAY), 11);
        assert_eq!(s.count_at(u64::MAX), 10);
        assert!(!s.is_gone(u64::MAX));
    }

    #[test]
    fn counts_are_rounded_down() {
        // 100 → 0 in 3 steps: 66.67 → 66, 33.33 → 33, 0.
        let s = schedule(100, 100, 0, 3, day());
        assert_eq!(s.count_at(START), 66);
        assert_eq!(s.count_at(START + DAY), 33);
        assert_eq!(s.count_at(START + 2 * DAY), 0);
        assert_eq!(s.count_at(START + 3 * DAY), 0);
    }

    #[test]
    fn a_step_that_does_not_divide_the_span_rounds_the_steps_up() {
        // 10 days in steps of 3 days: n = ceil(10 / 3) = 4, taken at
        // start, +3d, +6d and +9d.
        let s = schedule(40, 40, 0, 10, Duration::from_secs(3 * 86_400));
        assert_eq!(s.steps(), 4);
        assert_eq!(s.count_at(START), 30);
        assert_eq!(s.count_at(START + 3 * DAY - 1), 30);
        assert_eq!(s.count_at(START + 3 * DAY), 20);
        assert_eq!(s.count_at(START + 6 * DAY), 10);
        assert_eq!(s.count_at(START + 9 * DAY), 0);
        assert_eq!(s.step_index(START + 9 * DAY), 4);
        assert!(!s.is_gone(START + 10 * DAY - 1));
        assert!(s.is_gone(START + 10 * DAY));
        assert_eq!(s.step_index(START + 10 * DAY), 5);
    }

    #[test]
    fn a_step_longer_than_the_span_is_one_step_at_start() {
        let s = schedule(50, 50, 5, 1, Duration::from_secs(7 * 86_400));
        assert_eq!(s.steps(), 1);
        assert_eq!(s.count_at(START - 1), 50);
        assert_eq!(s.count_at(START), 5);
    }

    #[test]
    fn the_capacity_scales_like_the_count() {
        // burst 20 on 100/d → 10/d over 10 days.
        let s = schedule(100, 20, 10, 10, day());
        assert_eq!(s.capacity_at(START - 1), 20);
        assert_eq!(s.capacity_at(START), 18); // 20 × 91 / 100 = 18.2
        assert_eq!(s.capacity_at(START + 4 * DAY), 11); // 20 × 55 / 100
        assert_eq!(s.capacity_at(START + 9 * DAY), 2); // 20 × 10 / 100
                                                       // Down to 0 with the COUNT.
        let s = schedule(100, 20, 0, 2, day());
        assert_eq!(s.capacity_at(START), 10);
        assert_eq!(s.capacity_at(START + DAY), 0);
        // A route that was closed keeps its capacity (its total allowance).
        let s = schedule(0, 5, 0, 2, day());
        assert_eq!(s.count_at(START + DAY), 0);
        assert_eq!(s.capacity_at(START + DAY), 5);
    }

    #[test]
    fn huge_counts_are_computed_exactly() {
        let s = schedule(u64::MAX, u64::MAX, 0, 3, day());
        assert_eq!(s.count_at(START), u64::MAX - u64::MAX.div_ceil(3));
        assert_eq!(s.count_at(START + 2 * DAY), 0);
        assert_eq!(s.capacity_at(START), s.count_at(START));
    }

    #[test]
    fn the_route_is_gone_only_from_end_with_a_count_of_0() {
        let s = schedule(100, 100, 0, 10, day());
        assert!(!s.is_gone(START + 9 * DAY));
        assert_eq!(s.count_at(START + 9 * DAY), 0);
        assert!(!s.is_gone(START + 10 * DAY - 1));
        assert!(s.is_gone(START + 10 * DAY));
        assert!(s.is_gone(u64::MAX));
    }
}
