//! The one script of the Redis store (`sluice.lua`, whose header documents
//! every KEYS and ARGV slot), the calls that run it, and its answers read
//! back into the seam's types.

use redis::{Cmd, FromRedisValue, ParsingError, Value};
use smallvec::SmallVec;

use crate::clock::Nanos;
use crate::limiter::{BucketState, Decision, HoldLimits, Limiter};
use crate::store::admission::{Ask, Asks, Receipt, StoreError, Taken};
use crate::store::bans::BanPolicy;
use crate::store::BucketTable;

use super::protocol::{
    ALG_CONCURRENCY, ALG_FIXED_WINDOW, ALG_LEAKY_BUCKET, ALG_SLIDING_LOG, ALG_SLIDING_WINDOW,
    ALG_TOKEN_BUCKET, CLAIM_CLAIMED, CLAIM_NEVER, CLAIM_NOT_YET, DECISION_ALLOW, DECISION_DENY,
    DECISION_HOLD, OP_SETTLE, OP_STRIKE, OP_SYNC, OUTCOME_ADMITTED, OUTCOME_BANNED,
    OUTCOME_LIMITED, RETRY_NEVER,
};

/// How long a concurrency lease counts without renewal: a crashed
/// instance's permits come back within this (renewed by `leases`).
pub const LEASE_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// The script's source.
pub const SOURCE: &str = include_str!("sluice.lua");

const MICRO: Nanos = 1_000;

/// One call of the script being written: its keys and arguments.
pub struct Call<'s> {
    hash: &'s str,
    prefix: &'s str,
    op: &'static str,
    body: Body,
    /// This instance's clock: where it places calendar windows, which the
    /// script then places `now` among ([`calendar_text`]).
    local_now: Nanos,
}

/// A call's keys and numbers (`now` first), owned: what a batch of
/// admissions gathers from its requests' calls. The keys are written one
/// after the other into one text (no allocation per key), and the command
/// is sized once when finished.
#[derive(Debug)]
pub struct Body {
    /// Every key, back to back...
    key_text: String,
    /// ... and where each ends in it.
    key_ends: SmallVec<[usize; 4]>,
    args: SmallVec<[u64; 24]>,
    /// Arguments sent as text instead of the number at their position in
    /// `args` (a calendar window's parameter, [`calendar_text`]).
    texts: SmallVec<[(usize, String); 1]>,
}

impl Body {
    fn new(now_us: u64) -> Body {
        let mut args = SmallVec::new();
        args.push(now_us);
        Body {
            key_text: String::with_capacity(128),
            key_ends: SmallVec::new(),
            args,
            texts: SmallVec::new(),
        }
    }

    /// An empty batch of admissions at `now_us` (`batch` in `sluice.lua`).
    pub fn batch(now_us: u64) -> Body {
        let mut body = Body::new(now_us);
        body.args.push(0);
        body
    }

    /// Adds the admission `request` (the body of an `admit` call) to this
    /// batch.
    pub fn append(&mut self, request: Body) {
        self.args[1] += 1;
        let fields = &request.args[1..];
        self.args.push(request.key_ends.len() as u64);
        self.args.push(fields.len() as u64);
        let offset = self.args.len();
        self.args.extend_from_slice(fields);
        self.texts.extend(
            request
                .texts
                .into_iter()
                .map(|(at, text)| (offset + at - 1, text)),
        );
        let offset = self.key_text.len();
        self.key_text.push_str(&request.key_text);
        self.key_ends
            .extend(request.key_ends.iter().map(|end| offset + end));
    }

    /// How many admissions the batch holds.
    pub fn requests(&self) -> u64 {
        self.args.get(1).copied().unwrap_or(0)
    }

    /// The `EVALSHA` command of operation `op` for the script `hash`.
    /// (Each number is an argument of its own: sent as one string, they
    /// cost sluice less per call but Redis, which every instance shares,
    /// several times more to split; docs/benchmarks-history.md.)
    pub fn command(self, hash: &str, op: &str) -> Cmd {
        let keys = self.key_ends.len();
        // Room for every argument (numbers take at most 20 digits).
        let mut cmd = Cmd::with_capacity(
            4 + keys + self.args.len(),
            16 + hash.len() + self.key_text.len() + 20 * self.args.len(),
        );
        cmd.arg("EVALSHA").arg(hash).arg(keys);
        let mut start = 0;
        for &end in &self.key_ends {
            cmd.arg(&self.key_text[start..end]);
            start = end;
        }
        cmd.arg(op);
        write_args(&mut cmd, &self.args, &self.texts);
        cmd
    }
}

