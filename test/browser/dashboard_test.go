// Package browser drives the dashboard in headless Chromium (Debian's
// chromium package; `make test` installs it) against local mode started in
// the test process.
package browser

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/sluice-dev/sluice/internal/checkserver"
	"github.com/sluice-dev/sluice/internal/localmode"
)

// A per-user token bucket of 5 that refills 1 every 10s, keyed by a header
// so the page has to show a user-supplied value, plus an hourly window.
const policyYAML = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: api
  namespace: default
spec:
  match:
    paths: ["/api/*"]
  key: "user-{header:X-User}"
  limits:
  - name: burst
    tokenBucket: {capacity: 5, refillRate: 1, refillInterval: 10s}
  - name: hour
    fixedWindow: {limit: 100, window: 1h}
`

// reboundName is a name Chromium resolves to 127.0.0.1, which the
// dashboard is not served as.
const reboundName = "rebound.example"

// hostile is the X-User value: markup that must show as text, never as HTML.
const hostile = `<b>alice</b><img src=x onerror="document.title='pwned'">`

func TestDashboard(t *testing.T) {
	chromium := findChromium(t)
	base := startLocal(t, map[string]string{"api.yaml": policyYAML})
	pg := startBrowser(t, chromium)
	ctx, jsErrors, step, waitFor, text := pg.ctx, pg.jsErrors, pg.step, pg.waitFor, pg.text
	start := time.Now()
	const row = `tbody[data-policy="default/api"]`

	// The policy is listed with its limits and Ready.
	step("load the dashboard", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(row)))
	if got := text(row); !strings.Contains(got, "Ready") || !strings.Contains(got, "tokenBucket") ||
		!strings.Contains(got, "capacity 5") || !strings.Contains(got, "user-{header:X-User}") || !strings.Contains(got, "fixedWindow") {
		t.Fatalf("policy row: %q", got)
	}

	// The try form answers in dry run: the policy matched, its key, 4 of 5 left.
	step("fill and submit the try form",
		chromedp.SetValue(chromedp.CSS(`#try-form [name=path]`), "/api/items"),
		chromedp.SetValue(chromedp.CSS(`#try-form [name=host]`), "api.example.com"),
		chromedp.SetValue(chromedp.CSS(`#try-form [name=headers]`), "X-User: "+hostile+"\nAccept: application/json"),
		chromedp.Click(chromedp.CSS(`#try-button`)),
		chromedp.WaitVisible(chromedp.CSS(`#try-result .matched-policy`)))
	if got := text(`#try-result .matched-policy h3`); !strings.Contains(got, "default/api") {
		t.Fatalf("matched policy: %q", got)
	}
	if got := text(`#try-result [data-limit=burst] .remaining`); got != "4 / 5" {
		t.Fatalf("remaining after a dry run: %q, want 4 / 5", got)
	}
	if got := text(`#try-result code.key`); got != "user-"+hostile {
		t.Fatalf("the key must show the header value as text: %q", got)
	}
	injected, err := chromedp.Run(ctx, chromedp.Evaluate[bool](
		`document.querySelectorAll('#try-result img').length > 0 || [...document.querySelectorAll('#try-result b')].some(b => b.textContent === 'alice') || document.title === 'pwned'`))
	if err != nil || injected {
		t.Fatalf("markup in a header value became HTML (err %v)", err)
	}

	// A burst of 8 real checks: 5 allowed, then denials, drawn on the chart.
	step("press burst",
		chromedp.SetValue(chromedp.CSS(`#try-form [name=burst]`), "8"),
		chromedp.Click(chromedp.CSS(`#burst-button`)))
	waitFor("the burst shows its denials", `document.querySelector('#burst-summary').textContent.includes('5 allowed, 3 denied')`)
	waitFor("the chart marks a denial", `document.querySelectorAll('#chart .mark-denied').length === 3 && document.querySelectorAll('#chart .mark-allowed').length === 5`)
	waitFor("the live counts show the decisions", `(() => {
		const cells = document.querySelectorAll('tbody[data-policy="default/api"] tr:first-child td.num');
		return cells.length === 3 && cells[0].textContent === '5' && cells[1].textContent === '3';
	})()`)
	if got := text(`#decision`); !strings.HasPrefix(got, "Denied") {
		t.Fatalf("the last request of the burst: %q, want Denied", got)
	}
	t.Logf("burst: %s", text(`#burst-summary`))

	// Editing from the page: a bad number is refused with the field named,
	// and the old number stays; a good one applies at once.
	step("open the editor", chromedp.Click(chromedp.CSS(row+` button.edit`)),
		chromedp.WaitVisible(chromedp.CSS(`#edit-fields input[name="burst.capacity"]`)))
	step("apply a bad capacity",
		chromedp.SetValue(chromedp.CSS(`#edit-fields input[name="burst.capacity"]`), "0"),
		chromedp.Click(chromedp.CSS(`#edit-save`)))
	waitFor("the bad edit is refused naming the field",
		`document.querySelector('#edit-result').className === 'error' && document.querySelector('#edit-result').textContent.includes('spec.limits[0].tokenBucket.capacity')`)
	if got := text(row + ` [data-param=capacity] b`); got != "5" {
		t.Fatalf("capacity after a refused edit: %q, want 5", got)
	}
	step("apply capacity 10",
		chromedp.SetValue(chromedp.CSS(`#edit-fields input[name="burst.capacity"]`), "10"),
		chromedp.Click(chromedp.CSS(`#edit-save`)))
	waitFor("the edit applies", `document.querySelector('#edit-result').className === 'ok'`)
	waitFor("the policy list shows the new capacity",
		`document.querySelector('tbody[data-policy="default/api"] [data-param=capacity] b').textContent === '10' && document.querySelector('tbody[data-policy="default/api"] .badge.edited') !== null`)
	step("try again", chromedp.Click(chromedp.CSS(`#try-button`)))
	waitFor("the check answers with the new capacity",
		`(document.querySelector('#try-result [data-limit=burst] .remaining') || {textContent: ''}).textContent.endsWith('/ 10')`)
	t.Logf("after the edit: %s", text(`#try-result [data-limit=burst]`))

	// Let the chart draw a little of the watch, then keep a picture.
	time.Sleep(1500 * time.Millisecond)
	pg.screenshot("dashboard.png")
	// Revert: the page declares the change JSON, as the server requires.
	step("revert to the file", chromedp.Click(chromedp.CSS(`#edit-revert`)))
	waitFor("the revert applies", `document.querySelector('#edit-result').className === 'ok' && document.querySelector('#edit-result').textContent.startsWith('Reverted')`)
	waitFor("the policy list shows the file's capacity",
		`document.querySelector('tbody[data-policy="default/api"] [data-param=capacity] b').textContent === '5' && document.querySelector('tbody[data-policy="default/api"] .badge.edited') === null`)
	if errs := jsErrors(); len(errs) > 0 {
		t.Fatalf("JavaScript errors on the page: %q", errs)
	}

	// Opened by a name that resolves here but that the dashboard is not
	// served as (what a DNS rebinding makes of another site's name), the
	// browser gets 421 and no page.
	rebound := strings.Replace(base, "127.0.0.1", reboundName, 1)
	step("open the page by a rebound name", chromedp.Navigate(rebound+"/"))
	if got := text("body"); !strings.Contains(got, "Misdirected Request") || !strings.Contains(got, "--dashboard-host="+reboundName) {
		t.Fatalf("the page by a rebound name: %q, want 421 naming --dashboard-host", got)
	}
	t.Logf("browser steps took %s", time.Since(start).Round(time.Millisecond))
}

