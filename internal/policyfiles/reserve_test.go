//go:build unix

package policyfiles

import (
	"strings"
	"testing"
	"time"
)

const tokenBudgetDoc = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: tokens, namespace: shop}
spec:
  charge: Reserve
  reserve: {pricing: {expression: 'inputTokens + 4 * outputTokens'}}
  limits: [{name: month, calendar: {limit: 5000000, period: Month}}]
`

// A token budget's pricing expression that does not compile, or whose
// cost can exceed its bound, is refused naming the field, and the last
// good version of the policy stays in force.
func TestTokenBudgetPricingRefusedKeepsTheLastGood(t *testing.T) {
	f, dir := newFiles(t, map[string]string{"tokens.yaml": tokenBudgetDoc})
	for i, bad := range []string{"inputTokens +", "[1,2,3,4,5,6,7,8,9,10].map(x, [1,2,3,4,5,6,7,8,9,10].map(y, x * y)).size()"} {
		words := [][]string{{"spec.reserve.pricing.expression", "Syntax error"}, {"spec.reserve.pricing.expression", "over the budget"}}[i]
		writeFileAt(t, dir, "tokens.yaml", strings.Replace(tokenBudgetDoc, "inputTokens + 4 * outputTokens", bad, 1), written.Add(time.Duration(i+1)*time.Second))
		if err := f.Reload(); err != nil {
			t.Fatalf("reload: %v", err)
		}
		p := f.Policies().Get("shop", "tokens")
		if p == nil || !p.Reserves() {
			t.Fatalf("%s: the last good version is not in force", bad)
		}
		var msg string
		for _, st := range f.Statuses() {
			if st.Name == "tokens" && !st.Ready {
				msg = st.Message
			}
		}
		for _, w := range append(words, "last good version stays in force") {
			if !strings.Contains(msg, w) {
				t.Fatalf("%s: status %q, want %q (the field named, the last good version kept)", bad, msg, w)
			}
		}
	}
}
