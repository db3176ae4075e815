// Package admin tests the admin API of a running `manager local
// --admin-listen` (built from this tree) over HTTP: each route as the
// README's curl examples call it, and the addresses it refuses.
//
//	go test ./test/admin/
package admin

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// manager is cmd/manager built once for the package's tests.
var manager systest.Manager

func TestMain(m *testing.M) { manager.RunTests(m, "admin") }

// policy limits each tenant to 3 a minute, banned for 5 minutes after 2
// denials.
const policy = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: per-tenant
  namespace: shop
spec:
  match: {paths: ["/api/*"]}
  key: "{header:X-Tenant}"
  limits:
  - name: per-minute
    fixedWindow: {limit: 3, window: 1m}
  penalty: {denials: 2, within: 1m, ban: 5m, maxBan: 1h}
`

const base = "/apis/admin.ratelimit.sluice.dev/v1alpha1/namespaces/shop"

// call makes one request and returns its status and decoded JSON.
func call(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s %s: %d %s: %v", method, url, resp.StatusCode, data, err)
	}
	return resp.StatusCode, v
}

func TestLocalAdminAPI(t *testing.T) {
	adminAddr := fmt.Sprintf("127.0.0.1:%d", systest.FreePort(t))
	httpAddr, _ := manager.StartLocal(t, nil, policy, "--admin-listen", adminAddr)
	admin := "http://" + adminAddr + base
	keys := admin + "/ratelimitpolicies/per-tenant/keys?key=acme"
	bans := admin + "/ratelimitpolicies/per-tenant/bans"

	check := func() int {
		req, _ := http.NewRequest("GET", "http://"+httpAddr+"/check/shop", nil)
		req.Header.Set("X-Forwarded-Method", "GET")
		req.Header.Set("X-Forwarded-Proto", "https")
		req.Header.Set("X-Forwarded-Host", "shop.example.com")
		req.Header.Set("X-Forwarded-Uri", "/api/cart")
		req.Header.Set("X-Tenant", "acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	check()

	code, ex := call(t, "POST", admin+"/explain", `{"url": "https://shop.example.com/api/cart", "headers": {"X-Tenant": ["acme"]}}`)
	if d, _ := ex["decision"].(map[string]any); code != 200 || d["allowed"] != true || d["policy"] != "per-tenant" {
		t.Fatalf("explain: %d %v", code, ex)
	}
	code, ks := call(t, "GET", keys, "")
	if l := ks["limits"].([]any)[0].(map[string]any); code != 200 || l["remaining"] != float64(2) {
		t.Fatalf("inspect: %d %v", code, ks)
	}
	for range 5 {
		check()
	}
	if got := check(); got != http.StatusTooManyRequests {
		t.Fatalf("check after the denials: %d", got)
	}
	code, bl := call(t, "GET", bans, "")
	if list := bl["bans"].([]any); code != 200 || len(list) != 1 || list[0].(map[string]any)["key"] != "acme" {
		t.Fatalf("bans: %d %v", code, bl)
	}
	if code, v := call(t, "DELETE", keys, ""); code != 200 {
		t.Fatalf("reset: %d %v", code, v)
	}
	if got := check(); got != http.StatusTooManyRequests {
		t.Fatalf("a reset lifted the ban: %d", got)
	}
	if code, v := call(t, "DELETE", bans+"?key=acme", ""); code != 200 {
		t.Fatalf("lift: %d %v", code, v)
	}
	if got := check(); got != http.StatusOK {
		t.Fatalf("check after lift and reset: %d", got)
	}
	// Another site's name rebound to loopback reaches nothing.
	req, _ := http.NewRequest("DELETE", keys, nil)
	req.Host = "rebound.example:" + adminAddr[strings.LastIndexByte(adminAddr, ':')+1:]
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("a rebound name: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	code, st := call(t, "DELETE", admin+"/ratelimitpolicies/per-tenant/keys?key=acme&limit=per-hour", "")
	if code != 404 || st["kind"] != "Status" || !strings.Contains(st["message"].(string), `limit "per-hour"`) {
		t.Fatalf("unknown limit: %d %v", code, st)
	}
}

// TestLocalAdminRefusesExposedAddresses: nothing on the admin API is
// authenticated, so it listens on loopback only, and never on the check
// endpoint's port.
func TestLocalAdminRefusesExposedAddresses(t *testing.T) {
	bin := manager.Path(t)
	listen := fmt.Sprintf("127.0.0.1:%d", systest.FreePort(t))
	port := listen[strings.LastIndexByte(listen, ':'):]
	for addr, want := range map[string]string{
		"0.0.0.0" + port: "must be a loopback address",
		port:             "must be a loopback address",
		listen:           "is the check endpoint's",
	} {
		_, stderr, err := systest.Run(t.TempDir(), nil, 30*time.Second, bin, "local", "--policies", t.TempDir(), "--listen", listen, "--admin-listen", addr)
		if err == nil || !strings.Contains(stderr, want) {
			t.Errorf("--admin-listen %s: %v %q, want %q", addr, err, stderr, want)
		}
	}
}
