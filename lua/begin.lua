-- begin: claim records.
--
-- KEYS[i]  record key; on Redis Cluster every key of one call shares a slot.
-- ARGV[1]  lease in ms
-- ARGV[2]  retention in ms
-- ARGV[3]  max attempts
-- ARGV[4]  now, unix seconds (the caller's clock: informational times only)
-- ARGV[5]  for each key: 2-byte length, then the started record a fresh claim of
--          that key would write (the caller's owner token, fingerprint, lock flag
--          and retention are read from it)
--
-- A claim's record carries flag 64 (counted) when its handler starts with the
-- claim (Claim.Start); the owner's own claim sent again with it sets the flag. A
-- takeover charges an attempt only for a counted claim.
--
-- A fresh key is claimed with SET NX PX lease+retention. An existing one is read
-- and moved on as the state machine says. A claim by the owner token that already
-- holds the record (a call sent again after a lost reply) answers with that same
-- claim. A started record claimed under the key's lock is taken over while its
-- lease is live only by a caller that holds the lock (its holder lost it).
--
-- When Redis is full it refuses the first key's SET NX, the call's first write
-- (OOM), before anything changed, and the call answers that error whole.
--
-- Returns one flat array; each key adds a row whose length its code gives:
--   0 FRESH        (claimed a new record: fence 1, attempt 1, the whole lease)
--   1 ACQUIRED     fence, attempt, lease ms, created, the record's fingerprint ('' when none)
--   2 TAKEN_OVER   fence, attempt, lease ms, created, the record's fingerprint
--   3 IN_PROGRESS  fence, attempts, lease ms left to the other owner, created
--   4 DUPLICATE    fence, attempts, 0, created, result, dropped reason ('' when kept)
--   5 FAILED       fence, attempts, 0, created, last error, 'p' permanent or 'x' exhausted
--   6 EXHAUSTED    fence, attempts, 0, created, last error
--   7 CONFLICT     fence, attempts, 0, created
--   8 CORRUPT      0, 0, 0, 0, reason
local lease = tonumber(ARGV[1])
local ret = tonumber(ARGV[2])
local maxAttempts = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
local blob = ARGV[5]
local out, n = {}, 0
local pos = 1

local function row(...)
  for _, v in ipairs({...}) do
    n = n + 1
    out[n] = v
  end
end

-- started builds the started record of a claim by cand's owner over r. A record
-- without a fingerprint takes the claim's.
local function started(r, cand, fence, attempts)
  local c = parse(cand)
  local flags = 0
  local fp = r.fp or c.fp
  if has(c.flags, 1) then
    flags = flags + 1
  end
  if fp then
    flags = flags + 8
  end
  if r.hist then
    flags = flags + 16
  end
  if r.notes then
    flags = flags + 32
  end
  if has(c.flags, 64) then
    flags = flags + 64
  end
  return header(1, flags, fence, attempts, r.created, now) .. (fp or '') .. (r.notes or '') ..
    string.char(#c.owner) .. c.owner .. string.sub(cand, -6) .. (r.hist or '')
end

-- exhaust fails r for good: its attempts are used up.
local function exhaust(key, r, msg)
  local hist = r.hist
  if msg then
    hist = push_error(hist, now, msg)
  end
  -- a failed record has a history, though it may hold no error (a retry record
  -- released or taken over, never failed, found at max attempts)
  hist = hist or string.char(0)
  redis.call('SET', key, header(3, 16 + kept_flags(r), r.fence, r.attempts, r.created, now) .. kept(r) .. hist, 'PX', ret)
  row(6, r.fence, r.attempts, 0, u32(r.created, 1), msg or last_error(r))
end

for _, key in ipairs(KEYS) do
  local len = u16(blob, pos)
  local cand = string.sub(blob, pos + 2, pos + 1 + len)
  pos = pos + 2 + len
  if redis.call('SET', key, cand, 'NX', 'PX', lease + ret) then
    n = n + 1
    out[n] = 0
  else
    local v = redis.pcall('GET', key)
    if refused(v) then
      return v
    end
    local r, why = parse(v)
    if type(v) ~= 'string' then
      row(8, 0, 0, 0, 0, 'key holds a value that is not an idemkit record')
    elseif not r then
      row(8, 0, 0, 0, 0, why)
    else
      local created = u32(r.created, 1)
      local c = parse(cand)
      if r.fp and c.fp and r.fp ~= c.fp then
        row(7, r.fence, r.attempts, 0, created)
      elseif r.state == 2 then
        local dropped = ''
        local result = r.tail
        if has(r.flags, 4) then
          dropped, result = r.tail, ''
        end
        row(4, r.fence, r.attempts, 0, created, result, dropped)
      elseif r.state == 3 then
        local kind = 'x'
        if has(r.flags, 2) then
          kind = 'p'
        end
        row(5, r.fence, r.attempts, 0, created, last_error(r), kind)
      elseif r.state == 5 then
        -- forgotten by an operator: claimed afresh, its fence kept rising (and
        -- its operator notes kept)
        r.created, r.hist, r.fp = string.sub(cand, 9, 12), nil, nil
        redis.call('SET', key, started(r, cand, r.fence + 1, 1), 'PX', lease + ret)
        row(1, r.fence + 1, 1, lease, now, c.fp or '')
      elseif r.state == 4 then
        if r.attempts >= maxAttempts then
          exhaust(key, r, nil)
        else
          redis.call('SET', key, started(r, cand, r.fence + 1, r.attempts + 1), 'PX', lease + ret)
          row(1, r.fence + 1, r.attempts + 1, lease, created, r.fp or c.fp or '')
        end
      elseif r.owner == c.owner then
        if has(c.flags, 64) and not has(r.flags, 64) then
          -- the owner's handler starts now: the claim counts from here
          redis.call('SET', key, string.sub(v, 1, 1) .. string.char(r.flags + 64) .. string.sub(v, 3), 'KEEPTTL')
        end
        row(1, r.fence, r.attempts, math.max(redis.call('PTTL', key) - r.ret, 0), created, r.fp or '')
      else
        local left = redis.call('PTTL', key) - r.ret
        if left > 0 and not (has(c.flags, 1) and has(r.flags, 1)) then
          row(3, r.fence, r.attempts, left, created)
        elseif not has(r.flags, 64) then
          -- The claim was never counted (its owner died before the handler
          -- started, or while the first handler of a fresh claim ran): taken
          -- over without charging an attempt.
          redis.call('SET', key, started(r, cand, r.fence + 1, r.attempts), 'PX', lease + ret)
          row(2, r.fence + 1, r.attempts, lease, created, r.fp or c.fp or '')
        elseif r.attempts >= maxAttempts then
          -- The last allowed attempt died holding the lease: a message that
          -- crashes its worker every time must not be taken over forever.
          exhaust(key, r, 'lease expired during the last allowed attempt')
        else
          redis.call('SET', key, started(r, cand, r.fence + 1, r.attempts + 1), 'PX', lease + ret)
          row(2, r.fence + 1, r.attempts + 1, lease, created, r.fp or c.fp or '')
        end
      end
    end
  end
end
return out
