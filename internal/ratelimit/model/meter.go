package model

// meter is LeakyBucket (policing) and GCRA, which are the same meter
// (ITU-T I.371: the continuous-state leaky bucket and virtual scheduling
// admit the same cells), told apart by their parameters and state tag.
//
// The level is kept in scaled integer units: one unit of cost is Interval
// scaled units, and Rate scaled units drain per µs, so with Params reduced by
// gcd everything is an exact integer. A cost fits when level+cost*Interval <=
// Capacity*Interval. For GCRA the theoretical arrival time is
// TAT = time + level/Rate, and that condition is the classic
// TAT+cost*T-now <= burst*T with T = Interval/Rate, multiplied out. The
// state is untouched again when the level has drained (TAT <= now).
// Charged always, the level goes up to twice the bucket (2*Capacity*Interval
// scaled units, below 2^53 for a limit that passes ValidateDebt); the cost
// added is at most Capacity, so the sum stays exact up to that bound.
func meter(p Params, s *State, now, cost int64, always bool) (v Verdict, next State) {
	capacity, rate, iv := p.Capacity, p.Rate, p.Interval
	level, at := int64(0), now
	if s.Alg == p.Alg {
		level, at = drained(p, s, now)
	}
	full := capacity * iv
	drainedIn := func(l int64) int64 {
		if l == 0 {
			return 0
		}
		return at + ceilDiv(l, rate) - now
	}
	v.Remaining, v.Reset = max(full-level, 0)/iv, drainedIn(level)
	switch {
	case cost > capacity:
		deny(&v, Never)
	case level+cost*iv <= full:
		after := level + cost*iv
		allow(&v, (full-after)/iv, drainedIn(after))
		next = State{Alg: p.Alg, A: after, B: at}
	default:
		deny(&v, at+ceilDiv(level-(capacity-cost)*iv, rate)-now)
	}
	if always && cost > 0 && !v.Allowed {
		level = max(level, min(level+min(cost, capacity)*iv, 2*full))
		charged(&v, drainedIn(level))
		next = State{Alg: p.Alg, A: level, B: at}
	}
	return v, next
}

// drained is meter state s brought to now: its level and the time of it
// (now, unless the state is ahead of now after the clock stepped back).
func drained(p Params, s *State, now int64) (level, at int64) {
	level, at = max(s.A, 0), s.B
	if now > at {
		if elapsed := now - at; elapsed >= ceilDiv(level, p.Rate) {
			level = 0
		} else {
			level -= elapsed * p.Rate
		}
		at = now
	}
	return level, at
}
