//! The `date` field (an IMF-fixdate, RFC 9110 §5.6.7), formatted once a
//! second per worker thread, as hyper does; kept as the whole line, so that
//! an answer's head copies it in one piece.

use std::cell::RefCell;
use std::time::{Duration, SystemTime};

/// `date: Tue, 24 Nov 2026 01:30:00 GMT\r\n`: the name, an IMF-fixdate's
/// 29 bytes and the line end.
const LINE_LENGTH: usize = 6 + 29 + 2;

thread_local! {
    /// The line of the current second, and which second it is.
    static LINE: RefCell<(u64, [u8; LINE_LENGTH])> = const { RefCell::new((u64::MAX, [0; LINE_LENGTH])) };
}

/// Appends now's `date` field line to `out`.
pub fn write_field(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let second = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    LINE.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.0 != second {
            let line = format!("date: {}\r\n", httpdate::fmt_http_date(now));
            if line.len() == LINE_LENGTH {
                cached.1.copy_from_slice(line.as_bytes());
                cached.0 = second;
            } else {
                // Years past 9999: not cached, written as they are.
                out.extend_from_slice(line.as_bytes());
                return;
            }
        }
        out.extend_from_slice(&cached.1);
    });
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
}
