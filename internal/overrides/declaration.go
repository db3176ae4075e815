package overrides

import (
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Declaration is what applies of a policy's RateLimitOverrides objects:
// the entries to declare, each object's entries not applied (Invalid, by
// object name), the objects whose new spec cannot work (Stalled) and how
// many of their entries in force stay (Kept). The controller and local
// mode's files apply the same Declaration, so a folder and a cluster
// agree on what an object with a bad entry does.
type Declaration struct {
	Entries map[string]Entry
	Invalid map[string][]Invalid
	Stalled map[string]bool
	Kept    map[string]int32
}

// DeclareKeepingLastGood checks objects against p as Declare does. An
// object with an entry that cannot work (anything but an expiry that has
// passed) stalls: none of its new entries applies nor claims a key, and
// its entries in force stay, as a policy's last good version does.
// inForce reads the policy's declared entries in the store; it is called
// only when an object stalls.
func DeclareKeepingLastGood(p *policy.Policy, objects []*ratelimitv1alpha1.RateLimitOverrides, now time.Time, inForce func() (map[string]Entry, error)) (Declaration, error) {
	valid, invalid := Declare(p, objects, now)
	d := Declaration{Entries: valid, Invalid: map[string][]Invalid{}, Stalled: map[string]bool{}}
	for _, bad := range invalid {
		d.Invalid[bad.Object] = append(d.Invalid[bad.Object], bad)
		if !bad.Expired {
			d.Stalled[bad.Object] = true
		}
	}
	if len(d.Stalled) == 0 {
		return d, nil
	}
	var others []*ratelimitv1alpha1.RateLimitOverrides
	for _, o := range objects {
		if !d.Stalled[o.Name] {
			others = append(others, o)
			delete(d.Invalid, o.Name)
		}
	}
	d.Entries, invalid = Declare(p, others, now)
	for _, bad := range invalid {
		d.Invalid[bad.Object] = append(d.Invalid[bad.Object], bad)
	}
	old, err := inForce()
	if err != nil {
		return d, err
	}
	d.Kept = KeepInForce(p, d.Entries, old, d.Stalled, now)
	return d, nil
}
