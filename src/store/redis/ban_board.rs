//! The fleet's bans (docs/multi-instance.md, "Bans across instances"):
//! what every instance sharing a Redis knows of the bans in force, so that
//! a ban set or lifted through one instance holds or ends on all, and each
//! one's `GET /admin/bans` lists them all.
//!
//! A ban lives in two places in Redis:
//!
//! - the caller's ban key (`<prefix>:{<rule>:<key hash>}:ban`, in the slot
//!   of the caller's buckets): what a strict decision checks, and where
//!   strikes are counted ([`super::script`]);
//! - the board (`<prefix>:{bans}`), a hash from `<rule>:<key hash>` to the
//!   ban's end, whether it was set by hand, and the key as labels show it
//!   (never in clear, whatever `reveal_keys` says): what the admin views
//!   list, and how hybrid instances learn of bans (each sync reads the
//!   board's version, and the board when it changed).
//!
//! Both expire with their last ban, so Redis keeps nothing idle. Bans are
//! rare (a key banned, lifted, named), so the board's calls are plain
//! `EVAL`s off the request path.

use redis::Cmd;

use super::link::Link;
use super::script;
use crate::clock::Nanos;
use crate::store::admission::StoreError;
use crate::store::BucketKey;

/// How long a ban posted for a key lasts, and who set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Posted {
    /// Earned by strikes, for this long from now: a longer ban already in
    /// force is kept.
    Earned(Nanos),
    /// Earned by strikes counted in Redis, which set the caller's ban key
    /// already: only listed on the board, for this long from now.
    Listed(Nanos),
    /// Set by hand, for this long from now: it replaces any other.
    ByHand(Nanos),
    /// Neither: only the key's label, for a ban in force whose key the
    /// board could not show (started by strikes counted in Redis).
    Named,
}

/// One ban in force, as the board lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardBan {
    /// The rule's name.
    pub rule: String,
    pub key: BucketKey,
    /// How long it lasts from the listing.
    pub left: Nanos,
    pub manual: bool,
    /// The key as labels show it (`None`: no instance has named it yet).
    pub shown: Option<String>,
}

/// The board of the Redis a store shares.
#[derive(Debug, Clone)]
pub struct BanBoard {
    link: Link,
    prefix: Box<str>,
    /// `<prefix>:{bans}` and `<prefix>:{bans}:version`: one slot.
    keys: [String; 2],
}

impl BanBoard {
    pub fn new(link: Link, prefix: &str) -> BanBoard {
        BanBoard {
            link,
            prefix: prefix.into(),
            keys: [
                format!("{prefix}:{{bans}}"),
                format!("{prefix}:{{bans}}:version"),
            ],
        }
    }

    /// The connection the board is read through.
    pub fn link(&self) -> &Link {
        &self.link
    }

    /// Posts a ban of `key` by the rule named `rule`: in the caller's ban
    /// key (unless [`Posted::Listed`] or [`Posted::Named`]) and on the
    /// board. `shown` is the key as labels show it without `reveal_keys`.
    pub async fn post(
        &self,
        rule: &str,
        key: BucketKey,
        posted: Posted,
        shown: Option<&str>,
    ) -> Result<(), StoreError> {
        for command in self.posting(rule, key, posted, shown) {
            self.link.run::<redis::Value>(command).await?;
        }
        Ok(())
    }

    /// [`BanBoard::post`] from a task, for the request path (a ban started
    /// by a refusal): nothing waits for it.
    pub fn post_detached(&self, rule: &str, key: BucketKey, posted: Posted, shown: Option<&str>) {
        for command in self.posting(rule, key, posted, shown) {
            self.link.send_detached(command);
        }
    }

