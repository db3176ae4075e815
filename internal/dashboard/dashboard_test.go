package dashboard

import (
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/policyfiles"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
	"github.com/sluice-dev/sluice/webhook"
)

const apiPolicy = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: api
spec:
  key: "{client_ip}"
  limits:
  - name: burst
    tokenBucket: {capacity: 5, refillRate: 1, refillInterval: 10s}
  - name: hour
    fixedWindow: {limit: 100, window: 1h}
`

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// serveLocal assembles what local mode serves: files, checker, check
// endpoint and dashboard, over the policy files given.
func serveLocal(t *testing.T, files map[string]string) (*httptest.Server, *policyfiles.Folder) {
	t.Helper()
	return serveDir(t, writeFiles(t, files))
}

// writeFiles writes policy files into a new folder, dated an hour ago so
// that they apply at once (a file written just now is read again after
// the poll interval, in case its writer is not done).
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	written := time.Now().Add(-time.Hour)
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, written, written); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// serveDir is serveLocal over a folder already laid out.
func serveDir(t *testing.T, dir string) (*httptest.Server, *policyfiles.Folder) {
	t.Helper()
	return serveDirWith(t, dir, Options{})
}

// serveDirWith is serveDir with the dashboard's options o (its Files are
// set here, and its Checker unless o has one).
func serveDirWith(t *testing.T, dir string, o Options) (*httptest.Server, *policyfiles.Folder) {
	t.Helper()
	f, err := policyfiles.NewFolder(dir, 0, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return serveFolder(t, f, o), f
}

// serveFolder serves the check endpoint and the dashboard of o over the
// policies of f (o.Checker: a checker over f when unset, counting in
// o.Tally).
func serveFolder(t *testing.T, f *policyfiles.Folder, o Options) *httptest.Server {
	t.Helper()
	if o.Checker == nil {
		o.Tally = check.NewTally(nil)
		o.Checker = checktest.New(t, check.Options{Source: f, Observer: o.Tally})
	}
	srv, err := webhook.New(webhook.Options{Checker: o.Checker, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	o.Files = f
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	d.Register(srv)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts
}

func getState(t *testing.T, base string) State {
	t.Helper()
	resp, err := http.Get(base + "/api/dashboard/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("state: %s", resp.Status)
	}
	var st State
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func findPolicy(t *testing.T, st State, ns, name string) PolicyView {
	t.Helper()
	for _, p := range st.Policies {
		if p.Namespace == ns && p.Name == name {
			return p
		}
	}
	t.Fatalf("policy %s/%s not in the state: %+v", ns, name, st.Policies)
	return PolicyView{}
}

func param(l LimitView, name string) string {
	for _, p := range l.Params {
		if p.Name == name {
			return p.Value
		}
	}
	return "(none)"
}

// do sends a request with an optional JSON body and returns the status and body.
func do(t *testing.T, method, url, contentType, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1] // the client sends req.Host, not a Host header
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// tryRequest asks POST /v1/check as the page's script does.
func tryRequest(t *testing.T, base string, dryRun bool) webhook.CheckResponse {
	t.Helper()
	body, _ := json.Marshal(webhook.CheckRequest{Namespace: "default",
		Request: webhook.OriginalRequest{Method: "GET", Path: "/", ClientIP: "192.0.2.7"}, DryRun: dryRun})
	code, out := do(t, "POST", base+"/v1/check", "application/json", string(body))
	if code != http.StatusOK {
		t.Fatalf("/v1/check: %d %s", code, out)
	}
	var r webhook.CheckResponse
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestPageAndAssets(t *testing.T) {
	ts, _ := serveLocal(t, map[string]string{"api.yaml": apiPolicy})
	for _, c := range []struct{ path, contentType, contains string }{
		{"/", "text/html", `<script src="/dashboard/app.js"`},
		{"/dashboard/app.js", "javascript", "/v1/check"},
		{"/dashboard/style.css", "text/css", "#chart"},
	} {
		resp, err := http.Get(ts.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), c.contentType) || !strings.Contains(string(b), c.contains) {
			t.Errorf("GET %s: %s %q, body has %q: %v", c.path, resp.Status, resp.Header.Get("Content-Type"), c.contains, strings.Contains(string(b), c.contains))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", c.path, csp)
		}
	}
	// The page is served at / only; other paths are not the page.
	if code, _ := do(t, "GET", ts.URL+"/nothing-here", "", ""); code != http.StatusNotFound {
		t.Errorf("GET /nothing-here: %d, want 404", code)
	}
	// The check endpoint's routes are still there.
	if code, _ := do(t, "GET", ts.URL+"/healthz", "", ""); code != http.StatusOK {
		t.Errorf("GET /healthz: %d", code)
	}
}

func TestAssetsFetchNothingFromOutside(t *testing.T) {
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		text := strings.ReplaceAll(string(b), "http://www.w3.org/2000/svg", "") // a namespace name, not a fetch
		for _, bad := range []string{"http://", "https://", "//cdn", "@import", "innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
			if strings.Contains(text, bad) {
				t.Errorf("%s contains %q", p, bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestStateShowsPoliciesAndLiveCounts(t *testing.T) {
	ts, _ := serveLocal(t, map[string]string{"api.yaml": apiPolicy})
	st := getState(t, ts.URL)
	if st.Mode != "local" || !st.Editable || len(st.Problems) != 0 || !strings.Contains(st.Notice, "in memory") {
		t.Fatalf("state: %+v", st)
	}
	p := findPolicy(t, st, "default", "api")
	if !p.Ready || !p.InForce || !p.Editable || p.File != "api.yaml" || p.Key != "{client_ip}" || p.Mode != "Enforce" || p.Edited {
		t.Fatalf("policy: %+v", p)
	}
	if len(p.Limits) != 2 {
		t.Fatalf("limits: %+v", p.Limits)
	}
	burst, hour := p.Limits[0], p.Limits[1]
	if burst.Name != "burst" || burst.Algorithm != "tokenBucket" || param(burst, "capacity") != "5" ||
		param(burst, "refillRate") != "1" || param(burst, "refillInterval") != "10s" {
		t.Errorf("burst: %+v", burst)
	}
	if hour.Algorithm != "fixedWindow" || param(hour, "limit") != "100" || param(hour, "window") != "1h" {
		t.Errorf("hour: %+v", hour)
	}

	// Real checks are counted; dry runs are not.
	for i := 0; i < 7; i++ {
		tryRequest(t, ts.URL, false)
	}
	tryRequest(t, ts.URL, true)
	counts := map[string]CountView{}
	for _, c := range getState(t, ts.URL).Counts {
		counts[c.Namespace+"/"+c.Policy+"/"+c.Limit] = c
	}
	if c := counts["default/api/burst"]; c.Allowed != 5 || c.Denied != 2 {
		t.Errorf("burst counts: %+v, want 5 allowed, 2 denied", c)
	}
	// The hour window admitted what it evaluated (a denial answered from
	// the cache of denials evaluates no limit) and denied nothing.
	if c := counts["default/api/hour"]; c.Allowed < 5 || c.Denied != 0 {
		t.Errorf("hour counts: %+v, want at least 5 allowed, 0 denied", c)
	}
}

func TestStateReportsProblems(t *testing.T) {
	ts, _ := serveLocal(t, map[string]string{
		"api.yaml":    apiPolicy,
		"broken.yaml": "kind: RateLimitPolicy\nspec: [",
		"bad.yaml":    strings.NewReplacer("name: api", "name: bad", "window: 1h", "window: 1 hour").Replace(apiPolicy),
		"dup.yaml":    apiPolicy, // defines default/api again: api.yaml, read first, is used
	})
	st := getState(t, ts.URL)
	if len(st.Problems) != 2 || !strings.HasPrefix(st.Problems[0], "broken.yaml: ") ||
		st.Problems[1] != "dup.yaml: policy default/api is also defined in api.yaml, whose definition is in force; this one is not applied" {
		t.Errorf("problems: %q", st.Problems)
	}
	// In force from api.yaml, not Ready while it is defined twice.
	if api := findPolicy(t, st, "default", "api"); api.Ready || !api.InForce || api.File != "api.yaml" ||
		!strings.Contains(api.Message, "also defined in dup.yaml") {
		t.Errorf("a policy defined twice shows the version in use: %+v", api)
	}
	bad := findPolicy(t, st, "default", "bad")
	if bad.Ready || bad.InForce || !strings.Contains(bad.Message, "spec.limits[1].fixedWindow.window") {
		t.Errorf("a policy that does not compile: %+v", bad)
	}
}

func edit(t *testing.T, base, policy, body string, header ...string) (int, string) {
	t.Helper()
	return do(t, "POST", base+"/api/dashboard/policies/default/"+policy+"/limits", "application/json", body, header...)
}

func TestEditFromThePage(t *testing.T) {
	ts, files := serveLocal(t, map[string]string{"api.yaml": apiPolicy})

	code, out := edit(t, ts.URL, "api", `{"limits":[{"name":"burst","params":{"capacity":"10","refillInterval":"2s"}}]}`)
	if code != http.StatusOK {
		t.Fatalf("edit: %d %s", code, out)
	}
	var st State
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	p := findPolicy(t, st, "default", "api")
	if !p.Ready || !p.Edited || p.EditedAt == nil || param(p.Limits[0], "capacity") != "10" || param(p.Limits[0], "refillInterval") != "2s" {
		t.Fatalf("after the edit: %+v", p)
	}
	// In force at once: the check endpoint answers with the new capacity.
	if r := tryRequest(t, ts.URL, true); r.Policies[0].Limits[0].Limit != 10 || r.Policies[0].Limits[0].Remaining != 9 {
		t.Fatalf("check after the edit: %+v", r.Policies[0].Limits[0])
	}

	// Bad edits are rejected, naming the field; the last good version stays.
	for _, c := range []struct{ body, want string }{
		{`{"limits":[{"name":"burst","params":{"capacity":"0"}}]}`, "spec.limits[0].tokenBucket.capacity: Invalid value: 0"},
		{`{"limits":[{"name":"burst","params":{"capacity":"ten"}}]}`, `spec.limits[0].tokenBucket.capacity: Invalid value: "ten": must be a whole number`},
		{`{"limits":[{"name":"hour","params":{"window":"1 hour"}}]}`, "spec.limits[1].fixedWindow.window"},
		{`{"limits":[{"name":"burst","params":{"limit":"3"}}]}`, `spec.limits[0].tokenBucket.limit: Unsupported value: "limit"`},
		{`{"limits":[{"name":"day","params":{"limit":"3"}}]}`, `spec.limits: Not found: "day"`},
	} {
		code, out := edit(t, ts.URL, "api", c.body)
		var pr checkhttp.Problem
		_ = json.Unmarshal([]byte(out), &pr)
		if code != http.StatusUnprocessableEntity || !strings.Contains(pr.Detail, c.want) {
			t.Errorf("edit %s: %d %s, want 422 naming %q", c.body, code, out, c.want)
		}
	}
	if got := files.Policies().Get("default", "api").Limits[0].Limit.Capacity; got != 10 {
		t.Fatalf("capacity after rejected edits: %d, want the last good 10", got)
	}
	if p := findPolicy(t, getState(t, ts.URL), "default", "api"); !p.Ready || p.Message != "" || param(p.Limits[0], "capacity") != "10" {
		t.Fatalf("state after rejected edits: %+v", p)
	}

	// Requests that may not edit.
	if code, out := edit(t, ts.URL, "missing", `{"limits":[]}`); code != http.StatusNotFound {
		t.Errorf("unknown policy: %d %s", code, out)
	}
	if code, _ := do(t, "POST", ts.URL+"/api/dashboard/policies/default/api/limits", "text/plain", `{"limits":[]}`); code != http.StatusUnsupportedMediaType {
		t.Errorf("a non-JSON body: %d, want 415", code)
	}
	if code, _ := edit(t, ts.URL, "api", `{"limits":[{"name":"burst","params":{"capacity":"3"}}]}`, "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Errorf("a cross-site edit: %d, want 403", code)
	}
	if code, _ := edit(t, ts.URL, "api", `{"limit":[]}`); code != http.StatusBadRequest {
		t.Errorf("an unknown field: %d, want 400", code)
	}

	// Revert puts the file's version back.
	code, out = do(t, "DELETE", ts.URL+"/api/dashboard/policies/default/api/edit", "application/json", "")
	if code != http.StatusOK {
		t.Fatalf("revert: %d %s", code, out)
	}
	if p := findPolicy(t, getState(t, ts.URL), "default", "api"); p.Edited || param(p.Limits[0], "capacity") != "5" {
		t.Fatalf("after revert: %+v", p)
	}
}

// serveCluster serves the cluster check process's dashboard, over a
// policy table not read yet (no Redis is contacted).
func serveCluster(t *testing.T) *httptest.Server {
	t.Helper()
	f, err := policyfiles.NewFolder(t.TempDir(), 0, quiet)
	if err != nil {
		t.Fatal(err)
	}
	checker := checktest.New(t, check.Options{Source: f})
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = client.Close() })
	reader := policytable.NewReader(policytable.New(client), quiet)
	d, err := New(Options{Checker: checker, Table: reader})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	d.Register(mux)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

func TestClusterDashboardIsReadOnly(t *testing.T) {
	ts := serveCluster(t)
	st := getState(t, ts.URL)
	if st.Mode != "cluster" || st.Editable || !strings.Contains(st.Notice, "kubectl") ||
		len(st.Problems) != 1 || !strings.Contains(st.Problems[0], "not been read") {
		t.Fatalf("state: %+v", st)
	}
	code, out := edit(t, ts.URL, "api", `{"limits":[]}`)
	if code != http.StatusForbidden || !strings.Contains(out, "kubectl") {
		t.Fatalf("edit in the cluster: %d %s, want 403 pointing to kubectl", code, out)
	}
	if code, _ := do(t, "DELETE", ts.URL+"/api/dashboard/policies/default/api/edit", "", ""); code != http.StatusForbidden {
		t.Fatalf("revert in the cluster: %d, want 403", code)
	}
}

func TestNewRejectsBothSources(t *testing.T) {
	f, _ := policyfiles.NewFolder(t.TempDir(), 0, quiet)
	checker := checktest.New(t, check.Options{Source: f})
	if _, err := New(Options{Checker: checker, Files: f, Table: &policytable.Reader{}}); err == nil {
		t.Fatal("Files and Table together must be refused")
	}
	if _, err := New(Options{Checker: checker, Table: &policytable.Reader{}, Admin: http.NotFoundHandler()}); err == nil {
		t.Fatal("the admin API without Files (in a cluster) must be refused")
	}
	if _, err := New(Options{}); err == nil {
		t.Fatal("a missing Checker must be refused")
	}
}

func TestFormatDuration(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{10 * time.Second, "10s"},
		{time.Minute, "1m"},
		{90 * time.Second, "1m30s"},
		{24 * time.Hour, "24h"},
		{1500 * time.Millisecond, "1s500ms"},
		{250 * time.Millisecond, "250ms"},
		{time.Hour + time.Millisecond, "1h1ms"},
		{1500 * time.Microsecond, "1.5ms"},
	} {
		if got := formatDuration(c.d); got != c.want {
			t.Errorf("formatDuration(%s) = %q, want %q", c.d, got, c.want)
		}
	}
}

// The JSON the page gets keeps its field names: the script reads them.
func TestStateJSONNames(t *testing.T) {
	b, err := json.Marshal(State{Policies: []PolicyView{{Charge: "Always", FailureMode: "Closed", DenyStatus: 503, Headers: "IETF",
		OnMissingKey: "Deny", Cost: 2, Lease: []ParamView{{}}, Penalty: []ParamView{{}},
		Limits: []LimitView{{Params: []ParamView{{Duration: true}}}}}}, Counts: []CountView{{}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{`"mode"`, `"editable"`, `"admin"`, `"notice"`, `"revision"`, `"problems"`, `"policies"`, `"inForce"`,
		`"ready"`, `"limits"`, `"algorithm"`, `"params"`, `"duration"`, `"counts"`, `"shadowDenied"`,
		`"charge"`, `"failureMode"`, `"denyStatus"`, `"headers"`, `"onMissingKey"`, `"cost"`, `"lease"`, `"penalty"`} {
		if !bytes.Contains(b, []byte(name)) {
			t.Errorf("state JSON lacks %s: %s", name, b)
		}
	}
}

// A clock-aligned window shows its alignment with its name, and an edit of
// its limit keeps the alignment.
func TestClockAlignedWindowShowsAndKeepsItsAlignment(t *testing.T) {
	ts, files := serveLocal(t, map[string]string{"clock.yaml": `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: clock, namespace: default}
