-- reset.lua: an operator's way out of every hold on a downstream
-- (`shaper ctl reset`): the bucket's next_free (a pushback, a cost that
-- moved it ahead), the announced limit, the quotas' counts.
--
-- KEYS[1..n] -> the keys to clear, all under one downstream's hash tag
--
-- Output: one integer per key, 1 when it held state (now deleted), 0 when
--   it did not exist, so the caller reports only what it cleared.
-- TTL: writes nothing.
local out = {}
for i, k in ipairs(KEYS) do
  out[i] = redis.call('DEL', k)
end
return out
