-- Sluice rate-limit library: seven algorithms and one entry point, check(),
-- that evaluates one or more requests, each of them all of its limits
-- atomically. It mirrors the Go reference in internal/ratelimit/model
-- exactly; read that package's docs for the semantics and the arithmetic
-- rules. In short: all values are integers in microseconds below 2^53
-- (exact in doubles), except the sliding window counter's weight, computed
-- as floor((n*(w-e))/w) in the same operation order as Go.
--
-- Layout (v2; ratelimit.Key and ratelimit.SplitKey build the names): the
-- limits of one bucket (a policy and a key value) share one hash. Each
-- limit's state is one field, named after the limit, holding
-- "<algorithm>:<values>":
--   TokenBucket          1:<tokens>:<time of the last refill step>
--   FixedWindow          2:<count>:<window start>
--   SlidingWindowCounter 4:<window index>:<current count>:<previous count>
--   LeakyBucket, GCRA    5:<level>:<time> and 6:<level>:<time>
--   FixedWindowClock     7:<count>:<window start>
-- A field holding anything else (another algorithm's state: the limit was
-- edited) is untouched, and replaced on write. The field ':exp' holds the
-- bucket's expiry in ms: the latest moment at which a state written to the
-- bucket is untouched again. The key expires exactly then (PEXPIREAT), so
-- a state never expires before its time whichever limits a request names,
-- and a bucket's expiry never moves earlier while it lives.
-- A sliding window log keeps its own sorted set, scored by admission time.
-- Its limit's field in the bucket holds '3' while the log is the limit's
-- state: a log whose field holds anything else, or nothing, is untouched
-- (another algorithm wrote the limit since), and the bucket's expiry covers
-- the log's. A log whose key is its own bucket (a key not of Key's shape,
-- as tests use) is just the sorted set.
--
-- check(keys, args)
--   Several independent requests share one call to amortize the cost of
--   entering a script; each keeps its own all-or-nothing semantics and gets
--   exactly the result it would get as a call of its own, the requests
--   taken in order (a later request sees what an earlier one consumed).
--   keys: per request, per entry: its bucket, then for a sliding window
--         log its log's key; all in one Cluster slot. The entries of one
--         request that name one bucket must have distinct fields.
--   args: per request, a header "n:dryRun:time" (n in 1..256 entries,
--         dryRun 0|1, time in µs or '-' for the server's TIME), then n
--         entries "algorithm:capacity:rate:interval:cost:shadow:field"
--         (algorithm 1..7, interval in µs, shadow 0|1, all in decimal;
--         field: the limit's field in its bucket, without ':').
--         An explicit time is for tests (a simulated clock); it must not
--         be behind the server clock: expiry deadlines are absolute.
--         Requests that read TIME share one reading: they are evaluated as
--         if they arrived in the same microsecond, in order.
--   reply: a flat array of integers, per request:
--           its ordinal (1, 2, ...: the caller checks the layout with it),
--           decision (1 allowed, 0 denied), then per entry six values:
--           allowed, remaining, reset µs, retry-after µs (-1 never, 0 when
--           allowed), remaining after consuming, reset after consuming.
--   Arguments are all checked before anything is evaluated: a malformed
--   call is an error reply and writes nothing.
-- A denied or dry-run request writes nothing. Per request, each bucket is
-- read once (HMGET of its limits' fields and ':exp') and written at most
-- once (HSET of the fields that changed, plus PEXPIREAT when the expiry
-- moves later), whatever the number of its limits. A key holding anything
-- but a hash (a bucket) or a sorted set (a log) is untouched and replaced
-- on write.
--
-- Cost per call matters (this runs for every request a cluster serves):
-- the hot path creates no closures and no tables (scratch arrays and the
-- reply table are reused from call to call; every slot read is written
-- earlier in the same call), parsed arguments are memoized, and globals are
-- looked up once. What remains is mostly the redis.call round trips: TIME
-- once per call, then per bucket a read, a write and (when it moves) the
-- expiry.

local NEVER = -1
local MAXU = 4503599627370496      -- 2^52: bound of stored values and times
local MAXCOUNT = 1000000000
local LOGMOD = 1125899906842624    -- 2^50: sliding log cumulative counters wrap here
local MAXENTRIES = 256             -- per request
local MAXKEYS = 8192               -- per call
local EXPIRY = ':exp'              -- a bucket's field holding its expiry (ms)
local LOGMARK = '3'                -- a log's field in its bucket

-- Functions see the standard library and the redis API only when called,
-- not while the library loads: init() binds them on the first call.
local call, pcall_, floor, ceil, tonum, format, match, typeof, unpack_

local function init()
  call, pcall_ = redis.call, redis.pcall
  floor, ceil = math.floor, math.ceil
  tonum, format, match, typeof, unpack_ = tonumber, string.format, string.match, type, unpack
end

-- Scratch, reused by every call. Requests r, entries j (in argument order
-- across the call) and groups g (one per bucket of a request, across the
-- call):
--   R_HDR[r]: request r's parsed header; R_G[r]: the groups before its
--   first; R_NG[r]: its groups.
--   E_REC[j]: entry j's parsed arguments (shared, read-only records: see
--   entry); E_K[j]: the index of its bucket in keys (a log's key follows);
--   E_G[j]: its group; E_V[j]: its field's stored value (a string, or
--   false); E_OK[j]: whether it allows.
--   G_KEY[g]: the bucket; G_N[g] and G_E[g][1..G_N[g]]: its entries, in
--   order; G_OWN[g]: the group is one log whose key is its own bucket (no
--   hash); G_FOREIGN[g]: the key holds no hash; G_EXP[g]: its stored
--   expiry (ms, 0 when none).
local R_HDR, R_G, R_NG = {}, {}, {}
local E_REC, E_K, E_G, E_V, E_OK = {}, {}, {}, {}, {}
local G_KEY, G_N, G_E, G_OWN, G_FOREIGN, G_EXP = {}, {}, {}, {}, {}, {}
-- Pending writes of allowed entries: the expiry (µs) and the values to
-- store (see commit); for logs also how (W_MODE: REPLACE deletes the key
-- first) and the member to drop (W_M).
local W_EXP, W_A, W_B, W_C, W_D, W_M, W_MODE = {}, {}, {}, {}, {}, {}, {}
local REPLACE, KEEP = 0, 1
-- ARGS: the arguments of one HMGET or HSET; OUT: the reply.
local ARGS = {}
local OUT = {}

-- Numbers go to redis.call formatted as integers by format('%d'): exact
-- whatever the server's own conversion (Lua's %.14g loses digits above
-- 1e14), and cheaper than Redis' %.17g conversion of a Lua number.

-- toint parses an integer in [lo, hi]; nil otherwise.
local function toint(s, lo, hi)
  local n = tonum(s)
  if n == nil or n ~= floor(n) or n < lo or n > hi then
    return nil
  end
  return n
end

-- num parses a stored value: an integer in [0, 2^52], else nil (also for
-- nil and false).
local function num(s)
  local n = tonum(s)
  if n == nil or n ~= floor(n) or n < 0 or n > MAXU then
    return nil
  end
  return n
end

-- A verdict occupies OUT[o+1..o+6]: allowed, remaining, reset, retry,
-- remainingAfter, resetAfter.
local function allow(o, remaining, reset, remaining_after, reset_after)
  OUT[o + 1], OUT[o + 2], OUT[o + 3] = 1, remaining, reset
  OUT[o + 4], OUT[o + 5], OUT[o + 6] = 0, remaining_after, reset_after
  return true
end

local function deny(o, remaining, reset, retry)
  OUT[o + 1], OUT[o + 2], OUT[o + 3] = 0, remaining, reset
  OUT[o + 4], OUT[o + 5], OUT[o + 6] = retry, remaining, reset
  return false
end

-- Each hash algorithm: (j, v, capacity, rate, interval, now, cost, o),
-- v being the stored field (a string, or false), fills the verdict at o,
-- records entry j's pending write when it allows (W_EXP and the values,
-- see commit), and returns whether it allows. A field that does not match
-- the algorithm's pattern, or holds a value out of range, is untouched.

