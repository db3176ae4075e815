package middleware_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
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
