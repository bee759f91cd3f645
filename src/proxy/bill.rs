//! What an admitted request owes beyond its admission cost, known only as
//! its exchange unfolds: deferred charges (`charge`: upstream time, a cost
//! the upstream reports in a header or trailer, a number in the response
//! body, or a weighted sum of these) and refunds (`refund_on`: the status
//! the client got, the upstream failed, or the client left before the
//! response began). See docs/charging.md.
//!
//! A [`Bill`] is made at admission for the request's rules that charge or
//! refund, and rides inside the request's [`super::settle::Settlement`],
//! which applies it to the receipts of those rules (every limit of a
//! multi-limit rule; shadow rules like enforced ones, so a dry run of a
//! charging rule is faithful). Elapsed time and body bytes are charged at
//! least once a second while the exchange runs (the [`Ticker`] wakes
//! whoever is waiting on the exchange: the request's future until the
//! response head, the response body after it), and the rest when it ends:
//! a long download's bytes reach the bucket while it streams, so the
//! caller's next request is refused once they spent its quota. A source that needs
//! the answer (a header absent from the head may come as a trailer; a
//! `json:` value comes in the body) is *awaited*: charged when it arrives,
//! or at the end with `charge_missing` when it never did.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Context;

use http::{HeaderMap, HeaderName};
use smallvec::SmallVec;

use super::ticker::Ticker;
use crate::body_scan::BodyScanner;
use crate::clock::Nanos;
use crate::config::ChargeSource;
use crate::policy::{Billing, Rule};

const MILLI: Nanos = 1_000_000;

/// The charging and refunding rules of one request, and how far the
/// exchange has come.
#[derive(Debug)]
pub struct Bill {
    /// Each rule's index in the store's asks (what its receipts carry),
    /// with what it settles.
    pub rules: SmallVec<[(usize, Arc<Billing>); 2]>,
    /// Wakes the exchange once a second while a rule charges upstream
    /// time or body bytes; `None` when none does.
    ticker: Option<Arc<Ticker>>,
    /// Whether a rule charges upstream time.
    elapsed: bool,
    /// The tick the exchange waits for (registered at this epoch).
    waiting_from: Option<u64>,
    /// When the request was forwarded: elapsed time counts from here.
    forwarded_at: Option<Nanos>,
    /// Milliseconds already charged to every `elapsed_ms` rule.
    elapsed_charged: u64,
    /// Whether the response began (or the exchange failed): from then on,
    /// the client leaving is no longer `client_abort`.
    pub response_began: bool,
    /// Sources whose value the answer has yet to bring.
    pub awaiting: SmallVec<[Awaited; 2]>,
    /// Reads the response body for the awaited `json:` sources, once the
    /// head said the body is JSON or an event stream.
    pub scanner: Option<Box<BodyScanner>>,
    /// The body bytes counted for `request_bytes` and `response_bytes`;
    /// `None` when no rule charges them (no frame is then counted).
    pub traffic: Option<Traffic>,
}

/// The body bytes of an exchange whose rules charge them: counted as they
/// pass, charged at each tick and at the end.
#[derive(Debug, Default)]
pub struct Traffic {
    /// Some rule charges `response_bytes`: the response's data frames are
    /// counted.
    counts_response: bool,
    /// Some rule charges `request_bytes`.
    counts_request: bool,
    /// Response body bytes passed to the client so far.
    response: u64,
    /// The request body's bytes forwarded so far.
    request: RequestBytes,
    /// The `[request, response]` bytes charged for so far.
    charged: [u64; 2],
}

/// Where a request body's forwarded bytes are known.
#[derive(Debug, Default)]
pub enum RequestBytes {
    /// Not forwarded (yet), or no rule counts them.
    #[default]
    None,
    /// Held whole: forwarded with the head.
    Whole(u64),
    /// Streamed: its guard counts the bytes it passes on.
    Streamed(Arc<AtomicU64>),
}

impl Traffic {
    /// A data frame of `len` bytes of the response body passes to the
    /// client.
    #[inline]
    pub fn response_frame(&mut self, len: usize) {
        if self.counts_response {
            self.response = self.response.saturating_add(len as u64);
        }
    }

