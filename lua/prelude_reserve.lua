-- prelude_reserve.lua: the shaping bucket (one next_free, GCRA in shaping
-- mode) with the downstream's quotas, announced limit and priority claims,
-- for shaping.lua (a lane's reservation, a peek, a pushback, a reset) and
-- take.lua (a take that reserves the slots of the tasks it moves), so the
-- rule lives once.
--
-- Defines:
--   reserve(KEYS, ARGV, nf): shaping.lua's whole contract (its header
--     says it), on the tables given in place of the script's own KEYS and
--     ARGV; nf, when given, is next_free as the caller read it in this
--     call (not read again). It returns shaping.lua's reply, or a
--     redis.error_reply

local function reserve(KEYS, ARGV, nf0)

  local MARGIN_MS = 1000
  local ISSUED_TTL_MS = 3600000
  local MAX_US = 86400000000
  local MAX_PERIOD_US = 31622400000000 -- 366 days
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
    return {1, 0, 0, now, now, interval, 0, 0}
  end

  local nf = nf0 or tonumber(redis.call('GET', key) or '0')

  if mode == 2 then
    local target = now + interval
    if nf < target then
      nf = target
      redis.call('SET', key, nf, 'PX', math.ceil((nf - now + burst) / 1000) + MARGIN_MS)
    end
    return {1, nf - now, nf, now, nf, interval, 0, 0}
  end

  local base = nf
  if base < now - burst then base = now - burst end
  local start = base
  if start < now then start = now end
  if mode == 1 then
    local wait = start - now
    if maxwait >= 0 and wait > maxwait then
      return {0, wait, nf, now, base, interval, 0, 0}
    end
    return {1, wait, base + interval, now, base, interval, 0, 0}
  end

  -- mode 0: reserve
  local cost = tonumber(ARGV[7] or '1') or 1
  if cost < 1 then cost = 1 end
  local guard = tonumber(ARGV[8] or '0') or 0
  local nq = #KEYS - 4
  if nq < 0 then nq = 0 end
  local level = tonumber(ARGV[9] or '0') or 0
  local claimTTL = tonumber(ARGV[10] or '0') or 0
  local claimWaiting = tonumber(ARGV[11] or '0') or 0
  if #KEYS < 4 or level < 1 or level > 5 or claimTTL <= 0 then level = 0 end

  -- quotas -----------------------------------------------------------------
  local quotas = {}
  -- gone is when field k stops counting: sliding, guard after its
  -- sub-window's end plus the period; aligned, at its window's end.
  local function gone(q, k)
    if q.sliding then return (k + 1) * q.sub + q.per + guard end
    return (k + 1) * q.per + q.align
  end
  -- fk is field k's name, written in full (a number argument could be sent
  -- in exponent form)
  local function fk(k) return string.format('%d', k) end
  -- wk is the key of window (or sub-window) number k in a quota's cnt and
  -- dirty tables: a string, not the number, because window numbers are in
  -- the millions and an embedded Lua (the quick start's miniredis) would
  -- grow a table's array part up to such an integer key.
  local function wk(k) return 'w' .. string.format('%.0f', k) end

  local function win(q, t)
    if q.sliding then return math.floor(t / q.sub) end
    return math.floor((t - q.align) / q.per)
  end
  for i = 1, nq do
    local a = 11 + (i - 1) * 4
    local q = {key = KEYS[4 + i], limit = tonumber(ARGV[a + 1]), per = tonumber(ARGV[a + 2]),
               sub = tonumber(ARGV[a + 3]), align = tonumber(ARGV[a + 4]), ks = {}, cnt = {}, dirty = {}}
    if not q.limit or q.limit < 1 or not q.per or q.per < 1 or q.per > MAX_PERIOD_US or not q.sub or q.sub < 1
        or not q.align or q.align >= q.per then
      return redis.error_reply('shaping: quota ' .. i .. ': limit, period, sub-window and align out of range')
    end
    q.sliding = q.align < 0
    local raw = redis.call('HGETALL', q.key)
    local dead = {}
    for j = 1, #raw, 2 do
      local k, c = tonumber(raw[j]), tonumber(raw[j + 1])
      if k == nil or c == nil or gone(q, k) <= now then
        dead[#dead + 1] = raw[j]
      else
        q.ks[#q.ks + 1] = k
        q.cnt[wk(k)] = c
      end
    end
    if #dead > 0 then redis.call('HDEL', q.key, unpack(dead)) end
    table.sort(q.ks)
    q.lo, q.used = 1, 0
    for _, k in ipairs(q.ks) do q.used = q.used + q.cnt[wk(k)] end
    quotas[i] = q
  end

  -- advance drops from a sliding quota's count the fields that no longer
  -- count at t (t only grows during a call).
  local function advance(q, t)
    while q.lo <= #q.ks and gone(q, q.ks[q.lo]) <= t do
      q.used = q.used - q.cnt[wk(q.ks[q.lo])]
      q.lo = q.lo + 1
    end
  end

  -- earliest is the first time from t on when cost units fit in q.
  local function earliest(q, t)
    if q.sliding then
      advance(q, t)
      local u, j = q.used, q.lo
      while u + cost > q.limit and j <= #q.ks do
        u = u - q.cnt[wk(q.ks[j])]
        local g = gone(q, q.ks[j])
        if g > t then t = g end
        j = j + 1
      end
      return t
    end
    for _ = 1, 100 do
      local w = win(q, t)
      local e = (w + 1) * q.per + q.align
      if t + guard < e and (q.cnt[wk(w)] or 0) + cost <= q.limit then return t end
      t = e -- full, or the slot would straddle the window's end
    end
    return t
  end

  local function fits(q, t)
    if q.sliding then
      advance(q, t)
      return q.used + cost <= q.limit
    end
    local w = win(q, t)
    return t + guard < (w + 1) * q.per + q.align and (q.cnt[wk(w)] or 0) + cost <= q.limit
  end

  local function record(q, t)
    local k = win(q, t)
    if q.cnt[wk(k)] then
      q.cnt[wk(k)] = q.cnt[wk(k)] + cost
    else
      local p = #q.ks + 1
      while p > 1 and q.ks[p - 1] > k do p = p - 1 end
      table.insert(q.ks, p, k)
      q.cnt[wk(k)] = cost
    end
    q.dirty[wk(k)] = true
    if q.sliding then q.used = q.used + cost end
  end

  local function stats()
    local out = {}
    for _, q in ipairs(quotas) do
      local used, reset = 0, 0
      if q.sliding then
        for _, k in ipairs(q.ks) do
          if gone(q, k) > now then
            used = used + q.cnt[wk(k)]
            if reset == 0 then reset = gone(q, k) end
          end
        end
      else
        local w = win(q, now)
        used, reset = q.cnt[wk(w)] or 0, (w + 1) * q.per + q.align
      end
      if used > q.limit then used = q.limit end -- future slots count early
      out[#out + 1] = used
      out[#out + 1] = reset
    end
    return out
  end

  -- the announced limit ------------------------------------------------------
  local ann
  local issued = 0
  if #KEYS >= 3 then
    local a = redis.call('HMGET', KEYS[2], 'left', 'until')
    local left, untl = tonumber(a[1]), tonumber(a[2])
    if left ~= nil and untl ~= nil and untl > now then ann = {left = left, untl = untl} end
    issued = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
  end

  -- the first slot: the earliest time every constraint has room
  local held = 0
  for _ = 1, 32 do
    local moved = false
    if ann and start < ann.untl and ann.left < cost then
      start, moved, held = ann.untl, true, -1
    end
    for i, q in ipairs(quotas) do
      local t = earliest(q, start)
      if t > start then start, moved, held = t, true, i end
    end
    if not moved then break end
  end
  if start > base and start > now then base = start end
  if ann and start >= ann.untl then ann = nil end -- its window is over by the first slot
  local iv = interval
  if ann then
    local piv = math.ceil((ann.untl - start) * cost / ann.left)
    if piv > MAX_US then piv = MAX_US end
    if piv > iv then
      iv = piv
      if held == 0 then held = -2 end
    end
  end

  local function reply(count, wait, next_free)
    local out = {count, wait, next_free, now, base, iv, issued, held}
    for _, v in ipairs(stats()) do out[#out + 1] = v end
    return out
  end

  local wait = start - now
  local n = tonumber(ARGV[6] or '1') or 1
  if n < 1 then n = 1 end
  if n > 1000 then n = 1000 end

  -- priority claims
  local function claim(count)
    if level == 0 then return end
    if count < n or count < claimWaiting then
      redis.call('HSET', KEYS[4], level, now + claimTTL)
      redis.call('PEXPIRE', KEYS[4], math.ceil(claimTTL / 1000) + MARGIN_MS)
    else
      redis.call('HDEL', KEYS[4], level)
    end
  end
  if level > 1 then
    local lv = {}
    for l = 1, level - 1 do lv[l] = l end
    for _, u in ipairs(redis.call('HMGET', KEYS[4], unpack(lv))) do
      if tonumber(u) and tonumber(u) > now then
        held = -3
        return reply(0, wait, nf)
      end
    end
  end
  if maxwait >= 0 and wait > maxwait then
    claim(0)
    return reply(0, wait, nf)
  end
  local count = 0
  local left = ann and ann.left
  for j = 0, n - 1 do
    local s = base + j * iv
    if s < now then s = now end
    if j > 0 then
      if maxwait >= 0 and s - now > maxwait then break end
      -- past the announced reset the next call paces without it
      if ann and (s >= ann.untl or left < cost) then break end
      local ok = true
      for _, q in ipairs(quotas) do
        if not fits(q, s) then ok = false break end
      end
      if not ok then break end
    end
    for _, q in ipairs(quotas) do record(q, s) end
    if ann then left = left - cost end
    count = count + 1
  end

  local nxt = base + count * iv
  redis.call('SET', key, nxt, 'PX', math.ceil((nxt - now + burst) / 1000) + MARGIN_MS)
  claim(count)
  if ann then redis.call('HINCRBY', KEYS[2], 'left', -count * cost) end
  if #KEYS >= 3 then
    redis.call('SET', KEYS[3], issued + count * cost, 'PX', ISSUED_TTL_MS)
  end
  for _, q in ipairs(quotas) do
    local hs, last = {}, 0
    for _, k in ipairs(q.ks) do
      if q.dirty[wk(k)] then
        hs[#hs + 1] = fk(k)
        hs[#hs + 1] = q.cnt[wk(k)]
      end
      local g = gone(q, k)
      if g > last then last = g end
    end
    if #hs > 0 then
      redis.call('HSET', q.key, unpack(hs))
      redis.call('PEXPIRE', q.key, math.ceil((last - now) / 1000) + MARGIN_MS)
    end
  end
  return reply(count, wait, nxt)
end
