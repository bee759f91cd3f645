//! The keys a rule sees most, in bounded memory: which callers it limits
//! most and which send it the most requests, over the last half to whole
//! minute (`GET /admin/top`, the status page).
//!
//! Each tally is a *space-saving* summary (Metwally et al.): at most
//! [`CAPACITY`] keys, and a key not among them takes the place of the
//! least-counted one, inheriting its count as its possible overcount
//! (`error`). While a tally has room every key is counted exactly; once it
//! is full a newcomer gets in only one time in [`ADMIT_ONE_IN`] (*sample
//! and hold*), so a heavy key misses a few requests before it is held and
//! is counted from then on, and a flood of one-off keys costs each request
//! one scan. Whatever callers send, memory stays fixed.
//!
//! The request path must not take a global lock, so every rule's tallies
//! are split in [`SHARDS`] shards, one per worker thread (threads take a
//! shard each, in turn): each lock is its thread's own, uncontended but for
//! a reader. A reader merges the shards. Recency comes from two periods of
//! [`PERIOD`]: counting goes to the current one, and reading adds the one
//! before; a period two behind is forgotten.
//!
//! A key's text ([`KeyText`], shown as `/admin/bans` shows it) costs an
//! allocation, so it is written once a key has proven itself in the tally
//! ([`Kind::text_after`] hits of its own), never for a passing key.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::clock::Nanos;
use crate::key::KeyText;

/// Keys one tally keeps.
pub const CAPACITY: usize = 32;
/// A key missing from a full tally gets in one time in this many.
const ADMIT_ONE_IN: u64 = 8;
/// Shards per rule (worker threads beyond this share them).
const SHARDS: usize = 8;
/// One counting period: reads cover the current one and the one before.
pub const PERIOD: Nanos = 30_000_000_000;

/// What a tally counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Requests the rule refused (limited or banned).
    Limited,
    /// Requests the rule decided, whatever the outcome.
    Requests,
}

impl Kind {
    /// Hits of its own a key needs before its text is written: a refused
    /// key is worth naming at once; a request counted is not until it
    /// repeats (a flood of one-off keys must not allocate).
    fn text_after(self) -> u32 {
        match self {
            Kind::Limited => 1,
            Kind::Requests => 3,
        }
    }
}

/// One rule's heavy hitters.
#[derive(Debug, Default)]
pub struct HeavyHitters {
    shards: [Mutex<Shard>; SHARDS],
}

#[derive(Debug, Default)]
struct Shard {
    limited: Periods,
    requests: Periods,
}

/// The current period's tally and the one before.
#[derive(Debug, Default)]
struct Periods {
    /// The period `current` counts (instants / [`PERIOD`]).
    period: u64,
    current: Tally,
    previous: Tally,
}

/// One space-saving tally, laid out so that finding a key and the least
/// counted one are straight scans of small arrays (no early exit: the
/// compiler vectorises them).
#[derive(Debug)]
struct Tally {
    len: usize,
    keys: [u64; CAPACITY],
    counts: [u32; CAPACITY],
    /// How much of each count its key may not have earned (inherited from
    /// the key it replaced).
    errors: [u32; CAPACITY],
    texts: [Option<KeyText>; CAPACITY],
}

impl Default for Tally {
    fn default() -> Tally {
        Tally {
            len: 0,
            keys: [0; CAPACITY],
            counts: [0; CAPACITY],
            errors: [0; CAPACITY],
            texts: std::array::from_fn(|_| None),
        }
    }
}

/// A heavy hitter, merged over shards and periods.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Hitter {
    pub key: u64,
    /// The key's text, once written (shown only through
    /// [`crate::key::KeyLabels::show`]).
    pub text: Option<KeyText>,
    /// Requests counted (at most `error` too many).
    pub count: u64,
    pub error: u64,
}