local function token_bucket(j, v, cap, rate, iv, now, cost, o)
  local tokens, last = cap, now
  if v then
    local t, l = match(v, '^1:(%d+):(%d+)$')
    t, l = num(t), num(l)
    if t and l then
      tokens, last = t, l
      if tokens > cap then
        tokens = cap
      end
      if tokens < cap and now > last then
        local steps = floor((now - last) / iv)
        if steps > 0 then
          if steps >= ceil((cap - tokens) / rate) then
            tokens = cap
          else
            tokens = tokens + steps * rate
            last = last + steps * iv
          end
        end
      end
      if tokens >= cap then
        last = now
      end
    end
  end
  local reset = 0
  if tokens < cap then
    reset = last + ceil((cap - tokens) / rate) * iv - now
  end
  if cost > cap then
    return deny(o, tokens, reset, NEVER)
  elseif cost <= tokens then
    local left = tokens - cost
    local reset_after = 0
    if left < cap then
      reset_after = last + ceil((cap - left) / rate) * iv - now
    end
    W_EXP[j], W_A[j], W_B[j] = now + reset_after, left, last
    return allow(o, tokens, reset, left, reset_after)
  end
  return deny(o, tokens, reset, last + ceil((cost - tokens) / rate) * iv - now)
end

local function fixed_window(j, v, limit, _, window, now, cost, o)
  local count, start = 0, now
  if v then
    local n, s = match(v, '^2:(%d+):(%d+)$')
    n, s = num(n), num(s)
    if n and s and n > 0 and now < s + window then
      count, start = n, s
    end
  end
  local remaining, reset = limit - count, 0
  if remaining < 0 then
    remaining = 0
  end
  if count > 0 then
    reset = start + window - now
  end
  if cost > limit then
    return deny(o, remaining, reset, NEVER)
  elseif count + cost <= limit then
    local reset_after = 0
    if count + cost > 0 then
      reset_after = start + window - now
    end
    W_EXP[j], W_A[j], W_B[j] = start + window, count + cost, start
    return allow(o, remaining, reset, limit - count - cost, reset_after)
  end
  return deny(o, remaining, reset, start + window - now)
