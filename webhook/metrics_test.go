package webhook

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := checktest.New(t, check.Options{Timeout: time.Second, Metrics: check.NewMetrics(reg)},
		compile(t, "shop", "api", "key: global\nlimits: [{name: burst, fixedWindow: {limit: 2, window: 1h}}]"),
		compile(t, "shop", "trial", "mode: Shadow\nkey: global\nlimits: [{name: probe, fixedWindow: {limit: 1, window: 1h}}]"))
	s, err := New(Options{Checker: c, Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	url := serveFast(t, s)
	h := map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/", "X-Forwarded-Host": "h"}
	for i := 0; i < 5; i++ {
		do(t, "GET", url+"/check/shop", h)
	}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(b)
	for _, want := range []string{
		`sluice_decisions_total{limit="burst",namespace="shop",policy="api",result="allowed"} 2`,
		`sluice_decisions_total{limit="burst",namespace="shop",policy="api",result="denied"} 1`,
		`sluice_decisions_total{limit="burst",namespace="shop",policy="api",result="cached_denied"} 2`,
		`sluice_decisions_total{limit="probe",namespace="shop",policy="trial",result="shadow_denied"} 2`,
		`sluice_deny_cache_hits_total 2`,
		`sluice_check_duration_seconds_count 5`,
		`sluice_redis_duration_seconds_count 3`,
		`sluice_breaker_state 0`,
		`sluice_policy_revision 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
