package webhook

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// inFlightPolicy allows one request in flight per client on /api/.
const inFlightPolicy = "match: {paths: [/api/*]}\nlimits: [{name: one, concurrency: {limit: 1, leaseTimeout: 1h}}]"

// The HTTP auth hooks (nginx auth-url, ForwardAuth, Envoy ext_authz on
// /envoy/) have no completion callback: a concurrency limit checked
// through them is refused with a problem naming the policy and the limit,
// never answered as if it limited something else.
func TestHooksRefuseConcurrency(t *testing.T) {
	ep := newEndpoint(t, storetest.Memory(t, nil).Backend(), Options{}, compile(t, "shop", "api", inFlightPolicy))
	for _, p := range proxies {
		t.Run(p.name, func(t *testing.T) {
			for range 2 {
				resp, body := do(t, p.method, ep.URL+p.path("shop"), p.headers)
				var pr checkhttp.Problem
				if err := json.Unmarshal([]byte(body), &pr); err != nil || resp.StatusCode != http.StatusInternalServerError ||
					pr.Type != checkhttp.ProblemNoRelease || !strings.Contains(pr.Detail, "policy shop/api, limit one") {
					t.Fatalf("%d %s, want 500 %s naming shop/api's limit one", resp.StatusCode, body, checkhttp.ProblemNoRelease)
				}
			}
		})
	}
}

// POST /v1/check answers a request it admits into a concurrency limit
// with a release handle; POST /v1/release frees its units once. A denied
// check carries no handle, a second release and a forged handle free
// nothing.
func TestJSONCheckReleaseHandle(t *testing.T) {
	ep := newEndpoint(t, storetest.Memory(t, nil).Backend(), Options{}, compile(t, "shop", "api", inFlightPolicy))
	post := func(path, body string, into any) int {
		t.Helper()
		resp, err := http.Post(ep.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	check := func() CheckResponse {
		t.Helper()
		var r CheckResponse
		if code := post("/v1/check", `{"namespace":"shop","request":{"path":"/api/x","clientIP":"192.0.2.1"}}`, &r); code != 200 {
			t.Fatalf("check: %d", code)
		}
		return r
	}
	release := func(handle string) (int, bool) {
		t.Helper()
		var r ReleaseResponse
		body, _ := json.Marshal(ReleaseRequest{Release: handle})
		return post("/v1/release", string(body), &r), r.Released
	}
	first := check()
	if !first.Allowed || first.Release == "" {
		t.Fatalf("the first check: %+v, want allowed with a release handle", first)
	}
	if second := check(); second.Allowed || second.Release != "" {
		t.Fatalf("a second check while the first holds: %+v, want denied without a handle", second)
	}
	if code, ok := release(first.Release); code != 200 || !ok {
		t.Fatalf("release: %d %v, want released", code, ok)
	}
	if code, ok := release(first.Release); code != 200 || ok {
		t.Fatalf("a second release: %d %v, want nothing released", code, ok)
	}
	third := check()
	if !third.Allowed || third.Release == "" || third.Release == first.Release {
		t.Fatalf("the check after the release: %+v, want allowed with a handle of its own", third)
	}
	var h releaseHandle
	h, _ = decodeHandle(third.Release)
	h.Holder = newHolder()
	if code, ok := release(h.encode()); code != 200 || ok {
		t.Fatalf("a handle with another holder: %d %v, want nothing released", code, ok)
	}
	if code, _ := release("not-a-handle"); code != http.StatusBadRequest {
		t.Fatalf("a release of no handle: %d, want 400", code)
	}
	if second := check(); second.Allowed {
		t.Fatalf("the third check's unit was freed by a forged handle: %+v", second)
	}
}