/// `args`, each as an argument of its own, the ones at the positions of
/// `texts` sent as those texts.
fn write_args(cmd: &mut Cmd, args: &[u64], texts: &[(usize, String)]) {
    if texts.is_empty() {
        cmd.arg(args);
        return;
    }
    let mut from = 0;
    for (at, text) in texts {
        cmd.arg(&args[from..*at]).arg(text.as_str());
        from = at + 1;
    }
    cmd.arg(&args[from..]);
}

impl<'s> Call<'s> {
    /// A call of operation `op` at `now_us` (0: the server's time), made
    /// at `local_now` on this instance's clock.
    pub fn new(
        hash: &'s str,
        op: &'static str,
        now_us: u64,
        local_now: Nanos,
        prefix: &'s str,
    ) -> Call<'s> {
        Call {
            hash,
            prefix,
            op,
            body: Body::new(now_us),
            local_now,
        }
    }

    /// Its keys and numbers, to join a batch.
    pub fn into_body(self) -> Body {
        self.body
    }

    /// Every limit of `asks`: the enforced rules' limits first (all or
    /// nothing), then each shadow rule (each all or nothing on its own).
    /// The store orders asks that way: enforced rules, then shadow ones.
    /// `leases` holds one lease number per concurrency limit of `asks`, in
    /// order: the leases the script takes if the request is admitted.
    pub fn asks(&mut self, asks: &Asks<'_>, leases: &[u64]) {
        let enforced: usize = asks
            .rules
            .iter()
            .filter(|rule| !rule.shadow)
            .map(|rule| rule.limits.len())
            .sum();
        let shadow: SmallVec<[u64; 2]> = asks
            .rules
            .iter()
            .filter(|rule| rule.shadow)
            .map(|rule| rule.limits.len() as u64)
            .collect();
        self.body.args.push(enforced as u64);
        self.body.args.push(shadow.len() as u64);
        self.body.args.extend(shadow);
        // The enforced rules, each of which may hold a ban: where their
        // limits are, their `ban` (`after` 0 without one: no strikes), and
        // (after every limit's key) their ban key.
        let banning = || asks.rules.iter().filter(|rule| rule.checks_bans());
        self.body.args.push(banning().count() as u64);
        for rule in banning() {
            let [after, within, lasts] = rule
                .ban
                .map_or([0; 3], |ban| [ban.after, ban.within, ban.duration]);
            self.body.args.extend([
                rule.limits.start as u64 + 1,
                rule.limits.end as u64,
                after,
                within / MICRO,
                lasts / MICRO,
            ]);
        }
        let mut leases = leases.iter();
        for rule in &asks.rules {
            for ask in &asks.limits[rule.limits.clone()] {
                self.limit(ask.table, ask.key, ask.limiter);
                self.body.args.push(match ask.limiter {
                    Limiter::Concurrency(_) => *leases.next().expect("a lease per permit"),
                    _ => ask.cost,
                });
                // Shadow rules never hold: asked now or never.
                self.hold(ask.hold.filter(|_| !rule.shadow));
            }
        }
        for rule in banning() {
            let table = asks.limits[rule.limits.start].table;
            write_key(&mut self.body.key_text, self.prefix, table, rule.key, "ban");
            self.body.key_ends.push(self.body.key_text.len());
        }
    }

    /// Delay mode's bounds (0, 0: the limit refuses instead).
    fn hold(&mut self, hold: Option<HoldLimits>) {
        match hold {
            Some(hold) => self
                .body
                .args
                .extend([hold.max_wait / MICRO, hold.max_queued.max(1)]),
            None => self.body.args.extend([0, 0]),
        }
    }

    /// Every limit of `limits` as one group (spend and peek).
    pub fn all_enforced(&mut self, limits: &[Ask<'_>]) {
        self.body.args.push(limits.len() as u64);
        self.body.args.extend([0, 0]);
        for ask in limits {
            self.limit(ask.table, ask.key, ask.limiter);
            self.body.args.push(ask.cost);
            self.body.args.extend([0, 0]);
        }
    }

    /// Claims the permit queued for by `receipt`'s ticket, number `ticket`.
    pub fn claim(&mut self, receipt: &Receipt, ticket: u64) {
        self.limit(&receipt.table, receipt.key, &receipt.limiter);
        self.body.args.push(ticket);
    }

    fn limit(&mut self, table: &BucketTable, key: u64, limiter: &Limiter) {
        write_key(
            &mut self.body.key_text,
            self.prefix,
            table,
            key,
            &table.name().limit,
        );
        self.body.key_ends.push(self.body.key_text.len());
        self.body.args.extend(parameters(limiter));
        if let Some(text) = calendar_text(limiter, self.local_now) {
            let at = self.body.args.len() - 2;
            self.body.texts.push((at, text));
        }
    }

    /// The `EVALSHA` command.
    pub fn finish(self) -> Cmd {
        self.body.command(self.hash, self.op)
    }
}

