//! One request's line, written as the request goes: its start (time, id)
//! when it begins, what it asked (client, method, host, path) once known,
//! what decided it (outcome, rule, key), and the rest (status, bytes,
//! durations) when it ends, which is when the line is dropped.
//!
//! The line is JSON with its members in the order docs/edge.md lists them,
//! written straight as bytes (numbers with `itoa`, strings escaped only
//! when they need it) rather than through `serde_json`'s value tree: its
//! two buffers are the thread's, reused from one request to the next.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use super::Shard;
use crate::clock::{Clock, Nanos};
use crate::problem::push_json_str;
use crate::request_id::RequestId;

/// A buffer larger than this is not kept for the thread's next line.
const MOST_KEPT: usize = 16 * 1024;

/// Spare parts a thread keeps at most (a few hundred bytes each).
const MOST_SPARE: usize = 1024;

/// Upper bound of the bytes the end of a line adds to its two parts:
/// `"protocol":…`, `"status":`, `"bytes_out":`, the three durations (up to 20 digits and
/// 3 decimals each), the punctuation, the newline, and the members of a
/// line never described nor recorded.
const END_BYTES: usize = 320;

/// What the decision part says until a decision is noted: no rule applied.
const UNDECIDED: &[u8] = br#""outcome":"allowed","rule":null,"key":null"#;

/// A request's line in the making; see the module docs. Small (a pointer
/// to its parts, which each thread reuses from one line to the next): it
/// rides on the response body.
pub struct Line(Option<Box<Parts>>);

/// What a line holds.
pub struct Parts {
    /// `{"time":…,"request_id":…,` then, once described,
    /// `"client":…,"method":…,"host":…,"path":…,`.
    head: Vec<u8>,
    /// Where the client's text is in `head` (empty until described).
    client: std::ops::Range<usize>,
    /// `"outcome":…,"rule":…,"key":…` once decided, then
    /// `,"cost":…,"keys":…` once recorded.
    decision: Vec<u8>,
    /// Whether `cost` and `keys` were written (else both are `null`).
    recorded: bool,
    /// The response's status; 499 (nginx's "client closed request") until
    /// a response is written for it.
    pub status: u16,
    /// Bytes of the response body sent.
    pub bytes_out: u64,
    /// How long the upstream took, once forwarded.
    pub upstream: Option<Nanos>,
    /// How long it was held on purpose (delay mode).
    pub held: Nanos,
    /// What the client spoke: `"HTTP/1.1"`, `"HTTP/2"`, `"HTTP/3"`.
    pub protocol: &'static str,
    started: Nanos,
    shard: Option<Arc<Shard>>,
}

impl fmt::Debug for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = self
            .0
            .as_ref()
            .map(|parts| String::from_utf8_lossy(&parts.head));
        f.debug_tuple("Line").field(&head).finish()
    }
}

thread_local! {
    /// The parts of the thread's lines that ended, for its next ones: a
    /// thread has as many requests in flight as it has connections, so
    /// one spare would not do. Boxed, as a line holds them: handed over
    /// without a copy or an allocation.
    #[allow(clippy::vec_box)]
    static SPARE: RefCell<Vec<Box<Parts>>> = const { RefCell::new(Vec::new()) };
    /// The last second written as a time, and its text
    /// (`2026-11-25T11:31:05`): most lines of a thread share their second.
    static SECOND: RefCell<(u64, [u8; 19])> = const { RefCell::new((u64::MAX, [0; 19])) };
}

impl Line {
    /// No line: the access log is off.
    pub const fn none() -> Line {
        Line(None)
    }

    /// The line's parts, `None` for [`Line::none`].
    #[inline]
    pub fn parts(&mut self) -> Option<&mut Parts> {
        self.0.as_deref_mut()
    }

