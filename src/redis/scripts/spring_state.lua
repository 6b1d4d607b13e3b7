-- Spring Integration's RedisLockRegistry layout: state for status
-- displays. KEYS[1] <registryKey>:<lockKey>. Returns {type, value or '',
-- pttl}: the key's type ('none', 'string', or another), the holder's
-- client id, and its remaining lease.
local t = redis.call('type', KEYS[1])['ok']
local v = ''
if t == 'string' then
  v = redis.call('get', KEYS[1])
end
return {t, v, redis.call('pttl', KEYS[1])}
