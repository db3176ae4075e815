package dashboard

import (
	"encoding/json"
	"flag"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/checkhttp"
)

// After a DNS rebinding, another site's page talks to the dashboard as its
// own origin: the browser sends that site's name as Host, a matching
// Origin and Sec-Fetch-Site: same-origin. The Host is all that tells it
// apart, so every dashboard route refuses a name it is not served as, and
// nothing changes.
func TestRefusesNamesItIsNotServedAs(t *testing.T) {
	ts, files := serveLocal(t, map[string]string{"api.yaml": apiPolicy})
	u, _ := url.Parse(ts.URL)
	rebound := "some.other.name:" + u.Port()
	browser := []string{"Host", rebound, "Origin", "http://" + rebound, "Sec-Fetch-Site", "same-origin"}
	for _, c := range []struct{ method, path, contentType, body string }{
		{"POST", "/api/dashboard/policies/default/api/limits", "application/json", `{"limits":[{"name":"burst","params":{"capacity":"500"}}]}`},
		{"DELETE", "/api/dashboard/policies/default/api/edit", "application/json", ""},
		{"GET", "/api/dashboard/state", "", ""},
		{"GET", "/", "", ""},
		{"GET", "/dashboard/app.js", "", ""},
	} {
		code, out := do(t, c.method, ts.URL+c.path, c.contentType, c.body, browser...)
		var pr checkhttp.Problem
		_ = json.Unmarshal([]byte(out), &pr)
		if code != http.StatusMisdirectedRequest || pr.Status != code || !strings.Contains(pr.Detail, `"some.other.name"`) ||
			!strings.Contains(pr.Detail, "--dashboard-host=some.other.name") {
			t.Errorf("%s %s as %s: %d %s, want 421 naming the host and the flag that admits it", c.method, c.path, rebound, code, out)
		}
	}
	if got := files.Policies().Get("default", "api").Limits[0].Limit.Capacity; got != 5 {
		t.Fatalf("capacity after a rebound edit: %d, want the file's 5", got)
	}
	// A Host nothing can be read from is no name it is served as either.
	if code, _ := do(t, "GET", ts.URL+"/api/dashboard/state", "", "", "Host", "[x"); code != http.StatusMisdirectedRequest {
		t.Errorf("Host [x: %d, want 421", code)
	}
	// The check routes answer whatever the name: in-cluster callers reach
	// them by Service names.
	if code, out := do(t, "GET", ts.URL+"/healthz", "", "", "Host", "sluice-check.sluice-system.svc"); code != http.StatusOK {
		t.Errorf("/healthz by a Service name: %d %s", code, out)
	}
	body := `{"namespace":"default","request":{"path":"/"},"dryRun":true}`
	if code, out := do(t, "POST", ts.URL+"/v1/check", "application/json", body, "Host", "sluice-check.sluice-system.svc"); code != http.StatusOK {
		t.Errorf("/v1/check by a Service name: %d %s", code, out)
	}
}

// Loopback names and IP addresses cannot be rebound (a rebinding needs a
// name the attacker's DNS answers for), so they are always admitted, with
// any port, in any case, with a trailing dot.
func TestAdmitsLoopbackNamesAndAddresses(t *testing.T) {
	ts, files := serveLocal(t, map[string]string{"api.yaml": apiPolicy})
	for _, host := range []string{"localhost", "localhost:8080", "LocalHost.:1", "127.0.0.1", "127.0.0.1:80", "[::1]", "[::1]:8080", "192.0.2.10:8080", "[2001:db8::1]"} {
		if code, out := do(t, "GET", ts.URL+"/api/dashboard/state", "", "", "Host", host, "Sec-Fetch-Site", "same-origin"); code != http.StatusOK {
			t.Errorf("state as %s: %d %s", host, code, out)
		}
	}
	code, out := edit(t, ts.URL, "api", `{"limits":[{"name":"burst","params":{"capacity":"7"}}]}`, "Host", "localhost:8080", "Origin", "http://localhost:8080", "Sec-Fetch-Site", "same-origin")
	if code != http.StatusOK {
		t.Fatalf("edit as localhost: %d %s", code, out)
	}
	if got := files.Policies().Get("default", "api").Limits[0].Limit.Capacity; got != 7 {
		t.Fatalf("capacity after the edit: %d, want 7", got)
	}
	if code, out := do(t, "DELETE", ts.URL+"/api/dashboard/policies/default/api/edit", "application/json", "", "Host", "[::1]:8080"); code != http.StatusOK {
		t.Fatalf("revert as [::1]: %d %s", code, out)
	}
}

