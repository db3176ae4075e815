package check

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// A policy with charge Reserve takes a request's estimate at admission,
// held under the request's holder in each of its limits, and a settlement
// (ratelimit.Settle) naming the holder again replaces it by the actual
// cost. The holder is the one of concurrency limits: the descriptor entry
// of a descriptor policy (Reserve.Holder), else the Input's (the
// middleware's request, a /v1/check handle); a transport that names none
// cannot settle, and is refused (ErrNoRelease).

// ReservationOutcome labels sluice_reservations_total: what an admission
// or a settlement did to a policy's reservation.
type ReservationOutcome string

const (
	// ReservationReserved: an admitted request reserved its estimate.
	ReservationReserved ReservationOutcome = "reserved"
	// ReservationClamped: an admission's estimate was above reserve.max,
	// and was clamped to it (counted beside its reserved or its denial).
	ReservationClamped ReservationOutcome = "clamped"
	// ReservationSettledBelow: the actual cost was below the reservation,
	// and the difference was given back.
	ReservationSettledBelow ReservationOutcome = "settled_below"
	// ReservationSettledExact: the actual cost was the reservation.
	ReservationSettledExact ReservationOutcome = "settled_exact"
	// ReservationSettledAbove: the actual cost was above the reservation,
	// and the difference was taken, into debt if need be.
	ReservationSettledAbove ReservationOutcome = "settled_above"
	// ReservationNothingReserved: a settlement of a holder that holds no
	// reservation (denied, settled already, expired, unknown, or a denied
	// duplicate's) changed nothing.
	ReservationNothingReserved ReservationOutcome = "nothing_reserved"
	// ReservationRefused: a check met the policy where no settlement can
	// follow (ErrNoRelease).
	ReservationRefused ReservationOutcome = "refused_no_release"
)

// ReservationUnits labels sluice_reservation_units_total: the units a
// policy's reservations moved.
type ReservationUnits string

const (
	// UnitsReserved: taken at admission as an estimate.
	UnitsReserved ReservationUnits = "reserved"
	// UnitsGivenBack: given back by settlements below their reservation.
	UnitsGivenBack ReservationUnits = "given_back"
	// UnitsTaken: taken by settlements above their reservation.
	UnitsTaken ReservationUnits = "taken"
)

// reservation is what a check did to one policy's reservation.
type reservation struct {
	// outcome is "" when the policy reserved nothing and settled nothing.
	outcome ReservationOutcome
	clamped bool
	// units reserved (admission), or the settlement's reservation and
	// actual cost.
	reserved, actual int64
}

// Reservation reports what the check did to the policy's reservation:
// its outcome ("" when none), the units reserved (at admission, or the
// reservation a settlement replaced) and the actual cost settled.
func (pr *PolicyResult) Reservation() (outcome ReservationOutcome, reserved, actual int64) {
	return pr.reservation.outcome, pr.reservation.reserved, pr.reservation.actual
}

// reserveCost is the cost of the reserve policy p's entries in this check
// at cost (the policy's, or the part's): an admission's estimate clamped
// to reserve.max; a settlement's actual cost, the usage's price when the
// part reports usage, else cost (the part's actual, or without one, or
// when Part.Estimated, the admission's estimate, clamped as it was: the
// reservation stays charged as estimated).
func (sc *scratch) reserveCost(pr *PolicyResult, cost int64, part *Part) int64 {
	r := pr.Policy.Reserve
	if sc.action == ratelimit.Settle {
		if part.Usage == nil {
			if !part.CostSet || part.Estimated {
				cost, _ = r.Estimate(cost)
			}
			return cost
		}
		price, err := r.Price(*part.Usage)
		if err != nil && sc.priceErr == nil {
			sc.priceErr = fmt.Errorf("policy %s: %w", pr.Policy, err)
		}
		return price
	}
	if sc.action.Decides() && !part.Refunded {
		cost, pr.reservation.clamped = r.Estimate(cost)
	}
	return cost
}

// reserves says where entry e of the reserve policy p goes (see holds),
// and gives it its holder and, at admission, its reservation. A refund or
// a release leaves it alone: a reservation is settled, not refunded (the
// rate limit service settles negative hits in a call of its own).
func (sc *scratch) reserves(p *policy.Policy, owner, l int, e *ratelimit.Entry, part *Part) entryRoute {
	switch {
	case sc.action == ratelimit.Refund, sc.action == ratelimit.Release:
		return notSent
	case sc.action == ratelimit.DryRun && e.Cost == 0:
		e.Reserve = p.Reserve.TTL // reports what is reserved, reserves nothing
		return toStore
	case sc.action != ratelimit.Settle && (e.Cost == 0 || part.Refunded):
		return toStore // counts nothing, reserves nothing
	}
	holder := sc.holder
	named := p.Reserve.Holder != "" && part.Request != nil // none: the bucket is named (Inspect)
	if named {
		holder, _ = part.Request.Lookup(p.Reserve.Holder)
	}
	if holder == "" || len(holder) > ratelimit.MaxHolderLen {
		switch {
		case named:
			return untracked
		case sc.action == ratelimit.DryRun: // reports what is reserved, holds nothing
			e.Reserve = p.Reserve.TTL
			return toStore
		case sc.noHolder == nil:
			sc.noHolder = &LimitResult{Policy: p, Limit: &p.Limits[l], owner: owner, index: l}
		}
		return notSent
	}
	e.Holder = holder
	if sc.action != ratelimit.Settle {
		e.Reserve = p.Reserve.TTL
	}
	return toStore
}