/// One receipt of a settlement, written as the `settle` call sends it: its
/// key and its six fields (`sluice.lua`'s header), owned, so that it waits
/// in the settlement queue without the receipt.
#[derive(Debug, Clone)]
pub struct SettleEntry {
    key: String,
    /// algorithm, a, b, how, units, taken_at (microseconds).
    fields: [u64; 6],
    /// A calendar window's `a`, sent as text instead ([`calendar_text`]).
    calendar: Option<Box<str>>,
}

impl SettleEntry {
    /// `receipt` settled as `how` says, one of the `SETTLE_` codes of
    /// [`super::protocol`] (`units` names the lease or the ticket of
    /// `SETTLE_RETURN_LEASE` and `SETTLE_LEAVE_QUEUE`), its calendar window
    /// placed at `local_now`.
    pub fn new(
        prefix: &str,
        receipt: &Receipt,
        how: u64,
        units: u64,
        local_now: Nanos,
    ) -> SettleEntry {
        let table = &receipt.table;
        let mut key = String::with_capacity(64);
        write_key(&mut key, prefix, table, receipt.key, &table.name().limit);
        let at = match receipt.taken {
            // A reservation is cancelled by the instant it passes at.
            Taken::Reserved { at } => at,
            _ => receipt.at,
        };
        let [algorithm, a, b] = parameters(&receipt.limiter);
        SettleEntry {
            key,
            fields: [algorithm, a, b, how, units, at / MICRO],
            calendar: calendar_text(&receipt.limiter, local_now).map(String::into_boxed_str),
        }
    }

    /// The Redis key it settles.
    pub fn key(&self) -> &str {
        &self.key
    }
}

/// The call that applies `settlements` (each its sequence number and its
/// receipts) in order, at most once each (`settle` in `sluice.lua`), at
/// `now_us` (0: the server's time); `marker` is the instance's marker in
/// their keys' slot, which Redis keeps `keep_ms` milliseconds.
pub fn settle<'e>(
    hash: &str,
    now_us: u64,
    keep_ms: u64,
    marker: &str,
    settlements: impl IntoIterator<Item = (u64, &'e [SettleEntry])>,
) -> Cmd {
    let mut body = Body::new(now_us);
    body.args.extend([keep_ms, 0]);
    for (seq, entries) in settlements {
        body.args[2] += 1;
        body.args.extend([seq, entries.len() as u64]);
        for entry in entries {
            body.key_text.push_str(&entry.key);
            body.key_ends.push(body.key_text.len());
            if let Some(text) = &entry.calendar {
                body.texts.push((body.args.len() + 1, text.to_string()));
            }
            body.args.extend(entry.fields);
        }
    }
    body.key_text.push_str(marker);
    body.key_ends.push(body.key_text.len());
    body.command(hash, OP_SETTLE)
}

/// The sequence numbers of the settlements Redis refused, in the answer
/// to a settle call.
pub fn refused(answer: &[i64]) -> impl Iterator<Item = u64> + '_ {
    answer.iter().skip(1).map(|&seq| seq.max(0) as u64)
}

/// One bucket of a hybrid sync: the units its instance took since its last
/// sync, and those it gave back of what earlier syncs sent.
#[derive(Debug, Clone, Copy)]
pub struct Synced<'d> {
    pub table: &'d BucketTable,
    pub limiter: &'d Limiter,
    pub key: u64,
    pub units: u64,
    pub given_back: u64,
    /// When the units given back were taken.
    pub given_back_at: Nanos,
}

/// What a sync call is, besides its buckets: its sequence number, and the
/// instance's marker in the buckets' slot, which Redis keeps `keep_ms`
/// milliseconds (`sync` in `sluice.lua`).
#[derive(Debug, Clone, Copy)]
pub struct SyncCall<'m> {
    pub seq: u64,
    pub keep_ms: u64,
    pub marker: &'m str,
}