    fn posting(
        &self,
        rule: &str,
        key: BucketKey,
        posted: Posted,
        shown: Option<&str>,
    ) -> impl Iterator<Item = Cmd> {
        let (lasts, manual, set_key) = match posted {
            Posted::Earned(lasts) => (Some(lasts), false, true),
            Posted::Listed(lasts) => (Some(lasts), false, false),
            Posted::ByHand(lasts) => (Some(lasts), true, true),
            Posted::Named => (None, false, false),
        };
        let ban_key = lasts.filter(|_| set_key).map(|lasts| {
            let mut command = redis::cmd("EVAL");
            command
                .arg(SET_BAN)
                .arg(1)
                .arg(script::ban_key(&self.prefix, rule, key))
                .arg(micros(lasts))
                .arg(u8::from(manual));
            command
        });
        let mut board = self.board("post");
        board
            .arg(script::tag(rule, key))
            .arg(lasts.map_or(0, micros))
            .arg(u8::from(manual))
            .arg(shown.unwrap_or_default());
        ban_key.into_iter().chain([board])
    }

    /// Lifts the ban of `key` by the rule named `rule` everywhere (its
    /// strikes are forgotten too): whether the board listed it in force.
    pub async fn lift(&self, rule: &str, key: BucketKey) -> Result<bool, StoreError> {
        let mut forget = redis::cmd("DEL");
        forget.arg(script::ban_key(&self.prefix, rule, key));
        self.link.run::<redis::Value>(forget).await?;
        let mut board = self.board("lift");
        board.arg(script::tag(rule, key));
        Ok(self.link.run::<u8>(board).await? == 1)
    }

    /// Every ban in force.
    pub async fn list(&self) -> Result<Vec<BoardBan>, StoreError> {
        let answer: Vec<String> = self.link.run(self.board("list")).await?;
        let Some((now, entries)) = answer.split_first() else {
            return Err(StoreError::Script("the ban board answered nothing".into()));
        };
        let now: u64 = now.parse().unwrap_or_default();
        Ok(entries
            .chunks_exact(2)
            .filter_map(|entry| read_entry(&entry[0], &entry[1], now))
            .collect())
    }

    /// The board's version: it changes with every ban posted or lifted
    /// (`None`: no ban is in force).
    pub async fn version(&self) -> Result<Option<String>, StoreError> {
        let mut get = redis::cmd("GET");
        get.arg(&self.keys[1]);
        self.link.run(get).await
    }

    /// A call of the board's script doing `op`; its arguments follow.
    fn board(&self, op: &str) -> Cmd {
        let mut command = redis::cmd("EVAL");
        command
            .arg(BOARD)
            .arg(2)
            .arg(&self.keys[0])
            .arg(&self.keys[1])
            .arg(op);
        command
    }
}

/// One board entry: `field` `<rule>:<key hash>`, `value` `<until> <manual>
/// <shown>`, read at the board's instant `now` (microseconds).
fn read_entry(field: &str, value: &str, now: u64) -> Option<BoardBan> {
    let (rule, key) = script::untag(field)?;
    let mut parts = value.splitn(3, ' ');
    let until: u64 = parts.next()?.parse().ok()?;
    let manual = parts.next()? == "1";
    let shown = parts.next().filter(|shown| !shown.is_empty());
    Some(BoardBan {
        rule: rule.to_owned(),
        key,
        left: until.checked_sub(now).filter(|&left| left > 0)? * 1_000,
        manual,
        shown: shown.map(str::to_owned),
    })
}

fn micros(nanos: Nanos) -> u64 {
    nanos.div_ceil(1_000)
}

/// A caller's ban key set: `KEYS[1]` the key, `ARGV[1]` how long the ban
/// lasts from Redis' now (microseconds), `ARGV[2]` 1 when set by hand
/// (which replaces a ban in force; an earned one keeps a longer one).
const SET_BAN: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ends = now + tonumber(ARGV[1])
local old = tonumber(redis.call('HGET', KEYS[1], 'until') or '0')
if ARGV[2] == '0' and old > ends then ends = old end
redis.call('HSET', KEYS[1], 'until', ends, 'n', 0)
redis.call('PEXPIREAT', KEYS[1], math.floor(ends / 1000) + 1)
return 1
";

