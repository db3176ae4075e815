package middleware_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/middleware"
)

// tokenBudget reserves 100 tokens per request (the estimate) of 1000 an
// hour per client, output priced at 2.
var tokenBudget = []named{{"tokens", `match: {paths: [/chat]}
charge: Reserve
reserve: {max: 300, pricing: {outputTokens: '2'}}
cost: 100
limits: [{name: hour, fixedWindow: {limit: 1000, window: 1h}}]`}}

// The handler reports the usage it read and the middleware settles the
// reservation when the handler returns: normally, by a panic (after a
// report, or without one), or when the client went away. Without a
// report the reservation stays charged as estimated. The remaining
// figure of the answers goes down by the estimate at admission and back
// up by what the settlement gave back.
func TestMiddlewareSettlesReportedUsage(t *testing.T) {
	for _, m := range []mode{memoryMode, redisMode} {
		t.Run(m.name, func(t *testing.T) {
			entered := make(chan struct{})
			h := m.new(t, tokenBudget).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if in := r.Header.Get("X-Input"); in != "" {
					n, _ := strconv.ParseInt(in, 10, 64)
					if err := middleware.ReportUsage(r.Context(), middleware.Usage{InputTokens: n, OutputTokens: n}); err != nil {
						panic(err)
					}
				}
				switch r.Header.Get("X-Do") {
				case "panic":
					panic("handler failed")
				case "wait":
					entered <- struct{}{}
					<-r.Context().Done()
				}
				w.WriteHeader(http.StatusOK)
			}))
			const peer = "192.0.2.7:4000"
			remaining := func(what string, headers map[string]string) int {
				t.Helper()
				var rec *httptest.ResponseRecorder
				func() {
					defer func() { _ = recover() }()
					rec = send(h, "POST", "/chat", peer, headers)
				}()
				if rec == nil { // panicked: read the figure through the next request
					return -1
				}
				n, err := strconv.Atoi(exact(rec.Header(), "X-RateLimit-Remaining"))
				if err != nil {
					t.Fatalf("%s: %d, X-RateLimit-Remaining %q", what, rec.Code, exact(rec.Header(), "X-RateLimit-Remaining"))
				}
				return n
			}
			// Each usage {n, n} costs 3n (output priced at 2).
			for _, step := range []struct {
				what    string
				headers map[string]string
				want    int // remaining after its admission; -1: it panics
			}{
				{"reports 10 in, 10 out: 30", map[string]string{"X-Input": "10"}, 900},
				{"reports nothing: stays 100", nil, 870},                                            // 970 - 100
				{"reports 15, then panics", map[string]string{"X-Input": "5", "X-Do": "panic"}, -1}, // settles at 15
				{"panics without a report: stays 100", map[string]string{"X-Do": "panic"}, -1},
				{"reports 600, above the estimate", map[string]string{"X-Input": "200"}, 655}, // 870 - 15 - 100 - 100
				{"after a settlement above the estimate", nil, 55},                            // 755 - 600 - 100
			} {
				if got := remaining(step.what, step.headers); got != step.want {
					t.Fatalf("%s: remaining %d, want %d", step.what, got, step.want)
				}
			}

			// The client (another address: a bucket of its own) hangs up
			// after the usage was reported: the handler returns on its
			// context and the middleware settles.
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			ctx, hangUp := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/chat", nil)
			req.Header.Set("X-Input", "1")
			req.Header.Set("X-Do", "wait")
			errc := make(chan error, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					_ = resp.Body.Close()
				}
				errc <- err
			}()
			<-entered
			hangUp()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("the client's request: %v, want canceled", err)
			}
			// Settled at 3: 997 left, 897 once the next request reserved
			// its 100 (800 while the hung-up one still held its 100).
			// Each look reports 0 used, which gives its 100 back.
			deadline := time.Now().Add(5 * time.Second)
			for {
				look, _ := http.NewRequest(http.MethodPost, srv.URL+"/chat", nil)
				look.Header.Set("X-Input", "0")
				resp, err := http.DefaultClient.Do(look)
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				if got := resp.Header.Get("X-RateLimit-Remaining"); got == "897" {
					break
				} else if got != "800" {
					t.Fatalf("while the hung-up request settles: remaining %s, want 800 then 897", got)
				}
				if time.Now().After(deadline) {
					t.Fatal("the reservation of a request whose client hung up was not settled")
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// ReportUsage refuses usage no response reports, naming the field, and a
// context the middleware holds no reservation of.
func TestReportUsageRefusals(t *testing.T) {
	if err := middleware.ReportUsage(context.Background(), middleware.Usage{InputTokens: 1}); err == nil || !strings.Contains(err.Error(), "no reservation") {
		t.Errorf("outside a reservation: %v", err)
	}
	h := memoryMode.new(t, tokenBudget).Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		for u, field := range map[middleware.Usage]string{
			{InputTokens: -1}:                      "usage.inputTokens",
			{OutputTokens: 2_000_000_000}:          "usage.outputTokens",
			{InputTokens: 1, CachedInputTokens: 2}: "usage.cachedInputTokens",
		} {
			if err := middleware.ReportUsage(r.Context(), u); err == nil || !strings.Contains(err.Error(), field) {
				t.Errorf("%+v: %v, want an error naming %s", u, err, field)
			}
		}
		if err := middleware.ReportCost(r.Context(), -3); err == nil || !strings.Contains(err.Error(), "cost") {
			t.Errorf("a negative cost: %v", err)
		}
	}))
	send(h, "POST", "/chat", "192.0.2.9:1", nil)
}
