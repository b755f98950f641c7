-- take.lua: reserve up to N slots on one downstream's bucket and take one
-- task from asynq's pending list for each, atomically (shaping/take).
--
-- A task leaves pending only with a slot: nothing moves when the queue is
-- paused, the downstream's budget of leased tasks is spent, or its next slot
-- starts later than the look-ahead. The bucket is shaping.lua's next_free
-- (GCRA in shaping mode): slot j starts at max(base + j*interval, now) with
-- base = max(next_free, now - burst), and next_free becomes base +
-- taken*interval. Each task taken moves exactly as asynq v0.26's dequeueCmd
-- moves it: RPOPLPUSH pending -> active, state "active", pending_since
-- deleted, a lease in the lease ZSET (score: expiry in Unix seconds).
--
-- With ARGV[9] = 1 the call first does what asynq's forwarder, recoverer
-- and janitor would do for this queue: due tasks of the scheduled and
-- retry ZSETs become pending (asynq's forwardCmd, at most 100 each; on a
-- fair downstream, a task that was in fair order goes back to it at its
-- key's turn: a take from fair order sets the task hash's field
-- "shaper_fair" to its member without the id), tasks
-- whose lease expired go back to the head of pending in state "pending"
-- with no attempt consumed (at most 100), and completed tasks past their
-- retention are deleted (at most 100).
--
-- KEYS[1] -> <prefix>:take:{<q>}:next_free  STRING, µs since the epoch
-- KEYS[2] -> asynq:{<q>}:pending             LIST
-- KEYS[3] -> asynq:{<q>}:active              LIST
-- KEYS[4] -> asynq:{<q>}:lease               ZSET
-- KEYS[5] -> asynq:{<q>}:paused              STRING (exists: paused)
-- KEYS[6] -> asynq:{<q>}:scheduled           ZSET
-- KEYS[7] -> asynq:{<q>}:retry               ZSET
-- KEYS[8] -> asynq:{<q>}:completed           ZSET
-- KEYS[9] -> <prefix>:take:{<q>}:maintained  STRING (optional: with it,
--            the maintenance of ARGV[9] runs at most once per ARGV[11] ms
--            across every process; the others' calls skip it; required
--            with priority lists)
-- KEYS[10..13] -> <prefix>:take:{<q>}:priority:1, :2, :4, :5  LISTs
--            (optional, with ARGV[12] = 1): the waiting tasks of priority
--            1, 2, 4 and 5 (priority.lua places them; a task of the
--            default priority 3 waits in pending). A take serves the
--            lists in priority order: 1, 2, pending, 4, 5; each is FIFO
--            (pushed at the left, taken from the right, as pending). A
--            task's priority is its hash's field "shaper_priority", so a
--            forwarded, recovered or requeued task returns to its list.
-- ARGV[1] -> interval in µs between slots (0: no rate limit)
-- ARGV[2] -> burst allowance in µs ((burst-1) * interval; 0: none)
-- ARGV[3] -> look-ahead in µs: take only slots that start within it
-- ARGV[4] -> most slots (tasks) to take, 1..1000
-- ARGV[5] -> budget: most unexpired leases the queue may hold, >= 1
-- ARGV[6] -> lease duration in seconds, >= 1
-- ARGV[7] -> task key prefix, asynq:{<q>}:t:
-- ARGV[8] -> group key prefix, asynq:{<q>}:g:
-- ARGV[9] -> 1: forward due tasks and recover expired leases first; 0: not
-- ARGV[10] -> now in µs, or 0 to read Redis TIME (a take with a rate
--            reads TIME, so every process's slots come from one clock;
--            one without may pass its process's clock: leases and the
--            maintenance's due times are on it, as in asynq; a take with
--            a reservation (ARGV[16]) takes its slots' now from the
--            reservation's own now argument, or TIME, once tasks wait)
-- ARGV[11] -> with KEYS[9]: the maintenance's spacing in ms, >= 1
-- ARGV[12] -> 1: KEYS[10..13] are the priority lists; else none
-- ARGV[13] -> with ARGV[12] = 1: "w1 w2 w3 w4 w5", the weights of levels
--            1 to 5 (integers in [1, 1000]): weighted instead of strict
--            priority; "" or absent: strict.
-- KEYS[14] -> <prefix>:take:{<q>}:turns  STRING (required with ARGV[13]):
--            weighted priority's state, five numbers "t1 .. t5", each
--            level's start tag relative to the virtual time. A take picks,
--            among the levels with tasks waiting, the one with the least
--            tag (ties: the higher priority), and that level's tag grows
--            by 1/weight (start-time fair queueing with unit costs). A
--            level that had no tasks rejoins at the virtual time: it gets
--            its share from then on, no credit for its idle spell.
--
-- ARGV[14] -> 1: the downstream shares by fair order (fair.lua parks its
--            tasks): KEYS[15..23] are its keys, and a take serves the
--            parked task with the least start tag (the next in weighted
--            fair order at this moment, so a key that just arrived passes
--            the backlog at once), except that a task at the tail of
--            pending that is not in fair order (given back, recovered,
--            forwarded, or enqueued by asynq's own Client) goes first;
--            else none. The slots before KEYS[15] must then be filled
--            (with the queue's maintained, priority and turns keys, used
--            or not).
-- ARGV[15] -> with ARGV[14] = 1: the TTL of fair.lua's keys, ms.
-- KEYS[15..23] -> <prefix>:fair:{<q>}: parked, tags, state, later, counts,
--            nb, keyctl, held, pos (fair.lua's KEYS[1..6], 8, 9 and 10). A
--            task taken from parked moves from the middle of pending to
--            active (prelude_fairpos.lua; one parked by an earlier version
--            waits in asynq's scheduled set, and moves from there); a
--            paused key's task goes to held instead, staying in pending
--            (fair.lua's resume brings it back); the virtual time V
--            (fair.lua's state "v") moves to the tag of each task taken.
--
-- ARGV[16] -> R, the number of reservation keys (0 or absent: none). With
--            R > 0 the take reserves its tasks' slots as shaping.lua's
--            reservation (mode 0) does, on KEYS[24..23+R] (shaping.lua's
--            KEYS: next_free, announced, issued, claims, quotas) with
--            ARGV[26..] (shaping.lua's ARGV; the take sets its max wait
--            to the look-ahead, its mode to 0, its now and its slots to
--            what the lists and the budget allow), so the rate, the
--            quotas and the announced limit are decided where the task
--            moves, for the run of tasks of one unit of cost (their msg's
--            header "shaper-cost") next in line; a run of tasks of more
--            units next in line (as many as their units fit in the
--            look-ahead's slots, at least one), or of tasks past their
--            deadline ("shaper-deadline"), is taken without a slot or a
--            reservation (the caller reserves for the ones, archives the
--            others), so that no slot goes to a task that cannot use it.
--            In line is the order the take picks (FIFO, priority,
--            strict or weighted, or fair order: the tasks at the tail not
--            in fair order, then the parked ones by tag, passing over a
--            task whose key is at its ceiling, ARGV[18..21]). ARGV[1] and
--            ARGV[2] must be 0 (KEYS[1] is not used), and the slots
--            before KEYS[24] must be filled.
-- ARGV[17] -> with R > 0, the lead in µs (0: none): the take reserves
--            nothing (early) while next_free is further than this ahead,
--            so that the processes' takes each serve a run of slots from
--            the lead to the look-ahead, not the few that entered the
--            look-ahead since the last take.
-- ARGV[22..24] -> with R > 0, a concurrency cap (concurrency.lua's
--            leases, KEYS[24+R] the ZSET, KEYS[25+R] the counts HASH):
--            [22] the most leases in all (0: no cap; the keys may be
--            absent), [23] the lease time in µs, [24] the token of this
--            take. Expired leases go first; the take moves no more tasks
--            than leases are free (none: status 3, full), and each task
--            taken with a slot gets a lease "<token><id>|" that expires
--            after the lease time (its holder renews and releases it as
--            concurrency.lua's). No key cap: the lease has no key.
-- ARGV[25] -> with R > 0, the paused field of the downstream's state
--            HASH, KEYS[26+R] (shaper's pause: "1" is paused; "": not
--            checked): a take of a paused downstream moves nothing
--            (status 2), whichever process makes it. KEYS[24+R] and
--            KEYS[25+R] must then be filled (the lease keys, or any key
--            of the same hash tag without a cap).
-- ARGV[18..21] -> with R > 0 on a fair downstream, its key ceilings (a
--            key's slots at least its interval apart, across every
--            process; keyceiling.lua's tat STRINGs, which a lane's claims
--            share): [18] each key's interval in µs for one unit (0:
--            none), then, after a ";", the keys with intervals of their
--            own, "<len(key)>|<key><µs>;" each (an operator's rate for a
--            key in the controls HASH, "r:<key>" = "<rate>/<period µs>",
--            comes before both), [19] the late
--            tolerance in µs, which stretches an interval by that many µs
--            per second of it, [20] the tat keys' prefix (the key name
--            follows; "": no ceilings), [21] how long a tat key outlives
--            its tat, ms. A ceilinged key takes at most one slot a take,
--            one starting at or after its tat (or a lane's claim's end),
--            and its tat becomes that slot plus its interval.
--
-- Output: {status, now_us, next_us, drained, recovered, forwarded,
--          L, then L fields: shaping.lua's reply to the reservation (L = 0
--          without one; with one, L >= 8 whenever the reservation ran),
--          then per task taken: id, msg, slot_us, priority}
--   status: 0 taken (at least one task), 1 empty (pending had none),
--           2 paused, 3 full (budget spent), 4 early (the first slot starts
--           later than the look-ahead; or, with a reservation on a fair
--           downstream, every key waiting is at its ceiling: next_us is
--           when the first may go).
--   now_us: the script's now; with a reservation that ran, when the
--           script ended (Redis TIME read last), so that the caller can
--           place the slots on its own clock from when the reply came.
--   next_us: taken and early, when the next slot would start (so the
--            next take can succeed from next_us - look-ahead on); 0 for
--            the other statuses.
--   drained: 1 when pending (and every priority list) ran out during
--   this call.
--   msg is the task hash's "msg" field, or "" when the hash has none (the
--   caller archives such a task with the reason); priority is the task's
--   (its hash's "shaper_priority", 3 when none or without priority lists).
-- Errors: an argument out of range.
-- Without a rate (ARGV[1] and ARGV[2] both 0) KEYS[1] is neither read nor
-- written.
-- TTL: next_free until it (plus the burst allowance) is past, plus a margin
-- of 1 s, as shaping.lua sets it. turns: 60 s plus two slots after the
-- last take that wrote it, and deleted by a take that leaves every level
-- empty (a fresh start then loses nothing). fair.lua's keys keep the TTL
-- fair.lua gives them; a take that runs out of tasks with nothing parked,
-- later or held sets the tags, state and nb to expire within 60 s (at most
-- ARGV[15]). asynq's keys follow asynq: no TTL.
if redis.replicate_commands then redis.replicate_commands() end

local MARGIN_MS = 1000
local MAX_US = 86400000000
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local ahead = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local budget = tonumber(ARGV[5])
local lease = tonumber(ARGV[6])
local tprefix, gprefix = ARGV[7], ARGV[8]
local levels = ARGV[12] == '1' and KEYS[13] ~= nil
-- the lists a take serves, in priority order; a list's own level, for
-- a task that goes back to it (forward, recovery)
local serve = {KEYS[2]}
local listOf = {}
if levels then
  serve = {KEYS[10], KEYS[11], KEYS[2], KEYS[12], KEYS[13]}
  listOf = {['1'] = KEYS[10], ['2'] = KEYS[11], ['4'] = KEYS[12], ['5'] = KEYS[13]}
end
local function home(id)
  if not levels then return KEYS[2] end
  return listOf[redis.call('HGET', tprefix .. id, 'shaper_priority') or ''] or KEYS[2]
end
local fair = ARGV[14] == '1' and KEYS[23] ~= nil
local function waiting()
  local n = 0
  for _, k in ipairs(serve) do n = n + redis.call('LLEN', k) end
  -- tasks parked by an earlier version wait in scheduled
  if fair then n = n + redis.call('ZCARD', KEYS[15]) end
  return n
end
local function bounded(v)
  return v ~= nil and v >= 0 and v <= MAX_US and v == math.floor(v)
end
if not bounded(interval) or not bounded(burst) or not bounded(ahead) then
  return redis.error_reply('take: interval, burst and look-ahead must be integers in [0, ' .. MAX_US .. '] us')
end
if n == nil or n < 1 or n > 1000 or budget == nil or budget < 1 or lease == nil or lease < 1 then
  return redis.error_reply('take: slots must be in [1, 1000], budget and lease at least 1')
end
-- weights: the levels' weights in serve's order, or nil (strict)
local weights
if levels and ARGV[13] and ARGV[13] ~= '' then
  weights = {}
  for w in string.gmatch(ARGV[13], '%S+') do weights[#weights + 1] = tonumber(w) end
  local ok = #weights == 5 and KEYS[14] ~= nil
  for _, w in ipairs(weights) do
    if w == nil or w < 1 or w > 1000 or w ~= math.floor(w) then ok = false end
  end
  if not ok then return redis.error_reply('take: weights must be five integers in [1, 1000], with the turns key') end
end
-- one process's maintenance serves every process for ARGV[11] ms; the
-- others' calls skip it, and on an idle queue cost one LLEN (no TIME)
local maintain = ARGV[9] == '1'
if maintain and KEYS[9] then
  local every = tonumber(ARGV[11])
  if every == nil or every < 1 then return redis.error_reply('take: maintenance spacing must be at least 1 ms') end
  maintain = redis.call('SET', KEYS[9], '1', 'PX', math.floor(every), 'NX') ~= false
  if not maintain and waiting() == 0 then return {1, 0, 0, 1, 0, 0, 0} end
end

local now = tonumber(ARGV[10])
if now == nil or now <= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local now_s = math.floor(now / 1000000)

-- fair order (ARGV[14]): V is fair.lua's state, read at the first task
-- taken from parked or parked here, and written back after the last
local fv, fv0, fctl
local fttl = tonumber(ARGV[15]) or 0
local function fmt(x) return string.format('%.17g', x) end
local function fairInit()
  if fv == nil then
    fv = tonumber(redis.call('HGET', KEYS[17], 'v') or '0') or 0
    fv0, fctl = fv, redis.call('EXISTS', KEYS[21]) == 1
  end
end

-- parkFair puts task id, just pushed to the head of pending, in fair
-- order at its key's turn, as fair.lua's park does (a per-key ceiling is
-- left to the reservation): pre is its hash's "shaper_fair", its member
-- without the id, "<cost>|<weight>|<len(key)>|<key>"
local function parkFair(id, pre)
  fairInit()
  local c, ws, nk, rest = string.match(pre, '^!?([^|]+)|([^|]+)|(%d+)|(.*)$')
  if not rest then return end
  pre = c .. '|' .. ws .. '|' .. nk .. '|' .. rest
  local key = string.sub(rest, 1, tonumber(nk))
  local w = fairWeight(KEYS[21], fctl, key, ws)
  if not (tonumber(c) and w and w > 0) then return end
  fpPlace(KEYS[2], KEYS[23], id, 0)
  local s, fresh = fairTurn(KEYS[16], key, tonumber(c), w, fv)
  redis.call('ZADD', KEYS[15], fmt(s), fairInTurn(pre .. id, fresh))
  redis.call('HINCRBY', KEYS[19], key, 1)
  for _, k in ipairs({KEYS[15], KEYS[16], KEYS[19], KEYS[23]}) do redis.call('PEXPIRE', k, fttl) end
end

-- forward: asynq's forwardCmd for one delayed ZSET (a task of a fair
-- downstream that was in fair order before goes back to it)
local function forward(src)
  local ids = redis.call('ZRANGEBYSCORE', src, '-inf', now_s, 'LIMIT', 0, 100)
  for _, id in ipairs(ids) do
    local tk = tprefix .. id
    local group = redis.call('HGET', tk, 'group')
    if group and group ~= '' then
      redis.call('ZADD', gprefix .. group, now_s, id)
      redis.call('ZREM', src, id)
      redis.call('HSET', tk, 'state', 'aggregating')
    else
      redis.call('LPUSH', home(id), id)
      redis.call('ZREM', src, id)
      redis.call('HSET', tk, 'state', 'pending', 'pending_since', string.format('%d', now * 1000))
      local pre = fair and redis.call('HGET', tk, 'shaper_fair')
      if pre then parkFair(id, pre) end
    end
  end
  return #ids
end

local recovered, forwarded = 0, 0
if maintain then
  forwarded = forward(KEYS[6]) + forward(KEYS[7])
  local ids = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. now_s, 'LIMIT', 0, 100)
  for _, id in ipairs(ids) do
    if redis.call('LREM', KEYS[3], 0, id) > 0 then
      redis.call('RPUSH', home(id), id)
      redis.call('HSET', tprefix .. id, 'state', 'pending')
      recovered = recovered + 1
    end
    redis.call('ZREM', KEYS[4], id)
  end
  -- asynq's janitor: completed tasks past their retention go (at most 100)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', now_s, 'LIMIT', 0, 100)) do
    redis.call('DEL', tprefix .. id)
    redis.call('ZREM', KEYS[8], id)
  end
  -- an idle queue's periodic maintenance ends here, cheaply
  if waiting() == 0 then return {1, now, 0, 1, recovered, forwarded, 0} end
end

-- the reservation (ARGV[16]): shaping.lua's KEYS and ARGV, its reply, and
-- the msgs of the tasks it reserved for, read before it
local rk, ra, rres, msgs

-- header is the value of header name in a task's msg (asynq's
-- TaskMessage: a headers map entry is key field 1, value field 2; the last
-- such entry, as the headers come last), or nil. The Go side checks what
-- the take made of it against the task's decoded headers.
local function header(m, name)
  local entry = '\10' .. string.char(#name) .. name .. '\18'
  local at, from = nil, 1
  while true do
    local i = string.find(m, entry, from, true)
    if not i then break end
    at, from = i + #entry, i + 1
  end
  if not at then return nil end
  -- the value's length, a varint (an admission key may be 128 bytes or
  -- more)
  local len, shift = 0, 1
  while true do
    local b = string.byte(m, at)
    if not b then return nil end
    at = at + 1
    if b < 128 then
      len = len + b * shift
      break
    end
    len, shift = len + (b - 128) * shift, shift * 128
  end
  return string.sub(m, at, at + len - 1)
end

-- cost is the units a task costs ("shaper-cost", 1 when absent; one
-- unreadable counts as 1, and the caller's check of the headers finds it)
local function cost(m)
  local c = header(m, 'shaper-cost')
  return c and tonumber(c) or 1
end

-- deadline is the task's "shaper-deadline" (RFC 3339 in UTC, as the
-- producer writes it) in µs since the epoch, or nil
local function deadline(m)
  local v = header(m, 'shaper-deadline')
  if not v then return nil end
  local y, mo, d, h, mi, sec, frac = string.match(v, '^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)%.?(%d*)Z$')
  if not y then return nil end
  y, mo = tonumber(y), tonumber(mo)
  if mo <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * ((mo + 9) % 12) + 2) / 5) + tonumber(d) - 1
  local days = era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
  local us = tonumber(string.sub(frac .. '000000', 1, 6))
  return ((days * 24 + tonumber(h)) * 60 + tonumber(mi)) * 60000000 + tonumber(sec) * 1000000 + us