end

-- Clock-aligned fixed window: windows are the multiples of the window
-- since the epoch, k = floor(now/window); state: the count and the start
-- of the window counted. A stored window later than now's (the clock
-- stepped back) stays the window; the stored start is read through its
-- window index, so a state written under another window length still ends
-- on a boundary of this one.
local function fixed_window_clock(j, v, limit, _, window, now, cost, o)
  local k, count = floor(now / window), 0
  if v then
    local n, s = match(v, '^7:(%d+):(%d+)$')
    n, s = num(n), num(s)
    if n and s and n > 0 then
      local sk = floor(s / window)
      if sk >= k then
        k, count = sk, n
      end
    end
  end
  local start = k * window
  local finish = start + window
  local remaining, reset = limit - count, 0
  if remaining < 0 then
    remaining = 0
  end
  if count > 0 then
    reset = finish - now
  end
  if cost > limit then
    return deny(o, remaining, reset, NEVER)
  elseif count + cost <= limit then
    local reset_after = reset
    if count + cost > 0 then
      reset_after = finish - now
    end
    W_EXP[j], W_A[j], W_B[j] = finish, count + cost, start
    return allow(o, remaining, reset, limit - count - cost, reset_after)
  end
  return deny(o, remaining, reset, finish - now)
end

-- Sliding window log: a sorted set scored by admission time; the member is
-- "<cumulative cost mod 2^50>:<cost>", so the cost in the window is the
-- difference of two cumulative counters and the retry search is a binary
-- search by rank. Requests admitted in the same µs share one member
-- (scores stay unique, so rank order is time order).
local function parse_member(m)
  if typeof(m) ~= 'string' then
    return nil
  end
  local c, n = match(m, '^(%d+):(%d+)$')
  c, n = toint(c, 0, LOGMOD - 1), toint(n, 1, MAXU)
  if c == nil or n == nil then
    return nil
  end
  return c, n
end

