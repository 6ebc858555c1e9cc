-- record.lua: the record layout, shared by every script (prepended to each).
-- See lua/record.go for the layout; integers are big-endian.

local function u16(s, i)
  local a, b = string.byte(s, i, i + 1)
  return a * 256 + b
end

local function u32(s, i)
  local a, b, c, d = string.byte(s, i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

local function p16(n)
  return string.char(math.floor(n / 256) % 256, n % 256)
end

local function p32(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
end

local function has(flags, f)
  return math.floor(flags / f) % 2 == 1
end

local HISTORY_LEN, HISTORY_TEXT, NOTES_LEN = 4, 256, 8

-- refused reports whether a redis.pcall reply is an error other than WRONGTYPE:
-- Redis refused the command (OOM when it is full, MISCONF, READONLY, NOPERM...).
-- The scripts hand such an error back whole as their own reply, which the store
-- answers as unavailable. WRONGTYPE alone says the key holds something that is
-- not a string, so not a record.
local function refused(v)
  return type(v) == 'table' and type(v.err) == 'string' and string.sub(v.err, 1, 10) ~= 'WRONGTYPE '
end

-- notes_end is the position just after the notes block that starts at p, or nil
-- when v is cut short in it.
local function notes_end(v, p)
  local n = string.byte(v, p)
  if not n then
    return nil
  end
  p = p + 1
  for _ = 1, n do
    if #v < p + 5 then
      return nil
    end
    p = p + 6 + u16(v, p + 4)
  end
  if #v < p - 1 then
    return nil
  end
  return p
end

-- parse reads a record value; nil and a reason when v is not a record.
local function parse(v)
  if type(v) ~= 'string' or #v < 16 then
    return nil, 'not an idemkit record: shorter than its header'
  end
  local b0, flags = string.byte(v, 1, 2)
  local state = b0 % 16
  if math.floor(b0 / 16) ~= 1 then
    return nil, 'not an idemkit record of layout 1'
  end
  if state < 1 or state > 5 then
    return nil, 'not an idemkit record: unknown state'
  end
  local r = {state = state, flags = flags, fence = u32(v, 3), attempts = u16(v, 7), created = string.sub(v, 9, 12)}
  local p = 17
  if has(flags, 8) then
    if #v < 32 then
      return nil, 'record cut short in its fingerprint'
    end
    r.fp = string.sub(v, 17, 32)
    p = 33
  end
  if has(flags, 32) then
    local e = notes_end(v, p)
    if not e then
      return nil, 'record cut short in its operator notes'
    end
    r.notes = string.sub(v, p, e - 1)
    p = e
  end
  if state == 1 then
    local n = string.byte(v, p)
    if not n or #v < p + n + 6 then
      return nil, 'started record cut short in its owner or retention'
    end
    r.owner = string.sub(v, p + 1, p + n)
    r.ret = u16(v, p + n + 1) * 4294967296 + u32(v, p + n + 3)
    p = p + n + 7
  elseif state == 2 then
    r.tail = string.sub(v, p)
    return r
  end
  if has(flags, 16) then
    r.hist = string.sub(v, p)
    if #r.hist < 1 then
      return nil, 'record cut short in its error history'
    end
  elseif state == 3 then
    return nil, 'failed record without an error history'
  end
  return r
end

-- last_error is the newest error text of a record's history.
local function last_error(r)
  if not r.hist or string.byte(r.hist, 1) == 0 then
    return ''
  end
  return string.sub(r.hist, 8, 7 + u16(r.hist, 6))
end

-- push_error puts (now, msg) first in a history and cuts the older entries.
local function push_error(hist, now, msg)
  local out = {p32(now) .. p16(#msg) .. msg}
  if hist then
    local count, p = string.byte(hist, 1), 2
    for _ = 1, count do
      if #out >= HISTORY_LEN then
        break
      end
      local len = u16(hist, p + 4)
      local text = string.sub(hist, p + 6, p + 5 + math.min(len, HISTORY_TEXT))
      out[#out + 1] = string.sub(hist, p, p + 3) .. p16(#text) .. text
      p = p + 6 + len
    end
  end
  return string.char(#out) .. table.concat(out)
end

-- push_note puts (now, text) first in a notes block and keeps the newest NOTES_LEN.
-- Texts come capped (lua.CapNote): a block is at most 1 + 8 * (6 + 1280) bytes.
local function push_note(notes, now, text)
  local out = {p32(now) .. p16(#text) .. text}
  if notes then
    local count, p = string.byte(notes, 1), 2
    for _ = 1, math.min(count, NOTES_LEN - 1) do
      local len = u16(notes, p + 4)
      out[#out + 1] = string.sub(notes, p, p + 5 + len)
      p = p + 6 + len
    end
  end
  return string.char(#out) .. table.concat(out)
end

-- header builds a record header; created is the 4 bytes kept from the record.
local function header(state, flags, fence, attempts, created, now)
  return string.char(16 + state, flags) .. p32(fence) .. p16(attempts) .. created .. p32(now)
end

-- kept is what every state keeps after the header: the fingerprint and the
-- operator notes (each when the record has them); kept_flags are their flags.
local function kept(r)
  return (r.fp or '') .. (r.notes or '')
end

local function kept_flags(r)
  local f = 0
  if r.fp then
    f = f + 8
  end
  if r.notes then
    f = f + 32
  end
  return f
end

-- owner_is reports whether v is a started record claimed by owner, cheaply.
local function owner_is(v, owner)
  if type(v) ~= 'string' or string.byte(v, 1) ~= 17 then
    return false
  end
  local p, flags = 17, string.byte(v, 2)
  if has(flags, 8) then
    p = 33
  end
  if has(flags, 32) then
    p = notes_end(v, p)
    if not p then
      return false
    end
  end
  local n = string.byte(v, p)
  return n == #owner and string.sub(v, p + 1, p + n) == owner
end
