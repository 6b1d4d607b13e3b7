-- Batched renewal of read holds. For item i: KEYS[2i-1] lock name,
-- KEYS[2i] the owner's timeout-key prefix {name}:<owner>:rwlock_timeout;
-- ARGV[1] lease ms; ARGV[i+1] owner. Returns one 1 (renewed) or 0 (gone)
-- per item. Only the owner's own hold keys are extended (Redisson extends
-- every reader's, which lets one live reader keep a dead one's hold alive),
-- and a hold whose newest key already expired counts as gone.
-- ARGV[#KEYS / 2 + 2] '1' (only from a client with holder info): each
-- renewed owner's dlock_holder:{name}:<owner> key gets the lease too.
local out = {}
local info = ARGV[#KEYS / 2 + 2] == '1'
local function info_key(name, owner)
  if string.find(name, '{', 1, true) then
    return 'dlock_holder:=' .. name .. ':' .. owner
  end
  return 'dlock_holder:{' .. name .. '}:' .. owner
end
for i = 1, #KEYS / 2 do
  local name, prefix, owner = KEYS[2 * i - 1], KEYS[2 * i], ARGV[i + 1]
  local n = tonumber(redis.pcall('hget', name, owner))
  if type(n) == 'number' and n > 0 and
      redis.call('exists', prefix .. ':' .. n) == 1 then
    for k = n, 1, -1 do
      redis.call('pexpire', prefix .. ':' .. k, ARGV[1])
    end
    if redis.call('pttl', name) < tonumber(ARGV[1]) then
      redis.call('pexpire', name, ARGV[1])
    end
    if info then
      redis.call('pexpire', info_key(name, owner), ARGV[1])
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
