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
//     nothing (denied, released already, its lease ended);
//   - a holder admitted and released at the same instant leaves the room
//     as it was;
//   - a holder that holds is denied a second admission;
//   - what is held never exceeds the limit.
func TestReleaseProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, ratelimittest.Seed(t, 44)))
	var freed, nothing, dups int
	walk(t, rng, ratelimit.Concurrency, func(p model.Params, st *model.State, now, cost int64) time.Duration {
		e := ratelimit.Entry{Holder: fmt.Sprintf("h%d", rng.IntN(5)), Cost: cost}
		before, _ := model.Check(p, st, now, 0)
		held := heldBy(p, st, now, e.Holder)
		if rng.IntN(3) == 0 {
			v, next := model.Apply(p, st, now, &e, ratelimit.Release)
			if v.Allowed != (held > 0) || (v.Allowed != (next.Alg != 0)) {
				t.Fatalf("release of %s holding %d: %+v", e.Holder, held, v)
			}
			if held > 0 && v.Remaining != before.Remaining+held {
				t.Fatalf("release of %d: remaining %d, before %d", held, v.Remaining, before.Remaining)
			}
			if held == 0 {
				nothing++
				if v.Remaining != before.Remaining || v.Reset != before.Reset || v.RetryAfter != model.Never {
					t.Fatalf("a release that freed nothing changed the figures: %+v, before %+v", v, before)
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
	t.Logf("%d releases freed, %d freed nothing, %d second admissions denied", freed, nothing, dups)
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
