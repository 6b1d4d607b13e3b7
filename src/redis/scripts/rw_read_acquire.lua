-- Read side of the read-write lock (Redisson RReadWriteLock layout).
-- KEYS[1] lock name (HASH: mode = read|write, "<owner>" -> read holds,
-- "<owner>:write" -> write holds); KEYS[2] this owner's timeout-key prefix
-- {name}:<owner>:rwlock_timeout (hold n has key prefix:n with its own
-- lease); KEYS[3] own(dlock_lock_rw_readers) (waiting readers: member ->
-- expiry, so that write releases know readers wait).
-- ARGV[1] lease ms; ARGV[2] owner; ARGV[3] owner .. ':write';
-- ARGV[4] the waiter's member "<client-id>:<tid>:<seq>:<lease>" or '' (not
-- registered); ARGV[5] registration lifetime ms.
-- 'OTHERKIND' when the key is a lock of another kind.
-- Returns nil when acquired, else the PTTL of the lock (and the waiter is
-- registered, or its registration refreshed). With ARGV[4] = '' this is
-- exactly Redisson's acquire.
-- A writer may take the read side (downgrade); readers do not queue behind
-- waiting writers (Redisson's rule).
local function registered()
  if ARGV[4] ~= '' then
    redis.call('zrem', KEYS[3], ARGV[4])
  end
  return nil
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false and redis.call('exists', KEYS[1]) == 1 then
  -- a hash without a mode is another kind of lock (reentrant, fair):
  -- taking it as free would break that lock
  return 'OTHERKIND'
end
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':1', 1, 'px', ARGV[1])
  redis.call('pexpire', KEYS[1], ARGV[1])
  return registered()
end
if mode == 'read' or
    (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':' .. n, 1, 'px', ARGV[1])
  local ttl = redis.call('pttl', KEYS[1])
  redis.call('pexpire', KEYS[1], math.max(ttl, tonumber(ARGV[1])))
  return registered()
end
if ARGV[4] ~= '' then
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local ttl = tonumber(ARGV[5])
  redis.call('zadd', KEYS[3], now + ttl, ARGV[4])
  if redis.call('pttl', KEYS[3]) < ttl then
    redis.call('pexpire', KEYS[3], ttl)
  end
end
return redis.call('pttl', KEYS[1])