spec:
  limits:
  - name: hour
    fixedWindow: {limit: 100, window: 1h, alignment: Clock}
`})
	p := findPolicy(t, getState(t, ts.URL), "default", "clock")
	if l := p.Limits[0]; l.Algorithm != "fixedWindow (alignment: Clock)" || param(l, "limit") != "100" || param(l, "window") != "1h" {
		t.Fatalf("limit: %+v", l)
	}
	if code, out := edit(t, ts.URL, "clock", `{"limits":[{"name":"hour","params":{"limit":"50"}}]}`); code != http.StatusOK {
		t.Fatalf("edit: %d %s", code, out)
	}
	if got := files.Policies().Get("default", "clock").Limits[0].Limit; got.Algorithm != ratelimit.FixedWindowClock || got.Capacity != 50 {
		t.Errorf("after the edit: %v, want FixedWindowClock with limit 50", got)
	}
}

// everyKind holds a policy of each kind the API has beyond the windows and
// buckets: requests in flight (HTTP, and a descriptor policy naming its
// holder), a penalty box, a calendar quota in a zone, charge Always, mode
// Shadow, a lease, and the response and failure settings.
var everyKind = map[string]string{"inflight.yaml": `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: inflight}
spec:
  key: "{header:X-Tenant}"
  onMissingKey: Deny
  cost: 2
  failureMode: Closed
  response: {denyStatus: 503, headers: IETF}
  limits:
  - name: running
    concurrency: {limit: 4, leaseTimeout: 30s}
  - name: minute
    fixedWindow: {limit: 100, window: 1m}
  penalty: {denials: 3, within: 1m, ban: 5m, maxBan: 1h}
