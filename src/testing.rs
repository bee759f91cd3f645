//! Helpers shared by unit tests.

/// A tiny deterministic pseudo-random generator (xorshift64), so generated
/// inputs need no extra crate and every run sees the same sequence.
pub struct XorShift(pub u64);

impl XorShift {
    /// The next value; never 0 for a nonzero seed.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}
