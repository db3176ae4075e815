package policy_test

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
)

func reservePolicy(t *testing.T, reserve string) *policy.Policy {
	t.Helper()
	return policytest.Compile(t, "ns", "p", "charge: Reserve\ncost: 100\nreserve: "+reserve+"\nlimits: [{name: m, fixedWindow: {limit: 1000000, window: 1m}}]\n")
}

func TestReserveEstimateIsClampedToMax(t *testing.T) {
	p := reservePolicy(t, "{max: 500, ttl: 2m}")
	if !p.Reserves() || p.Reserve.TTL.String() != "2m0s" {
		t.Fatalf("reserve = %+v", p.Reserve)
	}
	for _, c := range []struct {
		est, want int64
		clamped   bool
	}{{100, 100, false}, {500, 500, false}, {501, 500, true}, {ratelimit.MaxCount, 500, true}} {
		if got, clamped := p.Reserve.Estimate(c.est); got != c.want || clamped != c.clamped {
			t.Errorf("Estimate(%d) = %d, %v; want %d, %v", c.est, got, clamped, c.want, c.clamped)
		}
	}
	if got, clamped := reservePolicy(t, "{}").Reserve.Estimate(ratelimit.MaxCount); got != ratelimit.MaxCount || clamped {
		t.Errorf("without max: %d, %v", got, clamped)
	}
}

func TestReservePricesUsage(t *testing.T) {
	u := policy.Usage{InputTokens: 1000, OutputTokens: 200, CachedInputTokens: 600}
	for _, c := range []struct {
		reserve string
		want    int64
	}{
		{"{}", 1200}, // input (cached included) + output
		{"{pricing: {outputTokens: '4', cachedInputTokens: '0.1'}}", 400 + 60 + 800},
		{"{pricing: {inputTokens: '0.000001'}}", 1 + 200}, // 1000 millionths round up to 1
		{"{pricing: {expression: 'inputTokens + 4 * outputTokens - cachedInputTokens'}}", 1000 + 800 - 600},
		{"{pricing: {expression: 'double(outputTokens) * 1.5 + 0.1'}}", 301},
		{"{pricing: {expression: 'cachedInputTokens - inputTokens'}}", 0},                         // negative settles 0
		{"{pricing: {expression: 'inputTokens * 10000000'}}", ratelimit.MaxCount},                 // above the largest count
		{"{pricing: {inputTokens: '999999.999999', outputTokens: '999999'}}", ratelimit.MaxCount}, // saturated
	} {
		got, err := reservePolicy(t, c.reserve).Reserve.Price(u)
		if err != nil || got != c.want {
			t.Errorf("%s: Price = %d, %v; want %d", c.reserve, got, err, c.want)
		}
	}
	if _, err := reservePolicy(t, "{pricing: {expression: 'inputTokens / (outputTokens - 200)'}}").Reserve.Price(u); err == nil {
		t.Error("a division by zero priced something")
	}
}

func TestUsageValidateNamesTheField(t *testing.T) {
	for _, c := range []struct {
		u     policy.Usage
		field string
	}{
		{policy.Usage{InputTokens: -1}, "usage.inputTokens"},
		{policy.Usage{OutputTokens: ratelimit.MaxCount + 1}, "usage.outputTokens"},
		{policy.Usage{InputTokens: 1, CachedInputTokens: 2}, "usage.cachedInputTokens"},
	} {
		if err := c.u.Validate("usage"); err == nil || !strings.HasPrefix(err.Error(), c.field+":") {
			t.Errorf("%+v: %v, want an error naming %s", c.u, err, c.field)
		}
	}
	if err := (policy.Usage{InputTokens: 5, CachedInputTokens: 5, OutputTokens: ratelimit.MaxCount}).Validate("usage"); err != nil {
		t.Error(err)
	}
}

// A pricing expression that does not compile, gives no number, or costs
// more than its bound is refused naming its field.
func TestReservePricingExpressionRefused(t *testing.T) {
	for expr, words := range map[string]string{
		"inputTokens +":   "Syntax error",
		"tokens * 2":      "the variables are inputTokens, outputTokens and cachedInputTokens",
		"inputTokens > 3": "must give a number",
		"[1,2,3,4,5,6,7,8,9,10].map(x, [1,2,3,4,5,6,7,8,9,10].map(y, x * y * inputTokens)).size()": "over the budget",
	} {
		spec := policytest.Spec(t, "charge: Reserve\nreserve: {pricing: {expression: '"+expr+"'}}\nlimits: [{name: m, fixedWindow: {limit: 10, window: 1m}}]\n")
		_, err := policy.Compile("ns", "p", &spec)
		if err == nil || !strings.Contains(err.Error(), "spec.reserve.pricing.expression") || !strings.Contains(err.Error(), words) {
			t.Errorf("%s: %v, want spec.reserve.pricing.expression and %q", expr, err, words)
		}
	}
}
