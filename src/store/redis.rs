//! The Redis store, strict mode: every call of the seam is one call of one
//! server-side script (`redis/sluice.lua`), so a request's limits are
//! checked and charged atomically on the server, with the server's clock
//! (ARCHITECTURE.md, "How the store runs in Redis").
//!
//! One multiplexed connection carries every request's call, pipelined
//! ([`link`]). A call that fails or outlives `timeout` is a transient
//! [`StoreError`]: nothing was taken here, and the proxy answers through
//! `on_error`; after a few failures in a row the link stops sending and
//! probes Redis in the background until it answers again.
//!
//! On a Redis Cluster a request whose rules live in different slots is
//! asked rule by rule ([`RedisStore::admit`]). Concurrency permits are
//! leases ([`leases`]); while Redis is down each instance enforces its
//! share of every limit ([`fair_share`]). Bans and their strikes live in
//! Redis, checked and counted in the same call (docs/multi-instance.md, "Running several
//! instances").

mod access;
mod ban_board;
mod ban_mirror;
mod batch;
#[cfg(test)]
mod differential;
mod fair_share;
#[cfg(test)]
pub(crate) mod faults;
mod leases;
mod link;
mod permit_queue;
mod protocol;
mod script;
pub(crate) mod settlements;
mod settler;
pub(crate) mod slots;

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntCounter;
use smallvec::SmallVec;

use super::admission::{
    Admission, Ask, Asks, Decisions, Handover, Outcome, QueuedPermit, Receipt, RuleAsk, Sent,
    Settle, StoreError, Taken,
};
use super::memory::MemoryStore;
use super::UNASKED;
use crate::clock::{Nanos, ProxyClock};
use crate::limiter::{Decision, Limiter};
pub use access::{Access, Password};
pub use ban_board::{BanBoard, BoardBan, Posted};
pub use ban_mirror::{BanMirror, WatchedTable};
use fair_share::FairShare;
use leases::Leases;
pub use link::{Link, LinkError, Seed};
use permit_queue::Waiters;
use protocol::{
    OP_ADMIT, OP_CLAIM, OP_PEEK, OP_SPEND, SETTLE_CANCEL_RESERVATION, SETTLE_CHARGE,
    SETTLE_GIVE_BACK, SETTLE_LEAVE_QUEUE, SETTLE_RETURN_LEASE,
};
use script::{AdmitReply, Call, ClaimReply, SettleEntry};
pub use script::{Struck, SyncCall, Synced};
use settlements::Settlement;
pub use settler::SettleSeries;
use settler::Settler;

/// Where a Redis store connects and how long it waits.
#[derive(Clone)]
pub struct RedisSettings {
    /// `redis://host:port[/db]` (`rediss://`: TLS): one Redis, or some
    /// nodes of a cluster.
    pub urls: Vec<String>,
    /// The password and the TLS authorities the nodes are reached with.
    pub access: Access,
    /// Whether `urls` are a Redis Cluster's nodes.
    pub cluster: bool,
    /// The longest a call may take before `on_error` decides.
    pub timeout: Duration,
    /// Prefix of every key sluice writes.
    pub prefix: String,
    /// How many instances share the store (0: count their heartbeats).
    pub instances: u64,
    /// How long a settlement Redis does not take is retried.
    pub settle_retry_for: Duration,
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let RedisSettings {
            urls,
            access,
            cluster,
            timeout,
            prefix,
            instances,
            settle_retry_for,
        } = self;
        f.debug_struct("RedisSettings")
            .field("urls", &shown_urls(urls))
            .field("access", access)
            .field("cluster", cluster)
            .field("timeout", timeout)
            .field("prefix", prefix)
            .field("instances", instances)
            .field("settle_retry_for", settle_retry_for)
            .finish()
    }
}

/// `urls` as they may be shown (passwords masked).
fn shown_urls(urls: &[String]) -> Vec<std::borrow::Cow<'_, str>> {
    urls.iter()
        .map(|url| crate::config::shown_redis_url(url))
        .collect()
}

