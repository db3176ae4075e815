-- Sluice rate-limit library: seven algorithms and one entry point, check(),
-- that evaluates one or more requests, each of them all of its limits
-- atomically. It mirrors the Go reference in internal/ratelimit/model
-- exactly; read that package's docs for the semantics and the arithmetic
-- rules. In short: all values are integers in microseconds below 2^53
-- (exact in doubles), except the sliding window counter's weight, computed
-- as floor((n*(w-e))/w) in the same operation order as Go.
--
-- check(keys, args)
--   Several independent requests share one call to amortize the cost of
--   entering a script; each keeps its own all-or-nothing semantics and gets
--   exactly the result it would get as a call of its own, the requests
--   taken in order (a later request sees what an earlier one consumed).
--   keys: the requests' keys, request after request; distinct within a
--         request, and all in one Cluster slot.
--   args: per request, a header "n:dryRun:time" (n in 1..256 entries,
--         dryRun 0|1, time in µs or '-' for the server's TIME), then n
--         entries "algorithm:capacity:rate:interval:cost:shadow"
--         (algorithm 1..7, interval in µs, shadow 0|1), all in decimal.
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
-- A denied or dry-run request writes nothing. Every key written gets an
-- absolute expiry (PEXPIREAT, rounded up to the ms) at the moment its state
-- equals untouched. A key holding another algorithm's state, or anything
-- unreadable, counts as untouched and is replaced on write.
--
-- Cost per call matters (this runs for every request a cluster serves):
-- the hot path creates no closures and no tables (scratch arrays and the
-- reply table are reused from call to call; every slot read is written
-- earlier in the same call), parsed arguments are memoized, globals are
-- looked up once, and a hash holding valid state of the same algorithm
-- gets only its changed fields written. What remains is mostly the
-- redis.call round trips: TIME once per call, then per entry a read, a
-- write and the expiry.

local NEVER = -1
local MAXU = 4503599627370496      -- 2^52: bound of stored values and times
local MAXCOUNT = 1000000000
local LOGMOD = 1125899906842624    -- 2^50: sliding log cumulative counters wrap here
local MAXENTRIES = 256             -- per request
local MAXKEYS = 8192               -- per call

-- Functions see the standard library and the redis API only when called,
-- not while the library loads: init() binds them on the first call.
local call, pcall_, floor, ceil, tonum, format, match, typeof

local function init()
  call, pcall_ = redis.call, redis.pcall
  floor, ceil = math.floor, math.ceil
  tonum, format, match, typeof = tonumber, string.format, string.match, type
end

-- Scratch, reused by every call (indexes: request r, entry j = key index).
-- R_HDR[r]: request r's parsed header; E_REC[j]: entry j's parsed
-- arguments (shared, read-only records: see header and entry); E_OK[j]:
-- whether entry j allows.
local R_HDR, E_REC, E_OK = {}, {}, {}
-- Pending writes of allowed entries: how (W_MODE), the expiry (µs), and
-- the values to store (per algorithm, see commit).
local W_MODE, W_EXP, W_A, W_B, W_C, W_D, W_M = {}, {}, {}, {}, {}, {}, {}
-- W_MODE of a hash: REPLACE (delete a foreign key, then write every field
-- and the tag), FULL (write every field and the tag), or the key holds this
-- algorithm's valid state and only what changed is written: PRIMARY (the
-- field every consumption changes) or ALL (every field, not the tag).
local REPLACE, FULL, PRIMARY, ALL = 0, 1, 2, 3
local SEEN = {}
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

-- num parses a stored value: an integer in [0, 2^52], else nil.
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

-- Each algorithm: (j, key, capacity, rate, interval, now, cost, o) fills
-- the verdict at o, records entry j's pending write when it allows, and
-- returns whether it allows.
--
-- Hash-backed state: field 'a' tags the algorithm; the other fields hold
-- integers in [0, 2^52]. HMGET through pcall: a key of another type is an
-- error reply, i.e. foreign. A hash without 'a' is untouched, not foreign.