// findChromium finds Debian's chromium. Missing, the test fails: `make test`
// installs it, and a skipped browser test would hide a broken dashboard.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("headless Chromium is not installed (Debian package chromium): run `make test`, which installs it through hack/install-deps.sh, or apt-get install chromium")
	return ""
}

// startLocal runs local mode in this process over a temp folder holding
// files (policies by file name), on a free loopback port, and returns its
// base URL.
func startLocal(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	app, err := localmode.New(ctx, localmode.Config{PoliciesDir: dir, Config: checkserver.Config{PollInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
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
	return "http://" + ln.Addr().String()
}

// tab is a browser tab that a test drives; each of its steps fails the
// test with the page's JavaScript errors.
type tab struct {
	t   *testing.T
	ctx context.Context
	// jsErrors reports the page's JavaScript errors (exceptions, console
	// errors, CSP violations).
	jsErrors func() []string
}

// step runs actions.
func (b *tab) step(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v (JavaScript errors: %q)", what, err, b.jsErrors())
	}
}

// waitFor waits until the JavaScript predicate holds.
func (b *tab) waitFor(what, predicate string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](predicate, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		b.t.Fatalf("waiting until %s: %v (JavaScript errors: %q)", what, err, b.jsErrors())
	}
}

// text is the text of the element sel selects.
func (b *tab) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// screenshot takes a picture of the whole page, kept in
// $SLUICE_BROWSER_ARTIFACTS as name when that is set.
func (b *tab) screenshot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	shot := filepath.Join(b.t.TempDir(), name)
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	if dir := os.Getenv("SLUICE_BROWSER_ARTIFACTS"); dir != "" {
		// t.TempDir is removed after the test; this keeps a copy for CI or a person.
		if err := os.MkdirAll(dir, 0o755); err == nil {
			keep := filepath.Join(dir, name)
			if err := os.WriteFile(keep, png, 0o644); err == nil {
				b.t.Logf("screenshot kept at %s", keep)
			}
		}
	}
}

// startBrowser starts headless Chromium with a fresh profile and returns
// its tab.
func startBrowser(t *testing.T, chromium string) *tab {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		// Another site's name resolving to this machine, as after a DNS
		// rebinding.
		chromedp.Flag("host-resolver-rules", "MAP "+reboundName+" 127.0.0.1"),
		chromedp.WindowSize(1280, 1000),
	}
	// One deadline for the whole browser: a hung step fails the test
	// instead of running into go test's timeout.
	deadline, cancelDeadline := context.WithTimeout(context.Background(), 90*time.Second)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(deadline, opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		cancelDeadline()
	})

	var (
		mu     sync.Mutex
		errors []string
	)
	err := chromedp.Listen(ctx, func(ev any) {
		var msg string
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg = "exception: " + e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type == "error" {
				msg = "console.error"
				for _, a := range e.Args {
					msg += " " + string(a.Value)
				}
			}
		case *log.EventEntryAdded:
			// Network entries are the 4xx answers the test provokes on purpose.
			if e.Entry.Level == "error" && e.Entry.Source != "network" {
				msg = fmt.Sprintf("%s: %s", e.Entry.Source, e.Entry.Text)
			}
		}
		if msg != "" {
			mu.Lock()
			errors = append(errors, msg)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	return &tab{t: t, ctx: ctx, jsErrors: func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errors...)
	}}
}