-- sliding_log: current says whether the log at key is the limit's state
-- (its field in the bucket says so, or the key is its own bucket);
-- otherwise it is untouched without being read, and replaced on write.
local function sliding_log(j, key, current, limit, window, now, cost, o)
  local cut = now - window
  local foreign, live = not current, false
  local total, base, last_at, last_cum, last_cost, last_member = 0, 0, 0, nil, 0, nil
  if current then
    local first = pcall_('ZRANGEBYSCORE', key, format('(%d', cut), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if typeof(first) ~= 'table' or first.err then
      foreign = true
    else
      local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
      if #last > 0 then
        local lc, ln = parse_member(last[1])
        local lat = toint(last[2], 0, MAXU)
        if lc == nil or lat == nil then
          foreign = true
        else
          last_cum = lc
          if #first > 0 then
            local fc, fn = parse_member(first[1])
            if fc == nil or toint(first[2], 0, MAXU) == nil then
              foreign = true
              last_cum = nil
            else
              live = true
              base = (fc - fn) % LOGMOD
              total = (lc - base) % LOGMOD
              last_at, last_cost, last_member = lat, ln, last[1]
            end
          end
        end
      end
    end
  end
  local reset = 0
  if live then
    reset = last_at + window - now
  end
  local remaining = limit - total
  if remaining < 0 then
    remaining = 0
  end
  if cost > limit then
    return deny(o, remaining, reset, NEVER)
  elseif total + cost <= limit then
    local at = now
    if last_at > at then
      at = last_at
    end
    local cum, n, drop = cost, cost, false
    if last_cum then
      cum = (last_cum + cost) % LOGMOD
    end
    if live and at == last_at then
      drop, n = last_member, last_cost + cost
    end
    W_MODE[j] = foreign and REPLACE or KEEP
    W_EXP[j], W_A[j], W_B[j], W_C[j], W_D[j], W_M[j] = at + window, cut, at, cum, n, drop
    return allow(o, remaining, reset, limit - total - cost, at + window - now)
  end
  -- The oldest entries must leave until total-left+cost <= limit: find
  -- the first whose cumulative cost since base reaches need. (Only a live
  -- log denies a cost within the limit, so the key holds a readable log.)
  local need = total + cost - limit
  local lo = call('ZCOUNT', key, '-inf', format('%d', cut))
  local hi = call('ZCARD', key) - 1
  local ok = true
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    local c = parse_member(call('ZRANGE', key, mid, mid)[1])
    if c == nil then
      ok = false
      break
    end
    if (c - base) % LOGMOD >= need then
      hi = mid
    else
      lo = mid + 1
    end
  end
  local at = nil
  if ok then
    at = toint(call('ZRANGE', key, lo, lo, 'WITHSCORES')[2], 0, MAXU)
  end
  if at == nil then
    at = last_at -- unreadable entry: fall back to when the log empties (never early)
  end
  return deny(o, remaining, reset, at + window - now)
end

-- write_log writes entry j's pending log entry to key, and its expiry (ms).
local function write_log(j, key, ms)
  if W_MODE[j] == REPLACE then
    call('DEL', key)
  else
    call('ZREMRANGEBYSCORE', key, '-inf', format('%d', W_A[j]))
    if W_M[j] then
      call('ZREM', key, W_M[j])
    end
  end
  call('ZADD', key, format('%d', W_B[j]), format('%d:%d', W_C[j], W_D[j]))
  call('PEXPIREAT', key, format('%d', ms))
end

-- Sliding window counter: floor(prev*(window-elapsed)/window) in doubles.
local function weighted(n, window, elapsed)
  if n == 0 then
    return 0
  end
  return floor((n * (window - elapsed)) / window)
end

-- first_at_most: smallest e in [lo, hi] with weighted(n, window, e) <= room,
-- given that it holds at hi (weighted is non-increasing in e).
local function first_at_most(lo, hi, room, n, window)
  while lo < hi do
    local mid = lo + floor((hi - lo) / 2)
    if weighted(n, window, mid) <= room then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo
end

local function sliding_counter(j, v, limit, _, window, now, cost, o)
  local k = floor(now / window)
  local curr, prev = 0, 0
  if v then
    local sk, sc, sp = match(v, '^4:(%d+):(%d+):(%d+)$')
    sk, sc, sp = num(sk), num(sc), num(sp)
    if sk and sc and sp then
      if k == sk then
        curr, prev = sc, sp
      elseif k == sk + 1 then
        prev = sc
      elseif k < sk then
        k, curr, prev = sk, sc, sp
      end
    end
  end
  local start = k * window
  local elapsed = now - start
  if elapsed < 0 then
    elapsed = 0
  end
  local est = weighted(prev, window, elapsed) + curr
  local remaining, reset = limit - est, 0
  if remaining < 0 then
    remaining = 0
  end
  if curr > 0 then
    reset = start + 2 * window - now
  elseif prev > 0 then
    reset = start + window - now
  end
  if cost > limit then
    return deny(o, remaining, reset, NEVER)
  elseif est + cost <= limit then
    local left, reset_after = limit - est - cost, 0
    if left < 0 then
      left = 0
    end
    if curr + cost > 0 then
      reset_after = start + 2 * window - now
    elseif prev > 0 then
      reset_after = start + window - now
    end
    W_EXP[j], W_A[j], W_B[j], W_C[j] = start + 2 * window, k, curr + cost, prev
    return allow(o, remaining, reset, left, reset_after)
  end
  local at
  local room = limit - curr - cost
  if room >= 0 and weighted(prev, window, window - 1) <= room then
    at = start + first_at_most(elapsed + 1, window - 1, room, prev, window)
  elseif weighted(curr, window, window - 1) <= limit - cost then
    at = start + window + first_at_most(0, window - 1, limit - cost, curr, window)
  else
    at = start + 2 * window
  end
  return deny(o, remaining, reset, at - now)
end

-- Leaky bucket (policing) and GCRA: one meter, told apart by the state's
-- algorithm (pattern pat). The level is in scaled units: a unit of cost is
-- `iv` of them and `rate` drain per µs (rate and iv are already divided by
-- their gcd). GCRA's TAT is time + level/rate.
local function meter(pat, j, v, cap, rate, iv, now, cost, o)
  local level, at = 0, now
  if v then
    local sv, st = match(v, pat)
    sv, st = num(sv), num(st)
    if sv and st then
      level, at = sv, st
      if now > at then
        local elapsed = now - at
        if elapsed >= ceil(level / rate) then
          level = 0
        else
          level = level - elapsed * rate
        end
        at = now
      end
    end
  end
  local full = cap * iv
  local room, reset = full - level, 0
  if room < 0 then
    room = 0
  end
  if level ~= 0 then
    reset = at + ceil(level / rate) - now
  end
  local remaining = floor(room / iv)
  if cost > cap then
    return deny(o, remaining, reset, NEVER)
  elseif level + cost * iv <= full then
    local after = level + cost * iv
    local reset_after = 0
    if after ~= 0 then
      reset_after = at + ceil(after / rate) - now
    end
    W_EXP[j], W_A[j], W_B[j] = now + reset_after, after, at
    return allow(o, remaining, reset, floor((full - after) / iv), reset_after)
  end
  return deny(o, remaining, reset, at + ceil((level - (cap - cost) * iv) / rate) - now)
end

-- evaluate runs the algorithm of entry j, whose arguments are e; its
-- verdict goes to OUT at o.
local function evaluate(keys, e, j, now, o)
  local alg, v = e[1], E_V[j]
  if alg == 1 then
    return token_bucket(j, v, e[2], e[3], e[4], now, e[5], o)
  elseif alg == 2 then
    return fixed_window(j, v, e[2], e[3], e[4], now, e[5], o)
  elseif alg == 3 then
    return sliding_log(j, keys[E_K[j] + 1], G_OWN[E_G[j]] or v == LOGMARK, e[2], e[4], now, e[5], o)
  elseif alg == 4 then
    return sliding_counter(j, v, e[2], e[3], e[4], now, e[5], o)
  elseif alg == 5 then
    return meter('^5:(%d+):(%d+)$', j, v, e[2], e[3], e[4], now, e[5], o)
  elseif alg == 7 then
    return fixed_window_clock(j, v, e[2], e[3], e[4], now, e[5], o)
  end
  return meter('^6:(%d+):(%d+)$', j, v, e[2], e[3], e[4], now, e[5], o)
end

-- read reads group g's bucket once: its entries' fields into E_V, its
-- expiry into G_EXP. A key that is not a hash counts as empty (foreign);
-- a log that is its own bucket has nothing to read here.
local function read(g)
  local ge, n = G_E[g], G_N[g]
  G_FOREIGN[g], G_EXP[g] = false, 0
  if G_OWN[g] then
    E_V[ge[1]] = false
    return
  end
  local r
  if n == 1 then
    r = pcall_('HMGET', G_KEY[g], E_REC[ge[1]][7], EXPIRY)
  else
    for x = 1, n do
      ARGS[x] = E_REC[ge[x]][7]
    end
    ARGS[n + 1] = EXPIRY
    r = pcall_('HMGET', G_KEY[g], unpack_(ARGS, 1, n + 1))
  end
  if r.err then
    G_FOREIGN[g] = true
    for x = 1, n do
      E_V[ge[x]] = false
    end
    return
  end
  for x = 1, n do
    E_V[ge[x]] = r[x]
  end
  G_EXP[g] = num(r[n + 1]) or 0
end

-- commit writes group g's pending states: each log's entry and expiry,
-- then one HSET of the bucket's changed fields (a log's field only when it
-- did not say '3' yet) and, when the bucket's expiry moves later, the new
-- expiry in ':exp' and PEXPIREAT. A foreign key is deleted first.
local function commit(keys, g)
  local ge, n = G_E[g], G_N[g]
  local m, exp = 0, 0
  for x = 1, n do
    local j = ge[x]
    local e = E_REC[j]
    if E_OK[j] and e[5] > 0 then
      local alg = e[1]
      local ms = ceil(W_EXP[j] / 1000)
      if ms > exp then
        exp = ms
      end
      if alg == 3 then
        write_log(j, keys[E_K[j] + 1], ms)
        if E_V[j] ~= LOGMARK then
          ARGS[m + 1], ARGS[m + 2] = e[7], LOGMARK
          m = m + 2
        end
      elseif alg == 4 then
        ARGS[m + 1], ARGS[m + 2] = e[7], format('4:%d:%d:%d', W_A[j], W_B[j], W_C[j])
        m = m + 2
      else
        ARGS[m + 1], ARGS[m + 2] = e[7], format('%d:%d:%d', alg, W_A[j], W_B[j])
        m = m + 2
      end
    end
  end
  if G_OWN[g] then
    return
  end
  local later = exp > G_EXP[g]
  if later then
    ARGS[m + 1], ARGS[m + 2] = EXPIRY, format('%d', exp)
    m = m + 2
  end
  if m > 0 then
    if G_FOREIGN[g] then
      call('DEL', G_KEY[g])
    end
    call('HSET', G_KEY[g], unpack_(ARGS, 1, m))
    if later then
      call('PEXPIREAT', G_KEY[g], ARGS[m])
    end
  end
