-- Batched renewal of leased permits (permit semaphore). For item i:
-- KEYS[i] the semaphore's timeout ZSET {name}:timeout; ARGV[1] lease ms;
-- ARGV[i+1] permit id (32 hex digits: the member is the 16 bytes they
-- spell, or the digits themselves as earlier dlock builds wrote). A permit
-- still listed gets expiry now + lease (the server's clock); one gone
-- (expired and reclaimed, or released) is 0. ARGV[#KEYS + 1 + i] (only
-- from a client with holder info): item i's dlock_holder:{name}:<id> key,
-- given the same lease when the permit is renewed.
-- #include permit_id.lua
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #KEYS do
  local ok, member = pcall(permit_member, KEYS[i], ARGV[i + 1])
  local score = nil
  if ok and member then
    score = redis.call('zscore', KEYS[i], member)
  end
  if score and tonumber(score) > now then
    redis.call('zadd', KEYS[i], 'XX', now + tonumber(ARGV[1]), member)
    local info_key = ARGV[#KEYS + 1 + i]
    if info_key then
      redis.call('pexpire', info_key, ARGV[1])
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
