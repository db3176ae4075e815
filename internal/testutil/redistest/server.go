// Package redistest starts real redis-server processes for tests: a single
// server on a free loopback port, a Cluster of several masters (with
// replicas if asked), or a master with a replica watched by three
// Sentinels, each in the test's temporary directory and stopped when the
// test ends. It also offers the faults later tests need: kill, restart on
// the same port, freeze and thaw of any node, and a proxy that counts the
// commands reaching a server and can lose a reply.
package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartTimeout bounds how long a server may take to answer PING.
const StartTimeout = 15 * time.Second

// Server is one redis-server process owned by a test.
type Server struct {
	t    testing.TB
	dir  string
	port int
	args []string
	// conf, when set, is a config file in dir given to redis-server as its
	// first argument (Sentinel requires one it can rewrite); sentinel
	// starts the process in Sentinel mode.
	conf     string
	sentinel bool
	// username and password, when set, are what the test's own clients
	// (PING at start, Client) authenticate with.
	username, password string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	client *redis.Client
}

// Option configures Start.
type Option func(*config)

type config struct {
	args []string
	// busPort: the port + 10000 must also be free (Cluster bus).
	busPort bool
	// conf is the text of a config file written into the server's
	// directory and passed first; "{port}" in it is replaced by the port.
	conf string
	// sentinel runs redis-server --sentinel.
	sentinel bool
	// username and password: an ACL user the data nodes require (the
	// default user is off); see WithUser.
	username, password string
	// sentinelPassword is the Sentinels' requirepass (StartSentinel only).
	sentinelPassword string
}

// WithUser makes the server require ACL user name with password (all
// commands, keys and channels) and turns the default user off, so every
// client must authenticate as that user. With StartSentinel the replicas
// and the Sentinels authenticate as that user too.
func WithUser(name, password string) Option {
	return func(c *config) { c.username, c.password = name, password }
}

// WithSentinelPassword gives StartSentinel's Sentinels a requirepass of
// their own; it does not apply to the data nodes.
func WithSentinelPassword(password string) Option {
	return func(c *config) { c.sentinelPassword = password }
}

// WithArgs adds redis-server command-line arguments, e.g.
// WithArgs("--maxmemory", "10mb").
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// ServerBinary returns the path of redis-server, or fails t with a message
// that says how to install it.
func ServerBinary(t testing.TB) string {
	t.Helper()
	return lookPath(t, "redis-server")
}

func lookPath(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not on PATH: run `make test` (it installs the test packages) or `apt-get install redis-server`", name)
	}
	return path
}

// Start runs a redis-server on a free loopback port with persistence off,
// waits until it answers PING, and stops it when t ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var c config
	for _, o := range opts {
		o(&c)
	}
	return start(t, c)
}

func start(t testing.TB, c config) *Server {
	t.Helper()
	ServerBinary(t)
	dir := t.TempDir()
	var lastErr error
	for range 8 {
		port, err := freePort(c.busPort)
		if err != nil {
			lastErr = err
			continue
		}
		s := &Server{t: t, dir: dir, port: port, args: c.args, sentinel: c.sentinel, username: c.username, password: c.password}
		if c.username != "" {
			s.args = append(slices.Clone(c.args), "--user", "default", "off",
				"--user", c.username, "on", ">"+c.password, "~*", "&*", "+@all")
		}
		if c.conf != "" {
			s.conf = filepath.Join(dir, "redis.conf")
			text := strings.ReplaceAll(c.conf, "{port}", strconv.Itoa(port))
			if err := os.WriteFile(s.conf, []byte(text), 0o644); err != nil {
				t.Fatalf("redistest: write config: %v", err)
			}
		}
		if err := s.launch(); err != nil {
			lastErr = err // most likely the port was taken meanwhile
			continue
		}
		t.Cleanup(s.cleanup)
		return s
	}
	t.Fatalf("redistest: could not start redis-server: %v", lastErr)
	return nil
}

// freePort picks a random port in 20000..44999 that can be bound on
// 127.0.0.1 (and port+10000 too when bus is set). Never 6379.
func freePort(bus bool) (int, error) {
	for range 50 {
		port := 20000 + rand.IntN(25000)
		if !canBind(port) || (bus && !canBind(port+10000)) {
			continue
		}
		return port, nil
	}
	return 0, errors.New("no free loopback port found")
}

