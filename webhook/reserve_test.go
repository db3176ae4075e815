package webhook

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// tokenBudgetPolicy is a client's token budget on /v1/chat: 1000 an hour,
// an estimate of 100 per request (at most 400), output priced at 4.
const tokenBudgetPolicy = `match: {paths: [/v1/chat]}
charge: Reserve
reserve: {max: 400, pricing: {outputTokens: '4', cachedInputTokens: '0.5'}}
cost: 100
limits: [{name: hour, fixedWindow: {limit: 1000, window: 1h}}]`

func postJSON(t *testing.T, url, body string, into any) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if into != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, string(b)
}

// POST /v1/check on a token budget reserves the estimate (cost, clamped
// to reserve.max) and answers a release handle; POST /v1/release with the
// handle and the actual cost, or the usage the policy prices, settles it:
// remaining goes down by the reservation, then back up by what was not
// used. A second settlement changes nothing.
func TestJSONCheckReservesAndReleaseSettles(t *testing.T) {
	ep := newEndpoint(t, storetest.Memory(t, nil).Backend(), Options{}, compile(t, "shop", "llm", tokenBudgetPolicy))
	check := func(cost int) CheckResponse {
		t.Helper()
		var r CheckResponse
		body := `{"namespace":"shop","request":{"method":"POST","path":"/v1/chat","clientIP":"192.0.2.1"},"cost":` + strconv.Itoa(cost) + `}`
		if code, text := postJSON(t, ep.URL+"/v1/check", body, &r); code != 200 {
			t.Fatalf("check: %d %s", code, text)
		}
		return r
	}
	release := func(body string) ReleaseResponse {
		t.Helper()
		var r ReleaseResponse
		if code, text := postJSON(t, ep.URL+"/v1/release", body, &r); code != 200 {
			t.Fatalf("release %s: %d %s", body, code, text)
		}
		return r
	}
	limitOf := func(p []PolicyReport) LimitReport { return p[0].Limits[0] }

	a := check(300)
	if !a.Allowed || a.Release == "" || a.Policies[0].Reservation != "reserved" || a.Policies[0].Reserved != 300 ||
		limitOf(a.Policies).Remaining != 700 || limitOf(a.Policies).Reserved != 300 {
		t.Fatalf("a: %+v", a)
	}
	b := check(5000) // clamped to 400
	if !b.Allowed || b.Policies[0].Reserved != 400 || limitOf(b.Policies).Remaining != 300 {
		t.Fatalf("b: %+v", b)
	}
	r := release(`{"release":"` + a.Release + `","cost":120}`)
	if !r.Released || r.Policies[0].Reservation != "settled_below" || *r.Policies[0].Settled != 120 || limitOf(r.Policies).Remaining != 480 {
		t.Fatalf("a settled: %+v", r)
	}
	if again := release(`{"release":"` + a.Release + `","cost":120}`); again.Released || again.Policies[0].Reservation != "nothing_reserved" {
		t.Fatalf("a settled twice: %+v", again)
	}
	// 100 input of which 20 cached (80 + 20 × 0.5), 50 output × 4: 290.
	u := release(`{"release":"` + b.Release + `","usage":{"inputTokens":100,"cachedInputTokens":20,"outputTokens":50}}`)
	if !u.Released || *u.Policies[0].Settled != 290 || limitOf(u.Policies).Remaining != 590 {
		t.Fatalf("b settled by usage: %+v", u)
	}
	// Without cost or usage the reservation stays charged as estimated.
	c := check(0)
	if r := release(`{"release":"` + c.Release + `"}`); !r.Released || r.Policies[0].Reservation != "settled_exact" || limitOf(r.Policies).Remaining != 490 {
		t.Fatalf("c released without a cost: %+v", r)
	}
	// So does an estimate of the check's own (not the policy's cost), and
	// one clamped to reserve.max: a release without cost or usage gives
	// back none of it.
	for _, est := range []struct{ cost, reserved int }{{5000, 400}, {60, 60}} {
		d := check(est.cost)
		left := limitOf(d.Policies).Remaining
		if r := release(`{"release":"` + d.Release + `"}`); !r.Released || r.Policies[0].Reservation != "settled_exact" ||
			*r.Policies[0].Settled != int64(est.reserved) || limitOf(r.Policies).Remaining != left {
			t.Fatalf("an estimate of %d released without a cost: %+v, want settled exact at %d, %d left", est.cost, r, est.reserved, left)
		}
		release(`{"release":"` + d.Release + `","cost":0}`) // settled already: changes nothing
	}
}