local function token_bucket(j, key, cap, rate, iv, now, cost, o)
  local r = pcall_('HMGET', key, 'a', 't', 'l')
  local mode, stored = FULL, nil
  local tokens, last = cap, now
  if r.err then
    mode = REPLACE
  elseif r[1] then
    local t, l = num(r[2]), num(r[3])
    if r[1] ~= '1' or t == nil or l == nil then
      mode = REPLACE
    else
      mode, stored = PRIMARY, l
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
    if mode == PRIMARY and last ~= stored then
      mode = ALL
    end
    W_MODE[j], W_EXP[j], W_A[j], W_B[j] = mode, now + reset_after, left, last
    return allow(o, tokens, reset, left, reset_after)
  end
  return deny(o, tokens, reset, last + ceil((cost - tokens) / rate) * iv - now)
end

local function fixed_window(j, key, limit, _, window, now, cost, o)
  local r = pcall_('HMGET', key, 'a', 'n', 's')
  local mode, stored = FULL, nil
  local count, start = 0, now
  if r.err then
    mode = REPLACE
  elseif r[1] then
    local n, s = num(r[2]), num(r[3])
    if r[1] ~= '2' or n == nil or s == nil then
      mode = REPLACE
    else
      mode, stored = PRIMARY, s
      if n > 0 and now < s + window then
        count, start = n, s
      end
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
    if mode == PRIMARY and start ~= stored then
      mode = ALL
    end
    W_MODE[j], W_EXP[j], W_A[j], W_B[j] = mode, start + window, count + cost, start
    return allow(o, remaining, reset, limit - count - cost, reset_after)
  end
  return deny(o, remaining, reset, start + window - now)
end

-- Clock-aligned fixed window: windows are the multiples of the window
-- since the epoch, k = floor(now/window); state 'n' (count) and 's' (the
-- start of the window counted). A stored window later than now's (the clock
-- stepped back) stays the window; the stored start is read through its
-- window index, so a state written under another window length still ends
-- on a boundary of this one.
local function fixed_window_clock(j, key, limit, _, window, now, cost, o)
  local r = pcall_('HMGET', key, 'a', 'n', 's')
  local mode, stored = FULL, nil
  local k, count = floor(now / window), 0
  if r.err then
    mode = REPLACE
  elseif r[1] then
    local n, s = num(r[2]), num(r[3])
    if r[1] ~= '7' or n == nil or s == nil then
      mode = REPLACE
    else
      mode, stored = PRIMARY, s
      if n > 0 then
        local sk = floor(s / window)
        if sk >= k then
          k, count = sk, n
        end
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
    if mode == PRIMARY and start ~= stored then
      mode = ALL
    end
    W_MODE[j], W_EXP[j], W_A[j], W_B[j] = mode, finish, count + cost, start
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

