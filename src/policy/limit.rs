//! One compiled limit of a rule: its limiter, its bucket table, and the
//! header values and 429 body head prebuilt from the rule's config.

use std::sync::Arc;

use http::HeaderValue;

use crate::config::{format_limit_period, AlgorithmKind, LimitConfig, RuleConfig};
use crate::limiter::adaptive::Controller;
use crate::limiter::calendar::Calendar;
use crate::limiter::{
    Concurrency, FixedWindow, Gcra, LeakyBucket, Limiter, SlidingLog, SlidingWindow,
};
use crate::problem;
use crate::store::BucketTable;

/// One limit of a rule, with everything its headers and 429 body need.
#[derive(Debug)]
pub struct Limit {
    /// This limit's bucket table.
    pub table: BucketTable,
    pub limiter: Limiter,
    /// The rate's period; `None` for a concurrency limit.
    pub period: Option<std::time::Duration>,
    /// The rate's COUNT (`max_in_flight` for a concurrency limit).
    pub count: u64,
    /// The name the rate-limit headers use: the rule's, plus the period
    /// when the rule has several limits (`search-1m`).
    pub name: String,
    /// The name as a JSON string literal, for `violated-policies`.
    pub name_json: String,
    /// The rule's name as a JSON string literal, for the body's `rule`.
    pub rule_json: String,
    /// `"name";q=COUNT;w=SECONDS` for `RateLimit-Policy`. A calendar
    /// window's `w` is the current window's length, written per response
    /// (`proxy/respond.rs`); this item then carries the nominal one.
    pub policy_item: String,
    /// The same, ready to send when this is the only applicable limit.
    pub policy_header: HeaderValue,
    /// The bucket's capacity, ready for `X-RateLimit-Limit`.
    pub limit_header: HeaderValue,
    /// The fixed parts of this limit's rate-limit fields when it is the
    /// only applicable limit, written as they are sent (no IETF part for a
    /// calendar window, whose `w` changes with the window).
    pub lines: FieldLines,
    /// The 429 body up to the violated-policies list
    /// ([`problem::quota_exceeded_head`]), whose detail reads `rule 'name'
    /// allows N requests per P`.
    pub problem_head: String,
    /// That detail, for an answer that is not a problem document (gRPC's
    /// `grpc-message`).
    pub detail: Box<str>,
    /// Unique among every limit this process compiles: what a remembered
    /// answer is keyed on (a limit's address may be reused after a reload).
    pub serial: u64,
}

/// A limit's rate-limit fields as sent when it is the only applicable
/// limit (the common response), cut where the numbers of the request go:
/// writing them is then a few copies instead of a field at a time (see
/// `proxy/respond.rs`, which writes the numbers and holds the general
/// case).
#[derive(Debug, Default)]
pub struct FieldLines {
    /// `x-ratelimit-limit: CAPACITY\r\nx-ratelimit-remaining: `
    pub legacy: Box<[u8]>,
    /// `ratelimit-policy: ITEM\r\nratelimit: "NAME";r=`, or empty when the
    /// name is not a valid field value (the general case then leaves that
    /// field out).
    pub ietf: Box<[u8]>,
    /// How long the first whole line of each is (`x-ratelimit-limit`'s,
    /// `ratelimit-policy`'s, with their CRLF): where the next field's
    /// line starts.
    pub legacy_first: usize,
    pub ietf_first: usize,
}

impl FieldLines {
    fn new(capacity: u64, policy_item: &str, name: &str) -> FieldLines {
        let legacy = format!("x-ratelimit-limit: {capacity}\r\nx-ratelimit-remaining: ");
        let ietf = format!("ratelimit-policy: {policy_item}\r\nratelimit: \"{name}\";r=");
        let sendable =
            HeaderValue::from_str(policy_item).is_ok() && HeaderValue::from_str(name).is_ok();
        let first_line = |lines: &str| lines.find("\r\n").map_or(0, |at| at + 2);
        FieldLines {
            legacy_first: first_line(&legacy),
            ietf_first: first_line(&ietf),
            legacy: legacy.into_bytes().into_boxed_slice(),
            ietf: if sendable {
                ietf.into_bytes().into_boxed_slice()
            } else {
                Box::default()
            },
        }
    }
}

