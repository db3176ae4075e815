package httpserve

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// seen is what a handler saw of a request.
type seen struct {
	Method, Path, RawPath, RawQuery, Host, RemoteIP, RequestURI, Proto string
	ForceQuery, Close                                                  bool
	ContentLength                                                      int64
	Header                                                             http.Header
	Body                                                               string
}

// echo answers with what it saw; the query's mode picks how it answers,
// to compare the response side too.
func echo(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	ip, _, _ := net.SplitHostPort(r.RemoteAddr)
	s := seen{Method: r.Method, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery,
		Host: r.Host, RemoteIP: ip, RequestURI: r.RequestURI, Proto: r.Proto, ForceQuery: r.URL.ForceQuery,
		Close: r.Close, ContentLength: r.ContentLength, Header: r.Header, Body: string(body)}
	h := w.Header()
	h["RateLimit"] = []string{`"p/l";r=1;t=2`} // not Go's canonical spelling: must be sent as set
	h.Add("X-Multi", "a")
	h.Add("X-Multi", "b")
	switch r.URL.Query().Get("mode") {
	case "sniff": // a body without Content-Type
		_, _ = w.Write([]byte("<html><body>hi</body></html>"))
	case "empty":
	case "late": // changed after WriteHeader: not sent
		w.WriteHeader(http.StatusTooManyRequests)
		h.Set("X-Late", "1")
	case "crlf":
		h.Set("X-Injected", "a\r\nSet-Cookie: evil=1")
		w.WriteHeader(http.StatusForbidden)
	default:
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(s)
	}
}

// startFront serves h through newServer on loopback.
func startFront(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(h, DefaultIdleTimeout)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return ln.Addr().String()
}

// roundTrip sends raw on a new connection and reads one response.
func roundTrip(t *testing.T, addr, raw string) (*http.Response, string) {
	t.Helper()
	resp, body, err := tryRoundTrip(addr, raw)
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	return resp, body
}

// tryRoundTrip is roundTrip for other goroutines than the test's.
func tryRoundTrip(addr, raw string) (*http.Response, string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: strings.Fields(raw)[0]})
	if err != nil {
		return nil, "", fmt.Errorf("read response: %w", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body), nil
}

// TestFrontMatchesNetHTTP sends the same bytes to the handler behind
// net/http and behind the front: the handler must see the same request
// and the client must get the same answer, on the pooled path and off it.
func TestFrontMatchesNetHTTP(t *testing.T) {
	std := httptest.NewServer(http.HandlerFunc(echo))
	defer std.Close()
	fast := startFront(t, http.HandlerFunc(echo))
	stdAddr := strings.TrimPrefix(std.URL, "http://")

	const nginx = "X-Original-URL: http://shop.example.com/api/items?page=2\r\nX-Original-Method: GET\r\nX-Real-IP: 10.1.2.3\r\nX-Forwarded-For: 10.1.2.3\r\n"
	requests := map[string]string{
		"nginx auth-url":         "GET /check/ns HTTP/1.1\r\nHost: sluice:8080\r\n" + nginx + "\r\n",
		"policy and query":       "GET /check/ns/api-per-ip?a=1&b=two HTTP/1.1\r\nHost: h\r\n" + nginx + "\r\n",
		"empty query":            "GET /check/ns? HTTP/1.1\r\nHost: h\r\n\r\n",
		"repeated header":        "GET /check/ns HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2, 3.3.3.3\r\n\r\n",
		"names in any case":      "GET /check/ns HTTP/1.1\r\nhost: h\r\nx-real-ip: 10.0.0.1\r\nX-USER: alice\r\nx_under_score: u\r\n\r\n",
		"spaces around values":   "GET /check/ns HTTP/1.1\r\nHost: h\r\nX-User:   alice \t\r\nX-Empty:\r\n\r\n",
		"head":                   "HEAD /check/ns HTTP/1.1\r\nHost: h\r\n\r\n",
		"http/1.0":               "GET /check/ns HTTP/1.0\r\nHost: h\r\n\r\n",
		"connection close":       "GET /check/ns HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
		"escaped path (adapter)": "GET /check/n%73/p%2Fq HTTP/1.1\r\nHost: h\r\n\r\n",
		"envoy":                  "GET /envoy/ns/api/items?x=1 HTTP/1.1\r\nHost: shop.example.com\r\n\r\n",
		"parentheses (adapter)":  "GET /check/ns/(x) HTTP/1.1\r\nHost: h\r\n\r\n",
		"body (adapter)":         "POST /check/ns HTTP/1.1\r\nHost: h\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
		"chunked (adapter)":      "POST /v1/check HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"other route (adapter)":  "GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n",
		"sniffed body":           "GET /check/ns?mode=sniff HTTP/1.1\r\nHost: h\r\n\r\n",
		"no body":                "GET /check/ns?mode=empty HTTP/1.1\r\nHost: h\r\n\r\n",
		"header after status":    "GET /check/ns?mode=late HTTP/1.1\r\nHost: h\r\n\r\n",
		"newline in a value":     "GET /check/ns?mode=crlf HTTP/1.1\r\nHost: h\r\n\r\n",
	}
	for name, raw := range requests {
		t.Run(name, func(t *testing.T) {
			want, wantBody := roundTrip(t, stdAddr, raw)
			got, gotBody := roundTrip(t, fast, raw)
			if got.StatusCode != want.StatusCode {
				t.Errorf("status %d, net/http %d", got.StatusCode, want.StatusCode)
			}
			for _, h := range []http.Header{want.Header, got.Header} {
				h.Del("Date")
				h.Del("Connection") // fasthttp announces a close net/http leaves implicit
			}
			if !reflect.DeepEqual(got.Header, want.Header) {
				t.Errorf("headers\n got %v\nwant %v", got.Header, want.Header)
			}
			if gotBody != wantBody {
				t.Errorf("body\n got %s\nwant %s", gotBody, wantBody)
			}
		})
	}
}

