-- A read-write waiter gives up (deadline, error, shutdown), or the client
-- resolves a write wait whose outcome it could not learn.
-- KEYS[1] lock name; KEYS[2] own(dlock_lock_rw_queue);
-- KEYS[3] own(dlock_lock_rw_queue_timeout); KEYS[4] own(dlock_lock_rw_readers);
-- KEYS[5] channel redisson_rwlock:{name}.
-- ARGV[1] the writer's field "<owner>:write", or '' for a reader;
-- ARGV[2] member; ARGV[3] lease ms; ARGV[4] publish command.
-- A reader's registration is removed; returns 0. A writer's entry is
-- removed; returns 1 when a release had already handed the lock to it (the
-- caller is the writer now, with a fresh lease), else 0. A writer that
-- leaves while readers hold the lock and others wait to join them
-- publishes "1": those readers may have been holding back for it.
redis.call('zrem', KEYS[4], ARGV[2])
if ARGV[1] == '' then
  return 0
end
local removed = redis.call('zrem', KEYS[2], ARGV[2])
redis.call('zrem', KEYS[3], ARGV[2])
local mode = redis.call('hget', KEYS[1], 'mode')
if removed == 0 and mode == 'write'
    and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[3])
  return 1
end
if removed == 1 and mode == 'read' and redis.call('exists', KEYS[4]) == 1 then
  redis.pcall(ARGV[4], KEYS[5], '1')
end
return 0
