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
//! charging rule is faithful). Elapsed time is charged at least once a
//! second while the exchange runs (the [`Ticker`] wakes whoever is waiting
//! on the exchange: the request's future until the response head, the
//! response body after it), and the rest when it ends. A source that needs
//! the answer (a header absent from the head may come as a trailer; a
//! `json:` value comes in the body) is *awaited*: charged when it arrives,
//! or at the end with `charge_missing` when it never did.

use std::sync::Arc;
use std::task::Context;

use http::{HeaderMap, HeaderName};
use smallvec::SmallVec;

use super::ticker::Ticker;
use crate::body_scan::BodyScanner;
use crate::clock::Nanos;
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
    /// time; `None` when none does.
    ticker: Option<Arc<Ticker>>,
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
        let elapsed = rules.iter().any(|(_, billing)| {
            billing
                .charge
                .as_ref()
                .is_some_and(|charge| charge.charges_elapsed())
        });
        Some(Bill {
            rules,
            ticker: elapsed.then(|| Arc::clone(ticker)),
            waiting_from: None,
            forwarded_at: None,
            elapsed_charged: 0,
            response_began: false,
            awaiting: SmallVec::new(),
            scanner: None,
        })
    }

    /// Whether some rule charges upstream time (so the bill runs until the
    /// response body ends).
    #[inline]
    pub fn charges_elapsed(&self) -> bool {
        self.ticker.is_some()
    }

    /// The request was forwarded at `at`.
    pub fn forwarded(&mut self, at: Nanos) {
        self.forwarded_at = Some(at);
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
    fn elapsed_time_is_charged_once_in_whole_milliseconds() {
        let mut bill = Bill {
            rules: SmallVec::new(),
            ticker: None,
            waiting_from: None,
            forwarded_at: None,
            elapsed_charged: 0,
            response_began: false,
            awaiting: SmallVec::new(),
            scanner: None,
        };
        const SEC: Nanos = 1_000_000_000;
        assert_eq!(bill.elapsed_due(5 * SEC), (0, 0), "not forwarded yet");
        bill.forwarded(SEC);
        assert_eq!(bill.elapsed_due(SEC + 1_500_000), (0, 1));
        assert_eq!(bill.elapsed_due(SEC + 1_900_000), (1, 1));
        assert_eq!(bill.elapsed_due(2 * SEC + 500 * MILLI), (1, 1_500));
        let backwards = bill.elapsed_due(2 * SEC);
        assert_eq!(backwards, (1_500, 1_500), "time never runs backwards");
        assert_eq!(bill.elapsed_due(3 * SEC), (1_500, 2_000));
    }
}
