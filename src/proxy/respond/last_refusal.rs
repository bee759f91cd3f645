//! The last refusal each worker thread wrote, sent again while it still
//! applies.
//!
//! A caller over its limit is usually refused many times a second, and
//! every one of those answers is the same: the same limit, nothing
//! remaining, the same `Retry-After` and reset seconds. Writing it (the
//! problem document, seven hashed header inserts, three allocations) was
//! a large part of the 429 path's instructions (docs/benchmarks-history.md,
//! "The 429 path's own work"); sending the remembered one again is two
//! reference counts: its fields are one shared buffer of lines
//! (`own_fields.rs`) and its map is empty.
//!
//! Only a refusal by a single limit is remembered, and only once the same
//! answer was written twice in a row, so a thread whose refusals all differ
//! (many callers, each at its own point of its window) pays one comparison
//! per refusal, never a copy it does not use.

use std::cell::RefCell;

use bytes::Bytes;

use super::own_fields::OwnFields;

/// Everything a single-limit refusal is written from: two refusals with
/// equal keys are byte for byte the same answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusalKey {
    /// The refusing limit's [`crate::policy::Limit::serial`]: its name,
    /// rule, capacity and policy header, and the policy compiled with it
    /// (`response.status`, `response.headers`), as every compile makes new
    /// limits.
    pub limit: u64,
    pub remaining: u64,
    pub retry_after_secs: Option<u64>,
    /// `X-RateLimit-Reset`: the Unix second the limit resets at.
    pub reset_at: u64,
    /// `RateLimit`'s `t`: seconds until it resets.
    pub reset_in: u64,
}

struct Last {
    key: RefusalKey,
    /// The answer, once `key` has come twice in a row.
    answer: Option<(OwnFields, Bytes)>,
}

thread_local! {
    static LAST: RefCell<Option<Last>> = const { RefCell::new(None) };
}

/// This thread's remembered answer to `key`, if its last refusal was the
/// same one.
pub fn replay(key: &RefusalKey) -> Option<(OwnFields, Bytes)> {
    LAST.with_borrow(|last| match last {
        Some(Last {
            key: last_key,
            answer: Some((fields, body)),
        }) if last_key == key => Some((fields.clone(), body.clone())),
        _ => None,
    })
}

/// Notes that `key` was just answered with `fields` and `body`, which are
/// kept when the thread's previous refusal had the same key (the fields
/// then become shared, to be cloned by reference count).
pub fn remember(key: RefusalKey, fields: &mut OwnFields, body: &Bytes) {
    LAST.with_borrow_mut(|last| match last {
        Some(seen) if seen.key == key => {
            seen.answer = Some((fields.shared(), body.clone()));
        }
        _ => *last = Some(Last { key, answer: None }),
    });
}