// noSettlement is the ErrNoRelease of a reserve policy, in its own words.
type noSettlement string

func (e noSettlement) Error() string      { return string(e) }
func (noSettlement) Is(target error) bool { return target == ErrNoRelease }

// noteReservations records, for an admission decided by the store, the
// reservation of each reserve policy: reserved when the request was
// admitted (its estimate, the entries' cost), and whether it was clamped.
// A shadow policy's limit that would have denied reserved nothing.
func noteReservations(sc *scratch, out *Outcome) {
	for _, u := range sc.uses {
		e := &sc.req.Entries[u.entry]
		pr := &out.Policies[u.owner]
		if e.Reserve == 0 || pr.reservation.outcome != "" {
			continue
		}
		if out.Allowed && sc.dec.Results[u.entry].Allowed {
			pr.reservation.outcome, pr.reservation.reserved = ReservationReserved, e.Cost
		}
	}
}

// applySettle copies a settlement's figures into out and records, per
// policy, what it did: settled (below, exact or above its reservation)
// when a limit of the policy held the holder's reservation, else nothing
// reserved. It is allowed when something was settled.
func applySettle(sc *scratch, out *Outcome) {
	out.Allowed = sc.dec.Allowed
	out.Reason = ReasonAllowed
	for _, u := range sc.uses {
		e := &sc.req.Entries[u.entry]
		r := sc.dec.Results[u.entry]
		out.Limits = append(out.Limits, newLimitResult(out, u.owner, u.limit, e.Key, r))
		pr := &out.Policies[u.owner]
		res := &pr.reservation
		switch {
		case r.Allowed && (res.outcome == "" || res.outcome == ReservationNothingReserved):
			res.reserved, res.actual = r.Settled, e.Cost
			res.outcome = ReservationSettledExact
			if e.Cost < r.Settled {
				res.outcome = ReservationSettledBelow
			} else if e.Cost > r.Settled {
				res.outcome = ReservationSettledAbove
			}
		case res.outcome == "":
			res.outcome = ReservationNothingReserved
		}
	}
}

// untrackedSettlements records the settlement of each policy whose holder
// could not be tracked: nothing reserved, nothing settled.
func untrackedSettlements(sc *scratch, out *Outcome) {
	for _, z := range sc.zeros {
		if res := &out.Policies[z.owner].reservation; z.untracked && res.outcome == "" {
			res.outcome = ReservationNothingReserved
		}
	}
}

// Reserves reports whether the request o allowed now holds a reservation
// that a settlement must replace when it ends.
func (o *Outcome) Reserves() bool {
	if !o.Allowed || o.dryRun {
		return false
	}
	for i := range o.Policies {
		if pr := &o.Policies[i]; !pr.MissingKey && pr.Policy.Reserves() {
			return true
		}
	}
	return false
}

// reservationMetrics are sluice_reservations_total and
// sluice_reservation_units_total.
func reservationMetrics() (reservations, units *prometheus.CounterVec) {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_reservations_total",
			Help: "Reservations of policies with charge Reserve by outcome: reserved (an admission took its estimate), clamped (an estimate above reserve.max, clamped to it), settled_below, settled_exact, settled_above (a settlement replaced a reservation by an actual cost below, equal to or above it), nothing_reserved (a settlement of a holder that holds none: denied, settled already, expired, unknown, a denied duplicate's), refused_no_release (a check through a transport that cannot settle: the HTTP auth hooks, ext_authz).",
		}, []string{"namespace", "policy", "outcome"}),
		prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_reservation_units_total",
			Help: "Units moved by the reservations of policies with charge Reserve, by kind: reserved (estimates taken at admission), given_back (by settlements below their reservation), taken (by settlements above it, into debt if need be).",
		}, []string{"namespace", "policy", "kind"})
}

// countReservation counts, in the metrics, what the check did to pr's
// reservation.
func (m *Metrics) countReservation(pr *PolicyResult) {
	res := &pr.reservation
	p := pr.Policy
	if res.clamped {
		m.reservations.WithLabelValues(p.Namespace, p.Name, string(ReservationClamped)).Inc()
	}
	if res.outcome == "" {
		return
	}
	m.reservations.WithLabelValues(p.Namespace, p.Name, string(res.outcome)).Inc()
	switch res.outcome {
	case ReservationReserved:
		m.reservationUnits.WithLabelValues(p.Namespace, p.Name, string(UnitsReserved)).Add(float64(res.reserved))
	case ReservationSettledBelow:
		m.reservationUnits.WithLabelValues(p.Namespace, p.Name, string(UnitsGivenBack)).Add(float64(res.reserved - res.actual))
	case ReservationSettledAbove:
		m.reservationUnits.WithLabelValues(p.Namespace, p.Name, string(UnitsTaken)).Add(float64(res.actual - res.reserved))
	}
}