/// The call that adds `buckets`' units to the shared buckets (at most
/// once: `call` numbers it) and reads their states back (`sync` in
/// `sluice.lua`), at `now_us` (0: the server's time), calendar windows
/// placed at `local_now`. Buckets of one limit in a row share one group
/// (its parameters written once): sort them by table first.
pub fn sync(
    hash: &str,
    prefix: &str,
    (now_us, local_now): (u64, Nanos),
    call: SyncCall<'_>,
    buckets: &[Synced<'_>],
) -> Cmd {
    // Written straight into the command, each key its limit's key with the
    // bucket's hexadecimal digits written over: a sync writes thousands of
    // keys a round, and building each piece by piece was most of its cost.
    let mut cmd = Cmd::with_capacity(
        6 + buckets.len() * 4 + 8,
        64 + hash.len() + call.marker.len() + buckets.len() * 120,
    );
    cmd.arg("EVALSHA").arg(hash).arg(buckets.len() + 1);
    let mut key = Vec::new();
    let mut args: Vec<u64> = Vec::with_capacity(4 + 3 * buckets.len() + 4);
    let mut texts = Vec::new();
    args.extend([now_us, call.seq, call.keep_ms, 0]);
    let mut group: Option<(&BucketTable, &Limiter, usize, usize)> = None;
    for bucket in buckets {
        let same = group.is_some_and(|(table, limiter, ..)| {
            table.same(bucket.table) && *limiter == *bucket.limiter
        });
        if !same {
            args[3] += 1;
            args.extend(parameters(bucket.limiter));
            if let Some(text) = calendar_text(bucket.limiter, local_now) {
                texts.push((args.len() - 2, text));
            }
            args.push(0);
            let mut text = String::with_capacity(128);
            let table = bucket.table;
            let head = write_key(&mut text, prefix, table, 0, &table.name().limit);
            key = text.into_bytes();
            group = Some((bucket.table, bucket.limiter, args.len() - 1, head));
        }
        let Some((_, _, count_at, head)) = group else {
            unreachable!("a group was just started")
        };
        args[count_at] += 1;
        args.extend([
            bucket.units,
            bucket.given_back,
            bucket.given_back_at / MICRO,
        ]);
        hex_digits(&mut key[head..head + 16], bucket.key);
        cmd.arg(&key[..]);
    }
    cmd.arg(call.marker);
    cmd.arg(OP_SYNC);
    write_args(&mut cmd, &args, &texts);
    cmd
}

/// Writes `key` as 16 hexadecimal digits into `into`.
fn hex_digits(into: &mut [u8], key: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (at, byte) in key.to_be_bytes().into_iter().enumerate() {
        into[2 * at] = DIGITS[usize::from(byte >> 4)];
        into[2 * at + 1] = DIGITS[usize::from(byte & 15)];
    }
}

/// The shared state of bucket number `index` in the answer to a sync
/// call: what a request of cost 1 would be told.
pub fn synced(answer: &[i64], index: usize) -> Result<BucketState, StoreError> {
    Ok(BucketState {
        remaining: field(answer, 1 + 2 * index, "a bucket's state")?.max(0) as u64,
        reset_after: nanos(field(answer, 2 + 2 * index, "a bucket's state")?),
    })
}

/// One caller's strikes by one rule, counted by a hybrid instance since its
/// last sync.
#[derive(Debug, Clone, Copy)]
pub struct Struck<'r> {
    /// The rule's name.
    pub rule: &'r str,
    pub key: u64,
    pub ban: BanPolicy,
    pub strikes: u64,
}

