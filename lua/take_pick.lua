-- take_pick.lua: the reservation, the picks and the moves of a take:
-- the end of take.lua's chunk (internal/lua runs take.lua,
-- take_fairline.lua and this file as one script; this part uses their
-- locals).
--
-- KEYS[1..], ARGV[1..] and the reply: as take.lua's header gives them.
local nres = tonumber(ARGV[16] or '0') or 0
-- a concurrency cap at the take (ARGV[22..24]): lcap 0 is none; the most
-- units a task reserved at the take may have (ARGV[27])
local lcap, llease, ltoken, maxUnits = 0, 0, '', 0
-- the units of each task of the run reserved (one cost a run)
local runCost = 1
if nres > 0 then
  if interval > 0 or burst > 0 then
    return redis.error_reply('take: a reservation serves a queue without a rate of its own')
  end
  rk, ra = {}, {}
  for i = 1, nres do rk[i] = KEYS[23 + i] end
  for i = 28, #ARGV do ra[#ra + 1] = ARGV[i] end
  if #rk ~= nres or #ra < 11 then return redis.error_reply('take: reservation keys or arguments missing') end
  lcap, llease, ltoken = tonumber(ARGV[22]) or 0, tonumber(ARGV[23]) or 0, ARGV[24] or ''
  maxUnits = tonumber(ARGV[27]) or 0
  if (lcap > 0 or kcap > 0) and (llease < 1 or KEYS[25 + nres] == nil) then
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
  if lcap > 0 or kcap > 0 then
    -- concurrency.lua's leases: expired ones go (a key's held tasks come
    -- back to its places), and no more tasks than places left among the
    -- calls in flight
    local lk, ck = KEYS[24 + nres], KEYS[25 + nres]
    -- (held only in fair order: KEYS[15..23] are fair.lua's then)
    local held = fair and KEYS[22] or nil
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', lk, '-inf', now)) do
      leaseGone(lk, ck, m, held, KEYS[15], kcap, fttl)
    end
    if lcap > 0 then
      local room = lcap - redis.call('ZCARD', lk)
      if room <= 0 then return reply(3, 0, 0) end
      if n > room then n = room end
    end
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
  if fair or kcap > 0 then
    -- a line of chosen tasks (pickChosen moves them): fair order, or
    -- pending's under a cap per key; over the priority lists, if any
    chosen = {}
    local line, inLine, ceilinged
    if fair then
      line, inLine, ceilinged = fairLine(n, function(j)
        return math.max(math.max(nf, now - b1) + j * iv1, now)
      end)
    else
      line, inLine = listLine(KEYS[2], n)
    end
    nextInLine, inView = line, inLine
    if levels then nextInLine, inView = levelsLine(n, line, inLine, ceilinged) end
  elseif weights then
    local t, seen, at = turnsNow(), {}, {}
    inView = 0
    for l = 1, 5 do
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
    if kind and (kd ~= kind or kd == 3 and (c ~= runCost or units + c > n)) then break end
    if not kind then runCost = c end
    kind, msgs[id], k, units = kd, m, k + 1, units + c
    if e then
      e.c = c
      chosen[k] = e
    end
  end
  if kind == nil and chosen and not fair then
    -- every task in view is of a key at its cap: full until a call ends
    return reply(3, 0, 0)
  elseif kind == nil and chosen then
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
  elseif kind == 2 or kind == 3 and runCost > maxUnits then
    n = k
  else
    -- a slot per task of runCost units each (a run of more units is of
    -- one cost): its interval is runCost units', its quotas' charge too
    if kind == 3 then ra[1], ra[7] = iv1 * runCost, runCost end
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
    local id, key = fairDec(m)
    if pausedKey(key) then
      toHeld(m, key, s) -- popped already: its ZREM finds nothing
    else
      -- V follows the turns in order (a task behind it, parked before
      -- a key's restart, leaves it where it is)
      if s > fv then fv = s end
      uncount(key)
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
  if not tags then tags, empty = turnsNow(), {} end
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
  fairPre, fairLeft = nil, -1
  local id, lkey
  if chosen then
    id, lkey = pickChosen(rres and s)
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
    -- its place among the calls in flight, held from now to its call's
    -- end: member "<token><id>|<key>", the key only under a cap per key
    if kcap <= 0 or not lkey then lkey = '' end
    out[#out + 1] = lkey
    -- the units its slot holds (0: none reserved here)
    out[#out + 1] = rres and runCost or 0
    out[#out + 1] = fairLeft
    count = count + 1
    if (lcap > 0 or kcap > 0) and rres then
      redis.call('ZADD', KEYS[24 + nres], now + llease, ltoken .. id .. '|' .. lkey)
      redis.call('HINCRBY', KEYS[25 + nres], lkey, 1)
    end
  end
end
if (lcap > 0 or kcap > 0) and rres and count > 0 then
  local ms = math.ceil(llease / 1000) + 1000
  redis.call('PEXPIRE', KEYS[24 + nres], ms)
  redis.call('PEXPIRE', KEYS[25 + nres], ms)
end
fairDone(drained)
if levelTags then tags = levelTags end
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