// TestFrontPooledPath: the check routes take the pooled path; whatever
// net/http would parse differently goes through the general adapter.
func TestFrontPooledPath(t *testing.T) {
	f := newFront(http.NotFoundHandler())
	cases := map[string]bool{
		"GET /check/ns HTTP/1.1\r\nHost: h\r\n\r\n":                        true,
		"GET /check/ns/p?x=1&y=a:b@c HTTP/1.1\r\nHost: h\r\n\r\n":          true,
		"HEAD /envoy/ns/a/b HTTP/1.1\r\nHost: h\r\n\r\n":                   true,
		"GET /check/n%73 HTTP/1.1\r\nHost: h\r\n\r\n":                      false,
		"GET /check/ns/(x) HTTP/1.1\r\nHost: h\r\n\r\n":                    false,
		"GET /checks HTTP/1.1\r\nHost: h\r\n\r\n":                          false,
		"GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n":                         false,
		"POST /check/ns HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx": false,
		"PROPFIND /check/ns HTTP/1.1\r\nHost: h\r\n\r\n":                   false,
		"GET http://h/check/ns HTTP/1.1\r\nHost: h\r\n\r\n":                false,
		// An empty chunked body is no body.
		"POST /check/ns HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n": true,
	}
	for raw, want := range cases {
		var req fasthttp.Request
		req.Header.DisableNormalizing()
		if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}, nil)
		if _, got := f.pooledMethod(&ctx); got != want {
			t.Errorf("%q: pooled %v, want %v", raw, got, want)
		}
	}
}

// TestFrontAllocations: a pooled request costs one allocation (all of its
// strings), whatever the number of headers.
func TestFrontAllocations(t *testing.T) {
	var sawUser string
	value := []string{"x"}
	f := newFront(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawUser = r.Header.Get("X-User")
		w.Header()["RateLimit"] = value
	}))
	var req fasthttp.Request
	req.Header.DisableNormalizing()
	raw := "GET /check/ns HTTP/1.1\r\nHost: h\r\nX-Original-URL: http://a/b\r\nX-Original-Method: GET\r\nX-Real-IP: 10.0.0.1\r\nX-User: alice\r\n\r\n"
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}, nil)
	ctx.Response.Header.DisableNormalizing()
	allocs := testing.AllocsPerRun(1000, func() {
		ctx.Response.Reset()
		f.serve(&ctx)
	})
	if sawUser != "alice" {
		t.Fatalf("handler saw X-User %q", sawUser)
	}
	if allocs > 1 {
		t.Errorf("%.1f allocations per pooled request, want at most 1", allocs)
	}
}