func canBind(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// launch starts the process and waits until it answers PING.
func (s *Server) launch() error {
	var args []string
	if s.conf != "" {
		args = append(args, s.conf)
	}
	if s.sentinel {
		args = append(args, "--sentinel")
	}
	args = append(args,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--daemonize", "no", "--logfile", "")
	args = append(args, s.args...)
	log, err := os.OpenFile(filepath.Join(s.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	cmd := exec.Command("redis-server", args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = log.Close()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	if err := s.waitReady(exited); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("%w\n%s", err, s.logTail())
	}
	return nil
}

func (s *Server) waitReady(exited <-chan struct{}) error {
	return waitPingAs(&redis.Options{Addr: s.Addr(), Username: s.username, Password: s.password}, exited)
}

// waitPing waits until the server at addr answers PING (over TLS when
// tlsCfg is set), failing if exited closes first or StartTimeout passes.
func waitPing(addr string, tlsCfg *tls.Config, exited <-chan struct{}) error {
	return waitPingAs(&redis.Options{Addr: addr, TLSConfig: tlsCfg}, exited)
}

// waitPingAs is waitPing with o's address, TLS and credentials.
func waitPingAs(o *redis.Options, exited <-chan struct{}) error {
	addr, tlsCfg := o.Addr, o.TLSConfig
	o.MaxRetries, o.DialTimeout, o.DisableIdentity, o.Protocol = -1, time.Second, true, 2
	c := redis.NewClient(o)
	defer c.Close()
	over := ""
	if tlsCfg != nil {
		over = " over TLS"
	}
	deadline := time.Now().Add(StartTimeout)
	for {
		select {
		case <-exited:
			return errors.New("redis-server exited during start")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer PING%s within %s: %w", addr, over, StartTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "redis.log:\n" + strings.Join(lines, "\n")
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port is the server's TCP port.
func (s *Server) Port() int { return s.port }

// Dir is the server's working directory (its log is redis.log there).
func (s *Server) Dir() string { return s.dir }

// Client returns a client for the server, created on first use and closed
// when the test ends. It is for the test's own commands (setup and
// assertions), with go-redis defaults.
func (s *Server) Client() *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		s.client = redis.NewClient(&redis.Options{Addr: s.Addr(), Username: s.username, Password: s.password, DisableIdentity: true})
	}
	return s.client
}

// signal sends sig to the running process; it fails the test if none runs.
func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		s.t.Fatalf("redistest: %s: server is not running", sig)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: %s: %v", sig, err)
	}
}

// waitExit waits for the process to end and forgets it.
func (s *Server) waitExit(timeout time.Duration) bool {
	s.mu.Lock()
	exited := s.exited
	s.mu.Unlock()
	if exited == nil {
		return true
	}
	select {
	case <-exited:
	case <-time.After(timeout):
		return false
	}
	s.mu.Lock()
	s.cmd, s.exited = nil, nil
	s.mu.Unlock()
	return true
}

// Kill ends the server at once (SIGKILL), losing all data, and waits for
// the process to exit.
func (s *Server) Kill() {
	s.t.Helper()
	s.signal(syscall.SIGKILL)
	if !s.waitExit(10 * time.Second) {
		s.t.Fatal("redistest: redis-server survived SIGKILL")
	}
}

// Stop shuts the server down gracefully (SIGTERM) and waits for it.
func (s *Server) Stop() {
	s.t.Helper()
	s.signal(syscall.SIGTERM)
	if !s.waitExit(10 * time.Second) {
		s.t.Fatal("redistest: redis-server did not stop on SIGTERM")
	}
}

// Restart kills the server if it runs and starts it again on the same
// port with the same arguments (and an empty dataset: persistence is off).
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		s.Kill()
	}
	var err error
	for range 50 { // the port can linger briefly after a kill
		if err = s.launch(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart on port %d: %v", s.port, err)
}

// Freeze suspends the server (SIGSTOP): connections stay open, nothing
// answers. Thaw resumes it.
func (s *Server) Freeze() { s.t.Helper(); s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (s *Server) Thaw() { s.t.Helper(); s.signal(syscall.SIGCONT) }

func (s *Server) cleanup() {
	s.mu.Lock()
	client, cmd := s.client, s.cmd
	s.client = nil
	s.mu.Unlock()
	if client != nil {
		_ = client.Close()
	}
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a frozen process must run to die cleanly
		_ = cmd.Process.Kill()
		s.waitExit(10 * time.Second)
	}
}

// Running reports whether the process runs (it may be frozen).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Info returns the fields of INFO section (all sections when empty) as a
// map, e.g. Info(ctx, "memory")["used_memory"].
func (s *Server) Info(ctx context.Context, section string) (map[string]string, error) {
	var cmd *redis.StringCmd
	if section == "" {
		cmd = s.Client().Info(ctx)
	} else {
		cmd = s.Client().Info(ctx, section)
	}
	text, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	return ParseInfo(text), nil
}

// ParseInfo splits the text of an INFO reply into its fields.
func ParseInfo(text string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}