    /// The request's body is forwarded now: its bytes are known from here
    /// (a body held whole at once, a streamed one as it goes).
    /// `bytes` says how (`proxy/settle.rs` reads it off the body), asked
    /// only when a rule counts them.
    fn forwarded(&mut self, bytes: impl FnOnce() -> RequestBytes) {
        if !self.counts_request {
            return;
        }
        self.request = bytes();
    }

    /// The `[request, response]` bytes charged for before and now; now's
    /// are counted as charged.
    pub fn due(&mut self) -> ([u64; 2], [u64; 2]) {
        let before = self.charged;
        let request = match &self.request {
            RequestBytes::None => 0,
            RequestBytes::Whole(bytes) => *bytes,
            RequestBytes::Streamed(counted) => counted.load(Ordering::Acquire),
        };
        // Counts only grow; `max` keeps the charged total from ever going back.
        self.charged = [request.max(before[0]), self.response.max(before[1])];
        (before, self.charged)
    }
}

/// A source of a rule's charge still waiting for its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Awaited {
    /// The rule's position in [`Bill::rules`].
    pub rule: usize,
    /// The source's position in the rule's charge.
    pub source: usize,
    /// A `json:` source's pointer in the scanner (`None` past the most
    /// it reads: the value is then missing); `None` for a header that may
    /// come as a trailer.
    pub slot: Option<usize>,
}

/// What an upstream reported in a cost field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reported {
    /// No such field.
    Absent,
    /// Repeated, negative or not a number.
    Malformed,
    Units(u64),
}

/// Why the exchange ended without an upstream response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Connect error, timeout, a broken exchange (`upstream_error`),
    /// answered with this status (502, 504).
    Upstream(http::StatusCode),
    /// The client went away (or its request body broke off) before the
    /// response began: `client_abort`.
    ClientLeft,
}

impl Bill {
    /// The bill of a request whose rules are `rules`, in the store's rule
    /// order (enforced, then shadow); `None` when none of them charges or
    /// refunds. `ticker` wakes it while a rule charges upstream time.
    pub fn for_rules<'p>(
        rules: impl Iterator<Item = &'p Rule>,
        ticker: &Arc<Ticker>,
    ) -> Option<Bill> {
        let rules: SmallVec<[(usize, Arc<Billing>); 2]> = rules
            .enumerate()
            .filter_map(|(index, rule)| Some((index, Arc::clone(rule.billing.as_ref()?))))
            .collect();
        if rules.is_empty() {
            return None;
        }
        let charges = |source: &ChargeSource| {
            rules.iter().any(|(_, billing)| {
                billing
                    .charge
                    .as_ref()
                    .is_some_and(|charge| charge.charges(source))
            })
        };
        let elapsed = charges(&ChargeSource::ElapsedMs);
        let counts_request = charges(&ChargeSource::RequestBytes);
        let counts_response = charges(&ChargeSource::ResponseBytes);
        let traffic = (counts_request || counts_response).then(|| Traffic {
            counts_request,
            counts_response,
            ..Traffic::default()
        });
        Some(Bill {
            rules,
            ticker: (elapsed || traffic.is_some()).then(|| Arc::clone(ticker)),
            elapsed,
            waiting_from: None,
            forwarded_at: None,
            elapsed_charged: 0,
            response_began: false,
            awaiting: SmallVec::new(),
            scanner: None,
            traffic,
        })
    }

    /// Whether some rule charges what the exchange uses as it runs
    /// (upstream time, body bytes): the bill then ticks and runs until the
    /// response body ends.
    #[inline]
    pub fn charges_as_it_runs(&self) -> bool {
        self.ticker.is_some()
    }

    /// Whether some rule charges upstream time.
    #[inline]
    pub fn charges_elapsed(&self) -> bool {
        self.elapsed
    }

    /// The request was forwarded at `at`, its body's bytes counted as
    /// `bytes` says.
    pub fn forwarded(&mut self, at: Nanos, bytes: impl FnOnce() -> RequestBytes) {
        self.forwarded_at = Some(at);
        if let Some(traffic) = &mut self.traffic {
            traffic.forwarded(bytes);
        }
    }

    /// Whether the request was forwarded.
    pub fn was_forwarded(&self) -> bool {
        self.forwarded_at.is_some()
    }

    /// Milliseconds of upstream time charged before and at `now` (equal
    /// before forwarding, and when no whole millisecond passed); `now`'s
    /// are counted as charged.
    pub fn elapsed_due(&mut self, now: Nanos) -> (u64, u64) {
        let before = self.elapsed_charged;
        let Some(since) = self.forwarded_at else {
            return (before, before);
        };
        let elapsed = now.saturating_sub(since) / MILLI;
        self.elapsed_charged = elapsed.max(before);
        (before, self.elapsed_charged)
    }

    /// Whether a tick passed since the exchange last asked (upstream time
    /// is then due); asks to be woken at the next one. Cheap when nothing
    /// is due: one atomic load.
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> bool {
        let (Some(ticker), true) = (&self.ticker, self.forwarded_at.is_some()) else {
            return false;
        };
        let due = match self.waiting_from {
            Some(epoch) if ticker.epoch() == epoch => return false,
            Some(_) => true,
            None => false,
        };
        self.waiting_from = Some(ticker.wake_at_next_tick(cx.waker()));
        due
    }
}

