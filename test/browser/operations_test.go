package browser

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-dev/sluice/webhook"
)

// A sign-in bucket of 2 that refills 1 every second; a user denied twice
// within a minute is banned for 10 minutes.
const signinYAML = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: signin
  namespace: default
spec:
  match:
    paths: ["/signin"]
  key: "{header:X-User}"
  limits:
  - name: burst
    tokenBucket: {capacity: 2, refillRate: 1, refillInterval: 1s}
  penalty: {denials: 2, within: 1m, ban: 10m, maxBan: 1h}
`

// TestDashboardOperations drives a policy's key values from the page: top
// denied and bans after real traffic, Lift, an override, and Reset.
func TestDashboardOperations(t *testing.T) {
	chromium := findChromium(t)
	base := startLocal(t, map[string]string{"api.yaml": policyYAML, "signin.yaml": signinYAML})
	pg := startBrowser(t, chromium)

	// mallory is denied by signin until banned; carol uses the API.
	for range 5 {
		check(t, base, "/signin", "mallory", false)
	}
	check(t, base, "/api/items", hostile, false)

	const signin, api = `tbody[data-policy="default/signin"]`, `tbody[data-policy="default/api"]`
	pg.step("open the key values of signin", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(signin)),
		chromedp.Click(chromedp.CSS(signin+` button.ops`)), chromedp.WaitVisible(chromedp.CSS(`#ops-section`)))
	pg.waitFor("mallory is the top denied", `document.querySelector('#top-denied tr[data-key="mallory"] .count') !== null`)
	pg.waitFor("mallory is banned", `document.querySelector('#bans tr[data-key="mallory"]') !== null`)
	if got := pg.text(`#bans tr[data-key="mallory"]`); !strings.Contains(got, "10m0s") {
		t.Fatalf("ban row: %q, want the ban's length 10m0s", got)
	}
	if got := pg.text(`#top-bound`); !strings.Contains(got, "overestimate") {
		t.Fatalf("the top lists' error bound: %q", got)
	}
	if allowed, _ := check(t, base, "/signin", "mallory", true); allowed {
		t.Fatal("mallory is allowed while banned")
	}
	pg.step("lift the ban", chromedp.Click(chromedp.CSS(`#bans tr[data-key="mallory"] button.lift`)))
	pg.waitFor("the lift is done", `document.querySelector('#ops-result').className === 'ok' && document.querySelector('#bans tr[data-key]') === null`)
	t.Logf("lift: %s", pg.text(`#ops-result`))
	// Within the ban's 10 minutes, only the lift lets mallory in again
	// (once the bucket has a token back).
	eventually(t, "mallory is allowed after the lift", func() bool {
		allowed, _ := check(t, base, "/signin", "mallory", true)
		return allowed
	})

	// The API's key values: a header's markup shows as text.
	pg.step("open the key values of api", chromedp.Click(chromedp.CSS(api+` button.ops`)))
	pg.waitFor("the hostile key value is listed as text", `[...document.querySelectorAll('#top-admitted code.key')].some(c => c.textContent === 'user-' + `+jsString(hostile)+`)`)
	injected, err := chromedp.Run(pg.ctx, chromedp.Evaluate[bool](`document.querySelectorAll('#ops-section img, #ops-section code.key b').length > 0 || document.title === 'pwned'`))
	if err != nil || injected {
		t.Fatalf("markup in a key value became HTML (err %v)", err)
	}

	// An override the admin API refuses: its message, as it is.
	pg.step("set an override of an unknown limit",
		chromedp.SetValue(chromedp.CSS(`#override-form [name=key]`), "user-carol"),
		chromedp.SetValue(chromedp.CSS(`#override-form [name=limits]`), "minute=50"),
		chromedp.Click(chromedp.CSS(`#override-set`)))
	pg.waitFor("the refusal is shown", `document.querySelector('#ops-result').className === 'error'`)
	if got, want := pg.text(`#ops-result`), adminMessage(t, "PUT", base+"/api/dashboard/admin/namespaces/default/ratelimitpolicies/api/overrides?key=user-carol", `{"limits": {"minute": 50}}`); got != want {
		t.Fatalf("the page says %q, the admin API %q", got, want)
	}

	// An override: listed, and checks answer its quota.
	pg.step("set an override of burst",
		chromedp.SetValue(chromedp.CSS(`#override-form [name=limits]`), "burst=20"),
		chromedp.SetValue(chromedp.CSS(`#override-form [name=expiresIn]`), "1h"),
		chromedp.Click(chromedp.CSS(`#override-set`)))
	pg.waitFor("the override is listed", `(() => {
		const row = document.querySelector('#overrides tr[data-key="user-carol"]');
		return row !== null && row.dataset.source === 'Runtime' && row.querySelector('[data-limit=burst] b').textContent === '20' &&
			row.textContent.includes('local (dashboard)') && row.querySelector('button.delete') !== null;
	})()`)
	t.Logf("override: %s", pg.text(`#ops-result`))
	eventually(t, "a check answers the override's quota", func() bool {
		_, burst := check(t, base, "/api/items", "carol", true)
		return burst.Limit == 20
	})
	check(t, base, "/api/items", "carol", false)
	pg.step("try carol's request",
		chromedp.SetValue(chromedp.CSS(`#try-form [name=path]`), "/api/items"),
		chromedp.SetValue(chromedp.CSS(`#try-form [name=headers]`), "X-User: carol"),
		chromedp.Click(chromedp.CSS(`#try-button`)))
	pg.waitFor("the try form answers the override's quota", `(document.querySelector('#try-result [data-limit=burst] .remaining') || {textContent: ''}).textContent.endsWith(' / 20')`)

	// Reset, beside carol's key value in the top admitted. The bucket
	// refills one unit every 10s, too slowly to refill what 6 checks took.
	for range 5 {
		check(t, base, "/api/items", "carol", false)
	}
	if _, burst := check(t, base, "/api/items", "carol", true); burst.Remaining > 16 {
		t.Fatalf("after 6 checks, a dry run would leave %d of 20", burst.Remaining)
	}
	pg.waitFor("carol is in the top admitted", `document.querySelector('#top-admitted tr[data-key="user-carol"] button.reset') !== null`)
	pg.step("reset carol", chromedp.Click(chromedp.CSS(`#top-admitted tr[data-key="user-carol"] button.reset`)))
	pg.waitFor("the reset is done", `document.querySelector('#ops-result').className === 'ok' && document.querySelector('#ops-result').textContent.startsWith('Reset burst, hour')`)
	pg.step("try carol's request again", chromedp.Click(chromedp.CSS(`#try-button`)))
	pg.waitFor("the reset restored the remaining count", `(document.querySelector('#try-result [data-limit=burst] .remaining') || {}).textContent === '19 / 20'`)

	pg.screenshot("operations.png")
	if errs := pg.jsErrors(); len(errs) > 0 {
		t.Fatalf("JavaScript errors on the page: %q", errs)
	}
}

// check asks POST /v1/check about user's request to path, for real or in
// dry run, and returns whether it is allowed and its first limit's figures.
func check(t *testing.T, base, path, user string, dryRun bool) (allowed bool, first webhook.LimitReport) {
	t.Helper()
	body, _ := json.Marshal(webhook.CheckRequest{Namespace: "default", DryRun: dryRun,
		Request: webhook.OriginalRequest{Method: "GET", Host: "api.example.com", Path: path, Headers: map[string]string{"X-User": user}}})
	resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r webhook.CheckResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || len(r.Policies) != 1 || len(r.Policies[0].Limits) == 0 {
		t.Fatalf("/v1/check: %s %+v %v", resp.Status, r, err)
	}
	return r.Allowed, r.Policies[0].Limits[0]
}

// adminMessage is the message of the admin API's Status for a change
// made through the dashboard's route.
func adminMessage(t *testing.T, method, url, body string) string {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var st struct{ Kind, Message string }
	if err := json.Unmarshal(b, &st); err != nil || st.Kind != "Status" {
		t.Fatalf("%s %s: %s %s, want a Status", method, url, resp.Status, b)
	}
	return st.Message
}

// jsString quotes s as a JavaScript string.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// eventually retries cond for a few seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}
