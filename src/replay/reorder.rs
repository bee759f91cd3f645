//! Lines put back in time order. A log is written as requests end, so its
//! lines are not in arrival order: a line waits in a heap until the log
//! has reached [`REORDER_AT_LEAST`] (or twice the longest request seen, if
//! longer) past its time, by when every line that arrived before it has
//! been read. A line that still comes later than that is decided at the
//! clock's time. At most [`MOST_WAITING`] lines, of
//! [`MOST_WAITING_BYTES`], wait: past that the earliest is decided at
//! once, so a log whose requests last hours keeps a replay's memory
//! bounded all the same.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

use super::line::Recorded;
use super::simulate::Simulator;
use crate::clock::Nanos;

/// How far past a line's time the log is read before it is decided.
const REORDER_AT_LEAST: Nanos = 10_000_000_000;

/// Lines waiting at most (a few hundred bytes each).
const MOST_WAITING: usize = 1 << 20;

/// Bytes of lines waiting at most.
const MOST_WAITING_BYTES: usize = 256 << 20;

/// A line waiting: earliest time first, then in the order read.
struct Waiting(Nanos, u64, Box<Recorded>);

impl PartialEq for Waiting {
    fn eq(&self, other: &Self) -> bool {
        (self.0, self.1) == (other.0, other.1)
    }
}
impl Eq for Waiting {}
impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.0, self.1).cmp(&(other.0, other.1))
    }
}

/// The heap that puts lines back in time order.
#[derive(Default)]
pub struct Reorder {
    heap: BinaryHeap<Reverse<Waiting>>,
    /// Lines no earlier than the one read before them wait in a queue
    /// instead, in order without sifting (most of a log: a line waits in
    /// the heap only if one read before it came later); the earliest line
    /// is the front of one or the other.
    run: VecDeque<Waiting>,
    /// Lines decided, whose room the next lines reuse: boxed as they
    /// wait in the heap, whose sifting then moves a pointer, not a line.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Recorded>>,
    read: u64,
    /// What the lines waiting hold.
    bytes: usize,
    latest: Nanos,
    longest: Nanos,
}

impl Reorder {
    /// Room for the next line read: a line decided, or a new one.
    pub fn room(&mut self) -> Box<Recorded> {
        self.spare.pop().unwrap_or_default()
    }

    /// Takes back room that was not used.
    pub fn unused(&mut self, mut room: Box<Recorded>) {
        room.shrink();
        self.spare.push(room);
    }

    /// Adds a line, and decides those the log is now far enough past.
    pub fn push(&mut self, line: Box<Recorded>, simulator: &mut Simulator<'_>) {
        self.latest = self.latest.max(line.time);
        self.longest = self.longest.max(line.duration);
        self.read += 1;
        self.bytes += line.size();
        let waiting = Waiting(line.time, self.read, line);
        match self.run.back() {
            Some(last) if last.0 > waiting.0 => self.heap.push(Reverse(waiting)),
            _ => self.run.push_back(waiting),
        }
        let horizon = REORDER_AT_LEAST.max(self.longest.saturating_mul(2));
        let ready = self.latest.saturating_sub(horizon);
        while let Some(time) = self.earliest() {
            let waiting = self.heap.len() + self.run.len();
            let full = waiting > MOST_WAITING || self.bytes > MOST_WAITING_BYTES;
            if time > ready && !full {
                break;
            }
            if let Some(line) = self.pop() {
                self.decide(line, simulator);
            }
        }
    }

    /// Decides every line still waiting.
    pub fn drain(&mut self, simulator: &mut Simulator<'_>) {
        while let Some(line) = self.pop() {
            self.decide(line, simulator);
        }
    }

    /// The time of the earliest line waiting.
    fn earliest(&self) -> Option<Nanos> {
        let run = self.run.front().map(|first| first.0);
        let heap = self.heap.peek().map(|Reverse(first)| first.0);
        match (run, heap) {
            (Some(run), Some(heap)) => Some(run.min(heap)),
            (one, other) => one.or(other),
        }
    }

    /// The earliest line waiting (time, then order read), out of the
    /// queue or the heap.
    fn pop(&mut self) -> Option<Box<Recorded>> {
        let from_heap = match (self.run.front(), self.heap.peek()) {
            (Some(run), Some(Reverse(heap))) => heap < run,
            (None, _) => true,
            (Some(_), None) => false,
        };
        let Waiting(_, _, line) = if from_heap {
            self.heap.pop()?.0
        } else {
            self.run.pop_front()?
        };
        Some(line)
    }

    /// Decides a line that waited; its room is kept for the next.
    fn decide(&mut self, line: Box<Recorded>, simulator: &mut Simulator<'_>) {
        self.bytes -= line.size();
        simulator.decide(&line);
        self.unused(line);
    }
}
