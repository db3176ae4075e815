package model_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
)

// TestReleaseProperties walks random timelines of admissions and releases
// by a few holders and checks what Release promises:
//   - a release frees exactly what its holder holds, nothing when it holds
//     nothing (denied, released already, its lease ended) or when a
//     denied duplicate of it is pending (that release is the duplicate's);
//   - a holder admitted and released at the same instant leaves the room
//     as it was;
//   - a holder that holds is denied a second admission, which its hold
//     remembers;
//   - what is held never exceeds the limit.
func TestReleaseProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, ratelimittest.Seed(t, 44)))
	var freed, nothing, dups, dupReleases int
	walk(t, rng, ratelimit.Concurrency, func(p model.Params, st *model.State, now, cost int64) time.Duration {
		e := ratelimit.Entry{Holder: fmt.Sprintf("h%d", rng.IntN(5)), Cost: cost}
		before, _ := model.Check(p, st, now, 0)
		held, pending := heldBy(p, st, now, e.Holder), pendingOf(p, st, now, e.Holder)
		if rng.IntN(3) == 0 {
			v, next := model.Apply(p, st, now, &e, ratelimit.Release)
			if v.Allowed != (held > 0 && pending == 0) || (held > 0) != (next.Alg != 0) {
				t.Fatalf("release of %s holding %d, %d duplicates pending: %+v", e.Holder, held, pending, v)
			}
			if v.Allowed && v.Remaining != before.Remaining+held {
				t.Fatalf("release of %d: remaining %d, before %d", held, v.Remaining, before.Remaining)
			}
			if !v.Allowed {
				nothing++
				if v.Remaining != before.Remaining || v.Reset != before.Reset || v.RetryAfter != model.Never {
					t.Fatalf("a release that freed nothing changed the figures: %+v, before %+v", v, before)
				}
				if held > 0 {
					dupReleases++
					if got := pendingOf(p, &next, now, e.Holder); got != pending-1 || heldBy(p, &next, now, e.Holder) != held {
						t.Fatalf("a duplicate's release: %d pending after, %d before", got, pending)
					}
					*st = next
				}
				return 0
			}
			freed++
			*st = next
			return time.Duration(v.Reset) * time.Microsecond
		}
		v, next := model.Apply(p, st, now, &e, ratelimit.Consume)
		if held > 0 && cost > 0 {
			dups++
			if v.Allowed {
				t.Fatalf("%s holds %d and was admitted again", e.Holder, held)
			}
			if !model.Writes(false, &e, &v, &next) || pendingOf(p, &next, now, e.Holder) != pending+1 {
				t.Fatalf("a duplicate of %s not remembered: %+v", e.Holder, next)
			}
			*st = next
		}
		if v.Allowed && cost > 0 {
			back, _ := model.Apply(p, &next, now, &e, ratelimit.Release)
			if !back.Allowed || back.Remaining != before.Remaining {
				t.Fatalf("cost %d taken and released at %d: remaining %d, before %d", cost, now, back.Remaining, before.Remaining)
			}
			if total := heldBy(p, &next, now, ""); total > p.Capacity {
				t.Fatalf("%d held, limit %d", total, p.Capacity)
			}
			*st = next
		}
		return time.Duration(max(v.RetryAfter, v.Reset)) * time.Microsecond
	})
	t.Logf("%d releases freed, %d freed nothing (%d of them a duplicate's), %d second admissions denied", freed, nothing, dupReleases, dups)
	if dupReleases == 0 {
		t.Fatal("no duplicate's release: the walk tests nothing of them")
	}
}

// pendingOf is the count of duplicates pending on holder's live hold in
// st at now.
func pendingOf(p model.Params, st *model.State, now int64, holder string) int64 {
	for _, h := range st.Holds {
		if h.At+p.Interval > now && h.Holder == holder {
			return h.Pending
		}
	}
	return 0
}

// heldBy is what holder holds in st at now ("": what all hold).
func heldBy(p model.Params, st *model.State, now int64, holder string) int64 {
	var n int64
	for _, h := range st.Holds {
		if h.At+p.Interval > now && (holder == "" || h.Holder == holder) {
			n += h.Cost
		}
	}
	return n
}
