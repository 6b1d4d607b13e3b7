-- Reentrant lock release: Redisson's idempotent release plus dlock's
-- hand-off to the oldest queued dlock waiter.
-- KEYS[1] lock name; KEYS[2] wake channel redisson_lock__channel:{name};
-- KEYS[3] latch redisson_unlock_latch:{name}:<request-id>;
-- KEYS[4] dlock_lock_queue:{name}; KEYS[5] dlock_lock_queue_timeout:{name}.
-- ARGV[1] message ("0"); ARGV[2] lease ms; ARGV[3] owner;
-- ARGV[4] publish command; ARGV[5] latch lifetime ms;
-- ARGV[6] grant channel prefix dlock_lock_grant:{name} (":<client-id>" is
-- appended per waiter).
-- Returns nil (not the owner), 0 (count went down) or 1 (released).
--
-- The latch is written only when the count went down: a retried partial
-- release must not count down twice. A full release writes none (a key per
-- release would pile up at high rates); its retry finds the owner's field
-- gone, which the client, knowing it retries, takes as released.
--
-- Hand-off: on a full release, expired queue entries are dropped and the
-- oldest live waiter is made the owner (field = 1, its lease), then told on
-- its client's grant channel with "<tid>:<seq>". PUBLISH counts receivers:
-- 0 means that client is gone, so the grant is undone and the next waiter
-- tried. With no waiter to hand to, "0" goes to Redisson's channel as
-- Redisson itself does.
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
if redis.call('exists', KEYS[4]) == 1 then
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local expired = redis.call('zrangebyscore', KEYS[5], '-inf', now,
                             'LIMIT', 0, 100)
  for _, m in ipairs(expired) do
    redis.call('zrem', KEYS[4], m)
    redis.call('zrem', KEYS[5], m)
  end
  for _ = 1, 10 do
    local head = redis.call('zrange', KEYS[4], 0, 0)[1]
    if not head then
      break
    end
    redis.call('zrem', KEYS[4], head)
    redis.call('zrem', KEYS[5], head)
    local cid, tid, seq, lease =
        string.match(head, '^([^:]+):(%d+):(%d+):(%d+)$')
    if cid then
      redis.call('hset', KEYS[1], cid .. ':' .. tid, 1)
      redis.call('pexpire', KEYS[1], lease)
      if redis.call(ARGV[4], ARGV[6] .. ':' .. cid, tid .. ':' .. seq) > 0 then
        return 1
      end
      redis.call('del', KEYS[1])
    end
  end
end
redis.call(ARGV[4], KEYS[2], ARGV[1])
return 1
