-- take_fairline.lua: the fair line of a reserving take, and the pick of
-- what a line chose: take.lua's chunk goes on here (internal/lua runs
-- take.lua, this file, take_lists.lua and take_pick.lua as one script,
-- so this part uses take.lua's locals and the next ones use this one's).
--
-- KEYS[15..23] (fair.lua's keys) and ARGV[18..21] (the key ceilings): as
-- take.lua's header gives them.
-- key ceilings of a fair downstream whose take reserves (ARGV[18..21]):
-- a key's slots are at least its ceiling's interval apart, across every
-- process (a tat STRING per key, ARGV[20] and the key)
local kcPer, kcTol = tonumber(string.match(ARGV[18] or '', '^%d+')) or 0, tonumber(ARGV[19]) or 0
local kcPrefix, kcMargin = ARGV[20] or '', tonumber(ARGV[21]) or 1000
-- the keys with ceilings of their own (ARGV[18] "<default>@<fallback>"):
-- keyrates.lua's HASH, KEYS[27+R], "k:<key>" -> µs; while it is missing
-- (a flush: its writer puts it back), every key gets the fallback, the
-- slowest of them, so that none goes faster than its own
local kcHash = string.match(ARGV[18] or '', '@(%d+)$')
local kcLive
local function ownPer(key)
  if not kcHash then return nil end
  local h = KEYS[27 + (tonumber(ARGV[16] or '0') or 0)]
  if kcLive == nil then kcLive = redis.call('EXISTS', h) == 1 end
  if not kcLive then return tonumber(kcHash) end
  return tonumber(redis.call('HGET', h, 'k:' .. key) or '')
end

-- ceilingOf is key's ceiling: µs between its slots of one unit,
-- stretched by the late tolerance (µs per second of interval), so that
-- releases up to that late keep any second at the key's rate + 1; 0:
-- none. An operator's rate for
-- the key (controls "r:<key>", "<rate>/<period µs>") comes first.
local function ceilingOf(key)
  if kcPrefix == '' then return 0 end
  local per = fairCtlPer(KEYS[21], fctl, key) or ownPer(key) or kcPer
  if per <= 0 then return 0 end
  return per + math.ceil(per * kcTol / 1000000)
end

-- blockedUntil is the earliest start key's next slot may have (µs): its
-- tat; 0 when none
local function blockedUntil(key)
  return tonumber(redis.call('GET', kcPrefix .. key) or '') or 0
end

-- fairLine lines up a fair downstream's next tasks for a reserving take,
-- in the order popList would take them: the tasks at the tail of pending
-- not in fair order (all of the tail, numbered or not, when nothing is
-- parked, later or held), then the parked tasks by start tag. A paused
-- key's task goes to held on the way (as popFair moves it); an entry
-- whose task is gone is dropped; a parked task whose key is at its cap
-- on calls in flight goes to held (capHold: a call of its key that ends
-- brings it back), and one at the tail stops the tail there; a task
-- whose key is at its ceiling at
-- the slot it would get (est(j), the start of slot j) goes to later,
-- due at its tat (fairWake: the first such tat), and so do the key's
-- other tasks met (toLater): a ceilinged key gets one slot a take, and
-- parked holds no task that cannot go; the ones due come back first. It
-- returns nextInLine and how many entries may be in view;
-- nextInLine(j) gives id, msg and the entry (pickChosen's).
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
    local _, _, c, ws = fairDec(m)
    redis.call('ZREM', KEYS[15], m)
    local nb = tonumber(redis.call('HGET', KEYS[20], key) or '0') or 0
    local due = math.max(nb, math.ceil(seen[key] / 1000))
    redis.call('HSET', KEYS[20], key, fmt(due + c * iv / 1000))
    redis.call('ZADD', KEYS[18], fmt(due), (string.gsub(m, '^!', '')))
    redis.call('HINCRBYFLOAT', KEYS[16], key, -c / fairWeight(KEYS[21], fctl, key, ws))
    for _, k in ipairs({KEYS[16], KEYS[18], KEYS[20]}) do redis.call('PEXPIRE', k, fttl) end
  end
  -- the tasks a ceiling put in later (numbered: waiting in pending) that
  -- are due get their turns now, as fair.lua's feed would at its next
  -- call (a task with a ProcessAt, not numbered, is left to the feed)
  if kcPrefix ~= '' then
    local fed = false
    local nowms = math.ceil(now / 1000) -- due within this ms: a tat in µs rounds up to it
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[18], '-inf', nowms, 'LIMIT', 0, n + 16)) do
      local id, key, c, ws = fairDec(m)
      if redis.call('HEXISTS', KEYS[23], id) == 1 then
        redis.call('ZREM', KEYS[18], m)
        local t, fresh = fairTurn(KEYS[16], key, c, fairWeight(KEYS[21], fctl, key, ws), fv)
        redis.call('ZADD', KEYS[15], fmt(t), fairInTurn(m, fresh))
        fed = true
      end
    end
    if fed then
      for _, k in ipairs({KEYS[15], KEYS[16]}) do redis.call('PEXPIRE', k, fttl) end
    end
  end
  -- orphans: nothing is parked, later or held, so the whole tail goes
  -- (asked once, at the first numbered tail task)
  local orphans
  local tails = redis.call('LRANGE', KEYS[2], -n, -1)
  local ti, tailsOut = #tails + 1, false
  local ms, mi = nil, -1
  local function nextParked(j)
    if not ms then ms = redis.call('ZRANGE', KEYS[15], 0, 3 * n + 15, 'WITHSCORES') end
    while true do
      mi = mi + 2
      local m, s = ms[mi], tonumber(ms[mi + 1])
      if not m then return nil end
      local id, key = fairDec(m)
      if pausedKey(key) then
        toHeld(m, key, s)
      else
        local h = redis.call('HMGET', tprefix .. id, 'msg', 'state')
        if not h[1] or (h[2] ~= 'pending' and h[2] ~= 'scheduled') then
          -- deleted, archived or quarantined by someone else
          redis.call('ZREM', KEYS[15], m)
          redis.call('HDEL', KEYS[23], id)
          uncount(key)
        elseif keyFull(key) then
          capHold(KEYS[22], KEYS[15], m, key, s, fttl)
        else
          local iv, ok = ceilinged(key, j)
          if ok then
            kcapLine(key)
            return id, h[1], {id = id, m = m, s = s, key = key, iv = iv}
          end
          toLater(m, key, iv)
        end
      end
    end
  end
  local nextInLine = function(j)
    while not tailsOut do
      ti = ti - 1
      local id = tails[ti]
      if not id then break end
      local numbered = redis.call('HEXISTS', KEYS[23], id) == 1
      if numbered and orphans == nil then
        orphans = redis.call('EXISTS', KEYS[15], KEYS[18], KEYS[22]) == 0
      end
      if numbered and not orphans then break end
      local h = redis.call('HMGET', tprefix .. id, 'msg', 'shaper_fair')
      local iv, ok = 0, true
      local nk, rest = string.match(h[2] or '', '^!?[^|]+|[^|]+|(%d+)|(.*)$')
      -- its key: from its member when it was taken from fair order
      -- before, else its admission key (one enqueued and not parked yet,
      -- or by asynq's own Client)
      local key = rest and string.sub(rest, 1, tonumber(nk)) or header(h[1] or '', 'shaper-key')
      if keyFull(key) then break end
      if key then iv, ok = ceilinged(key, j) end
      if not ok then break end
      kcapLine(key)
      return id, h[1] or '', {id = id, tail = true, numbered = numbered, key = key, iv = iv}
    end
    -- the tail stops here: one not taken now stays the tail, and a
    -- parked task is taken from the middle of pending around it
    tailsOut = true
    return nextParked(j)
  end
  -- in view: the tail, and what nextParked may find (a line that finds
  -- nothing ends the take as empty, or early when a task waits in later)
  return nextInLine, #tails + 1, ceilinged
end

-- levelTags: the weighted levels' tags after the last task pickChosen
-- took from a levelsLine (take_pick.lua writes them as pickWeighted's)
local levelTags

-- pickChosen takes the next of the tasks a line lined up (chosen),
-- nil when none is left, false when its task is no longer where it was
-- (its slot goes unused), and sets its key's ceiling at slot s; then the
-- task's key
local ci = 0
local function pickChosen(s)
  ci = ci + 1
  local e = chosen[ci]
  if not e then return nil end
  local id = nil
  if e.from then
    -- from its list (pending, a priority list) near its tail (listLine,
    -- levelsLine), as RPOPLPUSH moves the tail
    if redis.call('LREM', e.from, -1, e.id) == 1 then
      redis.call('LPUSH', KEYS[3], e.id)
      id = e.id
    end
  elseif e.tail then
    id = redis.call('RPOPLPUSH', KEYS[2], KEYS[3])
    if e.numbered then redis.call('HDEL', KEYS[23], id) end
  else
    redis.call('ZREM', KEYS[15], e.m)
    if e.s > fv then fv = e.s end
    uncount(e.key)
    local tail = redis.call('LINDEX', KEYS[2], -1)
    local ta = tail and tonumber(redis.call('HGET', KEYS[23], tail))
    if fpTake(KEYS[2], KEYS[23], tprefix, e.id, tail, ta) or redis.call('ZREM', KEYS[6], e.id) == 1 then
      redis.call('LPUSH', KEYS[3], e.id)
      fairPre, id = string.sub(e.m, 1, #e.m - #e.id), e.id
    end
  end
  if not id then return false end
  if e.t then levelTags = e.t end
  if e.iv > 0 and s then
    local tat = s + e.iv * (e.c or 1)
    redis.call('SET', kcPrefix .. e.key, string.format('%.0f', tat), 'PX', math.max(math.ceil((tat - now) / 1000), 0) + kcMargin)
  end
  return id, e.key
end
