//! The limiter core: pure state machines, one per algorithm.
//!
//! An algorithm takes its per-key state, `now` and a cost, and returns a
//! [`Decision`] plus the new state. Nothing here does I/O, reads a clock or
//! owns a map: stores ([`crate::store`]) keep the states and call these steps
//! under whatever atomicity they provide (a shard lock, a Redis Lua script).
//!
//! Only the token bucket ([`gcra`]) exists today. Window counters and the
//! sliding log add their own state types next to it, and [`Limiter`] grows a
//! variant per algorithm so the store and proxy keep one interface.

pub mod gcra;

use crate::clock::Nanos;
pub use gcra::Gcra;

/// What a bucket looks like to a client after a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketState {
    /// Whole units available now (0 when in debt).
    pub remaining: u64,
    /// Time until the bucket would be full again if nothing more arrived.
    pub reset_after: Nanos,
}

/// The outcome of asking one limit for `cost` units. A denial is normal flow,
/// not an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The units were taken.
    Allow(BucketState),
    /// Nothing was taken.
    Deny {
        state: BucketState,
        /// When a request of the same cost would be admitted; `None` when
        /// never (a COUNT of 0).
        retry_after: Option<Nanos>,
    },
}

impl Decision {
    /// Whether the request may pass this limit.
    #[inline]
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow(_))
    }

    /// The bucket state reported in headers.
    #[inline]
    pub fn state(&self) -> BucketState {
        match *self {
            Decision::Allow(state) | Decision::Deny { state, .. } => state,
        }
    }
}

/// A configured limit, whatever its algorithm: what a store needs to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limiter {
    /// `token_bucket`.
    TokenBucket(Gcra),
}

impl Limiter {
    /// The limit reported as `X-RateLimit-Limit` (the bucket's capacity).
    pub fn capacity(&self) -> u64 {
        match self {
            Limiter::TokenBucket(gcra) => gcra.capacity(),
        }
    }
}