    pub(super) fn begin(shard: Arc<Shard>, started: Nanos, request_id: &RequestId) -> Line {
        let spare = SPARE.with_borrow_mut(Vec::pop);
        let mut parts = spare.unwrap_or_else(|| {
            Box::new(Parts {
                head: Vec::with_capacity(256),
                client: 0..0,
                decision: Vec::with_capacity(96),
                recorded: false,
                status: 0,
                bytes_out: 0,
                upstream: None,
                held: 0,
                protocol: "HTTP/1.1",
                started: 0,
                shard: None,
            })
        });
        let head = &mut parts.head;
        head.clear();
        head.extend_from_slice(br#"{"time":""#);
        write_time(head, started);
        head.extend_from_slice(br#"","request_id":"#);
        request_id.write_json(head);
        head.push(b',');
        parts.client = 0..0;
        parts.decision.clear();
        parts.decision.extend_from_slice(UNDECIDED);
        parts.recorded = false;
        parts.status = 499;
        parts.bytes_out = 0;
        parts.upstream = None;
        parts.held = 0;
        parts.protocol = "HTTP/1.1";
        parts.started = started;
        parts.shard = Some(shard);
        Line(Some(parts))
    }
}

impl Parts {
    /// What the request asked: the client (the IP as keyed, written by
    /// `client`: an address has nothing to escape), method, host (`None`:
    /// none named) and path (normalised, without the query).
    pub fn describe(
        &mut self,
        client: impl FnOnce(&mut Vec<u8>),
        method: &str,
        host: Option<&str>,
        path: &str,
    ) {
        if !self.client.is_empty() {
            return;
        }
        let head = &mut self.head;
        head.extend_from_slice(br#""client":""#);
        let start = head.len();
        client(head);
        self.client = start..head.len();
        head.extend_from_slice(br#"","method":"#);
        push_json_plain(head, method);
        head.extend_from_slice(br#","host":"#);
        push_optional(head, host);
        head.extend_from_slice(br#","path":"#);
        push_json_str(head, path);
        head.push(b',');
    }

    /// What decided the request: its `outcome` (as in
    /// `sluice_requests_total`), the deciding rule and that rule's key as it
    /// may be shown (`None`: no rule decided, no key). An outcome and a rule
    /// name need no escaping ([`push_json_plain`]); a key may.
    pub fn decide(&mut self, outcome: &str, rule: Option<&str>, key: Option<&str>) {
        self.decide_with(outcome, rule, |decision| push_optional(decision, key));
    }

    /// [`Parts::decide`] for a rule keyed on the client IP alone: its key
    /// is the `client` already written.
    pub fn decide_keyed_by_client(&mut self, outcome: &str, rule: &str) {
        let Parts {
            head,
            client,
            decision,
            ..
        } = self;
        let client = &head[client.clone()];
        decision.clear();
        decision.extend_from_slice(br#""outcome":"#);
        push_json_plain(decision, outcome);
        decision.extend_from_slice(br#","rule":"#);
        push_json_plain(decision, rule);
        decision.extend_from_slice(br#","key":""#);
        decision.extend_from_slice(client);
        decision.push(b'"');
    }

    /// What a replay needs besides the decision (docs/replay.md): the
    /// units the deciding rule takes (`None`: no rule decided), and the
    /// `keys` object, which `keys` writes given the `client` already
    /// written. After [`Parts::decide`], if it is called.
    pub fn record(&mut self, cost: Option<u64>, keys: impl FnOnce(&mut Vec<u8>, &[u8])) {
        let Parts {
            head,
            client,
            decision,
            ..
        } = self;
        decision.extend_from_slice(br#","cost":"#);
        match cost {
            Some(cost) => decision.extend_from_slice(itoa::Buffer::new().format(cost).as_bytes()),
            None => decision.extend_from_slice(b"null"),
        }
        decision.extend_from_slice(br#","keys":"#);
        keys(decision, &head[client.clone()]);
        self.recorded = true;
    }

    fn decide_with(&mut self, outcome: &str, rule: Option<&str>, key: impl FnOnce(&mut Vec<u8>)) {
        let decision = &mut self.decision;
        decision.clear();
        decision.extend_from_slice(br#""outcome":"#);
        push_json_plain(decision, outcome);
        decision.extend_from_slice(br#","rule":"#);
        match rule {
            Some(rule) => push_json_plain(decision, rule),
            None => decision.extend_from_slice(b"null"),
        }
        decision.extend_from_slice(br#","key":"#);
        key(decision);
        self.recorded = false;
    }

    /// The whole line, ended at `ended`, with its newline.
    fn write(&self, out: &mut Vec<u8>, ended: Nanos) {
        out.extend_from_slice(&self.head);
        if self.client.is_empty() {
            out.extend_from_slice(br#""client":null,"method":null,"host":null,"path":null,"#);
        }
        let mut numbers = itoa::Buffer::new();
        out.extend_from_slice(br#""protocol":""#);
        out.extend_from_slice(self.protocol.as_bytes());
        out.extend_from_slice(br#"","status":"#);
        out.extend_from_slice(numbers.format(self.status).as_bytes());
        out.extend_from_slice(br#","bytes_out":"#);
        out.extend_from_slice(numbers.format(self.bytes_out).as_bytes());
        out.extend_from_slice(br#","duration_ms":"#);
        push_millis(out, ended.saturating_sub(self.started));
        out.extend_from_slice(br#","upstream_ms":"#);
        match self.upstream {
            Some(took) => push_millis(out, took),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(br#","delay_ms":"#);
        // Rounded as `X-Sluice-Delay-Ms` is.
        let held_ms = self.held.saturating_add(500_000) / 1_000_000;
        out.extend_from_slice(numbers.format(held_ms).as_bytes());
        out.push(b',');
        out.extend_from_slice(&self.decision);
        if !self.recorded {
            out.extend_from_slice(br#","cost":null,"keys":null"#);
        }
        out.extend_from_slice(b"}\n");
    }

    /// The most [`Parts::write`] writes.
    fn most(&self) -> usize {
        self.head.len() + self.decision.len() + END_BYTES
    }
}

impl Drop for Line {
    /// The request ended: its line goes to the thread's buffer, and its
    /// parts are kept for the thread's next line. Inlined, so that a
    /// request with the log off pays one test, not a call that saves the
    /// registers the written line needs (docs/benchmarks-history.md, "At
    /// the edge, measured again").
    #[inline]
    fn drop(&mut self) {
        if let Some(parts) = self.0.take() {
            ended(parts);
        }
    }
}

/// Writes a request's line to the thread's buffer and keeps its parts.
#[inline(never)]
fn ended(mut parts: Box<Parts>) {
    if let Some(shard) = parts.shard.take() {
        let ended = shard.clock.now();
        shard.append(parts.most(), |out| parts.write(out, ended));
    }
    if parts.head.capacity() <= MOST_KEPT && parts.decision.capacity() <= MOST_KEPT {
        SPARE.with_borrow_mut(|spare| {
            if spare.len() < MOST_SPARE {
                spare.push(parts);
            }
        });
    }
}

/// Appends `text` as a JSON string without looking for what to escape: for
/// a text that never holds a quote, a backslash or a control character by
/// construction. A method is an HTTP token (RFC 9110 §5.6.2, as `http`
/// checks it), a rule name letters, digits, `_`, `.` and `-` (`check`
/// refuses others), an outcome one of sluice's words. Looking costs more
/// than the line's other members together.
fn push_json_plain(out: &mut Vec<u8>, text: &str) {
    debug_assert!(
        !text.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\'),
        "{text:?} needs escaping"
    );
    out.push(b'"');
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
}

fn push_optional(out: &mut Vec<u8>, text: Option<&str>) {
    match text {
        Some(text) => push_json_str(out, text),
        None => out.extend_from_slice(b"null"),
    }
}

/// `nanos` as milliseconds with three decimals (`12.345`).
fn push_millis(out: &mut Vec<u8>, nanos: Nanos) {
    // Written right to left on the stack, then appended at once: two
    // durations a line, most under a millisecond.
    let mut text = [0u8; 24];
    let mut at = text.len();
    let mut rest = nanos / 1_000;
    for _ in 0..3 {
        at -= 1;
        text[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    at -= 1;
    text[at] = b'.';
    loop {
        at -= 1;
        text[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&text[at..]);
}

/// `at` (Unix nanoseconds) in RFC 3339, UTC, to the microsecond:
/// `2026-11-25T11:31:05.123456Z` (a replay orders and decides lines by it).
fn write_time(out: &mut Vec<u8>, at: Nanos) {
    let seconds = at / 1_000_000_000;
    SECOND.with_borrow_mut(|(second, text)| {
        if *second != seconds {
            *second = seconds;
            *text = civil(seconds);
        }
        out.extend_from_slice(text);
    });
    let mut micros = (at / 1_000 % 1_000_000) as u32;
    let mut fraction = *b".000000Z";
    for digit in fraction[1..7].iter_mut().rev() {
        *digit = b'0' + (micros % 10) as u8;
        micros /= 10;
    }
    out.extend_from_slice(&fraction);
}

/// `at` (Unix nanoseconds) as a line writes its `time`.
pub fn rfc3339(at: Nanos) -> String {
    let mut out = Vec::with_capacity(27);
    write_time(&mut out, at);
    String::from_utf8_lossy(&out).into_owned()
}

/// `YYYY-MM-DDTHH:MM:SS` of a Unix second (the proleptic Gregorian
/// calendar, as `days_from_civil`'s inverse in Howard Hinnant's
/// "chrono-Compatible Low-Level Date Algorithms").
fn civil(unix_seconds: u64) -> [u8; 19] {
    let days = (unix_seconds / 86_400) as i64;
    let of_day = unix_seconds % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    let mut text = [0u8; 19];
    let mut put = |at: usize, value: u64, digits: usize| {
        let mut rest = value;
        for index in (at..at + digits).rev() {
            text[index] = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
    };
    put(0, year.clamp(0, 9999) as u64, 4);
    put(5, month as u64, 2);
    put(8, day as u64, 2);
    put(11, of_day / 3_600, 2);
    put(14, of_day / 60 % 60, 2);
    put(17, of_day % 60, 2);
    text[4] = b'-';
    text[7] = b'-';
    text[10] = b'T';
    text[13] = b':';
    text[16] = b':';
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc_3339_utc_to_the_microsecond() {
        let cases = [
            (0, "1970-01-01T00:00:00.000000Z"),
            (951_782_400_123_000_000, "2000-02-29T00:00:00.123000Z"),
            (1_795_000_060_999_999_999, "2026-11-18T11:07:40.999999Z"),
            (4_107_542_399_001_002_999, "2100-02-28T23:59:59.001002Z"),
            (u64::MAX, "2554-07-21T23:34:33.709551Z"),
        ];
        for (nanos, expected) in cases {
            let mut out = Vec::new();
            write_time(&mut out, nanos);
            assert_eq!(String::from_utf8(out).unwrap(), expected);
        }
        // Every day of four years, against the days counted one by one.
        let (mut year, mut month, mut day) = (2023u64, 1u64, 1u64);
        let start = 1_672_531_200u64; // 2023-01-01
        for index in 0..(4 * 366) {
            let text = civil(start + index * 86_400 + 3_723);
            let expected = format!("{year:04}-{month:02}-{day:02}T01:02:03");
            assert_eq!(std::str::from_utf8(&text).unwrap(), expected);
            let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
            let length = match month {
                2 if leap => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            day += 1;
            if day > length {
                day = 1;
                month += 1;
                if month > 12 {
                    month = 1;
                    year += 1;
                }
            }
        }
    }

    #[test]
    fn milliseconds_have_three_decimals() {
        let cases = [
            (0, "0.000"),
            (999, "0.000"),
            (1_000, "0.001"),
            (412_345, "0.412"),
            (12_345_678, "12.345"),
            (u64::MAX, "18446744073709.551"),
        ];
        for (nanos, expected) in cases {
            let mut out = Vec::new();
            push_millis(&mut out, nanos);
            assert_eq!(String::from_utf8(out).unwrap(), expected);
        }
    }
}
