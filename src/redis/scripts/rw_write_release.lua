-- Write-side release (Redisson RReadWriteLock layout) with Redisson's
-- idempotent release latch.
-- KEYS[1] lock name; KEYS[2] channel redisson_rwlock:{name};
-- KEYS[3] latch redisson_unlock_latch:{name}:<request-id>.
-- ARGV[1] message ("1": wake every waiter, readers all go); ARGV[2] lease;
-- ARGV[3] owner .. ':write'; ARGV[4] publish command; ARGV[5] latch ms.
-- Returns nil (not the writer), 0 (count went down) or 1 (released).
-- When the writer's own read holds remain (downgrade) the mode becomes
-- read and waiting readers are woken too (Redisson leaves them to their
-- lease bound).
local done = redis.call('get', KEYS[3])
if done ~= false then
  return tonumber(done)
end
if redis.call('hget', KEYS[1], 'mode') ~= 'write' or
    redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
local left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if left > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], 0, 'px', ARGV[5])
  return 0
end
redis.call('hdel', KEYS[1], ARGV[3])
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1])
else
  redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.pcall(ARGV[4], KEYS[2], ARGV[1])
return 1
