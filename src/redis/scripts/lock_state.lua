-- Lock state snapshot. KEYS[1] lock name.
-- Returns {type, pttl, field1, value1, ...} (fields only for a hash).
local t = redis.call('type', KEYS[1]).ok
local ttl = redis.call('pttl', KEYS[1])
if t ~= 'hash' then
  return {t, ttl}
end
local out = {t, ttl}
local all = redis.call('hgetall', KEYS[1])
for i = 1, #all do
  out[#out + 1] = all[i]
end
return out
