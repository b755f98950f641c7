-- breaker.lua: a downstream's circuit breaker, shared by every process.
--
-- Closed, outcomes are counted in a sliding window of 10 buckets (a tenth
-- of the window each); when the window holds at least min_calls calls and
-- errors / calls reaches the ratio, the breaker opens: nothing is released
-- for the cool-down. The first "probe" call after the cool-down turns it
-- half-open: probes are granted at the probe pace, one at a time across
-- every process; a probe that fails reopens it with twice the cool-down
-- (capped), and `probes` successes close it. Outcomes of releases made in
-- another state (calls in flight when it opened, probes of an earlier
-- half-open spell) are ignored.
--
-- KEYS[1] -> HASH: st (0 closed, 1 open, 2 half-open; absent: closed),
--            since (µs of the last transition), until (µs, end of the
--            cool-down), cd (µs, the cool-down in force), pn (µs, the
--            next probe's earliest start), ok (probes that succeeded),
--            c<i> / e<i> (calls / errors in window bucket i = now / (window/10))
-- ARGV[1]  -> op: "report" (count outcomes) or "probe" (may a release go?)
-- ARGV[2]  -> now in µs, or 0 to read Redis TIME (explicit now is for tests)
-- ARGV[3]  -> window in µs
-- ARGV[4]  -> min calls
-- ARGV[5]  -> error ratio in parts per million
-- ARGV[6]  -> cool-down in µs (the first opening's)
-- ARGV[7]  -> max cool-down in µs
-- ARGV[8]  -> probe interval in µs
-- ARGV[9]  -> probes that must succeed to close
-- ARGV[10] -> report: "closed" (outcomes of releases made while closed) or
--             "probe" (outcomes of probes)
-- ARGV[11] -> report, probe: the since of the half-open state they were granted in
-- ARGV[12] -> report: calls
-- ARGV[13] -> report: errors among them
--
-- Output: {state, since_us, until_us, moved, granted, wait_us, now_us}
--   moved: 1 when this call made a transition (to state);
--   granted (probe): 1 when a release may go now (closed, or a probe slot);
--   wait_us (probe): how long until the next chance (open: the cool-down
--   left; half-open: the next probe slot).
-- Errors: a threshold that is not a positive integer.
-- TTL: closed, the window plus a margin (its buckets carry no state after
-- it); open or half-open, the cool-down left plus the max cool-down plus a
-- margin, so an escalated cool-down outlives a quiet half-open spell, and
-- a breaker left alone that long is forgotten (closed).
--
-- internal/lua prepends prelude_clock.lua (now_us).

local MARGIN_MS = 1000
local N = 10
local key = KEYS[1]
local op = ARGV[1]
local arg = {}
for i = 3, 9 do
  arg[i] = tonumber(ARGV[i])
  if arg[i] == nil or arg[i] < 1 or arg[i] ~= math.floor(arg[i]) then
    return redis.error_reply('breaker: ARGV[' .. i .. '] must be a positive integer')
  end
end
local window, mincalls, ppm, base, maxcd, probeiv, probes = arg[3], arg[4], arg[5], arg[6], arg[7], arg[8], arg[9]
local now = now_us(ARGV[2])

local old, h = {}, {}
local raw = redis.call('HGETALL', key)
for i = 1, #raw, 2 do
  old[raw[i]] = raw[i + 1]
  h[raw[i]] = tonumber(raw[i + 1])
end
local st = h.st or 0
local moved = 0

local function clearWindow()
  for k in pairs(h) do
    local c = string.sub(k, 1, 1)
    if c == 'c' and k ~= 'cd' or c == 'e' then h[k] = nil end
  end
end

local function move(to)
  st, moved = to, 1
  h.st, h.since = to, now
  if to == 0 then
    h['until'], h.cd, h.pn, h.ok = nil, nil, nil, nil
    clearWindow()
  elseif to == 1 then
    h.pn, h.ok = nil, nil
    clearWindow()
    h['until'] = now + h.cd
  else
    h.pn, h.ok = now, 0
  end
end

local granted, wait = 0, 0
if op == 'report' then
  local kind, psince = ARGV[10], tonumber(ARGV[11])
  local calls, errs = tonumber(ARGV[12]) or 0, tonumber(ARGV[13]) or 0
  if st == 0 and kind == 'closed' and calls > 0 then
    local bw = math.ceil(window / N)
    local cur = math.floor(now / bw)
    local total, bad = 0, 0
    for k, v in pairs(h) do
      local c, i = string.sub(k, 1, 1), tonumber(string.sub(k, 2))
      if (c == 'c' or c == 'e') and i then
        if i <= cur - N then
          h[k] = nil -- past the window
        elseif c == 'c' then
          total = total + v
        else
          bad = bad + v
        end
      end
    end
    local ck, ek = string.format('c%d', cur), string.format('e%d', cur)
    h[ck] = (h[ck] or 0) + calls
    total = total + calls
    if errs > 0 then
      h[ek] = (h[ek] or 0) + errs
      bad = bad + errs
    end
    if total >= mincalls and bad * 1000000 >= ppm * total then
      h.cd = base
      move(1)
    end
  elseif st == 2 and kind == 'probe' and psince == h.since then
    if errs > 0 then
      h.cd = math.min((h.cd or base) * 2, maxcd)
      move(1)
    else
      h.ok = (h.ok or 0) + calls
      if h.ok >= probes then move(0) end
    end
  end
elseif op == 'probe' then
  if st == 1 and now >= (h['until'] or 0) then move(2) end
  if st == 0 then
    granted = 1
  elseif st == 1 then
    wait = h['until'] - now
  elseif now >= (h.pn or 0) then
    granted = 1
    h.pn = now + probeiv
  else
    wait = h.pn - now
  end
else
  return redis.error_reply('breaker: unknown op ' .. tostring(op))
end

-- write what changed
local del, set = {}, {}
for k in pairs(old) do
  if h[k] == nil then del[#del + 1] = k end
end
for k, v in pairs(h) do
  local s = string.format('%d', v)
  if old[k] ~= s then
    set[#set + 1] = k
    set[#set + 1] = s
  end
end
if #del > 0 then redis.call('HDEL', key, unpack(del)) end
if #set > 0 then redis.call('HSET', key, unpack(set)) end
if #del > 0 or #set > 0 then
  local ms = math.ceil(window / 1000) + MARGIN_MS
  if st ~= 0 then ms = math.ceil((math.max((h['until'] or now) - now, 0) + maxcd) / 1000) + MARGIN_MS end
  redis.call('PEXPIRE', key, ms)
end
return {st, h.since or 0, h['until'] or 0, moved, granted, wait, now}
