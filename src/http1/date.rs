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

/// The last moment an IMF-fixdate can name (9999-12-31T23:59:59Z): a wall
/// clock beyond it, or before 1970, is written as the nearest it can.
const LAST_SECOND: u64 = 253_402_300_799;

/// Appends now's `date` field line to `out`.
#[inline]
pub fn write_field(out: &mut Vec<u8>) {
    LINE.with_borrow_mut(|cached| {
        let current = match &cached.clock {
            Some(clock) => clock.raw() < cached.until,
            None => false,
        };
        if !current {
            cached.renew();
        }
        out.extend_from_slice(&cached.line);
    });
}

impl Line {
    /// Makes the line of the wall clock's current second, valid until it
    /// ends.
    #[cold]
    fn renew(&mut self) {
        let clock = self.clock.get_or_insert_with(quanta::Clock::new);
        // Read before the wall clock: the second is then taken to end a
        // little early, never late.
        let read_at = clock.raw();
        let nanos_per_giga_tick = u128::from(clock.delta_as_nanos(0, 1_000_000_000).max(1));
        self.renew_at(read_at, SystemTime::now(), nanos_per_giga_tick);
    }

    /// [`renew`](Line::renew) with the TSC read at `read_at`, the wall
    /// clock at `now`, and the TSC's rate.
    fn renew_at(&mut self, read_at: u64, now: SystemTime, nanos_per_giga_tick: u128) {
        let since_epoch = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .min(Duration::new(LAST_SECOND, 999_999_999));
        let named = SystemTime::UNIX_EPOCH + since_epoch;
        let line = format!("date: {}\r\n", httpdate::fmt_http_date(named));
        self.line.copy_from_slice(line.as_bytes());
        let left = u128::from(1_000_000_000 - since_epoch.subsec_nanos());
        // The raw clock's ticks in those nanoseconds.
        let ticks = left * 1_000_000_000 / nanos_per_giga_tick;
        self.until = read_at.saturating_add(u64::try_from(ticks).unwrap_or(u64::MAX));
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
    fn the_line_holds_until_its_second_ends_on_the_tsc() {
        use std::time::{Duration, SystemTime};
        // 24 Nov 2026 01:30:00 UTC, a quarter into the second; a TSC of two
        // ticks a nanosecond (500,000,000 ns a billion ticks).
        let second = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_483_800);
        let mut line = super::Line {
            clock: None,
            until: 0,
            line: [0; super::LINE_LENGTH],
        };
        line.renew_at(1_000, second + Duration::from_millis(250), 500_000_000);
        assert_eq!(&line.line, b"date: Tue, 24 Nov 2026 01:30:00 GMT\r\n");
        // The second's last 750 ms are 1.5 billion ticks.
        assert_eq!(line.until, 1_000 + 1_500_000_000);
        line.renew_at(line.until, second + Duration::from_secs(1), 500_000_000);
        assert_eq!(&line.line, b"date: Tue, 24 Nov 2026 01:30:01 GMT\r\n");
        assert_eq!(line.until, 1_000 + 1_500_000_000 + 2_000_000_000);
        // A wall clock an IMF-fixdate cannot name is written as the
        // nearest moment it can, and nothing panics.
        let far = SystemTime::UNIX_EPOCH + Duration::from_secs(300_000_000_000);
        line.renew_at(7, far, 500_000_000);
        assert_eq!(&line.line, b"date: Fri, 31 Dec 9999 23:59:59 GMT\r\n");
        let early = SystemTime::UNIX_EPOCH - Duration::from_secs(1);
        line.renew_at(7, early, 500_000_000);
        assert_eq!(&line.line, b"date: Thu, 01 Jan 1970 00:00:00 GMT\r\n");
    }
}