// Every route that changes something wants a JSON body, declared:
// a browser sends a cross-site request without asking first only with a
// form's content types, and this server never grants the preflight that
// application/json needs.
func TestChangesRequireJSON(t *testing.T) {
	ts, files := serveLocal(t, map[string]string{"api.yaml": apiPolicy})
	limits := "/api/dashboard/policies/default/api/limits"
	revert := "/api/dashboard/policies/default/api/edit"
	for _, c := range []struct{ method, path, contentType, body string }{
		{"POST", limits, "text/plain", `{"limits":[{"name":"burst","params":{"capacity":"9"}}]}`},
		{"POST", limits, "text/plain; charset=application/json", `{"limits":[{"name":"burst","params":{"capacity":"9"}}]}`},
		{"POST", limits, "application/jsonx", `{"limits":[{"name":"burst","params":{"capacity":"9"}}]}`},
		{"POST", limits, "application/x-www-form-urlencoded", `limits=9`},
		{"POST", limits, "", `{"limits":[{"name":"burst","params":{"capacity":"9"}}]}`},
		{"DELETE", revert, "", ""},
		{"DELETE", revert, "text/plain", ""},
	} {
		code, out := do(t, c.method, ts.URL+c.path, c.contentType, c.body)
		var pr checkhttp.Problem
		_ = json.Unmarshal([]byte(out), &pr)
		if code != http.StatusUnsupportedMediaType || pr.Status != code || !strings.Contains(pr.Detail, "Content-Type") {
			t.Errorf("%s %s with Content-Type %q: %d %s, want 415 naming Content-Type", c.method, c.path, c.contentType, code, out)
		}
	}
	if got := files.Policies().Get("default", "api").Limits[0].Limit.Capacity; got != 5 {
		t.Fatalf("capacity after refused edits: %d, want the file's 5", got)
	}
	// Parameters are allowed, and the media type is case-insensitive.
	code, out := do(t, "POST", ts.URL+limits, "Application/JSON; charset=utf-8", `{"limits":[{"name":"burst","params":{"capacity":"9"}}]}`)
	if code != http.StatusOK {
		t.Fatalf("edit with a charset: %d %s", code, out)
	}
	if code, out := do(t, "DELETE", ts.URL+revert, "application/json", ""); code != http.StatusOK {
		t.Fatalf("revert: %d %s", code, out)
	}
}

// The listen host and the names of --dashboard-host are admitted too.
func TestAdmitsTheNamesItIsServedAs(t *testing.T) {
	var hosts Hosts
	fs := flag.NewFlagSet("local", flag.ContinueOnError)
	hosts.BindFlag(fs)
	if err := fs.Parse([]string{"--dashboard-host", "Sluice.Example.com.,sluice-check.sluice-system.svc", "--dashboard-host=dev.test"}); err != nil {
		t.Fatal(err)
	}
	if got := hosts.String(); got != "sluice.example.com,sluice-check.sluice-system.svc,dev.test" {
		t.Fatalf("--dashboard-host: %q", got)
	}
	ts, _ := serveDirWith(t, writeFiles(t, map[string]string{"api.yaml": apiPolicy}), Options{Listen: "box.lan:8080", Hosts: hosts})
	for host, want := range map[string]int{
		"sluice.example.com": http.StatusOK, "SLUICE.example.com:443": http.StatusOK, "sluice-check.sluice-system.svc:8080": http.StatusOK,
		"dev.test": http.StatusOK, "box.lan:8080": http.StatusOK, "localhost:8080": http.StatusOK,
		"example.com": http.StatusMisdirectedRequest, "evil.sluice.example.com": http.StatusMisdirectedRequest,
		"sluice-check": http.StatusMisdirectedRequest, "dev.test.evil": http.StatusMisdirectedRequest,
	} {
		if code, out := do(t, "GET", ts.URL+"/api/dashboard/state", "", "", "Host", host); code != want {
			t.Errorf("state as %s: %d %s, want %d", host, code, out, want)
		}
	}
}

func TestHostsFlagRefusesWhatIsNoName(t *testing.T) {
	for _, v := range []string{"", "sluice.example.com:443", "[::1]:80", "a b", "x/y", "sluice.example.com,"} {
		var h Hosts
		if err := h.Set(v); err == nil {
			t.Errorf("--dashboard-host %q: accepted as %q", v, h)
		}
	}
}
