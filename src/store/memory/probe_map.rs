//! A small open-addressing map from bucket keys to bucket states, one per
//! shard. Keys and values sit side by side in one array (24 bytes a slot for
//! a token bucket's or a window's 16-byte state) and collisions probe
//! linearly, so a lookup usually touches one cache line (two for the slots
//! that straddle one): at a million keys that is one memory miss
//! per decision instead of the two (control bytes, then slot) of a
//! general-purpose map.
//!
//! Keys are already uniformly distributed 64-bit hashes; key 0 marks an empty
//! slot, so the store maps a (1-in-2^64) zero key to 1 before using it.

/// Slots stay at most 7/8 full.
const MAX_LOAD_NUMERATOR: usize = 7;
const MAX_LOAD_DENOMINATOR: usize = 8;
const MIN_CAPACITY: usize = 16;
const EMPTY: u64 = 0;

/// An empty slot has key 0 and a default value (which, for every state type
/// the store uses, owns no heap memory).
#[derive(Debug, Clone, Default)]
struct Slot<V> {
    key: u64,
    value: V,
}

/// Open-addressing, linear-probing map of nonzero `u64` keys to values.
#[derive(Debug)]
pub struct ProbeMap<V> {
    slots: Box<[Slot<V>]>,
    len: usize,
}

impl<V> Default for ProbeMap<V> {
    fn default() -> Self {
        ProbeMap {
            slots: Box::default(),
            len: 0,
        }
    }
}

impl<V: Default> ProbeMap<V> {
    /// Number of entries.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the map is empty.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// The slot holding `key`, or the empty slot where it would go.
    #[inline]
    fn find(&self, key: u64) -> Option<usize> {
        debug_assert_ne!(key, EMPTY);
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.mask();
        let mut index = key as usize & mask;
        loop {
            let slot_key = self.slots[index].key;
            if slot_key == key || slot_key == EMPTY {
                return Some(index);
            }
            index = (index + 1) & mask;
        }
    }

    /// The value for `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<&V> {
        let index = self.find(key)?;
        let slot = &self.slots[index];
        (slot.key == key).then_some(&slot.value)
    }

    /// The value for `key`, mutably.
    #[inline]
    pub fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        let index = self.find(key)?;
        let slot = &mut self.slots[index];
        (slot.key == key).then_some(&mut slot.value)
    }

    /// Inserts or replaces; returns the previous value.
    pub fn insert(&mut self, key: u64, value: V) -> Option<V> {
        if (self.len + 1) * MAX_LOAD_DENOMINATOR > self.slots.len() * MAX_LOAD_NUMERATOR {
            self.resize((self.slots.len() * 2).max(MIN_CAPACITY));
        }
        let index = self.find(key).expect("a resized map has room");
        let slot = &mut self.slots[index];
        if slot.key == key {
            return Some(std::mem::replace(&mut slot.value, value));
        }
        *slot = Slot { key, value };
        self.len += 1;
        None
    }

    /// Calls `f` on every value.
    pub fn for_each_mut(&mut self, mut f: impl FnMut(&mut V)) {
        for slot in self.slots.iter_mut().filter(|slot| slot.key != EMPTY) {
            f(&mut slot.value);
        }
    }

    /// Keeps only the entries for which `keep` returns true; returns how many
    /// were removed. Rebuilds the array (sweeps are rare; lookups are not),
    /// shrinking it when it became mostly empty.
    pub fn retain(&mut self, mut keep: impl FnMut(u64, &V) -> bool) -> usize {
        let before = self.len;
        let removed = self
            .slots
            .iter()
            .filter(|slot| slot.key != EMPTY && !keep(slot.key, &slot.value))
            .count();
        if removed == 0 {
            return 0;
        }
        let survivors = before - removed;
        let mut capacity = self.slots.len();
        while capacity > MIN_CAPACITY && survivors * 4 < capacity {
            capacity /= 2;
        }
        let old = std::mem::replace(
            &mut self.slots,
            empty_slots(if survivors == 0 { 0 } else { capacity }),
        );
        self.len = 0;
        for slot in old.into_vec() {
            if slot.key != EMPTY && keep(slot.key, &slot.value) {
                self.place(slot);
            }
        }
        removed
    }

    fn resize(&mut self, capacity: usize) {
        let old = std::mem::replace(&mut self.slots, empty_slots(capacity));
        self.len = 0;
        for slot in old.into_vec() {
            if slot.key != EMPTY {
                self.place(slot);
            }
        }
    }

    /// Moves a slot of a key not in the map into its place (room assured).
    fn place(&mut self, slot: Slot<V>) {
        let index = self.find(slot.key).expect("a resized map has room");
        self.slots[index] = slot;
        self.len += 1;
    }
}

fn empty_slots<V: Default>(capacity: usize) -> Box<[Slot<V>]> {
    (0..capacity).map(|_| Slot::default()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn behaves_like_a_hash_map_under_random_operations() {
        let mut map = ProbeMap::<u64>::default();
        let mut model = HashMap::new();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..20_000u64 {
            // A small key space so that keys collide, repeat and get removed.
            let key = (next() % 2_000).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            match next() % 4 {
                0 | 1 => assert_eq!(map.insert(key, round), model.insert(key, round)),
                2 => assert_eq!(map.get(key), model.get(&key)),
                _ => {
                    if let Some(value) = map.get_mut(key) {
                        *value += 1;
                    }
                    if let Some(value) = model.get_mut(&key) {
                        *value += 1;
                    }
                }
            }
            if round % 5_000 == 4_999 {
                let threshold = next();
                let removed = map.retain(|_, value| value.wrapping_mul(threshold) % 3 != 0);
                let before = model.len();
                model.retain(|_, value| value.wrapping_mul(threshold) % 3 != 0);
                assert_eq!(removed, before - model.len());
            }
            assert_eq!(map.len(), model.len());
        }
        for (key, value) in &model {
            assert_eq!(map.get(*key), Some(value));
        }
    }

    #[test]
    fn retain_everything_removed_frees_the_array() {
        let mut map = ProbeMap::<u64>::default();
        for key in 1..=1000u64 {
            map.insert(key.wrapping_mul(0x9e37_79b9_7f4a_7c15), key);
        }
        assert_eq!(map.retain(|_, _| false), 1000);
        assert!(map.is_empty());
        assert_eq!(map.get(0x9e37_79b9_7f4a_7c15), None);
        map.insert(7, 7);
        assert_eq!(map.get(7), Some(&7));
    }
}
