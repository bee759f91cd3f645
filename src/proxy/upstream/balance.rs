//! Which server of a pool takes a request (docs/upstreams.md,
//! "Balancing"), as pure functions of the servers' weights and loads and
//! the numbers they are given, so tests choose the random draws.
//!
//! - `least_request`: two servers drawn at random by weight; the one with
//!   fewer requests in flight for its weight wins (the power of two
//!   choices, as Envoy's `LEAST_REQUEST` and tower's `p2c`).
//! - `round_robin`: the smooth weighted order nginx uses (weights 5, 1, 1
//!   give a a b a c a a, not a a a a a b c), precomputed once per pool.
//! - `hash:<source>`: weighted rendezvous hashing: each server scores the
//!   request's key, the highest score wins, so a server that leaves moves
//!   only the keys it had and one that joins takes only the keys it wins.
//!
//! Every choice takes an `eligible` test: a retry skips the servers already
//! tried, and a pool skips the servers that are out (`super::Upstream`).

use smallvec::SmallVec;

/// What balancing needs of one server.
pub trait Candidate {
    /// At least 1.
    fn weight(&self) -> u32;
    /// Requests in flight now.
    fn load(&self) -> u32;
    /// A number that stands for the server in rendezvous hashing, the same
    /// in every sluice instance.
    fn ring_id(&self) -> u64;
}

/// The cumulative weights of a pool's servers, for weighted draws.
#[derive(Debug, Clone, Default)]
pub struct Weights {
    /// `cumulative[i]`: the sum of the weights of servers `0..=i`; empty
    /// when every weight is equal (a draw is then an index).
    cumulative: Vec<u64>,
    total: u64,
}

impl Weights {
    pub fn new(weights: impl IntoIterator<Item = u32>) -> Weights {
        let weights: Vec<u32> = weights.into_iter().collect();
        let uniform = weights.windows(2).all(|pair| pair[0] == pair[1]);
        let total = weights.iter().map(|&w| u64::from(w)).sum();
        let cumulative = if uniform {
            Vec::new()
        } else {
            weights
                .iter()
                .scan(0u64, |sum, &w| {
                    *sum += u64::from(w);
                    Some(*sum)
                })
                .collect()
        };
        Weights { cumulative, total }
    }

    /// The server a random number `draw` lands on among `count` servers.
    #[inline]
    pub fn draw(&self, draw: u64, count: usize) -> usize {
        if self.cumulative.is_empty() {
            return (draw % count as u64) as usize;
        }
        let point = draw % self.total.max(1);
        self.cumulative.partition_point(|&sum| sum <= point)
    }
}

/// `least_request`: two draws among the `eligible` servers, the lighter for
/// its weight wins (the first on a tie). `None` when none is eligible.
pub fn least_request<C: Candidate>(
    servers: &[C],
    weights: &Weights,
    eligible: impl Fn(usize) -> bool,
    mut random: impl FnMut() -> u64,
) -> Option<usize> {
    let count = servers.len();
    // Both draws from one random number, 32 bits each.
    let both = random();
    let mut first = weights.draw(both & 0xFFFF_FFFF, count);
    let mut second = weights.draw(both >> 32, count);
    if !eligible(first) || !eligible(second) {
        // Some servers are out or tried: draw among the rest alone.
        let rest: SmallVec<[usize; 16]> = (0..count).filter(|&i| eligible(i)).collect();
        let rest_weights = Weights::new(rest.iter().map(|&i| servers[i].weight()));
        match rest.len() {
            0 => return None,
            1 => return Some(rest[0]),
            _ => {}
        }
        first = rest[rest_weights.draw(random(), rest.len())];
        second = rest[rest_weights.draw(random(), rest.len())];
    }
    let (a, b) = (&servers[first], &servers[second]);
    // Fewer in flight per unit of weight, compared without dividing.
    let a_cost = u64::from(a.load()) * u64::from(b.weight());
    let b_cost = u64::from(b.load()) * u64::from(a.weight());
    Some(if b_cost < a_cost { second } else { first })
}

