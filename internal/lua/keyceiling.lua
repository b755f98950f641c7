-- keyceiling.lua: a per-key ceiling on a downstream's releases (GCRA, no
-- burst), decided when a lane hands its reserved slots to its waiters.
-- Each key's state is its tat: the earliest slot start its next release
-- may take. For each slot in order, the slot goes to the first candidate
-- not yet given one whose key's tat is at most the slot's start, and that
-- key's tat becomes the slot's start plus the interval. A slot no
-- candidate may take is given to none (the caller wastes it). Slots of
-- one key are thus at least the interval apart, whichever processes hold
-- its tasks.
--
-- KEYS[1..n] -> the tat of each candidate key: STRING, µs since the epoch
--               on the Redis clock (absent: no ceiling pending)
-- ARGV[1] -> interval: µs a slot taken moves its key's tat past the slot
-- ARGV[2] -> margin, ms: a tat key lives this long past its tat
-- ARGV[3] -> now in µs, or 0 to read Redis TIME (tests only)
-- ARGV[4] -> m: the number of slots
-- ARGV[5 .. 4+m] -> the slots' starts, µs, in order
-- ARGV[5+m ..]   -> the candidates in the order they may take a slot,
--                   each the index (1-based) of its key in KEYS
--
-- Reply: {a_1 .. a_m, t_1 .. t_n}: a_j is the candidate (1-based position
--   among the candidates) given slot j, 0 for none; t_i is KEYS[i]'s tat
--   after the call (0: none).
-- TTL: a tat key written gets tat - now + margin; a key past its tat
-- carries nothing more than an absent one, so it may expire any time
-- after (the margin covers the gap between the slot and now).
if redis.replicate_commands then redis.replicate_commands() end

local iv, margin, now, m = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if not now or now <= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local n = #KEYS
local tat, changed = {}, {}
if n > 0 then
  local cur = redis.call('MGET', unpack(KEYS))
  for i = 1, n do tat[i] = tonumber(cur[i]) or 0 end
end

local cands = {}
for i = 5 + m, #ARGV do cands[#cands + 1] = tonumber(ARGV[i]) end
local given, reply = {}, {}
for j = 1, m do
  local slot = tonumber(ARGV[4 + j])
  local got = 0
  for c = 1, #cands do
    local k = cands[c]
    if not given[c] and tat[k] <= slot then
      got = c
      given[c] = true
      tat[k] = slot + iv
      changed[k] = true
      break
    end
  end
  reply[j] = got
end

for i = 1, n do
  if changed[i] then
    local ttl = math.max(math.ceil((tat[i] - now) / 1000), 0) + margin
    redis.call('SET', KEYS[i], string.format('%.0f', tat[i]), 'PX', ttl)
  end
  reply[m + i] = tat[i]
end
return reply