/// The next [`Limit::serial`].
fn next_serial() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Limit {
    /// Whether this is a concurrency limit (no period, no reset).
    pub fn is_concurrency(&self) -> bool {
        matches!(self.limiter, Limiter::Concurrency(_))
    }

    /// An `adaptive` rule's controller (its permit table's): the
    /// upstream's capacity, not a caller's quota (refused with 503, no
    /// rate-limit fields).
    #[inline]
    pub fn adaptive(&self) -> Option<&Arc<Controller>> {
        self.table.adaptive()
    }

    /// Whether this is an `adaptive` rule's limit.
    #[inline]
    pub fn is_adaptive(&self) -> bool {
        self.adaptive().is_some()
    }

    /// The calendar a fixed window follows (`calendar`), if any.
    #[inline]
    pub fn calendar(&self) -> Option<Calendar> {
        match &self.limiter {
            Limiter::FixedWindow(window) => window.calendar(),
            _ => None,
        }
    }
}

/// The limiter for one rate limit of a rule.
pub(super) fn limiter(algorithm: AlgorithmKind, limit: &LimitConfig) -> Limiter {
    match algorithm {
        AlgorithmKind::TokenBucket => Limiter::TokenBucket(Gcra::new(limit.rate, limit.capacity)),
        AlgorithmKind::FixedWindow => Limiter::FixedWindow(match limit.calendar {
            Some(calendar) => FixedWindow::on_calendar(limit.rate, calendar),
            None => FixedWindow::new(limit.rate),
        }),
        AlgorithmKind::SlidingWindow => Limiter::SlidingWindow(SlidingWindow::new(limit.rate)),
        AlgorithmKind::SlidingLog => Limiter::SlidingLog(SlidingLog::new(limit.rate)),
        AlgorithmKind::LeakyBucket => {
            Limiter::LeakyBucket(LeakyBucket::new(limit.rate, limit.capacity))
        }
        // A concurrency rule's config lists no rate limit (validation), so
        // this arm only keeps the match whole; see `concurrency_limit`.
        AlgorithmKind::Concurrency | AlgorithmKind::Adaptive => {
            Limiter::Concurrency(Concurrency::new(limit.capacity))
        }
    }
}

/// The one limit of a `concurrency` rule.
pub(super) fn concurrency_limit(
    rule: &RuleConfig,
    max_in_flight: u64,
    table: BucketTable,
    status: http::StatusCode,
) -> Limit {
    let detail = format!(
        "rule '{}' allows {max_in_flight} requests in flight at once",
        rule.name
    );
    let policy_item = format!(
        "\"{}\";q={max_in_flight};qu=\"concurrent-requests\"",
        rule.name
    );
    Limit {
        limiter: Limiter::Concurrency(Concurrency::new(max_in_flight)),
        period: None,
        count: max_in_flight,
        name_json: problem::json_string(&rule.name),
        rule_json: problem::json_string(&rule.name),
        name: rule.name.clone(),
        policy_header: HeaderValue::from_str(&policy_item)
            .unwrap_or_else(|_| HeaderValue::from_static("")),
        lines: FieldLines::new(max_in_flight, &policy_item, &rule.name),
        policy_item,
        limit_header: HeaderValue::from(max_in_flight),
        problem_head: problem::quota_exceeded_head(status, &detail),
        detail: detail.into(),
        serial: next_serial(),
        table,
    }
}

pub(super) fn compile_limit(
    rule: &RuleConfig,
    limit: &LimitConfig,
    limit_count: usize,
    limiter: Limiter,
    table: BucketTable,
    status: http::StatusCode,
) -> Limit {
    let period = format_limit_period(limit);
    let name = if limit_count > 1 {
        format!("{}-{period}", rule.name)
    } else {
        rule.name.clone()
    };
    let unit = if rule.cost == 1 { "requests" } else { "units" };
    let mut detail = format!(
        "rule '{}' allows {} {unit} per {period}",
        rule.name, limit.rate.count
    );
    if let Some(calendar) = limit.calendar {
        detail.push_str(&format!(" ({} calendar)", calendar.zone()));
    }
    if rule.cost != 1 {
        detail.push_str(&format!("; each request costs {}", rule.cost));
    }
    let policy_item = format!(
        "\"{name}\";q={};w={}",
        limit.rate.count,
        limit.rate.period.as_secs().max(1)
    );
    let mut lines = FieldLines::new(limiter.capacity(), &policy_item, &name);
    if limit.calendar.is_some() {
        // Its `w` is the window's own length: written per response.
        lines.ietf = Box::default();
    }
    Limit {
        table,
        limiter,
        period: Some(limit.rate.period),
        count: limit.rate.count,
        name_json: problem::json_string(&name),
        rule_json: problem::json_string(&rule.name),
        name,
        policy_header: HeaderValue::from_str(&policy_item)
            .unwrap_or_else(|_| HeaderValue::from_static("")),
        lines,
        policy_item,
        limit_header: HeaderValue::from(limiter.capacity()),
        problem_head: problem::quota_exceeded_head(status, &detail),
        detail: detail.into(),
        serial: next_serial(),
    }
}
