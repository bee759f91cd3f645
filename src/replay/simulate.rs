//! Deciding recorded requests with a policy, on a simulated clock, with
//! sluice's own code: each rule's `match` ([`crate::policy::Matcher`]),
//! its bucket key from the recorded values
//! ([`crate::key::KeyHasher::key_of_values`]),
//! its tier or override ([`Rule::limits_for_key`]), and one admission of
//! its own memory store at the line's time, asked through the decider as
//! the request path asks it ([`crate::decider`]: `fill_asks`, then
//! `Decider::admit`, which the memory store answers at once).
//!
//! What the request path waits for, the simulation schedules: a held
//! request's units are reserved at once (delay mode's reservation), so
//! its hold is known when it is decided; a concurrency permit is in
//! flight from the request's admission for as long as the log says its
//! exchange took, and returned then; a request queued for a permit (a
//! concurrency rule in delay mode) gets one when a release hands it over,
//! or is refused at its `max_delay`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use futures_util::FutureExt;

use http::{HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

use super::line::{Logged, Recorded, Wanted};
use crate::clock::Nanos;
use crate::clock::ProxyClock;
use crate::config::{KeySource, MissingPolicy};
use crate::decider::{fill_asks, Answered, Applicable, Decider, Holds};
use crate::key::fold::fold;
use crate::key::{BucketKey, RequestFacts};
use crate::limiter::Decision;
use crate::metrics::Metrics;
use crate::policy::{Policy, Rule};
use crate::store::{
    Admission, Asks, Handover, MemoryStore, OnError, Outcome, QueuedPermit, Receipt, Settle, Store,
    Taken,
};

/// Where a rule reads one of its key sources in a line.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Client,
    Path,
    Method,
    Host,
    Global,
    /// The line's `keys`, the [`Wanted`] source at this index.
    Keys(usize),
}

/// What one rule reads, found once.
#[derive(Debug)]
struct Plan {
    key: Vec<Slot>,
    tier: Option<Slot>,
}

/// The rules that apply to a request: enforced, then shadow ones.
#[derive(Default)]
struct Rules<'p> {
    enforced: Vec<Applicable<'p>>,
    shadowed: Vec<Applicable<'p>>,
}

/// One rule's figures (docs/replay.md lists them).
#[derive(Debug, Default)]
pub struct Tally {
    pub matched: u64,
    pub allowed: u64,
    pub limited: u64,
    pub held: u64,
    pub longest_hold: Nanos,
    pub distinct: HashSet<u64, foldhash::fast::FixedState>,
    pub first_limited: Option<Nanos>,
    /// Refusals by bucket key: the key as the log shows it, and how many.
    pub limited_keys: HashMap<BucketKey, (String, u64), foldhash::fast::FixedState>,
    pub newly_limited: u64,
    pub no_longer_limited: u64,
}

/// The whole log's figures against what it says happened: each request
/// counted once, whichever rule decides it (or none the config still has).
#[derive(Debug, Default, Clone, Copy)]
pub struct Totals {
    pub newly_limited: u64,
    pub no_longer_limited: u64,
}

/// How the replay decided a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replayed {
    /// Admitted, or let through unlimited.
    Admitted,
    /// Refused by this rule (the first in file order that refused).
    Limited(usize),
    /// Refused, but not by a limit: the deny list, a missing key.
    Refused,
}

/// A request queued for a concurrency permit.
struct Waiter {
    queued: Box<QueuedPermit>,
    /// The rule whose permit it waits for.
    rule: usize,
    key: BucketKey,
    since: Nanos,
    deadline: Nanos,
    /// How long its exchange takes once admitted.
    exchange: Nanos,
    /// What else it took, kept or given back with it.
    receipts: Vec<Receipt>,
    logged: Logged,
    logged_rule: Option<usize>,
}

/// The store a replay decides on: a memory store of its own, asked
/// through the decider as every way in asks (docs/operations.md, "Every
/// decision goes one way"), its call timed on a clock and counted in
/// metrics nobody reads. It answers at once and never fails.
pub struct SimulatedStore {
    store: Arc<Store>,
    clock: ProxyClock,
    metrics: Metrics,
}

impl SimulatedStore {
    /// A simulated store of at most `max_keys` keys a table.
    pub fn new(max_keys: usize) -> SimulatedStore {
        SimulatedStore {
            store: Arc::new(Store::Memory(MemoryStore::new(max_keys))),
            clock: ProxyClock::default(),
            metrics: Metrics::new(),
        }
    }

