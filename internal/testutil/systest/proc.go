// Package systest holds what tests of the whole system share: the manager
// binary built from this tree and run as child processes (each in its own
// process group, logging to a file, stopped or killed with its group, its
// log shown when the test fails), a client of the check endpoint's JSON API,
// and RateLimitPolicy builders and waits against an API server.
package systest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
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

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
)

// Manager builds cmd/manager of this tree once per test binary into Dir, a
// directory the caller owns and removes after all tests (TestMain, as in
// test/security), and cmd/kubectl-sluice beside it for the tests that run
// the plugin. The source they are built from becomes an input of the
// test's cached result.
type Manager struct {
	Dir string

	manager, plugin built
}

// built is one command built once.
type built struct {
	once sync.Once
	path string
	err  error
}

// RunTests runs a package's tests (from its TestMain) with m building
// cmd/manager into a temporary folder of its own, removed afterwards, and
// exits with their result.
func (m *Manager) RunTests(tests *testing.M, name string) {
	dir, err := os.MkdirTemp("", "sluice-"+name+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	m.Dir = dir
	code := tests.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// StartLocal runs `manager local --grpc-listen` with one policy file, env
// added to its environment and args, and returns its HTTP and gRPC
// addresses once both serve.
func (m *Manager) StartLocal(t testing.TB, env []string, policy string, args ...string) (httpAddr, grpcAddr string) {
	t.Helper()
	_, httpAddr, grpcAddr = m.StartLocalProcess(t, env, policy, args...)
	return httpAddr, grpcAddr
}

// StartLocalProcess is StartLocal, and gives the process too, for a test
// that stops it.
func (m *Manager) StartLocalProcess(t testing.TB, env []string, policy string, args ...string) (p *Proc, httpAddr, grpcAddr string) {
	t.Helper()
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies")
	if err := os.MkdirAll(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(policies, "policy.yaml"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	httpAddr = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	grpcAddr = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	p = Start(t, dir, "manager", env, m.Path(t), append([]string{"local", "--policies", policies,
		"--listen", httpAddr, "--grpc-listen", grpcAddr}, args...)...)
	p.WaitHTTP(t, "http://"+httpAddr+"/readyz", 60*time.Second)
	p.WaitTCP(t, grpcAddr, 10*time.Second)
	return p, httpAddr, grpcAddr
}

// Path builds the manager on first use and returns its path.
func (m *Manager) Path(t testing.TB) string {
	t.Helper()
	return m.build(t, &m.manager, "manager")
}

// Plugin builds the kubectl plugin, kubectl-sluice, on first use and
// returns its path.
func (m *Manager) Plugin(t testing.TB) string {
	t.Helper()
	return m.build(t, &m.plugin, "kubectl-sluice")
}

// build builds cmd/<name> into Dir once.
func (m *Manager) build(t testing.TB, b *built, name string) string {
	t.Helper()
	root := kubetest.RepoRoot(t)
	var inputs []string
	for _, p := range []string{"go.mod", "go.sum", "api", "cmd", "internal", "webhook"} {
		inputs = append(inputs, filepath.Join(root, p))
	}
	kubetest.TrackFiles(t, inputs...)
	b.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			b.err = fmt.Errorf("go is not on PATH: the test builds cmd/%s with the Go toolchain that runs it", name)
			return
		}
		out := filepath.Join(m.Dir, name)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, goBin, "build", "-o", out, "./cmd/"+name)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build ./cmd/%s: %v\n%s", name, err, out)
			return
		}
		b.path = out
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// FreePort is a loopback port nothing listens on right now, for a child
// process to listen on. It is picked at random below the kernel's range of
// ephemeral ports (ip_local_port_range), so that no outgoing connection
// (the test's own clients, hundreds of them in a flood) takes it as its
// local port before the child binds it, and never handed out twice in one
// test binary.
func FreePort(t testing.TB) int {
	t.Helper()
	low := ephemeralLow()
	freePorts.Lock()
	defer freePorts.Unlock()
	for range 1000 {
		port := 10000 + rand.IntN(low-10000)
		if freePorts.given[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		_ = l.Close()
		freePorts.given[port] = true
		return port
	}
	t.Fatal("no free loopback port below the ephemeral range")
	return 0
}

var freePorts = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// ephemeralLow is the first port the kernel gives outgoing connections
// (32768 unless configured otherwise), at least 20000.
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	return max(low, 20000)
}

// Proc is a child process in its own process group.
type Proc struct {
	Name string
	Log  string // the file holding its stdout and stderr

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs bin with args in dir; env adds to the test's environment. The
// process is stopped when the test ends, and the end of its log is shown
// if the test failed.
func Start(t testing.TB, dir, name string, env []string, bin string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, Log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	logFile, err := os.Create(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// Its own process group; killed with the test binary if that dies first.
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
		p.Stop()
		if t.Failed() {
			t.Logf("--- last lines of %s (%s) ---\n%s", name, p.Log, p.Tail(40))
		}
	})
	return p
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM to the process group, SIGKILL after 5 s, and waits.
func (p *Proc) Stop() {
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

// Kill ends the process group at once (SIGKILL: no cleanup, no lease
// release) and waits for the process.
func (p *Proc) Kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Exited reports whether the process has ended, with its error.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Tail is the last n lines of the log.
func (p *Proc) Tail(n int) string {
	f, err := os.Open(p.Log)
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

// LogContains reports whether the log holds s.
func (p *Proc) LogContains(s string) bool {
	b, err := os.ReadFile(p.Log)
	return err == nil && strings.Contains(string(b), s)
}

// WaitTCP polls until addr accepts connections; it fails the test when the
// process exits or the timeout passes.
func (p *Proc) WaitTCP(t testing.TB, addr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if done, err := p.Exited(); done {
			t.Fatalf("%s exited while starting (%v):\n%s", p.Name, err, p.Tail(40))
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: %s not listening after %s\n%s", p.Name, addr, timeout, p.Tail(40))
}

// WaitHTTP polls url until it answers 200; it fails the test when the
// process exits or the timeout passes.
func (p *Proc) WaitHTTP(t testing.TB, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	var last error
	for time.Now().Before(deadline) {
		if done, err := p.Exited(); done {
			t.Fatalf("%s exited while starting (%v):\n%s", p.Name, err, p.Tail(40))
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
	t.Fatalf("%s: %s not ready after %s: %v\n%s", p.Name, url, timeout, last, p.Tail(40))
}
