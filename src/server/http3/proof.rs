//! Whether a QUIC connection attempt is proved, refused or let through to
//! its handshake (docs/edge.md, "HTTP/3", "An address is proved before it
//! is charged").
//!
//! A client's source address is proved by a Retry token, by a token
//! sluice issued on an earlier connection (NEW_TOKEN), or by a completed
//! handshake. Nothing a request could charge happens before that: requests
//! come only once the handshake is done, as 0-RTT early data is declined.
//! What is decided here costs no TLS work: a Retry is a stateless packet,
//! and a refusal a `CONNECTION_REFUSED` close.

use crate::config::QuicRetry;

/// What becomes of one connection attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Sent a Retry: the client must come back with its token, which
    /// proves its address.
    Retry,
    /// Closed with `CONNECTION_REFUSED`, no handshake begun.
    Refuse,
    /// Its handshake begins.
    Handshake,
}

/// The step for an attempt. `in_progress`: handshakes begun and not yet
/// done; `room`: whether `max_connections` has room for one more;
/// `refused`: whether its address would be refused at the handshake,
/// asked only when the answer matters.
///
/// An unproved address is sent a Retry when `quic_retry` says so, and also
/// whenever it would be refused: it is refused only once proved, so a
/// spoofed source address cannot have a denied client's answer sent to
/// another, and the proof costs sluice a stateless packet.
pub fn step(
    proved: bool,
    quic_retry: QuicRetry,
    in_progress: usize,
    room: bool,
    refused: impl FnOnce() -> bool,
) -> Step {
    if !proved {
        let busy = match quic_retry {
            QuicRetry::Always => true,
            QuicRetry::Never => false,
            QuicRetry::Busy(at) => in_progress >= at as usize,
        };
        if busy || refused() {
            return Step::Retry;
        }
        return if room { Step::Handshake } else { Step::Refuse };
    }
    if !room || refused() {
        return Step::Refuse;
    }
    Step::Handshake
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unproved_address_is_retried_as_quic_retry_says() {
        let never_refused = || false;
        assert_eq!(
            step(false, QuicRetry::Always, 0, true, never_refused),
            Step::Retry
        );
        assert_eq!(
            step(false, QuicRetry::Never, 10_000, true, never_refused),
            Step::Handshake
        );
        assert_eq!(
            step(false, QuicRetry::Busy(3), 2, true, never_refused),
            Step::Handshake
        );
        assert_eq!(
            step(false, QuicRetry::Busy(3), 3, true, never_refused),
            Step::Retry
        );
        assert_eq!(
            step(false, QuicRetry::Busy(0), 0, true, never_refused),
            Step::Retry
        );
    }

    #[test]
    fn a_proved_address_is_never_retried_again() {
        for retry in [QuicRetry::Always, QuicRetry::Never, QuicRetry::Busy(0)] {
            assert_eq!(step(true, retry, 1_000, true, || false), Step::Handshake);
        }
    }

    #[test]
    fn a_refused_address_is_proved_first_then_refused() {
        // Whatever quic_retry says, even "never": the refusal waits for
        // the proof, which costs a stateless packet.
        for retry in [QuicRetry::Always, QuicRetry::Never, QuicRetry::Busy(100)] {
            assert_eq!(step(false, retry, 0, true, || true), Step::Retry);
            assert_eq!(step(true, retry, 0, true, || true), Step::Refuse);
        }
    }

    #[test]
    fn the_refusal_is_not_looked_up_when_a_retry_is_due_anyway() {
        let asked = std::cell::Cell::new(false);
        let refused = || {
            asked.set(true);
            true
        };
        assert_eq!(
            step(false, QuicRetry::Always, 0, true, refused),
            Step::Retry
        );
        assert!(!asked.get());
    }

    #[test]
    fn beyond_max_connections_an_attempt_is_refused_without_a_handshake() {
        assert_eq!(
            step(true, QuicRetry::Never, 0, false, || false),
            Step::Refuse
        );
        assert_eq!(
            step(false, QuicRetry::Never, 0, false, || false),
            Step::Refuse
        );
        // A Retry first, when one is due: it costs less than a refusal's
        // look at the rules, and the client may find room when it returns.
        assert_eq!(
            step(false, QuicRetry::Always, 0, false, || false),
            Step::Retry
        );
    }
}