    /// The store a policy is compiled against.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn decider(&self) -> Decider<'_> {
        Decider {
            store: &self.store,
            clock: &self.clock,
            on_error: OnError::Deny,
            metrics: &self.metrics,
        }
    }
}

/// Decides lines in time order; see the module docs.
pub struct Simulator<'p> {
    policy: &'p Policy,
    decider: Decider<'p>,
    /// The decider's memory store, where permits return.
    store: &'p MemoryStore,
    plans: Vec<Plan>,
    /// The `match.header` names and where their values are.
    headers_read: Vec<(HeaderName, usize)>,
    /// The headers rules match on, taken out while a line is decided
    /// (an `Option`: taking it leaves no empty map to drop).
    headers: Option<HeaderMap>,
    /// The line being decided's path, folded as the policy's
    /// `paths_alike` says: what `path` keys read.
    path: String,
    pub tallies: Vec<Tally>,
    pub totals: Totals,
    /// The simulated clock: the latest time decided.
    now: Nanos,
    /// Permits to return: when, and the receipts (by number in `returns`).
    releases: BinaryHeap<Reverse<(Nanos, u64)>>,
    returns: HashMap<u64, Vec<Receipt>>,
    next_release: u64,
    waiters: Vec<Waiter>,
    /// The store's answer, reused (boxed: moved out and back per line).
    answer: Option<Box<Admission>>,
    /// What a line asks of the store, and the rules that apply to it:
    /// reused too, their room kept.
    asks: Option<Box<Asks<'p>>>,
    applicable: Option<Box<Rules<'p>>>,
    /// The rule name a line named last, and its index.
    last_rule: Option<(Box<str>, Option<usize>)>,
}

impl<'p> Simulator<'p> {
    /// A simulator of `policy`, whose tables are in `store`; the sources
    /// its rules read from `keys` are added to `wanted`.
    pub fn new(policy: &'p Policy, store: &'p SimulatedStore, wanted: &mut Wanted) -> Self {
        let mut slot = |source: &KeySource| match source {
            KeySource::Ip => Slot::Client,
            KeySource::Path => Slot::Path,
            KeySource::Method => Slot::Method,
            KeySource::Host => Slot::Host,
            KeySource::Global => Slot::Global,
            other => Slot::Keys(want(wanted, other)),
        };
        let plans = (policy.rules.iter())
            .map(|rule| Plan {
                key: rule.key.iter().map(&mut slot).collect(),
                tier: rule.tier_by.as_ref().map(&mut slot),
            })
            .collect();
        let mut headers_read = Vec::new();
        for rule in &policy.rules {
            for name in rule.matcher.header_names() {
                if !headers_read.iter().any(|(read, _)| read == name) {
                    let index = want(wanted, &KeySource::Header(name.clone()));
                    headers_read.push((name.clone(), index));
                }
            }
        }
        Simulator {
            policy,
            decider: store.decider(),
            store: store.store.local(),
            plans,
            headers_read,
            headers: Some(HeaderMap::new()),
            path: String::new(),
            tallies: policy.rules.iter().map(|_| Tally::default()).collect(),
            totals: Totals::default(),
            now: 0,
            releases: BinaryHeap::new(),
            returns: HashMap::new(),
            next_release: 0,
            waiters: Vec::new(),
            answer: Some(Box::default()),
            asks: Some(Box::default()),
            applicable: Some(Box::default()),
            last_rule: None,
        }
    }

    /// Decides `line` at its time (or the latest time decided, if it came
    /// later than that: the clock never goes back).
    pub fn decide(&mut self, line: &Recorded) {
        let now = line.time.max(self.now);
        self.advance(now);
        if !line.reached_rules {
            // Refused by sluice's checks before any rule was looked at.
            return;
        }
        let policy = self.policy;
        let client = client_of(line);
        if policy.deny.iter().any(|net| net.contains(&client)) {
            return self.compare(line, Replayed::Refused);
        }
        if policy.allow.iter().any(|net| net.contains(&client)) {
            return self.compare(line, Replayed::Admitted);
        }
        // The rules that apply, into lists kept from line to line.
        let mut applicable = self.applicable.take().unwrap_or_default();
        let walked = self.with_facts(line, |simulator, facts| {
            simulator.walk(line, facts, now, &mut applicable)
        });
        // A path that cannot be folded (`/..;/x`) is answered 400.
        let replayed = match walked.unwrap_or(Err(Replayed::Refused)) {
            Ok(()) => self.admit(line, now, &applicable),
            Err(replayed) => Some(replayed),
        };
        applicable.enforced.clear();
        applicable.shadowed.clear();
        self.applicable = Some(applicable);
        if let Some(replayed) = replayed {
            self.compare(line, replayed);
        }
    }

