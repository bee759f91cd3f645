//! How many refusals a rule may log: one line per limited, banned, denied
//! or keyless request, but at most [`LINES_PER_SECOND`] a second per rule,
//! so an attack never floods the log. The lines held back are counted, and
//! the next line let through says how many (`suppressed`).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::clock::Nanos;

/// Lines one rule may log in one second.
pub const LINES_PER_SECOND: u64 = 10;
/// The longest key text a line shows (client-controlled: a header's value
/// can be kilobytes).
const KEY_CHARS: usize = 64;

/// One rule's budget of log lines (lock-free: the 429 path passes here).
#[derive(Debug, Default)]
pub struct LogGate {
    /// The second (Unix) `lines` counts in, plus one (0: never).
    second: AtomicU64,
    lines: AtomicU64,
    suppressed: AtomicU64,
}

impl LogGate {
    /// Whether a line may be logged at `now`: `Some(n)` with the lines held
    /// back since the last one logged, `None` when this one is held back.
    #[inline]
    pub fn let_through(&self, now: Nanos) -> Option<u64> {
        let second = now / 1_000_000_000 + 1;
        let seen = self.second.load(Ordering::Relaxed);
        if seen != second
            && self
                .second
                .compare_exchange(seen, second, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            // The first line of a new second (a racing one may count in the
            // old second's tally: off by one at worst).
            self.lines.store(0, Ordering::Relaxed);
        }
        // Once the second's lines are spent (an attack), only the count of
        // held-back lines moves.
        if self.lines.load(Ordering::Relaxed) < LINES_PER_SECOND
            && self.lines.fetch_add(1, Ordering::Relaxed) < LINES_PER_SECOND
        {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// `key` cut to [`KEY_CHARS`] characters, marked with `…` when cut.
pub fn truncated(key: &str) -> std::borrow::Cow<'_, str> {
    match key.char_indices().nth(KEY_CHARS) {
        None => key.into(),
        Some((end, _)) => format!("{}…", &key[..end]).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Nanos = 1_000_000_000;

    #[test]
    fn a_rule_logs_at_most_its_lines_a_second_and_counts_the_rest() {
        let gate = LogGate::default();
        let t = 1_795_000_000 * SECOND;
        let first: Vec<_> = (0..25).map(|i| gate.let_through(t + i * 1_000)).collect();
        assert_eq!(first.iter().filter(|line| line.is_some()).count(), 10);
        assert_eq!(first[0], Some(0));
        assert!(first[10..].iter().all(Option::is_none));
        // The next second's first line reports the 15 held back.
        assert_eq!(gate.let_through(t + SECOND), Some(15));
        assert_eq!(gate.let_through(t + SECOND + 1), Some(0));
    }

    #[test]
    fn a_long_key_is_cut_at_a_character_boundary() {
        assert_eq!(truncated("seller-42"), "seller-42");
        let long = "é".repeat(100);
        let cut = truncated(&long);
        assert_eq!(cut.chars().count(), KEY_CHARS + 1);
        assert!(cut.ends_with('…'));
    }
}
