package convert

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// configFiles are the envoyproxy/ratelimit configuration both servers
// answer from: the peer reads them, Sluice their convert.
var configFiles = []string{"edge.yaml", "partner.yaml"}

// step sends one request times times; want is envoyproxy/ratelimit's
// overall code for each send, 'o' OK and 'x' OVER_LIMIT, which Sluice must
// give too, along with the same code for every descriptor.
type step struct {
	name        string
	domain      string
	descriptors [][]string // each: key, value, key, value...
	want        string
	// flagged is, for each send, 'f' when Sluice's answer must hand the
	// upstream X-Sluice-Over-Limit (a quota_mode limit over, which the
	// peer lets through as a violation), '-' when not; unset: never.
	flagged string
	// freshSecond starts the step just after a second begins, so that a
	// per-second window holds all its sends on both servers.
	freshSecond bool
}

var steps = []step{
	{name: "a client over its limit", domain: "edge", descriptors: [][]string{{"remote_address", "10.0.0.1"}}, want: "oooox"},
	{name: "another client, its own bucket", domain: "edge", descriptors: [][]string{{"remote_address", "10.0.0.2"}}, want: "oooox"},
	{name: "unlimited address", domain: "edge", descriptors: [][]string{{"remote_address", "10.1.1.1"}}, want: "oooooo"},
	{name: "whitelisted address (no rate_limit)", domain: "edge", descriptors: [][]string{{"remote_address", "10.2.2.2"}}, want: "oooooo"},
	{name: "blocked address (0 per unit)", domain: "edge", descriptors: [][]string{{"remote_address", "10.6.6.6"}}, want: "xx"},
	{name: "first wildcard, a bucket per value", domain: "edge", descriptors: [][]string{{"path", "/api/admin/users"}}, want: "oox"},
	{name: "first wildcard, another value", domain: "edge", descriptors: [][]string{{"path", "/api/admin/keys"}}, want: "oox"},
	{name: "exact value without rate_limit beats the wildcard", domain: "edge", descriptors: [][]string{{"path", "/api/public"}}, want: "oooooo"},
	{name: "second wildcard", domain: "edge", descriptors: [][]string{{"path", "/api/items"}}, want: "ooooox"},
	{name: "key-only default", domain: "edge", descriptors: [][]string{{"path", "/home"}}, want: "ooooooooxx"},
	{name: "shared wildcard bucket", domain: "edge", descriptors: [][]string{{"bucket", "logs-a"}}, want: "oo"},
	{name: "shared wildcard bucket, another value", domain: "edge", descriptors: [][]string{{"bucket", "logs-b"}}, want: "oxx"},
	{name: "a value no node matches", domain: "edge", descriptors: [][]string{{"bucket", "other"}}, want: "oooo"},
	{name: "intermediate node's limit", domain: "edge", descriptors: [][]string{{"tenant", "t1"}}, want: "ooooooxx"},
	{name: "two levels, exact value", domain: "edge", descriptors: [][]string{{"tenant", "t1", "method", "POST"}}, want: "oox"},
	{name: "two levels, key-only", domain: "edge", descriptors: [][]string{{"tenant", "t1", "method", "GET"}}, want: "ooox"},
	{name: "a value's subtree without a limit at its depth", domain: "edge", descriptors: [][]string{{"tenant", "acme"}}, want: "oooooooo"},
	{name: "two levels inside that subtree, no limit", domain: "edge", descriptors: [][]string{{"tenant", "acme", "method", "POST"}}, want: "oooo"},
	{name: "three levels", domain: "edge", descriptors: [][]string{{"tenant", "acme", "method", "POST", "path", "/orders"}}, want: "oxx"},
	{name: "no fallback to the key-only sibling", domain: "edge", descriptors: [][]string{{"tenant", "acme", "method", "GET"}}, want: "oooo"},
	{name: "more entries than the tree is deep", domain: "edge", descriptors: [][]string{{"remote_address", "10.0.0.9", "extra", "x"}}, want: "oooooo"},
	{name: "more entries than a branch is deep", domain: "edge", descriptors: [][]string{{"tenant", "t2", "method", "POST", "path", "/p"}}, want: "oooo"},
	{name: "entries in another order", domain: "edge", descriptors: [][]string{{"method", "POST", "tenant", "t1"}}, want: "oooo"},
	{name: "shadow mode", domain: "edge", descriptors: [][]string{{"plan", "trial"}}, want: "oooo"},
	{name: "quota mode", domain: "edge", descriptors: [][]string{{"plan", "beta"}}, want: "oooo", flagged: "-fff"},
	{name: "two descriptors, one over", domain: "edge", descriptors: [][]string{{"remote_address", "10.0.0.20"}, {"path", "/home2"}}, want: "oooox"},
	{name: "the other one alone was not counted when denied", domain: "edge", descriptors: [][]string{{"path", "/home2"}}, want: "oooox"},
	{name: "a tenant and its method", domain: "edge", descriptors: [][]string{{"tenant", "t3"}, {"tenant", "t3", "method", "POST"}}, want: "oox"},
	{name: "the tenant alone", domain: "edge", descriptors: [][]string{{"tenant", "t3"}}, want: "oooox"},
	{name: "an exempt and a limited descriptor", domain: "edge", descriptors: [][]string{{"remote_address", "10.1.1.1"}, {"remote_address", "10.0.0.30"}}, want: "oooox"},
	{name: "a blocked and a limited descriptor", domain: "edge", descriptors: [][]string{{"remote_address", "10.6.6.6"}, {"path", "/home3"}}, want: "xx"},
	{name: "the limited one alone, never counted", domain: "edge", descriptors: [][]string{{"path", "/home3"}}, want: "oooooooox"},
	{name: "partner: wildcard routing to a nested limit", domain: "partner", descriptors: [][]string{{"api_key", "k-1", "route", "/r"}}, want: "ooox"},
	{name: "partner: another key under the wildcard", domain: "partner", descriptors: [][]string{{"api_key", "k-2", "route", "/r"}}, want: "o"},
	{name: "partner: the wildcard alone has no limit", domain: "partner", descriptors: [][]string{{"api_key", "k-1"}}, want: "oooo"},
	{name: "partner: the key-only default", domain: "partner", descriptors: [][]string{{"api_key", "zzz"}}, want: "ooxx"},
	{name: "partner: the edge domain's keys mean nothing here", domain: "partner", descriptors: [][]string{{"remote_address", "10.0.0.1"}}, want: "ooooooo"},
	{name: "a domain neither knows", domain: "nobody", descriptors: [][]string{{"remote_address", "10.0.0.1"}}, want: "ooooooo"},
	{name: "per second", domain: "edge", descriptors: [][]string{{"burst", "b1"}}, want: "oox", freshSecond: true},
	{name: "per second, the next second", domain: "edge", descriptors: [][]string{{"burst", "b1"}}, want: "oox", freshSecond: true},
}

