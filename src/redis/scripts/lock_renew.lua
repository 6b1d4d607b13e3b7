-- Batched watchdog renewal. KEYS[i] lock names; ARGV[1] lease ms;
-- ARGV[i+1] owner of KEYS[i]. Returns one 1 (renewed) or 0 (gone) per key.
-- A key of another type counts as gone instead of failing the batch.
local out = {}
for i = 1, #KEYS do
  local held = redis.pcall('hexists', KEYS[i], ARGV[i + 1])
  if held == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