end
-- fairDone writes V back (state has its TTL from fair.lua's park) and,
-- when the take ran out of tasks and nothing of the downstream waits in
-- fair order any more, lets fair.lua's keys expire soon
local function fairDone(drained)
  if fv == nil then return end
  if fv ~= fv0 then redis.call('HSET', KEYS[17], 'v', fmt(fv)) end
  if drained == 1 and redis.call('EXISTS', KEYS[15], KEYS[18], KEYS[22]) == 0 then
    redis.call('HDEL', KEYS[17], 'x')
    for _, k in ipairs({KEYS[16], KEYS[17], KEYS[20]}) do redis.call('PEXPIRE', k, math.min(fttl, 60000)) end
  end
end

-- key ceilings of a fair downstream whose take reserves (ARGV[18..21]):
-- a key's slots are at least its ceiling's interval apart, across every
-- process (keyceiling.lua's tat STRINGs, which the lanes claim too)
local kcPer, kcTol = tonumber(string.match(ARGV[18] or '', '^%d+')) or 0, tonumber(ARGV[19]) or 0
local kcPrefix, kcMargin = ARGV[20] or '', tonumber(ARGV[21]) or 1000
-- the keys with ceilings of their own (ARGV[18] after the default:
-- "<len(key)>|<key><µs>;" each), key -> µs
local kcRates = {}
do
  local spec = ARGV[18] or ''
  local at = (string.find(spec, ';', 1, true) or #spec) + 1
  while at <= #spec do
    local bar = string.find(spec, '|', at, true)
    if not bar then break end
    local len = tonumber(string.sub(spec, at, bar - 1))
    local key = string.sub(spec, bar + 1, bar + len)
    local semi = string.find(spec, ';', bar + len + 1, true) or (#spec + 1)
    kcRates[key] = tonumber(string.sub(spec, bar + len + 1, semi - 1))
    at = semi + 1
  end
end

-- ceilingOf is key's ceiling: µs between its slots of one unit,
-- stretched by the late tolerance (µs per second of interval), as
-- keyceiling.lua's callers stretch it; 0: none. An operator's rate for
-- the key (controls "r:<key>", "<rate>/<period µs>") comes first.
local function ceilingOf(key)
  if kcPrefix == '' then return 0 end
  local per = kcRates[key] or kcPer
  if fctl then
    local rr, pp = string.match(redis.call('HGET', KEYS[21], 'r:' .. key) or '', '^(%d+)/(%d+)$')
    if rr and tonumber(rr) > 0 then per = tonumber(pp) / tonumber(rr) end
  end
  if per <= 0 then return 0 end
  return per + math.ceil(per * kcTol / 1000000)
end

-- blockedUntil is the earliest start key's next slot may have (µs): its
-- tat, or the end of a lane's claim on it ("lo:hi"); 0 when none
local function blockedUntil(key)
  local v = redis.call('GET', kcPrefix .. key)
  if not v then return 0 end
  local _, hi = string.match(v, '^(%d+):(%d+)$')
  return tonumber(hi or v) or 0
end

-- fairLine lines up a fair downstream's next tasks for a reserving take,
-- in the order popList would take them: the tasks at the tail of pending
-- not in fair order (all of the tail, numbered or not, when nothing is
-- parked, later or held), then the parked tasks by start tag. A paused
-- key's task goes to held on the way (as popFair moves it); an entry
-- whose task is gone is dropped; a task whose key is at its ceiling at
-- the slot it would get (est(j), the start of slot j) goes to later,
-- due at its tat (fairWake: the first such tat), and so do the key's
-- other tasks met (toLater): a ceilinged key gets one slot a take, and
-- parked holds no task that cannot go. The due ones come back first. It returns nextInLine and how many
-- entries are in view; nextInLine(j) gives id, msg and the entry
-- (pickChosen's).
local chosen, fairWake
local fairPre -- the member without the id of the task taken last from fair order
local function fairLine(n, est)
  fairInit()
  local seen = {}
  -- ceilinged: key's ceiling interval and whether its task may take slot
  -- j. A ceilinged key is met once a take (seen: its tat after this
  -- take, µs): the first task met goes, or waits in later until its tat
  local function ceilinged(key, j)
    local iv = ceilingOf(key)
    if iv <= 0 then return 0, true end
    if seen[key] then return iv, false end
    local b, e = blockedUntil(key), est(j)
    if b > e then
      seen[key] = b
      if fairWake == nil or b < fairWake then fairWake = b end
      return iv, false
    end
    seen[key] = e + iv
    return iv, true
  end
  -- toLater moves parked task m of a ceilinged key met again to later,
  -- due when the key's ceiling lets it go after the slot this take gives
  -- the key and after the key's tasks already there (nb, as fair.lua's
  -- park spaces them), and gives its turn back (F[key] less its cost per
  -- weight): fair.lua's feed gives it a new turn when due, so a capped
  -- key's backlog does not sit in parked ahead of the other keys' tasks
  local function toLater(m, key, iv)
    local c, ws, rest = string.match(m, '^!?([^|]+)|([^|]+)|(.*)$')
    redis.call('ZREM', KEYS[15], m)
    local nb = tonumber(redis.call('HGET', KEYS[20], key) or '0') or 0
    local due = math.max(nb, math.ceil(seen[key] / 1000))
    redis.call('HSET', KEYS[20], key, fmt(due + tonumber(c) * iv / 1000))
    redis.call('ZADD', KEYS[18], fmt(due), c .. '|' .. ws .. '|' .. rest)
    redis.call('HINCRBYFLOAT', KEYS[16], key, -tonumber(c) / fairWeight(KEYS[21], fctl, key, ws))
    for _, k in ipairs({KEYS[16], KEYS[18], KEYS[20]}) do redis.call('PEXPIRE', k, fttl) end
  end
  -- the tasks a ceiling put in later (numbered: waiting in pending) that
  -- are due get their turns now, as fair.lua's feed would at its next
  -- call (a task with a ProcessAt, not numbered, is left to the feed)
  if kcPrefix ~= '' then
    local fed = false
    local nowms = math.ceil(now / 1000) -- due within this ms: a tat in µs rounds up to it
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[18], '-inf', nowms, 'LIMIT', 0, n + 16)) do
      local c, ws, nk, rest = string.match(m, '^([^|]+)|([^|]+)|(%d+)|(.*)$')
      local key, id = string.sub(rest, 1, tonumber(nk)), string.sub(rest, tonumber(nk) + 1)
      if redis.call('HEXISTS', KEYS[23], id) == 1 then
        redis.call('ZREM', KEYS[18], m)
        local t, fresh = fairTurn(KEYS[16], key, tonumber(c), fairWeight(KEYS[21], fctl, key, ws), fv)
        redis.call('ZADD', KEYS[15], fmt(t), fairInTurn(m, fresh))
        fed = true
      end
    end
    if fed then
      for _, k in ipairs({KEYS[15], KEYS[16]}) do redis.call('PEXPIRE', k, fttl) end
    end
  end
  local orphans = redis.call('EXISTS', KEYS[15], KEYS[18], KEYS[22]) == 0
  local tails = redis.call('LRANGE', KEYS[2], -n, -1)
  local ti, tailsOut = #tails + 1, false
  local ms, mi = nil, -1
  local function nextParked(j)
    if not ms then ms = redis.call('ZRANGE', KEYS[15], 0, 3 * n + 15, 'WITHSCORES') end
    while true do
      mi = mi + 2
      local m, s = ms[mi], tonumber(ms[mi + 1])
      if not m then return nil end
      local nk, rest = string.match(m, '^!?[^|]+|[^|]+|(%d+)|(.*)$')
      local key, id = string.sub(rest, 1, tonumber(nk)), string.sub(rest, tonumber(nk) + 1)
      local h = redis.call('HMGET', tprefix .. id, 'msg', 'state')
      if fctl and redis.call('HEXISTS', KEYS[21], 'p:' .. key) == 1 then
        redis.call('ZREM', KEYS[15], m)
        redis.call('ZADD', KEYS[22], 0, #key .. '|' .. key .. '|' .. fmt(s) .. '|' .. m)
        redis.call('PEXPIRE', KEYS[22], fttl)
      elseif not h[1] or (h[2] ~= 'pending' and h[2] ~= 'scheduled') then
        -- deleted, archived or quarantined by someone else
        redis.call('ZREM', KEYS[15], m)
        redis.call('HDEL', KEYS[23], id)
        if redis.call('HINCRBY', KEYS[19], key, -1) <= 0 then redis.call('HDEL', KEYS[19], key) end
      else
        local iv, ok = ceilinged(key, j)
        if ok then return id, h[1], {id = id, m = m, s = s, key = key, iv = iv} end
        toLater(m, key, iv)
      end
    end
  end
  local nextInLine = function(j)
    while not tailsOut do
      ti = ti - 1
      local id = tails[ti]
      if not id then break end
      local numbered = redis.call('HEXISTS', KEYS[23], id) == 1
      if numbered and not orphans then break end
      local h = redis.call('HMGET', tprefix .. id, 'msg', 'shaper_fair')
      local iv, ok = 0, true
      local nk, rest = string.match(h[2] or '', '^!?[^|]+|[^|]+|(%d+)|(.*)$')
      -- its key: from its member when it was taken from fair order
      -- before, else its admission key (one enqueued and not parked yet,
      -- or by asynq's own Client)
      local key = rest and string.sub(rest, 1, tonumber(nk)) or header(h[1] or '', 'shaper-key')
      if key then iv, ok = ceilinged(key, j) end
      if not ok then break end
      return id, h[1] or '', {id = id, tail = true, numbered = numbered, key = key, iv = iv}
    end
    -- the tail stops here: one not taken now stays the tail, and a
    -- parked task is taken from the middle of pending around it
    tailsOut = true
    return nextParked(j)
  end
  local inView = #tails + redis.call('ZCARD', KEYS[15])
  return nextInLine, inView
end

-- pickChosen takes the next of the tasks fairLine lined up (chosen),
-- nil when none is left, false when its task is no longer where it was
-- (its slot goes unused), and sets its key's ceiling at slot s
local ci = 0
local function pickChosen(s)
  ci = ci + 1
  local e = chosen[ci]
  if not e then return nil end
  local id = nil
  if e.tail then
    id = redis.call('RPOPLPUSH', KEYS[2], KEYS[3])
    if e.numbered then redis.call('HDEL', KEYS[23], id) end
  else
    redis.call('ZREM', KEYS[15], e.m)
    if e.s > fv then fv = e.s end
    if redis.call('HINCRBY', KEYS[19], e.key, -1) <= 0 then redis.call('HDEL', KEYS[19], e.key) end
    local tail = redis.call('LINDEX', KEYS[2], -1)
    local ta = tail and tonumber(redis.call('HGET', KEYS[23], tail))
    if fpTake(KEYS[2], KEYS[23], tprefix, e.id, tail, ta) or redis.call('ZREM', KEYS[6], e.id) == 1 then
      redis.call('LPUSH', KEYS[3], e.id)
      fairPre, id = string.sub(e.m, 1, #e.m - #e.id), e.id
    end
  end
  if not id then return false end
  if e.iv > 0 and s then
    local tat = s + e.iv
    redis.call('SET', kcPrefix .. e.key, string.format('%.0f', tat), 'PX', math.max(math.ceil((tat - now) / 1000), 0) + kcMargin)
  end
  return id
end

local nres = tonumber(ARGV[16] or '0') or 0
-- a concurrency cap at the take (ARGV[22..24]): lcap 0 is none
local lcap, llease, ltoken = 0, 0, ''
if nres > 0 then
  if interval > 0 or burst > 0 then
    return redis.error_reply('take: a reservation serves a queue without a rate of its own')
  end
  if fair and levels then
    return redis.error_reply('take: a reservation serves fair order without priority lists')
  end
  rk, ra = {}, {}
  for i = 1, nres do rk[i] = KEYS[23 + i] end
  for i = 26, #ARGV do ra[#ra + 1] = ARGV[i] end
  if #rk ~= nres or #ra < 11 then return redis.error_reply('take: reservation keys or arguments missing') end
  lcap, llease, ltoken = tonumber(ARGV[22]) or 0, tonumber(ARGV[23]) or 0, ARGV[24] or ''
  if lcap > 0 and (llease < 1 or KEYS[25 + nres] == nil) then
    return redis.error_reply('take: a concurrency cap needs its lease keys and a lease time')
  end
end

local function reply(status, nxt, drained)
  local out = {status, now, nxt, drained, recovered, forwarded, 0}
  if rres then
    out[7] = #rres
    for _, v in ipairs(rres) do out[#out + 1] = v end
  end
  return out
end
if redis.call('EXISTS', KEYS[5]) == 1 then return reply(2, 0, 0) end
local free = budget - redis.call('ZCOUNT', KEYS[4], now_s, '+inf')
if free <= 0 then return reply(3, 0, 0) end
if n > free then n = free end

-- without a rate (interval and burst 0) there is no bucket to read or
-- write: every slot starts now
local bucket = interval > 0 or burst > 0
local nf = 0
if bucket then nf = tonumber(redis.call('GET', KEYS[1]) or '0') or 0 end
local base = nf
if base < now - burst then base = now - burst end
local start = base
if start < now then start = now end
if start - now > ahead then return reply(4, start, 0) end
if rk then
  -- the slots are on the Redis clock (the reservation's now, ARGV[22],
  -- or TIME), whatever clock the maintenance and the leases ran on (an
  -- idle queue's maintenance reads no TIME)
  local rn = tonumber(ra[5]) or 0
  if rn > 0 then
    now = rn
  else
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  -- the operator's pause (ARGV[25]: its field in the downstream's state
  -- HASH, KEYS[26+R]), decided here, so no process takes after it
  if (ARGV[25] or '') ~= '' and redis.call('HGET', KEYS[26 + nres], ARGV[25]) == '1' then
    return reply(2, 0, 0)
  end
  local lead = tonumber(ARGV[17]) or 0
  local nf = tonumber(redis.call('GET', rk[1]) or '0') or 0
  if lead > 0 and nf - now > lead then return reply(4, nf, 0) end
  if lcap > 0 then
    -- concurrency.lua's leases: expired ones go, and no more tasks than
    -- places left among the calls in flight
    local lk, ck = KEYS[24 + nres], KEYS[25 + nres]
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', lk, '-inf', now)) do
      redis.call('ZREM', lk, m)
      local key = string.sub(m, string.find(m, '|', 1, true) + 1)
      if redis.call('HINCRBY', ck, key, -1) <= 0 then redis.call('HDEL', ck, key) end
    end
    local room = lcap - redis.call('ZCARD', lk)
    if room <= 0 then return reply(3, 0, 0) end
    if n > room then n = room end
  end
  -- no more tasks than the bucket's slots that start within the
  -- look-ahead (the quotas and the announced limit may allow fewer), so
  -- that no msg is read for a task that stays
  local iv1, b1 = tonumber(ra[1]) or 0, tonumber(ra[2]) or 0
  if iv1 > 0 then
    local fit = math.floor((now + ahead - math.max(nf, now - b1)) / iv1) + 1
    if n > fit then n = math.max(fit, 1) end
  end
  -- the run of unit-cost tasks next in line (each is taken), at most
  -- what the budget allows: that many slots, starting within the
  -- look-ahead; none: nothing moves. Tasks of more units next in line go
  -- without a slot: the lane reserves their units (a slot here is one
  -- unit, and a release must come after all of its units).
  --
  -- nextInLine returns the id and msg of the next task the pick takes,
  -- one at a time, nil when none is left in view (an entry of a priority
  -- list whose hash is gone is dropped by the pick, and passed over
  -- here). Strict: each list's tasks from its tail, the lists in
  -- priority order. Weighted: pickWeighted's turns, played on a copy of
  -- its tags (KEYS[14]).
  local nextInLine, inView
  if fair then
    chosen = {}
    nextInLine, inView = fairLine(n, function(j)
      return math.max(math.max(nf, now - b1) + j * iv1, now)
    end)
  elseif weights then
    local t, seen, at = {}, {}, {}
    local j = 0
    for v in string.gmatch(redis.call('GET', KEYS[14]) or '', '%S+') do
      j = j + 1
      t[j] = math.max(tonumber(v) or 0, 0)
    end
    inView = 0
    for l = 1, 5 do
      t[l] = t[l] or 0
      seen[l] = redis.call('LRANGE', serve[l], -n, -1)
      at[l], inView = #seen[l], inView + #seen[l]
    end
    nextInLine = function()
      while true do
        local best
        for l = 1, 5 do
          if at[l] > 0 and (best == nil or t[l] < t[best]) then best = l end
        end
        if not best then return nil end
        local id = seen[best][at[best]]
        at[best] = at[best] - 1
        local m = redis.call('HGET', tprefix .. id, 'msg')
        if m or serve[best] == KEYS[2] then
          local v = t[best]
          t[best] = v + 1 / weights[best]
          for l = 1, 5 do t[l] = math.max(t[l] - v, 0) end
          return id, m or ''
        end
      end
    end
  else
    local ids = {}
    for _, l in ipairs(serve) do
      if #ids >= n then break end
      local got = redis.call('LRANGE', l, -(n - #ids), -1)
      for i = #got, 1, -1 do ids[#ids + 1] = {got[i], l == KEYS[2]} end
    end
    inView = #ids
    local i = 0
    nextInLine = function()
      while true do
        i = i + 1
        local e = ids[i]
        if not e then return nil end
        local m = redis.call('HGET', tprefix .. e[1], 'msg')
        if m or e[2] then return e[1], m or '' end
      end
    end
  end
  if inView == 0 then return reply(1, 0, 1) end
  msgs = {}
  -- kind: 1 a unit task (a slot each), 2 past its deadline (archived
  -- unsent: no slot), 3 more units (no slot: the lane reserves them); the
  -- run next in line of the first's kind goes
  -- (kind 3: a run of them, whose units fit in the look-ahead's n
  -- slots, at least one, so that the lane reserves their slots back to
  -- back)
  local k, kind, units = 0, nil, 0
  while k < n do
    local id, m, e = nextInLine(k)
    if not id then break end
    local dl, kd, c = deadline(m), 1, cost(m)
    if dl and dl <= now then
      kd = 2
    elseif c ~= 1 then
      kd = 3
    end
    if kind and (kd ~= kind or kd == 3 and units + c > n) then break end
    kind, msgs[id], k, units = kd, m, k + 1, units + c
    if e then chosen[k] = e end
  end
  if kind == nil and chosen then
    -- nothing may go now: every key waiting is at its ceiling or paused.
    -- Early, when a task waits in later: the next take is due when the
    -- first may go (next_us less the lead is when the engine takes)
    fairDone(1)
    local first = redis.call('ZRANGE', KEYS[18], 0, 0, 'WITHSCORES')
    if first[2] then
      local wake = math.max(tonumber(first[2]) * 1000, now)
      if fairWake and fairWake < wake then wake = fairWake end
      return reply(4, wake + (tonumber(ARGV[17]) or 0), 0)
    end
    return reply(1, 0, 1)
  elseif kind == nil then
    n = 1 -- only entries whose hash is gone: the pick drops them
  elseif kind ~= 1 then
    n = k
  else
    ra[3], ra[4], ra[5], ra[6] = ahead, 0, now, k
    rres = reserve(rk, ra, nf)
    if rres.err then return rres end
    if rres[1] == 0 then
      local wait = rres[2]
      return reply(4, now + wait, 0)
    end
    n, base, interval = rres[1], rres[5], rres[6]
  end
end

-- popFair moves the parked task with the least start tag to active and
-- returns its id, or nil when none is parked (tail, ta: pending's tail
-- and its number, nil when pending is empty). A member is
-- "<cost>|<weight>|<len(key)>|<key><id>", after a "!" when its key
-- started at V (fair.lua).
local function popFair(tail, ta)
  fairInit()
  while true do
    local p = redis.call('ZPOPMIN', KEYS[15])
    if #p == 0 then return nil end
    local m, s = p[1], tonumber(p[2])
    local nk, rest = string.match(m, '^!?[^|]+|[^|]+|(%d+)|(.*)$')
    local key, id = string.sub(rest, 1, tonumber(nk)), string.sub(rest, tonumber(nk) + 1)
    if fctl and redis.call('HEXISTS', KEYS[21], 'p:' .. key) == 1 then
      -- a paused key's task waits in held, at its tag, until it resumes
      redis.call('ZADD', KEYS[22], 0, #key .. '|' .. key .. '|' .. fmt(s) .. '|' .. m)
      redis.call('PEXPIRE', KEYS[22], fttl)
    else
      -- V follows the turns in order (a task behind it, parked before
      -- a key's restart, leaves it where it is)
      if s > fv then fv = s end
      if redis.call('HINCRBY', KEYS[19], key, -1) <= 0 then redis.call('HDEL', KEYS[19], key) end
      -- not found: deleted, archived or quarantined by someone else
      if fpTake(KEYS[2], KEYS[23], tprefix, id, tail, ta) or redis.call('ZREM', KEYS[6], id) == 1 then
        redis.call('LPUSH', KEYS[3], id)
        fairPre = string.sub(m, 1, #m - #id)
        return id
      end
    end
  end
end

-- popList moves the task at the tail of list k to active (pending, on a
-- fair downstream: the tail if it is not in fair order, else the next in
-- fair order; pending found out of such tasks stays so for the rest of
-- the call, so it is not asked again)
local pendingOut = false
local function popList(k)
  if fair and k == KEYS[2] then
    if pendingOut then return nil, true end
    local tail = redis.call('LINDEX', k, -1)
    local ta = tail and tonumber(redis.call('HGET', KEYS[23], tail))
    if tail and not ta then
      return redis.call('RPOPLPUSH', k, KEYS[3]), true
    end
    local id = popFair(tail, ta)
    if not id and tail and redis.call('EXISTS', KEYS[18], KEYS[22]) == 0 then
      -- numbered, with nothing left in fair order: its member is gone
      -- (a take of an earlier version, which served pending first,
      -- dropped it), so it goes as the tail
      redis.call('HDEL', KEYS[23], tail)
      return redis.call('RPOPLPUSH', k, KEYS[3]), true
    end
    pendingOut = not id
    return id, true
  end
  return redis.call('RPOPLPUSH', k, KEYS[3]), k == KEYS[2]
end

-- pickStrict moves the next task in priority order to active. A task of a
-- priority list whose hash is gone was deleted behind shaper's back
-- (asynq's Inspector cannot find it in pending): it is dropped.
local function pickStrict()
  for _, k in ipairs(serve) do
    while true do
      local id, known = popList(k)
      if not id then break end
      if known or redis.call('EXISTS', tprefix .. id) == 1 then return id end
      redis.call('LREM', KEYS[3], 1, id)
    end
  end
  return nil
end

-- pickWeighted moves the next task in weighted order to active: the
-- level with the least tag among those with tasks (see KEYS[14]); a
-- level found empty is passed over for the rest of the call.
local tags, empty
local function pickWeighted()
  if not tags then
    tags, empty = {}, {}
    local j = 0
    for t in string.gmatch(redis.call('GET', KEYS[14]) or '', '%S+') do
      j = j + 1
      tags[j] = math.max(tonumber(t) or 0, 0)
    end
    for j = 1, 5 do tags[j] = tags[j] or 0 end
  end
  while true do
    local best
    for j = 1, 5 do
      if not empty[j] and (best == nil or tags[j] < tags[best]) then best = j end
    end
    if not best then return nil end
    local k = serve[best]
    local id, known = popList(k)
    if not id then
      empty[best] = true
    elseif known or redis.call('EXISTS', tprefix .. id) == 1 then
      -- the virtual time moves to the tag of the task taken (0 after the
      -- shift); an idle level's tag below it rejoins at it, no earlier
      local v = tags[best]
      tags[best] = v + 1 / weights[best]
      for j = 1, 5 do tags[j] = math.max(tags[j] - v, 0) end
      return id
    else
      redis.call('LREM', KEYS[3], 1, id)
    end
  end
end
local pick = weights and pickWeighted or pickStrict

local out = reply(0, 0, 0)
local exp = now_s + lease
local count, drained = 0, 0
for j = 0, n - 1 do
  local s = base + j * interval
  if s < now then s = now end
  if s - now > ahead then break end
  fairPre = nil
  local id
  if chosen then
    id = pickChosen(rres and s)
  else
    id = pick()
  end
  if id == nil then
    drained = 1
    break
  end
  -- false: a lined-up task that left meanwhile (its slot goes unused)
  if id then
    local tk = tprefix .. id
    if fairPre then
      -- so that a retry of it goes back to fair order (forward)
      redis.call('HSET', tk, 'state', 'active', 'shaper_fair', fairPre)
    else
      redis.call('HSET', tk, 'state', 'active')
    end
    redis.call('HDEL', tk, 'pending_since')
    redis.call('ZADD', KEYS[4], exp, id)
    out[#out + 1] = id
    out[#out + 1] = msgs and msgs[id] or redis.call('HGET', tk, 'msg') or ''
    out[#out + 1] = s
    local prio = 3
    if levels then prio = tonumber(redis.call('HGET', tk, 'shaper_priority') or '3') or 3 end
    out[#out + 1] = prio
    count = count + 1
    if lcap > 0 and rres then
      -- its place among the calls in flight, held from now to its call's
      -- end (member "<token><id>|": no key, as no key cap applies)
      redis.call('ZADD', KEYS[24 + nres], now + llease, ltoken .. id .. '|')
      redis.call('HINCRBY', KEYS[25 + nres], '', 1)
    end
  end
end
if lcap > 0 and rres and count > 0 then
  local ms = math.ceil(llease / 1000) + 1000
  redis.call('PEXPIRE', KEYS[24 + nres], ms)
  redis.call('PEXPIRE', KEYS[25 + nres], ms)
end
fairDone(drained)
if tags then
  if drained == 1 then
    redis.call('DEL', KEYS[14])
  else
    local t = {}
    for j = 1, 5 do t[j] = string.format('%.17g', tags[j]) end
    redis.call('SET', KEYS[14], table.concat(t, ' '), 'PX', 60000 + math.ceil(2 * interval / 1000))
  end
end
if count == 0 then return reply(1, 0, 1) end

local nxt = base + count * interval
if bucket then
  redis.call('SET', KEYS[1], nxt, 'PX', math.ceil((nxt - now + burst) / 1000) + MARGIN_MS)
end
if rres then nxt = rres[3] end
if nxt < now then out[3] = now else out[3] = nxt end
out[4] = drained
if rres then
  -- the reply's now is when the script ends: the caller places the slots
  -- on its clock from when the reply comes, and a take of many tasks
  -- runs for milliseconds after the reservation's TIME
  local t = redis.call('TIME')
  out[2] = math.max(tonumber(t[1]) * 1000000 + tonumber(t[2]), now)
end
return out
