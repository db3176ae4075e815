package model

import "github.com/sluice-dev/sluice/internal/ratelimit"

// tokenBucket: discrete refills. Rate tokens arrive at once every
// Interval after the refill clock started. A full bucket equals an untouched
// one (the refill clock restarts when the first token is taken from a full
// bucket), which is what lets the key expire exactly when the bucket is full
// again (a bucket that kept the refill clock's phase while full could not
// expire then). Charged always, the bucket goes down to -Capacity tokens
// (in debt) and refills from there.
func tokenBucket(p Params, s *State, now, cost int64, always bool) (v Verdict, next State) {
	capacity, rate, iv := p.Capacity, p.Rate, p.Interval
	tokens, last := capacity, now
	if s.Alg == ratelimit.TokenBucket {
		tokens, last = refilled(p, s, now)
	}
	// fullIn is how long until the bucket holding t tokens is full.
	fullIn := func(t int64) int64 {
		if t >= capacity {
			return 0
		}
		return last + ceilDiv(capacity-t, rate)*iv - now
	}
	v.Remaining, v.Reset = max(tokens, 0), fullIn(tokens)
	switch {
	case cost > capacity:
		deny(&v, Never)
	case cost <= tokens:
		allow(&v, tokens-cost, fullIn(tokens-cost))
		next = State{Alg: ratelimit.TokenBucket, A: tokens - cost, B: last}
	default:
		deny(&v, last+ceilDiv(cost-tokens, rate)*iv-now)
	}
	if always && cost > 0 && !v.Allowed {
		left := max(tokens-cost, -capacity)
		charged(&v, fullIn(left))
		next = State{Alg: ratelimit.TokenBucket, A: left, B: last}
	}
	return v, next
}

// refilled is token bucket state s brought to now: its tokens and the
// time of its last refill step (now when full).
func refilled(p Params, s *State, now int64) (tokens, last int64) {
	capacity, rate, iv := p.Capacity, p.Rate, p.Interval
	tokens, last = min(max(s.A, -capacity), capacity), s.B
	if tokens < capacity && now > last {
		if steps := (now - last) / iv; steps > 0 {
			if steps >= ceilDiv(capacity-tokens, rate) {
				tokens = capacity
			} else {
				tokens += steps * rate
				last += steps * iv
			}
		}
	}
	if tokens >= capacity {
		last = now
	}
	return tokens, last
}