/// The smooth weighted round-robin order of servers with `weights`, one
/// cycle long (the weights divided by their greatest common divisor).
pub fn round_robin_order(weights: &[u32]) -> Vec<u32> {
    let divisor = weights.iter().fold(0, |g, &w| gcd(g, w)).max(1);
    let weights: Vec<i64> = weights.iter().map(|&w| i64::from(w / divisor)).collect();
    let total: i64 = weights.iter().sum();
    let mut current = vec![0i64; weights.len()];
    let mut order = Vec::with_capacity(total as usize);
    for _ in 0..total {
        for (c, w) in current.iter_mut().zip(&weights) {
            *c += w;
        }
        let best = (0..weights.len())
            .max_by_key(|&i| (current[i], std::cmp::Reverse(i)))
            .unwrap_or(0);
        current[best] -= total;
        order.push(best as u32);
    }
    order
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// `round_robin`: the next eligible server of `order` from turn `turn`.
pub fn round_robin(order: &[u32], turn: usize, eligible: impl Fn(usize) -> bool) -> Option<usize> {
    let len = order.len();
    (0..len)
        .map(|step| order[(turn + step) % len] as usize)
        .find(|&i| eligible(i))
}

/// `hash:<source>`: the eligible server with the highest weighted
/// rendezvous score for `key`.
pub fn rendezvous<C: Candidate>(
    servers: &[C],
    key: u64,
    eligible: impl Fn(usize) -> bool,
) -> Option<usize> {
    let mut best: Option<(f64, usize)> = None;
    for (index, server) in servers.iter().enumerate() {
        if !eligible(index) {
            continue;
        }
        let score = score(key, server.ring_id(), server.weight());
        if best.is_none_or(|(top, _)| score > top) {
            best = Some((score, index));
        }
    }
    best.map(|(_, index)| index)
}

/// Weighted rendezvous: `-weight / ln(u)` with `u` in (0, 1) from the
/// key and the server mixed, so a server's share of the keys is its share
/// of the weight.
fn score(key: u64, ring_id: u64, weight: u32) -> f64 {
    let mixed = mix(key ^ mix(ring_id));
    // 53 bits, never 0 nor 1.
    let unit = ((mixed >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    -f64::from(weight) / unit.ln()
}

/// splitmix64's finaliser: every bit of the input moves every bit out.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A server's ring id from what names it (its URL and address): FNV-1a,
/// mixed, so every instance gives a server the same id.
pub fn ring_id(name: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    mix(hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct S {
        weight: u32,
        load: u32,
        id: u64,
    }

    impl Candidate for S {
        fn weight(&self) -> u32 {
            self.weight
        }
        fn load(&self) -> u32 {
            self.load
        }
        fn ring_id(&self) -> u64 {
            self.id
        }
    }

    fn servers(weights: &[u32]) -> Vec<S> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &weight)| S {
                weight,
                load: 0,
                id: ring_id(&format!("http://10.0.0.{i}:80")),
            })
            .collect()
    }

    /// A deterministic stream of draws (xorshift).
    fn draws(seed: u64) -> impl FnMut() -> u64 {
        let mut state = seed | 1;
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    #[test]
    fn weighted_draws_land_in_proportion_to_the_weights() {
        let weights = Weights::new([1, 2, 7]);
        let mut counts = [0u32; 3];
        let mut random = draws(7);
        for _ in 0..100_000 {
            counts[weights.draw(random(), 3)] += 1;
        }
        for (count, expected) in counts.iter().zip([10_000, 20_000, 70_000]) {
            let off = (f64::from(*count) - f64::from(expected)).abs() / f64::from(expected);
            assert!(off < 0.03, "{counts:?}");
        }
        // Exact boundaries: points 0 | 1 2 | 3..9.
        assert_eq!(
            (0..10).map(|d| weights.draw(d, 3)).collect::<Vec<_>>(),
            [0, 1, 1, 2, 2, 2, 2, 2, 2, 2]
        );
    }

    #[test]
    fn least_request_takes_the_lighter_of_two_draws() {
        let mut pool = servers(&[1, 1]);
        pool[0].load = 5;
        pool[1].load = 2;
        let weights = Weights::new([1, 1]);
        // One random number holds both draws, the first in its low 32
        // bits: 0 then 1, server 0 against server 1; 1 is lighter.
        let mut seq = [1u64 << 32].into_iter();
        let picked = least_request(&pool, &weights, |_| true, || seq.next().unwrap());
        assert_eq!(picked, Some(1));
        // A tie goes to the first draw.
        pool[0].load = 2;
        let mut seq = [1u64 << 32].into_iter();
        let picked = least_request(&pool, &weights, |_| true, || seq.next().unwrap());
        assert_eq!(picked, Some(0));
        // Weight counts: 4 in flight on weight 4 is lighter than 2 on 1.
        let mut pool = servers(&[4, 1]);
        pool[0].load = 4;
        pool[1].load = 2;
        let weights = Weights::new([4, 1]);
        let mut seq = [4u64].into_iter();
        let picked = least_request(&pool, &weights, |_| true, || seq.next().unwrap());
        assert_eq!(picked, Some(0));
    }

    #[test]
    fn least_request_spreads_evenly_and_skips_the_ineligible() {
        let pool = servers(&[1, 1, 1]);
        let weights = Weights::new([1, 1, 1]);
        let mut random = draws(3);
        let mut counts = [0u32; 3];
        for _ in 0..30_000 {
            let picked = least_request(&pool, &weights, |i| i != 1, &mut random).unwrap();
            counts[picked] += 1;
        }
        assert_eq!(counts[1], 0);
        assert!((14_000..16_000).contains(&counts[0]), "{counts:?}");
        assert_eq!(least_request(&pool, &weights, |_| false, &mut random), None);
        assert_eq!(
            least_request(&pool, &weights, |i| i == 2, &mut random),
            Some(2)
        );
    }

    #[test]
    fn round_robin_is_smooth_and_weighted() {
        assert_eq!(round_robin_order(&[5, 1, 1]), [0, 0, 1, 0, 2, 0, 0]);
        assert_eq!(round_robin_order(&[1, 1, 1]), [0, 1, 2]);
        // Weights with a common divisor make one short cycle.
        assert_eq!(round_robin_order(&[200, 100]), [0, 1, 0]);
        let order = round_robin_order(&[1, 1, 1]);
        let turns: Vec<usize> = (0..6)
            .map(|turn| round_robin(&order, turn, |_| true).unwrap())
            .collect();
        assert_eq!(turns, [0, 1, 2, 0, 1, 2]);
        // An ineligible server's turn passes to the next.
        assert_eq!(round_robin(&order, 1, |i| i != 1), Some(2));
        assert_eq!(round_robin(&order, 1, |_| false), None);
    }

    #[test]
    fn rendezvous_moves_only_the_keys_of_a_server_that_leaves() {
        let pool = servers(&[1, 1, 1, 1]);
        let keys: Vec<u64> = (0..10_000u64).map(mix).collect();
        let before: Vec<usize> = keys
            .iter()
            .map(|&k| rendezvous(&pool, k, |_| true).unwrap())
            .collect();
        let mut counts = [0u32; 4];
        for &server in &before {
            counts[server] += 1;
        }
        assert!(
            counts.iter().all(|&c| (2_200..2_800).contains(&c)),
            "{counts:?}"
        );
        // Server 2 leaves: its keys spread over the others, no other key moves.
        let after: Vec<usize> = keys
            .iter()
            .map(|&k| rendezvous(&pool, k, |i| i != 2).unwrap())
            .collect();
        for (was, now) in before.iter().zip(&after) {
            if *was != 2 {
                assert_eq!(was, now);
            } else {
                assert_ne!(*now, 2);
            }
        }
    }

    #[test]
    fn rendezvous_shares_keys_by_weight() {
        let pool = servers(&[1, 3]);
        let mut counts = [0u32; 2];
        for key in 0..20_000u64 {
            counts[rendezvous(&pool, mix(key), |_| true).unwrap()] += 1;
        }
        let share = f64::from(counts[1]) / 20_000.0;
        assert!((0.72..0.78).contains(&share), "{counts:?}");
    }
}
