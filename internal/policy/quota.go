package policy

// Unservable says why Envoy's rate limit quota service cannot serve p as
// token buckets ("" when it can): Envoy's filter takes one token per
// request and enforces only token buckets and blanket rules, so what
// needs a call per request cannot be assigned. Such a policy is still
// applied (it may serve the rate limit service); a bucket it matches is
// answered by its failureMode as a blanket rule.
func (p *Policy) Unservable() string {
	switch {
	case p.HoldsInFlight():
		return "a concurrency limit counts requests in flight, which the quota filter does not report"
	case p.Penalty.Enabled():
		return "a penalty box bans on each denial, which the quota filter decides locally"
	case p.Cost != 1:
		return "a cost other than 1: the quota filter takes one token per request"
	case p.Reserve != nil:
		return "charge Reserve settles each request's own cost by its holder, which the quota filter never reports"
	case p.ChargeAlways:
		return "charge Always counts denied requests, which the quota filter's token buckets never charge"
	}
	return ""
}
