-- grant.lua (a fragment, included by lock_release.lua, rw_read_release.lua
-- and rw_write_release.lua, before anything that uses it). Defines
-- grant_listened(publish, channel): false when nobody is subscribed to the
-- exact grant channel, so a hand-off to that client would reach no one;
-- and subscribers(publish, channel). A cluster's channels are sharded
-- (publish = 'spublish'): PUBSUB SHARDNUMSUB counts them, NUMSUB would say
-- 0.
-- PUBLISH's own receiver count also counts pattern subscribers (a
-- PSUBSCRIBE * monitor, say), which would make a grant to a client that is
-- gone look heard and leave the lock with it for a whole lease; PUBSUB
-- NUMSUB counts the channel's own subscribers only. When PUBSUB is refused
-- (an ACL), or the command is not PUBLISH, the receiver count alone
-- decides, as before.
local function pubsub_count(publish, channel)
  return redis.pcall('pubsub',
                     publish == 'spublish' and 'shardnumsub' or 'numsub',
                     channel)
end
-- subscribers(publish, channel): the channel's own subscribers; 0 when
-- PUBSUB is refused.
local function subscribers(publish, channel)
  local r = pubsub_count(publish, channel)
  return type(r) == 'table' and tonumber(r[2]) or 0
end
local function grant_listened(publish, channel)
  if publish ~= 'publish' and publish ~= 'spublish' then
    return true
  end
  local r = pubsub_count(publish, channel)
  local n = type(r) == 'table' and tonumber(r[2])
  return n ~= 0
end
