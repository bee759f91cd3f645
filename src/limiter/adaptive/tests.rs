//! The estimator on scripted windows, and the controller in front of a
//! simulated upstream (c workers behind a FIFO queue) on simulated time:
//! exact and instant, where the end-to-end tests and the benchmark
//! (docs/adaptive.md) run the real thing.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::*;

const MS: Nanos = MILLI;
const SECOND: Nanos = 1_000 * MILLI;

fn bounds(floor: u64, ceiling: u64) -> Bounds {
    Bounds { floor, ceiling }
}

/// A window of `samples` answers of `latency_ms` each, `peak` in flight.
fn window(samples: u64, latency_ms: u64, peak: u64) -> Window {
    Window {
        samples,
        failures: 0,
        latency_sum: samples * latency_ms * MS,
        peak_in_flight: peak,
    }
}

#[test]
fn it_starts_at_twenty_within_its_bounds() {
    assert_eq!(Estimator::new(bounds(1, 200)).limit(), 20);
    assert_eq!(Estimator::new(bounds(1, 8)).limit(), 8);
    assert_eq!(Estimator::new(bounds(30, 200)).limit(), 30);
}

/// An estimator past its first window (which only warms up), with a
/// baseline of 20 ms.
fn warmed(floor: u64, ceiling: u64) -> Estimator {
    let mut estimator = Estimator::new(bounds(floor, ceiling));
    assert_eq!(estimator.close(window(100, 5, 200)), estimator.limit());
    estimator
}

#[test]
fn the_first_window_only_warms_up() {
    let mut estimator = Estimator::new(bounds(1, 200));
    assert_eq!(estimator.close(window(100, 90, 20)), 20);
    assert_eq!(estimator.close(window(100, 20, 19)), 22); // 20 + √20 / 2
    assert_eq!(estimator.baseline(), 20 * MS);
}

#[test]
fn a_used_limit_at_the_baseline_grows_by_half_its_square_root() {
    let mut estimator = warmed(1, 200);
    assert_eq!(estimator.close(window(100, 20, 19)), 22);
    assert_eq!(estimator.close(window(100, 20, 22)), 24); // 22.24 + 2.36
}

#[test]
fn a_baseline_learned_while_the_limit_held_requests_back_is_probed_downwards() {
    // The window that sets the baseline reached the limit: halved, and a
    // window to settle.
    let mut estimator = warmed(1, 200);
    assert_eq!(estimator.close(window(100, 40, 20)), 10);
    assert_eq!(estimator.close(window(100, 30, 10)), 10);
    // The latency fell with the limit: a queue, and still draining.
    assert_eq!(estimator.close(window(100, 20, 10)), 5);
    assert_eq!(estimator.baseline(), 20 * MS);

    // The latency did not fall: the baseline was the upstream's own, and
    // the limit is back where it started; then it grows as ever.
    let mut estimator = warmed(1, 200);
    assert_eq!(estimator.close(window(100, 20, 20)), 10);
    assert_eq!(estimator.close(window(100, 20, 10)), 10);
    assert_eq!(estimator.close(window(100, 21, 10)), 20);
    assert_eq!(estimator.close(window(100, 20, 20)), 22); // 20 + √20 / 2
    assert_eq!(estimator.baseline(), 20 * MS);
}

#[test]
fn an_unused_limit_does_not_grow() {
    let mut estimator = warmed(1, 200);
    for _ in 0..100 {
        assert_eq!(estimator.close(window(50, 20, 9)), 20);
    }
}

#[test]
fn a_step_up_in_latency_lands_below_the_knee_and_a_step_down_grows_again() {
    let mut estimator = warmed(1, 200);
    estimator.close(window(100, 20, 19));
    let before = estimator.limit();
    assert_eq!(before, 22);
    // Latency doubles with the limit reached: 22.24 × min(0.9 / 2, 0.5).
    assert_eq!(estimator.close(window(100, 40, before)), 10);
    // The baseline crept only a little towards 40 ms.
    assert_eq!(estimator.baseline(), 20 * MS + 20 * MS / 64);
    // The next window mixes both limits' answers: it only settles.
    assert_eq!(estimator.close(window(100, 90, 22)), 10);
    // Then 25 ms: not the fall a queue draining shows (40 × 10/22 × 1.15
    // = 20.9 ms), so the knee is near; within tolerance, the limit grows.
    assert_eq!(estimator.close(window(100, 25, 10)), 11);
    assert!(estimator.baseline() < 21 * MS, "{}", estimator.baseline());
}

