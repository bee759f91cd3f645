//! Temporary bans (`ban = { after, within, for }`): a key limited `after`
//! times within `within` is refused for `for` without its bucket being
//! asked at all. Bans can also be set and lifted by hand (`/admin/bans`).
//!
//! One [`BanTable`] per rule with a `ban` (or a hand-made ban), kept across
//! reloads while the rule keeps its name and key. It holds, per key, the
//! strikes of the current `within` window and the end of a ban, plus the
//! key's text for the admin listing (taken when the ban starts, the only
//! time it is built). The table is bounded: at most [`MAX_ENTRIES`] keys
//! are tracked; past that, entries whose strikes and ban have lapsed are
//! swept, and if none have, new keys are not tracked (their requests are
//! still rate limited; they only cannot earn a ban until room frees).
//! Time comes from the caller, so tests are exact.
//!
//! With a shared store the table is this instance's copy of the fleet's
//! bans (docs/multi-instance.md, "Bans across instances"): bans read from
//! the board in Redis are *shared* entries, replaced by what the board says
//! ([`BanTable::reconcile`]); in hybrid mode the strikes counted here wait
//! to be added up in Redis by the next sync ([`BanTable::take_strikes`]).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use dashmap::DashMap;

use crate::clock::Nanos;
use crate::key::KeyText;
use crate::store::BucketKey;

/// Keys one rule's ban table tracks at most.
pub const MAX_ENTRIES: usize = 100_000;

/// A rule's `ban` parameters in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BanPolicy {
    pub after: u64,
    pub within: Nanos,
    pub duration: Nanos,
}

/// One key's strikes and ban.
#[derive(Debug, Clone, Default)]
struct Entry {
    /// Start of the window the strikes count in.
    window_start: Nanos,
    strikes: u64,
    /// The ban lasts while `now < banned_until`.
    banned_until: Nanos,
    /// The key as text (admin listing); set when banned.
    key_text: Option<KeyText>,
    /// Set by `POST /admin/bans` rather than earned.
    manual: bool,
    /// Known to be in Redis (read from the board, or met in a decision
    /// there): a ban the board no longer lists was lifted elsewhere.
    shared: bool,
}

/// One ban in the admin listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveBan {
    pub key: BucketKey,
    /// The key's text, when known (shown only through
    /// [`crate::key::KeyLabels::show`]).
    pub key_text: Option<KeyText>,
    pub until: Nanos,
    pub manual: bool,
    /// Known to be in Redis (a shared store): the board lists it.
    pub shared: bool,
}

/// After a sweep that freed nothing, no other sweep for this long: a table
/// full of live strikes must not turn every new key into a full scan.
const SWEEP_BACKOFF: Nanos = 1_000_000_000;

/// Keys whose strikes wait for the next sync at most (hybrid mode); the
/// strikes of others are counted here only.
pub const MAX_UNSENT: usize = 10_000;

/// The bans and strikes of one rule.
#[derive(Debug, Default)]
pub struct BanTable {
    entries: DashMap<BucketKey, Entry, foldhash::fast::RandomState>,
    /// Earliest `now` of the next sweep.
    next_sweep: std::sync::atomic::AtomicU64,
    /// The latest end of any ban ever set: before it, a lookup is needed;
    /// after it, no key can be banned, and the request path skips the map.
    latest_end: std::sync::atomic::AtomicU64,
    /// Hybrid mode: strikes counted since the last sync, per key (set up
    /// by [`BanTable::share_strikes`]).
    unsent: OnceLock<Mutex<HashMap<BucketKey, u64, foldhash::fast::RandomState>>>,
}

impl BanTable {
    /// When `key` is banned at `now`: the time left.
    #[inline]
    pub fn banned(&self, key: BucketKey, now: Nanos) -> Option<Nanos> {
        if !self.any(now) {
            return None;
        }
        let entry = self.entries.get(&key)?;
        (entry.banned_until > now).then(|| entry.banned_until - now)
    }

