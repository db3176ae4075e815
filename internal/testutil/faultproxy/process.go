package faultproxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Link is a faulty link a test controls: a Proxy in the test's process,
// or a Remote one in a process of its own.
type Link interface {
	Addr() string
	Set(f Fault)
	Heal()
	Open() int
	Accepted() int
	Events() []Event
}

var (
	_ Link = (*Proxy)(nil)
	_ Link = (*Remote)(nil)
)

// helperEnv names the target of a helper process (see HelperProcess).
const helperEnv = "SLUICE_FAULTPROXY_TARGET"

// HelperProcess runs the proxy of StartProcess when the process was
// started as one, and returns at once otherwise. Call it from a test
// function of the package that calls StartProcess (the test binary starts
// itself with -test.run naming that function): it never returns in the
// helper, which serves until its standard input closes.
func HelperProcess() {
	target := os.Getenv(helperEnv)
	if target == "" {
		return
	}
	p, err := Listen(target)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faultproxy:", err)
		os.Exit(1)
	}
	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "faultproxy: control:", err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: p.controlHandler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ctl) }()
	fmt.Printf("faultproxy %s %s\n", p.Addr(), ctl.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin) // the parent went away, or Close
	p.Close()
	os.Exit(0)
}

// controlHandler serves PUT /fault (a JSON Fault) and GET /state.
func (p *Proxy) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /fault", func(w http.ResponseWriter, r *http.Request) {
		var f Fault
		if err := json.NewDecoder(r.Body).Decode(&f); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p.Set(f)
	})
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(remoteState{Open: p.Open(), Accepted: p.Accepted(), Events: p.Events()})
	})
	return mux
}

type remoteState struct {
	Open, Accepted int
	Events         []Event
}

// Remote is a proxy running in a helper process, so that its goroutines
// get CPU as a network would, whatever load the test puts on its own
// process.
type Remote struct {
	t       testing.TB
	addr    string
	control string
	client  *http.Client
}

// StartProcess starts the test binary again as a proxy to target and
// stops it when t ends. run names the test function that calls
// HelperProcess, e.g. "TestFaultProxyHelperProcess".
func StartProcess(t testing.TB, target, run string) *Remote {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1") // #nosec G204 -- the test binary itself
	cmd.Env = append(os.Environ(), helperEnv+"="+target)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("faultproxy: start the helper process: %v", err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "faultproxy ") {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	var line string
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("faultproxy: the helper process ended before it listened (is %s calling HelperProcess?): %s", run, stderr.String())
		}
		line = l
	case <-time.After(30 * time.Second):
		t.Fatalf("faultproxy: the helper process did not listen within 30s: %s", stderr.String())
	}
	f := strings.Fields(line)
	return &Remote{t: t, addr: f[1], control: "http://" + f[2], client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
}

// Addr is the proxy's host:port.
func (r *Remote) Addr() string { return r.addr }

// Set changes the fault (see Proxy.Set); it returns once the proxy applies it.
func (r *Remote) Set(f Fault) {
	r.t.Helper()
	b, err := json.Marshal(f)
	if err != nil {
		r.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPut, r.control+"/fault", bytes.NewReader(b))
	if err != nil {
		r.t.Fatal(err)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		r.t.Fatalf("faultproxy: set %+v: %v", f, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		r.t.Fatalf("faultproxy: set %+v: %s", f, resp.Status)
	}
}

// Heal ends every fault.
func (r *Remote) Heal() { r.Set(Fault{}) }

func (r *Remote) state() remoteState {
	r.t.Helper()
	resp, err := r.client.Get(r.control + "/state")
	if err != nil {
		r.t.Fatalf("faultproxy: state: %v", err)
	}
	defer resp.Body.Close()
	var s remoteState
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		r.t.Fatalf("faultproxy: state: %v", err)
	}
	return s
}

// Open counts the client connections open now.
func (r *Remote) Open() int { return r.state().Open }

// Accepted counts the client connections accepted so far.
func (r *Remote) Accepted() int { return r.state().Accepted }

// Events returns what clients did so far, in order.
func (r *Remote) Events() []Event { return r.state().Events }
