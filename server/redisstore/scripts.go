package redisstore

import "github.com/redis/go-redis/v9"

// The record of a scope is one hash under one key (see Store.key), so every
// script touches one key and so one cluster slot. Its fields:
//
//	st   state: "p" in progress, "c" completed
//	fp   request fingerprint (bytes)     fv   fingerprint version
//	tok  fencing token                   cid  claim id (random, per claim)
//	to   1 when the claim took over a lapsed lease
//	lu   lease end, ms since the epoch   ca   created, ms   ea  expires, ms
//	rs   response status   rh  response header (wire.EncodeHeader)
//	rb   response body     ro  "1" when the body was omitted
//
// The key's TTL is the window: PEXPIRE at claim time to ea - now, so Redis
// deletes the record when it expires and nothing needs sweeping. Every
// script also compares ea with its now, so a record is absent from the
// moment it expires whether or not Redis has deleted it yet.
//
// nowLua defines int, which writes a whole number without an exponent, and
// sets now to ARGV[1] (milliseconds) when the caller passes one (a
// test's clock; see withCallerClock) and to Redis's own TIME otherwise: the
// server decides leases and expiry, never the callers' clocks.
const nowLua = `
local function int(x) return string.format('%d', x) end
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// claimScript claims KEYS[1].
//
// ARGV: now, lease ms, window ms, fingerprint, fingerprint version, claim
// id, token floor (0, or one more than the highest token the calling store
// holds for this scope: see heldClaims).
//
// Returns {1, token, takenOver} when it acquired, {0, now, fields...} (the
// live record's HGETALL) when not. A record that already holds this claim
// id is this very claim, written by an earlier run whose reply was lost (a
// client retries a command on a broken connection): it is acquired again,
// not reported as someone else's claim in progress.
var claimScript = redis.NewScript(nowLua + `
local rec = redis.call('HMGET', KEYS[1], 'st', 'fp', 'tok', 'lu', 'ea', 'cid', 'to')
local tok = 0
local takeover = 0
if rec[1] then
  tok = tonumber(rec[3])
  if rec[6] == ARGV[6] then
    return {1, tok, tonumber(rec[7])}
  end
  if tonumber(rec[5]) > now then
    if rec[1] ~= 'p' or tonumber(rec[4]) > now or rec[2] ~= ARGV[4] then
      local out = redis.call('HGETALL', KEYS[1])
      table.insert(out, 1, now)
      table.insert(out, 1, 0)
      return out
    end
    takeover = 1
  end
  redis.call('DEL', KEYS[1])
end
tok = math.max(tok + 1, tonumber(ARGV[7]))
local lease = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'st', 'p', 'fp', ARGV[4], 'fv', ARGV[5], 'tok', int(tok),
  'cid', ARGV[6], 'to', takeover, 'lu', int(now + lease), 'ca', int(now), 'ea', int(now + window))
redis.call('PEXPIRE', KEYS[1], window)
return {1, tok, takeover}
`)

// heldLua returns 0 unless KEYS[1] is an in-progress record, not expired at
// now, held with token ARGV[2] and claim id ARGV[3].
const heldLua = nowLua + `
local rec = redis.call('HMGET', KEYS[1], 'st', 'tok', 'cid', 'ea')
if rec[1] ~= 'p' or rec[2] ~= ARGV[2] or rec[3] ~= ARGV[3] or tonumber(rec[4]) <= now then
  return 0
end
`

// completeScript stores a response for the claim ARGV[2], ARGV[3].
//
// ARGV: now, token, claim id, status, header, body, omitted ("1" or "0").
// Returns 1 when stored, or already stored by this very claim (a retry
// whose first reply was lost), 0 when the claim is not current.
var completeScript = redis.NewScript(nowLua + `
local rec = redis.call('HMGET', KEYS[1], 'st', 'tok', 'cid', 'ea')
if rec[2] ~= ARGV[2] or rec[3] ~= ARGV[3] or not rec[4] or tonumber(rec[4]) <= now then
  return 0
end
if rec[1] == 'c' then
  return 1
end
redis.call('HSET', KEYS[1], 'st', 'c', 'rs', ARGV[4], 'rh', ARGV[5], 'rb', ARGV[6], 'ro', ARGV[7])
redis.call('HDEL', KEYS[1], 'lu')
return 1
`)

// extendScript sets the lease end of the claim ARGV[2], ARGV[3] to now plus
// ARGV[4] milliseconds. Returns 1, or 0 when the claim is not current.
var extendScript = redis.NewScript(heldLua + `
redis.call('HSET', KEYS[1], 'lu', int(now + tonumber(ARGV[4])))
return 1
`)

// releaseScript deletes the in-progress claim ARGV[2], ARGV[3] (its
// expiry is not checked: an expired record may go too). ARGV[1] is unused.
// Returns 1, or 0 when the claim is not current.
var releaseScript = redis.NewScript(`
local rec = redis.call('HMGET', KEYS[1], 'st', 'tok', 'cid')
if rec[1] ~= 'p' or rec[2] ~= ARGV[2] or rec[3] ~= ARGV[3] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
`)

// getScript returns {now, fields...} of the live record KEYS[1], or {now}.
var getScript = redis.NewScript(nowLua + `
local ea = redis.call('HGET', KEYS[1], 'ea')
if not ea or tonumber(ea) <= now then
  return {now}
end
local out = redis.call('HGETALL', KEYS[1])
table.insert(out, 1, now)
return out
`)