// TestDecidesAsEnvoyRatelimit runs envoyproxy/ratelimit's service_cmd on
// the configuration files and `manager local` on their conversion, on the
// same redis-server, and sends both the same rate limit service requests:
// every answer's overall code and every descriptor's code must agree, and
// be what envoyproxy/ratelimit's semantics say.
//
// The peer runs with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true: by
// default it counts every descriptor of a request even when another one
// is over its limit, where Sluice decides a request's descriptors all or
// nothing; with that setting it too leaves the descriptors under their
// limits uncounted. (It still counts a shadow descriptor's excess as over
// and then counts none of the others, so no step mixes an exceeded shadow
// descriptor with others.)
func TestDecidesAsEnvoyRatelimit(t *testing.T) {
	peerBin := serviceCmd(t)
	redis := redistest.Start(t)
	dir := t.TempDir()

	runtime := filepath.Join(dir, "runtime")
	cfgDir := filepath.Join(runtime, "ratelimit", "config")
	policies := filepath.Join(dir, "policies")
	for _, d := range []string{cfgDir, policies} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var args []string
	for _, f := range configFiles {
		b, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfgDir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, filepath.Join("testdata", f))
	}
	out, stderr, code := convert(t, append([]string{"--namespace", "edge-ns"}, args...)...)
	if code != 0 {
		t.Fatalf("manager convert: exit status %d:\n%s", code, stderr)
	}
	t.Logf("manager convert:\n%s", stderr)
	if err := os.WriteFile(filepath.Join(policies, "converted.yaml"), out, 0o644); err != nil {
		t.Fatal(err)
	}

	peerAddr := startPeer(t, peerBin, dir, runtime, redis.Addr())

	sluiceAddr := freeAddr(t)
	httpAddr := freeAddr(t)
	sluice := systest.Start(t, dir, "manager", nil, manager.Path(t), "local", "--policies", policies,
		"--listen", httpAddr, "--grpc-listen", sluiceAddr,
		"--rls-domain", "edge=edge-ns", "--rls-domain", "partner=edge-ns",
		"--redis-url", "redis://"+redis.Addr())
	sluice.WaitHTTP(t, "http://"+httpAddr+"/healthz", 60*time.Second)

	peer, sl := dial(t, peerAddr), dial(t, sluiceAddr)
	// A descriptor nothing limits: both answer once they serve.
	probe := request("edge", [][]string{{"probe", "x"}})
	for _, c := range []ratelimitv3.RateLimitServiceClient{peer, sl} {
		waitServing(t, c, probe)
	}

	// Minute windows start on the minute for both: keep the steps in one.
	systest.InOneWindow(t, time.Minute, 30*time.Second)
	start := time.Now()
	overs := 0
	for i, st := range steps {
		if st.freshSecond {
			time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
		}
		req := request(st.domain, st.descriptors)
		var gotPeer, gotSluice, flags strings.Builder
		for n := range len(st.want) {
			a, b := ask(t, peer, req), ask(t, sl, req)
			gotPeer.WriteByte(letter(a.GetOverallCode()))
			gotSluice.WriteByte(letter(b.GetOverallCode()))
			if ca, cb := codes(a), codes(b); ca != cb {
				t.Errorf("step %d (%s), send %d: envoyproxy/ratelimit %s, Sluice %s", i+1, st.name, n+1, ca, cb)
			}
			flags.WriteByte(flagOf(b))
		}
		if gotPeer.String() != st.want {
			t.Errorf("step %d (%s): envoyproxy/ratelimit answered %s, the test expects %s", i+1, st.name, gotPeer.String(), st.want)
		}
		if want := cmp.Or(st.flagged, strings.Repeat("-", len(st.want))); flags.String() != want {
			t.Errorf("step %d (%s): Sluice's X-Sluice-Over-Limit to the upstream %s, want %s (f: flagged)", i+1, st.name, flags.String(), want)
		}
		if gotSluice.String() != gotPeer.String() {
			t.Errorf("step %d (%s): Sluice answered %s, envoyproxy/ratelimit %s", i+1, st.name, gotSluice.String(), gotPeer.String())
		}
		overs += strings.Count(gotPeer.String(), "x")
	}
	if time.Since(start) > 29*time.Second {
		t.Errorf("the steps took %s: they may have crossed a minute's window", time.Since(start))
	}
	t.Logf("%d steps, %d over-limit answers, the same from both", len(steps), overs)
}

