//! Whether a request is traced, decided before anything is allocated
//! (docs/observability.md, "Sampling"): a parent's sampled flag is followed
//! when `parent` allows it for this peer; any other request is sampled by
//! the `sample` ratio, decided from the low 8 bytes of the trace id as
//! OpenTelemetry's `TraceIdRatioBased` sampler decides, so every instance
//! agrees. A request whose parent is not followed gets a trace id of
//! sluice's own, drawn *before* the decision: a client cannot pick ids that
//! are always sampled.

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

    /// Whether a parent from a peer `trusted` or not would be followed: if
    /// not, its headers need not be read at all.
    #[inline]
    pub fn follows(&self, trusted: bool) -> bool {
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
        let followed = parent.filter(|_| self.follows(trusted));
        if let Some(parent) = followed {
            return match parent.sampled {
                true => Sampled::Child(parent),
                false => Sampled::No,
            };
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
        // Sampled by the ratio, with a trace of sluice's own.
        match all.decide(Some(parent(true)), true) {
            Sampled::Root(id) => assert_ne!(id, parent(true).trace_id),
            other => panic!("{other:?}"),
        }
        // An unsampled parent not followed: the ratio samples it anew.
        assert!(matches!(
            all.decide(Some(parent(false)), false),
            Sampled::Root(_)
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
