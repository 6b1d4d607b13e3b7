-- Batched renewal of leased permits (permit semaphore). For item i:
-- KEYS[i] the semaphore's timeout ZSET {name}:timeout; ARGV[1] lease ms;
-- ARGV[i+1] permit id. A permit still listed gets expiry now + lease (the
-- server's clock); one gone (expired and reclaimed, or released) is 0.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #KEYS do
  local score = redis.pcall('zscore', KEYS[i], ARGV[i + 1])
  if type(score) == 'string' and tonumber(score) > now then
    redis.call('zadd', KEYS[i], 'XX', now + tonumber(ARGV[1]), ARGV[i + 1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
