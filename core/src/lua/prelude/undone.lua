-- undone(key, token): whether an acquisition with this token was undone after its reply was
-- lost (its token is in the zset key until a time to come): if it arrives late (delayed,
-- overtaken by its undo on another connection), it must not take effect.
local function undone(key, token)
  local until_ms = redis.call('ZSCORE', key, token)
  return until_ms and tonumber(until_ms) > now_ms()
end
