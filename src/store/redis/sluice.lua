-- sluice's Redis store: one script for every call of the store seam
-- (ARCHITECTURE.md, "How the store runs in Redis"). Redis runs a script
-- atomically, so one call checks every limit of a request and charges all
-- of them or none, with nothing interleaved.
--
-- Time is integer microseconds since the Unix epoch: Redis' Lua numbers are
-- doubles, exact up to 2^53 (about 285 years of microseconds), and every
-- product below is kept under that bound (`cap`). Divisions go through
-- `idiv`, which corrects the float quotient, so results are exact integers.
--
-- ARGV[1]  the operation: OP_ADMIT | OP_PEEK | OP_SPEND | OP_SETTLE |
--          OP_CLAIM | OP_BATCH | OP_STRIKE | OP_SYNC
-- ARGV[2]  now in microseconds, or "0" for the server's TIME (production:
--          instances with skewed clocks agree, windows included). With an
--          injected time (tests) no expiry is set.
-- The rest is one group of fields per limit, KEYS[i] holding limit i's
-- state:
--
--   admit | peek | spend:
--     ARGV[3]   the number of enforced limits E (the first E keys): all or
--               nothing. Then the shadow rules, each all or nothing: ARGV[4]
--               the number of shadow rules S, then S counts of limits.
--     then the enforced rules (each may hold a ban, set by hand if not
--     earned): their number B, then per rule 5 fields: its first and last
--     limit (1-based), after (0: the rule has no `ban`, its refusals
--     strike nothing), within and for (microseconds); its ban key is
--     KEYS[L + b] (L limits, b from 1), a hash of the ban's end `until`
--     and the strikes `n` counted since `since`, in the slot of the
--     rule's buckets
--     then per limit, 6 fields: algorithm, a, b, cost, max_wait
--     (microseconds) and max_queued: delay mode's bounds, both 0 when the
--     limit refuses instead of holding
--   settle: several settlements of one instance, applied in order, each
--     at most once: ARGV[3] how long (milliseconds) Redis remembers the
--     instance's marker, ARGV[4] the number of settlements S, then per
--     settlement its sequence number, its number of receipts R and per
--     receipt 6 fields: algorithm, a, b, how (SETTLE_GIVE_BACK,
--     SETTLE_CHARGE, SETTLE_RETURN_LEASE, SETTLE_CANCEL_RESERVATION: while
--     its instant is ahead, else a give back at that instant, as memory
--     settles it, SETTLE_LEAVE_QUEUE: the ticket and any lease claimed
--     with it; anything else keeps), units (for a lease or a ticket: its
--     name), taken_at (microseconds; for a reservation: the instant it
--     passes). KEYS: each receipt's key, in order, then the marker: the
--     highest sequence number of the instance's settlements applied (in
--     these keys' slot). A settlement numbered at or below it was applied
--     by an earlier call whose answer was lost, and is skipped
--   claim: one queued permit, KEYS[1] its limit's key, then the 4 fields
--     algorithm (ALG_CONCURRENCY), max_in_flight, lease TTL, the ticket's
--     name
--   batch: several admissions, decided one after the other as if each
--     were a call of its own: ARGV[3] their number R, then per request
--     its number of keys K, its number of fields F and its F fields
--     (admit's, from ARGV[3] on); its keys follow the previous request's
--     in KEYS
--   strike: hybrid mode's strikes, per ban key KEYS[i] 4 fields: after,
--     within, for (microseconds) and how many strikes
--   sync: hybrid mode's deltas: ARGV[3] the call's sequence number, ARGV[4]
--     how long (milliseconds) Redis remembers the instance's marker,
--     ARGV[5] the number of groups G, then per group its limit's
--     algorithm, a and b, its number of buckets K, and per bucket 3
--     numbers: the units its instance took since its last sync, the units
--     it gave back of those earlier syncs sent, and when those were taken
--     (microseconds); each bucket's key is the next of KEYS, and the last
--     key is the marker (as settle's): a call numbered at or below it was
--     applied already, and only reads the buckets
--
-- Algorithms (a, b):
--   ALG_TOKEN_BUCKET (GCRA): emission interval T, tolerance tau
--     (microseconds)
--   ALG_FIXED_WINDOW: period (microseconds), COUNT; or, for a calendar
--     window (`calendar`, docs/charging.md "Calendar quotas"), instead of
--     the period the text "i:previous:start:end:next_end:longest:shortest":
--     the index of the window the sending instance's clock is in, where
--     the one before it starts, where it and the next one start and end,
--     and bounds on the calendar unit's length (microseconds). The script
--     places `now` (Redis' clock) among them: before start, the window
--     before (which ends at start); at or after end, the next one; so a
--     skewed instance never moves a boundary. Windows beyond these are
--     estimated with the bounds, always towards counting more and
--     resetting later
--   ALG_SLIDING_WINDOW: period (microseconds), COUNT
--   ALG_CONCURRENCY (permits): max_in_flight, lease TTL (microseconds); the
--     cost slot names the lease this request takes
--   ALG_LEAKY_BUCKET: emission interval T (microseconds), queue
--   ALG_SLIDING_LOG: period (microseconds), COUNT
--
-- Delay mode: a limit whose max_queued is above 0 reserves (`reserve`)
-- instead of acquiring; the token bucket, the fixed window, the leaky
-- bucket, the sliding log and concurrency permits have a delay mode, the
-- sliding window decides as in reject mode. When several limits of a request hold it, it passes at the
-- latest of their instants, and the limits that would let it pass earlier
-- count it there where they can (`reschedule`: token and leaky buckets),
-- as memory's `acquire_all` does.
--
-- Answers: one string of integers, each followed by a space (`reply`: a
-- client decodes one string far faster than an array of integers, and
-- `%d` keeps all 16 digits of a time, where `tostring` would round it):
-- { now, OUTCOME_ADMITTED or OUTCOME_LIMITED, then per limit 5 integers:
-- DECISION_DENY, DECISION_ALLOW or DECISION_HOLD (reserved for `wait`
-- from now), remaining, reset_after, retry_after (RETRY_NEVER: never),
-- wait, then per banning rule how
-- long the ban its strike just started lasts (0: none) } for admit, peek
-- and spend (spend: what a request of cost 1 would be told after the
-- spend; a permit held in its queue is "held" with wait 0); { now,
-- OUTCOME_BANNED, b, left } when banning rule b bans the caller for `left`
-- more (no bucket was asked); { now, then the sequence numbers of the
-- settlements Redis refused (a key of the wrong type: left at that) } for
-- settle; { now, claimed } for
-- claim: CLAIM_CLAIMED the permit is the ticket's now, CLAIM_NOT_YET,
-- CLAIM_NEVER (the ticket lapsed); for batch,
-- each request's admit answer after the count of its integers; for
-- strike { now, then per ban key: how long its ban lasts from now (0:
-- none), 1 if these strikes started it else 0 }; for sync { now, then per
-- bucket: remaining and reset_after, as a request of cost 1 would be told
-- once its units are added }.

-- protocol: the codes the Rust side sends and reads, named as in
-- src/store/redis/protocol.rs (whose test checks that this block defines
-- exactly its constants, with the same values).
local OP_ADMIT = 'admit'
local OP_PEEK = 'peek'
local OP_SPEND = 'spend'
local OP_SETTLE = 'settle'
local OP_CLAIM = 'claim'
local OP_BATCH = 'batch'
local OP_STRIKE = 'strike'
local OP_SYNC = 'sync'
local ALG_TOKEN_BUCKET = 1
local ALG_FIXED_WINDOW = 2
local ALG_SLIDING_WINDOW = 3
local ALG_CONCURRENCY = 4
local ALG_LEAKY_BUCKET = 5
local ALG_SLIDING_LOG = 6
local SETTLE_GIVE_BACK = 1
local SETTLE_CHARGE = 2
local SETTLE_RETURN_LEASE = 3
local SETTLE_CANCEL_RESERVATION = 4
local SETTLE_LEAVE_QUEUE = 5
local OUTCOME_LIMITED = 0
local OUTCOME_ADMITTED = 1
local OUTCOME_BANNED = 3
local DECISION_DENY = 0
local DECISION_ALLOW = 1
local DECISION_HOLD = 2
local RETRY_NEVER = -1
local CLAIM_NEVER = 0
local CLAIM_CLAIMED = 1
local CLAIM_NOT_YET = 2
-- end of protocol

local MAX = 4503599627370496 -- 2^52: every quantity saturates here

local function cap(x)
  if x > MAX then return MAX end
  return x
end

-- floor(a / b) for non-negative integers a, b > 0, exact.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function ceil_div(a, b)
  local q = idiv(a, b)
  if q * b < a then q = q + 1 end
  return q
end

-- a - b, or 0 when b >= a.
local function sat_sub(a, b)
  if b >= a then return 0 end
  return a - b
end

-- A copy of a decoded state, its arrays (a log's runs) included.
local function copy(state)
  local c = {}
  for k, v in pairs(state) do
    if type(v) == 'table' then
      local array = {}
      for i = 1, #v do array[i] = v[i] end
      v = array
    end
    c[k] = v
  end
  return c
end

-- The answer `t` (a list of integers) as the one string the client reads.
local function reply(t)
  return string.format(string.rep('%d ', #t), unpack(t))
end

local op = ARGV[1]
local now = tonumber(ARGV[2])
local expire = false
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  expire = true
end

-- Token bucket (GCRA), the twin of src/limiter/gcra.rs. State: the TAT
-- `t`, the refund mark's distance `d` below it, and the headroom `h` (what
-- refunds may still give back of units taken at or after the mark; -1:
-- unbounded). Kept in microseconds exactly (memory keeps the headroom in
-- coarser grains); both round towards giving back less.
local function token_bucket()
  local gcra = {}

  function gcra.decode(raw)
    if not raw then return { t = 0, d = 0, h = -1 } end
    local t, d, h = string.match(raw, '^(%d+):(%d+):(-?%d+)$')
    return { t = tonumber(t), d = tonumber(d), h = tonumber(h) }
  end

  function gcra.encode(s)
    return string.format('%d:%d:%d', s.t, s.d, s.h)
  end

  -- The state is fresh (a full bucket) from this instant on.
  function gcra.fresh_at(s)
    return s.t
  end

  local function gcra_step(s, T, tau, cost)
    if T == 0 then return false, 0, 0, RETRY_NEVER, nil end
    local base = math.max(s.t, now)
    local new_tat = cap(base + cap(T * cost))
    local needed = new_tat - now
    if needed <= tau then
      return true, idiv(tau - needed, T), needed, 0, new_tat
    end
    local debt = base - now
    local retry = RETRY_NEVER
    if cap(T * cost) <= tau then retry = needed - tau end
    return false, idiv(math.max(tau - debt, 0), T), debt, retry, nil
  end

  local function gcra_take(s, new_tat, admission)
    if s.t <= now then
      -- Full: nothing taken before now can matter any more.
      s.d = new_tat - now
      s.h = -1
      s.t = new_tat
      return
    end
    local debt = s.t - now
    local spent = new_tat - s.t
    if debt < s.d then
      -- A take after the mark: the headroom is the least debt such takes found.
      if s.h < 0 or debt < s.h then s.h = debt end
      if admission and s.h < spent then
        s.t, s.d, s.h = new_tat, new_tat - now, -1
        return
      end
    end
    s.t = new_tat
    s.d = cap(s.d + spent)
  end

  local function gcra_give_back(s, back, keep_headroom)
    if back == 0 then return end
    local t = math.max(s.t - back, 0)
    if back > s.d then
      s.t, s.d, s.h = t, 0, 0
      return
    end
    if not keep_headroom and s.h >= 0 then s.h = math.max(s.h - back, 0) end
    s.t = t
    s.d = s.d - back
  end

  function gcra.acquire(s, a, b, cost)
    local ok, remaining, reset, retry, new_tat = gcra_step(s, a, b, cost)
    if ok then gcra_take(s, new_tat, true) end
    return ok, remaining, reset, retry
  end

  function gcra.peek(s, a, b, cost)
    local ok, remaining, reset, retry = gcra_step(s, a, b, cost)
    if ok then
      local debt = math.max(s.t - now, 0)
      return true, idiv(math.max(b - debt, 0), a), debt, 0
    end
    return ok, remaining, reset, retry
  end

  function gcra.charge(s, a, b, units)
    if a == 0 or units == 0 then return end
    gcra_take(s, cap(math.max(s.t, now) + cap(a * units)), false)
  end

  function gcra.refund(s, a, b, units, taken_at)
    if a == 0 or units == 0 then return end
    local spent = cap(a * units)
    local mark = s.t - s.d
    if taken_at >= now then
      gcra_give_back(s, spent, taken_at > mark)
      return
    end
    if s.t <= now or taken_at < mark then return end
    local back = spent
    if s.h >= 0 and s.h < back then back = s.h end
    gcra_give_back(s, back, false)
  end

  -- Delay mode, GCRA's virtual scheduling: a request that does not conform
  -- now passes at TAT + c*T - tau, and taking it moves the TAT to that instant
  -- plus tau. Held when that wait is within max_wait and the units waiting
  -- (the debt beyond tau, in whole units) plus its cost within max_queued.
  function gcra.reserve(s, a, b, cost, max_wait, max_queued)
    local ok, remaining, reset, retry, new_tat = gcra_step(s, a, b, cost)
    if ok then
      gcra_take(s, new_tat, true)
      return true, remaining, reset, 0, 0
    end
    if retry < 0 or retry > max_wait then return false, remaining, reset, retry, 0 end
    local queued = ceil_div(sat_sub(s.t, cap(now + b)), a)
    if cap(queued + cost) > max_queued then return false, remaining, reset, retry, 0 end
    new_tat = cap(math.max(s.t, now) + cap(a * cost))
    gcra_take(s, new_tat, true)
    return true, 0, new_tat - now, 0, retry
  end

  -- A reservation passing at `at` is the last one while TAT <= at + tau (or
  -- one admitted at once, followed only by admissions at the same instant):
  -- its units come back exactly. Otherwise, or once `at` has passed, nothing.
  function gcra.cancel(s, a, b, cost, at)
    if a == 0 or now > at or s.t > cap(at + b) then return end
    gcra_give_back(s, cap(a * cost), false)
  end

  -- The last reservation (as for `cancel`) passes at `to` instead: the TAT
  -- of a request that passed then. A reservation made after the refund mark
  -- leaves no headroom.
  function gcra.reschedule(s, a, b, cost, at, to)
    if a == 0 or now > at or to < at or s.t > cap(at + b) then return false end
    local spent = cap(a * cost)
    local new_tat = cap(math.max(sat_sub(s.t, spent), to) + spent)
    if now > sat_sub(s.t, s.d) then s.h = 0 end
    s.d = cap(s.d + (new_tat - s.t))
    s.t = new_tat
    return true
  end
  return gcra
end

-- Window counters, the twins of src/limiter/window.rs (fixed window and
-- sliding window, reject mode: no reservations). Windows are aligned to
-- Unix-time multiples of the period P. State: the index of the window
-- `current` counts (`now / P`), its count `c` (beyond COUNT: a debt carried
-- into the windows after it) and the count of the window before it `p`
-- (the sliding window's; 0 for the fixed window), "window:current:previous".
-- Counts are kept below 2^32 (COUNT is at most 2^32 - 1, config checks it)
-- and periods are capped at MAX microseconds (142 years): a count times a
-- duration can exceed 2^53, so every such product goes through `muldiv`,
-- which is exact; indexes times periods are capped (`cap`).

local U32 = 4294967295 -- the largest count kept (memory's u32)

local function count_u32(x)
  if x > U32 then return U32 end
  return x
end

-- x * y = q * z + r with 0 <= r < z, exactly, for integers x, y >= 0 and
-- 0 < z <= MAX whose quotient q is below 2^53: y is first reduced modulo
-- z, then x * (y mod z) is multiplied bit by bit modulo z (the remainder
-- stays below z, so doubling it or adding y mod z stays within 2^53).
local function muldiv(x, y, z)
  local yq = idiv(y, z)
  local yr = y - yq * z
  local q, r = x * yq, 0
  local rest, bit = x, 1
  while bit * 2 <= rest do bit = bit * 2 end
  local part = 0
  while bit >= 1 do
    part, r = part * 2, r * 2
    if r >= z then part, r = part + 1, r - z end
    if rest >= bit then
      rest = rest - bit
      r = r + yr
      if r >= z then part, r = part + 1, r - z end
    end
    bit = bit / 2
  end
  return q + part, r
end

local function window_decode(raw)
  if not raw then return { w = 0, c = 0, p = 0 } end
  local w, c, p = string.match(raw, '^(%d+):(%d+):(%d+)$')
  return { w = tonumber(w), c = tonumber(c), p = tonumber(p) }
end

local function window_encode(s)
  return string.format('%d:%d:%d', s.w, s.c, s.p)
end

-- Microseconds from now to the start of window `index`.
local function until_window(index, P)
  return sat_sub(cap(index * P), now)
end

-- A fixed window's windows, from its parameter `a` (see the header): the
-- index of the window an instant falls in, and where window k starts.
-- Parsed once per call and parameter.
local windows_of = {}
setmetatable(windows_of, { __index = function(built, a)
  local windows
  if type(a) == 'number' then
    local P = cap(a)
    windows = {
      index = function(t) return idiv(t, P) end,
      start = function(k) return cap(k * P) end,
    }
  else
    local f = {}
    for x in string.gmatch(a, '%d+') do f[#f + 1] = tonumber(x) end
    local i, prev, s, e, n, longest, shortest = f[1], f[2], f[3], f[4], f[5], f[6], f[7]
    windows = {
      index = function(t)
        if t < prev then return sat_sub(sat_sub(i, 1), ceil_div(prev - t, shortest)) end
        if t < s then return sat_sub(i, 1) end
        if t < e then return i end
        if t < n then return i + 1 end
        return i + 2 + idiv(t - n, longest)
      end,
      start = function(k)
        if k == i then return s end
        if k == i + 1 then return e end
        if k == i + 2 then return n end
        if k == i - 1 then return prev end
        if k < i then return sat_sub(prev, cap((i - 1 - k) * shortest)) end
        return cap(n + cap((k - i - 2) * longest))
      end,
    }
  end
  built[a] = windows
  return windows
end })

-- Fixed window (a = P or a calendar, b = COUNT): at most COUNT units per
-- window; unit k of window w's count is in window w + k / COUNT. `P` below
-- is the windows of `a` (`windows_of`).
local function fixed_window()
  local fixed = { decode = window_decode, encode = window_encode }

  local function until_window(index, P)
    return sat_sub(P.start(index), now)
  end

  -- The state aligned to now: the window now falls in (never before the
  -- state's own), and the units counted from its start.
  local function fixed_shift(s, P, C)
    local w = math.max(P.index(now), s.w)
    return w, sat_sub(s.c, cap((w - s.w) * C))
  end

  -- Microseconds from now to the end of the last window holding units.
  local function fixed_until_empty(w, used, P, C)
    if used == 0 then return 0 end
    return until_window(w + idiv(used - 1, C) + 1, P)
  end

  local function fixed_decide(w, used, P, C, cost)
    if C == 0 then return false, 0, 0, RETRY_NEVER end
    if used + cost <= C then
      return true, C - used - cost, until_window(w + 1, P), 0
    end
    local retry = RETRY_NEVER
    if cost <= C then
      -- The first window with room: the rest of the one the count ends in
      -- is skipped when the cost does not fit in it.
      local offset = used - idiv(used, C) * C
      local pad = 0
      if offset + cost > C then pad = C - offset end
      retry = until_window(w + idiv(used + pad, C), P)
    end
    return false, sat_sub(C, used), fixed_until_empty(w, used, P, C), retry
  end

  -- Fresh once every counted unit's window has passed.
  function fixed.fresh_at(s, a, C)
    if s.c == 0 then return 0 end
    if C == 0 then return MAX end
    return windows_of[a].start(cap(s.w + ceil_div(s.c, C)))
  end

  function fixed.acquire(s, a, C, cost)
    local P = windows_of[a]
    local w, used = fixed_shift(s, P, C)
    local ok, remaining, reset, retry = fixed_decide(w, used, P, C, cost)
    if ok then s.w, s.c, s.p = w, count_u32(used + cost), 0 end
    return ok, remaining, reset, retry
  end

  function fixed.peek(s, a, C, cost)
    local P = windows_of[a]
    local w, used = fixed_shift(s, P, C)
    local ok, remaining, reset, retry = fixed_decide(w, used, P, C, cost)
    if ok then return true, C - used, fixed_until_empty(w, used, P, C), 0 end
    return ok, remaining, reset, retry
  end

  function fixed.charge(s, a, C, units)
    if C == 0 or units == 0 then return end
    local P = windows_of[a]
    local w, used = fixed_shift(s, P, C)
    s.w, s.c, s.p = w, count_u32(used + units), 0
  end

  -- Units taken n windows before the current one still count for all but
  -- n * COUNT of them: that part comes off the top of the count.
  function fixed.refund(s, a, C, units, taken_at)
    local P = windows_of[a]
    local w, used = fixed_shift(s, P, C)
    local passed = sat_sub(w, P.index(math.min(taken_at, now)))
    local back = math.min(sat_sub(units, cap(passed * C)), used)
    if back == 0 then return end
    s.w, s.c, s.p = w, used - back, 0
  end

  -- Delay mode: a request that does not fit in the current window goes whole
  -- into the first window with room after it, the rest of the window before
  -- that being padded, and waits until that window starts. `p` keeps the
  -- padding below the newest reservation, so that cancelling it is exact.
  -- `queued` counts the units of the requests held in later windows, padding
  -- excluded (per window, floor(COUNT / cost) requests of `cost`).
  local function fixed_queued(used, C, cost)
    cost = math.max(cost, 1)
    local later = sat_sub(used, C)
    local whole = idiv(later, C)
    local rest = later - whole * C
    return cap((whole * idiv(C, cost) + ceil_div(rest, cost)) * cost)
  end

  function fixed.reserve(s, a, C, cost, max_wait, max_queued)
    local P = windows_of[a]
    local w, used = fixed_shift(s, P, C)
    local ok, remaining, reset, retry = fixed_decide(w, used, P, C, cost)
    if ok then
      s.w, s.c, s.p = w, count_u32(used + cost), 0
      return true, remaining, reset, 0, 0
    end
    if C == 0 or cost > C then return false, remaining, reset, retry, 0 end
    -- `retry` is the wait: the start of the first window with room.
    local offset = used - idiv(used, C) * C
    local pad = 0
    if offset + cost > C then pad = C - offset end
    local current = used + pad + cost
    if retry > max_wait or cap(fixed_queued(used, C, cost) + cost) > max_queued
        or current > U32 then
      return false, remaining, reset, retry, 0
    end
    s.w, s.c, s.p = w, current, pad
    return true, 0, fixed_until_empty(w, current, P, C), 0, retry
  end

  -- The units come off the top of the count while the top lies in the
  -- reservation's window and that window has not passed (nothing reserved
  -- later; the padding below it too when it opened its window). Otherwise,
  -- or once `at` has passed, nothing.
  function fixed.cancel(s, a, C, cost, at)
    if C == 0 or now > at then return end
    local P = windows_of[a]
    local w, used = fixed_shift(s, P, C)
    local index = P.index(at)
    if index < w then return end
    local floor = cap((index - w) * C)
    local top = cap(floor + C)
    if used > top or used < cap(floor + cost) then return end
    local current = used - cost
    if current == floor then current = sat_sub(current, s.p) end
    s.w, s.c, s.p = w, current, 0
  end
  return fixed
end

-- Sliding window (a = P, b = COUNT): the estimate at now is
-- p * (P - elapsed) / P + c, and a request passes while the estimate plus
-- its cost stays within COUNT. Since c, cost and COUNT are whole units, the
-- estimate is compared, and remaining computed, with the weight of the
-- previous window rounded up, ceil(p * (P - elapsed) / P), exactly as
-- memory's u128 comparisons of the estimate times P decide.
local function sliding_window()
  local sliding = { decode = window_decode, encode = window_encode }

  -- The state moved to the window now falls in (never before its own),
  -- carrying a debt: each window passed takes COUNT off the count, and the
  -- last window passed leaves at most COUNT as the previous one.
  local function sliding_align(s, P, C)
    local w = math.max(idiv(now, P), s.w)
    local passed = w - s.w
    if passed == 0 then return { w = s.w, c = s.c, p = s.p } end
    local total = s.c
    if total <= C then
      if passed == 1 then return { w = w, c = 0, p = total } end
      return { w = w, c = 0, p = 0 }
    end
    return {
      w = w,
      c = sat_sub(total, cap(passed * C)),
      p = math.min(sat_sub(total, cap((passed - 1) * C)), C),
    }
  end

  -- ceil(p * (P - elapsed) / P) for an aligned state.
  local function sliding_weight(t, P)
    if t.p == 0 then return 0 end
    local elapsed = math.min(sat_sub(now, cap(t.w * P)), P)
    local q, r = muldiv(t.p, P - elapsed, P)
    if r > 0 then q = q + 1 end
    return q
  end

  -- Whole units available now.
  local function sliding_remaining(t, P, C)
    if t.c >= C then return 0 end
    return sat_sub(C - t.c, sliding_weight(t, P))
  end

  -- Microseconds until the estimate is back to zero.
  local function sliding_reset(t, P, C)
    if t.c > C then
      return until_window(t.w + ceil_div(t.c, math.max(C, 1)) + 1, P)
    elseif t.c > 0 then
      return until_window(t.w + 2, P)
    elseif t.p > 0 then
      return until_window(t.w + 1, P)
    end
    return 0
  end

  -- The first instant in window `index` (following one that counted `prev`,
  -- and counting `cur`) at which `cost` more units fit:
  -- prev * (P - e) <= room * P, so e >= P - floor(room * P / prev). nil when
  -- they do not fit before the window ends.
  local function sliding_fits_in(index, prev, cur, cost, P, C)
    if cur + cost > C then return nil end
    local room = C - cur - cost
    local start = cap(index * P)
    if prev == 0 or room >= prev then return start end
    local q = muldiv(room, P, prev) -- below P, as room < prev
    if q == 0 then return nil end
    return cap(start + P - q)
  end

  -- Microseconds until cost units fit if nothing else arrives (-1: never):
  -- later in this window, or in the first window whose carried count leaves
  -- room, or at the latest the one after it.
  local function sliding_retry(t, P, C, cost)
    if cost > C then return RETRY_NEVER end
    local at = sliding_fits_in(t.w, t.p, t.c, cost, P, C)
    if at then return sat_sub(at, now) end
    local total = t.c
    local first = math.max(ceil_div(sat_sub(total + cost, C), C), 1)
    local last = first + 1
    for j = first, last do
      local before = math.min(sat_sub(total, cap((j - 1) * C)), C)
      at = sliding_fits_in(t.w + j, before, sat_sub(total, cap(j * C)), cost, P, C)
      if at then return sat_sub(at, now) end
    end
    return until_window(t.w + last, P)
  end

  local function sliding_decide(t, P, C, cost)
    if C == 0 then return false, 0, 0, RETRY_NEVER end
    local weight = sliding_weight(t, P)
    if t.c + cost <= C and weight <= C - t.c - cost then
      local taken = { w = t.w, c = count_u32(t.c + cost), p = t.p }
      return true, C - t.c - cost - weight, sliding_reset(taken, P, C), 0
    end
    return false, sliding_remaining(t, P, C), sliding_reset(t, P, C),
      sliding_retry(t, P, C, cost)
  end

  -- Fresh once the count has been carried through and faded out.
  function sliding.fresh_at(s, a, C)
    if s.c == 0 and s.p == 0 then return 0 end
    local P = cap(a)
    if s.c == 0 then return cap((s.w + 1) * P) end
    if s.c <= C then return cap((s.w + 2) * P) end
    if C == 0 then return MAX end
    return cap(cap(s.w + ceil_div(s.c, C) + 1) * P)
  end

  function sliding.acquire(s, a, C, cost)
    local P = cap(a)
    local t = sliding_align(s, P, C)
    local ok, remaining, reset, retry = sliding_decide(t, P, C, cost)
    if ok then s.w, s.c, s.p = t.w, count_u32(t.c + cost), t.p end
    return ok, remaining, reset, retry
  end

  function sliding.peek(s, a, C, cost)
    local P = cap(a)
    local t = sliding_align(s, P, C)
    local ok, remaining, reset, retry = sliding_decide(t, P, C, cost)
    if ok then return true, sliding_remaining(t, P, C), sliding_reset(t, P, C), 0 end
    return ok, remaining, reset, retry
  end

  function sliding.charge(s, a, C, units)
    if C == 0 or units == 0 then return end
    local P = cap(a)
    local t = sliding_align(s, P, C)
    s.w, s.c, s.p = t.w, count_u32(t.c + units), t.p
  end

  -- Units taken in the current window come off its count. Units taken n >= 1
  -- windows before it are taken to be the first of their window's count: the
  -- part at positions (n - 1) * COUNT .. n * COUNT is in the previous
  -- window's count, the part beyond is carried in the current one.
  function sliding.refund(s, a, C, units, taken_at)
    local P = cap(a)
    local t = sliding_align(s, P, C)
    local passed = sat_sub(t.w, idiv(math.min(taken_at, now), P))
    local from_prev, from_cur = 0, units
    if passed > 0 then
      from_prev = math.min(sat_sub(units, cap((passed - 1) * C)), C)
      from_cur = sat_sub(units, cap(passed * C))
    end
    s.w, s.c, s.p = t.w, sat_sub(t.c, from_cur), sat_sub(t.p, from_prev)
  end
  return sliding
end

-- Concurrency permits (a = max_in_flight, b = the lease TTL): leases in a
-- sorted set, each scored with the instant it lapses (its instance renews
-- it while the request runs, and removes it when the request ends). Lapsed
-- leases are dropped before counting, so a dead instance's permits come
-- back. The state is the count of leases in force, and whether this call
-- takes one; the lease itself (ARGV's cost slot: its name) is written by
-- `store`.
--
-- Delay mode queues for a permit in a second sorted set beside the leases
-- (`queue_of`, the same hash tag): tickets named like the lease they
-- become, each scored with the instant its waiter gives up (`max_wait`
-- after it came: the order of arrival, as every waiter of a rule waits as
-- long). A request finding every permit taken, or anyone waiting, takes a
-- ticket; its waiter then claims (`claim`) until its rank among the
-- tickets is below the permits free. Tickets past their instant are
-- dropped before counting, so a dead instance's waiters leave too.
local queued_in_call = false

local function queue_of(key)
  return key .. ':queue'
end

local function permits()
  local permit = { lease = true }

  function permit.acquire(s, a, b, cost)
    if s.count < a then
      s.count = s.count + 1
      s.take = true
      return true, a - s.count, 0, 0
    end
    return false, 0, 0, 1000000
  end

  -- Delay mode: a permit now if one is free and nobody waits, else a
  -- ticket while fewer than `max_queued` wait. A request queues for one
  -- permit at most (it would hold one while waiting for the other).
  function permit.reserve(s, a, b, cost, max_wait, max_queued)
    local queue = queue_of(s.key)
    redis.call('ZREMRANGEBYSCORE', queue, '-inf', now)
    local waiting = redis.call('ZCARD', queue)
    if waiting == 0 then
      local ok, remaining, reset, retry = permit.acquire(s, a, b, cost)
      if ok or a == 0 then return ok, remaining, reset, retry, 0 end
    end
    if queued_in_call or waiting >= max_queued then
      return false, 0, 0, 1000000
    end
    queued_in_call = true
    s.ticket_until = now + max_wait
    return true, 0, 0, 0, 0
  end

  function permit.peek(s, a, b, cost)
    if s.count < a then return true, a - s.count, 0, 0 end
    return false, 0, 0, 1000000
  end

  -- Permits are requests in flight, not units: nothing to charge or refund.
  function permit.charge() end
  function permit.refund() end
  return permit
end

-- Leaky bucket, the twin of src/limiter/leaky.rs (a = T, b = the queue):
-- requests leave one after another, a request of cost c occupying the
-- outlet for c*T (at least 1 microsecond). State: the instant `e` the
-- bucket is empty again. Outside delay mode it admits only when idle; in
-- delay mode a request waits until the bucket is empty, while fewer than
-- `queue` requests of its cost wait (max_queued is not its bound).
local function leaky_bucket()
  local leaky = {}

  function leaky.decode(raw)
    if not raw then return { e = 0 } end
    return { e = tonumber(string.match(raw, '^(%d+)$')) }
  end

  function leaky.encode(s)
    return string.format('%d', s.e)
  end

  function leaky.fresh_at(s)
    return s.e
  end

  local function leaky_occupies(T, cost)
    return math.max(cap(T * cost), 1)
  end

  -- remaining and reset_after, `drain` before the bucket is empty.
  local function leaky_state(T, queue, drain, cost)
    local waiting = sat_sub(ceil_div(drain, leaky_occupies(T, cost)), 1)
    return sat_sub(queue, waiting), drain
  end

  local function leaky_deny(T, queue, drain, cost)
    local remaining, reset = leaky_state(T, queue, drain, cost)
    return false, remaining, reset, drain
  end

  function leaky.acquire(s, T, queue, cost)
    if T == 0 then return false, 0, 0, RETRY_NEVER end
    if s.e > now then return leaky_deny(T, queue, s.e - now, cost) end
    local drain = leaky_occupies(T, cost)
    s.e = cap(now + drain)
    local remaining, reset = leaky_state(T, queue, drain, cost)
    return true, remaining, reset, 0
  end

  function leaky.peek(s, T, queue, cost)
    if T == 0 then return false, 0, 0, RETRY_NEVER end
    if s.e > now then return leaky_deny(T, queue, s.e - now, cost) end
    local remaining, reset = leaky_state(T, queue, 0, cost)
    return true, remaining, reset, 0
  end

  function leaky.charge(s, T, queue, units)
    if T == 0 or units == 0 then return end
    s.e = cap(math.max(s.e, now) + leaky_occupies(T, units))
  end

  -- Exact while the units are the last in the outlet and were taken when it
  -- was idle; otherwise nothing.
  function leaky.refund(s, T, queue, units, taken_at)
    if T == 0 or units == 0 then return end
    taken_at = math.min(taken_at, now)
    if s.e == cap(taken_at + leaky_occupies(T, units)) then s.e = taken_at end
  end

  function leaky.reserve(s, T, queue, cost, max_wait, max_queued)
    if T == 0 then return false, 0, 0, RETRY_NEVER, 0 end
    local wait = sat_sub(s.e, now)
    if wait == 0 then
      local ok, remaining, reset, retry = leaky.acquire(s, T, queue, cost)
      return ok, remaining, reset, retry, 0
    end
    local occupies = leaky_occupies(T, cost)
    if wait > max_wait or wait > cap(queue * occupies) then
      local ok, remaining, reset, retry = leaky_deny(T, queue, wait, cost)
      return ok, remaining, reset, retry, 0
    end
    s.e = cap(s.e + occupies)
    local remaining, reset = leaky_state(T, queue, cap(wait + occupies), cost)
    return true, remaining, reset, 0, wait
  end

  -- The last reservation (the bucket empties right after it) is given back
  -- exactly; otherwise, or once `at` has passed, nothing.
  function leaky.cancel(s, T, queue, cost, at)
    if T == 0 or now > at then return end
    if s.e == cap(at + leaky_occupies(T, cost)) then s.e = at end
  end

  function leaky.reschedule(s, T, queue, cost, at, to)
    if T == 0 or now > at or to < at or s.e ~= cap(at + leaky_occupies(T, cost)) then
      return false
    end
    s.e = cap(to + leaky_occupies(T, cost))
    return true
  end
  return leaky
end

-- Sliding log, the twin of src/limiter/log.rs (a = P, b = COUNT): the
-- stamps of admitted units, sorted; a stamp counts while now < stamp + P.
-- State: runs of equal stamps, `t[i]` (the stamp) and `n[i]` (how many),
-- oldest first; the value is "stamp:n,delta:n,..." (each stamp after the
-- first as its distance from the previous one, ":n" left out when 1). A log
-- holds at most COUNT stamps, plus the units of held requests (delay mode:
-- stamps in the future).
local function sliding_log()
  local log = {}

  function log.decode(raw)
    local s = { t = {}, n = {} }
    if not raw then return s end
    local at = 0
    for d, n in string.gmatch(raw, '(%d+):?(%d*)') do
      at = at + tonumber(d)
      s.t[#s.t + 1] = at
      s.n[#s.n + 1] = (n == '' and 1) or tonumber(n)
    end
    return s
  end

  function log.encode(s)
    local parts, before = {}, 0
    for i = 1, #s.t do
      local d = s.t[i] - before
      before = s.t[i]
      if s.n[i] == 1 then
        parts[i] = string.format('%d', d)
      else
        parts[i] = string.format('%d:%d', d, s.n[i])
      end
    end
    return table.concat(parts, ',')
  end

  -- Fresh once the newest stamp has expired.
  function log.fresh_at(s, P)
    local m = #s.t
    if m == 0 then return 0 end
    return cap(s.t[m] + cap(P))
  end

  local function log_total(s)
    local total = 0
    for i = 1, #s.n do total = total + s.n[i] end
    return total
  end

  -- Drops the stamps expired at `at`.
  local function log_drop(s, P, at)
    local first = 1
    while first <= #s.t and cap(s.t[first] + P) <= at do first = first + 1 end
    if first == 1 then return end
    local t, n = {}, {}
    for i = first, #s.t do
      t[#t + 1] = s.t[i]
      n[#n + 1] = s.n[i]
    end
    s.t, s.n = t, n
  end

  -- The k-th stamp (k >= 1) from the first one still counted at `at`.
  local function log_kth(s, P, at, k)
    for i = 1, #s.t do
      if cap(s.t[i] + P) > at then
        if k <= s.n[i] then return s.t[i] end
        k = k - s.n[i]
      end
    end
    return nil
  end

  -- Stamps counted at `at`.
  local function log_counted(s, P, at)
    local counted = 0
    for i = 1, #s.t do
      if cap(s.t[i] + P) > at then counted = counted + s.n[i] end
    end
    return counted
  end

  -- Appends `units` stamps at `at` (never before the newest).
  local function log_push(s, at, units)
    if units == 0 then return end
    local m = #s.t
    if m > 0 and s.t[m] == at then
      s.n[m] = s.n[m] + units
    else
      s.t[m + 1] = at
      s.n[m + 1] = units
    end
  end

  -- The newest stamp, or now when it is older (or there is none).
  local function log_from(s)
    local m = #s.t
    if m > 0 and s.t[m] > now then return s.t[m] end
    return now
  end

  -- Removes up to `units` stamps equal to `at`.
  local function log_remove_at(s, at, units)
    for i = 1, #s.t do
      if s.t[i] == at then
        local take = math.min(s.n[i], units)
        s.n[i] = s.n[i] - take
        if s.n[i] == 0 then
          table.remove(s.t, i)
          table.remove(s.n, i)
        end
        return
      end
    end
  end

  -- Removes the newest `units` stamps.
  local function log_truncate(s, units)
    while units > 0 and #s.t > 0 do
      local m = #s.t
      local take = math.min(s.n[m], units)
      s.n[m] = s.n[m] - take
      units = units - take
      if s.n[m] == 0 then
        s.t[m] = nil
        s.n[m] = nil
      end
    end
  end

  -- The decision for `cost` units on a log without expired stamps.
  local function log_decide(s, P, C, cost)
    if C == 0 then return false, 0, 0, RETRY_NEVER end
    local counted = log_total(s)
    local reset = 0
    if counted > 0 then reset = cap(s.t[#s.t] + P) - now end
    if counted + cost <= C then
      return true, C - counted - cost, math.max(P, reset), 0
    end
    local retry = RETRY_NEVER
    if cost <= C then
      retry = cap(log_kth(s, P, now, counted + cost - C) + P) - now
    end
    return false, sat_sub(C, counted), reset, retry
  end

  function log.acquire(s, a, C, cost)
    local P = cap(a)
    log_drop(s, P, now)
    local ok, remaining, reset, retry = log_decide(s, P, C, cost)
    if ok then log_push(s, log_from(s), cost) end
    return ok, remaining, reset, retry
  end

  function log.peek(s, a, C, cost)
    local P = cap(a)
    local live = copy(s)
    log_drop(live, P, now)
    local ok, remaining, reset, retry = log_decide(live, P, C, cost)
    if ok then
      local counted = log_total(live)
      reset = 0
      if counted > 0 then reset = cap(live.t[#live.t] + P) - now end
      return true, C - counted, reset, 0
    end
    return ok, remaining, reset, retry
  end

  -- Stamps the units as `acquire` does while the log holds fewer than COUNT
  -- stamps: a debt beyond the capacity is dropped.
  function log.charge(s, a, C, units)
    local P = cap(a)
    log_drop(s, P, now)
    units = math.min(units, sat_sub(C, log_total(s)))
    if units == 0 then return end
    log_push(s, log_from(s), units)
  end

  -- A rollback (taken_at >= now) removes the newest stamps; later, the
  -- stamps equal to taken_at.
  function log.refund(s, a, C, units, taken_at)
    if taken_at >= now then
      log_truncate(s, units)
    else
      log_remove_at(s, taken_at, units)
    end
  end

  -- Delay mode: the units pass at the earliest t >= max(now, newest stamp)
  -- at which the stamps counted at t leave room for them, and are stamped
  -- at t. Held when t - now is within max_wait and the units waiting (stamps
  -- after now) plus the cost within max_queued.
  function log.reserve(s, a, C, cost, max_wait, max_queued)
    local P = cap(a)
    log_drop(s, P, now)
    if C == 0 or cost > C then
      local ok, remaining, reset, retry = log_decide(s, P, C, cost)
      return ok, remaining, reset, retry, 0
    end
    local from = log_from(s)
    local counted = log_counted(s, P, from)
    local at = from
    if counted + cost > C then
      at = cap(log_kth(s, P, from, counted + cost - C) + P)
    end
    local wait = at - now
    if wait == 0 then
      local ok, remaining, reset, retry = log_decide(s, P, C, cost)
      log_push(s, now, cost)
      return ok, remaining, reset, retry, 0
    end
    local total = log_total(s)
    local waiting = log_counted(s, 0, now) -- stamps after now
    local reset = 0
    if #s.t > 0 then reset = cap(s.t[#s.t] + P) - now end
    if wait > max_wait or cap(waiting + cost) > max_queued then
      local remaining = 0
      if waiting == 0 then remaining = sat_sub(C, total) end
      return false, remaining, reset, wait, 0
    end
    log_push(s, at, cost)
    return true, 0, cap(at + P) - now, 0, wait
  end

  -- Removes the reservation's stamps, exact wherever they are; nothing once
  -- `at` has passed.
  function log.cancel(s, a, C, cost, at)
    if now > at then return end
    log_remove_at(s, at, cost)
  end
  return log
end

-- A call builds only the algorithms its limits use, once each: building
-- all six (about eighty functions) cost Redis some 13 µs per call.
local builders = {
  [ALG_TOKEN_BUCKET] = token_bucket,
  [ALG_FIXED_WINDOW] = fixed_window,
  [ALG_SLIDING_WINDOW] = sliding_window,
  [ALG_CONCURRENCY] = permits,
  [ALG_LEAKY_BUCKET] = leaky_bucket,
  [ALG_SLIDING_LOG] = sliding_log,
}
local algorithms = setmetatable({}, { __index = function(built, number)
  local algorithm = builders[number]()
  built[number] = algorithm
  return algorithm
end })

-- One limit: its key, algorithm, parameters and decoded state.
local function load(key, base)
  local algorithm = algorithms[tonumber(ARGV[base])]
  local limit = {
    key = key,
    alg = algorithm,
    -- A number, or a calendar window's text (see the header).
    a = tonumber(ARGV[base + 1]) or ARGV[base + 1],
    b = tonumber(ARGV[base + 2]),
    n = tonumber(ARGV[base + 3]),
  }
  if algorithm.lease then
    limit.member = ARGV[base + 3]
    redis.call('ZREMRANGEBYSCORE', limit.key, '-inf', now)
    limit.state = { count = redis.call('ZCARD', limit.key), take = false, key = limit.key }
  else
    limit.state = algorithm.decode(redis.call('GET', limit.key))
  end
  return limit
end

-- Writes a limit's state, or deletes it once it is fresh again (a fresh
-- state decides exactly like no state). With server time the key expires
-- when the state turns fresh, so Redis keeps no idle bucket.
local function store(limit)
  if limit.alg.lease then
    if limit.state.take then
      local lapses = now + limit.b
      redis.call('ZADD', limit.key, lapses, limit.member)
      if expire then redis.call('PEXPIREAT', limit.key, ceil_div(lapses, 1000)) end
    end
    local ticket_until = limit.state.ticket_until
    if ticket_until then
      local queue = queue_of(limit.key)
      redis.call('ZADD', queue, ticket_until, limit.member)
      if expire then
        -- Kept until its last ticket lapses (a reload may shorten max_wait
        -- for the tickets after it).
        local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
        redis.call('PEXPIREAT', queue, ceil_div(tonumber(last[2]), 1000))
      end
    end
    return
  end
  local fresh_at = limit.alg.fresh_at(limit.state, limit.a, limit.b)
  if fresh_at <= now then
    redis.call('DEL', limit.key)
  elseif expire then
    redis.call('SET', limit.key, limit.alg.encode(limit.state), 'PXAT', ceil_div(fresh_at, 1000))
  else
    redis.call('SET', limit.key, limit.alg.encode(limit.state))
  end
end

-- Writes limit i's decision into the answer.
local function report(answer, i, code, remaining, reset, retry, wait)
  local at = 2 + 5 * (i - 1)
  answer[at + 1] = code
  answer[at + 2] = remaining
  answer[at + 3] = reset
  answer[at + 4] = retry
  answer[at + 5] = wait
end

-- Asks a group of limits, all or nothing, in order, as memory's
-- `acquire_all` does: each limit is decided on a copy of its state, and the
-- copies are written only when every one admits. Once a limit refuses, the
-- later ones are only peeked, and the earlier ones (which took nothing in
-- the end) are reported as they are. When several limits hold the request,
-- it passes at the latest instant, and the limits that would let it pass
-- earlier count it there where they can (`reschedule`).
local function ask_all(limits, first, last, answer, write)
  local refused = false
  local taken, waits = {}, {}
  for i = first, last do
    local limit = limits[i]
    local ok, remaining, reset, retry, wait
    local ticket = false
    if refused or not write then
      ok, remaining, reset, retry = limit.alg.peek(limit.state, limit.a, limit.b, limit.n)
    else
      local state = copy(limit.state)
      if limit.max_queued > 0 and limit.alg.reserve then
        ok, remaining, reset, retry, wait =
          limit.alg.reserve(state, limit.a, limit.b, limit.n, limit.max_wait, limit.max_queued)
        ticket = state.ticket_until ~= nil
      else
        ok, remaining, reset, retry = limit.alg.acquire(state, limit.a, limit.b, limit.n)
      end
      taken[i] = state
    end
    wait = (ok and wait) or 0
    waits[i] = wait
    local code = DECISION_DENY
    if ok then code = ((wait > 0 or ticket) and DECISION_HOLD) or DECISION_ALLOW end
    report(answer, i, code, remaining, reset, retry, wait)
    if not ok and write and not refused then
      refused = true
      for j = first, i - 1 do
        local earlier = limits[j]
        local _, left, full = earlier.alg.peek(earlier.state, earlier.a, earlier.b, earlier.n)
        report(answer, j, DECISION_ALLOW, left, full, 0, 0)
      end
    end
  end
  if refused then return false end
  local all = true
  for i = first, last do
    all = all and answer[2 + 5 * (i - 1) + 1] ~= DECISION_DENY
  end
  if not write then return all end
  local latest = 0
  for i = first, last do latest = math.max(latest, waits[i]) end
  for i = first, last do
    local limit = limits[i]
    if waits[i] < latest and limit.alg.reschedule
        and limit.alg.reschedule(taken[i], limit.a, limit.b, limit.n, now + waits[i], now + latest) then
      local at = 2 + 5 * (i - 1)
      answer[at + 1] = DECISION_HOLD
      answer[at + 5] = latest
    end
    limit.state = taken[i]
    store(limit)
  end
  return true
end

-- Settles one receipt of limit `limit` as `how` says (see the header).
local function settle_one(limit, how, units, taken_at, name)
  if how == SETTLE_RETURN_LEASE then
    -- A lease returned: ARGV's units slot names it.
    redis.call('ZREM', limit.key, name)
  elseif how == SETTLE_LEAVE_QUEUE then
    -- A waiter gave up: its ticket, and the lease it may have claimed
    -- just before.
    redis.call('ZREM', queue_of(limit.key), name)
    redis.call('ZREM', limit.key, name)
  elseif how == SETTLE_GIVE_BACK then
    limit.alg.refund(limit.state, limit.a, limit.b, units, taken_at)
    store(limit)
  elseif how == SETTLE_CHARGE then
    limit.alg.charge(limit.state, limit.a, limit.b, units)
    store(limit)
  elseif how == SETTLE_CANCEL_RESERVATION then
    -- A reservation: cancelled while its instant is ahead, else given
    -- back as units taken then (as memory settles it).
    if now < taken_at and limit.alg.cancel then
      limit.alg.cancel(limit.state, limit.a, limit.b, units, taken_at)
    else
      limit.alg.refund(limit.state, limit.a, limit.b, units, taken_at)
    end
    store(limit)
  end
end

-- The `count` receipts of one settlement, the first's key KEYS[first] and
-- its fields from ARGV[base] on.
local function settle_receipts(first, base, count)
  for r = 0, count - 1 do
    local at = base + 6 * r
    local limit = load(KEYS[first + r], at)
    settle_one(limit, tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4]),
      tonumber(ARGV[at + 5]), ARGV[at + 4])
  end
end

if op == OP_SETTLE then
  local marker = KEYS[#KEYS]
  local applied = tonumber(redis.call('GET', marker) or '0')
  local last = applied
  local answer = { now }
  local first, base = 1, 5
  for _ = 1, tonumber(ARGV[4]) do
    local seq, count = tonumber(ARGV[base]), tonumber(ARGV[base + 1])
    if seq > applied then
      -- One settlement Redis refuses (an error of `redis.call`) leaves the
      -- others applied: retrying it would fail alike.
      if not pcall(settle_receipts, first, base + 2, count) then
        answer[#answer + 1] = seq
      end
      if seq > last then last = seq end
    end
    first, base = first + count, base + 2 + 6 * count
  end
  if last > applied then
    redis.call('SET', marker, last, 'PX', tonumber(ARGV[3]))
  end
  return reply(answer)
end

if op == OP_CLAIM then
  local limit = load(KEYS[1], 3)
  local queue = queue_of(limit.key)
  redis.call('ZREMRANGEBYSCORE', queue, '-inf', now)
  local rank = redis.call('ZRANK', queue, limit.member)
  if not rank then return reply({ now, CLAIM_NEVER }) end
  -- The first `free` waiters may take the free permits, whichever asks
  -- first: a waiter behind them never overtakes them.
  if rank >= limit.a - limit.state.count then return reply({ now, CLAIM_NOT_YET }) end
  redis.call('ZREM', queue, limit.member)
  limit.state.take = true
  store(limit)
  return reply({ now, CLAIM_CLAIMED })
end

-- Counts `count` strikes against the caller of `ban` (a rule with `after`
-- above 0): the `after`-th within `within` bans the caller for `for`.
-- Answers how long the ban this started lasts, or 0. The caller checked
-- that no ban is in force (a strike while banned never counts).
local function count_strikes(ban, count)
  local fields = redis.call('HMGET', ban.key, 'since', 'n')
  local since, n = tonumber(fields[1] or '0'), tonumber(fields[2] or '0')
  if n == 0 or now - since >= ban.within then
    since, n = now, 0
  end
  n = n + count
  if n < ban.after then
    redis.call('HSET', ban.key, 'since', since, 'n', n)
    if expire then redis.call('PEXPIREAT', ban.key, ceil_div(since + ban.within, 1000)) end
    return 0
  end
  redis.call('HSET', ban.key, 'until', now + ban.lasts, 'since', since, 'n', 0)
  if expire then redis.call('PEXPIREAT', ban.key, ceil_div(now + ban.lasts, 1000)) end
  return ban.lasts
end

-- A refused request strikes each rule with a `ban` whose limits refused
-- it (a rule without one, `after` 0, is only checked for bans set by
-- hand). Answers how long the ban its strike started lasts, or 0.
local function strike(ban, answer)
  if ban.after == 0 then return 0 end
  local refused = false
  for i = ban.first, ban.last do
    if answer[2 + 5 * (i - 1) + 1] == DECISION_DENY then refused = true end
  end
  if not refused then return 0 end
  return count_strikes(ban, 1)
end

if op == OP_SYNC then
  -- Hybrid mode: a round's deltas added to the shared buckets (one group
  -- per limit: its parameters once, then three numbers per bucket), and
  -- each bucket's state read back. The units taken go first: units given
  -- back were taken by an earlier call, or (deltas of failed rounds
  -- merged) by this one. A call applied already (its number not above the
  -- marker: a retry whose answer was lost) or a bucket with nothing to add
  -- is only read.
  local marker = KEYS[#KEYS]
  local seq = tonumber(ARGV[3])
  local applies = seq > tonumber(redis.call('GET', marker) or '0')
  if applies then redis.call('SET', marker, seq, 'PX', tonumber(ARGV[4])) end
  local answer = { now }
  local at, bucket = 6, 0
  for _ = 1, tonumber(ARGV[5]) do
    local algorithm = algorithms[tonumber(ARGV[at])]
    local a, b = tonumber(ARGV[at + 1]) or ARGV[at + 1], tonumber(ARGV[at + 2])
    local buckets = tonumber(ARGV[at + 3])
    for i = 1, buckets do
      bucket = bucket + 1
      local limit = { key = KEYS[bucket], alg = algorithm, a = a, b = b }
      limit.state = algorithm.decode(redis.call('GET', limit.key))
      local field = at + 4 + 3 * (i - 1)
      local taken, back = tonumber(ARGV[field]), tonumber(ARGV[field + 1])
      if applies and (taken > 0 or back > 0) then
        if taken > 0 then algorithm.charge(limit.state, a, b, taken) end
        if back > 0 then algorithm.refund(limit.state, a, b, back, tonumber(ARGV[field + 2])) end
        store(limit)
      end
      local _, remaining, reset = algorithm.peek(limit.state, a, b, 1)
      answer[2 * bucket], answer[2 * bucket + 1] = remaining, reset
    end
    at = at + 4 + 3 * buckets
  end
  return reply(answer)
end

if op == OP_STRIKE then
  -- Hybrid mode's strikes, counted by the instances since their last sync:
  -- per ban key KEYS[i], 4 fields from ARGV[3] on: after, within, for
  -- (microseconds) and the strikes. Answers { now, then per key: how long
  -- its ban lasts from now (0: none), 1 if these strikes started it }.
  local answer = { now }
  for i = 1, #KEYS do
    local at = 3 + 4 * (i - 1)
    local ban = {
      key = KEYS[i],
      after = tonumber(ARGV[at]),
      within = tonumber(ARGV[at + 1]),
      lasts = tonumber(ARGV[at + 2]),
    }
    local ends = tonumber(redis.call('HGET', ban.key, 'until') or '0')
    if ends > now then
      answer[2 * i], answer[2 * i + 1] = ends - now, 0
    else
      local lasts = count_strikes(ban, tonumber(ARGV[at + 3]))
      answer[2 * i], answer[2 * i + 1] = lasts, lasts > 0 and 1 or 0
    end
  end
  return reply(answer)
end

-- One request's admit, peek or spend: its keys are KEYS[ko + 1] on, its
-- fields ARGV[ao + 3] to ARGV[last] (ao = 0 and last = #ARGV for a call
-- of its own). Answers the table `reply` writes.
local function decide(op, ko, ao, last)
  queued_in_call = false
  local enforced = tonumber(ARGV[ao + 3])
  local shadow_rules = tonumber(ARGV[ao + 4])
  local ban_rules = tonumber(ARGV[ao + 5 + shadow_rules])
  local bans_at = ao + 6 + shadow_rules
  local base = bans_at + 5 * ban_rules
  local limits = {}
  local count = (last - base + 1) / 6

  -- The bans: the first in force refuses the request before any bucket is
  -- asked (an admission only; peeks and spends ignore bans).
  local bans = {}
  for b = 1, ban_rules do
    local at = bans_at + 5 * (b - 1)
    local ban = {
      key = KEYS[ko + count + b],
      first = tonumber(ARGV[at]),
      last = tonumber(ARGV[at + 1]),
      after = tonumber(ARGV[at + 2]),
      within = tonumber(ARGV[at + 3]),
      lasts = tonumber(ARGV[at + 4]),
    }
    bans[b] = ban
    if op == OP_ADMIT then
      local ends = tonumber(redis.call('HGET', ban.key, 'until') or '0')
      if ends > now then
        return { now, OUTCOME_BANNED, b, ends - now }
      end
    end
  end

  for i = 1, count do
    limits[i] = load(KEYS[ko + i], base + 6 * (i - 1))
    limits[i].max_wait = tonumber(ARGV[base + 6 * (i - 1) + 4])
    limits[i].max_queued = tonumber(ARGV[base + 6 * (i - 1) + 5])
  end

  local answer = { now, OUTCOME_ADMITTED }
  if op == OP_SPEND then
    for i = 1, count do
      local limit = limits[i]
      -- Spending nothing writes nothing.
      if limit.n > 0 then
        limit.alg.charge(limit.state, limit.a, limit.b, limit.n)
        store(limit)
      end
      limit.n = 1
    end
    ask_all(limits, 1, count, answer, false)
    return answer
  end

  local write = op == OP_ADMIT
  local admitted = ask_all(limits, 1, enforced, answer, write)
  answer[2] = admitted and OUTCOME_ADMITTED or OUTCOME_LIMITED
  -- Shadow rules: asked only when the request is admitted (peeked otherwise,
  -- to report them), each all or nothing on its own.
  local first = enforced + 1
  for r = 1, shadow_rules do
    local last_limit = first + tonumber(ARGV[ao + 4 + r]) - 1
    ask_all(limits, first, last_limit, answer, write and admitted)
    first = last_limit + 1
  end
  for b = 1, ban_rules do
    answer[2 + 5 * count + b] = (write and not admitted) and strike(bans[b], answer) or 0
  end
  return answer
end

if op == OP_BATCH then
  -- Several requests' admissions, one after the other, each all or
  -- nothing as in a call of its own: ARGV[3] their number, then per
  -- request its number of keys, its number of fields F and its F fields
  -- (admit's, from "the number of enforced limits" on). The answer is
  -- each request's, after the count of its integers.
  local parts = {}
  local ko, at = 0, 4
  for r = 1, tonumber(ARGV[3]) do
    local keys, fields = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
    local answer = decide(OP_ADMIT, ko, at - 1, at + 1 + fields)
    parts[r] = string.format(string.rep('%d ', #answer + 1), #answer, unpack(answer))
    ko, at = ko + keys, at + 2 + fields
  end
  return table.concat(parts)
end

return reply(decide(op, 0, 0, #ARGV))
