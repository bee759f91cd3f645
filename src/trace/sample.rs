//! Whether a request is traced, decided before anything is allocated
//! (docs/observability.md, "Sampling"): a parent's sampled flag is followed
//! when `parent` allows it for this peer; any other request is sampled by
//! the `sample` ratio, decided from the low 8 bytes of the trace id as
//! OpenTelemetry's `TraceIdRatioBased` sampler decides, so every instance
//! agrees. A trusted peer's parent whose flag is not followed is decided
//! on its own trace id and its trace goes on, as `traceidratio` does, so
//! that sluice and the services behind it sample the same traces. Any other
//! request whose parent is not followed gets a trace id of sluice's own,
//! drawn *before* the decision: a client cannot pick ids that are always
//! sampled.

use super::context::Parent;
use super::ids::{self, SpanId, TraceId};
use crate::config::ParentRule;

/// The sampling settings, as the request path reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampler {
    /// A trace id is sampled when its low 8 bytes, shifted right once, are
    /// below this (2^63 for `sample = 1`, 0 for `sample = 0`).
    bound: u64,
    parent: ParentRule,
}

/// What the sampler decided for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampled {
    /// Not traced: no span, and the request's trace headers go on as they
    /// came.
    No,
    /// Traced as a child of the request's parent.
    Child(Parent),
    /// Traced as the root of a trace sluice starts.
    Root(TraceId),
}

impl Sampler {
    /// `ratio` from 0 to 1.
    pub fn new(ratio: f64, parent: ParentRule) -> Sampler {
        let bound = if ratio >= 1.0 {
            1 << 63
        } else if ratio <= 0.0 || ratio.is_nan() {
            0
        } else {
            (ratio * (1u64 << 63) as f64) as u64
        };
        Sampler { bound, parent }
    }

    /// Whether the trace headers of a request from a peer `trusted` or not
    /// need reading: its parent is followed, or it came from a trusted peer
    /// (whose trace goes on even when its flag is not followed). A
    /// client's headers under `parent = "trusted"` or `"never"` are not
    /// read at all.
    #[inline]
    pub fn reads_parent(&self, trusted: bool) -> bool {
        trusted || self.parent == ParentRule::Always
    }

    /// Whether a parent's sampled flag, from a peer `trusted` or not, is
    /// followed.
    #[inline]
    fn follows(&self, trusted: bool) -> bool {
        match self.parent {
            ParentRule::Always => true,
            ParentRule::Trusted => trusted,
            ParentRule::Never => false,
        }
    }

    /// Decides for a request with `parent` (as its headers named it) from a
    /// peer `trusted` or not.
    #[inline]
    pub fn decide(&self, parent: Option<Parent>, trusted: bool) -> Sampled {
        if let Some(parent) = parent {
            if self.follows(trusted) {
                return match parent.sampled {
                    true => Sampled::Child(parent),
                    false => Sampled::No,
                };
            }
            if trusted {
                // Its trace id decides, as it does for every instance and
                // SDK with this ratio, and its trace goes on.
                return match self.samples(parent.trace_id.low()) {
                    true => Sampled::Child(parent),
                    false => Sampled::No,
                };
            }
        }
        if self.bound == 0 {
            return Sampled::No;
        }
        let low = ids::random_low();
        if !self.samples(low) {
            return Sampled::No;
        }
        Sampled::Root(TraceId::with_low(low))
    }

    fn samples(&self, low: u64) -> bool {
        (low >> 1) < self.bound
    }
}