#[test]
fn while_the_latency_falls_with_the_limit_it_halves_again() {
    let mut estimator = warmed(1, 200);
    // Started far above the knee: 100 ms is the baseline it first sees.
    estimator.close(window(100, 100, 19));
    assert_eq!(estimator.limit(), 22);
    // At 32 the latency is 160 ms: backoff to 16, a window to settle.
    for limit in [24, 27, 29, 32] {
        let latency = 5 * estimator.limit(); // 5 ms per request in flight
        assert_eq!(estimator.close(window(100, latency, 100)), limit);
    }
    assert_eq!(estimator.close(window(100, 160, 100)), 16);
    assert_eq!(estimator.close(window(100, 120, 100)), 16);
    // 80 ms at 16: it fell with the limit, so it was queue. Down again.
    assert_eq!(estimator.close(window(100, 80, 100)), 8);
    assert_eq!(estimator.close(window(100, 60, 100)), 8);
    assert_eq!(estimator.close(window(100, 40, 100)), 4);
    assert_eq!(estimator.close(window(100, 30, 100)), 4);
    // 20 ms at 4 (the upstream's 4 workers): still in proportion, so 2;
    // 20 ms at 2 is not: the queue is gone, and 20 ms is the baseline.
    assert_eq!(estimator.close(window(100, 20, 100)), 2);
    assert_eq!(estimator.close(window(100, 20, 100)), 2);
    assert_eq!(estimator.close(window(100, 20, 100)), 2 + 1);
    assert_eq!(estimator.baseline(), 20 * MS);
}

#[test]
fn a_latency_that_stays_high_while_the_limit_is_not_reached_becomes_the_baseline() {
    let mut estimator = warmed(1, 200);
    estimator.close(window(100, 20, 19));
    // The upstream got slower, with few requests in flight: the latency
    // is its own, and the baseline follows it (1/8 of the way a window).
    for _ in 0..40 {
        estimator.close(window(100, 40, 5));
    }
    assert!(estimator.baseline() > 39 * MS, "{}", estimator.baseline());
    // The limit, in use again at 40 ms, grows.
    let limit = estimator.limit();
    assert!(estimator.close(window(100, 40, limit)) > limit);
}

#[test]
fn latency_above_the_baseline_does_not_lower_an_unused_limit() {
    let mut estimator = warmed(1, 200);
    estimator.close(window(100, 20, 19));
    let limit = estimator.limit();
    assert_eq!(estimator.close(window(100, 80, 3)), limit);
}

#[test]
fn a_ramp_in_latency_lowers_the_limit_step_by_step() {
    let mut estimator = warmed(1, 1000);
    for _ in 0..20 {
        estimator.close(window(100, 20, 1000));
    }
    let top = estimator.limit();
    let mut limits = Vec::new();
    for step in 1..=20 {
        let latency = 20 + 5 * step;
        limits.push(estimator.close(window(100, latency, 1000)));
    }
    assert!(*limits.last().unwrap() < top / 2, "{top} → {limits:?}");
    assert!(limits.iter().all(|&l| l >= 1));
}

#[test]
fn failures_lower_it_by_half_their_share_and_a_few_are_tolerated() {
    let mut estimator = warmed(1, 200);
    estimator.close(window(100, 20, 19)); // 22.24
    let failing = |failures| Window {
        failures,
        latency_sum: (100 - failures) * 20 * MS,
        ..window(100, 20, 24)
    };
    assert_eq!(estimator.close(failing(40)), 17); // 22.24 × 0.8
    let limit = estimator.limit();
    // 5 % failed: tolerated, and the limit in use grows.
    assert!(estimator.close(failing(5)) > limit);
}

#[test]
fn all_timeouts_drive_it_to_its_floor_and_no_lower() {
    let mut estimator = warmed(3, 200);
    let timeouts = Window {
        samples: 40,
        failures: 40,
        latency_sum: 0,
        peak_in_flight: 200,
    };
    for _ in 0..20 {
        estimator.close(timeouts);
    }
    assert_eq!(estimator.limit(), 3);
}

