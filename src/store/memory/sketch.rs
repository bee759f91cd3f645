//! The overflow sketch: where new keys are limited while a table is full of
//! active buckets.
//!
//! A count-min sketch of bucket states: `DEPTH` rows of cells, each key
//! mapped to one cell per row by independent bits of its (seeded) hash. A
//! request is admitted only when every one of its cells would admit it, and
//! then it is charged to all of them. A cell is thus charged with everything
//! admitted for every key that maps to it, so its state is never less used
//! than any one of those keys' own bucket would be: the sketch can over-count
//! (collisions), never under-count, for every algorithm (token bucket TATs,
//! window counters, logs: each cell sees a superset of a key's arrivals).
//! A key flood can therefore never buy anyone a fresh budget, while
//! legitimate new keys keep most of their own budget as long as the flood's
//! volume spread over a row stays below the limit per cell.
//!
//! Measured against the shared overflow bucket it replaces (one bucket for
//! all new keys of a limit), in `tests/e2e/memory_store.rs`: with 100k
//! one-request keys flooding a full 1000-key table within a second at
//! 10/min, the shared bucket is spent by the flood and a legitimate
//! newcomer is refused outright; with the sketch (2 × 65536 cells) each
//! newcomer keeps most of its 10.
//!
//! Memory: 2 MiB per limit table for a token bucket's or window counters'
//! 16-byte cells, and for logs as many cells as fit in 16 MiB were
//! every cell to hold COUNT stamps (a log limit of COUNT 10 gets the full
//! width, COUNT 100 an eighth of it); allocated the first time the table is
//! full. The cells live in one array
//! behind one mutex per table: the sketch only runs while the table is full.

use std::sync::Mutex;

use crate::clock::Nanos;
use crate::limiter::{Algorithm, BucketState, Decision};

/// Rows: each key has one cell per row.
const DEPTH: usize = 2;
/// Most cells per row (a power of two).
const MAX_WIDTH: usize = 1 << 16;
/// Fewest cells per row, whatever the budget.
const MIN_WIDTH: usize = 1 << 4;
/// Memory a sketch may hold at most, per table (cells plus, for logs, the
/// stamps they can grow to).
const MEMORY_BUDGET: usize = 16 << 20;

/// A count-min sketch of `S` states.
#[derive(Debug)]
pub struct Sketch<S> {
    /// `DEPTH` rows of `width` cells, row after row.
    cells: Mutex<Box<[S]>>,
    /// log2 of the row width.
    width_bits: u32,
}

impl<S: Default> Sketch<S> {
    /// A sketch whose cells may each grow to `cell_bytes` (state plus the
    /// most heap it can hold), as wide as the memory budget allows.
    pub fn new(cell_bytes: usize) -> Sketch<S> {
        let fit = MEMORY_BUDGET / (DEPTH * cell_bytes.max(1));
        // Round down to a power of two within the bounds.
        let width = if fit >= MAX_WIDTH {
            MAX_WIDTH
        } else {
            (1usize << fit.max(1).ilog2()).max(MIN_WIDTH)
        };
        Sketch {
            cells: Mutex::new((0..DEPTH * width).map(|_| S::default()).collect()),
            width_bits: width.ilog2(),
        }
    }

    /// The cell of `key` in each row.
    #[inline]
    fn cells_of(&self, key: u64) -> [usize; DEPTH] {
        let width = 1usize << self.width_bits;
        let mut cells = [0; DEPTH];
        for (row, seed) in ROW_SEEDS.iter().enumerate() {
            // Keys are already seeded hashes, but the store's shards and maps
            // use their bits too: remix per row so the rows disagree about
            // which keys collide, whatever structure the keys have.
            let column = (mix(key ^ seed) >> (64 - self.width_bits)) as usize;
            cells[row] = row * width + column;
        }
        cells
    }

    /// Admits `cost` units for `key` only if every cell of the key admits
    /// them, and then charges every cell. The decision reports the most
    /// constraining cell: the least remaining, the latest reset, the latest
    /// retry (or none).
    pub fn acquire<A>(&self, algorithm: &A, key: u64, now: Nanos, cost: u64) -> Decision
    where
        A: Algorithm<State = S>,
    {
        let cells = self.cells_of(key);
        let mut states = lock(&self.cells);
        let verdict = cells
            .iter()
            .map(|&cell| algorithm.peek(&states[cell], now, cost))
            .reduce(tighter)
            .expect("DEPTH > 0");
        if !verdict.is_allowed() {
            return verdict;
        }
        cells
            .iter()
            .map(|&cell| algorithm.acquire(&mut states[cell], now, cost))
            .reduce(tighter)
            .expect("DEPTH > 0")
    }

