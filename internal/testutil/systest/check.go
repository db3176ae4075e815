package systest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/webhook"
)

// CheckClient asks a check endpoint (`manager check`) through its JSON API,
// POST /v1/check, which reports what decided: Redis, or the failure mode
// (Degraded, with the store's error).
type CheckClient struct {
	// Addr is the endpoint's host:port.
	Addr string
	// Namespace selects the policies.
	Namespace string

	http http.Client
}

// NewCheckClient returns a client of the endpoint at addr for namespace.
func NewCheckClient(addr, namespace string) *CheckClient {
	return &CheckClient{Addr: addr, Namespace: namespace, http: http.Client{Timeout: 5 * time.Second}}
}

// Ask sends one GET request for path with the header X-Client: client
// (the key of the policies built by Policy), consuming unless dryRun.
func (c *CheckClient) Ask(path, client string, dryRun bool) (webhook.CheckResponse, error) {
	body, err := json.Marshal(webhook.CheckRequest{
		Namespace: c.Namespace,
		Request: webhook.OriginalRequest{
			Method: http.MethodGet, Host: "example.com", Path: path,
			Headers: map[string]string{ClientHeader: client},
		},
		DryRun: dryRun,
	})
	if err != nil {
		return webhook.CheckResponse{}, err
	}
	resp, err := c.http.Post("http://"+c.Addr+"/v1/check", "application/json", bytes.NewReader(body))
	if err != nil {
		return webhook.CheckResponse{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return webhook.CheckResponse{}, err
	}
	var out webhook.CheckResponse
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("POST /v1/check: status %d: %w: %s", resp.StatusCode, err, b)
	}
	return out, nil
}

// MustAsk is Ask that fails t on error.
func (c *CheckClient) MustAsk(t testing.TB, path, client string) webhook.CheckResponse {
	t.Helper()
	out, err := c.Ask(path, client, false)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Decisions sends n requests and returns whether each was allowed; it
// fails t when one was answered by the failure mode instead of Redis.
func (c *CheckClient) Decisions(t testing.TB, path, client string, n int) []bool {
	t.Helper()
	out := make([]bool, n)
	for i := range n {
		r := c.MustAsk(t, path, client)
		if r.Degraded {
			t.Fatalf("%s as %s, request %d: answered by the failure mode, not Redis: %s", path, client, i+1, r.Error)
		}
		out[i] = r.Allowed
	}
	return out
}

// FirstN reports whether decisions are n allowed, then only denied.
func FirstN(decisions []bool, n int) bool {
	for i, d := range decisions {
		if d != (i < n) {
			return false
		}
	}
	return true
}

// WaitLimit waits until the endpoint enforces, for path, a limit whose
// quota is want (asked in dry run: nothing is consumed), i.e. until the
// policy version that has it is in force there.
func (c *CheckClient) WaitLimit(t testing.TB, path string, want int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last webhook.CheckResponse
	var err error
	for time.Now().Before(deadline) {
		last, err = c.Ask(path, "wait-limit", true)
		if err == nil {
			for _, p := range last.Policies {
				for _, l := range p.Limits {
					if l.Limit == want {
						return
					}
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: no limit of %d in force after %s (last answer %+v, error %v)", path, want, timeout, last, err)
}
