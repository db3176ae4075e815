package ratelimittest

import (
	"context"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

// Reference is the model applied directly, one call at a time, with no
// expiry of its own: the plainest reading of the algorithms, which the
// stores are compared against. Not safe for concurrent use.
type Reference struct {
	Clock  *Clock
	states map[string]model.State
	// expires is the µs at which each written key's TTL ends.
	expires map[string]int64
}

// NewReference returns an empty Reference reading clock.
func NewReference(clock *Clock) *Reference {
	return &Reference{Clock: clock, states: map[string]model.State{}, expires: map[string]int64{}}
}

// Check implements ratelimit.Store.
func (r *Reference) Check(_ context.Context, _ time.Duration, req *ratelimit.Request, dec *ratelimit.Decision) error {
	if err := req.Validate(); err != nil {
		return err
	}
	now := r.Clock.Micros()
	verdicts := make([]model.Verdict, len(req.Entries))
	nexts := make([]model.State, len(req.Entries))
	for i, e := range req.Entries {
		p, err := model.Compile(e.Limit)
		if err != nil {
			return err
		}
		st := r.states[e.Key]
		verdicts[i], nexts[i] = model.Check(p, &st, now, e.Cost)
	}
	dec.Allowed = model.Decide(req.Entries, verdicts)
	dec.Results = dec.Results[:0]
	for i, e := range req.Entries {
		v := &verdicts[i]
		dec.Results = append(dec.Results, v.Result(dec.Allowed))
		if dec.Allowed && !req.DryRun && v.Allowed && e.Cost > 0 {
			r.states[e.Key] = nexts[i]
			r.expires[e.Key] = now + v.ResetAfter
		}
	}
	return nil
}

// ExpiresAt returns when the TTL of key's last write ends, in µs.
func (r *Reference) ExpiresAt(key string) (int64, bool) {
	us, ok := r.expires[key]
	return us, ok
}

// Keys returns every key ever written.
func (r *Reference) Keys() []string {
	keys := make([]string, 0, len(r.states))
	for k := range r.states {
		keys = append(keys, k)
	}
	return keys
}

// Close implements ratelimit.Store.
func (r *Reference) Close() error { return nil }
