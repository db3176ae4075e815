package browser

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// kindPolicies are a policy of requests in flight with a penalty box and
// non-default settings, a descriptor policy whose concurrency limit names
// its holder, a calendar quota in a zone charged always, and a leased
// policy.
var kindPolicies = map[string]string{"inflight.yaml": `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: inflight, namespace: default}
spec:
  key: "{header:X-Tenant}"
  onMissingKey: Deny
  cost: 2
  failureMode: Closed
  response: {denyStatus: 503, headers: IETF}
  limits:
  - name: running
    concurrency: {limit: 4, leaseTimeout: 30s}
  - name: minute
    fixedWindow: {limit: 100, window: 1m}
  penalty: {denials: 3, within: 1m, ban: 5m, maxBan: 1h}
`, "streams.yaml": `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: streams, namespace: default}
spec:
  match:
    domain: edge
    descriptor: [{key: tenant}, {key: request_id}]
  key: "{descriptor:tenant}"
  limits:
  - name: in-flight
    concurrency: {limit: 2, leaseTimeout: 45s, holder: request_id}
`, "tokens.yaml": `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: tokens, namespace: default}
spec:
  mode: Shadow
  charge: Always
  limits:
  - name: day
    calendar: {limit: 1000, period: Day, timeZone: Europe/Berlin}
`, "banme.yaml": `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: banme, namespace: default}
spec:
  limits:
  - name: minute
    fixedWindow: {limit: 1, window: 1m}
  penalty: {denials: 1, within: 1m, ban: 5m, maxBan: 1h}
`, "hot.yaml": `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: hot, namespace: default}
spec:
  lease: {units: 10, ttl: 2s}
  limits:
  - name: second
    tokenBucket: {capacity: 100, refillRate: 100, refillInterval: 1s}
`}

// The page shows what decides each request: a concurrency limit's numbers
// and holder, the penalty box, and every setting that is not the default,
// each where a reader of the policy's row looks.
func TestDashboardShowsEveryKind(t *testing.T) {
	chromium := findChromium(t)
	base := startLocal(t, kindPolicies)
	pg := startBrowser(t, chromium)
	const (
		inflight = `tbody[data-policy="default/inflight"]`
		streams  = `tbody[data-policy="default/streams"]`
		tokens   = `tbody[data-policy="default/tokens"]`
		hot      = `tbody[data-policy="default/hot"]`
	)
	pg.step("load the dashboard", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(hot)))

	want := map[string]string{
		// requests in flight
		inflight + ` tr[data-limit=running] td.params code`:               "concurrency",
		inflight + ` tr[data-limit=running] [data-param=limit] b`:         "4",
		inflight + ` tr[data-limit=running] [data-param=leaseTimeout] b`:  "30s",
		streams + ` tr[data-limit=in-flight] td.params code`:              "concurrency (holder: request_id)",
		streams + ` tr[data-limit=in-flight] [data-param=leaseTimeout] b`: "45s",
		// the penalty box, a row of its own beside the limits
		inflight + ` tr.penalty [data-param=denials] b`: "3",
		inflight + ` tr.penalty [data-param=within] b`:  "1m",
		inflight + ` tr.penalty [data-param=ban] b`:     "5m",
		inflight + ` tr.penalty [data-param=maxBan] b`:  "1h",
		// the policy's settings
		inflight + ` [data-setting=onMissingKey]`:          "missing key: Deny",
		inflight + ` [data-setting=cost]`:                  "cost 2",
		inflight + ` [data-setting=failureMode]`:           "failure mode Closed",
		inflight + ` [data-setting=denyStatus]`:            "deny status 503",
		inflight + ` [data-setting=headers]`:               "headers IETF",
		tokens + ` [data-setting=charge]`:                  "charge Always",
		tokens + ` .badge.shadow`:                          "Shadow",
		tokens + ` tr[data-limit=day] td.params code`:      "calendar (Day, Europe/Berlin)",
		hot + ` [data-setting=lease] [data-param=units] b`: "10",
		hot + ` [data-setting=lease] [data-param=ttl] b`:   "2s",
	}
	// Read at once: a selector that finds nothing reads as null.
	order := slices.Sorted(maps.Keys(want))
	sels, _ := json.Marshal(order)
	got, err := chromedp.Run(pg.ctx, chromedp.Evaluate[map[string]*string](
		`Object.fromEntries(`+string(sels)+`.map((s) => { const e = document.querySelector(s); return [s, e && e.textContent.trim()]; }))`))
	if err != nil {
		t.Fatal(err)
	}
	for _, sel := range order {
		switch g, w := got[sel], want[sel]; {
		case g == nil:
			t.Errorf("%s: not on the page, want %q", sel, w)
		case *g != w:
			t.Errorf("%s: %q, want %q", sel, *g, w)
		}
	}
	// Defaults are left out, as a policy without them reads.
	n, err := chromedp.Run(pg.ctx, chromedp.Evaluate[int](`document.querySelectorAll('tbody[data-policy="default/hot"] [data-setting]:not([data-setting=lease]), tbody[data-policy="default/hot"] tr.penalty').length`))
	if err != nil || n != 0 {
		t.Errorf("hot shows %d settings beyond its lease (err %v), want none: it keeps the defaults", n, err)
	}

	// A banned bucket's limit says so in the answer to a request, beside
	// the policy's penalty box: one allowed, one denied that bans, one
	// denied by the ban.
	pg.step("try banme", chromedp.Click(chromedp.CSS(`tbody[data-policy="default/banme"] button`)),
		chromedp.SetValue(chromedp.CSS(`#try-form [name=burst]`), "3"),
		chromedp.Click(chromedp.CSS(`#burst-button`)))
	pg.waitFor("the burst ends", `document.querySelector('#burst-summary').textContent.includes('1 allowed, 2 denied')`)
	// "(cached)" when the cache of denials answered.
	if got := pg.text(`#try-result [data-limit=minute] td.denied`); !strings.HasPrefix(got, "banned") {
		t.Errorf("the banned limit's decision: %q, want banned", got)
	}
	if got := pg.text(`#decision`); !strings.Contains(got, "Banned") {
		t.Errorf("the decision: %q, want it to name the ban", got)
	}
	pg.step("stop watching", chromedp.Click(chromedp.CSS(`#stop-button`)))
	pg.screenshot("kinds.png")
	if errs := pg.jsErrors(); len(errs) > 0 {
		t.Fatalf("JavaScript errors on the page: %q", errs)
	}
}
