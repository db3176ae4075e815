package decisionlog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
)

// oneASecond admits one request a second per client address.
const oneASecond = `key: "{client_ip}"
limits: [{name: per-second, fixedWindow: {limit: 1, window: 1s}}]`

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// syncBuffer is a buffer the writer goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("decision log line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func request(client string, header http.Header) *policy.Request {
	return &policy.Request{Method: "GET", Host: "shop.example", Path: "/", Header: header, ClientIP: netip.MustParseAddr(client)}
}

// TestOneLinePerDenial: a denied check writes one JSON line naming the
// policy, the limit, the bucket key's hash (never the key), the client,
// the caller's trace and when to retry, stamped with the decision's time;
// allowed checks and dry runs write none.
func TestOneLinePerDenial(t *testing.T) {
	clk := &clock{now: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	var buf syncBuffer
	log := New(&buf, 10, clk.Now)
	c := checktest.New(t, check.Options{Now: clk.Now, Observer: check.LogDenials(log)}, policytest.Compile(t, "shop", "per-client", oneASecond))
	header := http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	in := check.Input{Namespace: "shop", Request: request("203.0.113.7", header)}

	for i, want := range []bool{true, false} {
		out, err := c.Check(context.Background(), in)
		if err != nil || out.Allowed != want {
			t.Fatalf("check %d: allowed=%v err=%v, want allowed=%v", i, out.Allowed, err, want)
		}
	}
	dry := in
	dry.Action = ratelimit.DryRun
	if out, err := c.Check(context.Background(), dry); err != nil || out.Allowed {
		t.Fatalf("dry run: %+v %v, want a denial", out, err)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}

	lines := buf.lines(t)
	if len(lines) != 1 {
		t.Fatalf("got %d lines, want 1 (the consuming denial): %v", len(lines), lines)
	}
	line := lines[0]
	key := ratelimit.Key("shop", "per-client", "203.0.113.7", "per-second")
	want := map[string]any{
		"msg": "denied", "policy": "shop/per-client", "limit": "per-second", "reason": "RateLimited",
		"key_hash": checkhttp.KeyHash(key), "client": "203.0.113.7",
		"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7",
		"retry_after_ms": float64(1000), "time": "2026-12-03T12:00:00Z",
	}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("%s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
	if bytes.Contains(buf.b.Bytes(), []byte("203.0.113.7}")) {
		t.Errorf("the line holds the bucket's key: %s", buf.b.String())
	}
}

// TestFloodIsRateLimited: a flood writes at most the rate's lines a
// second; the dropped ones are counted in the metric and in the next line
// written once the rate allows again.
func TestFloodIsRateLimited(t *testing.T) {
	clk := &clock{now: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	var buf syncBuffer
	log := New(&buf, 5, clk.Now)
	c := checktest.New(t, check.Options{Now: clk.Now, Observer: check.LogDenials(log)}, policytest.Compile(t, "shop", "per-client", oneASecond))
	in := check.Input{Namespace: "shop", Request: request("198.51.100.1", nil)}
	for range 101 { // 1 allowed, 100 denied (from the cache of denials after the first)
		if _, err := c.Check(context.Background(), in); err != nil {
			t.Fatal(err)
		}
	}
	clk.advance(200 * time.Millisecond) // one more line's worth
	if _, err := c.Check(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	lines := buf.lines(t)
	if len(lines) != 6 {
		t.Fatalf("got %d lines, want 6 (a burst of 5, then 1 after 200ms)", len(lines))
	}
	if got := lines[5]["dropped_before"]; got != float64(95) {
		t.Errorf("dropped_before = %v, want 95", got)
	}
	if lines[1]["cached"] != true {
		t.Errorf("the second denial came from the cache of denials, its line says cached=%v", lines[1]["cached"])
	}
	if got := testutil.ToFloat64(log.metrics.WithLabelValues("dropped")); got != 95 {
		t.Errorf("dropped lines counted %v, want 95", got)
	}
	if got := testutil.ToFloat64(log.metrics.WithLabelValues("written")); got != 6 {
		t.Errorf("written lines counted %v, want 6", got)
	}
}

// TestOffIsNil: no destination, no log, and a nil Log is safe to close.
func TestOffIsNil(t *testing.T) {
	l, err := Open(Config{})
	if err != nil || l != nil {
		t.Fatalf("Open of no destination = %v, %v; want nil, nil", l, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dest: t.TempDir() + "/missing/decisions.log"}); err == nil {
		t.Fatal("a file in a missing folder opened")
	}
}
