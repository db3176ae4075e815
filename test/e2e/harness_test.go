package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// requireCommand returns the path of a program the suite runs, or fails
// the test (never skips it) with how to install it.
func requireCommand(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not on PATH: run `make test` (hack/install-deps.sh installs the packages the tests run) or `apt-get install %s`", name, pkg)
	}
	return path
}

// buildManager builds cmd/manager into dir, so the suite tests the code of
// this tree whatever bin/manager holds.
func buildManager(t *testing.T, root, dir string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("go is not on PATH: the suite builds cmd/manager with the Go toolchain that runs it")
	}
	out := filepath.Join(dir, "manager")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", out, "./cmd/manager")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/manager: %v\n%s", err, b)
	}
	return out
}

// freePort is a loopback port nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// proc is a child process in its own process group, logging to a file,
// stopped with its whole group when the test ends.
type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startProc starts bin with args; env adds to the test's environment.
func startProc(t *testing.T, dir, name string, env []string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	logFile, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// Its own process group, so cleanup reaches its children (nginx
	// workers); killed with the test binary if that dies first.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("--- last lines of %s (%s) ---\n%s", name, p.log, tail(p.log, 40))
		}
	})
	return p
}

// stop sends SIGTERM to the process group, then SIGKILL after 5 s, and
// finally SIGKILL to whatever is left of the group.
func (p *proc) stop() {
	pgid := p.cmd.Process.Pid
	select {
	case <-p.done:
	default:
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.done
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// exited reports whether the process has ended, with its error.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

func tail(file string, n int) string {
	f, err := os.Open(file)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// waitHTTP polls url until it answers 200, failing when the process exits
// or the timeout passes.
func waitHTTP(t *testing.T, p *proc, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	var last error
	for time.Now().Before(deadline) {
		if done, err := p.exited(); done {
			t.Fatalf("%s exited while starting (%v):\n%s", p.name, err, tail(p.log, 40))
		}
		resp, err := client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: %s not ready after %s: %v\n%s", p.name, url, timeout, last, tail(p.log, 40))
}

// waitTCP polls until addr accepts connections.
func waitTCP(t *testing.T, p *proc, addr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if done, err := p.exited(); done {
			t.Fatalf("%s exited while starting (%v):\n%s", p.name, err, tail(p.log, 40))
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: %s not listening after %s\n%s", p.name, addr, timeout, tail(p.log, 40))
}

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

var client = &http.Client{Timeout: 5 * time.Second}

func get(t *testing.T, url string, header map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
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
	codes := make([]int, n)
	resps := make([]response, n)
	for i := range n {
		resps[i] = get(t, url, header)
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