/// A sampled request's own span id.
pub fn span_id() -> SpanId {
    SpanId::random()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::context::parse_traceparent;

    fn parent(sampled: bool) -> Parent {
        let flags = if sampled { "01" } else { "00" };
        let text = format!("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-{flags}");
        parse_traceparent(text.as_bytes()).unwrap()
    }

    #[test]
    fn a_parent_is_followed_only_as_the_rule_says() {
        let never = Sampler::new(0.0, ParentRule::Trusted);
        assert_eq!(
            never.decide(Some(parent(true)), true),
            Sampled::Child(parent(true))
        );
        assert_eq!(never.decide(Some(parent(false)), true), Sampled::No);
        // From an untrusted peer the parent is not followed: the ratio (0)
        // decides.
        assert_eq!(never.decide(Some(parent(true)), false), Sampled::No);
        let always = Sampler::new(0.0, ParentRule::Always);
        assert_eq!(
            always.decide(Some(parent(true)), false),
            Sampled::Child(parent(true))
        );
        let all = Sampler::new(1.0, ParentRule::Never);
        // A trusted peer's parent, not followed: sampled by the ratio, and
        // its trace goes on, whatever its flag.
        assert_eq!(
            all.decide(Some(parent(true)), true),
            Sampled::Child(parent(true))
        );
        assert_eq!(
            all.decide(Some(parent(false)), true),
            Sampled::Child(parent(false))
        );
        // A client's parent, not followed: sampled by the ratio, with a
        // trace of sluice's own.
        match all.decide(Some(parent(true)), false) {
            Sampled::Root(id) => assert_ne!(id, parent(true).trace_id),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            all.decide(Some(parent(false)), false),
            Sampled::Root(_)
        ));
        // Only `always` reads a client's headers; a trusted peer's are read
        // under every rule.
        for rule in [ParentRule::Always, ParentRule::Trusted, ParentRule::Never] {
            let sampler = Sampler::new(0.5, rule);
            assert!(sampler.reads_parent(true), "{rule:?}");
            assert_eq!(
                sampler.reads_parent(false),
                rule == ParentRule::Always,
                "{rule:?}"
            );
        }
    }

    /// A parent whose trace id's low 8 bytes are `low`, unsampled.
    fn parent_with_low(low: u64) -> Parent {
        let text = format!("00-4bf92f3577b34da6{low:016x}-00f067aa0ba902b7-00");
        let parent = parse_traceparent(text.as_bytes()).unwrap();
        assert_eq!(parent.trace_id.low(), low);
        parent
    }

    #[test]
    fn a_trusted_parent_not_followed_is_decided_by_its_own_trace_id() {
        // 0.5: sampled when the low 8 bytes, shifted right once, are below
        // 2^62, that is when they are below 2^63.
        let half = Sampler::new(0.5, ParentRule::Never);
        let under = parent_with_low((1 << 63) - 1);
        let over = parent_with_low(1 << 63);
        assert_eq!(half.decide(Some(under), true), Sampled::Child(under));
        assert_eq!(half.decide(Some(over), true), Sampled::No);
        assert_eq!(
            half.decide(Some(parent_with_low(0)), true),
            Sampled::Child(parent_with_low(0))
        );
        assert_eq!(
            half.decide(Some(parent_with_low(u64::MAX)), true),
            Sampled::No
        );
        // A tenth: the bound is 0.1 × 2^63, as OpenTelemetry computes it.
        let tenth = Sampler::new(0.1, ParentRule::Never);
        let bound = (0.1 * (1u64 << 63) as f64) as u64;
        let just_under = parent_with_low((bound - 1) << 1 | 1);
        let just_over = parent_with_low(bound << 1);
        assert_eq!(
            tenth.decide(Some(just_under), true),
            Sampled::Child(just_under)
        );
        assert_eq!(tenth.decide(Some(just_over), true), Sampled::No);
        // B3's 64-bit trace id is the low half: it decides alike.
        let b3 = crate::trace::context::parse_b3(b"7fffffffffffffff-00f067aa0ba902b7-0").unwrap();
        assert_eq!(half.decide(Some(b3), true), Sampled::Child(b3));
    }

    #[test]
    fn a_clients_parent_not_followed_cannot_pick_a_sampled_id() {
        // An id the ratio would always sample, from a peer not trusted: the
        // decision is on a fresh id, so about half are sampled, each in a
        // trace of sluice's own.
        let half = Sampler::new(0.5, ParentRule::Never);
        let chosen = parent_with_low(0);
        let mut sampled = 0;
        for _ in 0..4_000 {
            match half.decide(Some(chosen), false) {
                Sampled::No => {}
                Sampled::Root(id) => {
                    assert_ne!(id, chosen.trace_id);
                    assert!(id.low() < 1 << 63, "{id:?} is over the bound");
                    sampled += 1;
                }
                other => panic!("{other:?}"),
            }
        }
        // 2,000 expected; a standard deviation is about 32.
        assert!((1_700..2_300).contains(&sampled), "{sampled}");
        // The same under `parent = "trusted"`.
        let trusted_only = Sampler::new(0.5, ParentRule::Trusted);
        assert!(!matches!(
            trusted_only.decide(Some(parent_with_low(0)), false),
            Sampled::Child(_)
        ));
    }

    #[test]
    fn the_ratio_is_read_from_the_low_half_as_opentelemetry_reads_it() {
        let half = Sampler::new(0.5, ParentRule::Never);
        assert!(half.samples(0));
        assert!(half.samples((1 << 63) - 1));
        assert!(!half.samples(1 << 63));
        assert!(!half.samples(u64::MAX));
        assert!(Sampler::new(1.0, ParentRule::Never).samples(u64::MAX));
        assert!(!Sampler::new(0.0, ParentRule::Never).samples(0));
    }

    #[test]
    fn about_the_ratio_of_fresh_requests_is_sampled() {
        let tenth = Sampler::new(0.1, ParentRule::Never);
        let sampled = (0..20_000)
            .filter(|_| tenth.decide(None, false) != Sampled::No)
            .count();
        // 2,000 expected; a standard deviation is about 42.
        assert!((1_700..2_300).contains(&sampled), "{sampled}");
    }
}
