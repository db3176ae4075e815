// Package limits tests what bounds a client can reach on a running
// `manager local` (built from this tree): the process started under a low
// open-file limit (bash's ulimit, so the test binary keeps its own) with
// hundreds of idle connections to its HTTP or its gRPC port, HTTP/2
// clients that open streams without end or reset them at once, the
// connection caps per process and per peer of both listeners, and the
// in-memory store's key cap.
//
//	go test ./test/limits/ -v
package limits

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// manager is cmd/manager built once for the package's tests.
var manager systest.Manager

func TestMain(m *testing.M) { manager.RunTests(m, "limits") }

// openFiles is the open-file limit the manager runs under: 256, where 400
// idle connections used to end the process (accept: too many open files).
const openFiles = 256

// policy limits each X-Client value to 1000 an hour, failing closed.
const policy = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: per-client
  namespace: default
spec:
  key: "{header:X-Client}"
  failureMode: Closed
  limits:
  - name: hourly
    fixedWindow: {limit: 1000, window: 1h}
`

// startLocal runs `manager local` under the open-file limit with args
// added, and returns its address once it serves.
func startLocal(t *testing.T, args ...string) (string, *systest.Proc) {
	t.Helper()
	addr, _, p := startLocalFiles(t, nil, args...)
	return addr, p
}

// startLocalPolicies is startLocal that also returns the policies folder
// the process watches.
func startLocalPolicies(t *testing.T, args ...string) (string, string, *systest.Proc) {
	t.Helper()
	return startLocalFiles(t, nil, args...)
}

// startLocalWith is startLocal with more policy files (name: text) beside
// the per-client policy.
func startLocalWith(t *testing.T, more map[string]string, args ...string) (string, *systest.Proc) {
	t.Helper()
	addr, _, p := startLocalFiles(t, more, args...)
	return addr, p
}

// startLocalFiles runs `manager local` on a policies folder of the
// per-client policy and more (name: text), and returns its address and the
// folder.
func startLocalFiles(t *testing.T, more map[string]string, args ...string) (string, string, *systest.Proc) {
	t.Helper()
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies")
	if err := os.Mkdir(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"per-client.yaml": policy}
	for name, text := range more {
		files[name] = text
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(policies, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", systest.FreePort(t))
	argv := append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, openFiles), manager.Path(t),
		"local", "--listen", addr, "--policies", policies}, args...)
	p := systest.Start(t, dir, "manager", nil, "bash", argv...)
	p.WaitHTTP(t, "http://"+addr+"/healthz", 60*time.Second)
	return addr, policies, p
}

// checkRequest is an ingress-nginx auth-url check of a request keyed
// "limits-test".
const checkRequest = "GET /check/default HTTP/1.1\r\nHost: sluice\r\nX-Original-URL: http://example.com/api\r\n" +
	"X-Original-Method: GET\r\nX-Client: limits-test\r\n\r\n"

// dialFrom connects to addr from the loopback address from.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ask sends one check on c and reads its answer. An error that is not a
// timeout means the server closed the connection.
func ask(c net.Conn, br *bufio.Reader) error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, checkRequest); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit") == "" {
		return fmt.Errorf("status %d, RateLimit %q: want 200 decided by the policy", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	return nil
}

// held is a connection the server answered and kept open.
type held struct {
	c  net.Conn
	br *bufio.Reader
}

// connectAndAsk opens n connections from from, each sending one check, and
// returns those answered; every other one must have been closed by the
// server at once, not left waiting.
func connectAndAsk(t *testing.T, from, addr string, n int) []held {
	t.Helper()
	var kept []held
	for i := range n {
		c := dialFrom(t, from, addr)
		br := bufio.NewReader(c)
		err := ask(c, br)
		if err == nil {
			kept = append(kept, held{c, br})
			continue
		}
		if isTimeout(err) {
			t.Fatalf("connection %d from %s: no answer and not closed: %v", i+1, from, err)
		}
		c.Close()
	}
	return kept
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// checkOnce checks on a new connection from from.
func checkOnce(t *testing.T, from, addr string) error {
	t.Helper()
	c := dialFrom(t, from, addr)
	defer c.Close()
	return ask(c, bufio.NewReader(c))
}

// eventuallyAnswers retries a check from from until it is answered: the
// server notices closed connections as it reads them.
func eventuallyAnswers(t *testing.T, p *systest.Proc, from, addr string) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if done, perr := p.Exited(); done {
			t.Fatalf("manager exited (%v)", perr)
		}
		if err = checkOnce(t, from, addr); err == nil {
			return
		}
	}
	t.Fatalf("check from %s not answered: %v", from, err)
}

func alive(t *testing.T, p *systest.Proc) {
	t.Helper()
	if done, err := p.Exited(); done {
		t.Fatalf("manager exited (%v)", err)
	}
}

// TestIdleConnectionsUnderLowFileLimit: 400 idle connections to a manager
// whose open-file limit is 256 used to end it (accept: too many open
// files). With the default caps it keeps 192 (3/4 of the limit), closes
// the others at once, and answers checks once they are gone.
func TestIdleConnectionsUnderLowFileLimit(t *testing.T) {
	addr, p := startLocal(t)
	var idle []net.Conn
	for range 400 {
		d := net.Dialer{Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			break // the process is gone: alive below says so
		}
		idle = append(idle, c)
	}
	// A check while every slot is held is closed at once, not queued
	// behind the idle connections (accepting it proves the accept loop
	// took all 400 before it).
	if err := checkOnce(t, "127.0.0.2", addr); err == nil || isTimeout(err) {
		t.Errorf("check while the cap is reached: %v; want the connection closed at once", err)
	}
	alive(t, p)
	for _, c := range idle {
		c.Close()
	}
	eventuallyAnswers(t, p, "127.0.0.1", addr)
	alive(t, p)
	if !p.LogContains("connection closed: over the cap") {
		t.Error("no log of the connections closed over the cap")
	}
}

// TestConnectionCaps: a peer holds at most --max-connections-per-peer
// connections and the process --max-connections; connections over a cap
// are closed at once, those held keep being answered, and other peers are
// answered while there is room.
func TestConnectionCaps(t *testing.T) {
	addr, p := startLocal(t, "--max-connections=150", "--max-connections-per-peer=100", "--idle-timeout=10m")
	http.DefaultTransport.(*http.Transport).CloseIdleConnections() // the readiness wait's
	waitOpen(t, addr, 0)

	first := connectAndAsk(t, "127.0.0.2", addr, 400)
	if len(first) != 100 {
		t.Fatalf("peer 127.0.0.2: %d of 400 connections answered, want 100 (its cap)", len(first))
	}
	alive(t, p)
	other := connectAndAsk(t, "127.0.0.1", addr, 1) // another peer, while there is room
	if len(other) != 1 {
		t.Fatal("another peer while there is room: closed")
	}

	second := connectAndAsk(t, "127.0.0.3", addr, 100)
	if len(second) != 49 {
		t.Fatalf("peer 127.0.0.3: %d of 100 connections answered, want 49 (the process cap, 150, less 101 held)", len(second))
	}
	if err := checkOnce(t, "127.0.0.1", addr); err == nil || isTimeout(err) {
		t.Fatalf("check with the process full: %v; want the connection closed at once", err)
	}

	for i, h := range append(first, other...) { // held connections stay usable
		if err := ask(h.c, h.br); err != nil {
			t.Fatalf("held connection %d, second check: %v", i+1, err)
		}
	}
	for _, h := range second {
		h.c.Close()
	}
	eventuallyAnswers(t, p, "127.0.0.1", addr)

	page := metrics(t, addr)
	// Checks retried while the server was noticing the closed connections
	// may have been closed over the process cap too.
	perPeer := metric(t, page, `sluice_http_rejected_connections_total{reason="max_connections_per_peer"}`)
	process := metric(t, page, `sluice_http_rejected_connections_total{reason="max_connections"}`)
	if perPeer != 300 || process < 52 {
		t.Errorf("connections closed over the cap: per peer %v, process %v; want 300 and at least 52", perPeer, process)
	}
}

// metrics reads /metrics on a connection of its own, closed after.
func metrics(t *testing.T, addr string) string {
	t.Helper()
	client := http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// waitOpen waits until the server holds n connections besides the one
// asking.
func waitOpen(t *testing.T, addr string, n int) {
	t.Helper()
	var open float64
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if open = metric(t, metrics(t, addr), "sluice_http_open_connections") - 1; open == float64(n) {
			return
		}
	}
	t.Fatalf("the server holds %v connections, want %d", open, n)
}

// metric is the value of the series named exactly series in a /metrics page.
func metric(t *testing.T, page, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics lacks %s", series)
	return 0
}

// loginPolicy allows each X-Client value 2 logins an hour.
const loginPolicy = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: login
  namespace: default
spec:
  match: {paths: [/login]}
  key: "{header:X-Client}"
  limits:
  - name: hourly
    fixedWindow: {limit: 2, window: 1h}
`