/// The call that adds up `struck` in Redis (`strike` in `sluice.lua`), on
/// the server's clock.
pub fn strikes(hash: &str, prefix: &str, struck: &[Struck<'_>]) -> Cmd {
    let mut body = Body::new(0);
    for one in struck {
        write_rule_key(&mut body.key_text, prefix, one.rule, one.key, "ban");
        body.key_ends.push(body.key_text.len());
        body.args.extend([
            one.ban.after,
            one.ban.within / MICRO,
            one.ban.duration / MICRO,
            one.strikes,
        ]);
    }
    body.command(hash, OP_STRIKE)
}

/// The answer to a strike call for its key number `index`: how long the
/// caller's ban lasts (`None`: no ban), and whether these strikes started
/// it.
pub fn struck(answer: &[i64], index: usize) -> Result<(Option<Nanos>, bool), StoreError> {
    let lasts = field(answer, 1 + 2 * index, "a ban")?;
    let started = field(answer, 2 + 2 * index, "a ban")? == 1;
    Ok(((lasts > 0).then(|| nanos(lasts)), started))
}

/// The Redis key of `key`'s bucket in `table`: the rule and the caller in
/// the hash tag (one caller's limits of one rule share a Cluster slot),
/// then the limit.
pub fn key_name(prefix: &str, table: &BucketTable, key: u64) -> String {
    let mut text = String::new();
    write_key(&mut text, prefix, table, key, &table.name().limit);
    text
}

/// Appends `<prefix>:{<rule>:<key>}:<what>` to `text`, `<rule>` the rule
/// `table` belongs to; where the key's digits start in `text`.
fn write_key(text: &mut String, prefix: &str, table: &BucketTable, key: u64, what: &str) -> usize {
    write_rule_key(text, prefix, &table.name().rule, key, what)
}

/// Appends `<prefix>:{<rule>:<key>}:<what>` to `text`; where the key's
/// digits start in `text`.
/// (Written piece by piece: `format!` machinery here was a visible share
/// of every request; docs/benchmarks-history.md.)
fn write_rule_key(text: &mut String, prefix: &str, rule: &str, key: u64, what: &str) -> usize {
    text.push_str(prefix);
    text.push_str(":{");
    let digits = write_tag(text, rule, key);
    text.push_str("}:");
    text.push_str(what);
    digits
}

/// Appends `<rule>:<key>`, the key as 16 hexadecimal digits: what names a
/// caller of a rule in every key of theirs (a Cluster's hash tag); where
/// the digits start in `text`.
fn write_tag(text: &mut String, rule: &str, key: u64) -> usize {
    let mut hex = [0u8; 16];
    hex_digits(&mut hex, key);
    text.push_str(rule);
    text.push(':');
    let digits = text.len();
    text.push_str(std::str::from_utf8(&hex).expect("hexadecimal digits are text"));
    digits
}

/// `<rule>:<key>` (see [`write_tag`]): how the ban board names a ban.
pub fn tag(rule: &str, key: u64) -> String {
    let mut text = String::with_capacity(rule.len() + 17);
    write_tag(&mut text, rule, key);
    text
}

/// The rule and the key a [`tag`] names.
pub fn untag(tag: &str) -> Option<(&str, u64)> {
    let (rule, hex) = tag.rsplit_once(':')?;
    let key = u64::from_str_radix(hex, 16)
        .ok()
        .filter(|_| hex.len() == 16)?;
    Some((rule, key))
}

/// The Redis key of `key`'s strikes and ban by the rule named `rule` (in
/// the slot of the caller's buckets of that rule).
pub fn ban_key(prefix: &str, rule: &str, key: u64) -> String {
    let mut text = String::new();
    write_rule_key(&mut text, prefix, rule, key, "ban");
    text
}

/// The script's algorithm number and parameters for `limiter`, in
/// microseconds (the header of `sluice.lua` lists them).
fn parameters(limiter: &Limiter) -> [u64; 3] {
    match limiter {
        Limiter::TokenBucket(gcra) => {
            let (emission, _) = gcra.intervals();
            if emission == 0 {
                return [ALG_TOKEN_BUCKET, 0, 0];
            }
            let emission = (emission / MICRO).max(1);
            [
                ALG_TOKEN_BUCKET,
                emission,
                emission.saturating_mul(gcra.capacity()),
            ]
        }
        Limiter::FixedWindow(window) => {
            let (period, count) = window.window();
            // A calendar window's period is sent as text instead.
            [ALG_FIXED_WINDOW, (period / MICRO).max(1), count]
        }
        Limiter::SlidingWindow(window) => {
            let (period, count) = window.window();
            [ALG_SLIDING_WINDOW, (period / MICRO).max(1), count]
        }
        Limiter::Concurrency(limit) => [
            ALG_CONCURRENCY,
            limit.max_in_flight,
            LEASE_TTL.as_micros() as u64,
        ],
        Limiter::LeakyBucket(leaky) => {
            let (emission, queue) = leaky.interval();
            if emission == 0 {
                return [ALG_LEAKY_BUCKET, 0, queue];
            }
            [ALG_LEAKY_BUCKET, (emission / MICRO).max(1), queue]
        }
        Limiter::SlidingLog(log) => {
            let (period, count) = log.window();
            [ALG_SLIDING_LOG, (period / MICRO).max(1), count]
        }
    }
}

/// A calendar window's parameter at `now` on this instance's clock (the
/// header of `sluice.lua`): the window `now` is in, where the one before
/// it starts, where it and the next one start and end, and bounds on the
/// unit's length, in microseconds.
/// From the calendar's cached frame: no time zone lookup per call.
fn calendar_text(limiter: &Limiter, now: Nanos) -> Option<String> {
    let Limiter::FixedWindow(window) = limiter else {
        return None;
    };
    let calendar = window.calendar()?;
    let frame = calendar.frame(now);
    let unit = calendar.unit();
    Some(format!(
        "{}:{}:{}:{}:{}:{}:{}",
        frame.index,
        frame.previous_start / MICRO,
        frame.start / MICRO,
        frame.end / MICRO,
        frame.next_end / MICRO,
        unit.longest().as_micros(),
        unit.shortest().as_micros(),
    ))
}

/// The script's answer: the integers of its one reply string (`reply` in
/// `sluice.lua`), read without an allocation per number.
#[derive(Debug, Default)]
pub struct Answer(SmallVec<[i64; 16]>);

impl std::ops::Deref for Answer {
    type Target = [i64];

    fn deref(&self) -> &[i64] {
        &self.0
    }
}

impl FromRedisValue for Answer {
    fn from_redis_value(value: Value) -> Result<Answer, ParsingError> {
        let Value::BulkString(text) = &value else {
            return Err(format!("the script answered {value:?}, not a string").into());
        };
        parse_answer(text).map(Answer).ok_or_else(|| {
            let text = String::from_utf8_lossy(text);
            format!("the script answered {text:?}, not integers").into()
        })
    }
}

/// The answers of a batch of `requests` admissions (`batch` in
/// `sluice.lua`): each request's integers, after their count.
pub fn split_batch(answer: &[i64], requests: usize) -> Option<Vec<Answer>> {
    let mut answers = Vec::with_capacity(requests);
    let mut at = 0;
    while at < answer.len() {
        let count = usize::try_from(answer[at]).ok()?;
        let part = answer.get(at + 1..at + 1 + count)?;
        answers.push(Answer(SmallVec::from_slice(part)));
        at += 1 + count;
    }
    (answers.len() == requests).then_some(answers)
}

/// The integers of `text`, each followed by one space.
fn parse_answer(text: &[u8]) -> Option<SmallVec<[i64; 16]>> {
    let mut numbers = SmallVec::new();
    for field in text.strip_suffix(b" ")?.split(|&byte| byte == b' ') {
        numbers.push(parse_integer(field)?);
    }
    Some(numbers)
}

/// A decimal integer with an optional `-`, as `%d` writes it. (By hand: a
/// hybrid sync reads two numbers per bucket, thousands a round, and
/// `str::parse` with its UTF-8 check cost several times as much.)
fn parse_integer(field: &[u8]) -> Option<i64> {
    let (negative, digits) = match field {
        [b'-', rest @ ..] => (true, rest),
        digits => (false, digits),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut value: i64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        value = value * 10 + i64::from(digit - b'0');
    }
    Some(if negative { -value } else { value })
}

fn malformed(what: &str) -> StoreError {
    StoreError::Script(format!("the Redis script answered without {what}").into())
}

fn field(answer: &[i64], index: usize, what: &str) -> Result<i64, StoreError> {
    answer.get(index).copied().ok_or_else(|| malformed(what))
}

fn nanos(micros: i64) -> Nanos {
    (micros.max(0) as u64).saturating_mul(MICRO)
}

/// The instant of the answer (the server's time, or the one given).
pub fn instant(answer: &[i64]) -> Result<Nanos, StoreError> {
    field(answer, 0, "its time").map(nanos)
}

/// How the script replied to an admission (its outcome field, and the ban
/// that refused it).
pub enum AdmitReply {
    Admitted,
    Limited,
    /// Ban number `ban` (the order of [`Call::asks`]'s banning rules) is in
    /// force for `left` more.
    Banned {
        ban: usize,
        left: Nanos,
    },
}

/// The outcome of an admission.
pub fn admit_reply(answer: &[i64]) -> Result<AdmitReply, StoreError> {
    Ok(match field(answer, 1, "its outcome")? {
        OUTCOME_ADMITTED => AdmitReply::Admitted,
        OUTCOME_BANNED => AdmitReply::Banned {
            ban: field(answer, 2, "the ban")?.max(1) as usize - 1,
            left: nanos(field(answer, 3, "the ban")?),
        },
        OUTCOME_LIMITED => AdmitReply::Limited,
        _ => return Err(malformed("a known outcome")),
    })
}

/// When this refusal's strike started ban number `ban`: how long the ban
/// lasts from the answer's instant (after the `limits` decisions).
pub fn ban_started(answer: &[i64], limits: usize, ban: usize) -> Option<Nanos> {
    let lasts = *answer.get(2 + 5 * limits + ban)?;
    (lasts > 0).then(|| nanos(lasts))
}

/// The decision for limit number `slot`.
pub fn decision(answer: &[i64], slot: usize) -> Result<Decision, StoreError> {
    let at = 2 + 5 * slot;
    let allowed = field(answer, at, "a decision")?;
    let state = BucketState {
        remaining: field(answer, at + 1, "a decision")?.max(0) as u64,
        reset_after: nanos(field(answer, at + 2, "a decision")?),
    };
    match allowed {
        DECISION_ALLOW => return Ok(Decision::Allow(state)),
        DECISION_HOLD => {
            let wait = nanos(field(answer, at + 4, "a decision")?);
            return Ok(Decision::Hold { state, wait });
        }
        DECISION_DENY => {}
        _ => return Err(malformed("a known decision")),
    }
    let retry = field(answer, at + 3, "a decision")?;
    Ok(Decision::Deny {
        state,
        // RETRY_NEVER, or any other negative number: no wait would help.
        retry_after: (retry > RETRY_NEVER).then(|| nanos(retry)),
    })
}

/// How the script answered a claim of a queued permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimReply {
    /// The permit is the ticket's now.
    Claimed,
    /// Others are ahead in the queue: ask again.
    NotYet,
    /// The ticket lapsed: the permit will never come.
    Never,
}

