-- answer.lua: what one downstream answer says, applied after the call.
--
-- Settle: the call really cost ARGV[1] units more (or, negative, fewer)
-- than its reservation. The bucket's next_free moves by that many unit
-- intervals (a charge at most MAX_US past now, like a push back; a refund
-- never to before now), the task's quota fields are charged or refunded
-- (never below 0; a field that stopped counting is left alone), and the
-- announced limit's `left` too. A refund never moves next_free before the
-- end of the call's actual cost (ARGV[13]).
--
-- Announce: the answer said `remaining` units are left until `until`
-- (RateLimit, X-RateLimit-* or Retry-After headers). The downstream had not
-- seen the units reserved after this task when it counted, so what is left
-- to reserve is remaining - (issued now - the task's seq). It replaces the
-- announcement stored unless that one came from a later task (a higher
-- seq) and this one is not a stricter hold (nothing left, later reset).
-- shaping.lua reads it on every reservation.
--
-- KEYS[1] -> STRING next_free (µs since the epoch; shaping.lua)
-- KEYS[2] -> HASH announced: left, until (µs), seq, remaining, limit, src, at
-- KEYS[3] -> STRING issued: units reserved so far (shaping.lua)
-- KEYS[4..] -> one HASH per quota (as in shaping.lua)
-- ARGV[1] -> cost difference in units, actual - reserved (0: none)
-- ARGV[2] -> µs one unit occupies in the bucket
-- ARGV[3] -> burst allowance in µs (the bucket's TTL, as shaping.lua)
-- ARGV[4] -> the task's slot, µs since the epoch (its quota fields)
-- ARGV[5] -> the task's seq: issued just after its own units
-- ARGV[6] -> 1: ARGV[7..10] carry an announcement; 0: none
-- ARGV[7] -> remaining units the answer announced (>= 0)
-- ARGV[8] -> when the announced window resets, µs since the epoch
-- ARGV[9] -> the announced limit in units (0: not said)
-- ARGV[10] -> where it came from: ratelimit, x-ratelimit or retry-after
-- ARGV[11] -> now in µs, or 0 to read Redis TIME (explicit now is for tests)
-- ARGV[12] -> guard in µs (as shaping.lua ARGV[8])
-- ARGV[13] -> refund floor, µs since the epoch: the task's slot plus its
--             actual cost's interval (a refund never moves next_free
--             before it, so the next release still waits out the call's
--             real cost)
-- ARGV[14..] -> four per quota KEYS[3+i] (as shaping.lua ARGV[9..])
--
-- Output: {next_free_us after, left (units the announcement in force
--          leaves; -1: none in force), stored (1: this announcement was
--          stored), now_us}
-- Errors: ARGV[2] or ARGV[3] not an integer in [0, MAX_US].
-- Runs after prelude_clock.lua (now_us).
-- TTL: next_free as shaping.lua; a quota HASH at least until the settled
-- field stops counting, plus the margin; announced until its reset (the
-- key carries nothing after it).
local MARGIN_MS = 1000
local MAX_US = 86400000000
local diff = tonumber(ARGV[1]) or 0
local unit = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local slot = tonumber(ARGV[4]) or 0
local seq = tonumber(ARGV[5]) or 0
local now = now_us(ARGV[11])
local guard = tonumber(ARGV[12]) or 0
local floor = tonumber(ARGV[13]) or 0
local function bounded(v)
  return v ~= nil and v >= 0 and v <= MAX_US and v == math.floor(v)
end
if not bounded(unit) or not bounded(burst) then
  return redis.error_reply('answer: unit interval and burst must be integers in [0, ' .. MAX_US .. '] us')
end

local nf = tonumber(redis.call('GET', KEYS[1]) or '0')
if diff ~= 0 then
  -- the bucket: as if the reservation had been diff units bigger
  local d = diff * unit
  local target = nf
  if diff > 0 then
    if target < slot then target = slot end -- the key expired meanwhile
    target = target + d
    if target > now + MAX_US then target = now + MAX_US end
  elseif nf > now then
    target = nf + d
    if target < floor then target = floor end
    if target < now then target = now end
    if target > nf then target = nf end
  end
  if target ~= nf and target >= now - burst then
    nf = target
    redis.call('SET', KEYS[1], nf, 'PX', math.ceil((nf - now + burst) / 1000) + MARGIN_MS)
  end
  -- the quotas: the field of the task's slot
  for i = 1, #KEYS - 3 do
    local a = 13 + (i - 1) * 4
    local per, sub, align = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
    if per and sub and align and per >= 1 and sub >= 1 then
      local k, g
      if align < 0 then
        k = math.floor(slot / sub)
        g = (k + 1) * sub + per + guard
      else
        k = math.floor((slot - align) / per)
        g = (k + 1) * per + align
      end
      if g > now then
        local qk = KEYS[3 + i]
        local f = string.format('%d', k)
        local c = (tonumber(redis.call('HGET', qk, f)) or 0) + diff
        if c > 0 then
          redis.call('HSET', qk, f, c)
          local need = math.ceil((g - now) / 1000) + MARGIN_MS
          if redis.call('PTTL', qk) < need then redis.call('PEXPIRE', qk, need) end
        else
          redis.call('HDEL', qk, f)
        end
      end
    end
  end
end

local cur = redis.call('HMGET', KEYS[2], 'left', 'until', 'seq')
local left, untl, cseq = tonumber(cur[1]), tonumber(cur[2]), tonumber(cur[3])
if left == nil or untl == nil or untl <= now then left = nil end
if left ~= nil and diff ~= 0 then
  left = redis.call('HINCRBY', KEYS[2], 'left', -diff)
end

local stored = 0
if ARGV[6] == '1' then
  local rem, at = tonumber(ARGV[7]) or 0, tonumber(ARGV[8]) or 0
  if at > now then
    if at > now + MAX_US then at = now + MAX_US end
    local out = (tonumber(redis.call('GET', KEYS[3]) or '0') or 0) - seq
    if out < 0 then out = 0 end
    local l = rem - out
    if l < 0 then l = 0 end
    if left == nil or cseq == nil or seq >= cseq or (l == 0 and at > untl) then
      redis.call('DEL', KEYS[2])
      redis.call('HSET', KEYS[2], 'left', l, 'until', at, 'seq', seq, 'remaining', rem,
        'limit', tonumber(ARGV[9]) or 0, 'src', ARGV[10] or '', 'at', now)
      redis.call('PEXPIRE', KEYS[2], math.ceil((at - now) / 1000))
      left, stored = l, 1
    end
  end
end
if left == nil then left = -1 end
return {nf, left, stored, now}
