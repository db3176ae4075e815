package check

import "slices"

// PartVerdict is one part's share of a decision (a descriptor of an Envoy
// rate limit service request; the request itself when it has no parts).
type PartVerdict struct {
	// Denied: the part took part in the denial: an enforced limit of it
	// denied (the store, the cache of denials or a limit of 0), or one of
	// its enforced policies denied by its onMissingKey or, with the store
	// away, by failureMode Closed. A shadow denial denies nothing.
	Denied bool
	// Reporting is the limit whose figures the part reports: among its
	// enforced limits the denied one that waits longest, else the one
	// with the fewest remaining; a shadow limit only when it has no
	// other. nil when it has none: no policy limits the part, or another
	// part's denial was answered from the cache of denials, which read
	// nothing from the store.
	Reporting *LimitResult
	// Shown is the limit whose figures the client may see for the part
	// (an RLS descriptor's status, from which Envoy builds its
	// x-ratelimit headers): Reporting when it is showable (neither hidden
	// nor shadow), else the part's showable limit that reports first by
	// the same rule; nil when none.
	Shown *LimitResult
}

// partFacts is a part's verdict as kept in an Outcome: indexes, so that
// judging parts allocates nothing. The zero value is a part that neither
// denied nor has a reporting limit.
type partFacts struct {
	denied bool
	// reporting is the index of the part's reporting limit in
	// Outcome.Limits plus one; 0 when it has none.
	reporting int
	// shown is the index of the part's shown limit plus one; 0: none.
	shown int
}

// Reporting is the limit whose figures the answer's headers and denial
// carry (Tightest): on a denial the enforced limit that waits longest,
// otherwise the enforced one with the fewest remaining. nil when none
// reports: no enforced limit was evaluated, or the failure mode answered,
// so that no figure of the store was read.
func (o *Outcome) Reporting() *LimitResult {
	if o.Tightest < 0 || o.Degraded {
		return nil
	}
	return &o.Limits[o.Tightest]
}

// Shown is the limit whose state the client sees (the answer's rate-limit
// headers): the reporting limit when it is showable, else the showable
// limit that reports first by the same rule (reportsBefore) among the
// enforced and soft ones; nil when none is visible. A denial by a hidden
// limit thus shows another limit's figures, or none, and still carries
// its Retry-After (Outcome.RetryAfter).
func (o *Outcome) Shown() *LimitResult {
	lr := o.Reporting()
	if lr == nil || showable(lr) {
		return lr
	}
	var best *LimitResult
	for i := range o.Limits {
		c := &o.Limits[i]
		if !showable(c) {
			continue
		}
		if best == nil || reportsBefore(c, best) {
			best = c
		}
	}
	return best
}

// showable reports whether lr's figures may reach the client: neither a
// hidden limit's nor a shadow one's do. The one rule of Shown and of each
// part's shown limit (Part), so that HTTP and RLS show the same limit.
func showable(lr *LimitResult) bool {
	return !lr.Limit.Hidden && !lr.Limit.Shadow()
}

// SoftOver reports whether lr is a soft limit that the request, allowed,
// went on over: the fact the upstream is told (X-Sluice-Over-Limit).
// Never on a denial, nor when the failure mode answered.
func (o *Outcome) SoftOver(lr *LimitResult) bool {
	return o.Allowed && !o.Degraded && lr.Limit.Soft() && !lr.Allowed
}

// ShownRemaining is what the client is told remains of lr (the HTTP
// headers' and an RLS descriptor status's remaining): none for a soft
// limit the request went on over, whose count may still hold some (a cost
// larger than what is left is not charged), else lr's remaining.
func (o *Outcome) ShownRemaining(lr *LimitResult) int64 {
	if o.SoftOver(lr) {
		return 0
	}
	return lr.Remaining
}

// NamedLimit is the limit an answer says decided: the reporting limit's
// name; none for a ban (the bucket's, not one of its limits') or when no
// limit reports.
func (o *Outcome) NamedLimit() string {
	if lr := o.Reporting(); lr != nil && o.Reason != ReasonBanned {
		return lr.Limit.Name
	}
	return ""
}

// Part is the verdict of part i of the Input (0 for a request without
// parts); a part out of range neither denied nor reports a limit.
func (o *Outcome) Part(i int) PartVerdict {
	var f partFacts
	switch {
	case i == 0:
		f = o.firstPart
	case i-1 < len(o.moreParts):
		f = o.moreParts[i-1]
	}
	v := PartVerdict{Denied: f.denied}
	if f.reporting > 0 {
		v.Reporting = &o.Limits[f.reporting-1]
	}
	if f.shown > 0 {
		v.Shown = &o.Limits[f.shown-1]
	}
	return v
}

// judgeParts records each of the n parts' verdicts once the decision is
// made, and names a denial reported by a banned bucket's limit Banned.
func (o *Outcome) judgeParts(n int) {
	if lr := o.Reporting(); lr != nil && o.Reason == ReasonLimited && (lr.Banned || lr.Ban > 0 && !lr.Policy.Shadow) {
		o.Reason = ReasonBanned // denied by a ban, or by the denial that issued it
	}
	o.firstPart = partFacts{}
	o.moreParts = slices.Grow(o.moreParts[:0], n-1)[:n-1]
	clear(o.moreParts)
	for i := range o.Limits {
		lr := &o.Limits[i]
		f := o.facts(lr.Part)
		if !o.Allowed && !lr.Allowed && lr.Limit.Enforced() {
			f.denied = true
		}
		if f.reporting == 0 || reportsBefore(lr, &o.Limits[f.reporting-1]) {
			f.reporting = i + 1
		}
		if showable(lr) && (f.shown == 0 || reportsBefore(lr, &o.Limits[f.shown-1])) {
			f.shown = i + 1
		}
	}
	if o.Allowed {
		return
	}
	for i := range o.Policies {
		pr := &o.Policies[i]
		if pr.Policy.Shadow {
			continue
		}
		missingKeyDenied := pr.MissingKey && o.Reason == ReasonMissingKey && pr.Policy == o.Decider
		failedClosed := o.Degraded && pr.Policy.FailClosed && !pr.MissingKey
		if missingKeyDenied || failedClosed {
			o.facts(pr.Part).denied = true
		}
	}
}

// facts is the verdict of part i.
func (o *Outcome) facts(i int) *partFacts {
	if i == 0 {
		return &o.firstPart
	}
	return &o.moreParts[i-1]
}

// reportsBefore reports whether a part reports lr rather than best, one
// of its limits met earlier: an enforced or soft limit before a shadow
// one, then an enforced limit's denial, then a limit over (a soft
// limit's, or a shadow one's) before one under it, then among those over
// the one that waits longer, among the others the one with fewer
// remaining. Without soft limits: an enforced limit before a shadow one,
// then a denied one before an allowed one, and so on.
func reportsBefore(lr, best *LimitResult) bool {
	le, be := !lr.Limit.Shadow(), !best.Limit.Shadow()
	ld, bd := !lr.Allowed && lr.Limit.Enforced(), !best.Allowed && best.Limit.Enforced()
	lo, bo := !lr.Allowed, !best.Allowed
	switch {
	case le != be:
		return le
	case ld != bd:
		return ld
	case lo != bo:
		return lo
	case lo:
		return lr.RetryAfter > best.RetryAfter
	}
	return lr.Remaining < best.Remaining
}