/// The units an upstream reported in `name`, removing every such field
/// from `headers`. A fractional number is rounded up (units are whole; the
/// upstream is not undercharged).
pub fn take_reported_cost(headers: &mut HeaderMap, name: &HeaderName) -> Reported {
    let http::header::Entry::Occupied(entry) = headers.entry(name) else {
        return Reported::Absent;
    };
    let (_, mut values) = entry.remove_entry_mult();
    let units = match (values.next(), values.next()) {
        (Some(value), None) => parse_units(value.as_bytes()),
        _ => None,
    };
    units.map_or(Reported::Malformed, Reported::Units)
}

/// `123` or `12.5` (→ 13): digits, at most one `.` with digits after it.
fn parse_units(text: &[u8]) -> Option<u64> {
    let text = text.trim_ascii();
    let (whole, fraction) = match text.iter().position(|&b| b == b'.') {
        Some(dot) => (&text[..dot], Some(&text[dot + 1..])),
        None => (text, None),
    };
    if whole.is_empty() || !whole.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut units: u64 = 0;
    for digit in whole {
        units = units
            .checked_mul(10)?
            .checked_add(u64::from(digit - b'0'))?;
    }
    match fraction {
        None => Some(units),
        Some(fraction) if !fraction.is_empty() && fraction.iter().all(u8::is_ascii_digit) => {
            let rounds_up = fraction.iter().any(|&digit| digit != b'0');
            units.checked_add(u64::from(rounds_up))
        }
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_costs_parse_whole_and_round_fractions_up() {
        for (text, units) in [
            ("0", Some(0)),
            ("42", Some(42)),
            (" 7 ", Some(7)),
            ("12.5", Some(13)),
            ("12.0", Some(12)),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551616", None),
            ("-3", None),
            ("1e3", None),
            ("12.", None),
            (".5", None),
            ("1.2.3", None),
            ("12.5ms", None),
            ("", None),
            ("ten", None),
            ("+4", None),
        ] {
            assert_eq!(parse_units(text.as_bytes()), units, "{text:?}");
        }
    }

    #[test]
    fn a_cost_field_is_read_and_stripped_or_refused() {
        let name = HeaderName::from_static("x-cost");
        let mut headers = HeaderMap::new();
        let absent = take_reported_cost(&mut headers, &name);
        assert_eq!(absent, Reported::Absent);
        headers.insert("x-cost", "250".parse().unwrap());
        headers.insert("x-other", "1".parse().unwrap());
        let reported = take_reported_cost(&mut headers, &name);
        assert_eq!(reported, Reported::Units(250));
        assert!(!headers.contains_key("x-cost"));
        assert!(headers.contains_key("x-other"));
        headers.append("x-cost", "1".parse().unwrap());
        headers.append("x-cost", "2".parse().unwrap());
        let repeated = take_reported_cost(&mut headers, &name);
        assert_eq!(repeated, Reported::Malformed);
        assert!(!headers.contains_key("x-cost"));
        headers.insert("x-cost", "lots".parse().unwrap());
        let malformed = take_reported_cost(&mut headers, &name);
        assert_eq!(malformed, Reported::Malformed);
        assert!(!headers.contains_key("x-cost"));
    }

    #[test]
    fn body_bytes_are_counted_only_where_a_rule_charges_them() {
        let mut both = Traffic {
            counts_request: true,
            counts_response: true,
            ..Traffic::default()
        };
        assert_eq!(both.due(), ([0, 0], [0, 0]), "nothing forwarded yet");
        both.forwarded(|| RequestBytes::Whole(5));
        both.response_frame(100);
        both.response_frame(0);
        assert_eq!(both.due(), ([0, 0], [5, 100]));
        both.response_frame(28);
        assert_eq!(
            both.due(),
            ([5, 100], [5, 128]),
            "a body held whole counts once"
        );
        assert_eq!(both.due(), ([5, 128], [5, 128]));

        let mut response_only = Traffic {
            counts_response: true,
            ..Traffic::default()
        };
        response_only.forwarded(|| RequestBytes::Whole(5));
        response_only.response_frame(7);
        assert_eq!(response_only.due(), ([0, 0], [0, 7]));
        let mut request_only = Traffic {
            counts_request: true,
            ..Traffic::default()
        };
        request_only.forwarded(|| RequestBytes::None);
        request_only.response_frame(7);
        assert_eq!(request_only.due(), ([0, 0], [0, 0]));
    }

    #[tokio::test]
    async fn a_streamed_request_body_is_counted_as_its_frames_pass() {
        use crate::proxy::client_request::ClientBody;
        use crate::proxy::deadline::{guard, BodyLimits};
        use http_body_util::BodyExt;
        let limits = BodyLimits {
            timeout: std::time::Duration::from_secs(60),
            max_bytes: 10,
        };
        let clock = crate::clock::ProxyClock::default();
        let client = ClientBody::Read(bytes::Bytes::from_static(b"abcdefgh"));
        let (mut guarded, _watch) = guard(client, limits, http::Version::HTTP_11, &clock);
        let mut traffic = Traffic {
            counts_request: true,
            ..Traffic::default()
        };
        traffic.forwarded(|| RequestBytes::Streamed(guarded.count_bytes()));
        assert_eq!(traffic.due().1, [0, 0], "not yet sent");
        let frame = guarded.frame().await.unwrap().unwrap();
        assert_eq!(frame.data_ref().map(bytes::Bytes::len), Some(8));
        assert_eq!(traffic.due().1, [8, 0]);
    }

    #[test]
    fn elapsed_time_is_charged_once_in_whole_milliseconds() {
        let mut bill = Bill {
            rules: SmallVec::new(),
            ticker: None,
            elapsed: true,
            waiting_from: None,
            forwarded_at: None,
            elapsed_charged: 0,
            response_began: false,
            awaiting: SmallVec::new(),
            scanner: None,
            traffic: None,
        };
        const SEC: Nanos = 1_000_000_000;
        assert_eq!(bill.elapsed_due(5 * SEC), (0, 0), "not forwarded yet");
        bill.forwarded(SEC, || RequestBytes::None);
        assert_eq!(bill.elapsed_due(SEC + 1_500_000), (0, 1));
        assert_eq!(bill.elapsed_due(SEC + 1_900_000), (1, 1));
        assert_eq!(bill.elapsed_due(2 * SEC + 500 * MILLI), (1, 1_500));
        let backwards = bill.elapsed_due(2 * SEC);
        assert_eq!(backwards, (1_500, 1_500), "time never runs backwards");
        assert_eq!(bill.elapsed_due(3 * SEC), (1_500, 2_000));
    }
}