// startPeer runs envoyproxy/ratelimit's service_cmd (bin) on the
// configuration under runtime/ratelimit/config and the redis-server at
// redisAddr until the test ends, and returns its gRPC address. See
// TestDecidesAsEnvoyRatelimit for STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
func startPeer(t *testing.T, bin, dir, runtime, redisAddr string) string {
	t.Helper()
	addr := freeAddr(t)
	_, grpcPort, _ := net.SplitHostPort(addr)
	systest.Start(t, dir, "service_cmd", []string{
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=" + redisAddr,
		"RUNTIME_ROOT=" + runtime,
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_APPDIRECTORY=config",
		"RUNTIME_WATCH_ROOT=false",
		"USE_STATSD=false",
		"LOCAL_CACHE_SIZE_IN_BYTES=0",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true",
		"HOST=127.0.0.1",
		"PORT=" + port(t),
		"GRPC_HOST=127.0.0.1",
		"GRPC_PORT=" + grpcPort,
		"DEBUG_HOST=127.0.0.1",
		"DEBUG_PORT=" + port(t),
		"LOG_LEVEL=warn",
	}, bin)
	return addr
}

// serviceCmd is envoyproxy/ratelimit's service_cmd in bin/, installed by
// hack/install-bench-tools.sh when missing; the test is skipped only when
// it cannot be installed.
func serviceCmd(t *testing.T) string {
	t.Helper()
	root := kubetest.RepoRoot(t)
	bin := filepath.Join(root, "bin", "service_cmd")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	cmd := exec.Command(filepath.Join(root, "hack", "install-bench-tools.sh"), filepath.Join(root, "bin"))
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("envoyproxy/ratelimit's service_cmd is not in bin/ and hack/install-bench-tools.sh could not install it (it builds from the Go module proxy): %v\n%s", err, b)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("hack/install-bench-tools.sh did not install %s: %v", bin, err)
	}
	return bin
}

