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
	srv := newServer(newFront(h).serve, DefaultIdleTimeout)
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

// TestFrontMatchesNetHTTP sends the same bytes to a net/http handler
// behind net/http and behind the front (through the adaptor: the handler
// has no native routes): the handler must see the same request and the
// client must get the same answer. The adaptor serves the dashboard,
// /v1/check, metrics and probes; none of them reads Request.Close or sets
// a header after WriteHeader, where the adaptor differs (it leaves Close
// unset, shows HTTP/1.0's implied "Connection: close" in the header map,
// and sends headers set after WriteHeader). The check routes are native,
// and webhook's TestRoutesAnswerAlike holds them to net/http's answers.
func TestFrontMatchesNetHTTP(t *testing.T) {
	std := httptest.NewServer(http.HandlerFunc(echo))
	defer std.Close()
	fast := startFront(t, http.HandlerFunc(echo))
	stdAddr := strings.TrimPrefix(std.URL, "http://")

	const nginx = "X-Original-URL: http://shop.example.com/api/items?page=2\r\nX-Original-Method: GET\r\nX-Real-IP: 10.1.2.3\r\nX-Forwarded-For: 10.1.2.3\r\n"
	requests := map[string]string{
		"nginx auth-url":       "GET /check/ns HTTP/1.1\r\nHost: sluice:8080\r\n" + nginx + "\r\n",
		"policy and query":     "GET /check/ns/api-per-ip?a=1&b=two HTTP/1.1\r\nHost: h\r\n" + nginx + "\r\n",
		"empty query":          "GET /check/ns? HTTP/1.1\r\nHost: h\r\n\r\n",
		"repeated header":      "GET /check/ns HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2, 3.3.3.3\r\n\r\n",
		"names in any case":    "GET /check/ns HTTP/1.1\r\nhost: h\r\nx-real-ip: 10.0.0.1\r\nX-USER: alice\r\nx_under_score: u\r\n\r\n",
		"spaces around values": "GET /check/ns HTTP/1.1\r\nHost: h\r\nX-User:   alice \t\r\nX-Empty:\r\n\r\n",
		"head":                 "HEAD /check/ns HTTP/1.1\r\nHost: h\r\n\r\n",
		"escaped path":         "GET /check/n%73/p%2Fq HTTP/1.1\r\nHost: h\r\n\r\n",
		"envoy":                "GET /envoy/ns/api/items?x=1 HTTP/1.1\r\nHost: shop.example.com\r\n\r\n",
		"parentheses":          "GET /check/ns/(x) HTTP/1.1\r\nHost: h\r\n\r\n",
		"body":                 "POST /check/ns HTTP/1.1\r\nHost: h\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
		"chunked":              "POST /v1/check HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"other route":          "GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n",
		"sniffed body":         "GET /check/ns?mode=sniff HTTP/1.1\r\nHost: h\r\n\r\n",
		"no body":              "GET /check/ns?mode=empty HTTP/1.1\r\nHost: h\r\n\r\n",
		"newline in a value":   "GET /check/ns?mode=crlf HTTP/1.1\r\nHost: h\r\n\r\n",
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

// withNative is a handler with native routes: native answers what it
// takes, ServeHTTP the rest.
type withNative struct {
	http.Handler
	native func(*fasthttp.RequestCtx) bool
}

func (h withNative) ServeFastHTTP(ctx *fasthttp.RequestCtx) bool { return h.native(ctx) }

// nativeUnder takes the requests under prefix, answering with answer.
func nativeUnder(prefix string, h http.Handler, answer func(*fasthttp.RequestCtx)) withNative {
	return withNative{Handler: h, native: func(ctx *fasthttp.RequestCtx) bool {
		if !strings.HasPrefix(string(ctx.RequestURI()), prefix) {
			return false
		}
		answer(ctx)
		return true
	}}
}

// TestFrontNativeRoutes: a handler's native routes answer the requests
// they take; every other request reaches its ServeHTTP.
func TestFrontNativeRoutes(t *testing.T) {
	addr := startFront(t, nativeUnder("/check/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Route", "net/http")
	}), func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("RateLimit", "native "+string(ctx.Request.Header.Peek("X-User")))
	}))
	for raw, want := range map[string]string{
		"GET /check/ns HTTP/1.1\r\nHost: h\r\nX-User: alice\r\n\r\n":        "native alice",
		"GET /checks HTTP/1.1\r\nHost: h\r\n\r\n":                           "net/http",
		"POST /v1/check HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}": "net/http",
	} {
		resp, _ := roundTrip(t, addr, raw)
		got := resp.Header.Get("X-Route") + resp.Header.Get("RateLimit")
		if resp.StatusCode != http.StatusOK || got != want {
			t.Errorf("%q: status %d, route %q; want 200 from %q", raw, resp.StatusCode, got, want)
		}
	}
}

