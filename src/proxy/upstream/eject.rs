//! Passive checks' timer (docs/upstreams.md, "Passive checks"): a server
//! taken out for `for`, doubled each time it is taken out again within
//! five minutes of its last ejection's end, at most ten times `for`.
//! On the proxy's clock, passed in, so tests are exact.

use std::time::Duration;

use crate::clock::Nanos;

/// Within this long of an ejection's end, the next one lasts longer.
pub const REPEAT_WITHIN: Duration = Duration::from_secs(300);

/// An ejection lasts at most this many times `for`.
pub const MAX_FACTOR: u64 = 10;

/// A server's ejections so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ejections {
    /// When the last ejection ends (or ended); 0: never ejected.
    until: Nanos,
    /// How many times `for` the last one lasted.
    factor: u64,
}

impl Ejections {
    /// Takes the server out at `now` for `base` (or longer, when it was
    /// out until recently); returns when it comes back.
    pub fn eject(&mut self, now: Nanos, base: Duration) -> Nanos {
        let repeat =
            self.until != 0 && now.saturating_sub(self.until) <= REPEAT_WITHIN.as_nanos() as Nanos;
        self.factor = if repeat {
            (self.factor * 2).min(MAX_FACTOR)
        } else {
            1
        };
        let lasts = (base.as_nanos() as Nanos).saturating_mul(self.factor);
        self.until = now.saturating_add(lasts);
        self.until
    }

    /// When the last ejection ends (or ended); 0 when there was none.
    pub fn until(&self) -> Nanos {
        self.until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;

    #[test]
    fn each_repeat_within_five_minutes_doubles_up_to_ten_times() {
        let base = Duration::from_secs(30);
        let mut ejections = Ejections::default();
        let mut now = 1_000 * S;
        let mut lasted = Vec::new();
        for _ in 0..6 {
            let until = ejections.eject(now, base);
            lasted.push((until - now) / S);
            // Fails again a minute after it came back.
            now = until + 60 * S;
        }
        assert_eq!(lasted, [30, 60, 120, 240, 300, 300]);
    }

    #[test]
    fn a_quiet_five_minutes_starts_over() {
        let base = Duration::from_secs(30);
        let mut ejections = Ejections::default();
        let until = ejections.eject(1_000 * S, base);
        let until = ejections.eject(until + 300 * S, base);
        assert_eq!(ejections.factor, 2, "exactly five minutes is a repeat");
        let again = until + 300 * S + 1;
        assert_eq!(ejections.eject(again, base), again + 30 * S);
    }
}
