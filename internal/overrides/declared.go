package overrides

import (
	"fmt"
	"slices"
	"strings"
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Invalid is an entry of a RateLimitOverrides object that is not applied.
type Invalid struct {
	// Object is the object's name, Index the entry's index in its
	// spec.overrides.
	Object  string
	Index   int
	Key     string
	Message string
}

// MaxDeclaredKeyLen is the schema's bound on a declared entry's key
// (Override.Key): an object holds up to 10,000 entries and must fit in
// etcd. A longer key value takes a run-time override (MaxKeyLen).
const MaxDeclaredKeyLen = 1024

// Declare checks the entries of objects, the RateLimitOverrides of policy
// p, and returns the valid ones by key and the others with why. Objects
// are taken by name; a key already given by an earlier entry, an entry
// beyond MaxPerPolicy, an expiry that has passed at now, numbers that p
// cannot take or a key the schema refuses (for local mode's files) make
// an entry invalid. The controller and local mode's
// files share it.
func Declare(p *policy.Policy, objects []*ratelimitv1alpha1.RateLimitOverrides, now time.Time) (map[string]Entry, []Invalid) {
	objects = slices.Clone(objects)
	slices.SortFunc(objects, func(a, b *ratelimitv1alpha1.RateLimitOverrides) int { return strings.Compare(a.Name, b.Name) })
	valid := map[string]Entry{}
	from := map[string]string{} // key -> "object (entry i)" that gave it
	var invalid []Invalid
	for _, o := range objects {
		for i := range o.Spec.Overrides {
			d := &o.Spec.Overrides[i]
			bad := func(format string, args ...any) {
				invalid = append(invalid, Invalid{Object: o.Name, Index: i, Key: d.Key, Message: fmt.Sprintf(format, args...)})
			}
			e := Entry{Key: d.Key, Limits: make(map[string]int64, len(d.Limits)), Source: policy.OverrideDeclared, Object: o.Name}
			for _, l := range d.Limits {
				e.Limits[l.Name] = int64(l.Limit)
			}
			if d.Expires != nil {
				t := d.Expires.UTC()
				e.Expires = &t
			}
			switch first, dup := from[d.Key]; {
			case d.Key == "":
				bad("key is required")
			case len(d.Key) > MaxDeclaredKeyLen:
				bad("key is %d bytes long, more than the %d of a declared override: set a run-time override (the admin API, kubectl sluice override set) instead", len(d.Key), MaxDeclaredKeyLen)
			case dup:
				bad("key %q is overridden already by %s", d.Key, first)
			case e.expired(now):
				bad("expires %s has passed", e.Expires.Format(time.RFC3339))
			case len(valid) >= MaxPerPolicy:
				bad("beyond the %d overrides a policy may have", MaxPerPolicy)
			default:
				if _, err := e.compile(p); err != nil {
					bad("%v", err)
					continue
				}
				valid[d.Key] = e
				from[d.Key] = fmt.Sprintf("RateLimitOverrides %s (entry %d)", o.Name, i)
			}
		}
	}
	return valid, invalid
}
