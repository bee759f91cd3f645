//! Trace and span ids: 16 and 8 random bytes from the thread's generator
//! (ChaCha, seeded from the OS), never all zero (W3C Trace Context §3.2.2:
//! an all-zero id is invalid).

use rand::RngCore;

/// A trace's id (W3C `trace-id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId(pub [u8; 16]);

/// A span's id (W3C `parent-id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId(pub [u8; 8]);

impl TraceId {
    /// A fresh id whose low 8 bytes are `low` (drawn first, as the sampling
    /// decision reads only them: [`crate::trace::sample`]).
    pub fn with_low(low: u64) -> TraceId {
        let mut high = rand::rng().next_u64();
        if high == 0 && low == 0 {
            high = 1;
        }
        let mut bytes = [0; 16];
        bytes[..8].copy_from_slice(&high.to_be_bytes());
        bytes[8..].copy_from_slice(&low.to_be_bytes());
        TraceId(bytes)
    }

    /// The low 8 bytes, big-endian, as OpenTelemetry's ratio sampler reads
    /// them.
    pub fn low(&self) -> u64 {
        let mut low = [0; 8];
        low.copy_from_slice(&self.0[8..]);
        u64::from_be_bytes(low)
    }

    pub fn is_valid(&self) -> bool {
        self.0 != [0; 16]
    }
}

impl SpanId {
    /// A fresh id.
    pub fn random() -> SpanId {
        let id = rand::rng().next_u64();
        SpanId(id.max(1).to_be_bytes())
    }

    pub fn is_valid(&self) -> bool {
        self.0 != [0; 8]
    }
}

/// 64 random bits: the low half of a trace id sluice may start.
pub fn random_low() -> u64 {
    rand::rng().next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_ids_are_valid_and_differ() {
        let a = TraceId::with_low(random_low());
        let b = TraceId::with_low(random_low());
        assert!(a.is_valid() && b.is_valid());
        assert_ne!(a, b);
        assert_ne!(SpanId::random(), SpanId::random());
        assert_eq!(TraceId::with_low(0x0102).low(), 0x0102);
        assert!(TraceId::with_low(0).is_valid());
    }
}
