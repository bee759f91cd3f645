//! What the access log says of a request, read once, when the proxy is
//! done with it, from the request's own [`Record`]: what it asked (once
//! checked) and what decided it. The line rides on the response body
//! afterwards (`respond::ProxyBody`), which knows the status, the bytes
//! sent and when the response ended.
//!
//! The deciding rule is the one the answer names: on a refusal the rule
//! the problem document names, otherwise the one `X-RateLimit-*` names (the
//! limit with the least remaining, the earliest on a tie). Its key is shown
//! as docs/operations.md, "Keys in logs and admin views", says: a credential part as its label,
//! unless `reveal_keys`. A label is a keyed hash, so each thread keeps the
//! labels it made for the keys it met last ([`LabelCache`]).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use http::Request;

use super::client_request::ClientBody;
use super::respond::Verdict;
use super::ruling::Ruling;
use super::standing::{Applicable, Unidentified};
use crate::access_log::Parts;
use crate::key::client_ip;
use crate::key::label::is_credential;
use crate::key::{KeyLabels, KeySource, KeyText, RequestFacts};
use crate::limiter::Decision;
use crate::policy::{Policy, Rule};
use crate::problem::push_json_str;
use crate::store::Outcome;

/// How far a request went through the proxy, and what it was known by
/// there (`'r`: its facts' borrow of it, `'p`: the policy's rules).
pub enum Record<'a, 'r, 'p> {
    /// The checks refused it before its facts were read: as it came, the
    /// client resolved through the trusted proxies.
    Unchecked {
        request: &'a Request<ClientBody>,
        peer: SocketAddr,
    },
    /// Identification refused it: the deny list, a missing key, a field
    /// sent twice, a retired route.
    Refused {
        facts: &'a RequestFacts<'r>,
        refused: Unidentified<'p>,
    },
    /// Admission ruled (`admitted`: it passes, to be forwarded; how long
    /// the upstream took is added when it answered); `enforced` are the
    /// rules that applied.
    Ruled {
        facts: &'a RequestFacts<'r>,
        admitted: bool,
        ruling: &'a Ruling<'p>,
        enforced: &'a [Applicable<'p>],
    },
}

/// Writes what `record` says into the request's line (nothing when the
/// log is off).
#[inline]
pub fn note(line: Option<&mut Parts>, record: Record<'_, '_, '_>, policy: &Policy) {
    if let Some(line) = line {
        line.note(record, policy);
    }
}

/// What a record writes into the line.
impl Parts {
    fn note(&mut self, record: Record<'_, '_, '_>, policy: &Policy) {
        match record {
            Record::Unchecked { request, peer } => self.asked_unchecked(request, peer, policy),
            Record::Refused { facts, refused } => {
                self.asked(facts, policy);
                self.refused(refused, facts, policy);
                self.recorded(None, facts, policy);
            }
            Record::Ruled {
                facts,
                admitted,
                ruling,
                enforced,
            } => {
                self.asked(facts, policy);
                let cost = self.ruled(admitted, ruling, enforced, facts, policy);
                self.recorded(cost, facts, policy);
            }
        }
    }

