package middleware_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/middleware"
)

// inFlight allows one request in flight per client address.
var inFlight = []named{{"in-flight", "match: {paths: [/work]}\nlimits: [{name: one, concurrency: {limit: 1, leaseTimeout: 1h}}]"}}

// A request holds its unit while its handler runs and gives it back when
// the handler returns: normally, by a panic (which goes on to the server),
// or on its context when the client hangs up. A denied request holds
// nothing, and its end frees nothing.
func TestMiddlewareReleasesInFlight(t *testing.T) {
	for _, m := range []mode{memoryMode, redisMode} {
		t.Run(m.name, func(t *testing.T) {
			entered, finish := make(chan struct{}), make(chan struct{})
			h := m.new(t, inFlight).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.Header.Get("X-Do") {
				case "panic":
					panic("handler failed")
				case "wait":
					entered <- struct{}{}
					select {
					case <-finish:
					case <-r.Context().Done(): // the client hung up
					}
				}
				w.WriteHeader(http.StatusOK)
			}))
			const peer = "192.0.2.7:4000"
			expect := func(what string, want int) {
				t.Helper()
				if rec := send(h, "GET", "/work", peer, nil); rec.Code != want {
					t.Fatalf("%s: %d, want %d", what, rec.Code, want)
				}
			}

			t.Run("returns", func(*testing.T) {
				expect("one at a time", 200)
				expect("after it returned", 200)
			})

			t.Run("panics", func(t *testing.T) {
				func() {
					defer func() {
						if r := recover(); r != "handler failed" {
							t.Fatalf("the handler's panic reached the caller as %v", r)
						}
					}()
					send(h, "GET", "/work", peer, map[string]string{"X-Do": "panic"})
				}()
				expect("after a panicking handler", 200)
			})

			t.Run("in flight, then done", func(t *testing.T) {
				done := make(chan int)
				go func() { done <- send(h, "GET", "/work", peer, map[string]string{"X-Do": "wait"}).Code }()
				<-entered
				expect("while one is in flight", 429)
				expect("again: a denied request released nothing", 429)
				finish <- struct{}{}
				if code := <-done; code != 200 {
					t.Fatalf("the request in flight: %d", code)
				}
				expect("after it ended", 200)
			})

			t.Run("client hangs up", func(t *testing.T) {
				srv := httptest.NewServer(h)
				t.Cleanup(srv.Close)
				ctx, hangUp := context.WithCancel(context.Background())
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/work", nil)
				if err != nil {
					t.Fatal(err)
				}
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
				get := func() int {
					resp, err := http.Get(srv.URL + "/work")
					if err != nil {
						t.Fatal(err)
					}
					_ = resp.Body.Close()
					return resp.StatusCode
				}
				if code := get(); code != 429 {
					t.Fatalf("while the first is in flight: %d, want 429", code)
				}
				hangUp()
				if err := <-errc; !errors.Is(err, context.Canceled) {
					t.Fatalf("the client's request: %v, want canceled", err)
				}
				// The handler returns on its context, then the unit is
				// released: shortly after the client has gone.
				deadline := time.Now().Add(5 * time.Second)
				for get() != 200 {
					if time.Now().After(deadline) {
						t.Fatal("the unit of a request whose client hung up was not released")
					}
					time.Sleep(10 * time.Millisecond)
				}
			})
		})
	}
}

// tenantInFlight allows one request in flight per tenant, read from a
// header that the key renders and that match requires.
var tenantInFlight = []named{{"tenant-in-flight", `
match: {paths: [/work], headers: [{name: X-Tenant}]}
key: "{header:X-Tenant}"
limits: [{name: one, concurrency: {limit: 1, leaseTimeout: 1h}}]`}}

// A release frees what the admission took, whatever the handler did to
// the request it was given: its headers (deleted, rewritten in place,
// normalised), its URL, a request replaced through WithContext, a panic.
// Before, the release read the key from the header map the handler had
// changed, freed nothing, and the tenant stayed locked out for the lease
// timeout.
func TestMiddlewareReleasesWhatAdmissionTook(t *testing.T) {
	edits := map[string]func(r *http.Request){
		"header deleted":    func(r *http.Request) { r.Header.Del("X-Tenant") },
		"header normalised": func(r *http.Request) { r.Header.Set("X-Tenant", strings.ToUpper(r.Header.Get("X-Tenant"))) },
		"value rewritten":   func(r *http.Request) { r.Header["X-Tenant"][0] = "someone-else" },
		"headers replaced":  func(r *http.Request) { *r = *r.WithContext(context.Background()); r.Header = http.Header{} },
		"url rewritten":     func(r *http.Request) { r.URL.Path, r.RequestURI, r.Host = "/elsewhere", "/elsewhere", "other.example" },
		"cleared, panics": func(r *http.Request) {
			clear(r.Header)
			panic("handler failed")
		},
	}
	for _, m := range []mode{memoryMode, redisMode} {
		t.Run(m.name, func(t *testing.T) {
			for name, edit := range edits {
				t.Run(name, func(t *testing.T) {
					h := m.new(t, tenantInFlight).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						edit(r)
						w.WriteHeader(http.StatusOK)
					}))
					tenant := map[string]string{"X-Tenant": "acme"}
					for n := range 3 {
						func() {
							defer func() { _ = recover() }() // the panicking edit's
							rec := send(h, "GET", "/work", "192.0.2.7:4000", tenant)
							if rec.Code != http.StatusOK {
								t.Fatalf("request %d of tenant acme: %d, want 200: the previous one's unit was not released", n+1, rec.Code)
							}
						}()
					}
				})
			}
		})
	}
}

// The remote mode cannot release, and its check endpoint refuses a
// request that meets a concurrency limit (the no-release problem). That
// refusal is the endpoint's answer about the request, relayed as the
// in-process mode answers a check it cannot make: the handler is not
// called, whatever RemoteOptions.FailureMode says, and the breaker does
// not count it (else clients of the policy would switch every policy off
// for everyone while it is open).
func TestRemoteRefusesConcurrency(t *testing.T) {
	ep := newEndpoint(t, "shop", append([]named{{"api", shopPolicy}}, tenantInFlight...))
	l := newLimiter(t, middleware.WithNamespace("shop"), middleware.WithRemote(middleware.RemoteOptions{URL: ep.URL}))
	a := &app{}
	h := l.Handler(a)
	for n := range 8 {
		rec := send(h, "GET", "/work", "192.0.2.7:4000", map[string]string{"X-Tenant": "acme"})
		if rec.Code != http.StatusInternalServerError || a.calls.Load() != 0 {
			t.Fatalf("request %d in flight: %d, handler called %d times; want 500 and never", n+1, rec.Code, a.calls.Load())
		}
		if p := decodeProblem(t, rec); p.Type != "https://sluice.dev/problems/no-release" || !strings.Contains(p.Detail, "tenant-in-flight") {
			t.Fatalf("request %d in flight: problem %+v, want the no-release problem naming the policy", n+1, p)
		}
	}
	// The breaker stayed closed: the rate limit of another policy still
	// applies (3 a client, then 429), decided by the endpoint.
	for n, want := range []int{200, 200, 200, 429} {
		if rec := send(h, "GET", "/api/items", "192.0.2.8:4000", nil); rec.Code != want {
			t.Fatalf("request %d to /api: %d, want %d", n+1, rec.Code, want)
		}
	}
}
