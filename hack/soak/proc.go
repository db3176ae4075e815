package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// proc is one manager process.
type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func startProc(dir, name, bin string, args ...string) (*proc, error) {
	p := &proc{name: name, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, args...) // #nosec G204 -- the manager binary with the soak's own arguments
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// startRedis runs a private redis-server on a free loopback port.
func startRedis(dir string) (addr string, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, errors.New("redis-server is not on PATH (make deps, or apt-get install redis-server)")
	}
	addr = freeAddr()
	_, port, _ := net.SplitHostPort(addr)
	p, err := startProc(dir, "redis", bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err != nil {
		return "", nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) || p.exited() {
			p.stop()
			return "", nil, fmt.Errorf("redis-server on %s did not answer (log %s)", addr, p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return addr, p.stop, nil
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitHTTP(ctx context.Context, url string, timeout time.Duration) error {
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

// waitReady waits until the policy is Ready at a generation above after.
func waitReady(ctx context.Context, k client.Client, name string, after int64, timeout time.Duration) (int64, error) {
	deadline := time.Now().Add(timeout)
	for {
		var p ratelimitv1alpha1.RateLimitPolicy
		err := k.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &p)
		if err == nil && p.Generation > after && p.Status.ObservedGeneration == p.Generation &&
			apimeta.IsStatusConditionTrue(p.Status.Conditions, ratelimitv1alpha1.ConditionReady) {
			return p.Generation, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("policy %s not Ready within %s (err %v, status %+v)", name, timeout, err, p.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
