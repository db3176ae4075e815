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
	for bad, words := range map[string]string{
		"inputTokens +": "spec.reserve.pricing.expression",
		"[1,2,3,4,5,6,7,8,9,10].map(x, [1,2,3,4,5,6,7,8,9,10].map(y, x * y)).size()": "over the budget",
	} {
		writeFile(t, dir, "tokens.yaml", strings.Replace(tokenBudgetDoc, "inputTokens + 4 * outputTokens", bad, 1))
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
		if !strings.Contains(msg, "spec.reserve.pricing.expression") || !strings.Contains(msg, "last good version stays in force") {
			t.Fatalf("%s: status %q, want the field named and the last good version kept", bad, msg)
		}
	}
}
