package dashboard

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/admin"
	"github.com/sluice-dev/sluice/internal/adminapi"
	"github.com/sluice-dev/sluice/internal/checkstack"
	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/policyfiles"
	"github.com/sluice-dev/sluice/internal/testutil/syncbuf"
)

// signinPolicy bans a client denied twice within a minute.
const signinPolicy = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: signin
spec:
  match: {paths: ["/signin"]}
  key: "{client_ip}"
  limits:
  - name: per-minute
    fixedWindow: {limit: 2, window: 1m}
  penalty: {denials: 2, within: 1m, ban: 10m, maxBan: 1h}
`

// serveOperations serves what local mode serves, the admin API behind the
// dashboard included, over api.yaml and signin.yaml; it returns the base
// URL and the admin API's log.
func serveOperations(t *testing.T) (string, *syncbuf.Buffer) {
	t.Helper()
	f, err := policyfiles.NewFolder(writeFiles(t, map[string]string{"api.yaml": apiPolicy, "signin.yaml": signinPolicy}), 0, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	index, store := overrides.NewIndex(quiet), overrides.NewMemoryStore()
	go index.Follow(ctx, store)
	stack := checkstack.New(checkstack.Options{Source: f, Overrides: index, TopKeys: true, Logger: quiet})
	t.Cleanup(func() { _ = stack.Close() })
	logs := &syncbuf.Buffer{}
	h := admin.New(admin.Options{Checker: stack.Checker, Top: stack.Top,
		Overrides: &overrides.Runtime{Store: store, Policy: overrides.PolicyOf(f.Policies), Log: quiet},
		Logger:    slog.New(slog.NewTextHandler(logs, nil))})
	return serveFolder(t, f, Options{Checker: stack.Checker, Tally: stack.Tally, Admin: h}).URL, logs
}

// adminURL is the dashboard's route to the admin API's resource of policy
// default/name.
func adminURL(base, name, resource string) string {
	return base + "/api/dashboard/admin/namespaces/default/ratelimitpolicies/" + name + "/" + resource
}

// forwardAuth checks a request of client ip to path as Traefik's
// ForwardAuth asks, and returns the status and RateLimit-Policy header.
func forwardAuth(t *testing.T, base, path, ip string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/check/default", nil)
	req.Header.Set("X-Forwarded-Method", "GET")
	req.Header.Set("X-Forwarded-Proto", "https")
	req.Header.Set("X-Forwarded-Host", "api.example.com")
	req.Header.Set("X-Forwarded-Uri", path)
	req.Header.Set("X-Forwarded-For", ip)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("RateLimit-Policy")
}

// eventually retries cond for a few seconds: bans and overrides are
// recorded off the check's path.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return v
}

func TestResetThroughTheDashboard(t *testing.T) {
	base, logs := serveOperations(t)
	if st := getState(t, base); !st.Admin || st.Mode != "local" {
		t.Fatalf("state: admin %v, mode %q; want the operations offered in local mode", st.Admin, st.Mode)
	}
	for range 5 {
		forwardAuth(t, base, "/", "192.0.2.7")
	}
	if code, _ := forwardAuth(t, base, "/", "192.0.2.7"); code != http.StatusTooManyRequests {
		t.Fatalf("the sixth check: %d, want 429", code)
	}

	// The top key values are the admin API's answer, counts and bound.
	code, out := do(t, "GET", adminURL(base, "api", "top"), "", "")
	top := decode[struct {
		Denied     []struct{ Key string }
		Admitted   []struct{ Key string }
		ErrorBound string
	}](t, out)
	if code != http.StatusOK || len(top.Denied) != 1 || top.Denied[0].Key != "192.0.2.7" || len(top.Admitted) != 1 || top.ErrorBound == "" {
		t.Fatalf("top: %d %s", code, out)
	}

	// Changes refused by the dashboard's guards change nothing.
	reset := adminURL(base, "api", "keys") + "?key=192.0.2.7"
	for _, c := range []struct {
		what, contentType string
		header            []string
		want              int
	}{
		{"a cross-site reset", "application/json", []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"a reset without a JSON Content-Type", "text/plain", nil, http.StatusUnsupportedMediaType},
		{"a reset by another site's name", "application/json", []string{"Host", "rebound.example"}, http.StatusMisdirectedRequest},
	} {
		if code, out := do(t, "DELETE", reset, c.contentType, "", c.header...); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.what, code, out, c.want)
		}
	}
	if code, _ := forwardAuth(t, base, "/", "192.0.2.7"); code != http.StatusTooManyRequests {
		t.Fatalf("after the refused resets: %d, want still 429", code)
	}

	code, out = do(t, "DELETE", reset+"&limit=burst", "application/json", "")
	if code != http.StatusOK || decode[adminapi.ResetAnswer](t, out).Limits[0] != "burst" {
		t.Fatalf("reset: %d %s", code, out)
	}
	if code, _ := forwardAuth(t, base, "/", "192.0.2.7"); code != http.StatusOK {
		t.Fatalf("after the reset: %d, want allowed", code)
	}
	if !strings.Contains(logs.String(), `caller="local (dashboard)"`) {
		t.Errorf("the reset is not logged as the page's: %s", logs)
	}
	// The admin API's own errors reach the page as its Status.
	code, out = do(t, "DELETE", adminURL(base, "api", "keys")+"?key=192.0.2.7&limit=day", "application/json", "")
	if st := decode[map[string]any](t, out); code != http.StatusNotFound || st["kind"] != "Status" || !strings.Contains(st["message"].(string), `"day"`) {
		t.Fatalf("an unknown limit: %d %s", code, out)
	}
}

func TestBansAndLiftThroughTheDashboard(t *testing.T) {
	base, _ := serveOperations(t)
	for range 4 {
		forwardAuth(t, base, "/signin", "192.0.2.9")
	}
	bans := adminURL(base, "signin", "bans")
	var list adminapi.BanList
	eventually(t, "the ban is listed", func() bool {
		_, out := do(t, "GET", bans, "", "")
		list = decode[adminapi.BanList](t, out)
		return len(list.Bans) == 1
	})
	if b := list.Bans[0]; b.Key != "192.0.2.9" || b.Length != "10m0s" {
		t.Fatalf("ban: %+v", b)
	}
	if code, out := do(t, "DELETE", bans+"?key=192.0.2.9", "application/json", "", "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Fatalf("a cross-site lift: %d %s", code, out)
	}
	if code, out := do(t, "DELETE", bans+"?key=192.0.2.9", "application/json", ""); code != http.StatusOK {
		t.Fatalf("lift: %d %s", code, out)
	}
	if _, out := do(t, "GET", bans, "", ""); len(decode[adminapi.BanList](t, out).Bans) != 0 {
		t.Fatalf("bans after the lift: %s", out)
	}
}

func TestOverrideThroughTheDashboard(t *testing.T) {
	base, _ := serveOperations(t)
	set := adminURL(base, "api", "overrides") + "?key=192.0.2.7"
	if code, out := do(t, "PUT", set, "application/json", `{"limits": {"burst": 0}}`); code != http.StatusBadRequest ||
		!strings.Contains(decode[map[string]any](t, out)["message"].(string), "burst") {
		t.Fatalf("a bad override: %d %s, want 400 naming the limit", code, out)
	}
	if code, out := do(t, "PUT", set, "text/plain", `{"limits": {"burst": 20}}`); code != http.StatusUnsupportedMediaType {
		t.Fatalf("an override without a JSON Content-Type: %d %s", code, out)
	}
	if code, out := do(t, "PUT", set, "application/json", `{"limits": {"burst": 20}, "expiresIn": "1h"}`); code != http.StatusOK {
		t.Fatalf("set: %d %s", code, out)
	}
	_, out := do(t, "GET", adminURL(base, "api", "overrides"), "", "")
	list := decode[adminapi.OverrideList](t, out)
	if len(list.Overrides) != 1 {
		t.Fatalf("overrides: %s", out)
	}
	if e := list.Overrides[0]; e.Key != "192.0.2.7" || e.Limits["burst"] != 20 || e.Source != "Runtime" || e.SetBy != pageCaller || e.Expires == nil {
		t.Fatalf("override: %+v", e)
	}
	eventually(t, "a check answers the override's quota", func() bool {
		_, policy := forwardAuth(t, base, "/", "192.0.2.7")
		return strings.Contains(policy, `"api/burst";q=20;`)
	})
	if _, policy := forwardAuth(t, base, "/", "192.0.2.8"); !strings.Contains(policy, `"api/burst";q=5;`) {
		t.Fatalf("another key's RateLimit-Policy: %q, want the policy's q=5", policy)
	}
	if code, out := do(t, "DELETE", set, "application/json", ""); code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, out)
	}
	eventually(t, "a check answers the policy's quota again", func() bool {
		_, policy := forwardAuth(t, base, "/", "192.0.2.7")
		return strings.Contains(policy, `"api/burst";q=5;`)
	})
}

func TestClusterDashboardOffersNoOperations(t *testing.T) {
	ts := serveCluster(t)
	if st := getState(t, ts.URL); st.Admin || !strings.Contains(st.Notice, "kubectl sluice") {
		t.Fatalf("state: admin %v, notice %q", st.Admin, st.Notice)
	}
	for _, c := range []struct{ method, resource string }{{"GET", "top"}, {"GET", "bans"}, {"DELETE", "keys?key=a"}, {"PUT", "overrides?key=a"}} {
		code, out := do(t, c.method, adminURL(ts.URL, "api", c.resource), "application/json", `{"limits": {"burst": 9}}`)
		if code != http.StatusForbidden || !strings.Contains(out, "kubectl sluice") {
			t.Errorf("%s %s in the cluster: %d %s, want 403 pointing to kubectl sluice", c.method, c.resource, code, out)
		}
	}
}
