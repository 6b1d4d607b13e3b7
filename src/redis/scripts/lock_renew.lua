-- Batched watchdog renewal. KEYS[i] lock names; ARGV[1] lease ms;
-- ARGV[i+1] owner of KEYS[i]. Returns one 1 (renewed) or 0 (gone) per key.
-- A key of another type counts as gone instead of failing the batch.
-- ARGV[#KEYS + 2] '1' (only from a client with holder info): each renewed
-- owner's dlock_holder:{name}:<owner> key gets the lease too.
local out = {}
local info = ARGV[#KEYS + 2] == '1'
local function info_key(name, owner)
  if string.find(name, '{', 1, true) then
    return 'dlock_holder:=' .. name .. ':' .. owner
  end
  return 'dlock_holder:{' .. name .. '}:' .. owner
end
for i = 1, #KEYS do
  local held = redis.pcall('hexists', KEYS[i], ARGV[i + 1])
  if held == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    if info then
      redis.call('pexpire', info_key(KEYS[i], ARGV[i + 1]), ARGV[1])
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
