package localmode

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/checkserver"
	"github.com/sluice-dev/sluice/internal/dashboard"
	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/syncbuf"
)

func writePolicy(t *testing.T, dir, file, body string) {
	t.Helper()
	// Write and rename, as editors and ConfigMap updates do.
	tmp := filepath.Join(dir, "."+file+".tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, file)); err != nil {
		t.Fatal(err)
	}
}

func limitPolicy(limit int) string {
	return fmt.Sprintf(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: api
spec:
  key: global
  limits:
  - name: window
    fixedWindow: {limit: %d, window: 1h}
`, limit)
}

func startLocal(t *testing.T, dir string) (*App, string) {
	t.Helper()
	return startLocalWith(t, Config{PoliciesDir: dir})
}

// startLocalWith is startLocal with the settings cfg, served on a free
// loopback port whatever cfg.Listen says.
func startLocalWith(t *testing.T, cfg Config) (*App, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg.PollInterval = 100 * time.Millisecond
	app, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		app.Close()
	})
	return app, "http://" + ln.Addr().String()
}

func status(t *testing.T, base string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/check/default", nil)
	req.Header.Set("X-Original-URL", "http://example.com/")
	req.Header.Set("X-Original-Method", "GET")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// countAllowed sends requests until one is denied and returns how many were allowed.
func countAllowed(t *testing.T, base string) int {
	t.Helper()
	for n := 0; n < 100; n++ {
		if status(t, base) != http.StatusOK {
			return n
		}
	}
	t.Fatal("never denied")
	return 0
}

func TestEditsApplyLiveAndBadVersionsKeepTheLastGood(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "api.yaml", limitPolicy(2))
	app, base := startLocal(t, dir)

	if n := countAllowed(t, base); n != 2 {
		t.Fatalf("limit 2 allowed %d", n)
	}

	// Raising the limit takes effect within 2s: the window's count (2) stays.
	edited := time.Now()
	writePolicy(t, dir, "api.yaml", limitPolicy(5))
	for status(t, base) != http.StatusOK {
		if time.Since(edited) > 2*time.Second {
			t.Fatal("an edited file did not change the limit within 2s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("edit applied after %s", time.Since(edited))
	if n := countAllowed(t, base); n != 2 { // 3 of 5 used now
		t.Fatalf("after raising to 5: %d more allowed, want 2", n)
	}

	// A file that is not YAML is reported; the last good version stays.
	writePolicy(t, dir, "api.yaml", "apiVersion: ratelimit.sluice.dev/v1alpha1\nkind: RateLimitPolicy\nmetadata: {name: api\nspec: [")
	waitFor(t, func() bool { return len(app.Files.FileErrors()) == 1 })
	if fe := app.Files.FileErrors()[0]; !strings.Contains(fe.File, "api.yaml") || fe.Err == nil {
		t.Fatalf("file error %+v", fe)
	}
	if s := status(t, base); s != http.StatusForbidden {
		t.Fatalf("with a broken file the old limit must hold: %d, want 403", s)
	}

	// A policy that does not compile is reported by field; the last good version stays.
	writePolicy(t, dir, "api.yaml", strings.Replace(limitPolicy(100), "window: 1h", "window: 1 hour", 1))
	waitFor(t, func() bool {
		st := app.Files.Statuses()
		return len(app.Files.FileErrors()) == 0 && len(st) == 1 && !st[0].Ready
	})
	st := app.Files.Statuses()[0]
	if !strings.Contains(st.Message, "spec.limits[0].fixedWindow.window") || !strings.Contains(st.Message, "last good version stays in force") {
		t.Fatalf("status message %q", st.Message)
	}
	if s := status(t, base); s != http.StatusForbidden {
		t.Fatalf("with an invalid policy the old limit must hold: %d, want 403", s)
	}

	// Fixed, the new version applies; removed, the limit is gone.
	writePolicy(t, dir, "api.yaml", limitPolicy(100))
	waitFor(t, func() bool { return status(t, base) == http.StatusOK })
	if err := os.Remove(filepath.Join(dir, "api.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(app.Files.Policies().All()) == 0 })
}

func TestUnknownFieldsAreErrors(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "api.yaml", strings.Replace(limitPolicy(1), "key: global", "key: global\n  keyy: typo", 1))
	app, _ := startLocal(t, dir)
	fe := app.Files.FileErrors()
	if len(fe) != 1 || !strings.Contains(fe[0].Err.Error(), "keyy") {
		t.Fatalf("file errors %+v, want one naming the unknown field", fe)
	}
}

func TestSamplesCompile(t *testing.T) {
	app, _ := startLocal(t, filepath.Join("..", "..", "config", "samples"))
	if fe := app.Files.FileErrors(); len(fe) > 0 {
		t.Fatalf("sample files: %+v", fe)
	}
	st := app.Files.Statuses()
	if len(st) < 7 {
		t.Fatalf("%d sample policies, want one per algorithm and more", len(st))
	}
	for _, s := range st {
		if !s.Ready {
			t.Errorf("sample %s/%s: %s", s.Namespace, s.Name, s.Message)
		}
	}
	// overrides-partner-api.yaml: both entries apply.
	list, err := app.Overrides.List(context.Background(), overrides.PolicyID{Namespace: "default", Name: "partner-api"})
	if err != nil || len(list) != 2 || list[0].Source != policy.OverrideDeclared {
		t.Fatalf("sample overrides: %v %+v", err, list)
	}
}

// A RateLimitOverrides file applies its entries, the policy's other keys
// keep its numbers and a run-time override beats it. A version of the
// file with an entry that cannot work applies none of its entries and
// keeps those in force, as the controller's Stalled object does, and the
// log names the field at fault.
func TestOverridesFromFilesAndAtRunTime(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "api.yaml", limitPolicy(2))
	var logs syncbuf.Buffer
	app, base := startLocalWith(t, Config{PoliciesDir: dir, Config: checkserver.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
	if got := countAllowed(t, base); got != 2 {
		t.Fatalf("the policy allowed %d, want 2", got)
	}
	overridesFile := func(globalLimit int, extra string) string {
		return fmt.Sprintf(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitOverrides
metadata:
  name: tenants
spec:
  policyName: api
  overrides:
  - key: global
    limits: [{name: window, limit: %d}]
%s`, globalLimit, extra)
	}
	writePolicy(t, dir, "overrides.yaml", overridesFile(5, ""))
	waitFor(t, func() bool { return status(t, base) == http.StatusOK }) // the 3rd of 5
	if got := countAllowed(t, base); got != 2 {
		t.Fatalf("the declared override allowed %d more, want 2 (5 in all)", got)
	}

	// A new version with a limit the policy does not have: nothing of it
	// applies (global would be 9), the entry in force (5) stays.
	writePolicy(t, dir, "overrides.yaml", overridesFile(9, "  - key: other\n    limits: [{name: nope, limit: 5}]\n"))
	waitFor(t, func() bool { return strings.Contains(logs.String(), "RateLimitOverrides not applied") })
	if !strings.Contains(logs.String(), `field=spec.overrides[1].limits[0].name`) || !strings.Contains(logs.String(), `limit \"nope\" is not a limit of policy default/api`) {
		t.Errorf("the stalled object's field at fault is not logged: %s", logs.String())
	}
	if got := status(t, base); got == http.StatusOK {
		t.Fatalf("after the stalled version: status %d, want a denial (the 5 in force, used up)", got)
	}
	id := overrides.PolicyID{Namespace: "default", Name: "api"}
	if list, err := app.Overrides.List(context.Background(), id); err != nil || len(list) != 1 || list[0].Limits["window"] != 5 {
		t.Fatalf("in force after the stalled version: %+v %v; want global's 5", list, err)
	}

	if _, err := app.Overrides.Set(context.Background(), id, "global", map[string]int64{"window": 8}, nil, "local"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return status(t, base) == http.StatusOK }) // the 6th of 8: run time wins
	if got := countAllowed(t, base); got != 2 {
		t.Fatalf("the run-time override allowed %d more, want 2 (8 in all)", got)
	}
	list, err := app.Overrides.List(context.Background(), id)
	if err != nil || len(list) != 2 || list[0].Source != policy.OverrideRuntime || list[0].SetBy != "local" || list[1].Source != policy.OverrideDeclared {
		t.Fatalf("list %+v %v", list, err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 3s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDashboardEditsApplyToTheCheckEndpoint(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "api.yaml", limitPolicy(2))
	_, base := startLocal(t, dir)

	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}

	if n := countAllowed(t, base); n != 2 {
		t.Fatalf("limit 2 allowed %d", n)
	}
	req, _ := http.NewRequest("POST", base+"/api/dashboard/policies/default/api/limits",
		strings.NewReader(`{"limits":[{"name":"window","params":{"limit":"4"}}]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("edit: %s", resp.Status)
	}
	// In force at once, with no wait for the folder poll: 2 of 4 used.
	if n := countAllowed(t, base); n != 2 {
		t.Fatalf("after raising the limit to 4 from the dashboard: %d more allowed, want 2", n)
	}
}

// The dashboard answers to localhost, IP addresses, the --listen host and
// the names of --dashboard-host; the check routes to any name.
func TestDashboardAnswersToTheNamesItIsServedAs(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "api.yaml", limitPolicy(2))
	_, base := startLocalWith(t, Config{PoliciesDir: dir, Config: checkserver.Config{Listen: "box.lan:8080", DashboardHosts: dashboard.Hosts{"dev.test"}}})
	get := func(path, host string) int {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for host, want := range map[string]int{"localhost:8080": 200, "127.0.0.1:8080": 200, "box.lan:8080": 200, "dev.test": 200, "rebound.example": 421} {
		if code := get("/api/dashboard/state", host); code != want {
			t.Errorf("state as %s: %d, want %d", host, code, want)
		}
	}
	if code := get("/healthz", "rebound.example"); code != 200 {
		t.Errorf("/healthz as rebound.example: %d, want 200", code)
	}
}