/// The board: `KEYS[1]` a hash from `<rule>:<key hash>` to `<until>
/// <manual> <shown>` (until in Redis' microseconds; manual 1 or 0; shown
/// the key as labels show it, or nothing), `KEYS[2]` its version, a number
/// that grows with every change. Both expire with the last ban.
///
/// `ARGV[1]`:
/// - `post`, `ARGV[2]` the field, `ARGV[3]` how long from now
///   (microseconds; 0: only names the key of a ban in force), `ARGV[4]` 1
///   when set by hand (it replaces the ban; an earned one keeps a longer
///   one and who set it), `ARGV[5]` the key as shown (empty: keep the
///   board's); answers 1 if the board changed;
/// - `lift`, `ARGV[2]` the field: answers 1 if a ban was in force;
/// - `list`: answers `{ now, field, value, ... }`, the bans in force.
const BOARD: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function parse(value)
  local ends, manual, shown = string.match(value, '^(%d+) (%d) (.*)$')
  return tonumber(ends or '0'), manual, shown
end
if ARGV[1] == 'list' then
  local all = redis.call('HGETALL', KEYS[1])
  local answer = { string.format('%d', now) }
  for i = 1, #all, 2 do
    if parse(all[i + 1]) > now then
      answer[#answer + 1] = all[i]
      answer[#answer + 1] = all[i + 1]
    end
  end
  return answer
end
local field = ARGV[2]
local old = redis.call('HGET', KEYS[1], field)
local old_ends, old_manual, old_shown = 0, '0', ''
if old then old_ends, old_manual, old_shown = parse(old) end
local in_force = old_ends > now
if ARGV[1] == 'lift' then
  if not old then return 0 end
  redis.call('HDEL', KEYS[1], field)
else
  local lasts, manual, shown = tonumber(ARGV[3]), ARGV[4], ARGV[5]
  local ends = now + lasts
  if lasts == 0 then
    if not in_force or old_shown ~= '' or shown == '' then return 0 end
    ends, manual = old_ends, old_manual
  elseif manual == '0' and in_force then
    if old_ends > ends then ends = old_ends end
    manual = old_manual
  end
  if shown == '' and in_force then shown = old_shown end
  redis.call('HSET', KEYS[1], field, string.format('%d %s %s', ends, manual, shown))
end
local all = redis.call('HGETALL', KEYS[1])
local latest = 0
for i = 1, #all, 2 do
  local ends = parse(all[i + 1])
  if ends <= now then
    redis.call('HDEL', KEYS[1], all[i])
  elseif ends > latest then
    latest = ends
  end
end
local version = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
if version < now then version = now end
if latest > 0 then
  local at = math.floor(latest / 1000) + 1
  redis.call('PEXPIREAT', KEYS[1], at)
  redis.call('SET', KEYS[2], string.format('%d', version), 'PXAT', at)
else
  redis.call('DEL', KEYS[2])
end
if ARGV[1] == 'lift' then return in_force and 1 or 0 end
return 1
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_read_back_with_the_time_it_has_left() {
        let tag = script::tag("per-caller", 0xab);
        let read = read_entry(&tag, "5000000 1 sk_l…#00ff", 2_000_000).expect("in force");
        assert_eq!(read.rule, "per-caller");
        assert_eq!(read.key, 0xab);
        assert_eq!(read.left, 3_000_000_000);
        assert!(read.manual);
        assert_eq!(read.shown.as_deref(), Some("sk_l…#00ff"));
        let unnamed = read_entry(&tag, "5000000 0 ", 2_000_000).expect("in force");
        assert_eq!((unnamed.manual, unnamed.shown), (false, None));
        assert_eq!(read_entry(&tag, "5000000 0 ", 5_000_000), None, "ended");
        assert_eq!(read_entry("no-tag", "5000000 0 ", 0), None);
    }
}
