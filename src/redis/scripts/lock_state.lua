-- Lock state snapshot, any kind. KEYS[1] lock name; KEYS[2] the waiters:
-- dlock_lock_queue:{name} (ZSET, reentrant and fenced) or, for a fair lock,
-- redisson_lock_queue:{name} (LIST); KEYS[3] a fair lock's
-- redisson_lock_timeout:{name}, or a fenced lock's redisson_lock_token:{name}.
-- ARGV[1] kind: 'lock', 'fair', 'fenced' or 'rw'.
-- Returns {type, pttl, {field1, value1, ...}, {waiter, ...},
-- {ms until each waiter's deadline, ...}, token} (fields only for a hash;
-- waiters oldest first, at most 100; deadlines for a fair lock only).
local t = redis.call('type', KEYS[1]).ok
local ttl = redis.call('pttl', KEYS[1])
local fields = {}
if t == 'hash' then
  fields = redis.call('hgetall', KEYS[1])
end
local queue, deadlines, token = {}, {}, 0
if ARGV[1] == 'fair' then
  if redis.call('type', KEYS[2]).ok == 'list' then
    local now = redis.call('time')
    now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    queue = redis.call('lrange', KEYS[2], 0, 99)
    for i, w in ipairs(queue) do
      local s = redis.pcall('zscore', KEYS[3], w)
      deadlines[i] = type(s) == 'string' and (tonumber(s) - now) or 0
    end
  end
elseif KEYS[2] and redis.call('type', KEYS[2]).ok == 'zset' then
  queue = redis.call('zrange', KEYS[2], 0, 99)
end
if ARGV[1] == 'fenced' then
  token = tonumber(redis.pcall('get', KEYS[3])) or 0
end
return {t, ttl, fields, queue, deadlines, token}
