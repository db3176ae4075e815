package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// upstream is the application behind a proxy: it counts the requests that
// reach it and keeps the headers of the last one.
type upstream struct {
	mu    sync.Mutex
	count int
	last  http.Header
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.count++
	u.last = r.Header.Clone()
	u.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "hello from upstream\n")
}

func (u *upstream) hits() (int, http.Header) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.count, u.last
}

// response is what a client saw.
type response struct {
	status int
	header http.Header
	body   string
}

// client reaches names under example.com (the hosts the examples' routes
// match) at loopback, so a request carries the Host a route asks for.
var client = clientFrom(nil)

// clientFrom is client with its connections made from source, one of the
// loopback addresses (127.0.0.0/8), so that a proxy sees each test's
// clients at addresses of their own; nil lets the system choose.
func clientFrom(source net.IP) *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	if source != nil {
		dialer.LocalAddr = &net.TCPAddr{IP: source}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if host, port, err := net.SplitHostPort(addr); err == nil && strings.HasSuffix(host, ".example.com") {
				addr = net.JoinHostPort("127.0.0.1", port)
			}
			return dialer.DialContext(ctx, network, addr)
		},
	}}
}

func get(t *testing.T, url string, header map[string]string) response {
	t.Helper()
	return getWith(t, client, url, header)
}

// getWith is get through c.
func getWith(t *testing.T, c *http.Client, url string, header map[string]string) response {
	t.Helper()
	return requestWith(t, c, http.MethodGet, url, header)
}

// requestWith sends a request without a body through c.
func requestWith(t *testing.T, c *http.Client, method, url string, header map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// dump renders a response the way curl -i shows it, with the headers that
// matter here.
func (r response) dump() string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d %s\n", r.status, http.StatusText(r.status))
	for _, h := range []string{"Content-Type", "RateLimit", "RateLimit-Policy", "Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Server"} {
		for _, v := range r.header.Values(h) {
			fmt.Fprintf(&b, "%s: %s\n", h, v)
		}
	}
	if body := strings.TrimSpace(r.body); body != "" {
		if len(body) > 300 {
			body = body[:300] + "..."
		}
		b.WriteString("\n" + body + "\n")
	}
	return b.String()
}

// statuses sends n requests and returns their status codes.
func statuses(t *testing.T, url string, n int, header map[string]string) ([]int, []response) {
	t.Helper()
	return statusesWith(t, client, url, n, header)
}

// statusesWith is statuses through c.
func statusesWith(t *testing.T, c *http.Client, url string, n int, header map[string]string) ([]int, []response) {
	t.Helper()
	codes := make([]int, n)
	resps := make([]response, n)
	for i := range n {
		resps[i] = getWith(t, c, url, header)
		codes[i] = resps[i].status
	}
	return codes, resps
}

func countOf(codes []int, code int) int {
	n := 0
	for _, c := range codes {
		if c == code {
			n++
		}
	}
	return n
}

// prefixOK reports whether codes are n times 200 then only deny.
func prefixOK(codes []int, n, deny int) bool {
	for i, c := range codes {
		if (i < n && c != http.StatusOK) || (i >= n && c != deny) {
			return false
		}
	}
	return true
}

// quota reads q= from a RateLimit-Policy header.
func quota(h http.Header) (int, error) {
	v := h.Get("RateLimit-Policy")
	for _, part := range strings.Split(v, ";") {
		if q, ok := strings.CutPrefix(strings.TrimSpace(part), "q="); ok {
			return strconv.Atoi(q)
		}
	}
	return 0, errors.New("no q= in RateLimit-Policy: " + v)
}

// waitAccessLog waits until a line of the proxy's log (its access log
// written to standard output) matches the regular expression want; access
// logs are flushed within a second or so.
func waitAccessLog(t *testing.T, proxy *systest.Proc, want string) {
	t.Helper()
	re := regexp.MustCompile("(?m)" + want)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(proxy.Log); err == nil && re.Match(b) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s's access log has no line matching %s; its last lines:\n%s", proxy.Name, want, proxy.Tail(10))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
