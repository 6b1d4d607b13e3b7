-- Write side of the read-write lock (Redisson RReadWriteLock layout).
-- KEYS[1] lock name; KEYS[2] this owner's read-hold key prefix
-- {name}:<owner>:rwlock_timeout. ARGV[1] lease ms; ARGV[2] owner ..
-- ':write'; ARGV[3] owner (its read holds, to refuse an upgrade).
-- 'OTHERKIND' when the key is a lock of another kind.
-- Returns nil when acquired (or re-entered), the PTTL when held by others,
-- or the string 'DEADLOCK' when this owner holds a live read hold: it would
-- wait for itself (Redisson has no upgrade; dlock says so at once). A read
-- hold whose lease ran out (its newest key is gone) is not in the way.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false and redis.call('exists', KEYS[1]) == 1 then
  -- a hash without a mode is another kind of lock (reentrant, fair):
  -- taking it as free would break that lock
  return 'OTHERKIND'
end
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  local ttl = redis.call('pttl', KEYS[1])
  redis.call('pexpire', KEYS[1], math.max(ttl, 0) + tonumber(ARGV[1]))
  return nil
end
if mode == 'read' then
  local mine = tonumber(redis.call('hget', KEYS[1], ARGV[3]) or '0')
  if mine and mine > 0 and redis.call('exists', KEYS[2] .. ':' .. mine) == 1 then
    return 'DEADLOCK'
  end
end
return redis.call('pttl', KEYS[1])
