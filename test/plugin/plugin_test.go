// Package plugin runs the built kubectl plugin, kubectl-sluice, against the
// built `manager local --admin-listen` (each command the admin API serves,
// its tables, JSON and YAML, and its exit codes), and through a real API
// server with client certificates and tokens.
package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/internal/adminapi"
	"github.com/sluice-dev/sluice/internal/sluicectl"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

var manager systest.Manager

func TestMain(m *testing.M) { manager.RunTests(m, "plugin") }

// policy limits each X-Client value to 3 requests a minute, and bans it for
// 5 minutes after 2 denials.
const policy = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: per-client
  namespace: shop
spec:
  key: "{header:X-Client}"
  limits:
  - name: per-minute
    fixedWindow: {limit: 3, window: 1m}
  - name: per-hour
    fixedWindow: {limit: 100, window: 1h}
  penalty: {denials: 2, within: 1m, ban: 5m, maxBan: 1h}
`

// sluice runs the plugin against local mode's admin listener, or with the
// kubeconfig its arguments give when server is empty.
type sluice struct {
	bin, server string
}

// run runs the plugin with args and returns its outputs and exit code.
func (s sluice) run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	if s.server != "" {
		args = append(args, "--server", s.server)
	}
	stdout, stderr, err := systest.Run("", nil, 30*time.Second, s.bin, args...)
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("kubectl-sluice %s: %v", strings.Join(args, " "), err)
	}
	return stdout, stderr, code
}

// ok runs the plugin, fails t unless it exits 0, and returns its output.
func (s sluice) ok(t *testing.T, args ...string) string {
	t.Helper()
	stdout, stderr, code := s.run(t, args...)
	if code != sluicectl.ExitOK {
		t.Fatalf("kubectl-sluice %s: exit code %d\n%s", strings.Join(args, " "), code, stderr)
	}
	return stdout
}

// json runs the plugin with -o json and decodes its answer into v.
func (s sluice) json(t *testing.T, v any, args ...string) {
	t.Helper()
	out := s.ok(t, append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("kubectl-sluice %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// fails runs the plugin, wanting exit code want and a message saying msg.
func (s sluice) fails(t *testing.T, want int, msg string, args ...string) {
	t.Helper()
	stdout, stderr, code := s.run(t, args...)
	if code != want || !strings.Contains(stderr, msg) {
		t.Errorf("kubectl-sluice %s: exit code %d, stderr:\n%s\nwant exit code %d saying %q", strings.Join(args, " "), code, stderr, want, msg)
	}
	if stdout != "" {
		t.Errorf("kubectl-sluice %s: printed %q, want nothing", strings.Join(args, " "), stdout)
	}
}

// start runs local mode with policy and its admin listener, and returns the
// plugin pointed at it and a client of its check endpoint.
func start(t *testing.T) (sluice, *systest.CheckClient, map[string]bool) {
	t.Helper()
	admin := fmt.Sprintf("127.0.0.1:%d", systest.FreePort(t))
	httpAddr, _ := manager.StartLocal(t, nil, policy, "--admin-listen", admin)
	server := "http://" + admin
	served := discovery(t, server)
	return sluice{bin: manager.Plugin(t), server: server}, systest.NewCheckClient(httpAddr, "shop"), served
}

// discovery waits for the admin API's discovery and returns the resources
// it lists.
func discovery(t *testing.T, server string) map[string]bool {
	t.Helper()
	url := server + "/apis/admin.ratelimit.sluice.dev/v1alpha1"
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			var list struct {
				Resources []struct{ Name string } `json:"resources"`
			}
			err = json.NewDecoder(resp.Body).Decode(&list)
			_ = resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK {
				served := map[string]bool{}
				for _, r := range list.Resources {
					served[r.Name] = true
				}
				return served
			}
			err = fmt.Errorf("status %d, %v", resp.StatusCode, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// requireServed fails t unless the admin API's discovery lists resource,
// which the commands of this subtest call.
func requireServed(t *testing.T, served map[string]bool, resource string) {
	t.Helper()
	if !served[resource] {
		t.Fatalf("the admin API's discovery does not list %s", resource)
	}
}

func TestPlugin(t *testing.T) {
	s, check, served := start(t)
	// acme: 3 admitted, 2 denied, then banned; beta: 1 admitted.
	if got := check.Decisions(t, "/api/items", "acme", 5); !systest.FirstN(got, 3) {
		t.Fatalf("acme's decisions %v, want 3 admitted then denied", got)
	}
	check.MustAsk(t, "/api/items", "beta")

	t.Run("inspect", func(t *testing.T) {
		var a adminapi.KeyState
		s.json(t, &a, "inspect", "shop/per-client", "beta")
		if a.Namespace != "shop" || a.Policy != "per-client" || a.Key != "beta" || len(a.Limits) != 2 || a.Ban != nil {
			t.Fatalf("inspect beta: %+v", a)
		}
		if l := a.Limits[0]; l.Name != "per-minute" || l.Limit != 3 || l.Remaining != 2 || !l.Allowed || l.Override != nil {
			t.Errorf("inspect beta: per-minute %+v, want 2 of 3 remaining", l)
		}
		table := s.ok(t, "inspect", "shop/per-client", "beta")
		for _, want := range []string{"shop/per-client key beta\n", "LIMIT ", "per-minute", "per-hour", "ban: none\n"} {
			if !strings.Contains(table, want) {
				t.Errorf("inspect's table lacks %q:\n%s", want, table)
			}
		}
		out := s.ok(t, "inspect", "shop/per-client", "beta", "-o", "yaml")
		var y adminapi.KeyState
		if err := yaml.Unmarshal([]byte(out), &y); err != nil || y.Key != "beta" || len(y.Limits) != 2 {
			t.Errorf("inspect -o yaml: %v %+v\n%s", err, y, out)
		}
		s.fails(t, sluicectl.ExitNotFound, "", "inspect", "shop/no-such-policy", "beta")
		s.fails(t, sluicectl.ExitNotFound, "", "inspect", "elsewhere/per-client", "beta")
	})

	t.Run("explain", func(t *testing.T) {
		var a adminapi.Explanation
		s.json(t, &a, "explain", "shop", "--url", "http://example.com/api/items", "--header", systest.ClientHeader+"=acme")
		if a.Decision.Allowed || a.Decision.Policy != "per-client" || len(a.Policies) != 1 || !a.Policies[0].Matched ||
			a.Policies[0].Key == nil || *a.Policies[0].Key != "acme" || a.Policies[0].Ban == nil {
			t.Errorf("explain acme's request: %+v, want denied by per-client, acme banned", a)
		}
		table := s.ok(t, "explain", "shop", "--url", "http://example.com/api/items", "--header", systest.ClientHeader+"=beta")
		if !strings.Contains(table, "decision: allowed") {
			t.Errorf("explain beta's request:\n%s\nwant it allowed", table)
		}
		// Explaining counts nothing.
		var b adminapi.KeyState
		s.json(t, &b, "inspect", "shop/per-client", "beta")
		if b.Limits[0].Remaining != 2 {
			t.Errorf("after explain, beta has %d remaining, want 2 still", b.Limits[0].Remaining)
		}
	})

	t.Run("bans, reset and lift", func(t *testing.T) {
		var bans adminapi.BanList
		s.json(t, &bans, "bans", "shop/per-client")
		if len(bans.Bans) != 1 || bans.Bans[0].Key != "acme" {
			t.Fatalf("bans: %+v, want acme's", bans)
		}
		if table := s.ok(t, "bans", "shop/per-client"); !strings.HasPrefix(table, "KEY ") || !strings.Contains(table, "\nacme ") {
			t.Errorf("bans' table:\n%s", table)
		}

		s.fails(t, sluicectl.ExitNotFound, `limit "nope" is not a limit of policy shop/per-client`, "reset", "shop/per-client", "acme", "--limit", "nope")
		if out := s.ok(t, "reset", "shop/per-client", "acme", "--limit", "per-minute"); out != "reset key acme of shop/per-client: per-minute\n" {
			t.Errorf("reset --limit per-minute printed %q", out)
		}
		var reset adminapi.ResetAnswer
		s.json(t, &reset, "reset", "shop/per-client", "acme")
		if strings.Join(reset.Limits, ",") != "per-minute,per-hour" {
			t.Errorf("reset: %+v, want both limits reset", reset)
		}
		s.json(t, &bans, "bans", "shop/per-client")
		if len(bans.Bans) != 1 {
			t.Errorf("after reset: bans %+v, want acme's still (a reset leaves a ban)", bans)
		}

		if out := s.ok(t, "lift", "shop/per-client", "acme"); out != "lifted the ban of key acme in shop/per-client\n" {
			t.Errorf("lift printed %q", out)
		}
		s.json(t, &bans, "bans", "shop/per-client")
		if len(bans.Bans) != 0 {
			t.Errorf("after lift: bans %+v, want none", bans)
		}
		if out := s.ok(t, "bans", "shop/per-client"); out != "no bans in force under shop/per-client\n" {
			t.Errorf("bans printed %q", out)
		}
		var a adminapi.KeyState
		s.json(t, &a, "inspect", "shop/per-client", "acme")
		if a.Ban != nil || a.Limits[0].Remaining != 3 {
			t.Errorf("acme after reset and lift: %+v, want 3 remaining and no ban", a)
		}
		if !check.MustAsk(t, "/api/items", "acme").Allowed {
			t.Error("acme after reset and lift: denied, want admitted")
		}
	})

	t.Run("top", func(t *testing.T) {
		requireServed(t, served, "ratelimitpolicies/top")
		var top adminapi.TopAnswer
		s.json(t, &top, "top", "shop/per-client")
		if len(top.Denied) == 0 || top.Denied[0].Key != "acme" || top.Denied[0].Count < 2 {
			t.Errorf("top: denied %+v, want acme first with at least 2", top.Denied)
		}
		if table := s.ok(t, "top", "shop/per-client"); !strings.Contains(table, "DENIED ") || !strings.Contains(table, "ADMITTED ") {
			t.Errorf("top's table:\n%s", table)
		}
		s.fails(t, sluicectl.ExitUsage, "--window", "top", "shop/per-client", "--window", "later")
	})

	t.Run("overrides", func(t *testing.T) {
		requireServed(t, served, "ratelimitpolicies/overrides")
		out := s.ok(t, "override", "set", "shop/per-client", "beta", "per-minute=50", "--expires", "1h")
		if !strings.Contains(out, "beta  per-minute=50  Runtime") {
			t.Errorf("override set printed:\n%s", out)
		}
		var a adminapi.KeyState
		s.json(t, &a, "inspect", "shop/per-client", "beta")
		if l := a.Limits[0]; l.Limit != 50 || l.Override == nil || l.Override.Source != "Runtime" || l.Override.PolicyLimit != 3 {
			t.Errorf("inspect beta under its override: per-minute %+v", l)
		}
		var list adminapi.OverrideList
		s.json(t, &list, "override", "list", "shop/per-client")
		if len(list.Overrides) != 1 || list.Overrides[0].Key != "beta" || list.Overrides[0].Limits["per-minute"] != 50 ||
			list.Overrides[0].Expires == nil || list.Overrides[0].SetBy != "local" {
			t.Errorf("override list: %+v", list)
		}
		s.fails(t, sluicectl.ExitNotFound, "per-week", "override", "set", "shop/per-client", "beta", "per-week=5")
		s.fails(t, sluicectl.ExitUsage, "in the past", "override", "set", "shop/per-client", "beta", "per-minute=5", "--expires", "2020-01-01T00:00:00Z")
		s.fails(t, sluicectl.ExitNotFound, "", "override", "list", "shop/no-such-policy")

		if out := s.ok(t, "override", "delete", "shop/per-client", "beta"); out != "deleted the run-time override of key beta in shop/per-client\n" {
			t.Errorf("override delete printed %q", out)
		}
		if out := s.ok(t, "override", "list", "shop/per-client"); out != "no overrides under shop/per-client\n" {
			t.Errorf("override list after delete printed %q", out)
		}
	})

	t.Run("bad usage", func(t *testing.T) {
		s.fails(t, sluicectl.ExitUsage, `unknown command "frobnicate"`, "frobnicate")
		s.fails(t, sluicectl.ExitUsage, "NAMESPACE/POLICY KEY (got 1)", "inspect", "shop/per-client")
		s.fails(t, sluicectl.ExitUsage, "not a positive integer", "override", "set", "shop/per-client", "beta", "per-minute=lots")
		s.fails(t, sluicectl.ExitUsage, "want a positive duration", "override", "set", "shop/per-client", "beta", "per-minute=5", "--expires", "-1h")
	})
}

func TestUnreachable(t *testing.T) {
	s := sluice{bin: manager.Plugin(t), server: fmt.Sprintf("http://127.0.0.1:%d", systest.FreePort(t))}
	s.fails(t, sluicectl.ExitError, "is 'manager local --admin-listen' running there?", "bans", "shop/per-client")
}
