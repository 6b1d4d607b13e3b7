-- A queued waiter gives up (deadline, error, shutdown).
-- KEYS[1] lock name; KEYS[2] dlock_lock_queue:{name};
-- KEYS[3] dlock_lock_queue_timeout:{name}; ARGV[1] owner; ARGV[2] member.
-- Returns 1 when a release had already handed the lock to this waiter (the
-- caller then owns it), else 0.
local removed = redis.call('zrem', KEYS[2], ARGV[2])
redis.call('zrem', KEYS[3], ARGV[2])
if removed == 0 and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  return 1
end
return 0
