-- dedup_clear(map, of, id): job id is gone (acked, deleted, cancelled), so its
-- deduplication entry goes with it, unless a later job holds that dedup id by now. map: the
-- queue's hash dedup id -> the job holding it ('<stem>:q:dedup'); of: its hash job id ->
-- '<debounce cap ms or 0>|<dedup id>' ('<stem>:q:dedup_of'). Jobs pushed with a dedup id
-- have ids starting with '~' (byte 126): call it only for those, so that a plain job costs
-- no read. Reads both hashes before writing either (call it once the script's other keys
-- were read); every script passes them as KEYS (Redis requires a script to declare every
-- key it touches). A keep-latest follow-up parked behind the job (field '>' .. dedup id
-- of `of`) is dropped with its entry: the job was deleted from the dead list or cancelled
-- (only an ack releases a follow-up).
local function dedup_clear(map, of, id)
  local entry = redis.call('HGET', of, id)
  if not entry then
    return
  end
  local d = string.sub(entry, (string.find(entry, '|', 1, true) or 0) + 1)
  local holder = redis.call('HGET', map, d)
  redis.call('HDEL', of, id)
  if holder == id then
    -- (With a keep-latest follow-up parked behind it, if any: the job was dead or
    -- cancelled.)
    redis.call('HDEL', map, d)
    redis.call('HDEL', of, '>' .. d)
  end
end
