-- permit_id.lua (a fragment, included by the permit semaphore's scripts:
-- see cmake/embed_scripts.cmake). A permit id travels as 32 hex digits
-- (the form both Redisson's API and dlock's give users) and is stored, as
-- Redisson 3.52 stores it (ByteBufUtil.decodeHexDump through its byte-array
-- codec), as the 16 raw bytes those digits spell: raw_id(hex) makes the
-- member, hex_id(member) shows one (lowercase, as Redisson's hexDump).
-- Earlier dlock builds stored the 32 hex digits themselves; scripts that
-- look a permit up try that legacy member second (docs/LAYOUT.md).
local function raw_id(hex)
  return (string.gsub(hex, '%x%x', function(h)
    return string.char(tonumber(h, 16))
  end))
end
local function hex_id(member)
  return (string.gsub(member, '.', function(ch)
    return string.format('%02x', string.byte(ch))
  end))
end
-- The member that holds permit `hex` in ZSET `key` (raw first, then the
-- legacy hex member), or nil.
local function permit_member(key, hex)
  local raw = raw_id(hex)
  if redis.call('zscore', key, raw) then
    return raw
  end
  if redis.call('zscore', key, hex) then
    return hex
  end
  return nil
end
