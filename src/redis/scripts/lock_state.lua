-- Lock state snapshot. KEYS[1] lock name; KEYS[2] dlock_lock_queue:{name}.
-- Returns {type, pttl, {field1, value1, ...}, {queued member, ...}}
-- (fields only for a hash; queue members oldest first).
local t = redis.call('type', KEYS[1]).ok
local ttl = redis.call('pttl', KEYS[1])
local fields = {}
if t == 'hash' then
  fields = redis.call('hgetall', KEYS[1])
end
local queue = {}
if redis.call('type', KEYS[2]).ok == 'zset' then
  queue = redis.call('zrange', KEYS[2], 0, 99)
end
return {t, ttl, fields, queue}
