package webhook

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/source"
)

// benchHandler is the check endpoint over the memory store, so the
// benchmark measures the HTTP-to-decision path alone.
func benchHandler(b *testing.B, specYAML string) http.Handler {
	b.Helper()
	store := memstore.New()
	b.Cleanup(func() { store.Close() })
	c := check.New(check.Options{Store: store, Source: source.NewStatic(compile(b, "bench", "p", specYAML)), Timeout: time.Second})
	s, err := New(Options{Checker: c})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// nginxRequests are auth-url requests from distinct client IPs.
func nginxRequests(n int) []*http.Request {
	reqs := make([]*http.Request, n)
	for i := range reqs {
		r := httptest.NewRequest("GET", "/check/bench", nil)
		r.RemoteAddr = "127.0.0.1:40000"
		r.Header.Set("X-Original-URL", "http://shop.example.com/api/items?page=2")
		r.Header.Set("X-Original-Method", "GET")
		r.Header.Set("X-Real-IP", "10."+strconv.Itoa(i>>16&255)+"."+strconv.Itoa(i>>8&255)+"."+strconv.Itoa(i&255))
		reqs[i] = r
	}
	return reqs
}

// discardWriter is a ResponseWriter that keeps nothing but the headers map,
// reused between requests like net/http reuses its own.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(s int)           { w.status = s }

func runHandlerBench(b *testing.B, spec string, wantStatus int) {
	h := benchHandler(b, spec)
	reqs := nginxRequests(10_000)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		clear(w.h)
		h.ServeHTTP(w, reqs[i%len(reqs)])
		if w.status != wantStatus && wantStatus != 0 {
			b.Fatalf("status %d, want %d", w.status, wantStatus)
		}
	}
}

// BenchmarkCheckAllowed: one token bucket that allows.
func BenchmarkCheckAllowed(b *testing.B) {
	runHandlerBench(b, "limits: [{name: burst, tokenBucket: {capacity: 1000000000, refillRate: 1000000, refillInterval: 1s}}]", http.StatusOK)
}

// BenchmarkCheckThreeLimits: burst, minute and day on one key.
func BenchmarkCheckThreeLimits(b *testing.B) {
	runHandlerBench(b, `limits:
- {name: burst, tokenBucket: {capacity: 1000000000, refillRate: 1000000, refillInterval: 1s}}
- {name: minute, fixedWindow: {limit: 1000000000, window: 1m}}
- {name: day, fixedWindow: {limit: 1000000000, window: 24h}}`, http.StatusOK)
}

// BenchmarkCheckDenied: a limit that every request exceeds (the cache answers).
func BenchmarkCheckDenied(b *testing.B) {
	runHandlerBench(b, "key: global\nlimits: [{name: none, fixedWindow: {limit: 1, window: 24h}}]", 0)
}