// Bad settlements are refused with the field named, and change nothing:
// the handle's reservation is settled by a good one afterwards.
func TestReleaseRefusesBadSettlements(t *testing.T) {
	ep := newEndpoint(t, storetest.Memory(t, nil).Backend(), Options{}, compile(t, "shop", "llm", tokenBudgetPolicy))
	var a CheckResponse
	if code, text := postJSON(t, ep.URL+"/v1/check", `{"namespace":"shop","request":{"method":"POST","path":"/v1/chat","clientIP":"192.0.2.1"},"cost":200}`, &a); code != 200 || a.Release == "" {
		t.Fatalf("check: %d %s", code, text)
	}
	h := `"release":"` + a.Release + `"`
	for body, field := range map[string]string{
		`{` + h + `,"cost":-1}`:                                                        "cost: -1",
		`{` + h + `,"cost":"12"}`:                                                      "ReleaseRequest.cost",
		`{` + h + `,"cost":1000000001}`:                                                "cost: 1000000001",
		`{` + h + `,"cost":1,"usage":{"inputTokens":1,"outputTokens":1}}`:              "cost, usage",
		`{` + h + `,"usage":{"outputTokens":1}}`:                                       "usage.inputTokens: required",
		`{` + h + `,"usage":{"inputTokens":1}}`:                                        "usage.outputTokens: required",
		`{` + h + `,"usage":{"inputTokens":-5,"outputTokens":1}}`:                      "usage.inputTokens",
		`{` + h + `,"usage":{"inputTokens":1,"outputTokens":1e12}}`:                    "usage.outputTokens",
		`{` + h + `,"usage":{"inputTokens":1,"outputTokens":1,"cachedInputTokens":2}}`: "usage.cachedInputTokens",
		`{` + h + `,"usage":{"inputTokens":"many","outputTokens":1}}`:                  "usage.inputTokens",
		`{` + h + `,"usage":{"inputTokens":1,"outputTokens":1,"reasoningTokens":1}}`:   "reasoningTokens",
	} {
		code, text := postJSON(t, ep.URL+"/v1/release", body, nil)
		var p checkhttp.Problem
		_ = json.Unmarshal([]byte(text), &p)
		if code != http.StatusBadRequest || !strings.Contains(p.Detail, field) {
			t.Errorf("%s: %d %s, want 400 naming %s", body, code, text, field)
		}
	}
	var r ReleaseResponse
	if code, text := postJSON(t, ep.URL+"/v1/release", `{`+h+`,"cost":50}`, &r); code != 200 || !r.Released || r.Policies[0].Limits[0].Remaining != 950 {
		t.Fatalf("the good settlement after the bad ones: %d %s", code, text)
	}
}

// The HTTP auth hooks cannot settle: a token budget checked through them
// is refused with the no-release problem.
func TestHooksRefuseReserve(t *testing.T) {
	ep := newEndpoint(t, storetest.Memory(t, nil).Backend(), Options{}, compile(t, "shop", "api",
		"match: {paths: [/api/*]}\ncharge: Reserve\nreserve: {}\nlimits: [{name: day, fixedWindow: {limit: 1000, window: 24h}}]"))
	for _, p := range proxies {
		t.Run(p.name, func(t *testing.T) {
			resp, body := do(t, p.method, ep.URL+p.path("shop"), p.headers)
			var pr checkhttp.Problem
			if err := json.Unmarshal([]byte(body), &pr); err != nil || resp.StatusCode != http.StatusInternalServerError ||
				pr.Type != checkhttp.ProblemNoRelease || !strings.Contains(pr.Detail, "policy shop/api has charge Reserve") {
				t.Fatalf("%d %s, want 500 %s naming shop/api", resp.StatusCode, body, checkhttp.ProblemNoRelease)
			}
		})
	}
}
