//! The `date` field (an IMF-fixdate, RFC 9110 §5.6.7), formatted once a
//! second per worker thread, as hyper does; kept as the whole line, so that
//! an answer's head copies it in one piece.
//!
//! Whether the second has turned is asked of the TSC (`quanta`), not of the
//! system's clock: every answer asks, and reading the wall clock and taking
//! the epoch from it costs more than the rest of the `date` field
//! (docs/benchmarks-history.md, "One refusal builder"). The wall
//! clock is read when the line is made, which also finds when its second
//! ends; the TSC then only measures the time to that end, so the field
//! follows the wall clock (a step of it shows at the next second).

use std::cell::RefCell;
use std::time::{Duration, SystemTime};

/// `date: Tue, 24 Nov 2026 01:30:00 GMT\r\n`: the name, an IMF-fixdate's
/// 29 bytes and the line end.
const LINE_LENGTH: usize = 6 + 29 + 2;

/// One worker thread's line, and when its second ends.
struct Line {
    /// This thread's TSC; `None` until the first answer.
    clock: Option<quanta::Clock>,
    /// The clock's raw reading at which the line's second ends (0: no
    /// line, as for a year past 9999).
    until: u64,
    line: [u8; LINE_LENGTH],
}

thread_local! {
    static LINE: RefCell<Line> = const {
        RefCell::new(Line {
            clock: None,
            until: 0,
            line: [0; LINE_LENGTH],
        })
    };
}

/// Appends now's `date` field line to `out`.
#[inline]
pub fn write_field(out: &mut Vec<u8>) {
    LINE.with_borrow_mut(|cached| {
        let current = match &cached.clock {
            Some(clock) => clock.raw() < cached.until,
            None => false,
        };
        if !current {
            if let Some(uncached) = cached.renew() {
                // Years past 9999: not cached, written as they are.
                out.extend_from_slice(uncached.as_bytes());
                return;
            }
        }
        out.extend_from_slice(&cached.line);
    });
}

impl Line {
    /// Makes the line of the wall clock's current second, valid until it
    /// ends; the line itself when it does not fit (a year past 9999).
    #[cold]
    fn renew(&mut self) -> Option<String> {
        let clock = self.clock.get_or_insert_with(quanta::Clock::new);
        // Read before the wall clock: the second is then taken to end a
        // little early, never late.
        let read_at = clock.raw();
        let now = SystemTime::now();
        let line = format!("date: {}\r\n", httpdate::fmt_http_date(now));
        if line.len() != LINE_LENGTH {
            self.until = 0;
            return Some(line);
        }
        let into_second = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .subsec_nanos();
        let left = u128::from(1_000_000_000 - into_second);
        // The raw clock's ticks in those nanoseconds.
        let nanos_per_giga_tick = u128::from(clock.delta_as_nanos(0, 1_000_000_000).max(1));
        let ticks = left * 1_000_000_000 / nanos_per_giga_tick;
        self.line.copy_from_slice(line.as_bytes());
        self.until = read_at.saturating_add(u64::try_from(ticks).unwrap_or(u64::MAX));
        None
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_line_holds_an_http_date() {
        let mut out = Vec::new();
        super::write_field(&mut out);
        let text = String::from_utf8(out).unwrap();
        let value = text
            .strip_prefix("date: ")
            .and_then(|rest| rest.strip_suffix("\r\n"))
            .unwrap_or_else(|| panic!("{text:?}"));
        assert!(httpdate::parse_http_date(value).is_ok(), "{text}");
    }

    #[test]
    fn the_line_follows_the_wall_clock_across_a_real_second() {
        use std::time::{Duration, SystemTime};
        // Written a second and a bit apart, each names the second the wall
        // clock was in (or the next, when it turned between the two reads).
        // The wait is the behaviour under test: the cached line must be
        // renewed once the real second has turned (the TSC against the
        // wall clock, which no paused clock stands in for).
        for _ in 0..2 {
            let before = SystemTime::now();
            let mut out = Vec::new();
            super::write_field(&mut out);
            let text = String::from_utf8(out).unwrap();
            let value = &text["date: ".len()..text.len() - 2];
            let written = httpdate::parse_http_date(value).unwrap();
            let second = |time: SystemTime| {
                time.duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_secs()
            };
            let (at, then) = (second(written), second(before));
            assert!(at == then || at == then + 1, "{value} at {then}");
            std::thread::sleep(Duration::from_millis(1_100));
        }
    }
}
