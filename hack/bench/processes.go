package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// processes are the programs a run starts, each logging into dir.
type processes struct {
	dir   string
	procs []*exec.Cmd
}

func (ps *processes) start(name string, args ...string) (*exec.Cmd, error) {
	return ps.startEnv(nil, name, args...)
}

// startEnv starts name with exactly env as its environment (nil: this
// process's).
func (ps *processes) startEnv(env []string, name string, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = env
	log, err := os.Create(filepath.Join(ps.dir, filepath.Base(name)+"-"+strconv.Itoa(len(ps.procs))+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ps.procs = append(ps.procs, cmd)
	return cmd, nil
}

func (ps *processes) kill() {
	for _, p := range ps.procs {
		_ = p.Process.Kill()
		_, _ = p.Process.Wait()
	}
}

// startRedis starts a redis-server without persistence on a free port.
func (ps *processes) startRedis() (addr string, pid int, err error) {
	addr = freeAddr()
	redisDir := filepath.Join(ps.dir, "redis")
	_ = os.MkdirAll(redisDir, 0o755)
	_, port, _ := net.SplitHostPort(addr)
	cmd, err := ps.start("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", redisDir)
	if err != nil {
		return "", 0, err
	}
	return addr, cmd.Process.Pid, nil
}

// startServers starts each configuration's server (a comparison server,
// this program's own subcommand, or `manager local` with the
// configuration's policies) and waits until each answers.
func (ps *processes) startServers(configs []*config, manager, redisAddr string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for i, c := range configs {
		addr := freeAddr()
		c.url = "http://" + addr + c.path
		var cmd *exec.Cmd
		switch c.serve {
		case "serve-naive":
			cmd, err = ps.start(self, c.serve, "--listen", addr, "--redis", redisAddr)
		case "":
			pdir := filepath.Join(ps.dir, "policies"+strconv.Itoa(i))
			_ = os.MkdirAll(pdir, 0o755)
			if err := os.WriteFile(filepath.Join(pdir, "policy.yaml"), []byte(c.policies), 0o644); err != nil {
				return err
			}
			c.policiesDir, c.pprof = pdir, freeAddr()
			args := []string{"local", "--policies", pdir, "--listen", addr, "--pprof-listen", c.pprof}
			if c.memoryStore {
				args = append(args, "--memory-max-keys", "0")
			} else {
				args = append(args, "--redis-url", fmt.Sprintf("redis://%s/%d", redisAddr, c.redisDB))
			}
			cmd, err = ps.startEnv(append(os.Environ(), c.env...), manager, args...)
		default:
			cmd, err = ps.start(self, c.serve, "--listen", addr)
		}
		if err != nil {
			return fmt.Errorf("start %s: %w", c.name, err)
		}
		c.pid = cmd.Process.Pid
		if err := waitFor(func() error { return probe("http://" + addr + "/healthz") }); err != nil {
			return fmt.Errorf("%s did not start: %w (logs in %s)", c.name, err, ps.dir)
		}
	}
	return nil
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func probe(url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d", url, resp.StatusCode)
	}
	return nil
}

func waitFor(f func() error) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