#[test]
fn the_ceiling_holds() {
    let mut estimator = warmed(1, 25);
    for _ in 0..50 {
        estimator.close(window(100, 20, 25));
    }
    assert_eq!(estimator.limit(), 25);
}

#[test]
fn a_reload_keeps_the_estimate_within_new_bounds() {
    let mut estimator = Estimator::new(bounds(1, 200));
    estimator.rebound(bounds(1, 10));
    assert_eq!(estimator.limit(), 10);
    estimator.rebound(bounds(15, 200));
    assert_eq!(estimator.limit(), 15);
}

#[test]
fn a_window_needs_its_time_and_enough_answers() {
    let controller = Controller::new(bounds(1, 200));
    let t0 = 1_000 * SECOND;
    let answer = |controller: &Controller, at: Nanos| {
        controller.record(Sample::Answered(20 * MS), at);
    };
    // The first answer opens the first window, which only warms up.
    for i in 0..=100 {
        answer(&controller, t0 + i * MS);
    }
    assert_eq!(controller.limit(), 20);
    // The second: 100 answers in 50 ms, but it lasts 100 ms.
    controller.admitted(19);
    for i in 1..=100 {
        answer(&controller, t0 + 100 * MS + i * MS / 2);
    }
    assert_eq!(controller.limit(), 20, "the window is still open");
    answer(&controller, t0 + 200 * MS);
    assert_eq!(controller.limit(), 22);
    // The third, opened at 200 ms: 99 answers within a second of its end
    // (300 ms) are too few.
    controller.admitted(22);
    for i in 1..=99 {
        answer(&controller, t0 + 200 * MS + i * 10 * MS);
    }
    assert_eq!(controller.limit(), 22);
    answer(&controller, t0 + 1_200 * MS);
    assert_eq!(controller.limit(), 24);
    // The fourth, opened at 1.2 s: 19 answers, the last over a second
    // after its end, are too few; the 20th closes it.
    controller.admitted(24);
    for i in 1..=19 {
        answer(&controller, t0 + 1_200 * MS + i * 100 * MS);
    }
    assert_eq!(controller.limit(), 24);
    answer(&controller, t0 + 3_200 * MS);
    assert_eq!(controller.limit(), 27); // 24.6 + 2.5
}

#[test]
fn tiers_get_their_share_and_at_least_one() {
    let controller = Controller::new(bounds(1, 200));
    assert_eq!(controller.limit_for(1000), 20);
    assert_eq!(controller.limit_for(500), 10);
    assert_eq!(controller.limit_for(333), 7);
    assert_eq!(controller.limit_for(1), 1);
}

/// A closed-loop load on an upstream with `workers` workers behind a FIFO
/// queue, on simulated time, through one controller.
struct Simulation {
    controller: Controller,
    clients: usize,
    /// Service time: fixed, or exponential with this mean.
    service: Nanos,
    exponential: bool,
    /// A client refused waits this long before trying again.
    backoff: Nanos,
    /// A client answered waits this long before its next request.
    think: Nanos,
    /// `on_limit = "delay"` with this `max_queue`: a request that finds the
    /// limit reached waits for a permit (as `PermitTable` hands them over)
    /// while fewer than this many wait; `None`: refused at once.
    held: Option<usize>,
    rng: u64,
}

#[derive(Debug, Default, Clone)]
struct Run {
    /// Per 100 ms: (limit at its end, upstream in flight averaged over it,
    /// answers, refusals).
    bins: Vec<(u64, f64, u64, u64)>,
    answered: u64,
    refused: u64,
    lowest_limit: u64,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone, Copy)]
enum Event {
    /// Client `n` sends a request.
    Send(usize),
    /// The upstream answers client `n`'s request, sent at the instant.
    Done(usize, Nanos),
}