`, "streams.yaml": `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: streams}
spec:
  match:
    domain: edge
    descriptor: [{key: tenant}, {key: request_id}]
  key: "{descriptor:tenant}"
  limits:
  - name: in-flight
    concurrency: {limit: 2, leaseTimeout: 45s, holder: request_id}
`, "tokens.yaml": `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: tokens}
spec:
  mode: Shadow
  charge: Always
  limits:
  - name: day
    calendar: {limit: 1000, period: Day, timeZone: Europe/Berlin}
`, "hot.yaml": `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: hot}
spec:
  lease: {units: 10, ttl: 2s}
  limits:
  - name: second
    tokenBucket: {capacity: 100, refillRate: 100, refillInterval: 1s}
`}

// paramsOf writes params as "name=value ..." in their order.
func paramsOf(params []ParamView) string {
	var b strings.Builder
	for i, p := range params {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(p.Name + "=" + p.Value)
	}
	return b.String()
}

// The state names every number and setting that decides a request: a
// reader of the page sees why a client is denied.
func TestStateShowsEveryKindAndSetting(t *testing.T) {
	ts, _ := serveLocal(t, everyKind)
	st := getState(t, ts.URL)
	if len(st.Problems) != 0 {
		t.Fatalf("problems: %q", st.Problems)
	}

	p := findPolicy(t, st, "default", "inflight")
	if l := p.Limits[0]; l.Algorithm != "concurrency" || paramsOf(l.Params) != "limit=4 leaseTimeout=30s" {
		t.Errorf("concurrency limit: %+v, want limit=4 leaseTimeout=30s", l)
	}
	if got := paramsOf(p.Penalty); got != "denials=3 within=1m ban=5m maxBan=1h" {
		t.Errorf("penalty box: %q, want denials=3 within=1m ban=5m maxBan=1h", got)
	}
	if p.OnMissingKey != "Deny" || p.Cost != 2 || p.FailureMode != "Closed" || p.Charge != "Admitted" ||
		p.DenyStatus != 503 || p.Headers != "IETF" || p.Mode != "Enforce" || p.Lease != nil {
		t.Errorf("inflight's settings: %+v", p)
	}

	s := findPolicy(t, st, "default", "streams")
	if l := s.Limits[0]; l.Algorithm != "concurrency (holder: request_id)" || paramsOf(l.Params) != "limit=2 leaseTimeout=45s" {
		t.Errorf("descriptor concurrency limit: %+v, want its holder named", l)
	}
	if s.Penalty != nil || s.DenyStatus != 0 || s.Headers != "Both" {
		t.Errorf("streams' settings: %+v", s)
	}

	tk := findPolicy(t, st, "default", "tokens")
	if l := tk.Limits[0]; l.Algorithm != "calendar (Day, Europe/Berlin)" || paramsOf(l.Params) != "limit=1000" {
		t.Errorf("calendar limit: %+v", l)
	}
	if tk.Charge != "Always" || tk.Mode != "Shadow" {
		t.Errorf("tokens' charge %q and mode %q, want Always and Shadow", tk.Charge, tk.Mode)
	}

	h := findPolicy(t, st, "default", "hot")
	if got := paramsOf(h.Lease); got != "units=10 ttl=2s" {
		t.Errorf("hot's lease: %q, want units=10 ttl=2s (%s)", got, h.Message)
	}
}

// A concurrency limit's numbers are edited as the others' are.
func TestEditConcurrencyLimit(t *testing.T) {
	ts, files := serveLocal(t, everyKind)
	if code, out := edit(t, ts.URL, "inflight", `{"limits":[{"name":"running","params":{"limit":"6","leaseTimeout":"1m"}}]}`); code != http.StatusOK {
		t.Fatalf("edit: %d %s", code, out)
	}
	got := files.Policies().Get("default", "inflight").Limits[0].Limit
	if got.Algorithm != ratelimit.Concurrency || got.Capacity != 6 || got.Interval != time.Minute {
		t.Errorf("after the edit: %+v, want Concurrency, limit 6, leaseTimeout 1m", got)
	}
	if l := findPolicy(t, getState(t, ts.URL), "default", "inflight").Limits[0]; paramsOf(l.Params) != "limit=6 leaseTimeout=1m" {
		t.Errorf("the page after the edit: %+v", l)
	}
}
