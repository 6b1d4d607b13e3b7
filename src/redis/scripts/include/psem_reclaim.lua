-- psem_reclaim.lua (a fragment, included by psem_acquire.lua and
-- psem_release.lua: see cmake/embed_scripts.cmake). Sets `now` (server ms)
-- and `no_lease` (Redisson's score for a permit without a lease,
-- 922337203685477: never expires) and defines reclaim(publish, most): the
-- expired permits (expiry <= now, the renewer's rule too) of KEYS[2], at
-- most `most` of them (nil: all), go back to the count KEYS[1], and the new
-- count is announced on KEYS[3] with the `publish` command so that waiters
-- try again.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local no_lease = 922337203685477
local function reclaim(publish, most)
  local expired
  if most then
    expired = redis.call('zrangebyscore', KEYS[2], '-inf', now, 'LIMIT', 0,
                         most)
  else
    expired = redis.call('zrangebyscore', KEYS[2], '-inf', now)
  end
  if #expired > 0 then
    for i = 1, #expired, 1000 do
      redis.call('zrem', KEYS[2],
                 unpack(expired, i, math.min(i + 999, #expired)))
    end
    local value = redis.call('incrby', KEYS[1], #expired)
    if value > 0 then
      redis.call(publish, KEYS[3], value)
    end
  end
end