// TestMemoryMaxKeys: with --memory-max-keys=3 reached through the
// per-client policy, the login policy still limits a client the store has
// not seen: the store evicts the least recently used buckets (counted)
// instead of answering new clients by the failure mode.
func TestMemoryMaxKeys(t *testing.T) {
	addr, _ := startLocalWith(t, map[string]string{"login.yaml": loginPolicy}, "--memory-max-keys=3")
	api := systest.NewCheckClient(addr, "default")
	const clients = 20
	for i := range clients {
		if r := api.MustAsk(t, "/api", fmt.Sprint("client-", i)); !r.Allowed || r.Degraded {
			t.Fatalf("client %d with the store full: allowed %v degraded %v error %q; want decided by the store", i, r.Allowed, r.Degraded, r.Error)
		}
	}
	for i, want := range []bool{true, true, false} {
		if r := api.MustAsk(t, "/login", "newcomer"); r.Allowed != want || r.Degraded {
			t.Fatalf("newcomer's login %d: allowed %v degraded %v error %q; want allowed %v by the store", i+1, r.Allowed, r.Degraded, r.Error, want)
		}
	}
	page := metrics(t, addr)
	// 20 buckets of the per-client policy, and the newcomer's two (one
	// per policy), in a store of three.
	if got := metric(t, page, "sluice_store_evictions_total"); got != clients+2-3 {
		t.Errorf("sluice_store_evictions_total %v, want %d", got, clients+2-3)
	}
	if got := metric(t, page, "sluice_store_full_total"); got != 0 {
		t.Errorf("sluice_store_full_total %v, want 0", got)
	}
}
