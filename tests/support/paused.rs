//! sluice in-process on paused tokio time (`#[tokio::test(start_paused =
//! true)]`), with its decisions, holds and settlements on a
//! [`RuntimeClock`]: the proxy's clock and every I/O deadline read the same
//! time, which moves only when the test calls `tokio::time::advance` or the
//! runtime has nothing to do and jumps to its next timer (auto-advance).
//! docs/development.md, "How tests drive time".
//!
//! Loopback I/O does not let the runtime idle: a byte written is readable
//! by the next poll of the reactor, so an exchange completes without time
//! moving. Time jumps only when every task waits for a timer, and then to
//! the earliest one; so the server's own timeouts are set an hour long
//! here, beyond any instant these tests reach, and a jump can only land on
//! a timer a test is about (or on the admin listener's 1 s status sample,
//! the pool's 10 s sweep and a kept-alive connection's 10 s quiet clock,
//! which change nothing a test looks at).

use std::net::SocketAddr;

use sluice::clock::{ProxyClock, RuntimeClock};

use super::{Sluice, Upstream};

/// The start of a minute, so windows begin with the test.
pub const START: u64 = 1_800_000_000 * 1_000_000_000;

/// The `[server]` timeouts that arm a timer; each is an hour unless the
/// test sets it.
const TIMEOUTS: [&str; 6] = [
    "connect_timeout",
    "upstream_timeout",
    "header_read_timeout",
    "body_timeout",
    "idle_timeout",
    "send_timeout",
];

/// A recording upstream, and sluice in front of it on a [`RuntimeClock`]
/// reading [`START`] now. `server` holds more `[server]` keys (a timeout
/// named there replaces the hour), `rules` the rest of the file.
pub async fn start(server: &str, rules: &str) -> (Upstream, Sluice) {
    let upstream = Upstream::start().await;
    let sluice = start_for(upstream.addr, server, rules).await;
    (upstream, sluice)
}

/// sluice as [`start`] makes it, in front of `upstream`.
pub async fn start_for(upstream: SocketAddr, server: &str, rules: &str) -> Sluice {
    let hours: String = TIMEOUTS
        .iter()
        .filter(|key| !server.contains(*key))
        .map(|key| format!("{key} = \"1h\"\n"))
        .collect();
    let config = format!("[server]\nupstream = \"http://{{upstream}}\"\n{hours}{server}{rules}");
    let clock = ProxyClock::Runtime(RuntimeClock::new(START));
    Sluice::start_with_clock(&config, upstream, clock).await
}

/// sluice from a whole `config` in front of `upstream`, on a
/// [`RuntimeClock`] reading [`START`] now; its timeouts are the config's
/// (a test whose paused time runs longer than one sets it).
pub async fn on_clock(config: &str, upstream: SocketAddr) -> Sluice {
    from(config, upstream, START).await
}

/// [`on_clock`] with the clock reading `unix_nanos` now (a moment a test
/// needs: just before a calendar's boundary).
pub async fn from(config: &str, upstream: SocketAddr, unix_nanos: u64) -> Sluice {
    let clock = ProxyClock::Runtime(RuntimeClock::new(unix_nanos));
    Sluice::start_with_clock(config, upstream, clock).await
}

/// Lets `span` of paused time pass as it would: the runtime jumps from
/// timer to timer (the upstream's pauses, the proxy's ticks), each firing at
/// its own instant, where one `advance` by `span` would fire them all at
/// its end. No wall-clock time passes.
pub async fn pass(span: std::time::Duration) {
    tokio::time::sleep(span).await;
}

/// Lets the runtime turn, without time moving, until `done` holds: what
/// can happen without a timer firing has happened then. Panics after
/// 10,000 turns.
pub async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if done() {
            return;
        }
        // A yield, unlike a sleep, never lets the paused clock jump.
        tokio::task::yield_now().await;
    }
    panic!("never {what}");
}

/// Reads `series` from `/metrics` until it is `value` (each read a full
/// exchange with the admin listener, in which no time passes). Panics
/// after 1,000 reads.
pub async fn until_metric(sluice: &Sluice, series: &str, value: f64) {
    let mut last = f64::NAN;
    for _ in 0..1_000 {
        last = sluice.metric(series).await;
        if last == value {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("{series} stayed {last}, never {value}");
}
