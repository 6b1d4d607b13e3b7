-- Permit semaphore: read-only view (writes nothing).
-- KEYS[1] semaphore name; KEYS[2] {name}:timeout.
-- ARGV[1] most permits to list (0: none, only the count).
-- Returns {available, {id...}, {ms left...}, in use}: available = the count
-- plus the expired permits not yet returned to it; then the unexpired
-- permits in use, soonest expiry first, with their time left (-1: never,
-- Redisson's no-lease score 922337203685477 or beyond), at most ARGV[1] of
-- them; last, how many unexpired permits are in use in all (exact, whatever
-- ARGV[1]). Ids are shown as 32 hex digits: a 16-byte member (Redisson's
-- and dlock's layout) in hex, a member that is hex already (earlier dlock
-- builds) as it is.
-- #include permit_id.lua
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local value = redis.call('get', KEYS[1])
local count = 0
if value ~= false then
  count = tonumber(value)
end
local expired = redis.call('zcount', KEYS[2], '-inf', now)
local ids, left = {}, {}
local limit = tonumber(ARGV[1])
if limit > 0 then
  local live = redis.call('zrangebyscore', KEYS[2], '(' .. now, '+inf',
                          'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #live, 2 do
    local id = live[i]
    if not (#id == 32 and string.find(id, '^%x+$')) then
      id = hex_id(id)
    end
    ids[#ids + 1] = id
    local score = tonumber(live[i + 1])
    local ms = score - now
    if ms ~= ms or score >= 922337203685477 or ms > 9007199254740991 then
      ms = -1
    end
    left[#left + 1] = ms
  end
end
local in_use = redis.call('zcount', KEYS[2], '(' .. now, '+inf')
return {count + expired, ids, left, in_use}
