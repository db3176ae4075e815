package observability

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// Every metric the alert rules and the dashboard query is served by a
// running manager (`manager all`: the check endpoint's /metrics and the
// controller's), once a policy is applied and checks allowed and denied:
// a panel or an alert on a renamed metric fails here.
func TestQueriedMetricsExist(t *testing.T) {
	root := kubetest.RepoRoot(t)
	bin := manager.Path(t)
	redis := redistest.Start(t)
	kube := kubetest.Start(t, kubetest.Options{CRDDirs: []string{filepath.Join(root, "config", "crd", "bases")}})
	k := systest.KubeClient(t, kube.Config)

	listen := fmt.Sprintf("127.0.0.1:%d", systest.FreePort(t))
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", systest.FreePort(t))
	proc := systest.Start(t, t.TempDir(), "manager", nil, bin, "all", "--kubeconfig", kube.Kubeconfig,
		"--redis-url", "redis://"+redis.Addr()+"/0", "--listen", listen, "--metrics-bind-address", metricsAddr,
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", systest.FreePort(t)))
	proc.WaitHTTP(t, "http://"+listen+"/readyz", 30*time.Second)

	const ns = "observability"
	systest.CreateNamespaces(t, k, ns)
	if err := k.Create(context.Background(), systest.Policy(ns, "api", "/api", ratelimitv1alpha1.FailureModeOpen, systest.FixedWindow("hour", 2, "1h"))); err != nil {
		t.Fatal(err)
	}
	systest.WaitReady(t, k, ns, "api", 30*time.Second)
	checks := systest.NewCheckClient(listen, ns)
	checks.WaitLimit(t, "/api", 2, 10*time.Second)
	if got := checks.Decisions(t, "/api", "client-a", 3); !systest.FirstN(got, 2) {
		t.Fatalf("decisions %v, want 2 allowed, then denied", got)
	}

	served := map[string]bool{}
	for _, addr := range []string{listen, metricsAddr} {
		for name := range scrape(t, "http://"+addr+"/metrics") {
			served[name] = true
		}
	}
	_, groups := readRules(t)
	var queries []panelQuery
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			queries = append(queries, panelQuery{"alert " + r.Alert + r.Record, r.Expr})
		}
	}
	queries = append(queries, dashboardQueries(t)...)
	for _, q := range queries {
		names := metricNames(q.expr)
		if len(names) == 0 {
			t.Errorf("%s: %q queries no metric", q.panel, q.expr)
		}
		for _, name := range names {
			if !served[name] {
				t.Errorf("%s: %s is not on the manager's /metrics", q.panel, name)
			}
		}
	}
	t.Logf("%d queries of the rules and the dashboard, over %d metrics served", len(queries), len(served))
}

// scrape returns the names of the series on a /metrics page (a
// histogram's _bucket, _sum and _count included).
func scrape(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}
