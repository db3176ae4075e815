package sluicectl

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

const base = "/apis/admin.ratelimit.sluice.dev/v1alpha1/"

// recorded is one request the fake admin API received.
type recorded struct {
	method, path, query, body, contentType string
}

// fake is an admin API that answers every call with one status and body,
// and discovery with 200 unless discovery is false.
type fake struct {
	url       string
	mu        sync.Mutex
	calls     []recorded
	discovery bool
}

func fakeServer(t *testing.T, code int, body string) *fake {
	t.Helper()
	f := &fake{discovery: true}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == base[:len(base)-1] {
			if f.discovery {
				_, _ = io.WriteString(w, `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"admin.ratelimit.sluice.dev/v1alpha1","resources":[]}`)
			} else {
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, `404 page not found`)
			}
			return
		}
		f.mu.Lock()
		f.calls = append(f.calls, recorded{r.Method, r.URL.Path, r.URL.RawQuery, string(b), r.Header.Get("Content-Type")})
		f.mu.Unlock()
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func (f *fake) last(t *testing.T) recorded {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) != 1 {
		t.Fatalf("the fake admin API got %d calls, want 1: %+v", len(f.calls), f.calls)
	}
	return f.calls[0]
}