// TestFrontHeaderLimit: headers up to MaxHeaderBytes are served, larger
// ones get 431, and the server goes on answering.
func TestFrontHeaderLimit(t *testing.T) {
	addr := startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-User-Length", strconv.Itoa(len(r.Header.Get("X-User"))))
	}))
	get := func(userLen int) *http.Response {
		resp, _ := roundTrip(t, addr, "GET /check/ns HTTP/1.1\r\nHost: h\r\nX-User: "+strings.Repeat("u", userLen)+"\r\n\r\n")
		return resp
	}
	if resp := get(MaxHeaderBytes - 1024); resp.StatusCode != http.StatusOK || resp.Header.Get("X-User-Length") != strconv.Itoa(MaxHeaderBytes-1024) {
		t.Errorf("header just under the limit: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := get(MaxHeaderBytes + 1); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("header over the limit: status %d, want 431", resp.StatusCode)
	}
	if resp := get(5); resp.StatusCode != http.StatusOK {
		t.Errorf("after the large header: status %d", resp.StatusCode)
	}
}

// TestFrontPanic: a handler's panic is a 500 on that request only.
func TestFrontPanic(t *testing.T) {
	addr := startFront(t, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery == "panic" {
			panic("boom")
		}
	}))
	if resp, _ := roundTrip(t, addr, "GET /check/ns?panic HTTP/1.1\r\nHost: h\r\n\r\n"); resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("panic: status %d, want 500", resp.StatusCode)
	}
	if resp, _ := roundTrip(t, addr, "GET /check/ns HTTP/1.1\r\nHost: h\r\n\r\n"); resp.StatusCode != http.StatusOK {
		t.Errorf("after the panic: status %d", resp.StatusCode)
	}
}

// TestServeStopsWithContext: Serve returns once its context ends.
func TestServeStopsWithContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, http.NotFoundHandler()) }()
	if resp, _ := roundTrip(t, ln.Addr().String(), "GET /x HTTP/1.1\r\nHost: h\r\n\r\n"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
}

// BenchmarkFront is the pooled path's cost per request, the handler
// aside: an ingress-nginx auth-url request in, rate-limit headers out.
func BenchmarkFront(b *testing.B) {
	value := []string{`"p/l";r=9;t=1`}
	f := newFront(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["RateLimit"] = value
		w.WriteHeader(http.StatusOK)
	}))
	var req fasthttp.Request
	req.Header.DisableNormalizing()
	raw := "GET /check/ns HTTP/1.1\r\nHost: sluice:8080\r\nX-Original-URL: http://shop.example.com/api/items?page=2\r\n" +
		"X-Original-Method: GET\r\nX-Real-IP: 10.1.2.3\r\nX-Forwarded-For: 10.1.2.3\r\nX-Sent-From: nginx-ingress-controller\r\n\r\n"
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		b.Fatal(err)
	}
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 4321}, nil)
	ctx.Response.Header.DisableNormalizing()
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		f.serve(&ctx)
	}
}

// TestServeEndedBeforeStart: a context that ends before the server took
// its listener still stops it; nothing serves after Serve returned.
func TestServeEndedBeforeStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Serve(ctx, ln, http.NotFoundHandler()); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatal("still accepting connections after Serve returned")
	}
}

// TestDrain: requests in flight when shutdown begins finish, on both
// paths, with contexts shutdown does not cancel, and their answers say
// Connection: close so the proxy does not reuse the connection.
func TestDrain(t *testing.T) {
	for _, raw := range []string{
		"GET /check/ns HTTP/1.1\r\nHost: h\r\n\r\n",                         // pooled
		"POST /v1/check HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}", // adaptor
	} {
		started, release := make(chan struct{}), make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-release
			if err := r.Context().Err(); err != nil {
				http.Error(w, "context ended: "+err.Error(), http.StatusInternalServerError)
			}
		})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- Serve(ctx, ln, h) }()
		answered, failed := make(chan *http.Response, 1), make(chan error, 1)
		go func() {
			resp, _, err := tryRoundTrip(ln.Addr().String(), raw)
			if err != nil {
				failed <- err
				return
			}
			answered <- resp
		}()
		<-started
		cancel()
		time.Sleep(50 * time.Millisecond) // shutdown under way
		close(release)
		var resp *http.Response
		select {
		case resp = <-answered:
		case err := <-failed:
			t.Fatalf("%q: %v", strings.Fields(raw)[1], err)
		}
		if resp.StatusCode != http.StatusOK || !resp.Close {
			t.Errorf("%q: status %d, close %v; want 200 and Connection: close", strings.Fields(raw)[1], resp.StatusCode, resp.Close)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