/// The answer to a claim.
pub fn claim_reply(answer: &[i64]) -> Result<ClaimReply, StoreError> {
    match field(answer, 1, "the claim")? {
        CLAIM_CLAIMED => Ok(ClaimReply::Claimed),
        CLAIM_NOT_YET => Ok(ClaimReply::NotYet),
        CLAIM_NEVER => Ok(ClaimReply::Never),
        _ => Err(malformed("a known claim")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_names_its_rule_and_caller_in_the_hash_tag() {
        let name = crate::store::TableName {
            rule: "per-key".into(),
            limit: "token.1.1000".into(),
        };
        let rate = crate::limiter::Rate {
            count: 1_000,
            period: std::time::Duration::from_secs(1),
        };
        let limiter = Limiter::TokenBucket(crate::limiter::Gcra::new(rate, 1_000));
        let table = crate::store::MemoryStore::new(16).named_table(name, &limiter);
        assert_eq!(
            key_name("sluice", &table, 0xdead_beef),
            "sluice:{per-key:00000000deadbeef}:token.1.1000"
        );
        assert_eq!(
            ban_key("p", &table.name().rule, u64::MAX),
            "p:{per-key:ffffffffffffffff}:ban"
        );
        // The ban board names a ban by the same tag, read back whole.
        assert_eq!(tag("per-key", 0xdead_beef), "per-key:00000000deadbeef");
        assert_eq!(
            untag("a:rule:00000000deadbeef"),
            Some(("a:rule", 0xdead_beef))
        );
        assert_eq!(untag("per-key:beef"), None);
    }

    #[test]
    fn a_sync_call_names_every_bucket_and_writes_each_limit_once() {
        let limiter = |count| {
            let rate = crate::limiter::Rate {
                count,
                period: std::time::Duration::from_secs(60),
            };
            Limiter::TokenBucket(crate::limiter::Gcra::new(rate, count))
        };
        let (five, nine) = (limiter(5), limiter(9));
        let store = crate::store::MemoryStore::new(16);
        let name = |rule: &str| crate::store::TableName {
            rule: rule.into(),
            limit: "token".into(),
        };
        let (a, b) = (
            store.named_table(name("a"), &five),
            store.named_table(name("b"), &nine),
        );
        let bucket = |table, limiter, key, units| Synced {
            table,
            limiter,
            key,
            units,
            given_back: units / 2,
            given_back_at: 5_000,
        };
        let buckets = [
            bucket(&a, &five, 1, 3),
            bucket(&a, &five, 0xbeef, 1),
            bucket(&b, &nine, 1, 7),
        ];
        let call = SyncCall {
            seq: 12,
            keep_ms: 660_000,
            marker: "p:synced:9f",
        };
        let cmd = sync("sha", "p", (42, 42_000), call, &buckets);
        let args: Vec<String> = cmd
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8(bytes.to_vec()).unwrap(),
                other => unreachable!("{other:?}"),
            })
            .collect();
        let numbers = |limiter| parameters(limiter).map(|n| n.to_string());
        let mut expected = vec!["EVALSHA".to_owned(), "sha".into(), "4".into()];
        expected.extend([
            key_name("p", &a, 1),
            key_name("p", &a, 0xbeef),
            key_name("p", &b, 1),
            "p:synced:9f".into(),
        ]);
        let strings = |all: &[&str]| all.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        expected.extend(strings(&["sync", "42", "12", "660000", "2"]));
        expected.extend(numbers(&five));
        // Per bucket: taken, given back, and when (in microseconds).
        expected.extend(strings(&["2", "3", "1", "5", "1", "0", "5"]));
        expected.extend(numbers(&nine));
        expected.extend(strings(&["1", "7", "3", "5"]));
        assert_eq!(args, expected);
        assert_eq!(
            synced(&[0, 4, 1_000, 0, 0], 1).unwrap(),
            BucketState {
                remaining: 0,
                reset_after: 0
            }
        );
        assert_eq!(synced(&[0, 4, 1_000], 0).unwrap().reset_after, 1_000_000);
        assert!(synced(&[0, 4], 0).is_err());
    }

    #[test]
    fn a_calendar_window_s_parameter_is_sent_as_text_in_its_place_batched_too() {
        use super::super::protocol::{OP_ADMIT, OP_BATCH};
        use crate::limiter::calendar::{Calendar, Unit};
        let rate = crate::limiter::Rate {
            count: 10,
            period: Unit::Day.nominal(),
        };
        let calendar = Calendar::new("Europe/Berlin", Unit::Day).unwrap();
        let limiter =
            Limiter::FixedWindow(crate::limiter::FixedWindow::on_calendar(rate, calendar));
        let store = crate::store::MemoryStore::new(16);
        let name = crate::store::TableName {
            rule: "quota".into(),
            limit: "fixed".into(),
        };
        let table = store.named_table(name, &limiter);
        // 12:00 UTC on Berlin's 25-hour 2026-10-25.
        let now = 1_792_929_600 * 1_000_000_000;
        let text = calendar_text(&limiter, now).unwrap();
        assert_eq!(
            text,
            format!(
                "{}:1792792800000000:1792879200000000:1792969200000000:1793055600000000:{}:{}",
                calendar.index_of(now),
                Unit::Day.longest().as_micros(),
                Unit::Day.shortest().as_micros()
            )
        );
        let call = |cost| {
            let mut call = Call::new("sha", OP_ADMIT, 0, now, "p");
            call.all_enforced(&[Ask {
                table: &table,
                key: 1,
                limiter: &limiter,
                cost,
                hold: None,
            }]);
            call.body
        };
        let args = |cmd: Cmd| -> Vec<String> {
            cmd.args_iter()
                .map(|arg| match arg {
                    redis::Arg::Simple(bytes) => String::from_utf8(bytes.to_vec()).unwrap(),
                    other => unreachable!("{other:?}"),
                })
                .collect()
        };
        let one = args(call(3).command("sha", OP_ADMIT));
        // EVALSHA sha 1 key admit now | 1 0 0 | alg a b cost 0 0
        assert_eq!(one[9..], ["2", &*text, "10", "3", "0", "0"]);
        let mut batch = Body::batch(0);
        batch.append(call(3));
        batch.append(call(4));
        let both = args(batch.command("sha", OP_BATCH));
        let texts: Vec<usize> = (0..both.len()).filter(|&i| both[i] == text).collect();
        assert_eq!(texts.len(), 2, "{both:?}");
        for (at, cost) in texts.into_iter().zip(["3", "4"]) {
            assert_eq!(both[at - 1], "2");
            assert_eq!(both[at + 1..at + 3], ["10", cost]);
        }
    }

    #[test]
    fn an_answer_is_read_back_whole() {
        let answer = |text: &str| Answer::from_redis_value(Value::BulkString(text.into()));
        let read = answer("1795000000123456 1 1 -1 4503599627370496 ").unwrap();
        assert_eq!(
            &*read,
            &[1_795_000_000_123_456, 1, 1, -1, 4_503_599_627_370_496]
        );
        assert_eq!(&*answer("7 ").unwrap(), &[7]);
    }

    #[test]
    fn a_malformed_answer_is_an_error_not_a_guess() {
        let answer = |value: Value| Answer::from_redis_value(value);
        for text in [
            "",
            "1 2",
            "1  2 ",
            "1 x ",
            "1.5 ",
            "99999999999999999999 ",
            "- ",
            "--1 ",
            "+1 ",
        ] {
            assert!(answer(Value::BulkString(text.into())).is_err(), "{text:?}");
        }
        assert!(answer(Value::Array(vec![Value::Int(1)])).is_err());
        assert!(answer(Value::Nil).is_err());
    }
}