func freeAddr(t *testing.T) string { return "127.0.0.1:" + port(t) }

func port(t *testing.T) string { return strconv.Itoa(systest.FreePort(t)) }

func dial(t *testing.T, addr string) ratelimitv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return ratelimitv3.NewRateLimitServiceClient(conn)
}

func request(domain string, descriptors [][]string) *ratelimitv3.RateLimitRequest {
	req := &ratelimitv3.RateLimitRequest{Domain: domain}
	for _, kv := range descriptors {
		d := &commonv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

func ask(t *testing.T, c ratelimitv3.RateLimitServiceClient, req *ratelimitv3.RateLimitRequest) *ratelimitv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

func waitServing(t *testing.T, c ratelimitv3.RateLimitServiceClient, req *ratelimitv3.RateLimitRequest) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var resp *ratelimitv3.RateLimitResponse
		resp, err = c.ShouldRateLimit(ctx, req)
		cancel()
		if err == nil && resp.GetOverallCode() == ratelimitv3.RateLimitResponse_OK {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the rate limit service does not answer: %v", err)
}

func letter(c ratelimitv3.RateLimitResponse_Code) byte {
	switch c {
	case ratelimitv3.RateLimitResponse_OK:
		return 'o'
	case ratelimitv3.RateLimitResponse_OVER_LIMIT:
		return 'x'
	}
	return '?'
}

// codes is an answer's overall code and each descriptor's.
func codes(r *ratelimitv3.RateLimitResponse) string {
	var b strings.Builder
	b.WriteByte(letter(r.GetOverallCode()))
	b.WriteString(" [")
	for i, s := range r.GetStatuses() {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte(letter(s.GetCode()))
	}
	b.WriteString("]")
	return fmt.Sprint(b.String())
}

// flagOf is 'f' when Sluice's answer hands the upstream
// X-Sluice-Over-Limit (a soft limit, quota_mode's conversion, is over),
// else '-'.
func flagOf(r *ratelimitv3.RateLimitResponse) byte {
	for _, h := range r.GetRequestHeadersToAdd() {
		if h.GetKey() == "X-Sluice-Over-Limit" {
			return 'f'
		}
	}
	return '-'
}