impl HeavyHitters {
    /// Counts one request of `key` at `now`, and its refusal if `refused`
    /// (both under one lock); `text` writes the key's text form, called at
    /// most once per tally while the key stays in it.
    #[inline]
    pub fn count(&self, key: u64, refused: bool, now: Nanos, text: impl Fn() -> KeyText) {
        let mut shard = match self.shards[shard_of_this_thread()].lock() {
            Ok(shard) => shard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let period = now / PERIOD;
        let requests = &mut shard.requests;
        requests.advance(period);
        requests
            .current
            .count(key, Kind::Requests.text_after(), &text);
        if refused {
            let limited = &mut shard.limited;
            limited.advance(period);
            limited
                .current
                .count(key, Kind::Limited.text_after(), &text);
        }
    }

    /// The `n` keys counted most of `kind` over the current period and the
    /// one before, most first.
    pub fn top(&self, kind: Kind, n: usize, now: Nanos) -> Vec<Hitter> {
        let period = now / PERIOD;
        let mut merged = HashMap::new();
        for shard in &self.shards {
            let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            let periods = match kind {
                Kind::Limited => &shard.limited,
                Kind::Requests => &shard.requests,
            };
            for tally in periods.recent(period) {
                tally.entries().for_each(|entry| add(&mut merged, entry));
            }
        }
        let mut merged: Vec<Hitter> = merged.into_values().collect();
        rank(&mut merged, n);
        merged
    }
}

impl Periods {
    /// Moves on to period `now`: the current tally becomes the previous one
    /// if `now` follows it, and both are forgotten if it is later still.
    #[inline]
    fn advance(&mut self, now: u64) {
        if now <= self.period {
            return;
        }
        if now == self.period + 1 {
            std::mem::swap(&mut self.current, &mut self.previous);
        } else {
            self.previous.clear();
        }
        self.current.clear();
        self.period = now;
    }

    /// The tallies that cover period `now` and the one before it.
    fn recent(&self, now: u64) -> impl Iterator<Item = &Tally> {
        let current = (self.period == now).then_some(&self.current);
        let previous = match now.checked_sub(self.period) {
            Some(0) => Some(&self.previous),
            Some(1) => Some(&self.current),
            _ => None,
        };
        current.into_iter().chain(previous)
    }
}

impl Tally {
    #[inline]
    fn count(&mut self, key: u64, text_after: u32, text: &impl Fn() -> KeyText) {
        let mut at = CAPACITY;
        for (slot, &kept) in self.keys[..self.len].iter().enumerate() {
            if kept == key {
                at = slot;
            }
        }
        if at < self.len {
            self.counts[at] = self.counts[at].saturating_add(1);
        } else if self.len < CAPACITY {
            at = self.len;
            self.len += 1;
            (self.keys[at], self.counts[at], self.errors[at]) = (key, 1, 0);
        } else if !admit_newcomer() {
            // A full tally takes a new key only now and then (sample and
            // hold): a flood of one-off keys then costs one scan each and
            // churns nothing, while a heavy key gets in within a few
            // requests and is counted exactly from then on.
            return;
        } else {
            at = least(&self.counts);
            let inherited = self.counts[at];
            self.keys[at] = key;
            self.counts[at] = inherited.saturating_add(1);
            self.errors[at] = inherited;
            self.texts[at] = None;
        }
        if self.texts[at].is_none() && self.counts[at] - self.errors[at] >= text_after {
            self.texts[at] = Some(text());
        }
    }

    fn clear(&mut self) {
        self.len = 0;
        self.texts = std::array::from_fn(|_| None);
    }

