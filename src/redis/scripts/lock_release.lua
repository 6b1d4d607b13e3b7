-- Reentrant lock release with an idempotency latch (Redisson 3.24+ layout).
-- KEYS[1] lock name; KEYS[2] wake channel; KEYS[3] latch key
--   redisson_unlock_latch:{name}:<request-id>
-- ARGV[1] message ("0"); ARGV[2] lease ms; ARGV[3] owner;
-- ARGV[4] publish command; ARGV[5] latch lifetime ms.
-- Returns nil (not the owner), 0 (count went down) or 1 (released).
local done = redis.call('get', KEYS[3])
if done ~= false then
  return tonumber(done)
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
local left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if left > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], 0, 'px', ARGV[5])
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1
