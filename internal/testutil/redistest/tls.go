package redistest

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TLSFiles are the PEM files of a TLS redis-server.
type TLSFiles struct {
	// Cert and Key are the server's certificate (with 127.0.0.1 among its
	// IP addresses) and private key.
	Cert, Key string
	// CA verifies the server's certificate (and would verify clients';
	// StartTLS does not ask clients for one).
	CA string
}

// TLSServer is a redis-server that speaks TLS only: no plain TCP port.
type TLSServer struct {
	t     testing.TB
	dir   string
	port  int
	files TLSFiles

	cmd    *exec.Cmd
	exited chan struct{}

	mu     sync.Mutex
	client *redis.Client
}

// StartTLS runs a redis-server with `--port 0 --tls-port <free port>` on
// loopback, the given certificate, key and CA, and `--tls-auth-clients no`
// (clients present no certificate), persistence off; waits until it answers
// PING over TLS, and stops it when t ends. opts add arguments (WithArgs).
func StartTLS(t testing.TB, files TLSFiles, opts ...Option) *TLSServer {
	t.Helper()
	ServerBinary(t)
	var c config
	for _, o := range opts {
		o(&c)
	}
	dir := t.TempDir()
	var lastErr error
	for range 8 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		s := &TLSServer{t: t, dir: dir, port: port, files: files}
		if lastErr = s.launch(c.args); lastErr == nil {
			t.Cleanup(s.cleanup)
			return s
		}
	}
	t.Fatalf("redistest: could not start a TLS redis-server: %v", lastErr)
	return nil
}

func (s *TLSServer) launch(extra []string) error {
	args := append([]string{
		"--port", "0", "--tls-port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--tls-cert-file", s.files.Cert, "--tls-key-file", s.files.Key, "--tls-ca-cert-file", s.files.CA,
		"--tls-auth-clients", "no",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--daemonize", "no", "--logfile", "",
	}, extra...)
	logPath := filepath.Join(s.dir, "redis.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	cmd := exec.Command("redis-server", args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
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
	s.cmd, s.exited = cmd, exited
	if err := s.waitReady(); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		b, _ := os.ReadFile(logPath)
		return fmt.Errorf("%w\nredis.log:\n%s", err, strings.TrimSpace(string(b)))
	}
	return nil
}

func (s *TLSServer) waitReady() error {
	cfg, err := s.TLSConfig()
	if err != nil {
		return err
	}
	return waitPing(s.Addr(), cfg, s.exited)
}

// TLSConfig verifies the server with the CA of its files.
func (s *TLSServer) TLSConfig() (*tls.Config, error) {
	pem, err := os.ReadFile(s.files.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", s.files.CA)
	}
	return &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}, nil
}

// Addr is host:port of the TLS port.
func (s *TLSServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Dir is the server's working directory (its log is redis.log there).
func (s *TLSServer) Dir() string { return s.dir }

// Client returns a client over TLS as the default user, created on first
// use and closed when the test ends, for the test's own commands.
func (s *TLSServer) Client() *redis.Client {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		cfg, err := s.TLSConfig()
		if err != nil {
			s.t.Fatal(err)
		}
		s.client = redis.NewClient(&redis.Options{Addr: s.Addr(), TLSConfig: cfg, DisableIdentity: true})
	}
	return s.client
}

func (s *TLSServer) cleanup() {
	s.mu.Lock()
	if s.client != nil {
		_ = s.client.Close()
	}
	s.mu.Unlock()
	_ = s.cmd.Process.Kill()
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
	}
}