    /// The deciding rule's `cost` and the request's `keys`: each source the
    /// policy records, as shown (docs/replay.md).
    fn recorded(&mut self, cost: Option<u64>, facts: &RequestFacts<'_>, policy: &Policy) {
        self.record(cost, |out, client| {
            out.push(b'{');
            for (index, one) in policy.recorded_keys.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(&one.member);
                if let KeySource::Ip = one.source {
                    // As keys have it, already written as the client.
                    out.push(b'"');
                    out.extend_from_slice(client);
                    out.push(b'"');
                    continue;
                }
                VALUE.with_borrow_mut(|value| {
                    value.clear();
                    if !policy.keys.write_value(&one.source, facts, value) {
                        return out.extend_from_slice(b"null");
                    }
                    if one.credential {
                        let shown = LABELS.with_borrow_mut(|cache| {
                            cache.show_value(&policy.labels, &one.source, value)
                        });
                        push_json_str(out, &shown);
                    } else {
                        push_json_str(out, value);
                    }
                });
            }
            out.push(b'}');
        });
    }

    fn asked(&mut self, facts: &RequestFacts<'_>, policy: &Policy) {
        let prefix = policy.config.server.ipv6_prefix;
        let client = |out: &mut Vec<u8>| write_client(out, facts.client_ip, prefix);
        // The path as normalised, not folded: a replay folds it with its
        // own config's `paths_alike`.
        let path = facts.normalized_path;
        self.describe(client, facts.method.as_str(), facts.host, path);
    }

    fn asked_unchecked(
        &mut self,
        request: &Request<ClientBody>,
        peer: SocketAddr,
        policy: &Policy,
    ) {
        let client_ip = policy.client_ip.resolve(peer.ip(), request.headers());
        let prefix = policy.config.server.ipv6_prefix;
        let client = |out: &mut Vec<u8>| write_client(out, client_ip, prefix);
        let host = super::checks::host_of(request);
        self.describe(
            client,
            request.method().as_str(),
            host,
            request.uri().path(),
        );
    }

    fn refused(&mut self, refused: Unidentified<'_>, facts: &RequestFacts<'_>, policy: &Policy) {
        match refused {
            Unidentified::Denied => self.decide("denied", None, None),
            // The key, or the query a cost is read from, is what is missing;
            // an ambiguous field or an unreadable body has no one value to
            // key on.
            Unidentified::MissingKey(rule)
            | Unidentified::Uncosted(rule, _)
            | Unidentified::Ambiguous(rule, _)
            | Unidentified::UnreadableBody(rule, _) => {
                self.decide("missing_key", Some(&rule.name), None)
            }
            // Counted limited, as a retired route is.
            Unidentified::Gone(rule, _) => {
                let key = shown_key(rule, facts, policy);
                self.decide("limited", Some(&rule.name), Some(&key));
            }
        }
    }

    /// Writes the decision; the units the deciding rule takes, if one
    /// decided.
    fn ruled<'p>(
        &mut self,
        admitted: bool,
        ruling: &Ruling<'p>,
        enforced: &[Applicable<'p>],
        facts: &RequestFacts<'_>,
        policy: &Policy,
    ) -> Option<u64> {
        self.held = ruling.held;
        let (rule, outcome) = match deciding(admitted, ruling, enforced) {
            Deciding::Denied => {
                self.decide("denied", None, None);
                return None;
            }
            Deciding::Nothing => return None,
            Deciding::Rule { rule, outcome, .. } => (rule, outcome),
        };
        let cost = enforced
            .iter()
            .find(|one| std::ptr::eq(one.rule, rule))
            .map(|one| if rule.is_concurrency() { 1 } else { one.cost });
        if let [KeySource::Ip] = rule.key[..] {
            // The most common key, already written as the client.
            self.decide_keyed_by_client(outcome, &rule.name);
            return cost;
        }
        let key = shown_key(rule, facts, policy);
        self.decide(outcome, Some(&rule.name), Some(&key));
        cost
    }
}

/// What decided a ruled request, as its answer names it.
pub enum Deciding<'v, 'p> {
    /// Refused although nothing limited it: the store failed and
    /// `on_error = "deny"` answered 503.
    Denied,
    /// No limit applied.
    Nothing,
    /// `rule` decided it, with this `outcome` (as `sluice_requests_total`
    /// counts it); `verdict` is the limit that decided, when a limit did
    /// (a ban has none).
    Rule {
        rule: &'p Rule,
        outcome: &'static str,
        verdict: Option<&'v Verdict<'p>>,
    },
}

