-- release: give claims back without a result, so the next delivery may claim them
-- at once. The abandoned attempt is not counted (attempts -1; the fence is kept and
-- the next claim raises it).
--
-- The record's operator notes are kept. When Redis is full it refuses the call's
-- first SET (OOM) before anything changed, and the call answers that error whole.
--
-- KEYS[i]  record key
-- ARGV[1]  now, unix seconds
-- ARGV[2]  for each key: 4 fence, 1 owner length, owner
--
-- Returns one code per key: 1 OK, 2 LEASE_LOST, 8 CORRUPT.
local now = tonumber(ARGV[1])
local blob = ARGV[2]
local out = {}
local pos = 1

for i, key in ipairs(KEYS) do
  local fence = u32(blob, pos)
  local olen = string.byte(blob, pos + 4)
  local owner = string.sub(blob, pos + 5, pos + 4 + olen)
  pos = pos + 5 + olen
  local v = redis.pcall('GET', key)
  if refused(v) then
    return v
  end
  local r = parse(v)
  if type(v) == 'table' or (v and not r) then
    out[i] = 8
  elseif r and r.state == 1 and r.owner == owner then
    local flags = kept_flags(r)
    if r.hist then
      flags = flags + 16
    end
    local val = header(4, flags, r.fence, math.max(r.attempts - 1, 0), r.created, now) .. kept(r) .. (r.hist or '')
    redis.call('SET', key, val, 'PX', r.ret)
    out[i] = 1
  elseif r and r.state == 4 and r.fence == fence then
    out[i] = 1 -- sent again after a lost reply: already released
  else
    out[i] = 2
  end
end
return out