end

local function fail(msg)
  return redis.error_reply('ERR sluice: ' .. msg)
end

-- Parsed arguments are memoized: the same few strings (one per limit of a
-- policy, one header per request size) come with almost every call, and a
-- table lookup of an interned string costs far less than parsing it. Only
-- valid arguments are remembered, headers and entries apart; MEMOMAX
-- bounds the memory.
local MEMOMAX = 4096
local hmemo, ememo, hmemo_n, ememo_n = {}, {}, 0, 0

-- header parses "n:dryRun:time" into {n, dry, time or false}; nil if malformed.
local function header(s)
  local rec = hmemo[s]
  if rec then
    return rec
  end
  if typeof(s) ~= 'string' then
    return nil
  end
  local n, dry, t = match(s, '^(%d+):([01]):([%d%-]+)$')
  n = toint(n, 1, MAXENTRIES)
  if n == nil then
    return nil
  end
  if t == '-' then
    rec = {n, dry == '1', false}
    if hmemo_n >= MEMOMAX then
      hmemo, hmemo_n = {}, 0
    end
    hmemo[s], hmemo_n = rec, hmemo_n + 1
    return rec
  end
  t = toint(t, 0, MAXU - 1)
  if t == nil then
    return nil
  end
  return {n, dry == '1', t} -- an explicit time: not worth remembering