local function sliding_log(j, key, limit, _, window, now, cost, o)
  local cut = now - window
  local first = pcall_('ZRANGEBYSCORE', key, format('(%d', cut), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local foreign, live = false, false
  local total, base, last_at, last_cum, last_cost, last_member = 0, 0, 0, nil, 0, nil
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
    W_MODE[j] = foreign and REPLACE or FULL
    W_EXP[j], W_A[j], W_B[j], W_C[j], W_D[j], W_M[j] = at + window, cut, at, cum, n, drop
    return allow(o, remaining, reset, limit - total - cost, at + window - now)
  end
  -- The oldest entries must leave until total-left+cost <= limit: find
  -- the first whose cumulative cost since base reaches need.
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

local function sliding_counter(j, key, limit, _, window, now, cost, o)
  local r = pcall_('HMGET', key, 'a', 'k', 'c', 'p')
  local mode, sk, sp = FULL, nil, nil
  local k = floor(now / window)
  local curr, prev = 0, 0
  if r.err then
    mode = REPLACE
  elseif r[1] then
    local sc
    sk, sc, sp = num(r[2]), num(r[3]), num(r[4])
    if r[1] ~= '4' or sk == nil or sc == nil or sp == nil then
      mode = REPLACE
    else
      mode = PRIMARY
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
    if mode == PRIMARY and (k ~= sk or prev ~= sp) then
      mode = ALL
    end
    W_MODE[j], W_EXP[j], W_A[j], W_B[j], W_C[j] = mode, start + 2 * window, curr + cost, k, prev
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

-- Leaky bucket (policing) and GCRA: one meter, told apart by the state tag.
-- The level is in scaled units: a unit of cost is `iv` of them and `rate`
-- drain per µs (rate and iv are already divided by their gcd). GCRA's TAT
-- is time + level/rate.
local function meter(tag, j, key, cap, rate, iv, now, cost, o)
  local r = pcall_('HMGET', key, 'a', 'v', 't')
  local mode, stored = FULL, nil
  local level, at = 0, now
  if r.err then
    mode = REPLACE
  elseif r[1] then
    local v, t = num(r[2]), num(r[3])
    if r[1] ~= tag or v == nil or t == nil then
      mode = REPLACE
    else
      mode, stored = PRIMARY, t
      level, at = v, t
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
    if mode == PRIMARY and at ~= stored then
      mode = ALL
    end
    W_MODE[j], W_EXP[j], W_A[j], W_B[j] = mode, now + reset_after, after, at
    return allow(o, remaining, reset, floor((full - after) / iv), reset_after)
  end
  return deny(o, remaining, reset, at + ceil((level - (cap - cost) * iv) / rate) - now)
end

-- evaluate runs the algorithm of entry j, whose arguments are e.
local function evaluate(e, j, key, now, o)
  local alg = e[1]
  if alg == 1 then
    return token_bucket(j, key, e[2], e[3], e[4], now, e[5], o)
  elseif alg == 2 then
    return fixed_window(j, key, e[2], e[3], e[4], now, e[5], o)
  elseif alg == 3 then
    return sliding_log(j, key, e[2], e[3], e[4], now, e[5], o)
  elseif alg == 4 then
    return sliding_counter(j, key, e[2], e[3], e[4], now, e[5], o)
  elseif alg == 5 then
    return meter('5', j, key, e[2], e[3], e[4], now, e[5], o)
  elseif alg == 7 then
    return fixed_window_clock(j, key, e[2], e[3], e[4], now, e[5], o)
  end
  return meter('6', j, key, e[2], e[3], e[4], now, e[5], o)
end

-- commit writes entry j's pending state and its expiry. Hash fields: A is
-- the primary one (changed by every consumption), B and C the others.
local FIELDS = {{'t', 'l'}, {'n', 's'}, nil, {'c', 'k', 'p'}, {'v', 't'}, {'v', 't'}, {'n', 's'}}
local TAGS = {'1', '2', '3', '4', '5', '6', '7'}

local function commit(alg, j, key)
  local mode = W_MODE[j]
  if alg == 3 then
    if mode == REPLACE then
      call('DEL', key)
    else
      call('ZREMRANGEBYSCORE', key, '-inf', format('%d', W_A[j]))
    end
    if W_M[j] then
      call('ZREM', key, W_M[j])
    end
    call('ZADD', key, format('%d', W_B[j]), format('%d:%d', W_C[j], W_D[j]))
  else
    local f = FIELDS[alg]
    if mode == PRIMARY then
      call('HSET', key, f[1], format('%d', W_A[j]))
    elseif alg == 4 then
      if mode == ALL then
        call('HSET', key, 'c', format('%d', W_A[j]), 'k', format('%d', W_B[j]), 'p', format('%d', W_C[j]))
      else
        if mode == REPLACE then
          call('DEL', key)
        end
        call('HSET', key, 'a', '4', 'c', format('%d', W_A[j]), 'k', format('%d', W_B[j]), 'p', format('%d', W_C[j]))
      end
    elseif mode == ALL then
      call('HSET', key, f[1], format('%d', W_A[j]), f[2], format('%d', W_B[j]))
    else
      if mode == REPLACE then
        call('DEL', key)
      end
      call('HSET', key, 'a', TAGS[alg], f[1], format('%d', W_A[j]), f[2], format('%d', W_B[j]))
    end
  end
  call('PEXPIREAT', key, format('%d', ceil(W_EXP[j] / 1000)))
end

local function fail(msg)
  return redis.error_reply('ERR sluice: ' .. msg)
end

-- duplicate returns the position (1..n) of the first key among keys[j0+1..
-- j0+n] that repeats an earlier one, or nil. Few keys: compared pairwise.
-- Many: marked in SEEN with this check's generation, so marks left by a call
-- that was interrupted can never be mistaken for this one's.
local seen_gen = 0
local function duplicate(keys, j0, n)
  if n <= 16 then
    for a = j0 + 2, j0 + n do
      local k = keys[a]
      for b = j0 + 1, a - 1 do
        if keys[b] == k then
          return a - j0
        end
      end
    end
    return nil
  end
  seen_gen = seen_gen + 1
  local dup = nil
  for j = j0 + 1, j0 + n do
    local k = keys[j]
    if SEEN[k] == seen_gen then
      dup = dup or j - j0
    end
    SEEN[k] = seen_gen
  end
  for j = j0 + 1, j0 + n do
    SEEN[keys[j]] = nil
  end
  return dup
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

-- entry parses "algorithm:capacity:rate:interval:cost:shadow" into
-- {alg, cap, rate, iv, cost, shadow}; nil if malformed.
local function entry(s)
  local rec = ememo[s]
  if rec then
    return rec
  end
  if typeof(s) ~= 'string' then
    return nil
  end
  local alg, cap, rate, iv, cost, shadow = match(s, '^(%d+):(%d+):(%d+):(%d+):(%d+):([01])$')
  alg, cap, rate = toint(alg, 1, 7), toint(cap, 1, MAXCOUNT), toint(rate, 0, MAXCOUNT)
  iv, cost = toint(iv, 1, MAXU), toint(cost, 0, MAXCOUNT)
  if alg == nil or cap == nil or rate == nil or iv == nil or cost == nil or ((alg == 1 or alg == 5 or alg == 6) and rate < 1) then
    return nil
  end
  rec = {alg, cap, rate, iv, cost, shadow == '1'}
  if ememo_n >= MEMOMAX then
    ememo, ememo_n = {}, 0
  end
  ememo[s], ememo_n = rec, ememo_n + 1
  return rec
end

-- parse checks every request's arguments into the scratch arrays. It
-- returns the number of requests, or nil and an error message.
local function parse(keys, args)
  local nk, na = #keys, #args
  if nk < 1 or nk > MAXKEYS then
    return nil, 'want 1..' .. MAXKEYS .. ' keys, got ' .. nk
  end
  local p, j0, r = 1, 0, 0
  while p <= na do
    r = r + 1
    local h = header(args[p])
    if h == nil then
      return nil, 'bad header for request ' .. r
    end
    local n = h[1]
    if p + n > na or j0 + n > nk then
      return nil, 'request ' .. r .. ' wants ' .. n .. ' entries: too few keys or arguments'
    end
    R_HDR[r] = h
    for j = j0 + 1, j0 + n do
      local e = entry(args[p + j - j0])
      if e == nil then
        return nil, 'bad arguments for request ' .. r .. ' entry ' .. (j - j0)
      end
      E_REC[j] = e
    end
    if n > 1 then
      local dup = duplicate(keys, j0, n)
      if dup then
        return nil, 'duplicate key in request ' .. r .. ' entry ' .. dup
      end
    end
    j0, p = j0 + n, p + 1 + n
  end
  if r == 0 or j0 ~= nk then
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
    o = d
    local allowed = true
    for j = j0 + 1, j0 + n do
      local e = E_REC[j]
      local ok = evaluate(e, j, keys[j], now, o)
      E_OK[j] = ok
      if not ok and not e[6] then
        allowed = false
      end
      o = o + 6
    end
    if allowed then
      OUT[d] = 1
      if not h[2] then
        for j = j0 + 1, j0 + n do
          local e = E_REC[j]
          if E_OK[j] and e[5] > 0 then
            commit(e[1], j, keys[j])
          end
        end
      end
    else
      OUT[d] = 0
    end
    j0 = j0 + n
  end
  OUT[o + 1] = nil -- the reply ends here (OUT may be longer from an earlier call)
  return OUT
end
