package rlqs

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/envoytest"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

var manager systest.Manager

func TestMain(m *testing.M) { manager.RunTests(m, "rlqs") }

// upstream is the application behind the Envoys: it records when each
// request reached it, the ones the fleet admitted.
type upstream struct {
	srv *httptest.Server
	arrivals
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		u.add(time.Now())
		_, _ = io.WriteString(w, "ok\n")
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// readExample reads config/examples/envoy/<file>.
func readExample(t *testing.T, root, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "config", "examples", "envoy", file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (u *upstream) addr() string { return strings.TrimPrefix(u.srv.URL, "http://") }

// checkProcess is `manager local` on the test's Redis, serving RLQS on a
// gRPC address that stays the same across restarts (the Envoys' cluster
// names it).
type checkProcess struct {
	dir, policies, httpAddr, grpcAddr, redisURL string
	proc                                        *systest.Proc
	starts                                      int
}

func newCheckProcess(t *testing.T, dir, policies, redisURL string) *checkProcess {
	t.Helper()
	pdir := filepath.Join(dir, "policies")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(pdir, examplePolicies)
	if err := os.WriteFile(file, []byte(policies), 0o644); err != nil {
		t.Fatal(err)
	}
	// Dated back, so local mode applies them without waiting for them to
	// settle.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(file, old, old); err != nil {
		t.Fatal(err)
	}
	return &checkProcess{
		dir: dir, policies: pdir, redisURL: redisURL,
		httpAddr: "127.0.0.1:" + strconv.Itoa(systest.FreePort(t)),
		grpcAddr: "127.0.0.1:" + strconv.Itoa(systest.FreePort(t)),
	}
}

func (c *checkProcess) start(t *testing.T) {
	t.Helper()
	c.starts++
	c.proc = systest.Start(t, c.dir, "local-"+strconv.Itoa(c.starts), nil, manager.Path(t),
		"local", "--policies", c.policies, "--listen", c.httpAddr, "--grpc-listen", c.grpcAddr,
		"--rls-domain", "edge=shop", "--redis-url", c.redisURL)
	c.proc.WaitHTTP(t, "http://"+c.httpAddr+"/readyz", 60*time.Second)
	c.proc.WaitTCP(t, c.grpcAddr, 10*time.Second)
}

// fleetEnvoy is one Envoy of the fleet, running the example.
type fleetEnvoy struct {
	name string
	base string
	proc *systest.Proc
}

// startFleet runs n Envoys from config/examples/envoy/envoy-rlqs.yaml,
// with only their addresses replaced, all asking the check process.
func startFleet(t *testing.T, dir string, n int, check *checkProcess, app *upstream) []*fleetEnvoy {
	t.Helper()
	root := kubetest.RepoRoot(t)
	var fleet []*fleetEnvoy
	for i := range n {
		port := systest.FreePort(t)
		name := fmt.Sprintf("envoy-%c", 'a'+i)
		conf := envoytest.Example(t, root, exampleConfig, port, map[string]string{
			envoytest.GRPCCheckSocket: check.grpcAddr,
			envoytest.AppSocket:       app.addr(),
		})
		// Its log shows each assignment it receives.
		p := envoytest.RunArgs(t, dir, name+".yaml", conf, port, "--component-log-level", "rate_limit_quota:debug")
		fleet = append(fleet, &fleetEnvoy{name: name, base: "http://127.0.0.1:" + strconv.Itoa(port), proc: p})
	}
	return fleet
}

// tally counts one client's outcomes.
type tally struct {
	admitted, denied, failed atomic.Int64
	done                     chan struct{}
}

// wait waits until the load has ended (its context done) and its last
// answers are counted.
func (t *tally) wait() { <-t.done }

func (t *tally) String() string {
	return fmt.Sprintf("%d admitted, %d denied, %d failed", t.admitted.Load(), t.denied.Load(), t.failed.Load())
}

// load sends GET requests to url at about rate per second until ctx ends,
// from a few workers (a tick no worker is free for is skipped, so a slow
// Envoy is not flooded), and counts the answers.
func load(ctx context.Context, url string, rate int, header map[string]string) *tally {
	tl := &tally{done: make(chan struct{})}
	ticks := make(chan struct{})
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range ticks {
				tl.record(send(ctx, client, url, header))
			}
		}()
	}
	go func() {
		defer func() { close(ticks); wg.Wait(); client.CloseIdleConnections(); close(tl.done) }()
		tk := time.NewTicker(time.Second / time.Duration(rate))
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				select {
				case ticks <- struct{}{}:
				default:
				}
			}
		}
	}()
	return tl
}

func send(ctx context.Context, c *http.Client, url string, header map[string]string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return -1
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return -1
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func (t *tally) record(code int) {
	switch code {
	case http.StatusOK:
		t.admitted.Add(1)
	case http.StatusTooManyRequests:
		t.denied.Add(1)
	default:
		t.failed.Add(1)
	}
}
