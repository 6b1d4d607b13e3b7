-- Write-side release (Redisson RReadWriteLock layout) with Redisson's
-- idempotent release latch and dlock's hand-off to queued writers.
-- KEYS[1] lock name; KEYS[2] channel redisson_rwlock:{name};
-- KEYS[3] latch redisson_unlock_latch:{name}:<request-id>;
-- KEYS[4] own(dlock_lock_rw_queue); KEYS[5] own(dlock_lock_rw_queue_timeout);
-- KEYS[6] own(dlock_lock_rw_yield); KEYS[7] own(dlock_lock_rw_readers);
-- KEYS[8] own(dlock_lock_rw_readturn).
-- ARGV[1] message ("1": wake every waiter, readers all go); ARGV[2] lease;
-- ARGV[3] owner .. ':write'; ARGV[4] publish command; ARGV[5] latch ms;
-- ARGV[6] grant channel prefix own(dlock_lock_rw_grant) (":<client-id>"
-- appended); ARGV[7] yield period ms; ARGV[8] '1' when the releasing client
-- is itself subscribed to Redisson's channel; ARGV[9] readers' turn ms;
-- ARGV[10] (only from a client with holder info) the write hold's key
-- dlock_holder:{name}:<owner>:write, deleted when the hold ends.
-- Returns nil (not the writer), 0 (count went down) or 1 (released).
-- When the writer's own read holds remain (downgrade) the mode becomes
-- read and waiting readers are woken too, in a readers' turn when some are
-- registered (Redisson leaves them to their lease bound). When the lock is freed: if live readers are registered as
-- waiting, "1" wakes everyone and the readers' turn starts (dlock writers
-- let them in first), so a stream of writer hand-offs cannot starve
-- readers; else the oldest live queued writer is handed the lock; else
-- "1" as Redisson does.
-- #include grant.lua
-- #include rw_handoff.lua
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
if ARGV[10] and ARGV[10] ~= '' then
  redis.call('del', ARGV[10])
end
if redis.call('hlen', KEYS[1]) ~= 1 then
  -- downgrade: the writer's read holds remain; waiting readers join them,
  -- in a readers' turn, so that queued writers do not hold them back
  redis.call('hset', KEYS[1], 'mode', 'read')
  local now = now_ms()
  if redis.call('zcount', KEYS[7], now, '+inf') > 0 then
    redis.call('set', KEYS[8], now, 'px', ARGV[9])
  end
  redis.pcall(ARGV[4], KEYS[2], ARGV[1])
  return 1
end
redis.call('del', KEYS[1])
local k = {name = KEYS[1], channel = KEYS[2], queue = KEYS[4],
           timeouts = KEYS[5], yield = KEYS[6], readers = KEYS[7],
           grant = ARGV[6], period = ARGV[7], publish = ARGV[4]}
local now = now_ms()
local acc = releaser_acc(ARGV[8], ARGV[3])
if live_readers(k, now, acc) > 0 then
  redis.call('set', KEYS[8], now, 'px', ARGV[9])
elseif handoff(k, now, acc) then
  return 1
end
-- best effort: a publish the ACL refuses must not fail a release that has
-- already happened (waiters then fall back to the lease bound)
redis.pcall(ARGV[4], KEYS[2], ARGV[1])
return 1
