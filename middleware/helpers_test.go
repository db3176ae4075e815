package middleware_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/middleware"
	"github.com/sluice-dev/sluice/webhook"
)

// named is a policy for a test: its name and spec YAML.
type named struct{ name, spec string }

// A mode builds a limiter whose decisions are made one way.
type mode struct {
	name string
	new  func(t *testing.T, policies []named, opts ...middleware.Option) *middleware.Limiter
}

func newLimiter(t testing.TB, opts ...middleware.Option) *middleware.Limiter {
	t.Helper()
	// Quiet by default: failure-mode answers log a warning.
	opts = append([]middleware.Option{middleware.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	l, err := middleware.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func policyOptions(t testing.TB, policies []named) []middleware.Option {
	var opts []middleware.Option
	for _, p := range policies {
		opts = append(opts, middleware.WithPolicy(p.name, policytest.Spec(t, p.spec)))
	}
	return opts
}

var memoryMode = mode{"memory", func(t *testing.T, policies []named, opts ...middleware.Option) *middleware.Limiter {
	return newLimiter(t, append(policyOptions(t, policies), opts...)...)
}}

var redisMode = mode{"redis", func(t *testing.T, policies []named, opts ...middleware.Option) *middleware.Limiter {
	srv := redistest.Start(t)
	return newLimiter(t, append(policyOptions(t, policies), append(opts, middleware.WithRedisURL("redis://"+srv.Addr()+"/0"))...)...)
}}

// remoteMode runs the check endpoint (webhook.New over the memory store)
// in the test and points the middleware at it.
var remoteMode = mode{"remote", func(t *testing.T, policies []named, opts ...middleware.Option) *middleware.Limiter {
	ep := newEndpoint(t, "shop", policies)
	return newLimiter(t, append(opts, middleware.WithNamespace("shop"), middleware.WithRemote(middleware.RemoteOptions{URL: ep.URL}))...)
}}

var allModes = []mode{memoryMode, redisMode, remoteMode}

// endpoint is an in-process check endpoint that counts its checks.
type endpoint struct {
	*httptest.Server
	checks atomic.Int64
}

func newEndpoint(t testing.TB, namespace string, policies []named) *endpoint {
	t.Helper()
	var compiled []*policy.Policy
	for _, p := range policies {
		compiled = append(compiled, policytest.Compile(t, namespace, p.name, p.spec))
	}
	s, err := webhook.New(webhook.Options{Checker: checktest.New(t, check.Options{}, compiled...)})
	if err != nil {
		t.Fatal(err)
	}
	ep := &endpoint{}
	ep.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ep.checks.Add(1)
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(ep.Close)
	return ep
}

// app is the handler behind the middleware: it counts the requests that
// reach it.
type app struct{ calls atomic.Int64 }

func (a *app) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	a.calls.Add(1)
	_, _ = io.WriteString(w, "hello\n")
}

// send passes one request through h, from peer (host:port), with headers.
func send(h http.Handler, method, target, peer string, headers map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	if peer != "" {
		r.RemoteAddr = peer
	}
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// problem is the problem+json body of a denial.
type problem struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail"`
	Policy     string `json:"policy"`
	Limit      string `json:"limit"`
	RetryAfter *int64 `json:"retryAfter"`
}

func decodeProblem(t testing.TB, rec *httptest.ResponseRecorder) problem {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var p problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", rec.Body.String(), err)
	}
	return p
}

// within fails t when d exceeds bound.
func within(t testing.TB, what string, d, bound time.Duration) {
	t.Helper()
	if d > bound {
		t.Errorf("%s took %s, more than %s", what, d, bound)
	}
}

// exact reads a header set under its exact spelling (RateLimit,
// X-RateLimit-Limit), which http.Header.Get, canonicalizing, misses.
func exact(h http.Header, name string) string { return strings.Join(h[name], ",") }