/// Budgets shared through Redis (strict mode), and the memory store the
/// proxy falls back to when Redis fails.
#[derive(Debug)]
pub struct RedisStore {
    local: MemoryStore,
    link: Link,
    fair_share: Arc<FairShare>,
    leases: Arc<Leases>,
    /// Requests here waiting in a shared permit queue.
    waiters: Arc<Waiters>,
    /// The fleet's bans, and this instance's copy of them.
    board: BanBoard,
    mirror: Arc<BanMirror>,
    /// Settlements on their way to Redis.
    settler: Arc<Settler>,
    /// This instance's name in the keys that remember how far its
    /// settlements and syncs got ([`slots`]).
    instance: Box<str>,
    settle_retry_for: Duration,
    prefix: Box<str>,
    /// Take time from Redis (`TIME`); `false` in tests, which pass exact
    /// instants.
    server_time: bool,
}

impl RedisStore {
    /// A store on `settings.urls` with room for `max_keys` buckets in its
    /// fallback. Connects in the background: a Redis that is down at start
    /// only means the fallback decides until it is up.
    pub fn new(settings: RedisSettings, max_keys: usize) -> Result<RedisStore, LinkError> {
        RedisStore::over(settings, MemoryStore::new(max_keys))
    }

    /// A store on `settings.urls` whose local decisions (the fallback's, or
    /// hybrid mode's every decision) use `local`.
    pub fn over(settings: RedisSettings, local: MemoryStore) -> Result<RedisStore, LinkError> {
        let seed_key = format!("{}:seed", settings.prefix);
        let link = if settings.cluster {
            Link::cluster(&settings.urls, &settings.access, settings.timeout, seed_key)?
        } else {
            let url = settings.urls.first().ok_or(LinkError::NoUrl)?;
            Link::new(url, &settings.access, settings.timeout, seed_key)?
        };
        let waiters = Arc::<Waiters>::default();
        let instance = format!("{:x}", random_u64());
        // As many settlements may wait as buckets may be kept.
        let bounds = (local.max_keys(), settings.settle_retry_for);
        let settler = Settler::new(
            link.clone(),
            &settings.prefix,
            &instance,
            Arc::clone(&waiters),
            bounds,
        );
        Ok(RedisStore {
            local,
            board: BanBoard::new(link.clone(), &settings.prefix),
            mirror: Arc::default(),
            link,
            fair_share: FairShare::new(settings.instances),
            leases: Leases::new(random_u64()),
            waiters,
            settler,
            instance: instance.into(),
            settle_retry_for: settings.settle_retry_for,
            prefix: settings.prefix.into(),
            server_time: true,
        })
    }

    /// Connects, starts the heartbeat that counts the instances and the
    /// task that delivers settlements, on `clock` (call it from the
    /// runtime).
    pub fn start(&self, clock: ProxyClock) {
        self.start_without_settler();
        self.settler.start(clock);
    }

    /// [`RedisStore::start`] but for the settlements' task: a test then
    /// delivers them itself, round by round.
    pub(crate) fn start_without_settler(&self) {
        self.link.start();
        let id = format!("{:x}-{}", random_u64(), std::process::id());
        self.fair_share
            .start(self.link.clone(), format!("{}:instances", self.prefix), id);
        self.leases.start(self.link.clone());
    }

    /// The settlements on their way.
    pub(crate) fn settler(&self) -> &Arc<Settler> {
        &self.settler
    }

    /// How long a settlement (or a hybrid sync call) Redis does not take
    /// is retried.
    pub fn settle_retry_for(&self) -> Duration {
        self.settle_retry_for
    }

    /// The Redis key of `key`'s bucket in `table`.
    pub(crate) fn key_name(&self, table: &crate::store::BucketTable, key: u64) -> String {
        script::key_name(&self.prefix, table, key)
    }

    /// How many instances share each limit: while Redis is down, each
    /// enforces this fraction of it.
    pub fn instances(&self) -> u64 {
        self.fair_share.instances()
    }

    /// The same store deciding at the instants it is given instead of the
    /// server's time (the store suite's exact instants).
    #[cfg(test)]
    pub fn with_injected_time(mut self) -> RedisStore {
        self.server_time = false;
        self
    }

    /// The memory store of the fallback (and of every bucket table).
    pub(super) fn local(&self) -> &MemoryStore {
        &self.local
    }

    /// The connection to Redis.
    pub fn link(&self) -> &Link {
        &self.link
    }

