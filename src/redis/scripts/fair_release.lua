-- Fair lock release (Redisson RFairLock layout) with Redisson's idempotent
-- release latch. Only the head of the queue is woken, on its own channel.
-- KEYS[1] lock name; KEYS[2] redisson_lock_queue:{name};
-- KEYS[3] redisson_lock_timeout:{name};
-- KEYS[4] redisson_lock__channel:{name} (":<owner>" appended for the head);
-- KEYS[5] latch redisson_unlock_latch:{name}:<request-id>.
-- ARGV[1] message ("0"); ARGV[2] lease ms; ARGV[3] owner;
-- ARGV[4] publish command; ARGV[5] latch lifetime ms; ARGV[6] (only from
-- a client with holder info) the owner's dlock_holder:{name}:<owner> key,
-- deleted at the full release.
-- Returns nil (not the owner), 0 (count went down) or 1 (released).
local done = redis.call('get', KEYS[5])
if done ~= false then
  return tonumber(done)
end
-- #include fair_purge.lua
local function wake_head()
  local head = redis.call('lindex', KEYS[2], 0)
  if head ~= false then
    redis.pcall(ARGV[4], KEYS[4] .. ':' .. head, ARGV[1])
  end
end
if redis.call('exists', KEYS[1]) == 0 then
  wake_head()
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
local left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if left > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[5], 0, 'px', ARGV[5])
  return 0
end
redis.call('del', KEYS[1])
if ARGV[6] and ARGV[6] ~= '' then
  redis.call('del', ARGV[6])
end
wake_head()
return 1