end

-- entry parses "algorithm:capacity:rate:interval:cost:shadow:field" into
-- {alg, cap, rate, iv, cost, shadow, field}; nil if malformed.
local function entry(s)
  local rec = ememo[s]
  if rec then
    return rec
  end
  if typeof(s) ~= 'string' then
    return nil
  end
  local alg, cap, rate, iv, cost, shadow, field = match(s, '^(%d+):(%d+):(%d+):(%d+):(%d+):([01]):([^:]*)$')
  alg, cap, rate = toint(alg, 1, 7), toint(cap, 1, MAXCOUNT), toint(rate, 0, MAXCOUNT)
  iv, cost = toint(iv, 1, MAXU), toint(cost, 0, MAXCOUNT)
  if alg == nil or cap == nil or rate == nil or iv == nil or cost == nil or ((alg == 1 or alg == 5 or alg == 6) and rate < 1) then
    return nil
  end
  rec = {alg, cap, rate, iv, cost, shadow == '1', field}
  if ememo_n >= MEMOMAX then
    ememo, ememo_n = {}, 0
  end
  ememo[s], ememo_n = rec, ememo_n + 1
  return rec
end

-- parse checks every request's arguments and keys into the scratch arrays
-- and groups each request's entries by bucket. It returns the number of
-- requests, or nil and an error message. Groups are found by scanning the
-- request's groups (interned strings compare by address): a request has
-- at most 256 entries.
local function parse(keys, args)
  local nk, na = #keys, #args
  if nk < 1 or nk > MAXKEYS then
    return nil, 'want 1..' .. MAXKEYS .. ' keys, got ' .. nk
  end
  local p, j0, k, r, ng = 1, 0, 0, 0, 0
  while p <= na do
    r = r + 1
    local h = header(args[p])
    if h == nil then
      return nil, 'bad header for request ' .. r
    end
    local n = h[1]
    if p + n > na then
      return nil, 'request ' .. r .. ' wants ' .. n .. ' entries: too few arguments'
    end
    R_HDR[r], R_G[r] = h, ng
    local g0 = ng + 1
    for j = j0 + 1, j0 + n do
      local e = entry(args[p + j - j0])
      if e == nil then
        return nil, 'bad arguments for request ' .. r .. ' entry ' .. (j - j0)
      end
      k = k + 1
      local bucket, kb, own = keys[k], k, false
      if e[1] == 3 then
        k = k + 1
        own = keys[k] == bucket
      end
      if k > nk then
        return nil, 'request ' .. r .. ' entry ' .. (j - j0) .. ': too few keys'
      end
      local g = g0
      while g <= ng and G_KEY[g] ~= bucket do
        g = g + 1
      end
      if g > ng then
        ng = g
        G_KEY[g], G_N[g], G_OWN[g] = bucket, 0, own
        if not G_E[g] then
          G_E[g] = {}
        end
      elseif own or G_OWN[g] then
        return nil, 'request ' .. r .. ' entry ' .. (j - j0) .. ': a log and a bucket share a key'
      end
      local ge, field = G_E[g], e[7]
      for x = 1, G_N[g] do
        if E_REC[ge[x]][7] == field then
          return nil, 'duplicate key in request ' .. r .. ' entry ' .. (j - j0)
        end
      end
      G_N[g] = G_N[g] + 1
      ge[G_N[g]] = j
      E_REC[j], E_K[j], E_G[j] = e, kb, g
    end
    -- A log's key is no bucket of the same request.
    for j = j0 + 1, j0 + n do
      if E_REC[j][1] == 3 and not G_OWN[E_G[j]] then
        local log = keys[E_K[j] + 1]
        for g = g0, ng do
          if G_KEY[g] == log then
            return nil, 'request ' .. r .. ' entry ' .. (j - j0) .. ': a log and a bucket share a key'
          end
        end
      end
    end
    R_NG[r] = ng - R_G[r]
    j0, p = j0 + n, p + 1 + n
  end
  if r == 0 or k ~= nk then
    return nil, 'want arguments for ' .. nk .. ' keys'
  end
  return r
