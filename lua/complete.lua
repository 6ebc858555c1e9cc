-- complete: store the results of successful attempts (compare-and-set on the owner).
--
-- KEYS[i]  record key
-- ARGV[1]  for each key: 1 flag ('-'; 'l' when the caller's lease may have run out;
--          '?' when the caller does not know its claim's fence: the record's own
--          fence, attempts, created time and fingerprint are kept), 1 match ('='
--          the started record the caller's claim wrote follows whole, byte for
--          byte; 'o' only the owner's length byte and the owner follow), 1 position
--          of the owner's length byte in the started record, 1 length of what
--          follows, the started record or the owner, 4 fence, 4 value length, the
--          completed record
--
-- The completed record is written with SET KEEPTTL GET, and the value it replaced
-- is checked: unless it was a started record of this owner, it is put back as it
-- was (or the key deleted if there was none), so the whole is one atomic change.
-- The check costs least when the caller sends the started record its claim wrote
-- ('=', a fresh claim): the value replaced must be that very string, which Lua
-- compares by identity (its strings are interned). Otherwise the owner token is
-- compared at its place in a started record without operator notes ('o').
-- A started record of the owner with operator notes (flag 32), changed since the
-- claim wrote it (marked counted), or one the caller does not know ('?'), is
-- written once more with the record's own identity and notes: a completion keeps
-- what operators wrote, and costs records without notes nothing.
-- A completion keeps the TTL its claim set (lease left + retention, at least the
-- retention); after its lease ran out ('l') the retention starts afresh.
-- A completion sent again after a lost reply finds the record completed at its
-- fence and answers OK again.
--
-- The first key's SET is the call's first write: when Redis is full it refuses it
-- (OOM) before anything changed, and the call answers that error whole. WRONGTYPE
-- (the key holds another type: SET ... GET changed nothing) is CORRUPT.
--
-- Returns 0 when every key is OK (the common case: no table to build, send or
-- read), else one code per key: 1 OK, 2 LEASE_LOST, 8 CORRUPT.
local blob = ARGV[1]
local keys = KEYS
local out -- the codes, made at the first key that is not OK
local pos = 1
local byte, sub, rpcall = string.byte, string.sub, redis.pcall

-- code records key i's code, once some key's is not OK.
local function code(i, c)
  if not out then
    if c == 1 then
      return
    end
    out = {}
    for j = 1, i - 1 do
      out[j] = 1
    end
  end
  out[i] = c
end

-- own is val written over r, the caller's own started record old: the claim's
-- fence, attempts, created time and fingerprint are taken from old (for a caller
-- that does not know them), and old's operator notes are kept.
local function own(val, old, r)
  local flags, tail = byte(val, 2), sub(val, 17)
  if has(flags, 8) then
    flags, tail = flags - 8, sub(val, 33)
  end
  return string.char(byte(val, 1), flags + kept_flags(r)) .. sub(old, 3, 12) .. sub(val, 13, 16) .. kept(r) .. tail
end

for i = 1, #keys do
  local key = keys[i]
  local flag, match, at, elen = byte(blob, pos, pos + 3)
  local exp = sub(blob, pos + 4, pos + 3 + elen) -- the started record, or the owner's length byte and owner
  local p = pos + 4 + elen
  local a, b, c, d = byte(blob, p + 4, p + 7)
  local vlen = ((a * 256 + b) * 256 + c) * 256 + d
  local val = sub(blob, p + 8, p + 7 + vlen)
  pos = p + 8 + vlen
  local old = rpcall('SET', key, val, 'KEEPTTL', 'GET')
  if match == 61 and old == exp then
    -- the started record the caller's claim wrote, unchanged ('='): written as it is
    if flag == 108 then -- 'l'
      redis.call('PEXPIRE', key, parse(old).ret)
    end
    if out then
      out[i] = 1
    end
  elseif refused(old) then
    return old
  elseif type(old) == 'table' then
    code(i, 8) -- WRONGTYPE: SET refused and changed nothing
  else
    local owned = exp
    if match == 61 then -- '=': the owner's length byte and the owner, from the started record
      owned = sub(exp, at, at + byte(exp, at))
    end
    if old and byte(old, 1) == 17 and byte(old, 2) < 32 and flag ~= 63 and sub(old, at, at + #owned - 1) == owned then
      -- the caller's own started record without operator notes: written as it is
      if flag == 108 then -- 'l'
        redis.call('PEXPIRE', key, parse(old).ret)
      end
      code(i, 1)
    else
      local r = parse(old)
      if r and r.state == 1 and r.owner == sub(owned, 2) then
        -- its own claim, with notes, changed since the caller's claim wrote it,
        -- unknown to the caller ('?'), or with the fingerprint's place misjudged
        redis.call('SET', key, own(val, old, r), 'KEEPTTL')
        if flag == 108 then
          redis.call('PEXPIRE', key, r.ret)
        end
        code(i, 1)
      else
        if old then
          redis.call('SET', key, old, 'KEEPTTL')
        else
          redis.call('DEL', key)
        end
        if r and r.state == 2 and r.fence == u32(blob, p) then
          code(i, 1)
        elseif old and not r then
          code(i, 8)
        else
          code(i, 2)
        end
      end
    end
  end
end
return out or 0
