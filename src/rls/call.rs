//! A `ShouldRateLimit` call as sluice decides it: its domain and, per
//! descriptor, the entries and the cost, or why it is malformed
//! (`INVALID_ARGUMENT`). Borrowed from the decoded message: nothing is
//! copied.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use smallvec::SmallVec;
use tonic::Status;

use crate::policy::domains::repeats_a_key;

/// The most descriptors one call may carry (Envoy sends one per matching
/// `rate_limits` action: a handful).
pub const MAX_DESCRIPTORS: usize = 64;

/// The most entries one descriptor may carry.
pub const MAX_ENTRIES: usize = 32;

/// Descriptors a call carries inline before spilling to the heap.
pub const INLINE_DESCRIPTORS: usize = 4;

/// A descriptor's entries, as (key, value).
pub type Entries<'c> = SmallVec<[(&'c str, &'c str); 4]>;

/// One descriptor of a call.
#[derive(Debug)]
pub struct Descriptor<'c> {
    pub entries: Entries<'c>,
    /// Units it takes: its own `hits_addend`, else the call's; 0 is 1.
    pub cost: u64,
}

impl<'c> Descriptor<'c> {
    /// The value of the entry `key`.
    pub fn entry(&self, key: &str) -> Option<&'c str> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, value)| *value)
    }
}

/// A well-formed call.
#[derive(Debug)]
pub struct Call<'c> {
    pub domain: &'c str,
    pub descriptors: SmallVec<[Descriptor<'c>; INLINE_DESCRIPTORS]>,
}

impl<'c> Call<'c> {
    /// The call `request` makes, or `INVALID_ARGUMENT` saying what is wrong
    /// with it.
    pub fn read(request: &'c RateLimitRequest) -> Result<Call<'c>, Status> {
        if request.domain.is_empty() {
            return Err(invalid(
                "the domain is empty; Envoy sends its rate limit domain",
            ));
        }
        if request.descriptors.is_empty() {
            return Err(invalid("the call carries no descriptor"));
        }
        if request.descriptors.len() > MAX_DESCRIPTORS {
            return Err(invalid(format!(
                "the call carries {} descriptors; at most {MAX_DESCRIPTORS}",
                request.descriptors.len()
            )));
        }
        let call_cost = u64::from(request.hits_addend.max(1));
        let mut descriptors = SmallVec::with_capacity(request.descriptors.len());
        for (index, descriptor) in request.descriptors.iter().enumerate() {
            let count = descriptor.entries.len();
            if count == 0 {
                return Err(invalid(format!("descriptor {index} has no entry")));
            }
            if count > MAX_ENTRIES {
                return Err(invalid(format!(
                    "descriptor {index} has {count} entries; at most {MAX_ENTRIES}"
                )));
            }
            if descriptor.is_negative_hits {
                return Err(invalid(format!(
                    "descriptor {index} asks to give hits back (is_negative_hits), which sluice \
                     does not do over this protocol"
                )));
            }
            let entries: Entries<'c> = descriptor
                .entries
                .iter()
                .map(|entry| (entry.key.as_str(), entry.value.as_str()))
                .collect();
            if entries.iter().any(|(key, _)| key.is_empty()) {
                return Err(invalid(format!(
                    "descriptor {index} has an entry without a key"
                )));
            }
            // The keys are matched as a set: a repeated one has no place.
            if repeats_a_key(&entries) {
                return Err(invalid(format!("descriptor {index} repeats an entry key")));
            }
            let cost = match &descriptor.hits_addend {
                Some(own) => own.value.max(1),
                None => call_cost,
            };
            descriptors.push(Descriptor { entries, cost });
        }
        Ok(Call {
            domain: &request.domain,
            descriptors,
        })
    }
}

fn invalid(message: impl Into<String>) -> Status {
    Status::invalid_argument(message.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
        rate_limit_descriptor::Entry, RateLimitDescriptor,
    };
    use envoy_types::pb::google::protobuf::UInt64Value;

    fn descriptor(entries: &[(&str, &str)], hits: Option<u64>) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(key, value)| Entry {
                    key: (*key).to_owned(),
                    value: (*value).to_owned(),
                })
                .collect(),
            hits_addend: hits.map(|value| UInt64Value { value }),
            ..Default::default()
        }
    }

    fn request(descriptors: Vec<RateLimitDescriptor>, hits_addend: u32) -> RateLimitRequest {
        RateLimitRequest {
            domain: "edge".to_owned(),
            descriptors,
            hits_addend,
        }
    }

    #[test]
    fn hits_addend_is_the_cost_zero_is_one_and_a_descriptors_own_wins() {
        let request = request(
            vec![
                descriptor(&[("a", "1")], None),
                descriptor(&[("a", "1")], Some(7)),
                descriptor(&[("a", "1")], Some(0)),
            ],
            3,
        );
        let call = Call::read(&request).unwrap();
        let costs: Vec<u64> = call.descriptors.iter().map(|d| d.cost).collect();
        assert_eq!(costs, [3, 7, 1]);
        assert_eq!(call.descriptors[0].entry("a"), Some("1"));
        assert_eq!(call.descriptors[0].entry("b"), None);
        let unset = self::request(vec![descriptor(&[("a", "1")], None)], 0);
        assert_eq!(Call::read(&unset).unwrap().descriptors[0].cost, 1);
    }

    #[test]
    fn a_malformed_call_is_an_invalid_argument_that_says_why() {
        let why = |request: RateLimitRequest| {
            let status = Call::read(&request).unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
            status.message().to_owned()
        };
        let mut empty_domain = request(vec![descriptor(&[("a", "1")], None)], 0);
        empty_domain.domain.clear();
        assert!(why(empty_domain).contains("domain is empty"));
        assert!(why(request(vec![], 0)).contains("no descriptor"));
        assert!(why(request(vec![descriptor(&[], None)], 0)).contains("descriptor 0 has no entry"));
        assert!(why(request(vec![descriptor(&[("", "x")], None)], 0)).contains("without a key"));
        assert!(why(request(
            vec![descriptor(&[("a", "1"), ("a", "2")], None)],
            0
        ))
        .contains("repeats an entry key"));
        let mut negative = descriptor(&[("a", "1")], Some(1));
        negative.is_negative_hits = true;
        assert!(why(request(vec![negative], 0)).contains("is_negative_hits"));
        let many = vec![descriptor(&[("a", "1")], None); MAX_DESCRIPTORS + 1];
        assert!(why(request(many, 0)).contains("at most 64"));
    }
}
