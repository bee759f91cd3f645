//! Where a call's keys live on a Redis Cluster, and the one key per slot
//! that remembers how far an instance's settlements and syncs got there.
//!
//! Settlements and hybrid syncs carry sequence numbers (docs/multi-instance.md,
//! "When Redis is slow or away"): the script keeps, per instance, the
//! highest it applied, and skips a call at or below it (a retry whose
//! first attempt Redis ran but whose answer was lost). A script call keeps
//! to one slot, so on a Cluster that *marker* is one key per slot, named
//! with a hash tag that falls in the slot ([`marker_key`]); on one Redis
//! it is one key.

use std::sync::OnceLock;
use std::time::Duration;

pub use redis::cluster_routing::Slot;

/// How much longer than `settle_retry_for` Redis keeps an instance's
/// marker: the last retry of a call comes at most `settle_retry_for` after
/// its first attempt, which is before Redis ran it.
const MARKER_MARGIN: Duration = Duration::from_secs(60);

/// How long Redis keeps a marker, in milliseconds, for calls retried for
/// `retry_for`.
pub fn marker_ms(retry_for: Duration) -> u64 {
    (retry_for + MARKER_MARGIN).as_millis() as u64
}

/// The slot of the Redis key `key` (its hash tag's, if it has one).
pub fn slot_of(key: &str) -> Slot {
    Slot::for_key(key)
}

/// `<prefix>:<what>:<instance>` on one Redis; on a Cluster,
/// `<prefix>:{<tag>}:<what>:<instance>` with a tag that falls in `slot`.
pub fn marker_key(prefix: &str, slot: Option<Slot>, what: &str, instance: &str) -> String {
    match slot {
        None => format!("{prefix}:{what}:{instance}"),
        Some(slot) => format!("{prefix}:{{{}}}:{what}:{instance}", tag_of(slot)),
    }
}

/// A short hash tag that falls in `slot`.
fn tag_of(slot: Slot) -> u32 {
    static TAGS: OnceLock<std::collections::HashMap<Slot, u32>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        // The first number whose decimal digits fall in each slot: about
        // 170,000 checksums of a few bytes, once per process, on a Cluster
        // only.
        let mut tags = std::collections::HashMap::with_capacity(SLOTS);
        let mut tag = 0u32;
        while tags.len() < SLOTS {
            tags.entry(Slot::for_key(tag.to_string())).or_insert(tag);
            tag += 1;
        }
        tags
    });
    tags[&slot]
}

/// The slots of a Redis Cluster.
const SLOTS: usize = 16_384;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_falls_in_the_slot_it_counts_for() {
        for key in [
            "sluice:{tokens:00000000000000ff}:limit",
            "x",
            "{a}b",
            "sluice:{r:1}:ban",
        ] {
            let slot = slot_of(key);
            let marker = marker_key("sluice", Some(slot), "settled", "9f");
            assert_eq!(slot_of(&marker), slot, "{marker}");
            assert!(marker.ends_with(":settled:9f"), "{marker}");
        }
        assert_eq!(marker_key("p", None, "synced", "1"), "p:synced:1");
    }
}