end

local function sluice_check(keys, args)
  if not call then
    init()
  end
  local nreq, err = parse(keys, args)
  if not nreq then
    return fail(err)
  end
  local server_now = nil
  local o, j0 = 0, 0
  for r = 1, nreq do
    local h = R_HDR[r]
    local n, now = h[1], h[3]
    if not now then
      if not server_now then
        local t = call('TIME')
        server_now = tonum(t[1]) * 1000000 + tonum(t[2])
      end
      now = server_now
    end
    OUT[o + 1] = r
    local d = o + 2
    -- entry j's verdict is at d + 6*(j-j0-1), whatever order the buckets
    -- are evaluated in
    local base = d - 6 * (j0 + 1)
    local allowed = true
    local g1, g2 = R_G[r] + 1, R_G[r] + R_NG[r]
    for g = g1, g2 do
      read(g)
      local ge = G_E[g]
      for x = 1, G_N[g] do
        local j = ge[x]
        local e = E_REC[j]
        local ok = evaluate(keys, e, j, now, base + 6 * j)
        E_OK[j] = ok
        if not ok and not e[6] then
          allowed = false
        end
      end
    end
    if allowed then
      OUT[d] = 1
      if not h[2] then
        for g = g1, g2 do
          commit(keys, g)
        end
      end
    else
      OUT[d] = 0
    end
    o = d + 6 * n
    j0 = j0 + n
  end
  OUT[o + 1] = nil -- the reply ends here (OUT may be longer from an earlier call)
  return OUT
end
