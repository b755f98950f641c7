-- take.lua: reserve up to N slots on one downstream's bucket and take one
-- task from asynq's pending list for each, atomically (shaping/take).
-- The script goes on in take_fairline.lua (a fair downstream's line for a
-- reserving take) and take_pick.lua (the reservation, the picks and the
-- moves): internal/lua runs the three as one chunk, after the preludes.
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
-- retention are deleted (at most 100); on a fair downstream without a cap
-- per key (ARGV[26]), tasks held at such a cap go back to fair order (at
-- most 100).
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
--            ARGV[28..] (shaping.lua's ARGV; the take sets its max wait
--            to the look-ahead, its mode to 0, its now and its slots to
--            what the lists and the budget allow), so the rate, the
--            quotas and the announced limit are decided where the task
--            moves, for the run of tasks of one cost (their msg's header
--            "shaper-cost") next in line: one unit each, or, for a run of
--            tasks of more units (as many as their units fit in the
--            look-ahead's slots, at least one), a slot of that many units
--            each, up to ARGV[27] units (a task of more is taken without
--            a slot, and its caller refuses it); a run of tasks past their
--            deadline ("shaper-deadline") is taken without a slot or a
--            reservation (the caller archives them), so that no slot goes
--            to a task that cannot use it.
--            In line is the order the take picks (FIFO, priority,
--            strict or weighted, or fair order: the tasks at the tail not
--            in fair order, then the parked ones by tag, passing over a
--            task whose key is at its ceiling, ARGV[18..21]; with priority
--            lists, strict or weighted, fair order is level 3, and a
--            level's run stops at a task whose key is at its ceiling). ARGV[1] and
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
-- ARGV[27] -> with R > 0, the most units of cost a task reserved at the
--            take may have (the downstream's max cost and its quotas'
--            limits; 0: tasks of more than one unit are not reserved)
-- ARGV[26] -> with R > 0, a cap per key on
--            calls in flight (0: none; with ARGV[22] 0, no cap in all):
--            the leases' members are "<token><id>|<key>" and the counts
--            HASH counts them per key. A key is at its cap with its
--            leases and its tasks taken before in this take. On a fair
--            downstream a parked task whose key is at its cap is held in
--            held (prelude_capheld.lua) instead, and comes back to parked
--            when a call of its key ends (concurrency.lua's release, or a
--            lease that expires, here or there); a task at the tail not
--            in fair order whose key is at its cap stays there, and the
--            take goes on with the parked ones. In first-in first-out
--            order, and in each priority list (take_lists.lua), the take
--            passes over the tasks of a key at its cap, its key being its
--            msg's "shaper-key" header, looking at most max(4 × ARGV[4],
--            64) tasks deep and 32 past the last it takes; when every
--            task in view is of such a key, status 3 (full).
-- ARGV[18..21] -> with R > 0 on a fair downstream, its key ceilings (a
--            key's slots at least its interval apart, across every
--            process; a tat STRING per key): [18] each key's interval in
--            µs for one unit (0: none), then, when keys have intervals of
--            their own, "@" and the fallback interval in µs: the keys'
--            own are in KEYS[27+R] (keyrates.lua's HASH; KEYS[26+R] must
--            then be filled), and while it is missing every key gets the
--            fallback (an operator's rate for a key in the controls
--            HASH, "r:<key>" = "<rate>/<period µs>", comes before all of
--            them), [19] the late tolerance in µs, which stretches an
--            interval by that many µs per second of it, [20] the tat
--            keys' prefix (the key name follows; "": no ceilings), [21]
--            how long a tat key outlives its tat, ms. A ceilinged key
--            takes at most one slot a take, one starting at or after its
--            tat, and its tat becomes that slot plus its interval.
--
-- Output: {status, now_us, next_us, drained, recovered, forwarded,
--          L, then L fields: shaping.lua's reply to the reservation (L = 0
--          without one; with one, L >= 8 whenever the reservation ran),
--          then per task taken: id, msg, slot_us, priority, lease key,
--          units, left}
--   status: 0 taken (at least one task), 1 empty (pending had none),
--           2 paused, 3 full (budget spent, or every task in view is
--           of a key at its cap in first-in first-out order), 4 early (the first slot starts
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
--   (its hash's "shaper_priority", 3 when none or without priority lists);
--   lease key is the key of its lease under a cap per key (ARGV[26]), ""
--   otherwise; units are the units of cost its slot holds (0: it was
--   taken without a reservation); left is how many tasks of its key
--   still wait in fair order after it (-1: not taken from fair order).
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
-- turnsNow is the weighted levels' tags as KEYS[14] holds them (five
-- numbers, each 0 when missing)
local function turnsNow()
  local t, j = {}, 0
  for v in string.gmatch(redis.call('GET', KEYS[14]) or '', '%S+') do
    j = j + 1
    t[j] = math.max(tonumber(v) or 0, 0)
  end
  for l = 1, 5 do t[l] = t[l] or 0 end
  return t
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

-- pausedKey reports whether the operator paused key (fairInit first)
local function pausedKey(key) return fctl and redis.call('HEXISTS', KEYS[21], 'p:' .. key) == 1 end

-- toHeld moves parked member m (tag s) of a paused key to held, where it
-- waits at its tag until the key resumes (fair.lua's resume)
local function toHeld(m, key, s)
  redis.call('ZREM', KEYS[15], m)
  redis.call('ZADD', KEYS[22], 0, #key .. '|' .. key .. '|' .. fmt(s) .. '|' .. m)
  redis.call('PEXPIRE', KEYS[22], fttl)
end

-- uncount counts one task of key fewer in fair order (counts); fairLeft
-- is then how many of key's tasks still wait there (the reply's "left")
local fairLeft = -1
local function uncount(key)
  local c = redis.call('HINCRBY', KEYS[19], key, -1)
  if c <= 0 then redis.call('HDEL', KEYS[19], key) end
  fairLeft = math.max(c, 0)
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
  -- tasks held at a cap per key that this take does not have (ARGV[26]:
  -- key_concurrency removed) go back to fair order, 100 at a time
  if fair and (tonumber(ARGV[26]) or 0) <= 0 then capUnholdAll(KEYS[22], KEYS[15], 100, fttl) end
  -- an idle queue's periodic maintenance ends here, cheaply
  if waiting() == 0 then return {1, now, 0, 1, recovered, forwarded, 0} end
end

-- a cap per key on calls in flight (ARGV[26]; 0: none): keyFull tells
-- whether key is at it, its leases (the counts HASH) and its tasks lined
-- up by this take counted
local kcap = tonumber(ARGV[26]) or 0
local kcapCounts = KEYS[25 + (tonumber(ARGV[16] or '0') or 0)]
local kcapLined, kcapHeld = {}, {}
local function keyFull(key)
  if kcap <= 0 or not key or key == '' then return false end
  -- its leases, read once a take (a take moves no lease of another's)
  local c = kcapHeld[key]
  if c == nil then
    c = tonumber(redis.call('HGET', kcapCounts, key) or '0') or 0
    kcapHeld[key] = c
  end
  return c + (kcapLined[key] or 0) >= kcap
end
-- kcapLine counts a task of key lined up by this take (keyFull counts it)
local function kcapLine(key)
  if key then kcapLined[key] = (kcapLined[key] or 0) + 1 end
end

-- the reservation (ARGV[16]): shaping.lua's KEYS and ARGV, its reply, and
-- the msgs of the tasks it reserved for, read before it
local rk, ra, rres, msgs

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
