-- extend: renew the leases of running attempts (the heartbeat).
--
-- KEYS[i]  record key
-- ARGV[1]  lease in ms
-- ARGV[2]  for each key: 1 owner length, owner
--
-- The TTL becomes lease + the retention recorded in the record. The record is
-- written again with its new TTL (SET PX), not only given one (PEXPIRE): Redis
-- refuses a SET when it is full (OOM), the call's first one before anything
-- changed, and the call answers that error whole, as every other transition
-- does. A PEXPIRE it would run, and a claim renewed while its completion cannot
-- be stored would hold its caller for as long as Redis stays full.
--
-- Returns one code per key: 1 OK, 2 LEASE_LOST, 8 CORRUPT.
local lease = tonumber(ARGV[1])
local blob = ARGV[2]
local out = {}
local pos = 1

for i, key in ipairs(KEYS) do
  local olen = string.byte(blob, pos)
  local owner = string.sub(blob, pos + 1, pos + olen)
  pos = pos + 1 + olen
  local v = redis.pcall('GET', key)
  if refused(v) then
    return v
  end
  local r = owner_is(v, owner) and parse(v)
  if r then
    redis.call('SET', key, v, 'PX', lease + r.ret)
    out[i] = 1
  elseif type(v) == 'table' or (v and not parse(v)) then
    out[i] = 8
  else
    out[i] = 2
  end
end
return out
