//! The settlements waiting for Redis to take them (docs/multi-instance.md,
//! "When Redis is slow or away"): one bounded queue per Redis store, in the
//! order the settlements were made, owned by the task that delivers them
//! ([`super::settler`]).
//!
//! - Ordered: each settlement is numbered as it is received, and rounds
//!   take them from the front, so Redis applies them in that order (on a
//!   Cluster, in that order within each slot); a round that fails puts
//!   its settlements back in front, before anything newer.
//! - Bounded: at most `capacity` wait (`[store] max_keys`); one more gives
//!   up the oldest.
//! - Retried for `retry_for` (`settle_retry_for`): a settlement that waited
//!   longer is given up at the next round.
//!
//! The queue is a plain structure that reads no clock: the task (or a
//! test) says what time it is.

use std::collections::VecDeque;

use prometheus::IntCounter;
use redis::cluster_routing::Slot;
use smallvec::SmallVec;
use tokio::sync::oneshot;

use super::script::SettleEntry;
use crate::clock::Nanos;

/// One settlement: a script call's worth of receipts (one rule's, or one
/// request's; on a Cluster, all in one slot), applied together, once.
#[derive(Debug)]
pub struct Settlement {
    /// Its number, given as the queue receives it: the order Redis applies
    /// settlements in, and what tells Redis whether it applied it already.
    pub seq: u64,
    /// When the queue received it.
    pub queued_at: Nanos,
    /// The instant it is settled at, for the script (0: Redis' own time;
    /// tests inject theirs).
    pub now_us: u64,
    /// Its keys' slot, on a Cluster.
    pub slot: Option<Slot>,
    pub entries: SmallVec<[SettleEntry; 1]>,
    /// A charge's units, and the counter that counts them once Redis took
    /// them (`sluice_budget_charged_total{rule}`).
    pub charged: Option<(IntCounter, u64)>,
    /// Keys of the permits it returns that requests here wait for, woken
    /// once Redis took it.
    pub wakes: Vec<String>,
    /// Told once it is done, taken or given up ([`crate::store::Sent`]).
    pub done: Option<oneshot::Sender<()>>,
}

/// The settlements waiting, oldest first.
#[derive(Debug)]
pub struct Queue {
    waiting: VecDeque<Settlement>,
    next_seq: u64,
    capacity: usize,
    retry_for: Nanos,
}

impl Queue {
    /// A queue holding at most `capacity` settlements, each retried for
    /// `retry_for`.
    pub fn new(capacity: usize, retry_for: Nanos) -> Queue {
        Queue {
            waiting: VecDeque::new(),
            next_seq: 1,
            capacity: capacity.max(1),
            retry_for,
        }
    }

    /// Takes `settlement` in, last, at `now`, numbered after every one
    /// before it. When the queue is full the oldest waiting is given up:
    /// returned.
    pub fn receive(&mut self, mut settlement: Settlement, now: Nanos) -> Option<Settlement> {
        settlement.seq = self.next_seq;
        settlement.queued_at = now;
        self.next_seq += 1;
        let dropped = if self.waiting.len() >= self.capacity {
            self.waiting.pop_front()
        } else {
            None
        };
        self.waiting.push_back(settlement);
        dropped
    }

    /// A round at `now`: the first `most` settlements waiting, in order,
    /// and apart, those at the front that waited `retry_for` or longer,
    /// given up.
    pub fn take(&mut self, now: Nanos, most: usize) -> (Vec<Settlement>, Vec<Settlement>) {
        let mut expired = Vec::new();
        while let Some(first) = self.waiting.front() {
            if now.saturating_sub(first.queued_at) < self.retry_for {
                break;
            }
            expired.extend(self.waiting.pop_front());
        }
        let count = self.waiting.len().min(most);
        (self.waiting.drain(..count).collect(), expired)
    }

    /// Settlements of a round that Redis did not take go back in front of
    /// the rest, in their order.
    pub fn put_back(&mut self, mut failed: Vec<Settlement>) {
        failed.sort_unstable_by_key(|settlement| settlement.seq);
        for settlement in failed.into_iter().rev() {
            self.waiting.push_front(settlement);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settlement() -> Settlement {
        Settlement {
            seq: 0,
            queued_at: 0,
            now_us: 0,
            slot: None,
            entries: SmallVec::new(),
            charged: None,
            wakes: Vec::new(),
            done: None,
        }
    }

    fn seqs(settlements: &[Settlement]) -> Vec<u64> {
        settlements.iter().map(|s| s.seq).collect()
    }

    #[test]
    fn rounds_take_the_oldest_first_and_failures_go_back_in_front() {
        let mut queue = Queue::new(10, 1_000);
        for at in 0..5 {
            assert!(queue.receive(settlement(), at).is_none());
        }
        let (first, expired) = queue.take(10, 3);
        assert_eq!((seqs(&first), seqs(&expired)), (vec![1, 2, 3], vec![]));
        queue.receive(settlement(), 11);
        // 1 and 3 failed (their slots' calls), 2 was taken.
        let failed: Vec<_> = first.into_iter().filter(|s| s.seq != 2).collect();
        queue.put_back(failed);
        let (again, _) = queue.take(12, 10);
        assert_eq!(seqs(&again), [1, 3, 4, 5, 6]);
    }

    #[test]
    fn a_full_queue_gives_up_its_oldest_and_a_late_one_is_given_up_once_due() {
        let mut queue = Queue::new(2, 1_000);
        assert!(queue.receive(settlement(), 0).is_none());
        assert!(queue.receive(settlement(), 500).is_none());
        let dropped = queue.receive(settlement(), 600).expect("the oldest");
        assert_eq!(dropped.seq, 1);
        // 2 waited 999: still retried; at 1,000 it is due.
        let (round, expired) = queue.take(1_499, 10);
        assert_eq!((seqs(&round), seqs(&expired)), (vec![2, 3], vec![]));
        queue.put_back(round);
        let (round, expired) = queue.take(1_500, 10);
        assert_eq!((seqs(&round), seqs(&expired)), (vec![3], vec![2]));
        assert!(queue.is_empty());
    }
}
