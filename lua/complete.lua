-- complete: store the results of successful attempts (compare-and-set on the owner).
--
-- KEYS[i]  record key
-- ARGV[1]  for each key: 1 flag ('l' when the caller's lease may have run out),
--          4 fence, 1 owner length, owner, 4 value length, the completed record
--
-- The completed record is written with SET KEEPTTL GET, and the value it replaced
-- is checked: unless it was a started record of this owner, it is put back as it
-- was (or the key deleted if there was none), so the whole is one atomic change.
-- A completion keeps the TTL its claim set (lease left + retention, at least the
-- retention); after its lease ran out ('l') the retention starts afresh.
-- A completion sent again after a lost reply finds the record completed at its
-- fence and answers OK again.
--
-- Returns one code per key: 1 OK, 2 LEASE_LOST, 8 CORRUPT.
local blob = ARGV[1]
local out = {}
local pos = 1

-- fixed is val with the claim's fence, attempts, created time and fingerprint taken
-- from old, or nil when val already carries them (the caller repeated its claim
-- faithfully, as it should).
local function fixed(val, old)
  local vflags, oflags = string.byte(val, 2), string.byte(old, 2)
  local vfp, ofp = has(vflags, 8), has(oflags, 8)
  if string.sub(val, 3, 12) == string.sub(old, 3, 12) and vfp == ofp and
    (not vfp or string.sub(val, 17, 32) == string.sub(old, 17, 32)) then
    return nil
  end
  local flags, fp, tail = vflags, '', string.sub(val, 17)
  if vfp then
    flags, tail = flags - 8, string.sub(val, 33)
  end
  if ofp then
    flags, fp = flags + 8, string.sub(old, 17, 32)
  end
  return string.char(string.byte(val, 1), flags) .. string.sub(old, 3, 12) .. string.sub(val, 13, 16) .. fp .. tail
end

for i, key in ipairs(KEYS) do
  local late = string.sub(blob, pos, pos) == 'l'
  local fence = u32(blob, pos + 1)
  local olen = string.byte(blob, pos + 5)
  local owner = string.sub(blob, pos + 6, pos + 5 + olen)
  local vlen = u32(blob, pos + 6 + olen)
  local val = string.sub(blob, pos + 10 + olen, pos + 9 + olen + vlen)
  pos = pos + 10 + olen + vlen
  local old = redis.pcall('SET', key, val, 'KEEPTTL', 'GET')
  if type(old) == 'table' then
    out[i] = 8 -- not a string: SET refused and changed nothing
  elseif owner_is(old, owner) then
    local f = fixed(val, old)
    if f then
      redis.call('SET', key, f, 'KEEPTTL')
    end
    if late then
      local r = parse(old)
      redis.call('PEXPIRE', key, r.ret)
    end
    out[i] = 1
  else
    if old then
      redis.call('SET', key, old, 'KEEPTTL')
    else
      redis.call('DEL', key)
    end
    local r = parse(old)
    if r and r.state == 2 and r.fence == fence then
      out[i] = 1
    elseif old and not r then
      out[i] = 8
    else
      out[i] = 2
    end
  end
end
return out