    /// Asks the store for the rules that apply to `line`; how it was
    /// decided (`None` while it waits for a permit).
    fn admit(&mut self, line: &Recorded, now: Nanos, rules: &Rules<'p>) -> Option<Replayed> {
        let Rules { enforced, shadowed } = rules;
        if enforced.is_empty() && shadowed.is_empty() {
            return Some(Replayed::Admitted);
        }
        let mut asks = self.asks.take().unwrap_or_default();
        // Every field, so that one added is cleared too.
        let Asks {
            rules: asked,
            limits,
        } = &mut *asks;
        asked.clear();
        limits.clear();
        fill_asks(&mut asks, enforced, shadowed, Holds::AsRuled);
        let mut answer = self.answer.take().unwrap_or_default();
        let decided = self.decider.admit(&asks, now, &mut answer).now_or_never();
        // The memory store answers at once, and never fails.
        debug_assert!(matches!(decided, Some(Ok(Answered::ByStore))));
        self.asks = Some(asks);
        let replayed = self.take(line, now, enforced, shadowed, &mut answer);
        self.answer = Some(answer);
        replayed
    }

    /// Runs `then` with the facts rules match on, read from `line`, its
    /// path folded by the policy's `paths_alike` (the log records it
    /// unfolded); `None` when the path cannot be folded.
    fn with_facts<T>(
        &mut self,
        line: &Recorded,
        then: impl FnOnce(&mut Self, &RequestFacts<'_>) -> T,
    ) -> Option<T> {
        let path = fold(line.path(), self.policy.paths_alike).ok()?;
        self.path.clear();
        self.path.push_str(&path);
        let mut headers = self.headers.take().unwrap_or_default();
        // Most configs match on no header: the map stays empty.
        if !headers.is_empty() {
            headers.clear();
        }
        for (name, index) in &self.headers_read {
            if let Some(value) = line.value(*index) {
                if let Ok(value) = HeaderValue::from_str(value) {
                    headers.insert(name.clone(), value);
                }
            }
        }
        let facts = RequestFacts {
            method: &line.method,
            path: &path,
            normalized_path: line.path(),
            query: None,
            host: line.host(),
            headers: &headers,
            client_ip: client_of(line),
            claims: None,
            body: None,
            call: None,
        };
        let result = then(self, &facts);
        self.headers = Some(headers);
        Some(result)
    }

    /// The key that rule `index` counts `line` under, as the log shows
    /// keys; `None` when the rule does not apply to it (`sluice suggest`).
    pub fn key_of(&mut self, line: &Recorded, index: usize) -> Option<String> {
        if !line.reached_rules {
            return None;
        }
        let rule = &self.policy.rules[index];
        let fits = self.with_facts(line, |_, facts| rule.matcher.matches(facts))?;
        let plan = &self.plans[index];
        let value = |at: usize| value_of(line, &self.path, plan.key[at]);
        let shared = rule.missing == MissingPolicy::Shared;
        self.policy
            .keys
            .key_of_values(&rule.key, line.client, value, shared)
            .ok()?;
        fits.then(|| self.shown_key(line, index))
    }

    /// Every rule's standing on the request, in file order, as identify
    /// walks them: the rules that apply (into `rules`, empty), or how the
    /// walk refused it.
    fn walk(
        &mut self,
        line: &Recorded,
        facts: &RequestFacts<'_>,
        now: Nanos,
        rules: &mut Rules<'p>,
    ) -> Result<(), Replayed> {
        let policy = self.policy;
        let Rules { enforced, shadowed } = rules;
        for (index, rule) in policy.rules.iter().enumerate() {
            if !rule.matcher.matches(facts) {
                continue;
            }
            let plan = &self.plans[index];
            let value = |at: usize| value_of(line, facts.path, plan.key[at]);
            let shared = rule.missing == MissingPolicy::Shared;
            let key = match policy
                .keys
                .key_of_values(&rule.key, line.client, value, shared)
            {
                Ok(key) => key,
                Err(_) if rule.missing == MissingPolicy::Skip => continue,
                Err(_) => {
                    self.tallies[index].matched += 1;
                    return Err(Replayed::Refused);
                }
            };
            let tally = &mut self.tallies[index];
            tally.matched += 1;
            tally.distinct.insert(key);
            if let Some(sunset) = &rule.sunset {
                if !rule.shadow && sunset.schedule.is_gone(now) {
                    self.limited(index, key, line, now);
                    return Err(Replayed::Limited(index));
                }
            }
            let tier = plan.tier.and_then(|slot| value_of(line, facts.path, slot));
            let limits = rule.limits_for_key(key, tier, &policy.keys, now);
            let applicable = Applicable {
                rule,
                key,
                limits,
                cost: rule.cost,
            };
            if rule.shadow {
                shadowed.push(applicable);
            } else {
                enforced.push(applicable);
            }
        }
        Ok(())
    }

    /// Counts what the store answered; `None` while the request waits for
    /// a permit.
    fn take(
        &mut self,
        line: &Recorded,
        now: Nanos,
        enforced: &[Applicable<'p>],
        shadowed: &[Applicable<'p>],
        answer: &mut Admission,
    ) -> Option<Replayed> {
        let policy = self.policy;
        let index_of = |rule: &Rule| position(policy, rule);
        let mut decisions = &answer.decisions[..];
        let mut refusing = None;
        let mut hold = 0;
        let mut counts = SmallVec::<[(usize, BucketKey, Nanos, bool); 4]>::new();
        for applicable in enforced {
            let (own, rest) = decisions.split_at(applicable.limits.len().min(decisions.len()));
            decisions = rest;
            let index = index_of(applicable.rule);
            let refused = own.iter().any(|d| !d.is_allowed());
            let wait = own.iter().map(Decision::wait).max().unwrap_or(0);
            if refused && refusing.is_none() {
                refusing = Some(index);
            }
            hold = hold.max(wait);
            counts.push((index, applicable.key, wait, refused));
        }
        let queued_rule = answer.queued.as_ref().and_then(|queued| {
            enforced
                .iter()
                .find(|one| {
                    one.rule.is_concurrency()
                        && one
                            .limits
                            .iter()
                            .any(|l| l.table.same(&queued.receipt.table))
                })
                .map(|one| index_of(one.rule))
        });
        match answer.outcome {
            Outcome::Banned { rule, .. } => {
                let index = index_of(enforced[rule].rule);
                self.limited(index, enforced[rule].key, line, now);
                return Some(Replayed::Limited(index));
            }
            Outcome::Limited => {
                for (index, key, _, refused) in counts {
                    if refused {
                        self.limited(index, key, line, now);
                    } else {
                        self.tallies[index].allowed += 1;
                    }
                }
                return refusing.map(Replayed::Limited);
            }
            Outcome::Admitted => {}
        }
        self.count_admitted(&counts, queued_rule);
        self.count_shadows(line, now, enforced.len(), shadowed, answer);
        let exchange = line.duration.saturating_sub(line.held);
        if let (Some(queued), Some(rule)) = (answer.queued.take(), queued_rule) {
            let receipts = answer.receipts.drain(..).collect();
            self.wait_for_permit(line, now, enforced, rule, queued, receipts);
            return None;
        }
        // Rates are kept as taken: only permits are returned.
        if answer
            .receipts
            .iter()
            .any(|receipt| receipt.taken == Taken::Permit)
        {
            let receipts = answer.receipts.drain(..).collect();
            self.in_flight(receipts, now + hold + exchange);
        }
        Some(Replayed::Admitted)
    }

    /// An admitted request's enforced rules: held (a wait) or allowed;
    /// the rule it queues for a permit of counts once it has one.
    fn count_admitted(
        &mut self,
        counts: &[(usize, BucketKey, Nanos, bool)],
        queued_rule: Option<usize>,
    ) {
        for &(index, _, wait, _) in counts {
            if Some(index) == queued_rule {
                continue;
            }
            let tally = &mut self.tallies[index];
            if wait > 0 {
                tally.held += 1;
                tally.longest_hold = tally.longest_hold.max(wait);
            } else {
                tally.allowed += 1;
            }
        }
    }

    /// The shadow rules of an admitted request (asked after the `enforced`
    /// ones): limited or allowed, as the store answered.
    fn count_shadows(
        &mut self,
        line: &Recorded,
        now: Nanos,
        enforced: usize,
        shadowed: &[Applicable<'p>],
        answer: &Admission,
    ) {
        for (at, applicable) in (enforced..).zip(shadowed) {
            let index = position(self.policy, applicable.rule);
            if answer.shadow_limited.contains(&at) {
                self.limited(index, applicable.key, line, now);
            } else {
                self.tallies[index].allowed += 1;
            }
        }
    }

    /// A request queued for a permit of concurrency rule `rule` waits
    /// among the waiters, its exchange to run once it has one.
    fn wait_for_permit(
        &mut self,
        line: &Recorded,
        now: Nanos,
        enforced: &[Applicable<'p>],
        rule: usize,
        queued: Box<QueuedPermit>,
        receipts: Vec<Receipt>,
    ) {
        let policy = self.policy;
        let key = enforced
            .iter()
            .find(|one| position(policy, one.rule) == rule)
            .map_or(0, |one| one.key);
        self.limited_names(rule, key, line);
        let logged_rule = self.logged_rule(line);
        self.waiters.push(Waiter {
            deadline: now.saturating_add(queued.max_wait),
            queued,
            rule,
            key,
            since: now,
            exchange: line.duration.saturating_sub(line.held),
            receipts,
            logged: line.logged,
            logged_rule,
        });
    }

    /// Permits among `receipts` are returned at `until`; the rest is kept.
    fn in_flight(&mut self, receipts: Vec<Receipt>, until: Nanos) {
        let permits: Vec<Receipt> = receipts
            .into_iter()
            .filter(|receipt| receipt.taken == Taken::Permit)
            .collect();
        if permits.is_empty() {
            return;
        }
        let number = self.next_release;
        self.next_release += 1;
        self.returns.insert(number, permits);
        self.releases.push(Reverse((until, number)));
    }

    /// Moves the clock to `now`: permits return, queued requests get them
    /// or give up, in time order.
    fn advance(&mut self, now: Nanos) {
        loop {
            let release = self.releases.peek().map(|Reverse((at, _))| *at);
            let deadline = self.waiters.iter().map(|w| w.deadline).min();
            match (release, deadline) {
                (Some(at), Some(until)) if at <= until && at <= now => self.release(at),
                (Some(at), None) if at <= now => self.release(at),
                (_, Some(until)) if until < now => self.expire(until),
                _ => break,
            }
        }
        self.now = now;
    }

    fn release(&mut self, at: Nanos) {
        let Some(Reverse((_, number))) = self.releases.pop() else {
            return;
        };
        for mut receipt in self.returns.remove(&number).unwrap_or_default() {
            self.store.settle(&mut receipt, Settle::Keep, at);
        }
        // A returned permit goes to the next waiter in its key's queue.
        let mut index = 0;
        while index < self.waiters.len() {
            let handed = match &mut self.waiters[index].queued.handover {
                Handover::Local { ready, .. } => ready.try_recv().is_ok(),
                Handover::Shared => false,
            };
            if handed {
                let waiter = self.waiters.remove(index);
                self.admit_waiter(waiter, at);
            } else {
                index += 1;
            }
        }
    }

    /// The earliest waiter whose `max_delay` is over at `at` gives up.
    fn expire(&mut self, at: Nanos) {
        let Some(index) = self.waiters.iter().position(|w| w.deadline == at) else {
            return;
        };
        let mut waiter = self.waiters.remove(index);
        if !self.store.leave_queue(&waiter.queued) {
            // Handed over meanwhile: it has its permit.
            return self.admit_waiter(waiter, at);
        }
        for receipt in &mut waiter.receipts {
            self.store.settle(receipt, Settle::GiveBack, at);
        }
        let tally = &mut self.tallies[waiter.rule];
        tally.limited += 1;
        tally.first_limited.get_or_insert(at);
        if let Some((_, limited)) = tally.limited_keys.get_mut(&waiter.key) {
            *limited += 1;
        }
        self.count_against_log(
            waiter.logged,
            waiter.logged_rule,
            Replayed::Limited(waiter.rule),
        );
    }

    fn admit_waiter(&mut self, waiter: Waiter, at: Nanos) {
        let Waiter {
            queued,
            rule,
            since,
            exchange,
            mut receipts,
            logged,
            logged_rule,
            ..
        } = waiter;
        let tally = &mut self.tallies[rule];
        tally.held += 1;
        tally.longest_hold = tally.longest_hold.max(at - since);
        receipts.push(queued.receipt);
        self.in_flight(receipts, at + exchange);
        self.count_against_log(logged, logged_rule, Replayed::Admitted);
    }

    /// Decides what is still waiting at the end of the log.
    pub fn finish(&mut self) {
        while !self.waiters.is_empty() || !self.releases.is_empty() {
            let next = (self.releases.peek().map(|Reverse((at, _))| *at))
                .into_iter()
                .chain(self.waiters.iter().map(|w| w.deadline))
                .min()
                .unwrap_or(self.now);
            self.advance(next.saturating_add(1));
        }
    }

    /// A refusal by rule `index`, of `key`, of the request `line` records
    /// at `now`.
    fn limited(&mut self, index: usize, key: BucketKey, line: &Recorded, now: Nanos) {
        self.limited_names(index, key, line);
        let tally = &mut self.tallies[index];
        tally.limited += 1;
        tally.first_limited.get_or_insert(now);
        if let Some((_, limited)) = tally.limited_keys.get_mut(&key) {
            *limited += 1;
        }
    }

    /// Makes sure rule `index` knows how the log shows `key` (`line`'s),
    /// written once per key, not per refusal.
    fn limited_names(&mut self, index: usize, key: BucketKey, line: &Recorded) {
        if !self.tallies[index].limited_keys.contains_key(&key) {
            let shown = self.shown_key(line, index);
            self.tallies[index].limited_keys.insert(key, (shown, 0));
        }
    }

    /// Rule `index`'s key of `line`, as the log shows keys.
    fn shown_key(&self, line: &Recorded, index: usize) -> String {
        let mut shown = String::new();
        for (at, slot) in self.plans[index].key.iter().enumerate() {
            if at > 0 {
                shown.push('|');
            }
            shown.push_str(value_of(line, &self.path, *slot).unwrap_or(""));
        }
        shown
    }

    fn compare(&mut self, line: &Recorded, replayed: Replayed) {
        let logged_rule = self.logged_rule(line);
        self.count_against_log(line.logged, logged_rule, replayed);
    }

    /// The index of the rule the log names as deciding `line`, if the
    /// config has it; the last name looked up is remembered, since a log
    /// names few rules.
    fn logged_rule(&mut self, line: &Recorded) -> Option<usize> {
        let name = line.rule()?;
        if let Some((last, index)) = &self.last_rule {
            if **last == *name {
                return *index;
            }
        }
        let index = self.rule_index(name);
        self.last_rule = Some((name.into(), index));
        index
    }

    /// Newly limited: the replay refuses what the log let through (by the
    /// rule that refuses now); no longer limited: the replay admits what
    /// the log says a rule refused (that rule, if the config has it). The
    /// totals count both whichever the rule.
    fn count_against_log(
        &mut self,
        logged: Logged,
        logged_rule: Option<usize>,
        replayed: Replayed,
    ) {
        match (logged, replayed) {
            (Logged::Limited, Replayed::Admitted) => {
                self.totals.no_longer_limited += 1;
                if let Some(rule) = logged_rule {
                    self.tallies[rule].no_longer_limited += 1;
                }
            }
            (Logged::Allowed | Logged::Delayed, Replayed::Limited(rule)) => {
                self.totals.newly_limited += 1;
                self.tallies[rule].newly_limited += 1;
            }
            _ => {}
        }
    }

    fn rule_index(&self, name: &str) -> Option<usize> {
        self.policy
            .rules
            .iter()
            .position(|rule| *rule.name == *name)
    }
}

/// The index of `rule` in `policy`.
fn position(policy: &Policy, rule: &Rule) -> usize {
    (policy.rules.iter())
        .position(|one| std::ptr::eq(one, rule))
        .unwrap_or(0)
}

/// The index of `source` among the wanted ones, added if new.
fn want(wanted: &mut Wanted, source: &KeySource) -> usize {
    wanted.want(source.to_string())
}

/// The client IP of `line`; unspecified when it has none.
fn client_of(line: &Recorded) -> IpAddr {
    line.client.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
}

/// A source's value in `line`, whose path folded is `path`.
fn value_of<'a>(line: &'a Recorded, path: &'a str, slot: Slot) -> Option<&'a str> {
    match slot {
        Slot::Client => Some(line.client_text()).filter(|text| !text.is_empty()),
        Slot::Path => Some(path),
        Slot::Method => Some(line.method.as_str()),
        Slot::Host => line.host().filter(|host| !host.is_empty()),
        Slot::Global => Some(""),
        Slot::Keys(index) => line.value(index),
    }
}
