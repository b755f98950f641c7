-- keyceiling.lua: a per-key ceiling on a downstream's releases (GCRA
-- without a burst), decided before a lane reserves slots for its waiters.
-- Each key's state is its tat: the earliest start its next slot may have.
-- A lane claims keys first: a candidate's key whose tat has come (at most
-- now) is claimed, and its tat becomes a provisional "lo:hi", where
-- hi = now + hold + interval is past any slot the lane may then reserve
-- for it (the lane reserves only slots starting within hold of now) plus
-- the interval, and lo = now + interval is the least its exact tat can
-- be. Until settled, nobody may claim the key before hi. The lane then
-- reserves one slot per claim and settles each claim in a later call
-- (first thing, before any claim): a used claim's tat becomes its slot's
-- start plus the interval, an unused claim's is deleted (the key had no
-- slot: its tat was at most now when claimed). A key's slots are thus at
-- least the interval apart, whichever processes claim it.
--
-- KEYS[1..n] -> each key's tat: STRING, µs since the epoch on the Redis
--               clock, or "lo:hi" while claimed (absent: none)
-- ARGV[1] -> interval, µs
-- ARGV[2] -> hold, µs: the furthest after now a claimed key's slot may start
-- ARGV[3] -> margin, ms: a tat key lives this long past its tat (or hi)
-- ARGV[4] -> now in µs, or 0 to read Redis TIME (tests only)
-- ARGV[5] -> want: claim at most this many candidates
-- ARGV[6] -> s: the settlements that follow
-- ARGV[7 .. 6+3s] -> key index (1-based, into KEYS), the claim's "lo:hi"
--                    as this script wrote it, and the tat to settle it at
--                    (µs), or "" to delete it; a key whose value is no
--                    longer that claim is left alone
-- ARGV[7+3s ..]   -> the candidates in the order they may claim, each the
--                    index (1-based) of its key in KEYS; a key is claimed
--                    at most once a call
--
-- Reply: {now, c_1 .. c_k, t_1 .. t_n}: now is the script's time (µs; a
--   claim's value is "<now+interval>:<now+hold+interval>"); c_i is 1 when
--   candidate i claimed its key, else 0; t_i is KEYS[i]'s tat after the
--   call, a claimed key's lo (0: none). Settled keys need not be among
--   the candidates.
-- TTL: a tat or claim written gets (tat or hi) - now + margin: past it,
-- the key carries nothing more than an absent one.
if redis.replicate_commands then redis.replicate_commands() end

local iv, hold, margin, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local want, s = tonumber(ARGV[5]), tonumber(ARGV[6])
if not now or now <= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- set writes a tat or claim that carries state until until_ (µs)
local function set(key, until_, value)
  local ttl = math.max(math.ceil((until_ - now) / 1000), 0) + margin
  redis.call('SET', key, value, 'PX', ttl)
end

local function fmt(x) return string.format('%.0f', x) end

-- each key's value, then the claims of earlier calls settled
local n = #KEYS
local cur = {}
if n > 0 then cur = redis.call('MGET', unpack(KEYS)) end
for i = 0, s - 1 do
  local k = tonumber(ARGV[7 + 3 * i])
  if cur[k] == ARGV[8 + 3 * i] then
    local v = ARGV[9 + 3 * i]
    if v == '' then
      redis.call('DEL', KEYS[k])
      cur[k] = false
    else
      set(KEYS[k], tonumber(v), v)
      cur[k] = v
    end
  end
end

-- each key's tat (lo for a claim) and the time before which it may not
-- be claimed (hi for a claim)
local tat, block = {}, {}
for i = 1, n do
  local v = cur[i]
  local lo, hi = nil, nil
  if v then lo, hi = string.match(v, '^(%d+):(%d+)$') end
  if lo then
    tat[i], block[i] = tonumber(lo), tonumber(hi)
  else
    tat[i] = tonumber(v) or 0
    block[i] = tat[i]
  end
end

local reply = {now}
local claimed = 0
local lo, hi = now + iv, now + hold + iv
local claim = fmt(lo) .. ':' .. fmt(hi)
for c = 7 + 3 * s, #ARGV do
  local k = tonumber(ARGV[c])
  local got = 0
  if claimed < want and block[k] <= now then
    got = 1
    claimed = claimed + 1
    tat[k], block[k] = lo, hi
    set(KEYS[k], hi, claim)
  end
  reply[#reply + 1] = got
end
for i = 1, n do reply[#reply + 1] = tat[i] end
return reply
