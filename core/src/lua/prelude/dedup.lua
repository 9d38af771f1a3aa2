-- dedup_clear(map, of, id): job id is gone (acked, deleted, cancelled), so its
-- deduplication entry goes with it, unless a later job holds that dedup id by now. map: the
-- queue's hash dedup id -> the job holding it ('<stem>:q:dedup'); of: its hash job id ->
-- '<debounce cap ms or 0>|<dedup id>' ('<stem>:q:dedup_of'). Jobs pushed with a dedup id
-- have ids starting with '~' (byte 126): call it only for those, so that a plain job costs
-- no read. Reads both hashes before writing either (call it once the script's other keys
-- were read). A script that does not take the two hashes as KEYS (its callers send what
-- they sent before dedup existed) names them from another key of the queue
-- ('<stem>:q:<part>': the same hash tag, so the same slot on a cluster).
local function dedup_clear(map, of, id)
  local entry = redis.call('HGET', of, id)
  if not entry then
    return
  end
  local d = string.sub(entry, (string.find(entry, '|', 1, true) or 0) + 1)
  local holder = redis.call('HGET', map, d)
  redis.call('HDEL', of, id)
  if holder == id then
    redis.call('HDEL', map, d)
  end
end
