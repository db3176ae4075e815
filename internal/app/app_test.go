package app

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/checkserver"
	"github.com/sluice-dev/sluice/internal/dashboard"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
)

// The check process serves the dashboard read-only. Nothing here reaches
// Redis: the table reader is not started and no check is made.
func TestCheckServerServesTheReadOnlyDashboard(t *testing.T) {
	parts, err := connectRedis(&redisconn.Config{URL: "redis://127.0.0.1:1/0"}, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer parts.Close()
	srv, err := newCheckServer(CheckConfig{Config: checkserver.Config{Listen: ":8080", DashboardHosts: dashboard.Hosts{"sluice.example.com"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}, parts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.server.Handler)
	defer ts.Close()

	resp, err := http.Get(ts.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "Sluice dashboard") {
		t.Fatalf("GET /: %s", resp.Status)
	}

	resp, err = http.Get(ts.URL + "/api/dashboard/state")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Mode     string `json:"mode"`
		Editable bool   `json:"editable"`
		Notice   string `json:"notice"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Mode != "cluster" || st.Editable || !strings.Contains(st.Notice, "kubectl") {
		t.Fatalf("state: %+v, %v", st, err)
	}

	req, _ := http.NewRequest("POST", ts.URL+"/api/dashboard/policies/default/api/limits", strings.NewReader(`{"limits":[]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("an edit in the cluster: %s, want 403", resp.Status)
	}

	// Served as localhost (kubectl port-forward), an IP address or a name
	// of --dashboard-host (an Ingress); not as the Service's name unless
	// it is listed.
	for host, want := range map[string]int{"localhost:8080": 200, "10.244.0.7:8080": 200, "sluice.example.com": 200,
		"sluice-check.sluice-system.svc:8080": http.StatusMisdirectedRequest} {
		req, _ := http.NewRequest("GET", ts.URL+"/api/dashboard/state", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("state as %s: %s, want %d", host, resp.Status, want)
		}
	}
}