    /// Gives back what [`Sketch::acquire`] charged for `key` at `now`.
    pub fn refund<A>(&self, algorithm: &A, key: u64, now: Nanos, cost: u64)
    where
        A: Algorithm<State = S>,
    {
        let mut states = lock(&self.cells);
        for cell in self.cells_of(key) {
            algorithm.refund(&mut states[cell], now, cost, now);
        }
    }

    /// Calls `f` on every cell (a reload rescaling the states).
    pub fn for_each_mut(&self, f: impl FnMut(&mut S)) {
        lock(&self.cells).iter_mut().for_each(f);
    }

    /// Cells per row.
    #[cfg(test)]
    pub fn width(&self) -> usize {
        1 << self.width_bits
    }
}

/// One seed per row.
const ROW_SEEDS: [u64; DEPTH] = [0x9e37_79b9_7f4a_7c15, 0xc2b2_ae3d_27d4_eb4f];

/// The 64-bit finaliser of MurmurHash3: every input bit affects every
/// output bit.
#[inline]
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The more constraining of two decisions about the same request.
fn tighter(a: Decision, b: Decision) -> Decision {
    let state = BucketState {
        remaining: a.state().remaining.min(b.state().remaining),
        reset_after: a.state().reset_after.max(b.state().reset_after),
    };
    match (a, b) {
        (
            Decision::Deny {
                retry_after: ra, ..
            },
            Decision::Deny {
                retry_after: rb, ..
            },
        ) => Decision::Deny {
            state,
            // Never, if either cell never admits.
            retry_after: ra.zip(rb).map(|(ra, rb)| ra.max(rb)),
        },
        (deny @ Decision::Deny { .. }, _) | (_, deny @ Decision::Deny { .. }) => deny,
        (a, b) => match a.wait().max(b.wait()) {
            0 => Decision::Allow(state),
            wait => Decision::Hold { state, wait },
        },
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{FixedWindow, Gcra, LogState, SlidingLog, TokenState};
    use crate::testing::{rate, SEC};

    #[test]
    fn one_key_alone_is_limited_exactly_like_its_own_bucket() {
        let limit = Gcra::new(rate(5, 60), 5);
        let sketch = Sketch::<TokenState>::new(16);
        let admitted = (0..10)
            .filter(|_| sketch.acquire(&limit, 42, SEC, 1).is_allowed())
            .count();
        assert_eq!(admitted, 5);
    }

    #[test]
    fn colliding_keys_share_a_cell_but_never_exceed_their_own_limits() {
        let limit = FixedWindow::new(rate(3, 60));
        let sketch = Sketch::new(16);
        // Many keys: collisions are certain in a 64-cell row.
        let mut per_key = std::collections::HashMap::new();
        for round in 0..20u64 {
            for key in 0..10_000u64 {
                let key = key.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ round;
                if sketch.acquire(&limit, key, SEC, 1).is_allowed() {
                    *per_key.entry(key).or_insert(0) += 1;
                }
            }
        }
        assert!(per_key.values().all(|&n| n <= 3));
    }

    #[test]
    fn a_refund_gives_back_every_cell() {
        let limit = Gcra::new(rate(2, 60), 2);
        let sketch = Sketch::<TokenState>::new(16);
        assert!(sketch.acquire(&limit, 7, SEC, 2).is_allowed());
        assert!(!sketch.acquire(&limit, 7, SEC, 1).is_allowed());
        sketch.refund(&limit, 7, SEC, 2);
        assert!(sketch.acquire(&limit, 7, SEC, 2).is_allowed());
    }

    #[test]
    fn log_sketches_stay_within_the_memory_budget() {
        let limit = SlidingLog::new(rate(10_000, 60));
        let sketch = Sketch::<LogState>::new(std::mem::size_of::<LogState>() + 10_000 * 8);
        assert!(sketch.width() * DEPTH * 10_000 * 8 <= MEMORY_BUDGET);
        assert!(sketch.width() >= MIN_WIDTH);
        assert!(sketch.acquire(&limit, 1, SEC, 1).is_allowed());
    }
}
