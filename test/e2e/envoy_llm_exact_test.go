package e2e

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/llmtest"
)

// exactBurst is how many streamed requests each wave sends at once, each
// naming exactEstimate in x-max-tokens; the budget (llmBudget) holds four
// such estimates.
const (
	exactBurst    = 10
	exactEstimate = 500
)

// exactUsage is request i's actual usage: some below the estimate, some
// above it.
func exactUsage(i int) llmtest.Usage {
	completion := []int64{200, 600, 350, 550}[i%4]
	return llmtest.Usage{Prompt: 100, Completion: completion}
}

// TestEnvoyLLMExactness: waves of concurrent streamed requests through the
// example in a real Envoy 1.40, the upstream holding each answer (after its
// first chunks) until every request of the wave has been let through or
// denied. With reserve-then-settle (the example as it is), what the
// upstream served in all never exceeds the budget by more than the
// (actual − estimate) of the requests in flight; charged after the fact
// (charge: Always, the admission counting nothing), every request of the
// first wave got through, whatever the budget.
func TestEnvoyLLMExactness(t *testing.T) {
	t.Run("reserve then settle", func(t *testing.T) {
		g := startLLMGateway(t, func(c string) string { return c }, func(p string) string { return p })
		let, over := exactWaves(t, g)
		total := g.up.Total()
		t.Logf("reserve then settle: %d of %d requests let through; the upstream served %d tokens against a budget of %d (overshoot %d, bound %d: actual − estimate of the requests in flight at the last admission)",
			let[0]+let[1], 2*exactBurst, total, llmBudget, max(0, total-llmBudget), over)
		if total > llmBudget+over {
			t.Errorf("served %d tokens, over the budget %d by more than the bound %d", total, llmBudget, over)
		}
		if let[0] != llmBudget/exactEstimate {
			t.Errorf("the first wave let %d through, want %d (the budget holds that many estimates)", let[0], llmBudget/exactEstimate)
		}
		// The settlements replaced the reservations by what was used.
		g.waitSpent(t, "acme", int(min(total, llmBudget)))
	})
	t.Run("charged after the fact", func(t *testing.T) {
		g := startLLMGateway(t, chargeAfterTheFact(t), alwaysPolicy(t))
		let, _ := exactWaves(t, g)
		total := g.up.Total()
		t.Logf("charged after the fact: %d of %d requests let through; the upstream served %d tokens against a budget of %d (overshoot %d)",
			let[0]+let[1], 2*exactBurst, total, llmBudget, max(0, total-llmBudget))
		if let[0] != exactBurst {
			t.Errorf("the first wave let %d through, want all %d: each arrived while the budget had room", let[0], exactBurst)
		}
	})
}

// exactWaves sends two waves and returns how many requests each let
// through, and the bound of the overshoot: the sum of (actual − estimate)
// over the requests in flight at the last admission (those of the last
// wave that let any through; each wave starts once the one before has
// settled) that used more than their estimate.
func exactWaves(t *testing.T, g *llmGateway) (let [2]int, over int64) {
	t.Helper()
	for wave := 1; wave <= 2; wave++ {
		replies := burstLLM(t, g, wave)
		var waveOver int64
		for _, r := range replies {
			switch r.Status {
			case http.StatusOK:
				let[wave-1]++
				waveOver += max(0, r.Usage.Total()-exactEstimate)
			case http.StatusTooManyRequests:
			default:
				t.Fatalf("wave %d: status %d, want 200 or 429\n%s", wave, r.Status, r.Body)
			}
		}
		if let[wave-1] > 0 {
			over = waveOver
		}
		// The settlements (stream-done calls, fire-and-forget) are counted
		// before the next wave: the test waits until Sluice reports what
		// the upstream served (at most the budget).
		g.waitSpent(t, "acme", int(min(g.up.Total(), llmBudget)))
	}
	return let, over
}

// burstLLM sends exactBurst streamed requests at once, the upstream holding
// their answers until each has reached it or been denied, then lets them
// finish, and returns the replies.
func burstLLM(t *testing.T, g *llmGateway, wave int) []llmtest.Reply {
	t.Helper()
	g.up.Hold()
	replies := make(chan llmtest.Reply, exactBurst)
	for i := range exactBurst {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := llmtest.Do(ctx, &http.Client{}, g.url, llmtest.Call{Stream: true, Usage: exactUsage(i), Header: map[string]string{
				"X-Tenant": "acme", "X-Max-Tokens": strconv.Itoa(exactEstimate),
			}})
			if err != nil {
				r = llmtest.Reply{Status: -1, Body: err.Error()}
			}
			replies <- r
		}()
	}
	var got []llmtest.Reply
	arrived := 0
	deadline := time.After(20 * time.Second)
	for arrived+len(got) < exactBurst {
		select {
		case <-g.up.Arrived():
			arrived++
		case r := <-replies:
			got = append(got, r)
		case <-deadline:
			t.Fatalf("wave %d: %d requests at the upstream and %d answered, want %d in all", wave, arrived, len(got), exactBurst)
		}
	}
	g.up.Release()
	for len(got) < exactBurst {
		select {
		case r := <-replies:
			got = append(got, r)
		case <-deadline:
			t.Fatalf("wave %d: %d of %d answered after the release", wave, len(got), exactBurst)
		}
	}
	return got
}
