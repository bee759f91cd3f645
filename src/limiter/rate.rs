//! A rate as the operator writes it (`"COUNT/PERIOD"`): what every
//! algorithm is configured with. The config parses the text; the limiter
//! only needs the two numbers.

use std::time::Duration;

/// `"COUNT/PERIOD"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// May be 0: the route is closed.
    pub count: u64,
    /// Never zero.
    pub period: Duration,
}
