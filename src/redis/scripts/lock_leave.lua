-- A queued waiter gives up (deadline, error, shutdown), or the client
-- resolves a wait whose outcome it could not learn.
-- KEYS[1] lock name; KEYS[2] dlock_lock_queue:{name};
-- KEYS[3] dlock_lock_queue_timeout:{name}; ARGV[1] owner; ARGV[2] member;
-- ARGV[3] lease ms; ARGV[4] fenced lock: its token key, else ''.
-- Returns 1 when a release had already handed the lock to this waiter: the
-- caller owns it now, with a fresh lease (a fenced waiter gets {1, token},
-- the token that release drew for it). Otherwise 0.
local removed = redis.call('zrem', KEYS[2], ARGV[2])
redis.call('zrem', KEYS[3], ARGV[2])
if removed == 0 and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[3])
  if ARGV[4] ~= '' then
    return {1, tonumber(redis.call('get', ARGV[4]) or '0')}
  end
  return 1
end
return 0