impl Simulation {
    fn new(clients: usize, service_ms: u64) -> Simulation {
        Simulation {
            controller: Controller::new(bounds(1, 200)),
            clients,
            service: service_ms * MS,
            exponential: false,
            backoff: 50 * MS,
            think: 0,
            held: None,
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    fn service_time(&mut self) -> Nanos {
        if !self.exponential {
            return self.service;
        }
        // xorshift64*, then an exponential draw.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let u = (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64;
        (-(1.0 - u).ln() * self.service as f64) as Nanos
    }

    /// Runs for `seconds`, the upstream having `workers(t)` workers.
    fn run(&mut self, seconds: u64, workers: impl Fn(Nanos) -> usize) -> Run {
        let start = 1_000 * SECOND;
        let end = start + seconds * SECOND;
        let mut events = BinaryHeap::new();
        for client in 0..self.clients {
            events.push(Reverse((
                start + client as Nanos * 100_000,
                Event::Send(client),
            )));
        }
        let mut queue: VecDeque<(usize, Nanos)> = VecDeque::new();
        // Requests held for a permit, in arrival order.
        let mut waiting: VecDeque<usize> = VecDeque::new();
        let (mut busy, mut in_flight) = (0usize, 0u64);
        let mut run = Run {
            lowest_limit: u64::MAX,
            ..Run::default()
        };
        let mut bin = (start, 0.0f64, 0u64, 0u64); // (start, in-flight × ns, answers, refusals)
        let mut last = start;
        while let Some(Reverse((now, event))) = events.pop() {
            if now >= end {
                break;
            }
            bin.1 += in_flight as f64 * (now - last) as f64;
            last = now;
            while now >= bin.0 + 100 * MS {
                let limit = self.controller.limit();
                run.lowest_limit = run.lowest_limit.min(limit);
                run.bins
                    .push((limit, bin.1 / (100 * MS) as f64, bin.2, bin.3));
                bin = (bin.0 + 100 * MS, 0.0, 0, 0);
            }
            let c = workers(now - start);
            match event {
                Event::Send(client) => {
                    if in_flight < self.controller.limit() && waiting.is_empty() {
                        in_flight += 1;
                        self.controller.admitted(in_flight);
                        queue.push_back((client, now));
                    } else if self.held.is_some_and(|most| waiting.len() < most) {
                        waiting.push_back(client);
                    } else {
                        run.refused += 1;
                        bin.3 += 1;
                        events.push(Reverse((now + self.backoff, Event::Send(client))));
                    }
                }
                Event::Done(client, sent) => {
                    busy -= 1;
                    self.controller.admitted(in_flight);
                    in_flight -= 1;
                    self.controller.record(Sample::Answered(now - sent), now);
                    // The permit goes to waiters while under the limit.
                    while in_flight < self.controller.limit() {
                        let Some(next) = waiting.pop_front() else {
                            break;
                        };
                        in_flight += 1;
                        queue.push_back((next, now));
                    }
                    run.answered += 1;
                    bin.2 += 1;
                    events.push(Reverse((now + self.think, Event::Send(client))));
                }
            }
            while busy < c {
                let Some((client, sent)) = queue.pop_front() else {
                    break;
                };
                busy += 1;
                let done = now + self.service_time();
                events.push(Reverse((done, Event::Done(client, sent))));
            }
        }
        run
    }
}

impl Run {
    /// Mean upstream in flight over bins `from..to` (100 ms each).
    fn in_flight(&self, from: usize, to: usize) -> f64 {
        let bins = &self.bins[from..to];
        bins.iter().map(|b| b.1).sum::<f64>() / bins.len() as f64
    }

    /// Answers per second over bins `from..to`.
    fn goodput(&self, from: usize, to: usize) -> f64 {
        let bins = &self.bins[from..to];
        bins.iter().map(|b| b.2).sum::<u64>() as f64 * 10.0 / bins.len() as f64
    }

    fn limits(&self, from: usize, to: usize) -> Vec<u64> {
        self.bins[from..to].iter().map(|b| b.0).collect()
    }

    /// The upstream held at most `most` on average over bins `from..to`.
    fn assert_in_flight_at_most(&self, from: usize, to: usize, most: f64) {
        let held = self.in_flight(from, to);
        let limits = self.limits(0, to);
        assert!(
            held <= most,
            "in flight {held} over bins {from}..{to}: limits {limits:?}"
        );
    }

    /// At least `least` answers a second over bins `from..to`.
    fn assert_goodput_at_least(&self, from: usize, to: usize, least: f64) {
        let goodput = self.goodput(from, to);
        let limits = self.limits(0, to);
        assert!(
            goodput >= least,
            "goodput {goodput} over bins {from}..{to}: limits {limits:?}"
        );
    }
}

#[test]
fn fifty_clients_on_ten_workers_converge_below_one_and_a_half_times_ten() {
    let mut simulation = Simulation::new(50, 20);
    let run = simulation.run(30, |_| 10);
    run.assert_in_flight_at_most(100, 299, 15.0);
    run.assert_goodput_at_least(100, 299, 400.0);
}

#[test]
fn held_requests_do_not_let_the_limit_climb_above_its_start() {
    // Issue 57's setup: `on_limit = "delay"`, `max_queue = 5`, 50 clients
    // on 10 workers. The limit starts above what the upstream takes, so the
    // first windows' latency is already a queue's.
    let run = |held| {
        let mut simulation = Simulation::new(50, 20);
        simulation.controller = Controller::new(bounds(2, 200));
        simulation.held = held;
        simulation.run(30, |_| 10)
    };
    let (delayed, refused) = (run(Some(5)), run(None));
    for run in [&delayed, &refused] {
        let limits = run.limits(0, 290);
        let peak = limits.iter().max().copied().unwrap_or(0);
        assert!(
            peak <= INITIAL_LIMIT,
            "the limit climbed to {peak}: {limits:?}"
        );
        // Any 4 s after the first second: within 1.5 × the workers.
        for from in (10..=250).step_by(10) {
            run.assert_in_flight_at_most(from, from + 40, 15.0);
        }
        run.assert_goodput_at_least(10, 290, 400.0);
    }
    // Holding saw-tooths no more than refusing does.
    let swing = |run: &Run| {
        let limits = run.limits(50, 290);
        limits.iter().max().unwrap() - limits.iter().min().unwrap()
    };
    assert!(
        swing(&delayed) <= swing(&refused),
        "held {:?}, refused {:?}",
        delayed.limits(50, 290),
        refused.limits(50, 290)
    );
}

#[test]
fn the_limit_follows_the_upstream_down_and_back_up() {
    let mut simulation = Simulation::new(50, 20);
    let run = simulation.run(50, |t| {
        if (15 * SECOND..30 * SECOND).contains(&t) {
            5
        } else {
            10
        }
    });
    // Within 5 s of the halving, the upstream holds at most 1.5 × 5.
    run.assert_in_flight_at_most(200, 300, 7.5);
    // Within 10 s of the recovery, goodput is back (≥ 80 % of 500/s).
    run.assert_goodput_at_least(400, 499, 400.0);
}

#[test]
fn light_load_on_a_large_upstream_is_never_refused() {
    let mut simulation = Simulation::new(10, 20);
    simulation.think = 100 * MS;
    let run = simulation.run(60, |_| 100);
    assert_eq!(run.refused, 0);
}

#[test]
fn exponential_service_times_within_capacity_are_rarely_refused() {
    let mut simulation = Simulation::new(15, 20);
    simulation.exponential = true;
    let run = simulation.run(60, |_| 20);
    let refused = run.refused as f64 / (run.refused + run.answered) as f64;
    assert!(
        refused <= 0.01,
        "refused {refused}: {:?}",
        run.limits(0, 100)
    );
    assert!(run.lowest_limit > 1, "{:?}", run.limits(0, 600));
}

#[test]
fn exponential_service_times_under_overload_keep_the_upstream_near_its_workers() {
    let mut simulation = Simulation::new(50, 20);
    simulation.exponential = true;
    let run = simulation.run(120, |_| 10);
    run.assert_in_flight_at_most(100, 1199, 15.0);
    run.assert_goodput_at_least(100, 1199, 400.0);
    assert!(run.lowest_limit > 1, "{:?}", run.limits(0, 1199));
}

#[test]
fn a_start_five_times_above_the_knee_comes_down_within_five_seconds() {
    let mut simulation = Simulation::new(32, 20);
    let run = simulation.run(15, |_| 4);
    run.assert_in_flight_at_most(50, 149, 6.0);
    run.assert_goodput_at_least(50, 149, 160.0);
}

#[test]
fn answers_faster_than_a_microsecond_are_a_microsecond() {
    let mut estimator = Estimator::new(bounds(1, 200));
    let instant = |peak| Window {
        samples: 100,
        failures: 0,
        latency_sum: 0,
        peak_in_flight: peak,
    };
    estimator.close(instant(20));
    assert_eq!(estimator.close(instant(19)), 22);
    assert_eq!(estimator.baseline(), 1_000);
    assert_eq!(estimator.close(window(100, 0, 22)), 24);
}
