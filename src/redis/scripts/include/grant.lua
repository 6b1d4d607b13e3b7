-- grant.lua (a fragment, included by lock_release.lua, rw_read_release.lua
-- and rw_write_release.lua, before anything that uses it). Defines
-- grant_listened(publish, channel): false when nobody is subscribed to the
-- exact grant channel, so a hand-off to that client would reach no one.
-- PUBLISH's own receiver count also counts pattern subscribers (a
-- PSUBSCRIBE * monitor, say), which would make a grant to a client that is
-- gone look heard and leave the lock with it for a whole lease; PUBSUB
-- NUMSUB counts the channel's own subscribers only. When PUBSUB is refused
-- (an ACL), or the command is not PUBLISH, the receiver count alone
-- decides, as before.
local function grant_listened(publish, channel)
  if publish ~= 'publish' then
    return true
  end
  local r = redis.pcall('pubsub', 'numsub', channel)
  local n = type(r) == 'table' and tonumber(r[2])
  return n ~= 0
end