    /// Every key kept, with its count, overcount and text.
    fn entries(&self) -> impl Iterator<Item = (u64, u32, u32, Option<&KeyText>)> {
        (0..self.len).map(|at| {
            let text = self.texts[at].as_ref();
            (self.keys[at], self.counts[at], self.errors[at], text)
        })
    }
}

/// The slot of the least count (the first of equals): the least first,
/// then where it is (two scans the compiler vectorises).
#[inline]
fn least(counts: &[u32; CAPACITY]) -> usize {
    let least = counts.iter().copied().min().unwrap_or(0);
    counts.iter().position(|&count| count == least).unwrap_or(0)
}

/// Whether a key missing from a full tally takes a place: one time in
/// [`ADMIT_ONE_IN`], at random (a thread's own xorshift), so no pattern of
/// requests can keep a heavy key out.
#[inline]
fn admit_newcomer() -> bool {
    thread_local! {
        static STATE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    STATE.with(|state| {
        let mut x = state.get();
        if x == 0 {
            // Seeded per thread from the address of its own state.
            x = (std::ptr::from_ref(state) as u64) | 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x % ADMIT_ONE_IN == 0
    })
}

/// Adds a kept key to the merged tallies (one line per key).
fn add(
    merged: &mut HashMap<u64, Hitter>,
    (key, count, error, text): (u64, u32, u32, Option<&KeyText>),
) {
    let hitter = merged.entry(key).or_insert_with(|| Hitter {
        key,
        ..Hitter::default()
    });
    hitter.count += u64::from(count);
    hitter.error += u64::from(error);
    if hitter.text.is_none() {
        hitter.text = text.cloned();
    }
}

/// Sorts `hitters` most counted first (ties: least overcount, then key)
/// and keeps the first `n`.
fn rank(hitters: &mut Vec<Hitter>, n: usize) {
    hitters.sort_unstable_by_key(|h| (std::cmp::Reverse(h.count), h.error, h.key));
    hitters.truncate(n);
}

/// This thread's shard: threads take shards in turn, so each worker
/// counts under a lock of its own.
#[inline]
fn shard_of_this_thread() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|shard| *shard)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Nanos = 1_000_000_000;

    fn text(key: u64) -> impl Fn() -> KeyText {
        move || typed(&format!("key-{key}"))
    }

    fn typed(text: &str) -> KeyText {
        KeyText::typed(text, 1)
    }

    #[test]
    fn the_most_counted_keys_come_first_with_their_text() {
        let hitters = HeavyHitters::default();
        for (key, times) in [(1, 5), (2, 9), (3, 1)] {
            for _ in 0..times {
                hitters.count(key, false, SECOND, text(key));
            }
        }
        let top = hitters.top(Kind::Requests, 2, SECOND);
        assert_eq!(
            top,
            vec![
                Hitter {
                    key: 2,
                    text: Some(typed("key-2")),
                    count: 9,
                    error: 0
                },
                Hitter {
                    key: 1,
                    text: Some(typed("key-1")),
                    count: 5,
                    error: 0
                },
            ]
        );
        // A key seen once is counted, but its text is not written.
        let all = hitters.top(Kind::Requests, 10, SECOND);
        assert_eq!(all[2].key, 3);
        assert_eq!(all[2].text, None);
        assert!(hitters.top(Kind::Limited, 10, SECOND).is_empty());
    }

    #[test]
    fn a_refused_key_is_named_at_once() {
        let hitters = HeavyHitters::default();
        hitters.count(7, true, SECOND, text(7));
        let top = hitters.top(Kind::Limited, 1, SECOND);
        assert_eq!(top[0].text, Some(typed("key-7")));
    }

    #[test]
    fn a_heavy_key_survives_a_flood_of_one_off_keys_and_memory_stays_bounded() {
        let hitters = HeavyHitters::default();
        let named = std::cell::Cell::new(0);
        for i in 0..100_000u64 {
            // The heavy key is one request in ten; the rest never repeat.
            let key = if i % 10 == 0 { 42 } else { 1_000 + i };
            hitters.count(key, false, SECOND, || {
                named.set(named.get() + 1);
                typed("x")
            });
        }
        let top = hitters.top(Kind::Requests, 3, SECOND);
        assert_eq!(top[0].key, 42);
        // Held within a few of its requests, then counted: never above
        // the truth once its inherited `error` is taken off.
        let (count, error) = (top[0].count, top[0].error);
        assert!(
            count >= 9_900 && count - error <= 10_000,
            "{count} ± {error}"
        );
        let shard = hitters.shards[shard_of_this_thread()].lock().unwrap();
        assert_eq!(shard.requests.current.len, CAPACITY);
        drop(shard);
        // Only keys that proved themselves were named (the heavy one).
        let named = named.get();
        assert!(named <= 1 + CAPACITY, "{named} texts written");
    }

    #[test]
    fn counts_fade_after_one_to_two_periods() {
        let hitters = HeavyHitters::default();
        hitters.count(1, true, SECOND, text(1));
        // Still seen in the next period...
        let next = PERIOD + SECOND;
        hitters.count(2, true, next, text(2));
        let keys = |now| -> Vec<u64> {
            hitters
                .top(Kind::Limited, 10, now)
                .iter()
                .map(|hitter| hitter.key)
                .collect()
        };
        assert_eq!(keys(next), vec![1, 2]);
        // ... and gone two periods on, while the later key is still seen.
        assert_eq!(keys(2 * PERIOD + SECOND), vec![2]);
        assert!(keys(4 * PERIOD).is_empty());
    }

    #[test]
    fn shards_of_several_threads_are_merged() {
        let hitters = std::sync::Arc::new(HeavyHitters::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let hitters = std::sync::Arc::clone(&hitters);
                std::thread::spawn(move || {
                    for _ in 0..1_000 {
                        hitters.count(5, false, SECOND, text(5));
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let top = hitters.top(Kind::Requests, 1, SECOND);
        assert_eq!((top[0].key, top[0].count), (5, 4_000));
    }
}
