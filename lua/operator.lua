-- operator: one operator's transition of one record (unstick, forget or rerun),
-- with the operator's note put first in the record's operator notes, which every
-- later transition keeps (the newest 8).
--
-- KEYS[1]  record key
-- ARGV[1]  'u' unstick, 'f' forget, 'r' rerun
-- ARGV[2]  now, unix seconds (the caller's clock: informational times only)
-- ARGV[3]  the fence the operator saw (0: whatever the record holds)
-- ARGV[4]  retention in ms: the least TTL that forget and rerun leave
-- ARGV[5]  the note, "<op> by <actor>: <reason>", at most 1280 bytes
--
--   unstick  started -> retry at fence+1, the abandoned attempt not counted: the
--            next delivery claims the key at once (fence+2); the old owner's
--            renewal, completion, failure and release all answer LEASE_LOST.
--   forget   any state -> forgotten: only the fence, the error history and the
--            notes are kept; the next claim starts afresh at fence+1, attempt 1.
--   rerun    completed or failed -> retry with no attempt counted: the next
--            delivery claims it (fence+1) with a whole attempt budget; a
--            completed record's result is dropped.
--
-- When Redis is full it refuses the SET (OOM) and nothing changes: the call
-- answers that error.
--
-- Returns {code, state before, fence before, fence after, lease ms left before}:
--   1 OK, 8 CORRUPT, 9 NOT_FOUND, 10 WRONG_STATE, 11 FENCE_MOVED.
local key = KEYS[1]
local op, now, want, ret, note = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]

local v = redis.pcall('GET', key)
if refused(v) then
  return v
elseif type(v) == 'table' then
  return {8, 0, 0, 0, 0}
elseif not v then
  return {9, 0, 0, 0, 0}
end
local r = parse(v)
if not r then
  return {8, 0, 0, 0, 0}
end
local ttl = redis.call('PTTL', key)
local left = 0
if r.state == 1 then
  left = math.max(ttl - r.ret, 0)
end
if want > 0 and r.fence ~= want then
  return {11, r.state, r.fence, r.fence, left}
end

-- keep sets the record's new value with a TTL of at least least ms.
local function keep(val, least)
  if ttl >= least then
    redis.call('SET', key, val, 'KEEPTTL')
  else
    redis.call('SET', key, val, 'PX', least)
  end
end

local hflag = 0
if r.hist then
  hflag = 16
end
r.notes = push_note(r.notes, now, note)
if op == 'u' then
  if r.state ~= 1 then
    return {10, r.state, r.fence, r.fence, 0}
  end
  local val = header(4, hflag + kept_flags(r), r.fence + 1, math.max(r.attempts - 1, 0), r.created, now) ..
    kept(r) .. (r.hist or '')
  redis.call('SET', key, val, 'PX', r.ret)
  return {1, 1, r.fence, r.fence + 1, left}
elseif op == 'f' then
  if r.state == 5 then
    return {10, r.state, r.fence, r.fence, 0}
  end
  r.fp = nil
  keep(header(5, hflag + kept_flags(r), r.fence, 0, r.created, now) .. kept(r) .. (r.hist or ''), ret)
  return {1, r.state, r.fence, r.fence, left}
elseif op == 'r' then
  if r.state ~= 2 and r.state ~= 3 then
    return {10, r.state, r.fence, r.fence, left}
  end
  keep(header(4, hflag + kept_flags(r), r.fence, 0, r.created, now) .. kept(r) .. (r.hist or ''), ret)
  return {1, r.state, r.fence, r.fence, 0}
end
return redis.error_reply('operator: unknown op ' .. tostring(op))
