package webhook

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
)

// benchServer is the check endpoint over the memory store, so the
// benchmark measures the HTTP-to-decision path alone.
func benchServer(b *testing.B, specYAML string) *CheckEndpoint {
	b.Helper()
	c := checktest.New(b, check.Options{Timeout: time.Second}, compile(b, "bench", "p", specYAML))
	s, err := New(Options{Checker: c})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// benchClients is the number of client IPs the requests come from.
const benchClients = 10_000

// clientIP is the address of client i.
func clientIP(i int) string {
	return "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
}

// nginxRequests are auth-url requests from distinct client IPs.
func nginxRequests(n int) []*http.Request {
	reqs := make([]*http.Request, n)
	for i := range reqs {
		r := httptest.NewRequest("GET", "/check/bench", nil)
		r.RemoteAddr = "127.0.0.1:40000"
		r.Header.Set("X-Original-URL", "http://shop.example.com/api/items?page=2")
		r.Header.Set("X-Original-Method", "GET")
		r.Header.Set("X-Real-IP", clientIP(i))
		reqs[i] = r
	}
	return reqs
}

// nginxContexts are the same requests as ingress-nginx sends them, read
// by fasthttp as the check process's server reads them.
func nginxContexts(b *testing.B, n int) []*fasthttp.RequestCtx {
	ctxs := make([]*fasthttp.RequestCtx, n)
	for i := range ctxs {
		raw := "GET /check/bench HTTP/1.1\r\nHost: sluice.sluice-system:8080\r\nX-Original-URL: http://shop.example.com/api/items?page=2\r\n" +
			"X-Original-Method: GET\r\nX-Real-IP: " + clientIP(i) + "\r\nX-Forwarded-For: " + clientIP(i) + "\r\nX-Sent-From: nginx-ingress-controller\r\n\r\n"
		ctxs[i] = nativeContext(b, raw)
	}
	return ctxs
}

// nativeContext is raw read as the check process's server reads it
// (header names as sent), from a peer in the default trusted proxies.
func nativeContext(tb testing.TB, raw string) *fasthttp.RequestCtx {
	ctx, err := readNative(raw)
	if err != nil {
		tb.Fatalf("%q: %v", raw, err)
	}
	return ctx
}

func readNative(raw string) (*fasthttp.RequestCtx, error) {
	var req fasthttp.Request
	req.Header.DisableNormalizing()
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		return nil, err
	}
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, nil)
	ctx.Request.Header.DisableNormalizing()
	ctx.Response.Header.DisableNormalizing()
	return ctx, nil
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

// runCheckBench runs the check route over both routes: native, as the
// check process serves it (fasthttp's parsing aside), and net/http's
// (its server aside).
func runCheckBench(b *testing.B, spec string, wantStatus int) {
	b.Run("native", func(b *testing.B) {
		s := benchServer(b, spec)
		ctxs := nginxContexts(b, benchClients)
		for _, ctx := range ctxs { // a server's contexts are reused, their buffers grown
			s.ServeFastHTTP(ctx)
			ctx.Response.Reset()
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			ctx := ctxs[i%len(ctxs)]
			ctx.Response.Reset()
			if !s.ServeFastHTTP(ctx) {
				b.Fatal("not served natively")
			}
			if status := ctx.Response.StatusCode(); status != wantStatus && wantStatus != 0 {
				b.Fatalf("status %d, want %d", status, wantStatus)
			}
		}
	})
	b.Run("net-http", func(b *testing.B) {
		s := benchServer(b, spec)
		reqs := nginxRequests(benchClients)
		w := &discardWriter{h: http.Header{}}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			clear(w.h)
			s.ServeHTTP(w, reqs[i%len(reqs)])
			if w.status != wantStatus && wantStatus != 0 {
				b.Fatalf("status %d, want %d", w.status, wantStatus)
			}
		}
	})
}

// BenchmarkCheckAllowed: one token bucket that allows.
func BenchmarkCheckAllowed(b *testing.B) {
	runCheckBench(b, "limits: [{name: burst, tokenBucket: {capacity: 1000000000, refillRate: 1000000, refillInterval: 1s}}]", http.StatusOK)
}

// BenchmarkCheckThreeLimits: burst, minute and day on one key.
func BenchmarkCheckThreeLimits(b *testing.B) {
	runCheckBench(b, `limits:
- {name: burst, tokenBucket: {capacity: 1000000000, refillRate: 1000000, refillInterval: 1s}}
- {name: minute, fixedWindow: {limit: 1000000000, window: 1m}}
- {name: day, fixedWindow: {limit: 1000000000, window: 24h}}`, http.StatusOK)
}

// BenchmarkCheckDenied: a limit that every request exceeds (the cache answers).
func BenchmarkCheckDenied(b *testing.B) {
	runCheckBench(b, "key: global\nlimits: [{name: none, fixedWindow: {limit: 1, window: 24h}}]", 0)
}