/// The rule the answer names: on a refusal the first that refused, else
/// the limit `X-RateLimit-*` names (the least remaining, the earliest on a
/// tie), `delayed` when that rule held the request.
pub fn deciding<'v, 'p>(
    admitted: bool,
    ruling: &'v Ruling<'p>,
    enforced: &[Applicable<'p>],
) -> Deciding<'v, 'p> {
    match ruling.outcome {
        Outcome::Admitted if !admitted => Deciding::Denied,
        Outcome::Banned { rule, .. } => Deciding::Rule {
            rule: enforced[rule].rule,
            outcome: "limited",
            verdict: None,
        },
        Outcome::Limited => match ruling.verdicts.iter().find(|v| !v.decision.is_allowed()) {
            Some(refusing) => Deciding::Rule {
                rule: refusing.rule,
                outcome: "limited",
                verdict: Some(refusing),
            },
            None => Deciding::Nothing,
        },
        Outcome::Admitted => {
            let Some(tightest) = ruling
                .verdicts
                .iter()
                .min_by_key(|v| v.decision.state().remaining)
            else {
                return Deciding::Nothing;
            };
            let rule = tightest.rule;
            let held = ruling
                .verdicts
                .iter()
                .any(|v| std::ptr::eq(v.rule, rule) && matches!(v.decision, Decision::Hold { .. }));
            Deciding::Rule {
                rule,
                outcome: if held { "delayed" } else { "allowed" },
                verdict: Some(tightest),
            }
        }
    }
}

thread_local! {
    /// The IPv4 client this thread wrote last, as text (a keep-alive
    /// connection's requests all come from one).
    static LAST_CLIENT: Cell<(Ipv4Addr, [u8; client_ip::IPV4_TEXT_MAX], u8)> =
        const { Cell::new((Ipv4Addr::UNSPECIFIED, [0; client_ip::IPV4_TEXT_MAX], 0)) };
}

/// The client IP as keys have it (an IPv6 client as its network of
/// `ipv6_prefix` bits); IPv4 digit by digit ([`client_ip::ipv4_bytes`]),
/// or as the thread wrote it last.
fn write_client(out: &mut Vec<u8>, ip: IpAddr, ipv6_prefix: u8) {
    match client_ip::canonical(ip) {
        IpAddr::V4(v4) => {
            let (last, mut text, len) = LAST_CLIENT.get();
            if last == v4 && len != 0 {
                out.extend_from_slice(&text[..usize::from(len)]);
                return;
            }
            let written = client_ip::ipv4_bytes(v4, &mut text);
            out.extend_from_slice(written);
            let len = written.len() as u8;
            LAST_CLIENT.set((v4, text, len));
        }
        v6 => {
            let mut text = String::with_capacity(48);
            client_ip::write_key(v6, ipv6_prefix, &mut text);
            out.extend_from_slice(text.as_bytes());
        }
    }
}

/// `rule`'s key for the request `facts` describe, as it may be shown.
pub fn shown_key(rule: &Rule, facts: &RequestFacts<'_>, policy: &Policy) -> String {
    let text = policy.keys.key_text(&rule.key, facts);
    if !rule.key.iter().any(is_credential) {
        return text.clear().to_owned();
    }
    LABELS.with_borrow_mut(|cache| cache.show(&policy.labels, &rule.key, &text))
}

/// Labels made at most per thread before the cache starts over.
const MOST_LABELS: usize = 1024;

/// The keys a thread showed last, by their text in clear: a caller's many
/// requests cost one keyed hash.
#[derive(Default)]
struct LabelCache {
    /// What the labels were made with; another policy's may differ.
    labels: Option<KeyLabels>,
    /// Clear text → (which parts are credentials, one bit each; the key
    /// as shown).
    shown: HashMap<String, (u64, String)>,
}

thread_local! {
    static LABELS: RefCell<LabelCache> = RefCell::default();
    /// A recorded key's value in clear, on its way into the line.
    static VALUE: RefCell<String> = const { RefCell::new(String::new()) };
}

impl LabelCache {
    /// [`LabelCache::show`] of one credential value: a value met before
    /// is found by its text, with no key built for it.
    fn show_value(&mut self, labels: &KeyLabels, source: &KeySource, value: &str) -> String {
        let current = self.labels.as_ref().is_some_and(|own| own.same_as(labels));
        if let (true, Some((1, shown))) = (current, self.shown.get(value)) {
            return shown.clone();
        }
        let key = KeyText::typed(value, 1);
        self.show(labels, std::slice::from_ref(source), &key)
    }

    fn show(&mut self, labels: &KeyLabels, sources: &[KeySource], key: &KeyText) -> String {
        if !self.labels.as_ref().is_some_and(|own| own.same_as(labels)) {
            self.labels = Some(labels.clone());
            self.shown.clear();
        }
        let credentials = sources
            .iter()
            .enumerate()
            .filter(|(_, source)| is_credential(source))
            .fold(0u64, |mask, (index, _)| mask | 1u64 << (index % 64));
        if let Some((mask, shown)) = self.shown.get(key.clear()) {
            if *mask == credentials {
                return shown.clone();
            }
        }
        let shown = labels.show(sources, key);
        if self.shown.len() >= MOST_LABELS {
            self.shown.clear();
        }
        self.shown
            .insert(key.clear().to_owned(), (credentials, shown.clone()));
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_written_as_keys_write_it() {
        let clients = [
            ("0.0.0.0", 64),
            ("203.0.113.7", 64),
            ("10.20.100.9", 64),
            ("255.255.255.255", 64),
            ("::ffff:198.51.100.1", 64),
            ("2001:db8:1:2:3:4:5:6", 64),
            ("2001:db8:1:2:3:4:5:6", 128),
            ("::1", 48),
        ];
        // Each twice in a row (the second as the thread wrote it last),
        // and the whole list twice (the last one changing under it).
        let twice = clients.iter().flat_map(|client| [client, client]);
        for &(ip, prefix) in twice.clone().chain(twice) {
            let ip: IpAddr = ip.parse().unwrap();
            let mut ours = Vec::new();
            write_client(&mut ours, ip, prefix);
            let mut keyed = String::new();
            client_ip::write_key(ip, prefix, &mut keyed);
            assert_eq!(String::from_utf8(ours).unwrap(), keyed, "{ip}/{prefix}");
        }
    }
}
