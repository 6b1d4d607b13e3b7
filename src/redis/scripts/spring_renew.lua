-- Spring Integration's RedisLockRegistry layout: batched renewal (Spring's
-- renew script, for many keys). KEYS[i] <registryKey>:<lockKey>; ARGV[1]
-- lease ms; ARGV[2] this client's id. One 1 (renewed) or 0 (gone or not
-- ours) per key; a key of another type counts as gone.
local out = {}
for i = 1, #KEYS do
  if redis.pcall('get', KEYS[i]) == ARGV[2] then
    redis.call('pexpire', KEYS[i], ARGV[1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
