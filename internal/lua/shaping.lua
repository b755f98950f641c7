-- shaping.lua: leaky bucket in shaping mode (one next_free timestamp).
--
-- A reservation is a slot: start = max(now, next_free), and the caller waits
-- start-now before it releases. With a burst b > 1, next_free may lag now by
-- up to (b-1) intervals (GCRA), so an idle bucket lets b releases through at
-- once; with b = 1 releases are spaced by exactly one interval.
--
-- KEYS[1] -> STRING next_free (µs since the epoch)
-- ARGV[1] -> interval in µs this cost occupies (ceil(cost * period/rate));
--            mode 2: how long to push next_free past now
-- ARGV[2] -> burst allowance in µs: (burst-1) * interval of one unit
-- ARGV[3] -> max wait in µs: reserve only if start-now <= this (-1: no limit)
-- ARGV[4] -> mode: 0 reserve, 1 peek (never writes), 2 push back, 3 reset
--            (delete next_free)
-- ARGV[5] -> now in microseconds, or 0 to read Redis TIME (explicit now is for tests)
-- ARGV[6] -> mode 0 only: reserve up to this many consecutive slots of
--            interval each, as many as start within max wait (default 1), so
--            one call serves a process's queue of waiting workers (at most 1000)
--
-- Output: {reserved count (0 = none), wait_us, next_free_us after, now_us, base_us}
--   Slot j (0-based) starts at max(base_us + j*interval, now_us).
--   Not reserved: nothing was written and wait_us is the wait this
--   reservation would have had (queue depth = wait × rate is past capacity).
-- Errors: ARGV[1] or ARGV[2] not an integer in [0, MAX_US] (24 h, the Go
--   side's shaping.MaxInterval): no cost or pushback moves next_free further.
-- TTL: until next_free (plus the burst allowance) is in the past, plus a
-- margin: after that the key carries no state.
if redis.replicate_commands then redis.replicate_commands() end

local MARGIN_MS = 1000
local MAX_US = 86400000000
local key = KEYS[1]
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local maxwait = tonumber(ARGV[3])
local mode = tonumber(ARGV[4])
local now = tonumber(ARGV[5])
local function bounded(v)
  return v ~= nil and v >= 0 and v <= MAX_US and v == math.floor(v)
end
if not bounded(interval) or not bounded(burst) then
  return redis.error_reply('shaping: interval and burst must be integers in [0, ' .. MAX_US .. '] us')
end
if now == nil or now <= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

if mode == 3 then
  redis.call('DEL', key)
  return {1, 0, 0, now, now}
end

local nf = tonumber(redis.call('GET', key) or '0')

if mode == 2 then
  local target = now + interval
  if nf < target then
    nf = target
    redis.call('SET', key, nf, 'PX', math.ceil((nf - now + burst) / 1000) + MARGIN_MS)
  end
  return {1, nf - now, nf, now, nf}
end

local base = nf
if base < now - burst then base = now - burst end
local start = base
if start < now then start = now end
local wait = start - now
if maxwait >= 0 and wait > maxwait then
  return {0, wait, nf, now, base}
end
if mode == 1 then
  return {1, wait, base + interval, now, base}
end
local n = tonumber(ARGV[6] or '1') or 1
if n < 1 then n = 1 end
if n > 1000 then n = 1000 end
local count = n
if maxwait >= 0 and interval > 0 and n > 1 then
  -- slot j starts at max(base + j*interval, now); keep those within maxwait
  local fit = math.floor((now + maxwait - base) / interval) + 1
  if fit < count then count = fit end
end
local nxt = base + count * interval
redis.call('SET', key, nxt, 'PX', math.ceil((nxt - now + burst) / 1000) + MARGIN_MS)
return {count, wait, nxt, now, base}