    /// The fleet's bans.
    pub fn board(&self) -> &BanBoard {
        &self.board
    }

    /// Adds `buckets`' units to the shared buckets, unless the call number
    /// `seq` was applied already, and reads their states back, at `now`
    /// (hybrid mode's sync; one call, so on a Cluster the buckets must
    /// share a slot, `slot`): one state per bucket, in order.
    pub async fn sync(
        &self,
        buckets: &[Synced<'_>],
        (seq, slot): (u64, Option<slots::Slot>),
        now: Nanos,
    ) -> Result<Vec<crate::limiter::BucketState>, StoreError> {
        let marker = slots::marker_key(&self.prefix, slot, "synced", &self.instance);
        let call = SyncCall {
            seq,
            keep_ms: slots::marker_ms(self.settle_retry_for),
            marker: &marker,
        };
        let command = script::sync(
            self.link.script_hash(),
            &self.prefix,
            (self.now_us(now), now),
            call,
            buckets,
        );
        #[cfg(test)]
        let answer = self.settler.faults.run(&self.link, command).await?;
        #[cfg(not(test))]
        let answer: script::Answer = self.link.run(command).await?;
        (0..buckets.len())
            .map(|index| script::synced(&answer, index))
            .collect()
    }

    /// Adds up `struck` in Redis (hybrid mode's strikes): per entry, how
    /// long the caller's ban lasts (`None`: none) and whether these strikes
    /// started it.
    pub async fn strike(
        &self,
        struck: &[Struck<'_>],
    ) -> Result<Vec<(Option<Nanos>, bool)>, StoreError> {
        let command = script::strikes(self.link.script_hash(), &self.prefix, struck);
        let answer: script::Answer = self.link.run(command).await?;
        (0..struck.len())
            .map(|index| script::struck(&answer, index))
            .collect()
    }

    /// This instance's copy of the fleet's bans.
    pub fn mirror(&self) -> &BanMirror {
        &self.mirror
    }

    /// Strict mode: copies the fleet's bans into the local tables every
    /// second (the fallback decides with them while Redis fails; every
    /// decision in Redis checks them there).
    pub fn mirror_bans(&self, clock: ProxyClock) {
        self.mirror
            .refresh_every(self.board.clone(), clock, Duration::from_secs(1));
    }

    fn call(&self, op: &'static str, now: Nanos) -> Call<'_> {
        Call::new(
            self.link.script_hash(),
            op,
            self.now_us(now),
            now,
            &self.prefix,
        )
    }

    /// The instant a call asks for: 0 for the server's time.
    fn now_us(&self, now: Nanos) -> u64 {
        if self.server_time {
            0
        } else {
            now / 1_000
        }
    }

    /// See [`crate::store::Store::admit`]. Bans live in Redis, checked in
    /// the script's call for every enforced rule (a ban set by hand on any
    /// instance holds from the next decision on), and a rule with `ban`
    /// counts its strikes there. A ban this instance has seen is also
    /// recorded in the rule's local table, which the fallback consults
    /// while Redis fails; Redis decides, so a ban lifted elsewhere is
    /// lifted here too.
    pub async fn admit(
        &self,
        asks: &Asks<'_>,
        now: Nanos,
        admission: &mut Admission,
    ) -> Result<(), StoreError> {
        if asks.limits.is_empty() {
            // Nothing to ask (the memory store's answer too): no round trip.
            reset(admission, 0, now);
            return Ok(());
        }
        if self.link.is_cluster() && asks.rules.len() > 1 {
            // Boxed, as the cluster's call below: the common path's state
            // stays small (every request's future carries it).
            return Box::pin(self.admit_rule_by_rule(asks, now, admission)).await;
        }
        let leases = self.lease_ids(&asks.limits);
        let mut call = self.call(OP_ADMIT, now);
        call.asks(asks, &leases);
        let answer = if self.link.is_cluster() {
            // Another request's keys may be in another slot: no batch.
            Box::pin(self.link.run(call.finish())).await?
        } else {
            batch::decide_batched(&self.link, call.into_body(), self.now_us(now)).await?
        };
        let at = script::instant(&answer)?;
        reset(admission, asks.limits.len(), at);
        if !self.take_reply(asks, 0..asks.rules.len(), &answer, now, admission)? {
            return Ok(());
        }
        let mut leases = leases.iter().copied();
        for (index, rule) in asks.rules.iter().enumerate() {
            let limits = &asks.limits[rule.limits.clone()];
            let decisions = &admission.decisions[rule.limits.clone()];
            if rule.shadow && decisions.iter().any(|d| !d.is_allowed()) {
                admission.shadow_limited.push(index);
                // Its leases were not taken: skip their numbers.
                for _ in 0..permits(limits) {
                    leases.next();
                }
                continue;
            }
            self.push_receipts(admission, index, limits, rule.limits.start, &mut leases, at);
        }
        Ok(())
    }

    /// [`RedisStore::admit`] on a Redis Cluster, for a request with several
    /// rules: one rule's keys share a slot (their hash tag), different
    /// rules' may not, so each rule is one call, in order. All or nothing
    /// is kept by giving back what the earlier rules took when a later one
    /// refuses (one more round trip, on that path only); shadow rules are
    /// asked once the request is admitted, each on its own.
    async fn admit_rule_by_rule(
        &self,
        asks: &Asks<'_>,
        now: Nanos,
        admission: &mut Admission,
    ) -> Result<(), StoreError> {
        reset(admission, asks.limits.len(), now);
        let mut first = true;
        for (index, rule) in asks.rules.iter().enumerate() {
            let limits = &asks.limits[rule.limits.clone()];
            let leases = self.lease_ids(limits);
            let (answer, at, reply) =
                match self.admit_one(rule, limits, &leases, now, admission).await {
                    Ok(answered) => answered,
                    Err(error) => {
                        self.give_back(admission, now).await;
                        return Err(error);
                    }
                };
            if first {
                admission.at = at;
                first = false;
            }
            if matches!(reply, AdmitReply::Banned { .. }) {
                self.give_back(admission, now).await;
                self.take_reply(asks, index..index + 1, &answer, now, admission)?;
                return Ok(());
            }
            if matches!(reply, AdmitReply::Admitted) {
                let first_slot = rule.limits.start;
                let leases = &mut leases.iter().copied();
                self.push_receipts(admission, index, limits, first_slot, leases, at);
            } else if rule.shadow {
                admission.shadow_limited.push(index);
            } else {
                self.give_back(admission, now).await;
                // The rules before it took nothing in the end: reported as
                // they are, as one call would have.
                for earlier in 0..index {
                    self.report_as_they_are(asks, earlier, now, admission)
                        .await?;
                }
                self.take_reply(asks, index..index + 1, &answer, now, admission)?;
                return Ok(());
            }
        }
        Ok(())
    }

    /// One rule of [`RedisStore::admit_rule_by_rule`] asked in a call of its
    /// own, with `leases` for its permits: the answer, its time and what it
    /// says; the rule's decisions read into `admission` (none when banned).
    async fn admit_one(
        &self,
        rule: &RuleAsk<'_>,
        limits: &[Ask<'_>],
        leases: &[u64],
        now: Nanos,
        admission: &mut Admission,
    ) -> Result<(script::Answer, Nanos, AdmitReply), StoreError> {
        // Decided as an enforced group of its own (a shadow rule is
        // still asked only once admitted, and never bans).
        let bans = rule
            .bans
            .filter(|_| !rule.shadow)
            .map(|bans| (bans, rule.ban));
        let mut one = Asks::default();
        // A request queues for one permit at most: once it waits for
        // one, a later rule's permit is taken now or refused.
        let queueing = admission.queued.is_none();
        let now_or_queue = limits.iter().map(|ask| match ask.limiter {
            Limiter::Concurrency(_) if !queueing => Ask { hold: None, ..*ask },
            _ => *ask,
        });
        one.push_rule(rule.key, false, bans, now_or_queue);
        let mut call = self.call(OP_ADMIT, now);
        call.asks(&one, leases);
        let answer: script::Answer = self.link.run(call.finish()).await?;
        // An answer that cannot be read gives back what the rules
        // before it took, as a failed call does.
        let read = script::instant(&answer).and_then(|at| {
            let reply = script::admit_reply(&answer)?;
            if !matches!(reply, AdmitReply::Banned { .. }) {
                for (offset, slot) in rule.limits.clone().enumerate() {
                    admission.decisions[slot] = script::decision(&answer, offset)?;
                }
            }
            Ok((at, reply))
        });
        let (at, reply) = read?;
        Ok((answer, at, reply))
    }

    /// Reads the answer to the rules `rules` of `asks` (asked in one call)
    /// into `admission`: the decisions of their limits, a refusal or a ban,
    /// and the bans started; a ban met or started is recorded in the rule's
    /// local table, for `/admin/bans`. Whether the request was admitted.
    fn take_reply(
        &self,
        asks: &Asks<'_>,
        rules: std::ops::Range<usize>,
        answer: &[i64],
        now: Nanos,
        admission: &mut Admission,
    ) -> Result<bool, StoreError> {
        let first_slot = asks.rules[rules.start].limits.start;
        let limits = asks.rules[rules.end - 1].limits.end - first_slot;
        let banning: SmallVec<[usize; 2]> = rules
            .clone()
            .filter(|&index| asks.rules[index].checks_bans())
            .collect();
        let reply = script::admit_reply(answer)?;
        if let AdmitReply::Banned { ban, left } = reply {
            let Some(&index) = banning.get(ban) else {
                return Err(StoreError::Script(
                    format!("the Redis script named ban {ban}, of {}", banning.len()).into(),
                ));
            };
            let rule = &asks.rules[index];
            if let Some(bans) = rule.bans {
                bans.mirror(rule.key, now, now.saturating_add(left));
            }
            admission.outcome = Outcome::Banned { rule: index, left };
            return Ok(false);
        }
        for offset in 0..limits {
            admission.decisions[first_slot + offset] = script::decision(answer, offset)?;
        }
        if matches!(reply, AdmitReply::Admitted) {
            return Ok(true);
        }
        admission.outcome = Outcome::Limited;
        for (ban, &index) in banning.iter().enumerate() {
            let rule = &asks.rules[index];
            if let (Some(lasts), Some(bans)) = (script::ban_started(answer, limits, ban), rule.bans)
            {
                bans.mirror(rule.key, now, now.saturating_add(lasts));
                admission.bans_started.push(index);
            }
        }
        Ok(false)
    }

    /// Gives back every receipt `admission` holds (a later rule refused, or
    /// failed), and empties it. Waited for, as long as a call may take, so
    /// that what is reported next counts it (the settlements go on if not).
    async fn give_back(&self, admission: &mut Admission, now: Nanos) {
        if let Some(queued) = admission.queued.take() {
            self.leave_queue(&queued.receipt);
        }
        let mut receipts = std::mem::take(&mut admission.receipts);
        let sent = self.settle(&mut receipts, Settle::GiveBack, now, None);
        let _ = tokio::time::timeout(self.link.timeout(), sent.answered()).await;
    }

    /// A new lease number for each concurrency limit of `limits`.
    fn lease_ids(&self, limits: &[Ask<'_>]) -> SmallVec<[u64; 2]> {
        (0..permits(limits))
            .map(|_| self.leases.next_id())
            .collect()
    }

    /// The receipts of rule `index`, whose `limits` (decided into
    /// `admission.decisions` from `first_slot` on) were all taken at `at`,
    /// or reserved for later; its permits' lease numbers come from
    /// `leases`, in order.
    fn push_receipts(
        &self,
        admission: &mut Admission,
        index: usize,
        limits: &[Ask<'_>],
        first_slot: usize,
        leases: &mut impl Iterator<Item = u64>,
        at: Nanos,
    ) {
        for (offset, ask) in limits.iter().enumerate() {
            let decision = admission.decisions[first_slot + offset];
            let wait = decision.wait();
            let mut queued = false;
            let taken = match ask.limiter {
                Limiter::Concurrency(_) => {
                    let id = leases.next().expect("a lease number per permit");
                    // Held with no wait: a ticket in the permit's queue,
                    // named like the lease it becomes once claimed.
                    queued = matches!(decision, Decision::Hold { .. });
                    if !queued {
                        let key = script::key_name(&self.prefix, ask.table, ask.key);
                        self.leases.taken(id, key);
                    }
                    Taken::Lease { id }
                }
                _ if wait > 0 => Taken::Reserved { at: at + wait },
                _ => Taken::Bucket,
            };
            let receipt = Receipt {
                rule: index,
                table: ask.table.clone(),
                key: ask.key,
                limiter: *ask.limiter,
                units: ask.cost,
                taken,
                at,
                charged: 0,
                settled: false,
            };
            if queued {
                admission.queued = Some(Box::new(QueuedPermit {
                    receipt,
                    handover: Handover::Shared,
                    max_wait: ask.hold.map_or(0, |hold| hold.max_wait),
                }));
            } else {
                admission.receipts.push(receipt);
            }
        }
    }

    /// Waits until the permit `receipt` queued for is claimed: `true`, or
    /// `false` once its ticket has lapsed (see [`permit_queue`]). While
    /// Redis fails the waiter keeps asking, until its `max_delay` ends the
    /// wait.
    pub async fn claim(&self, receipt: &Receipt) -> bool {
        let Taken::Lease { id } = receipt.taken else {
            return false;
        };
        let key = script::key_name(&self.prefix, &receipt.table, receipt.key);
        let waiting = self.waiters.enter(&key);
        let mut pause = permit_queue::FIRST_POLL;
        loop {
            // Listening before asking: a permit returned meanwhile rings.
            let rung = waiting.bell.notified();
            tokio::pin!(rung);
            rung.as_mut().enable();
            // With injected time (tests), every claim is at the admission's
            // instant.
            let mut call = self.call(OP_CLAIM, receipt.at);
            call.claim(receipt, id);
            let answer = self.link.run::<script::Answer>(call.finish()).await;
            match answer.and_then(|answer| script::claim_reply(&answer)) {
                Ok(ClaimReply::Claimed) => {
                    self.leases.taken(id, key);
                    return true;
                }
                Ok(ClaimReply::Never) => return false,
                Ok(ClaimReply::NotYet) => {}
                Err(error) => tracing::debug!(%error, "a queued permit not claimed yet"),
            }
            tokio::select! {
                () = &mut rung => pause = permit_queue::FIRST_POLL,
                () = tokio::time::sleep(pause) => {
                    pause = (pause * 2).min(permit_queue::LAST_POLL);
                }
            }
        }
    }

    /// A waiter gives up: its ticket leaves the queue, with the lease it
    /// may have claimed just before (a settlement, delivered in order).
    pub fn leave_queue(&self, receipt: &Receipt) {
        let Taken::Lease { id } = receipt.taken else {
            return;
        };
        self.leases.returned(id);
        let mut settlement = self.settlement(receipt.at);
        let entry = SettleEntry::new(&self.prefix, receipt, SETTLE_LEAVE_QUEUE, id, receipt.at);
        settlement.slot = self.link.is_cluster().then(|| slots::slot_of(entry.key()));
        settlement.entries.push(entry);
        self.settler.send(settlement);
    }

    /// See [`crate::store::Store::settle`]: the receipts are marked settled
    /// now, and their settlements are handed to the settler, which delivers
    /// them in order until Redis takes each ([`settler`]). `charged`
    /// counts a charge's units once Redis took them.
    pub fn settle(
        &self,
        receipts: &mut [Receipt],
        how: Settle,
        now: Nanos,
        charged: Option<&IntCounter>,
    ) -> Sent {
        let settlements = self.settling(receipts, how, now, charged);
        let mut sent = Sent::default();
        for mut settlement in settlements {
            let (done, answered) = tokio::sync::oneshot::channel();
            settlement.done = Some(done);
            sent.0.push(answered);
            self.settler.send(settlement);
        }
        sent
    }

    /// An empty settlement made at `now`.
    fn settlement(&self, now: Nanos) -> Settlement {
        Settlement {
            seq: 0,
            queued_at: 0,
            now_us: self.now_us(now),
            slot: None,
            entries: SmallVec::new(),
            charged: None,
            wakes: Vec::new(),
            done: None,
        }
    }

    /// The settlements of `receipts`, marking them as
    /// [`MemoryStore::settle`] does: one (one per rule on a Redis Cluster,
    /// whose calls keep to one slot); none when there is nothing to send
    /// (kept units stay where they are in Redis). A charge is counted with
    /// the first, or at once when there is none.
    fn settling(
        &self,
        receipts: &mut [Receipt],
        how: Settle,
        now: Nanos,
        charged: Option<&IntCounter>,
    ) -> SmallVec<[Settlement; 1]> {
        let mut settlements: SmallVec<[(usize, Settlement); 1]> = SmallVec::new();
        for receipt in receipts {
            let Some((code, units, returned)) = self.settle_code(receipt, how) else {
                continue;
            };
            let group = if self.link.is_cluster() {
                receipt.rule
            } else {
                0
            };
            let at = match settlements.iter().position(|(rule, _)| *rule == group) {
                Some(at) => at,
                None => {
                    settlements.push((group, self.settlement(now)));
                    settlements.len() - 1
                }
            };
            let settlement = &mut settlements[at].1;
            let entry = SettleEntry::new(&self.prefix, receipt, code, units, now);
            if self.link.is_cluster() && settlement.slot.is_none() {
                settlement.slot = Some(slots::slot_of(entry.key()));
            }
            if returned && self.waiters.any() {
                settlement.wakes.push(entry.key().to_owned());
            }
            settlement.entries.push(entry);
        }
        if let (Settle::Charge(units), Some(counter)) = (how, charged) {
            match settlements.first_mut() {
                Some((_, settlement)) => settlement.charged = Some((counter.clone(), units)),
                None => counter.inc_by(units),
            }
        }
        settlements
            .into_iter()
            .map(|(_, settlement)| settlement)
            .collect()
    }

    /// How `receipt` is settled as `how` says, marking it: the script's
    /// code, its units, and whether it returns a permit; `None` when there
    /// is nothing to send.
    fn settle_code(&self, receipt: &mut Receipt, how: Settle) -> Option<(u64, u64, bool)> {
        let charge = matches!(how, Settle::Charge(_));
        if receipt.settled && !charge {
            return None;
        }
        receipt.settled |= !charge;
        Some(match (receipt.taken, how) {
            (Taken::Lease { id }, Settle::Keep | Settle::GiveBack) => {
                self.leases.returned(id);
                (SETTLE_RETURN_LEASE, id, true)
            }
            (Taken::Lease { .. }, Settle::Charge(_)) => return None,
            // A reservation all drawn by charges: nothing to give back.
            (_, Settle::GiveBack) if receipt.units == 0 => return None,
            // An adaptive rule's permit, this instance's own
            // (`Store::settle` returned it).
            (Taken::Permit, _) => return None,
            (_, Settle::Keep) => return None,
            (Taken::Bucket, Settle::GiveBack) => (SETTLE_GIVE_BACK, receipt.units, false),
            // Cancelled while its instant is ahead, else given back at
            // that instant (by Redis' clock: the script decides), as
            // memory settles it.
            (Taken::Reserved { .. }, Settle::GiveBack) => {
                (SETTLE_CANCEL_RESERVATION, receipt.units, false)
            }
            (_, Settle::GiveBack) => return None,
            (_, Settle::Charge(units)) => {
                receipt.charged = receipt.charged.saturating_add(units);
                (SETTLE_CHARGE, units, false)
            }
        })
    }

    /// See [`crate::store::Store::spend`] (`spend`) and
    /// [`crate::store::Store::peek`].
    pub async fn decide_all(
        &self,
        spend: bool,
        asks: &Asks<'_>,
        now: Nanos,
        decisions: &mut Decisions,
    ) -> Result<(), StoreError> {
        let op = if spend { OP_SPEND } else { OP_PEEK };
        decisions.clear();
        // One call, or on a Redis Cluster one per rule (a call's keys must
        // share a slot; one rule's do).
        let groups: SmallVec<[std::ops::Range<usize>; 2]> = if self.link.is_cluster() {
            asks.rules.iter().map(|rule| rule.limits.clone()).collect()
        } else {
            std::iter::once(0..asks.limits.len()).collect()
        };
        for limits in groups {
            let mut call = self.call(op, now);
            call.all_enforced(&asks.limits[limits.clone()]);
            let answer: script::Answer = self.link.run(call.finish()).await?;
            for offset in 0..limits.len() {
                decisions.push(script::decision(&answer, offset)?);
            }
        }
        Ok(())
    }

    /// Reports `rule`'s limits as they are now (a rule whose units were
    /// given back when a later rule refused the request).
    async fn report_as_they_are(
        &self,
        asks: &Asks<'_>,
        rule: usize,
        now: Nanos,
        admission: &mut Admission,
    ) -> Result<(), StoreError> {
        let limits = asks.rules[rule].limits.clone();
        let mut call = self.call(OP_PEEK, now);
        call.all_enforced(&asks.limits[limits.clone()]);
        let answer: script::Answer = self.link.run(call.finish()).await?;
        for (offset, slot) in limits.enumerate() {
            // A permit's peek would count it refused when full; what matters
            // here is what is left.
            admission.decisions[slot] = Decision::Allow(script::decision(&answer, offset)?.state());
        }
        Ok(())
    }
}

/// `admission` emptied for a new answer at `at`.
fn reset(admission: &mut Admission, limits: usize, at: Nanos) {
    admission.outcome = Outcome::Admitted;
    admission.decisions.clear();
    admission.decisions.resize(limits, UNASKED);
    admission.receipts.clear();
    admission.queued = None;
    admission.at = at;
    admission.shadow_limited.clear();
    admission.bans_started.clear();
}

/// A random number (std's hasher keys come from the operating system's
/// randomness): an instance's heartbeat name, a new shared key seed.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// How many of `limits` are concurrency permits.
fn permits(limits: &[Ask<'_>]) -> usize {
    limits
        .iter()
        .filter(|ask| matches!(ask.limiter, Limiter::Concurrency(_)))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::suite::{redis_store, token_bucket, Limit, T0};
    use crate::store::Store;

    /// A key of the wrong type makes the script fail: Redis answered, so it
    /// is no outage (the link stays up), and retrying will not fix it.
    #[tokio::test]
    async fn a_script_error_is_not_an_outage() {
        let store = redis_store().await;
        let limit = Limit::new(&store, token_bucket(10, 1));
        let Store::Redis(shared) = &store else {
            unreachable!("a Redis store")
        };
        let mut asks = Asks::default();
        asks.push_rule(5, false, None, [limit.ask(5, 1)]);
        let key = script::key_name(&shared.prefix, asks.limits[0].table, 5);
        let mut hash = redis::cmd("HSET");
        hash.arg(&key).arg("not").arg("a bucket");
        shared.link().run::<redis::Value>(hash).await.unwrap();
        for _ in 0..5 {
            let error = store
                .admit(&asks, T0, &mut Admission::default())
                .await
                .unwrap_err();
            assert!(matches!(error, StoreError::Script(_)), "{error}");
            assert!(!error.is_transient());
            assert!(shared.link().is_up(), "a script error took the link down");
        }
        let mut del = redis::cmd("DEL");
        del.arg(&key);
        shared.link().run::<redis::Value>(del).await.unwrap();
        let mut admission = Admission::default();
        store.admit(&asks, T0, &mut admission).await.unwrap();
        assert!(admission.admitted());
    }

    /// An error Redis answers while it cannot serve for a while (here
    /// `READONLY`: the node became a replica, as in a failover) is an
    /// outage, not the script's: it passes once the node serves again.
    #[tokio::test]
    async fn a_node_that_cannot_serve_for_now_is_an_outage() {
        let server = crate::testing::redis_server::RedisServer::start();
        let store = crate::store::suite::redis_store_on(vec![server.url()], false).await;
        let limit = Limit::new(&store, token_bucket(10, 1));
        let mut asks = Asks::default();
        asks.push_rule(5, false, None, [limit.ask(5, 1)]);
        store
            .admit(&asks, T0, &mut Admission::default())
            .await
            .unwrap();
        server
            .cli(&["REPLICAOF", "127.0.0.1", "1"])
            .expect("a replica");
        let error = store
            .admit(&asks, T0, &mut Admission::default())
            .await
            .unwrap_err();
        assert!(matches!(error, StoreError::Unavailable(_)), "{error}");
        server.cli(&["REPLICAOF", "NO", "ONE"]).expect("a primary");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while store
            .admit(&asks, T0, &mut Admission::default())
            .await
            .is_err()
        {
            assert!(std::time::Instant::now() < deadline, "never served again");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}