    /// Whether a ban may be in force at `now`: one load, and most rules
    /// have none.
    #[inline]
    pub fn any(&self, now: Nanos) -> bool {
        now < self.latest_end.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Counts one limited answer for `key`. Returns `true` when this strike
    /// starts a ban (the caller then names the key with [`BanTable::name`]).
    pub fn strike(&self, key: BucketKey, now: Nanos, policy: BanPolicy) -> bool {
        if !self.entries.contains_key(&key) && !self.make_room(now, policy.within) {
            return false;
        }
        let mut entry = self.entries.entry(key).or_default();
        if entry.banned_until > now {
            // Answers to a banned key never count toward another ban.
            return false;
        }
        if entry.strikes == 0 || now.saturating_sub(entry.window_start) >= policy.within {
            entry.window_start = now;
            entry.strikes = 0;
        }
        entry.strikes += 1;
        if let Some(unsent) = self.unsent.get() {
            let mut unsent = unsent.lock().unwrap_or_else(|p| p.into_inner());
            if unsent.len() < MAX_UNSENT || unsent.contains_key(&key) {
                *unsent.entry(key).or_default() += 1;
            }
        }
        if entry.strikes < policy.after {
            return false;
        }
        entry.strikes = 0;
        entry.banned_until = now.saturating_add(policy.duration);
        entry.manual = false;
        self.latest_end
            .fetch_max(entry.banned_until, std::sync::atomic::Ordering::Relaxed);
        true
    }

    /// The text of `key`, when this instance knows it (it started or met
    /// the key's ban, or was told it by hand).
    pub fn key_text(&self, key: BucketKey) -> Option<KeyText> {
        self.entries.get(&key)?.key_text.clone()
    }

    /// Records the text of a banned key, for the admin listing.
    pub fn name(&self, key: BucketKey, text: KeyText) {
        if let Some(mut entry) = self.entries.get_mut(&key) {
            entry.key_text = Some(text);
        }
    }

    /// Bans `key` by hand until `now + duration` (replacing any ban).
    pub fn ban(&self, key: BucketKey, text: KeyText, now: Nanos, duration: Nanos) {
        // A hand-made ban is always recorded, even in a full table.
        self.make_room(now, 0);
        let mut entry = self.entries.entry(key).or_default();
        entry.banned_until = now.saturating_add(duration);
        entry.strikes = 0;
        entry.key_text = Some(text);
        entry.manual = true;
        self.latest_end
            .fetch_max(entry.banned_until, std::sync::atomic::Ordering::Relaxed);
    }

    /// Notes that the board in Redis lists `key`'s ban (it was posted).
    pub fn posted(&self, key: BucketKey) {
        if let Some(mut entry) = self.entries.get_mut(&key) {
            entry.shared = true;
        }
    }

    /// Records a ban a shared store holds on `key` until `until` (started by
    /// a strike there, or by another instance), so that this instance
    /// refuses the key without asking the store (and its fallback still
    /// refuses it while the store fails).
    pub fn mirror(&self, key: BucketKey, now: Nanos, until: Nanos) {
        self.make_room(now, 0);
        let mut entry = self.entries.entry(key).or_default();
        if entry.banned_until < until {
            entry.banned_until = until;
            entry.strikes = 0;
        }
        entry.shared = true;
        self.latest_end
            .fetch_max(until, std::sync::atomic::Ordering::Relaxed);
    }

    /// Makes the shared bans of this table what the board lists: `listed`
    /// holds each ban in force there (key, end, set by hand). A shared ban
    /// the board no longer lists was lifted on another instance and is
    /// lifted here; a ban started here and not yet on the board stays.
    pub fn reconcile(&self, listed: &[(BucketKey, Nanos, bool)], now: Nanos) {
        for &(key, until, manual) in listed {
            self.make_room(now, 0);
            let mut entry = self.entries.entry(key).or_default();
            entry.banned_until = until;
            entry.strikes = 0;
            entry.manual = manual;
            entry.shared = true;
            self.latest_end
                .fetch_max(until, std::sync::atomic::Ordering::Relaxed);
        }
        if self.latest_end.load(std::sync::atomic::Ordering::Relaxed) <= now {
            return;
        }
        let listed: std::collections::HashSet<BucketKey> =
            listed.iter().map(|&(key, ..)| key).collect();
        self.entries.retain(|key, entry| {
            let lifted = entry.shared && entry.banned_until > now && !listed.contains(key);
            !lifted
        });
    }

    /// Whether `key` is banned and its text unknown here (a ban this
    /// instance learned from Redis): the caller then names it.
    pub fn unnamed(&self, key: BucketKey) -> bool {
        self.entries
            .get(&key)
            .is_some_and(|entry| entry.key_text.is_none())
    }

    /// Hybrid mode: from now on, strikes counted here are also kept for the
    /// next sync to add up in Redis ([`BanTable::take_strikes`]).
    pub fn share_strikes(&self) {
        self.unsent.get_or_init(Mutex::default);
    }

    /// Strikes taken with [`BanTable::take_strikes`] and not counted in
    /// Redis after all (its call failed): they wait for the next sync.
    pub fn restore_strikes(&self, strikes: &[(BucketKey, u64)]) {
        let Some(unsent) = self.unsent.get() else {
            return;
        };
        let mut unsent = unsent.lock().unwrap_or_else(|p| p.into_inner());
        for &(key, count) in strikes {
            if unsent.len() < MAX_UNSENT || unsent.contains_key(&key) {
                *unsent.entry(key).or_default() += count;
            }
        }
    }

    /// The strikes counted since the last call, per key.
    pub fn take_strikes(&self) -> Vec<(BucketKey, u64)> {
        let Some(unsent) = self.unsent.get() else {
            return Vec::new();
        };
        let mut unsent = unsent.lock().unwrap_or_else(|p| p.into_inner());
        unsent.drain().collect()
    }

    /// Lifts the ban on `key` and forgets its strikes: whether a ban was in
    /// force, and if so whether the board in Redis listed it (`Some(true)`:
    /// then whether it was in force is the board's to say, this copy may
    /// be stale).
    pub fn lift(&self, key: BucketKey, now: Nanos) -> Option<bool> {
        self.entries
            .remove(&key)
            .filter(|(_, entry)| entry.banned_until > now)
            .map(|(_, entry)| entry.shared)
    }

    /// The bans in force at `now`.
    pub fn active(&self, now: Nanos) -> Vec<ActiveBan> {
        self.entries
            .iter()
            .filter(|entry| entry.banned_until > now)
            .map(|entry| ActiveBan {
                key: *entry.key(),
                key_text: entry.key_text.clone(),
                until: entry.banned_until,
                manual: entry.manual,
                shared: entry.shared,
            })
            .collect()
    }

    /// Keys tracked (strikes or bans).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a new key may be tracked, sweeping lapsed entries (no ban in
    /// force, strikes older than `within`) when full.
    fn make_room(&self, now: Nanos, within: Nanos) -> bool {
        use std::sync::atomic::Ordering;
        if self.entries.len() < MAX_ENTRIES {
            return true;
        }
        if now < self.next_sweep.load(Ordering::Relaxed) {
            return false;
        }
        self.entries.retain(|_, entry| {
            entry.banned_until > now
                || (entry.strikes > 0 && now.saturating_sub(entry.window_start) < within)
        });
        let room = self.entries.len() < MAX_ENTRIES;
        if !room {
            self.next_sweep
                .store(now.saturating_add(SWEEP_BACKOFF), Ordering::Relaxed);
        }
        room
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;
    const POLICY: BanPolicy = BanPolicy {
        after: 3,
        within: 60 * S,
        duration: 600 * S,
    };

    #[test]
    fn the_third_strike_within_the_window_bans_for_the_duration() {
        let bans = BanTable::default();
        let start = 1_000 * S;
        assert!(!bans.strike(7, start, POLICY));
        assert!(!bans.strike(7, start + 10 * S, POLICY));
        assert_eq!(bans.banned(7, start + 10 * S), None);
        assert!(bans.strike(7, start + 59 * S, POLICY));
        let banned_at = start + 59 * S;
        assert_eq!(bans.banned(7, banned_at), Some(600 * S));
        assert_eq!(bans.banned(7, banned_at + 599 * S), Some(S));
        assert_eq!(bans.banned(7, banned_at + 600 * S), None);
        // Another key is untouched.
        assert_eq!(bans.banned(8, banned_at), None);
    }

    #[test]
    fn strikes_spread_wider_than_the_window_never_ban() {
        let bans = BanTable::default();
        let mut now = 1_000 * S;
        for _ in 0..10 {
            assert!(!bans.strike(7, now, POLICY));
            assert!(!bans.strike(7, now + S, POLICY));
            // The third strike lands just outside the window: a new window.
            now += 60 * S;
        }
        assert_eq!(bans.banned(7, now), None);
    }

    #[test]
    fn answers_while_banned_do_not_count_toward_the_next_ban() {
        let bans = BanTable::default();
        let now = 1_000 * S;
        for _ in 0..3 {
            bans.strike(7, now, POLICY);
        }
        assert!(bans.banned(7, now).is_some());
        for i in 0..50 {
            assert!(!bans.strike(7, now + i * S, POLICY));
        }
        // After the ban, counting starts from zero: two strikes do not ban.
        let after = now + 600 * S;
        assert!(!bans.strike(7, after, POLICY));
        assert!(!bans.strike(7, after + S, POLICY));
        assert_eq!(bans.banned(7, after + S), None);
    }

    #[test]
    fn manual_bans_list_and_lift() {
        let bans = BanTable::default();
        let now = 1_000 * S;
        bans.ban(9, KeyText::typed("seller-9", 1), now, 30 * S);
        assert_eq!(
            bans.active(now + S),
            [ActiveBan {
                key: 9,
                key_text: Some(KeyText::typed("seller-9", 1)),
                until: now + 30 * S,
                manual: true,
                shared: false,
            }]
        );
        assert_eq!(bans.lift(9, now + S), Some(false));
        assert_eq!(bans.banned(9, now + S), None);
        assert_eq!(bans.lift(9, now + S), None);
        assert!(bans.active(now).is_empty());
    }

    #[test]
    fn the_table_stays_bounded_and_frees_lapsed_entries() {
        let bans = BanTable::default();
        let now = 1_000 * S;
        for key in 0..MAX_ENTRIES as u64 {
            bans.strike(key, now, POLICY);
        }
        assert_eq!(bans.len(), MAX_ENTRIES);
        // Full of live strikes (no ban): a new key is not tracked...
        assert!(!bans.strike(u64::MAX, now, POLICY));
        assert_eq!(bans.len(), MAX_ENTRIES);
        // ...until the sweep finds lapsed entries (strikes older than the
        // window, no ban in force).
        let later = now + 61 * S;
        bans.strike(u64::MAX - 1, later, POLICY);
        assert!(bans.len() <= MAX_ENTRIES);
        assert!(bans.entries.contains_key(&(u64::MAX - 1)));
    }
}
