-- fair_purge.lua (a fragment, included by fair_acquire.lua and
-- fair_release.lua: see cmake/embed_scripts.cmake). Sets `now` (server ms)
-- and drops the heads of the fair queue KEYS[2] whose deadline in
-- KEYS[3] has passed (waiters that stopped coming back), as Redisson does
-- before every acquire and release.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
while true do
  local head = redis.call('lindex', KEYS[2], 0)
  if head == false then
    break
  end
  local deadline = tonumber(redis.call('zscore', KEYS[3], head) or '0')
  if deadline > now then
    break
  end
  redis.call('zrem', KEYS[3], head)
  redis.call('lpop', KEYS[2])
end
