// Package procs starts and watches the programs that the soak and the
// scale benchmark run beside Sluice: the manager's processes and a
// private redis-server, their resident memory and their metrics.
package procs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Proc is one process a program started, its output in a log file.
type Proc struct {
	Name string
	Log  string // the file of its standard output and error
	Cmd  *exec.Cmd
	done chan struct{}
}

// Start starts bin with args, logging into dir/name.log; it is killed
// if this program dies.
func Start(dir, name, bin string, args ...string) (*Proc, error) {
	return StartEnv(dir, name, nil, bin, args...)
}

// StartEnv is Start with env as the process's environment (nil: this
// program's).
func StartEnv(dir, name string, env []string, bin string, args ...string) (*Proc, error) {
	p := &Proc{Name: name, Log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.Log)
	if err != nil {
		return nil, err
	}
	p.Cmd = exec.Command(bin, args...) // #nosec G204 -- a program the caller names, with its own arguments
	p.Cmd.Env = env
	p.Cmd.Stdout, p.Cmd.Stderr = f, f
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.Cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = p.Cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process: SIGTERM, then SIGKILL after 10 seconds.
func (p *Proc) Stop() {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// StartRedis runs a private redis-server without persistence on a free
// loopback port.
func StartRedis(dir string) (addr string, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, errors.New("redis-server is not on PATH (make deps, or apt-get install redis-server)")
	}
	addr = FreeAddr()
	_, port, _ := net.SplitHostPort(addr)
	p, err := Start(dir, "redis", bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err != nil {
		return "", nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) || p.Exited() {
			p.Stop()
			return "", nil, fmt.Errorf("redis-server on %s did not answer (log %s)", addr, p.Log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return addr, p.Stop, nil
}

// FreeAddr is a free loopback address.
func FreeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// WaitHTTP waits until url answers 200.
func WaitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer 200 within %s: %v", url, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stats reads a process's resident memory, open descriptors and, of
// those, sockets.
func Stats(pid int) (rss, fds, sockets int64) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
				rss = kb << 10
			}
		}
	}
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return rss, 0, 0
	}
	for _, e := range ents {
		fds++
		if target, err := os.Readlink(filepath.Join(fdDir, e.Name())); err == nil && strings.HasPrefix(target, "socket:") {
			sockets++
		}
	}
	return rss, fds, sockets
}

// Scrape reads the unlabelled (or summed) values of a /metrics page.
func Scrape(url string) map[string]float64 {
	out := map[string]float64{}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(f[0], "{")
		v, err := strconv.ParseFloat(f[1], 64)
		if err == nil {
			out[name] += v
		}
	}
	return out
}

// Prepare finds the manager binary at managerPath (its absolute path, or
// an error that says how to build it) and makes a directory for a run's
// logs and data. cleanup removes the directory, unless keep: then where
// it is was logged and it stays.
func Prepare(managerPath, prefix string, keep bool) (manager, dir string, cleanup func(), err error) {
	if manager, err = filepath.Abs(managerPath); err != nil {
		return "", "", nil, err
	}
	if _, err := os.Stat(manager); err != nil {
		return "", "", nil, fmt.Errorf("the manager binary: %w (make build)", err)
	}
	if dir, err = os.MkdirTemp("", prefix); err != nil {
		return "", "", nil, err
	}
	if keep {
		log.Printf("logs and data in %s", dir)
		return manager, dir, func() {}, nil
	}
	return manager, dir, func() { _ = os.RemoveAll(dir) }, nil
}

// clockTicks is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100
// on every Linux architecture Go supports).
const clockTicks = 100

// CPU is the processor time (user and system) a process has used so far;
// 0 when it cannot be read.
func CPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields after its closing one are space-separated, utime and
	// stime being the 14th and 15th of the line.
	_, rest, ok := strings.Cut(string(b), ") ")
	if !ok {
		return 0
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// Children lists the pids of this program's child processes whose command
// name is name (as /proc/<pid>/comm has it), such as the kube-apiserver and
// etcd that envtest starts.
func Children(name string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		head, rest, ok := strings.Cut(string(b), ") ")
		_, comm, _ := strings.Cut(head, "(")
		f := strings.Fields(rest)
		if !ok || comm != name || len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == self {
			out = append(out, pid)
		}
	}
	return out
}
