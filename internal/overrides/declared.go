package overrides

import (
	"errors"
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
	Object string
	Index  int
	Key    string
	// Field is the field at fault, such as spec.overrides[3].limits[0].name.
	Field   string
	Message string
	// Expired says the entry's expiry has passed: it did what it was
	// written to do, unlike the others, which cannot work as written.
	Expired bool
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
			entry := fmt.Sprintf("spec.overrides[%d]", i)
			bad := func(field, format string, args ...any) {
				invalid = append(invalid, Invalid{Object: o.Name, Index: i, Key: d.Key, Field: field, Message: fmt.Sprintf(format, args...)})
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
				bad(entry+".key", "key is required")
			case len(d.Key) > MaxDeclaredKeyLen:
				bad(entry+".key", "key is %d bytes long, more than the %d of a declared override: set a run-time override (the admin API, kubectl sluice override set) instead", len(d.Key), MaxDeclaredKeyLen)
			case dup:
				bad(entry+".key", "key %q is overridden already by %s", d.Key, first)
			case e.expired(now):
				bad(entry+".expires", "expires %s has passed", e.Expires.Format(time.RFC3339))
				invalid[len(invalid)-1].Expired = true
			case len(valid) >= MaxPerPolicy:
				bad(entry, "beyond the %d overrides a policy may have", MaxPerPolicy)
			default:
				if _, err := e.compile(p); err != nil {
					bad(limitField(p, d, entry), "%v", err)
					continue
				}
				valid[d.Key] = e
				from[d.Key] = fmt.Sprintf("RateLimitOverrides %s (entry %d)", o.Name, i)
			}
		}
	}
	return valid, invalid
}

// limitField names the limit of entry d (at field entry) that p cannot
// take: its name when p has no such limit, else its number. Each limit is
// compiled alone, as NewOverride names only the first it finds.
func limitField(p *policy.Policy, d *ratelimitv1alpha1.Override, entry string) string {
	for j, l := range d.Limits {
		_, err := p.NewOverride(policy.OverrideDeclared, map[string]int64{l.Name: int64(l.Limit)}, time.Time{}, "", "")
		var unknown *policy.UnknownLimitError
		switch {
		case errors.As(err, &unknown):
			return fmt.Sprintf("%s.limits[%d].name", entry, j)
		case err != nil:
			return fmt.Sprintf("%s.limits[%d].limit", entry, j)
		}
	}
	return entry + ".limits"
}

// KeepInForce adds to valid the entries in force (inForce: the policy's
// declared entries in the store) of the objects named in stalled, whose
// new specs cannot work: as a policy's last good version stays while its
// new spec stalls, so do such an object's entries. Entries that have
// expired at now, no longer compile against p (the policy changed), give a
// key valid has already or pass MaxPerPolicy are left out. It returns how
// many entries it kept per object.
func KeepInForce(p *policy.Policy, valid, inForce map[string]Entry, stalled map[string]bool, now time.Time) map[string]int32 {
	kept := map[string]int32{}
	keys := make([]string, 0, len(inForce))
	for key, e := range inForce {
		if stalled[e.Object] {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	for _, key := range keys {
		e := inForce[key]
		if _, taken := valid[key]; taken || e.expired(now) || len(valid) >= MaxPerPolicy {
			continue
		}
		if _, err := e.compile(p); err != nil {
			continue
		}
		valid[key] = e
		kept[e.Object]++
	}
	return kept
}
