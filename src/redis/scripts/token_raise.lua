-- Raises a fenced lock's token counter to at least ARGV[1] (Redlock: the
-- token a majority granted becomes every answering node's floor, so that
-- any later majority, which shares a node with this one, counts past it).
-- KEYS[1] redisson_lock_token:{name}. Returns the counter after.
local cur = tonumber(redis.call('get', KEYS[1]) or '0')
local want = tonumber(ARGV[1])
if cur < want then
  redis.call('set', KEYS[1], ARGV[1])
  return want
end
return cur
