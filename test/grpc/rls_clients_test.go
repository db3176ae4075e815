package grpctest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
)

// The rate limit service (envoy.service.ratelimit.v3) through clients that
// are not Sluice's: grpcurl, which knows the service only from the
// server's reflection, and envoyproxy/ratelimit's own client_cmd, both
// built at pinned versions into bin/ by hack/install-bench-tools.sh.

// rlsPolicy allows 2 requests a minute per remote_address, for the domain
// edge bound to its namespace.
const rlsPolicy = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: per-client
  namespace: shop
spec:
  match:
    domain: edge
    descriptor:
    - key: remote_address
  key: "{descriptor:remote_address}"
  limits:
  - name: minute
    fixedWindow: {limit: 2, window: 1m}
`

const shouldRateLimit = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// startRLS serves rlsPolicy, with the domain edge bound to its namespace,
// and returns the gRPC address.
func startRLS(t *testing.T) string {
	t.Helper()
	_, addr := manager.StartLocal(t, nil, rlsPolicy, "--rls-domain", "edge=shop")
	return addr
}

// benchTool returns bin/<name>, running hack/install-bench-tools.sh first
// when it is missing (a `go install` of the pinned version).
func benchTool(t *testing.T, name string) string {
	t.Helper()
	root := kubetest.RepoRoot(t)
	path := filepath.Join(root, "bin", name)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		script := filepath.Join(root, "hack", "install-bench-tools.sh")
		t.Logf("%s is missing: running %s", path, script)
		if out, err := exec.Command("bash", script).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s: %v (hack/install-bench-tools.sh installs it)", path, err)
	}
	return path
}

// rlsJSON is what grpcurl prints of a RateLimitResponse (-emit-defaults),
// or of an error status (-format-error).
type rlsJSON struct {
	OverallCode string `json:"overallCode"`
	Statuses    []struct {
		Code         string `json:"code"`
		CurrentLimit *struct {
			Name            string `json:"name"`
			RequestsPerUnit int    `json:"requestsPerUnit"`
			Unit            string `json:"unit"`
		} `json:"currentLimit"`
		LimitRemaining     int    `json:"limitRemaining"`
		DurationUntilReset string `json:"durationUntilReset"`
	} `json:"statuses"`
	ResponseHeadersToAdd []struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	} `json:"responseHeadersToAdd"`
	// Code and Message: an error status.
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (r rlsJSON) header(name string) string {
	for _, h := range r.ResponseHeadersToAdd {
		if strings.EqualFold(h.Key, name) {
			return h.Value
		}
	}
	return ""
}

// TestRLSWithGrpcurl calls ShouldRateLimit with grpcurl, which finds the
// service, its messages and their JSON names through server reflection
// alone.
func TestRLSWithGrpcurl(t *testing.T) {
	grpcurl := benchTool(t, "grpcurl")
	addr := startRLS(t)
	// run returns grpcurl's output and exit code: 64 + the status code
	// for an error status, which -format-error prints to stderr as JSON.
	run := func(t *testing.T, args ...string) (stdout, stderr string, exit int) {
		t.Helper()
		cmd := exec.Command(grpcurl, append([]string{"-plaintext", "-max-time", "10"}, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			exit = ee.ExitCode()
		case err != nil:
			t.Fatalf("grpcurl %v: %v", args, err)
		}
		return out.String(), errOut.String(), exit
	}
	// call sends one request (JSON) and returns the answer, or the error
	// status, and the exit code.
	call := func(t *testing.T, request string) (rlsJSON, int) {
		t.Helper()
		stdout, stderr, exit := run(t, "-emit-defaults", "-format-error", "-d", request, addr, shouldRateLimit)
		text := stdout
		if exit != 0 {
			text = stderr
		}
		var r rlsJSON
		if err := json.Unmarshal([]byte(text), &r); err != nil {
			t.Fatalf("grpcurl -d %s: exit %d, %v\n%s%s", request, exit, err, stdout, stderr)
		}
		return r, exit
	}
	ip := func(addr string) string {
		return fmt.Sprintf(`{"entries": [{"key": "remote_address", "value": %q}]}`, addr)
	}

	t.Run("reflection", func(t *testing.T) {
		out, errOut, exit := run(t, addr, "list")
		if exit != 0 || !strings.Contains(out, "envoy.service.ratelimit.v3.RateLimitService\n") {
			t.Fatalf("grpcurl list: exit %d\n%s%s", exit, out, errOut)
		}
		out, errOut, exit = run(t, addr, "describe", "envoy.service.ratelimit.v3.RateLimitService")
		if exit != 0 || !strings.Contains(out, "rpc ShouldRateLimit ( .envoy.service.ratelimit.v3.RateLimitRequest ) returns ( .envoy.service.ratelimit.v3.RateLimitResponse )") {
			t.Fatalf("grpcurl describe: exit %d\n%s%s", exit, out, errOut)
		}
	})

	t.Run("a bucket per remote_address", func(t *testing.T) {
		var got []string
		var last rlsJSON
		for range 3 {
			r, exit := call(t, `{"domain": "edge", "descriptors": [`+ip("10.0.0.1")+`]}`)
			if exit != 0 || len(r.Statuses) != 1 {
				t.Fatalf("exit %d, answer %+v", exit, r)
			}
			s := r.Statuses[0]
			if l := s.CurrentLimit; l == nil || l.Name != "per-client/minute" || l.RequestsPerUnit != 2 || l.Unit != "MINUTE" {
				t.Errorf("currentLimit %+v, want per-client/minute, 2 a MINUTE", l)
			}
			got = append(got, fmt.Sprintf("%s/%s r=%d", r.OverallCode, s.Code, s.LimitRemaining))
			last = r
		}
		t.Logf("10.0.0.1 three times: %v; the denial's headers: %+v", got, last.ResponseHeadersToAdd)
		if want := "OK/OK r=1 OK/OK r=0 OVER_LIMIT/OVER_LIMIT r=0"; strings.Join(got, " ") != want {
			t.Errorf("answers %v, want %s", got, want)
		}
		if ra := last.header("Retry-After"); ra == "" || last.header("RateLimit") == "" {
			t.Errorf("the denial's response_headers_to_add lack Retry-After or RateLimit: %+v", last.ResponseHeadersToAdd)
		}
		if r, _ := call(t, `{"domain": "edge", "descriptors": [`+ip("10.0.0.2")+`]}`); r.OverallCode != "OK" || r.Statuses[0].LimitRemaining != 1 {
			t.Errorf("10.0.0.2, its own bucket: %+v, want OK with 1 left", r)
		}
	})

	// hits_addend: the request's applies to every descriptor; a
	// descriptor's own (a wrapper, so 0 is a value: check without
	// counting) applies instead.
	t.Run("hits_addend", func(t *testing.T) {
		var got []string
		for _, req := range []string{
			`{"domain": "edge", "hitsAddend": 2, "descriptors": [` + ip("10.0.0.3") + `]}`,
			`{"domain": "edge", "hitsAddend": 5, "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.3"}], "hitsAddend": "0"}]}`,
			`{"domain": "edge", "descriptors": [` + ip("10.0.0.3") + `]}`,
		} {
			r, _ := call(t, req)
			got = append(got, fmt.Sprintf("%s r=%d", r.OverallCode, r.Statuses[0].LimitRemaining))
		}
		t.Logf("10.0.0.3 with hits 2, then descriptor hits 0 (request 5), then 1: %v", got)
		if want := "OK r=0 OK r=0 OVER_LIMIT r=0"; strings.Join(got, " ") != want {
			t.Errorf("answers %v, want %s", got, want)
		}
	})

	t.Run("a domain bound to no namespace: OK, no limit", func(t *testing.T) {
		r, exit := call(t, `{"domain": "elsewhere", "descriptors": [`+ip("10.0.0.1")+`]}`)
		if exit != 0 || r.OverallCode != "OK" || len(r.Statuses) != 1 || r.Statuses[0].Code != "OK" || r.Statuses[0].CurrentLimit != nil {
			t.Errorf("exit %d, answer %+v; want OK and one OK status without a limit", exit, r)
		}
	})

	t.Run("INVALID_ARGUMENT", func(t *testing.T) {
		for name, req := range map[string]string{
			"empty domain":   `{"domain": "", "descriptors": [` + ip("10.0.0.1") + `]}`,
			"no descriptors": `{"domain": "edge"}`,
		} {
			r, exit := call(t, req)
			t.Logf("%s: exit %d, %s", name, exit, r.Message)
			if exit != 64+3 || r.Code != 3 {
				t.Errorf("%s: exit %d, code %d; want InvalidArgument (3), exit 67", name, exit, r.Code)
			}
		}
	})
}

// TestRLSWithClientCmd asks with envoyproxy/ratelimit's client_cmd, the
// reference service's own client (hits_addend 1, one descriptor per
// -descriptors flag), and reads its answer as the text it prints.
func TestRLSWithClientCmd(t *testing.T) {
	clientCmd := benchTool(t, "client_cmd")
	addr := startRLS(t)
	ask := func(t *testing.T, descriptors ...string) *ratelimitv3.RateLimitResponse {
		t.Helper()
		args := []string{"-dial_string", addr, "-domain", "edge"}
		for _, d := range descriptors {
			args = append(args, "-descriptors", d)
		}
		out, err := exec.Command(clientCmd, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("client_cmd %v: %v\n%s", args, err, out)
		}
		_, text, ok := strings.Cut(string(out), "response: ")
		if !ok {
			t.Fatalf("client_cmd printed no response:\n%s", out)
		}
		var r ratelimitv3.RateLimitResponse
		if err := prototext.Unmarshal([]byte(text), &r); err != nil {
			t.Fatalf("client_cmd's response %q: %v", text, err)
		}
		return &r
	}
	summary := func(t *testing.T, r *ratelimitv3.RateLimitResponse) string {
		t.Helper()
		parts := []string{r.GetOverallCode().String()}
		for _, s := range r.GetStatuses() {
			parts = append(parts, fmt.Sprintf("%s r=%d", s.GetCode(), s.GetLimitRemaining()))
		}
		return strings.Join(parts, " ")
	}

	t.Run("a bucket per remote_address", func(t *testing.T) {
		var got []string
		for range 3 {
			got = append(got, summary(t, ask(t, "remote_address=10.1.0.1")))
		}
		t.Logf("10.1.0.1 three times: %q", got)
		if want := []string{"OK OK r=1", "OK OK r=0", "OVER_LIMIT OVER_LIMIT r=0"}; strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("answers %q, want %q", got, want)
		}
	})

	// Two descriptors in one request are decided together: the spent one
	// denies the request, and the fresh one is not counted either (its
	// status says so: 2 left).
	t.Run("descriptors decided together", func(t *testing.T) {
		ask(t, "remote_address=10.1.0.3")
		ask(t, "remote_address=10.1.0.3")
		both := summary(t, ask(t, "remote_address=10.1.0.2", "remote_address=10.1.0.3"))
		alone := summary(t, ask(t, "remote_address=10.1.0.2"))
		t.Logf("10.1.0.2 with 10.1.0.3 (spent): %s; then 10.1.0.2 alone: %s", both, alone)
		if want := "OVER_LIMIT OK r=2 OVER_LIMIT r=0"; both != want {
			t.Errorf("both descriptors: %s, want %s", both, want)
		}
		if want := "OK OK r=1"; alone != want {
			t.Errorf("10.1.0.2 alone after the denied request: %s, want %s (the denied request counted nothing)", alone, want)
		}
	})

	// 10.1.0.1's denial above is remembered until its retry time, and a
	// request with it is denied without Redis. The cache answers without
	// asking the store, so the other descriptor has no figures to report:
	// it carries none, rather than a remaining 0 that Envoy would turn
	// into a header.
	t.Run("a remembered denial: the other descriptors carry no figures", func(t *testing.T) {
		r := ask(t, "remote_address=10.1.0.4", "remote_address=10.1.0.1")
		t.Logf("10.1.0.4 with 10.1.0.1 (denied before): %v", r)
		if r.GetOverallCode() != ratelimitv3.RateLimitResponse_OVER_LIMIT || len(r.GetStatuses()) != 2 {
			t.Fatalf("overall %v, %d statuses; want OVER_LIMIT, 2", r.GetOverallCode(), len(r.GetStatuses()))
		}
		if st := r.GetStatuses()[0]; st.GetCode() != ratelimitv3.RateLimitResponse_OK || st.GetCurrentLimit() != nil || st.GetLimitRemaining() != 0 {
			t.Errorf("10.1.0.4's status: %v, want OK without figures", st)
		}
		if l := r.GetStatuses()[1].GetCurrentLimit(); l.GetName() != "per-client/minute" || l.GetRequestsPerUnit() != 2 {
			t.Errorf("10.1.0.1's status: current_limit %v, want per-client/minute, 2 a MINUTE", l)
		}
	})
}
