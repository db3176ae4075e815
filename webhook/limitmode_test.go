package webhook

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

const softPolicy = `
match:
  hosts: [shop.example.com]
key: "{client_ip}"
limits:
- {name: burst, mode: Soft, fixedWindow: {limit: 1, window: 1h}}
- {name: quota, fixedWindow: {limit: 3, window: 1h}}
`

// TestSoftLimitTellsTheUpstream: through every proxy profile, on the
// check routes served natively (fasthttp) and by net/http, an answer that
// lets a request go on over a soft limit carries X-Sluice-Over-Limit
// (without --report-policy) and the client's headers show the limit at 0;
// an answer under it carries none, and Envoy's is told to remove one the
// client sent; the enforced limit beside it still denies, without it.
func TestSoftLimitTellsTheUpstream(t *testing.T) {
	for _, server := range []string{"fasthttp", "net/http"} {
		for i, px := range proxies {
			t.Run(server+"/"+px.name, func(t *testing.T) {
				ns := "soft" + strconv.Itoa(i)
				ep := newEndpoint(t, storetest.Memory(t, nil).Backend(), Options{}, compile(t, ns, "api", softPolicy))
				url := ep.URL
				if server == "net/http" {
					url = serveNetHTTP(t, ep.server)
				}
				envoy := px.name == "Envoy ext_authz"
				for n, want := range []struct {
					status int
					over   string
				}{{200, ""}, {200, ns + "/api;limit=burst;mode=Soft"}, {200, ns + "/api;limit=burst;mode=Soft"}, {px.denyStatus, ""}} {
					resp, body := do(t, px.method, url+px.path(ns), px.headers)
					if resp.StatusCode != want.status || resp.Header.Get(checkhttp.OverLimitHeader) != want.over {
						t.Fatalf("request %d: %d, %s %q; want %d, %q (body %s)", n+1, resp.StatusCode, checkhttp.OverLimitHeader,
							resp.Header.Get(checkhttp.OverLimitHeader), want.status, want.over, body)
					}
					if resp.Header.Get(checkhttp.PolicyHeader) != "" {
						t.Fatalf("request %d: %s sent without ReportPolicy", n+1, checkhttp.PolicyHeader)
					}
					remove := resp.Header.Get("X-Envoy-Auth-Headers-To-Remove")
					if wantRemove := envoy && want.status == 200 && want.over == ""; (remove == "x-sluice-over-limit") != wantRemove {
						t.Fatalf("request %d: X-Envoy-Auth-Headers-To-Remove %q (Envoy's profile, under every soft limit: %v)", n+1, remove, wantRemove)
					}
					if want.over != "" && resp.Header.Get("X-RateLimit-Remaining") != "0" {
						t.Fatalf("request %d: X-RateLimit-Remaining %q; want the soft limit's 0", n+1, resp.Header.Get("X-RateLimit-Remaining"))
					}
				}
			})
		}
	}
}

// TestJSONCheckReportsLimitModes: POST /v1/check reports each limit's
// mode and the soft limits over, in its body and its header.
func TestJSONCheckReportsLimitModes(t *testing.T) {
	ep := newEndpoint(t, storetest.Memory(t, nil).Backend(), Options{}, compile(t, "shop", "api", softPolicy))
	var resp CheckResponse
	var header string
	for range 2 {
		r, err := http.Post(ep.URL+"/v1/check", "application/json",
			strings.NewReader(`{"namespace":"shop","request":{"method":"GET","host":"shop.example.com","path":"/","clientIP":"192.0.2.1"}}`))
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(r.Body).Decode(&resp)
		r.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		header = r.Header.Get(checkhttp.OverLimitHeader)
	}
	if header != resp.OverLimit || !resp.Allowed || resp.OverLimit != "shop/api;limit=burst;mode=Soft" || resp.Policies[0].Limits[0].Mode != "Soft" || resp.Policies[0].Limits[1].Mode != "Enforce" {
		t.Fatalf("%+v", resp)
	}
}