// TestFrontNativeAllocations: the native route costs the server no
// allocation of its own.
func TestFrontNativeAllocations(t *testing.T) {
	f := newFront(nativeUnder("/check/", http.NotFoundHandler(), func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("RateLimit", "x")
	}))
	var req fasthttp.Request
	req.Header.DisableNormalizing()
	if err := req.Read(bufio.NewReader(strings.NewReader("GET /check/ns HTTP/1.1\r\nHost: h\r\nX-Real-IP: 10.0.0.1\r\n\r\n"))); err != nil {
		t.Fatal(err)
	}
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}, nil)
	ctx.Response.Header.DisableNormalizing()
	if n := testing.AllocsPerRun(1000, func() {
		ctx.Response.Reset()
		f.serve(&ctx)
	}); n != 0 {
		t.Errorf("%.1f allocations per native request, want 0", n)
	}
}

// bothRoutes are the same handler without and with a native route for
// /check/, so that a test holds both routes to its rules.
func bothRoutes(h http.Handler, native func(*fasthttp.RequestCtx)) map[string]http.Handler {
	return map[string]http.Handler{"net/http": h, "native": nativeUnder("/check/", h, native)}
}

// TestFrontHeaderLimit: headers up to MaxHeaderBytes are served, larger
// ones get 431, and the server goes on answering.
func TestFrontHeaderLimit(t *testing.T) {
	for route, h := range bothRoutes(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-User-Length", strconv.Itoa(len(r.Header.Get("X-User"))))
	}), func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("X-User-Length", strconv.Itoa(len(ctx.Request.Header.Peek("X-User"))))
	}) {
		addr := startFront(t, h)
		get := func(userLen int) *http.Response {
			resp, _ := roundTrip(t, addr, "GET /check/ns HTTP/1.1\r\nHost: h\r\nX-User: "+strings.Repeat("u", userLen)+"\r\n\r\n")
			return resp
		}
		if resp := get(MaxHeaderBytes - 1024); resp.StatusCode != http.StatusOK || resp.Header.Get("X-User-Length") != strconv.Itoa(MaxHeaderBytes-1024) {
			t.Errorf("%s: header just under the limit: %d %v", route, resp.StatusCode, resp.Header)
		}
		if resp := get(MaxHeaderBytes + 1); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%s: header over the limit: status %d, want 431", route, resp.StatusCode)
		}
		if resp := get(5); resp.StatusCode != http.StatusOK {
			t.Errorf("%s: after the large header: status %d", route, resp.StatusCode)
		}
	}
}

// TestFrontPanic: a handler's panic is a 500 on that request only.
func TestFrontPanic(t *testing.T) {
	for route, h := range bothRoutes(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery == "panic" {
			panic("boom")
		}
	}), func(ctx *fasthttp.RequestCtx) {
		if string(ctx.QueryArgs().QueryString()) == "panic" {
			panic("boom")
		}
	}) {
		addr := startFront(t, h)
		if resp, _ := roundTrip(t, addr, "GET /check/ns?panic HTTP/1.1\r\nHost: h\r\n\r\n"); resp.StatusCode != http.StatusInternalServerError || !resp.Close {
			t.Errorf("%s: panic: status %d, close %v; want 500 and Connection: close", route, resp.StatusCode, resp.Close)
		}
		if resp, _ := roundTrip(t, addr, "GET /check/ns HTTP/1.1\r\nHost: h\r\n\r\n"); resp.StatusCode != http.StatusOK {
			t.Errorf("%s: after the panic: status %d", route, resp.StatusCode)
		}
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
		"GET /check/ns HTTP/1.1\r\nHost: h\r\n\r\n",                         // native
		"POST /v1/check HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}", // adaptor
	} {
		started, release := make(chan struct{}), make(chan struct{})
		h := nativeUnder("/check/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-release
			if err := r.Context().Err(); err != nil {
				http.Error(w, "context ended: "+err.Error(), http.StatusInternalServerError)
			}
		}), func(*fasthttp.RequestCtx) {
			close(started)
			<-release
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
